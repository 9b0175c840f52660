//! What the operator watches beyond the store's counts: the phase, the
//! origin as the gate saw it, bot and proof-of-work shares. Computed once per
//! stats refresh, it feeds both the admin event JSON (the dashboard) and the
//! per-event Prometheus gauges, so the two always show the same figures.

use anteroom_core::phase::{AdminState, Phase, phase};
use anteroom_store::EventStats;
use serde::Serialize;

use super::{AppState, EventRuntime, Snapshot};
use crate::config::Admission;
use crate::locks::lock;

/// The extra fields of an event's `stats` in the admin API. Origin and bot
/// figures are this node's own observations (each node sees its share of
/// the traffic); the counts beside them come from the shared store.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Observed {
    /// `scheduled`, `pre_queue`, `open`, `paused` or `closed`.
    pub phase: String,
    /// The event's cap on active sessions plus outstanding tokens.
    pub max_active: u64,
    /// `true` while this node drains the event (store unreachable).
    pub draining: bool,
    /// p95 time to the origin's response head over the last 10 s, in ms;
    /// `null` when nothing was proxied in that window.
    pub origin_p95_ms: Option<f64>,
    /// Share of proxied responses that were 5xx over the last 10 s.
    pub origin_error_rate: Option<f64>,
    /// Proxied responses in that window.
    pub origin_samples: u64,
    /// Adaptive mode's latency and error targets, when the event has them.
    pub origin_target_p95_ms: Option<f64>,
    pub origin_max_error_rate: Option<f64>,
    /// First contacts (enter without an answer) in the last minute.
    pub arrivals_1m: u64,
    /// Share of them scored medium or high risk.
    pub bot_share_1m: Option<f64>,
    /// Share of them asked for proof-of-work.
    pub pow_share_1m: Option<f64>,
}

/// The snapshot's observations with the phase brought in line with its
/// admin state: pause, resume and close update that at once, the rest waits
/// for the next refresh (within 500 ms), which also settles a reopened
/// event's phase against its schedule.
pub fn current(snap: &Snapshot) -> Observed {
    let mut o = snap.observed.clone();
    let phase = match (snap.admin, o.phase.as_str()) {
        (AdminState::Closed, _) => "closed",
        (AdminState::Paused, "open") => "paused",
        (AdminState::Running, "paused" | "closed") => "open",
        _ => return o,
    };
    phase.clone_into(&mut o.phase);
    o
}

/// The phase as the API spells it.
pub fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Scheduled => "scheduled",
        Phase::PreQueue => "pre_queue",
        Phase::Open => "open",
        Phase::Paused => "paused",
        Phase::Closed => "closed",
    }
}

/// Reads the event's observations now and sets its gauges. `stats` is the
/// store's answer of this refresh (`None` when the store did not answer:
/// the store gauges keep their last values then).
pub fn observe(
    state: &AppState,
    rt: &EventRuntime,
    stats: Option<&EventStats>,
    admin: AdminState,
) -> Observed {
    let now_ms = state.now_ms();
    let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
    let phase = phase(now_ms, rt.config.opens_at_ms, pre_window, admin);
    let origin = lock(&rt.live.admission.origin).summary(now_ms);
    let (target_p95_ms, max_error_rate) = match &rt.config.admission {
        Admission::Adaptive {
            target_p95,
            max_error_rate,
        } => (
            Some(target_p95.as_secs_f64() * 1000.0),
            Some(*max_error_rate),
        ),
        _ => (None, None),
    };
    let (total, risky, challenged) = state.bots.arrival_shares(rt.id(), now_ms);
    let share = |n: u32| (total > 0).then(|| f64::from(n) / f64::from(total));
    let observed = Observed {
        phase: phase_name(phase).to_owned(),
        max_active: rt.config.max_active,
        draining: rt.live.drain.is_draining(),
        origin_p95_ms: origin.p95_ms,
        origin_error_rate: origin.error_rate,
        origin_samples: origin.samples,
        origin_target_p95_ms: target_p95_ms,
        origin_max_error_rate: max_error_rate,
        arrivals_1m: u64::from(total),
        bot_share_1m: share(risky),
        pow_share_1m: share(challenged),
    };
    export(rt, &observed, phase, admin, stats, now_ms);
    observed
}

/// The wait a visitor joining the back of the queue now is told, in
/// seconds: the estimate the queue API gives a waiting visitor (the same
/// feed, with the batch schedule, the slots' turnover and the smoothing),
/// with everyone waiting ahead. `None` while no visitor is told one: before
/// the opening, in a pause, after the close, or before the rate is known.
/// A blend of the raw one- and five-minute admission counts stood here
/// before: eight times the truth ten seconds after an opening, and in
/// batch mode swinging with every batch while visitors were told a steady
/// wait.
pub fn back_of_queue_eta(
    rt: &EventRuntime,
    phase: Phase,
    now_ms: i64,
    waiting: u64,
) -> Option<u64> {
    if phase != Phase::Open {
        return None;
    }
    lock(&rt.live.admission.eta)
        .estimate(now_ms, waiting)
        .map(|e| e.seconds)
}

/// Every gauge a node keeps per event (labelled `event`): the refresher's,
/// [`export`]'s, the drain's and the scheduler's.
const EVENT_GAUGES: &[&str] = &[
    "anteroom_waiting",
    "anteroom_active",
    "anteroom_admitted_total",
    "anteroom_max_active",
    "anteroom_admitting",
    "anteroom_paused",
    "anteroom_closed",
    "anteroom_origin_p95_seconds",
    "anteroom_origin_error_ratio",
    "anteroom_origin_samples",
    "anteroom_origin_target_p95_seconds",
    "anteroom_origin_max_error_ratio",
    "anteroom_arrivals_1m",
    "anteroom_bot_share",
    "anteroom_pow_share",
    "anteroom_outstanding",
    "anteroom_eta_back_seconds",
    "anteroom_draining",
    "anteroom_drain_share",
    "anteroom_admission_no_show_rate",
    "anteroom_admission_window",
];

/// An event this node no longer runs (deleted) reads zero in every gauge
/// it had: the recorder cannot drop a series, and left as they were, a
/// deleted event went on showing its last queue (`anteroom_waiting 3`,
/// `anteroom_admitting 1`) until a restart, which fired the alert on a
/// queue that is not moving for an event that no longer exists.
pub fn forget(id: &anteroom_store::EventId) {
    let event = id.to_string();
    for &name in EVENT_GAUGES {
        metrics::gauge!(name, "event" => event.clone()).set(0.0);
    }
}

fn export(
    rt: &EventRuntime,
    o: &Observed,
    phase: Phase,
    admin: AdminState,
    stats: Option<&EventStats>,
    now_ms: i64,
) {
    let event = rt.id().to_string();
    let gauge = |name: &'static str, value: f64| {
        metrics::gauge!(name, "event" => event.clone()).set(value);
    };
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    gauge("anteroom_max_active", o.max_active as f64);
    gauge("anteroom_admitting", flag(phase.admits()));
    gauge("anteroom_paused", flag(admin == AdminState::Paused));
    gauge("anteroom_closed", flag(admin == AdminState::Closed));
    // An empty window reads as 0 (nothing slow, nothing failing), so an
    // alert on these never fires on an idle origin.
    gauge(
        "anteroom_origin_p95_seconds",
        o.origin_p95_ms.unwrap_or(0.0) / 1000.0,
    );
    gauge(
        "anteroom_origin_error_ratio",
        o.origin_error_rate.unwrap_or(0.0),
    );
    gauge("anteroom_origin_samples", o.origin_samples as f64);
    if let Some(ms) = o.origin_target_p95_ms {
        gauge("anteroom_origin_target_p95_seconds", ms / 1000.0);
    }
    if let Some(r) = o.origin_max_error_rate {
        gauge("anteroom_origin_max_error_ratio", r);
    }
    gauge("anteroom_arrivals_1m", o.arrivals_1m as f64);
    gauge("anteroom_bot_share", o.bot_share_1m.unwrap_or(0.0));
    gauge("anteroom_pow_share", o.pow_share_1m.unwrap_or(0.0));
    if let Some(s) = stats {
        gauge("anteroom_outstanding", s.outstanding as f64);
        // 0 while no visitor is told one.
        let eta = back_of_queue_eta(rt, phase, now_ms, s.waiting);
        gauge("anteroom_eta_back_seconds", eta.map_or(0.0, |e| e as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(admin: AdminState, phase: &str) -> Snapshot {
        Snapshot {
            admin,
            observed: Observed {
                phase: phase.to_owned(),
                ..Observed::default()
            },
            ..Snapshot::default()
        }
    }

    #[test]
    fn phase_follows_an_admin_change_before_the_next_refresh() {
        let phase = |a, p| current(&snap(a, p)).phase;
        assert_eq!(phase(AdminState::Paused, "open"), "paused");
        assert_eq!(phase(AdminState::Running, "paused"), "open");
        assert_eq!(phase(AdminState::Closed, "pre_queue"), "closed");
        assert_eq!(phase(AdminState::Running, "closed"), "open");
        // Before opening, a pause does not make the event look open.
        assert_eq!(phase(AdminState::Paused, "scheduled"), "scheduled");
        assert_eq!(phase(AdminState::Running, "pre_queue"), "pre_queue");
    }

    /// Every gauge set with an `event` label anywhere in the server is one
    /// [`forget`] zeroes, so no deleted event keeps one at its last value.
    #[test]
    fn forget_knows_every_gauge_kept_per_event() {
        fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut all = Vec::new();
        files(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut all,
        );
        let mut per_event = Vec::new();
        for path in all {
            let text = std::fs::read_to_string(&path).unwrap();
            // `gauge!(name, "event" => ..)` calls, over one line or more,
            // and `export`'s own `gauge(name, ..)`.
            for (at, _) in text.match_indices("gauge!(") {
                let call = &text[at..(at + 160).min(text.len())];
                let call = call.split(".set(").next().unwrap_or(call);
                if call.contains("\"event\"") {
                    per_event.extend(names(call));
                }
            }
            if path.ends_with("state/observed.rs") {
                for (at, _) in text.match_indices("    gauge(\n        \"anteroom_") {
                    per_event.extend(names(&text[at..(at + 80).min(text.len())]));
                }
                for (at, _) in text.match_indices("    gauge(\"anteroom_") {
                    per_event.extend(names(&text[at..(at + 80).min(text.len())]));
                }
            }
        }
        per_event.sort();
        per_event.dedup();
        assert!(per_event.len() >= 20, "{per_event:?}");
        // A stored table this node refuses is no event it runs: the
        // watch sets that gauge to zero when the refusal clears (a
        // deletion clears it).
        let missing: Vec<_> = per_event
            .iter()
            .filter(|n| !EVENT_GAUGES.contains(&n.as_str()))
            .filter(|n| *n != "anteroom_stored_event_refused")
            .collect();
        assert!(
            missing.is_empty(),
            "not zeroed when an event goes: {missing:?}"
        );
    }

    /// The `"anteroom_…"` names a piece of source names first.
    fn names(call: &str) -> Option<String> {
        let start = call.find("\"anteroom_")? + 1;
        let len = call[start..].find('"')?;
        Some(call[start..start + len].to_owned())
    }
}
