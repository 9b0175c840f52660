//! When a node decides an event's store is down (drain) or back (leave),
//! from the run of probe results.
//!
//! Drain changes what every visitor sees (new arrivals get `503`), so a busy
//! but alive store must not trigger it. Two kinds of failure are told apart
//! ([`classify`]), by why the store says it is unavailable where that is
//! enough, else by how long the failure took:
//! - a hard failure means the store is not there: drain at once. A refused
//!   or reset connection, a failed embedded disk or a stopped store actor is
//!   hard however long it took to be reported; any other error that comes
//!   back quickly (`CLUSTERDOWN`, `LOADING`) is hard too;
//! - slowness may be load: drain only once the store has failed every probe
//!   for the whole `server.drain_after` window, and at least
//!   [`MIN_SLOW_FAILURES`] of them. A timeout (no answer within the probe's
//!   or the store's own timeout) is slowness however quickly it came, and so
//!   is any other error that took as long as half the probe timeout.
//!
//! Leaving takes [`LEAVE_AFTER`] successes in a row, so a flapping store does
//! not bounce the event in and out of drain on every probe.

use std::time::{Duration, Instant};

use anteroom_store::UnavailableKind;

/// Consecutive successful probes before a draining event leaves drain.
pub const LEAVE_AFTER: u32 = 2;

/// Timed-out probes needed (besides the window) before slowness drains: one
/// late answer is never enough, whatever the window.
pub const MIN_SLOW_FAILURES: u32 = 2;

/// What one probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Answered,
    /// An error reported quickly: the store process or its node is gone.
    Hard,
    /// No answer in time, or an error that took as long: maybe just busy.
    Slow,
}

/// What the drain task should do after a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Enter (or stay in) drain mode.
    Drain,
    /// The store is back for good: leave drain if draining.
    Leave,
    /// Not sure yet: keep the current mode.
    Hold,
}

/// The run of probe results for one event on this node.
#[derive(Debug, Default)]
pub struct Health {
    /// Start of the first failed probe of the current failing run.
    failing_since: Option<Instant>,
    failures: u32,
    successes: u32,
}

impl Health {
    /// Records a probe sent at `started` and finished at `now`; `window` is
    /// `server.drain_after`.
    pub fn observe(
        &mut self,
        probe: Probe,
        started: Instant,
        now: Instant,
        window: Duration,
    ) -> Verdict {
        if probe == Probe::Answered {
            self.failing_since = None;
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            return if self.successes >= LEAVE_AFTER {
                Verdict::Leave
            } else {
                Verdict::Hold
            };
        }
        self.successes = 0;
        self.failures = self.failures.saturating_add(1);
        let since = *self.failing_since.get_or_insert(started);
        let failed_long_enough =
            self.failures >= MIN_SLOW_FAILURES && now.saturating_duration_since(since) >= window;
        if probe == Probe::Hard || failed_long_enough {
            Verdict::Drain
        } else {
            Verdict::Hold
        }
    }
}

/// Classifies a failed probe: by `kind` (why the store said it is
/// unavailable) where that decides it, else by how long it took.
pub fn classify(kind: Option<UnavailableKind>, took: Duration, probe_timeout: Duration) -> Probe {
    match kind {
        // Nothing listens, or the disk or the store's own machinery failed:
        // waiting longer tells nothing more, whatever the failure took.
        Some(UnavailableKind::Refused | UnavailableKind::Disk | UnavailableKind::Stopped) => {
            Probe::Hard
        }
        // Silence may be load: the window rule, even for a timeout that
        // was reported quickly (a store timeout shorter than the probe's).
        Some(UnavailableKind::TimedOut) => Probe::Slow,
        // Cluster routing, a busy server, anything else: by the time it took.
        _ => classify_failure(took, probe_timeout),
    }
}

/// Classifies a failed probe by how long it took: an error that comes back
/// within half the probe timeout was reported by the network or the store
/// (refused, reset, cluster down), not caused by waiting.
pub fn classify_failure(took: Duration, probe_timeout: Duration) -> Probe {
    if took < probe_timeout / 2 {
        Probe::Hard
    } else {
        Probe::Slow
    }
}

/// The probe's own timeout: `store.timeout`, shortened so that the drain
/// window is tiled by at least two probes and ends on a probe boundary (a
/// hang is then detected in `drain_after`, not up to one probe later).
pub fn probe_timeout(store_timeout: Duration, window: Duration) -> Duration {
    let store_ms = store_timeout.as_millis().max(1);
    let probes = window.as_millis().div_ceil(store_ms).max(2);
    window / u32::try_from(probes).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds probes of `took` each, back to back from `t0`.
    fn run(h: &mut Health, t0: Instant, probes: &[(Probe, u64)]) -> Vec<Verdict> {
        let mut t = t0;
        probes
            .iter()
            .map(|&(p, took)| {
                let start = t;
                t += ms(took);
                h.observe(p, start, t, WINDOW)
            })
            .collect()
    }

    #[test]
    fn a_hard_failure_drains_at_once() {
        let mut h = Health::default();
        let v = run(&mut h, Instant::now(), &[(Probe::Hard, 1)]);
        assert_eq!(v, [Verdict::Drain]);
    }

    #[test]
    fn slowness_drains_only_after_the_whole_window() {
        let mut h = Health::default();
        let v = run(
            &mut h,
            Instant::now(),
            &[(Probe::Slow, 500), (Probe::Slow, 499), (Probe::Slow, 1)],
        );
        assert_eq!(v, [Verdict::Hold, Verdict::Hold, Verdict::Drain]);
    }

    #[test]
    fn one_long_timeout_is_not_enough() {
        let mut h = Health::default();
        let v = run(&mut h, Instant::now(), &[(Probe::Slow, 5000)]);
        assert_eq!(v, [Verdict::Hold]);
    }

    #[test]
    fn an_answer_in_between_restarts_the_window() {
        let mut h = Health::default();
        let v = run(
            &mut h,
            Instant::now(),
            &[
                (Probe::Slow, 600),
                (Probe::Answered, 1),
                (Probe::Slow, 600),
                (Probe::Slow, 300),
            ],
        );
        assert_eq!(v, [Verdict::Hold; 4]);
    }

    #[test]
    fn leaving_takes_two_answers_in_a_row() {
        let mut h = Health::default();
        let v = run(
            &mut h,
            Instant::now(),
            &[
                (Probe::Hard, 1),
                (Probe::Answered, 1),
                (Probe::Hard, 1),
                (Probe::Answered, 1),
                (Probe::Answered, 1),
            ],
        );
        assert_eq!(
            v,
            [
                Verdict::Drain,
                Verdict::Hold,
                Verdict::Drain,
                Verdict::Hold,
                Verdict::Leave
            ]
        );
    }

    #[test]
    fn quick_errors_are_hard_slow_ones_are_not() {
        assert_eq!(classify_failure(ms(3), ms(500)), Probe::Hard);
        assert_eq!(classify_failure(ms(250), ms(500)), Probe::Slow);
    }

    /// The kind decides where it says enough; otherwise the time rule.
    #[test]
    fn the_kind_decides_before_the_time_it_took() {
        use UnavailableKind as K;
        let (quick, slow, timeout) = (ms(3), ms(400), ms(500));
        let cases = [
            (Some(K::Refused), quick, Probe::Hard),
            (Some(K::Refused), slow, Probe::Hard),
            (Some(K::Disk), slow, Probe::Hard),
            (Some(K::Stopped), slow, Probe::Hard),
            (Some(K::TimedOut), quick, Probe::Slow),
            (Some(K::TimedOut), slow, Probe::Slow),
            (Some(K::Cluster), quick, Probe::Hard),
            (Some(K::Cluster), slow, Probe::Slow),
            (Some(K::Busy), quick, Probe::Hard),
            (Some(K::Other), slow, Probe::Slow),
            (None, quick, Probe::Hard),
            (None, slow, Probe::Slow),
        ];
        for (kind, took, want) in cases {
            assert_eq!(
                classify(kind, took, timeout),
                want,
                "{kind:?} after {took:?}"
            );
        }
    }

    #[test]
    fn probe_timeout_tiles_the_window_within_the_store_timeout() {
        assert_eq!(probe_timeout(ms(1000), WINDOW), ms(500));
        assert_eq!(probe_timeout(ms(300), WINDOW), ms(250));
        assert_eq!(probe_timeout(ms(10_000), WINDOW), ms(500));
        assert_eq!(probe_timeout(ms(100), ms(2000)), ms(100));
    }
}
