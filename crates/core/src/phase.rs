//! Event phases: where an event stands (scheduled, pre-queue, open, paused, closed), from its config, the operator's state and the clock.
//!
//! ```text
//!            opens_at - pre_window        opens_at
//! ─────────────────┼──────────────────────────┼──────────────────────────▶ now
//!     Scheduled    │        PreQueue          │   Open  (or Paused)
//! ```
//!
//! The operator's [`AdminState`] overrides the clock:
//!
//! * `Closed` wins over everything, in every phase: the event is over.
//! * `Paused` takes effect from the opening on. A pause stops *admissions*, and
//!   nobody is admitted before the opening anyway; during the pre-window the
//!   event stays `PreQueue` so joins keep getting shuffled scores (a pause must
//!   not turn the pre-window into a race to the millisecond), and before it the
//!   countdown stays `Scheduled`. An event paused before it opens is `Paused`
//!   the moment it opens, and keeps every place it took.

use serde::{Deserialize, Serialize};

/// What the operator set through the admin API. Stored per event, so every
/// gateway node sees it and it survives a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    #[default]
    Running,
    Paused,
    Closed,
}

/// Where an event stands at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the pre-window: visitors see a countdown, nobody is queued yet.
    Scheduled,
    /// Inside the pre-window: joins are accepted and get shuffled scores,
    /// nobody is admitted yet.
    PreQueue,
    /// Joins are ordered by arrival and admissions run.
    Open,
    /// Open, but admissions are stopped; visitors keep their place and rank.
    Paused,
    /// The event is over: no joins, no admissions.
    Closed,
}

impl Phase {
    /// Whether a visitor can join the queue now.
    pub fn accepts_joins(self) -> bool {
        matches!(self, Phase::PreQueue | Phase::Open | Phase::Paused)
    }

    /// Whether the admission scheduler may release visitors now.
    pub fn admits(self) -> bool {
        self == Phase::Open
    }
}

/// The phase of an event at `now_ms`.
///
/// `opens_at_ms = None` means the event is open from the start. A negative
/// `pre_window_ms` counts as zero (no pre-window).
pub fn phase(
    now_ms: i64,
    opens_at_ms: Option<i64>,
    pre_window_ms: i64,
    admin: AdminState,
) -> Phase {
    if admin == AdminState::Closed {
        return Phase::Closed;
    }
    if let Some(opens_at) = opens_at_ms
        && now_ms < opens_at
    {
        let pre_queue_from = opens_at.saturating_sub(pre_window_ms.max(0));
        return if now_ms < pre_queue_from {
            Phase::Scheduled
        } else {
            Phase::PreQueue
        };
    }
    match admin {
        AdminState::Paused => Phase::Paused,
        _ => Phase::Open,
    }
}

/// Milliseconds until the event opens, for the countdown; `None` once it is
/// open (or when it has no opening time).
pub fn opens_in_ms(now_ms: i64, opens_at_ms: Option<i64>) -> Option<u64> {
    let opens_at = opens_at_ms?;
    (now_ms < opens_at).then(|| opens_at.abs_diff(now_ms))
}

/// Milliseconds until the pre-window starts and joins are accepted; `None`
/// once joins are possible (or when the event has no opening time).
pub fn pre_queue_opens_in_ms(
    now_ms: i64,
    opens_at_ms: Option<i64>,
    pre_window_ms: i64,
) -> Option<u64> {
    let from = opens_at_ms?.saturating_sub(pre_window_ms.max(0));
    (now_ms < from).then(|| from.abs_diff(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OPENS: i64 = 1_000_000;
    const PRE: i64 = 60_000;

    fn check(now: i64, opens_at: Option<i64>, admin: AdminState, expected: Phase) {
        assert_eq!(
            phase(now, opens_at, PRE, admin),
            expected,
            "now={now} opens_at={opens_at:?} admin={admin:?}"
        );
    }

    #[test]
    fn phases_from_clock_and_admin_state() {
        use AdminState::*;
        check(0, Some(OPENS), Running, Phase::Scheduled);
        check(OPENS - PRE - 1, Some(OPENS), Running, Phase::Scheduled);
        check(OPENS - PRE, Some(OPENS), Running, Phase::PreQueue);
        check(OPENS - 1, Some(OPENS), Running, Phase::PreQueue);
        check(OPENS, Some(OPENS), Running, Phase::Open);
        check(i64::MAX, Some(OPENS), Running, Phase::Open);
        check(i64::MIN, None, Running, Phase::Open);
        // A pause only bites once admissions could run.
        check(0, Some(OPENS), Paused, Phase::Scheduled);
        check(OPENS - 1, Some(OPENS), Paused, Phase::PreQueue);
        check(OPENS, Some(OPENS), Paused, Phase::Paused);
        check(0, None, Paused, Phase::Paused);
        // Closed wins everywhere.
        check(0, Some(OPENS), Closed, Phase::Closed);
        check(OPENS - 1, Some(OPENS), Closed, Phase::Closed);
        check(OPENS, Some(OPENS), Closed, Phase::Closed);
        check(0, None, Closed, Phase::Closed);
    }

    #[test]
    fn negative_pre_window_means_none() {
        assert_eq!(
            phase(OPENS - 1, Some(OPENS), -5, AdminState::Running),
            Phase::Scheduled
        );
        assert_eq!(
            phase(i64::MIN, Some(i64::MIN + 1), i64::MAX, AdminState::Running),
            Phase::PreQueue
        );
    }

    #[test]
    fn countdowns() {
        assert_eq!(opens_in_ms(OPENS - 1500, Some(OPENS)), Some(1500));
        assert_eq!(opens_in_ms(OPENS, Some(OPENS)), None);
        assert_eq!(opens_in_ms(0, None), None);
        assert_eq!(opens_in_ms(i64::MIN, Some(i64::MAX)), Some(u64::MAX));
        assert_eq!(
            pre_queue_opens_in_ms(OPENS - PRE - 10, Some(OPENS), PRE),
            Some(10)
        );
        assert_eq!(pre_queue_opens_in_ms(OPENS - PRE, Some(OPENS), PRE), None);
        assert_eq!(pre_queue_opens_in_ms(0, None, PRE), None);
    }

    #[test]
    fn admin_state_serde_is_lowercase() {
        assert_eq!(
            serde_json::to_string(&AdminState::Paused).unwrap(),
            "\"paused\""
        );
        assert_eq!(
            serde_json::from_str::<AdminState>("\"closed\"").unwrap(),
            AdminState::Closed
        );
        assert_eq!(
            serde_json::to_string(&Phase::PreQueue).unwrap(),
            "\"pre_queue\""
        );
    }

    proptest! {
        /// Running events only move forward through the phases as time passes.
        #[test]
        fn phases_never_go_back(a in any::<i64>(), b in any::<i64>(), opens in any::<i64>(), pre in any::<i64>()) {
            let (early, late) = (a.min(b), a.max(b));
            let rank = |p| match p { Phase::Scheduled => 0, Phase::PreQueue => 1, _ => 2 };
            let run = AdminState::Running;
            prop_assert!(rank(phase(early, Some(opens), pre, run)) <= rank(phase(late, Some(opens), pre, run)));
        }

        #[test]
        fn countdown_is_zero_exactly_when_open(now in any::<i64>(), opens in any::<i64>()) {
            let open = phase(now, Some(opens), 0, AdminState::Running) == Phase::Open;
            prop_assert_eq!(opens_in_ms(now, Some(opens)).is_none(), open);
        }
    }
}
