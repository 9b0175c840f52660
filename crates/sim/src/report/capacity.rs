//! How much of `max_active` a run kept in use while visitors waited, and how
//! long an admission took to reach its visitor, both from the times the
//! visitors recorded (the admission's own time comes from its token).

use super::VisitorRecord;
use super::hist::Hist;

/// The mean of `in use / max_active` over the time someone waited, counted
/// from the first admission (before it nothing can be in use: the event had
/// not opened). A slot is in use from its admission (the token's issue time)
/// until the visitor gave it back (release answered; an abandoning visitor's
/// last page, which undercounts: the server holds that slot until it idles
/// out). A visitor waits from its join's answer until its admission, or, when
/// never admitted, until its last poll answered `WAITING`. `warmup_us` after
/// the first admission is left out (a policy that starts small, such as
/// adaptive mode's slow start, is judged on its steady state).
pub fn capacity_use(
    records: &[VisitorRecord],
    max_active: u64,
    run_end_us: u64,
    warmup_us: u64,
) -> Option<f64> {
    if max_active == 0 {
        return None;
    }
    // (time, Δ waiting, Δ in use)
    let mut changes: Vec<(u64, i64, i64)> = Vec::with_capacity(records.len() * 4);
    let mut first_admission = u64::MAX;
    for r in records {
        let admitted = r.admitted_at.or(r.admitted_seen);
        if let Some((_, joined)) = r.arrival {
            let left = admitted.or(r.last_waiting_sent).unwrap_or(joined);
            if left > joined {
                changes.push((joined, 1, 0));
                changes.push((left, -1, 0));
            }
        }
        if let Some(from) = admitted {
            first_admission = first_admission.min(from);
            let to = r.ended_at.unwrap_or(run_end_us).max(from);
            changes.push((from, 0, 1));
            changes.push((to, 0, -1));
        }
    }
    if first_admission == u64::MAX {
        return None;
    }
    let from = first_admission.saturating_add(warmup_us);
    changes.sort_unstable_by_key(|c| c.0);
    let (mut waiting, mut in_use) = (0i64, 0i64);
    let (mut used, mut span) = (0f64, 0f64);
    let mut last = 0u64;
    for (at, dw, du) in changes {
        if waiting > 0 && at > from.max(last) {
            let dt = (at - from.max(last)) as f64;
            // Outstanding tokens beyond the cap (no-show compensation) count
            // as full, not as more than full.
            used += (in_use.max(0) as f64).min(max_active as f64) * dt;
            span += dt;
        }
        waiting += dw;
        in_use += du;
        last = at;
    }
    (span > 0.0).then(|| used / (span * max_active as f64))
}

/// From each admission (its token's issue time) to the first answer that
/// told its visitor, in µs.
pub fn admission_to_visitor(records: &[VisitorRecord]) -> Hist {
    let mut h = Hist::default();
    for r in records {
        if let (Some(at), Some(seen)) = (r.admitted_at, r.admitted_seen) {
            h.record(seen.saturating_sub(at));
        }
    }
    h
}

/// The mean time a slot was held, over the visitors who gave theirs back
/// (see [`super::Report::slot_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SlotHold {
    pub mean_ms: f64,
    pub notice_mean_ms: f64,
    pub session_mean_ms: f64,
    pub visitors: usize,
}

pub fn slot_hold(records: &[VisitorRecord]) -> Option<SlotHold> {
    let (mut notice, mut session, mut n) = (0u64, 0u64, 0usize);
    for r in records {
        if let (Some(at), Some(seen), Some(ended)) = (r.admitted_at, r.admitted_seen, r.ended_at) {
            notice += seen.saturating_sub(at);
            session += ended.saturating_sub(seen.max(at));
            n += 1;
        }
    }
    let mean = |total: u64| total as f64 / n as f64 / 1000.0;
    (n > 0).then(|| SlotHold {
        mean_ms: mean(notice + session),
        notice_mean_ms: mean(notice),
        session_mean_ms: mean(session),
        visitors: n,
    })
}

/// Admissions a second once the first `max_active` are out: the slots'
/// turnover, which `max_active` / the session length bounds. The first
/// `max_active` admissions fill empty slots at the opening, all at once, so
/// counting them would credit the queue with a rate no origin allowed; from
/// the `max_active`-th admission on, each needs a slot given back. Without a
/// known `max_active` every admission counts.
pub fn drain_rate_per_s(records: &[VisitorRecord], max_active: Option<u64>) -> Option<f64> {
    let mut at: Vec<u64> = records
        .iter()
        .filter_map(|r| r.admitted_at.or(r.admitted_seen))
        .collect();
    at.sort_unstable();
    let skip = max_active.map_or(0, |m| {
        usize::try_from(m).unwrap_or(usize::MAX).saturating_sub(1)
    });
    let steady = at.get(skip..)?;
    let (&first, &last) = (steady.first()?, steady.last()?);
    (last > first).then(|| (steady.len() - 1) as f64 * 1e6 / (last - first) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visitor(
        joined: u64,
        admitted: Option<u64>,
        seen: Option<u64>,
        ended: Option<u64>,
    ) -> VisitorRecord {
        VisitorRecord {
            bot: false,
            pre_open: false,
            arrival: Some((joined, joined)),
            first_eta: None,
            last_waiting_sent: seen.or(Some(joined + 1)),
            admitted_seen: seen,
            admitted_at: admitted,
            admitted_clamped_from: None,
            ended_at: ended,
            redeemed: admitted.is_some(),
            released: ended.is_some(),
            node: 0,
            polls: 1,
            challenges: 0,
        }
    }

    #[test]
    fn a_slot_in_use_the_whole_wait_is_full_use() {
        // max_active 1: one visitor holds the slot 0..100 while another
        // waits 0..100 and then holds it 100..200.
        let r = vec![
            visitor(0, Some(0), Some(10), Some(100)),
            visitor(0, Some(100), Some(150), Some(200)),
        ];
        assert_eq!(capacity_use(&r, 1, 300, 0), Some(1.0));
    }

    #[test]
    fn a_slot_is_held_from_the_admission_to_its_release() {
        // Times in µs: heard of after 10 ms and 30 ms, sessions of 2 s and
        // 2.1 s; a visitor still browsing (no end) is left out.
        let r = vec![
            visitor(0, Some(0), Some(10_000), Some(2_010_000)),
            visitor(0, Some(1_000), Some(31_000), Some(2_131_000)),
            visitor(0, Some(5_000), Some(6_000), None),
        ];
        let h = slot_hold(&r).unwrap();
        assert_eq!(h.visitors, 2);
        assert!((h.notice_mean_ms - 20.0).abs() < 1e-9, "{h:?}");
        assert!((h.session_mean_ms - 2_050.0).abs() < 1e-9, "{h:?}");
        assert!((h.mean_ms - 2_070.0).abs() < 1e-9, "{h:?}");
        assert_eq!(slot_hold(&r[2..]), None);
    }

    #[test]
    fn the_warmup_is_left_out() {
        // Idle 0..50 (slot given back at 50, refilled at 100), full after.
        let r = vec![
            visitor(0, Some(0), Some(10), Some(50)),
            visitor(0, Some(100), Some(120), Some(400)),
            visitor(0, Some(400), Some(420), Some(500)),
        ];
        let all = capacity_use(&r, 1, 600, 0).unwrap();
        assert!((all - 350.0 / 400.0).abs() < 1e-9, "{all}");
        assert_eq!(capacity_use(&r, 1, 600, 100), Some(1.0));
    }

    #[test]
    fn a_slot_left_idle_while_someone_waits_counts_against_use() {
        // The slot is given back at 50 and refilled at 100: half the wait idle.
        let r = vec![
            visitor(0, Some(0), Some(10), Some(50)),
            visitor(0, Some(100), Some(120), Some(200)),
        ];
        assert_eq!(capacity_use(&r, 1, 300, 0), Some(0.5));
        // Two slots, one used: half.
        let r = vec![
            visitor(0, Some(0), Some(1), Some(100)),
            visitor(0, Some(100), Some(101), Some(150)),
        ];
        assert_eq!(capacity_use(&r, 2, 300, 0), Some(0.5));
    }

    #[test]
    fn nothing_admitted_or_nobody_waiting_gives_no_figure() {
        let r = vec![visitor(0, None, None, None)];
        assert_eq!(capacity_use(&r, 10, 100, 0), None);
        // Admitted at once: nobody ever waited after the first admission.
        let r = vec![visitor(5, Some(5), Some(5), Some(10))];
        assert_eq!(capacity_use(&r, 10, 100, 0), None);
    }

    #[test]
    fn the_lag_runs_from_the_token_to_the_answer_that_carried_it() {
        let r = vec![
            visitor(0, Some(100), Some(1_100), Some(2_000)),
            visitor(0, Some(100), Some(300), Some(2_000)),
            visitor(0, None, None, None),
        ];
        let h = admission_to_visitor(&r);
        assert_eq!(h.count(), 2);
        assert!(h.max().unwrap() >= 1_000);
    }

    #[test]
    fn the_drain_rate_is_the_turnover_after_the_opening_fill() {
        // max_active 2: two admitted at 0, then one every 500 ms: 2 a second.
        let mut r = vec![
            visitor(0, Some(0), Some(1), Some(1_000_000)),
            visitor(0, Some(0), Some(1), Some(1_000_000)),
        ];
        for k in 1..=10u64 {
            r.push(visitor(0, Some(k * 500_000), Some(k * 500_000 + 1), None));
        }
        let rate = drain_rate_per_s(&r, Some(2)).unwrap();
        // From the 2nd admission (0) to the 12th (5 s): 10 admissions in 5 s.
        assert!((rate - 2.0).abs() < 1e-9, "{rate}");
        // Counting the opening fill as turnover overstates it.
        assert!(drain_rate_per_s(&r, None).unwrap() > rate);
        assert_eq!(drain_rate_per_s(&r[..1], Some(2)), None);
        assert_eq!(drain_rate_per_s(&[], None), None);
    }
}
