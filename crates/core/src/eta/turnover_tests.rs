//! The slots' turnover and the queue rate, alone and inside a simulated
//! flash crowd (slots, a policy, visitors polling as told).

use std::collections::VecDeque;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::eta::{BUFFER, first_poll_ms, poll_after_ms};

#[test]
fn queue_rate_is_the_lower_of_policy_and_turnover() {
    // 500 slots held 5 s: 100/s; a policy of 250/s is not what binds.
    assert_eq!(queue_rate(Some(250.0), 500, Some(5_000)), Some(100.0));
    // A policy of 20/s is.
    assert_eq!(queue_rate(Some(20.0), 500, Some(5_000)), Some(20.0));
    // No policy rate (capacity mode): the turnover alone.
    assert_eq!(queue_rate(None, 50, Some(10_000)), Some(5.0));
    // Unknown holding time: the slots may bind, so no rate.
    assert_eq!(queue_rate(Some(20.0), 500, None), None);
    assert_eq!(queue_rate(Some(20.0), 0, Some(5_000)), None);
    // A holding time under a second counts as a second.
    assert_eq!(queue_rate(Some(1e9), 10, Some(1)), Some(10.0));
    assert_eq!(queue_rate(Some(f64::NAN), 10, Some(1_000)), Some(10.0));
}

#[test]
fn free_slots_cover_the_front_only() {
    // 10 / 10 × 1.2 + 0.6 s (the poll that sees it) → 2 s.
    assert_eq!(
        within_free_slots(9, Some(10.0), 10).map(|e| e.seconds),
        Some(2)
    );
    assert_eq!(within_free_slots(10, Some(10.0), 10), None);
    assert_eq!(within_free_slots(0, None, 10), None);
    assert_eq!(within_free_slots(0, Some(10.0), 0), None);
}

/// The poll basis while no estimate exists is a lower bound of the turn:
/// 10 free slots, then 2 × 10/s after a 6 s burst of 120.
#[test]
fn earliest_turn_is_a_lower_bound() {
    assert_eq!(earliest_turn(5, Some(10.0), 10).map(|e| e.seconds), Some(0));
    assert_eq!(
        earliest_turn(129, Some(10.0), 10).map(|e| e.seconds),
        Some(0)
    );
    // 1010 ahead-or-self, 10 free, 120 burst: 880 at 20/s = 44 s, × 1.2.
    assert_eq!(
        earliest_turn(1009, Some(10.0), 10).map(|e| e.seconds),
        Some(53)
    );
    assert_eq!(earliest_turn(1009, None, 10), None);
    let e = earliest_turn(u64::MAX, Some(1e-300), 0).unwrap();
    assert_eq!(e.seconds, u64::MAX);
}

/// 100 slots filled at once, every session held 8 s, refilled as they free:
/// the holding time is unknown until three quarters of the first generation
/// freed, then 8 s.
#[test]
fn holding_time_of_a_burst() {
    let mut t = Turnover::new();
    t.record(0, 0, 0);
    assert!(t.watched_from_start());
    t.record(500, 100, 100);
    assert_eq!(t.holding_ms(), None);
    assert_eq!(t.occupied(), 100);
    // At 8.5 s half the first generation frees (and is refilled).
    t.record(8_500, 150, 100);
    assert_eq!(t.holding_ms(), None);
    // Then three quarters: the mean over the last 75 freed (25 at 8.5 s,
    // 50 at 9 s; all admitted at 0.5 s), at 32 evenly spaced points.
    t.record(9_000, 200, 100);
    assert_eq!(t.holding_ms(), Some(8_343));
    // The refills free 8 s after they were admitted.
    t.record(16_500, 250, 100);
    t.record(17_000, 300, 100);
    assert_eq!(t.holding_ms(), Some(8_000));
}

/// Started mid-event: admissions before the first snapshot have no known
/// time, so the holding time waits for slots admitted under watch.
#[test]
fn holding_time_after_a_restart_waits_for_watched_slots() {
    let mut t = Turnover::new();
    t.record(0, 1_000, 100);
    assert!(!t.watched_from_start());
    // The 100 freed by 2 s were admitted before watching.
    t.record(2_000, 1_100, 100);
    assert_eq!(t.holding_ms(), None);
    // Those admitted at 2 s free at 4 s.
    t.record(4_000, 1_200, 100);
    assert_eq!(t.holding_ms(), Some(2_000));
}

/// Slots that stop freeing push the holding time up, by the age of the
/// next slot due to free over STALL_FACTOR.
#[test]
fn a_stall_lengthens_the_holding_time() {
    let mut t = Turnover::new();
    t.record(0, 0, 0);
    t.record(1_000, 10, 10);
    t.record(3_000, 20, 10);
    assert_eq!(t.holding_ms(), Some(2_000));
    // Nobody frees from 3 s on (a snapshot reading fewer freed is
    // ignored); the slot admitted at 3 s is 30 s old at 33 s.
    t.record(33_000, 20, 20);
    assert_eq!(t.holding_ms(), Some(20_000));
    // Frees resume: the long holdings (31 s) are in the generation's mean.
    t.record(34_000, 30, 10);
    assert!(t.holding_ms().unwrap() >= 15_000, "{:?}", t.holding_ms());
}

#[test]
fn turnover_survives_resets_and_clock_steps() {
    let mut t = Turnover::new();
    t.record(10_000, 50, 60);
    t.record(5_000, 40, 0);
    assert_eq!(t.occupied(), 0);
    t.record(i64::MIN, u64::MAX, u64::MAX);
    t.record(i64::MAX, u64::MAX, 0);
    let _ = t.holding_ms();
    let mut t = Turnover::new();
    for i in 0..(MAX_POINTS as u64 * 3) {
        t.record(i as i64 * 500, i * 10, 5);
    }
    assert!(t.admitted.len() <= MAX_POINTS && t.freed.len() <= MAX_POINTS);
    assert_eq!(t.holding_ms(), Some(MIN_HOLD_MS));
}

/// How the simulated event admits.
#[derive(Debug, Clone, Copy)]
enum SimMode {
    /// `size` every `interval_ms`; what a batch could not place waits for
    /// free slots until the next batch.
    Batch { size: u64, interval_ms: i64 },
    /// A token bucket of `per_s`, holding six seconds' worth.
    Continuous { per_s: f64 },
}

impl SimMode {
    fn rate(self) -> f64 {
        match self {
            SimMode::Batch { size, interval_ms } => size as f64 * 1000.0 / interval_ms as f64,
            SimMode::Continuous { per_s } => per_s,
        }
    }
}

/// What a crowd met, as the simulator's judge reads it.
#[derive(Debug)]
struct Honesty {
    shown: usize,
    honest_share: f64,
    median_ratio: f64,
    /// Consecutive estimates of one visitor where the later one exceeded
    /// the earlier × BUFFER by more than a second of rounding.
    rises_over_buffer: usize,
}

/// A burst of `visitors` against `slots` slots, each visitor browsing
/// `browse_ms` to `browse_ms × 1.3` once it saw its admission, polling
/// as `poll_after_ms` says (first poll within 3 s), estimates made from the
/// turnover exactly as the server's feed makes them.
fn crowd(seed: u64, visitors: usize, slots: u64, mode: SimMode, browse_ms: i64) -> Honesty {
    const STEP_MS: i64 = 100;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut turnover = Turnover::new();
    turnover.record(0, 0, 0);
    // Per visitor: next poll, first estimate (at, seconds), last estimate,
    // when it saw its admission. FIFO: visitor i is admitted i-th.
    // As the enter call answers: spread over 3 s, unless the visitor's
    // turn comes sooner (the free slots cover them).
    let mut next_poll: Vec<i64> = (0..visitors)
        .map(|i| {
            let e = within_free_slots(i as u64, Some(mode.rate()), slots);
            let told = poll_after_ms(i as u64, e, rng.random::<f64>());
            first_poll_ms(rng.random::<f64>(), told) as i64
        })
        .collect();
    let mut first: Vec<Option<(i64, u64)>> = vec![None; visitors];
    let mut last: Vec<Option<u64>> = vec![None; visitors];
    let mut seen: Vec<Option<i64>> = vec![None; visitors];
    let mut admitted = 0usize;
    // Slots: (freed at) of sessions browsing; tokens not yet seen hold a
    // slot too, counted in `outstanding`.
    let mut sessions: VecDeque<i64> = VecDeque::new();
    let mut outstanding = 0u64;
    let mut budget = mode.rate() * 6.0;
    let mut owed = 0u64;
    let mut rises = 0usize;
    let mut t = 0i64;
    while seen.iter().any(Option::is_none) {
        t += STEP_MS;
        assert!(t < 5_000_000, "the simulated crowd never drained");
        sessions.retain(|&end| end > t);
        let occupied = sessions.len() as u64 + outstanding;
        let free = slots.saturating_sub(occupied);
        let want = match mode {
            SimMode::Batch { size, interval_ms } => {
                if t % interval_ms == 0 {
                    owed = size;
                }
                owed
            }
            SimMode::Continuous { per_s } => {
                budget = (budget + per_s * STEP_MS as f64 / 1000.0).min(per_s * 6.0);
                budget.floor() as u64
            }
        };
        let n = want.min(free).min((visitors - admitted) as u64);
        admitted += n as usize;
        outstanding += n;
        // As the scheduler reports its admissions to the feed.
        turnover.note_admitted(t, n);
        match mode {
            SimMode::Batch { .. } => owed -= n,
            SimMode::Continuous { .. } => budget -= n as f64,
        }
        if t % 500 == 0 {
            let occupied = sessions.len() as u64 + outstanding;
            turnover.record(t, admitted as u64, occupied);
        }
        let rate = queue_rate(Some(mode.rate()), slots, turnover.holding_ms());
        for i in 0..visitors {
            if seen[i].is_some() || next_poll[i] > t {
                continue;
            }
            if i < admitted {
                seen[i] = Some(t);
                outstanding -= 1;
                sessions.push_back(t + browse_ms + rng.random_range(0..=browse_ms * 3 / 10));
                continue;
            }
            let rank = (i - admitted) as u64;
            let e = match rate {
                Some(_) => estimate_in_slots(
                    rank,
                    Some(mode.rate()),
                    0.0,
                    turnover.slot_wait_ms(t, rank, slots),
                ),
                None => within_free_slots(
                    rank,
                    Some(mode.rate()),
                    slots.saturating_sub(turnover.occupied()),
                ),
            };
            if let Some(e) = e {
                first[i].get_or_insert((t, e.seconds));
                if let Some(prev) = last[i]
                    && e.seconds as f64 > prev as f64 * BUFFER + 1.0
                {
                    rises += 1;
                }
                last[i] = Some(e.seconds);
            }
            let jitter = rng.random::<f64>();
            let basis = e.or_else(|| {
                earliest_turn(
                    rank,
                    Some(mode.rate()),
                    slots.saturating_sub(turnover.occupied()),
                )
            });
            next_poll[i] = t + poll_after_ms(rank, basis, jitter) as i64;
        }
    }
    let mut honest = 0;
    let mut ratios = Vec::new();
    for (f, s) in first.iter().zip(&seen) {
        if let (Some((at, eta)), Some(s)) = (f, s) {
            let waited = (s - at) as f64 / 1000.0;
            if waited <= *eta as f64 {
                honest += 1;
            }
            if waited > 0.0 {
                ratios.push(*eta as f64 / waited);
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let shown = first.iter().filter(|f| f.is_some()).count();
    Honesty {
        shown,
        honest_share: honest as f64 / shown.max(1) as f64,
        median_ratio: ratios.get(ratios.len() / 2).copied().unwrap_or(1.0),
        rises_over_buffer: rises,
    }
}

fn check(h: &Honesty, what: &str) {
    assert!(h.shown > 0, "{what}: nobody shown an estimate: {h:?}");
    assert!(h.honest_share >= 0.95, "{what}: {h:?}");
    assert!(h.median_ratio <= 1.5, "{what}: {h:?}");
    assert_eq!(h.rises_over_buffer, 0, "{what}: {h:?}");
}

/// The cases the benchmarks run, scaled down: sessions longer than the
/// rate assumes (max_active binds) and shorter (the policy binds), batch
/// and continuous.
#[test]
fn simulated_crowds_are_told_the_truth() {
    let batch = SimMode::Batch {
        size: 10,
        interval_ms: 500,
    };
    let continuous = SimMode::Continuous { per_s: 20.0 };
    for (mode, name) in [(batch, "batch"), (continuous, "continuous")] {
        // 100 slots held ~5-7 s: ~16/s, below the policy's 20/s.
        check(
            &crowd(1, 2_000, 100, mode, 5_000),
            &format!("{name}, slots bind"),
        );
        // Held ~1-1.6 s (plus the poll that sees the admission): the policy binds.
        check(
            &crowd(2, 2_000, 100, mode, 1_000),
            &format!("{name}, policy binds"),
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Whatever binds, a simulated burst of at least ten generations of
    /// slots and 2,000 visitors (the smallest burst the targets name) is
    /// told the truth: ≥ 95 % admitted by their first estimate, first
    /// estimates at most 1.5× the wait at the median, and no visitor's
    /// estimate rising by more than the buffer. (In a smaller crowd drained
    /// within seconds the poll allowance, SEEN_WITHIN_MS, is most of every
    /// estimate, and the median can pass 1.5: 1,442 visitors over 103 slots
    /// drained in about 40 s gave 1.53.)
    #[test]
    fn any_burst_is_told_the_truth(
        seed in any::<u64>(),
        generations in 10usize..20,
        slots in 50u64..200,
        per_s in 5.0f64..40.0,
        batch in any::<bool>(),
        browse_ms in 1_000i64..15_000,
    ) {
        let mode = if batch {
            SimMode::Batch { size: (per_s / 2.0).ceil() as u64, interval_ms: 500 }
        } else {
            SimMode::Continuous { per_s }
        };
        // At least two minutes of draining at the policy's rate: a crowd
        // gone sooner is the regime the comment above excepts (2,000
        // visitors at 38 admissions a second drained in 52 s and gave
        // 1.504; 2,311 at 38.5 a second, a minute's worth, gave 1.533).
        let visitors = (generations * slots as usize)
            .max(2_000)
            .max((per_s * 120.0).ceil() as usize);
        let h = crowd(seed, visitors, slots, mode, browse_ms);
        prop_assert!(h.honest_share >= 0.95, "{:?} {:?}", mode, h);
        prop_assert!(h.median_ratio <= 1.5, "{:?} {:?}", mode, h);
        prop_assert_eq!(h.rises_over_buffer, 0, "{:?} {:?}", mode, h);
    }
}

/// The first snapshot comes after the first admissions, nothing freed yet:
/// the event is starting, so its slots are watched from the start (dated at
/// the scheduler's report) and the holding time waits for them.
#[test]
fn first_snapshot_after_the_first_admissions_is_the_start() {
    let mut t = Turnover::new();
    t.note_admitted(1_000, 40);
    t.record(1_200, 40, 40);
    assert!(t.watched_from_start());
    assert_eq!(t.holding_ms(), None);
    t.record(7_000, 80, 40);
    assert_eq!(t.holding_ms(), Some(6_000));
}
