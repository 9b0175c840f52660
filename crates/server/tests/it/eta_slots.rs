//! The wait estimate of an event whose `max_active` binds (sessions last
//! longer than the admission rate assumes), with real scheduler ticks, the
//! refresh every node runs and the embedded store on a hand-moved clock:
//! visitors are admitted no later than the first estimate they were shown,
//! the estimate is not many times the real wait, and no visitor's estimate
//! rises by more than the buffer while the slots turn over steadily.

use std::collections::VecDeque;

use crate::support::admission::Harness;
use anteroom::app::lock;
use anteroom_core::eta::BUFFER;

/// What the crowd met.
#[derive(Debug)]
struct Honesty {
    shown: usize,
    honest_share: f64,
    median_ratio: f64,
    rises_over_buffer: usize,
    /// Visitors beyond the free slots shown a number before any slot freed.
    early_guesses: usize,
}

/// `visitors` join at once; every 500 ms the scheduler ticks and every
/// waiting visitor reads its estimate (as a poll would). An admitted
/// visitor redeems 1 s after its admission and releases `browse_ms` later.
async fn crowd(event: &str, visitors: usize, slots: u64, browse_ms: i64) -> Honesty {
    let h = Harness::new(event).await;
    let all = h.join_many("v", visitors).await;
    let start = h.now_ms();
    let mut admitted = 0usize;
    let mut admitted_at = vec![None; visitors];
    let mut first: Vec<Option<(i64, u64)>> = vec![None; visitors];
    let mut last: Vec<Option<u64>> = vec![None; visitors];
    let mut redeems: VecDeque<(i64, usize)> = VecDeque::new();
    let mut releases: VecDeque<(i64, usize)> = VecDeque::new();
    let mut first_release: Option<i64> = None;
    let (mut rises, mut early) = (0, 0);
    let mut n = h.tick().await;
    while admitted_at.iter().any(Option::is_none) {
        let now = h.now_ms();
        assert!(now - start < 600_000, "the crowd never drained");
        for (i, at) in admitted_at
            .iter_mut()
            .enumerate()
            .skip(admitted)
            .take(n as usize)
        {
            *at = Some(now);
            redeems.push_back((now + 1_000, i));
        }
        admitted += n as usize;
        while redeems.front().is_some_and(|&(t, _)| t <= now) {
            let (_, i) = redeems.pop_front().unwrap();
            assert!(h.redeem(&all[i]).await, "{} had no token", all[i]);
            releases.push_back((now + browse_ms, i));
        }
        while releases.front().is_some_and(|&(t, _)| t <= now) {
            let (_, i) = releases.pop_front().unwrap();
            h.release(&all[i]).await;
            first_release.get_or_insert(now);
        }
        let stats = h.stats().await;
        let free = slots.saturating_sub(stats.active + stats.outstanding);
        {
            let rt = h.rt();
            let feed = lock(&rt.live.admission.eta);
            for i in admitted..visitors {
                let rank = (i - admitted) as u64;
                let Some(e) = feed.estimate(now, rank) else {
                    continue;
                };
                if first_release.is_none() && rank >= free {
                    early += 1;
                }
                first[i].get_or_insert((now, e.seconds));
                if last[i].is_some_and(|prev| e.seconds as f64 > prev as f64 * BUFFER + 1.0) {
                    rises += 1;
                }
                last[i] = Some(e.seconds);
            }
        }
        n = h.step(500).await;
    }
    let mut honest = 0;
    let mut ratios = Vec::new();
    for (f, a) in first.iter().zip(&admitted_at) {
        if let (Some((at, eta)), Some(a)) = (f, a) {
            let waited = (a - at) as f64 / 1000.0;
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
        median_ratio: ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN),
        rises_over_buffer: rises,
        early_guesses: early,
    }
}

fn check(h: &Honesty) {
    eprintln!("{h:?}");
    assert!(h.shown > 300, "{h:?}");
    assert!(h.honest_share >= 0.95, "{h:?}");
    assert!(h.median_ratio <= 1.5, "{h:?}");
    assert_eq!(h.rises_over_buffer, 0, "{h:?}");
    assert_eq!(h.early_guesses, 0, "{h:?}");
}

/// Continuous mode allows 20/s; 40 slots held ~6 s turn over at ~6.7/s.
#[tokio::test]
async fn continuous_event_limited_by_max_active_is_told_the_truth() {
    let h = crowd(
        r#"max_active = 40
admission = { mode = "continuous", max_per_minute = 1200 }"#,
        400,
        40,
        5_000,
    )
    .await;
    check(&h);
}

/// Batch mode, 10 every 500 ms (20/s), the same slots.
#[tokio::test]
async fn batch_event_limited_by_max_active_is_told_the_truth() {
    let h = crowd(
        r#"max_active = 40
admission = { mode = "batch", batch_size = 10, interval = "500ms" }"#,
        400,
        40,
        5_000,
    )
    .await;
    check(&h);
}

/// Waiters who idle out shorten the estimates of those behind them, and
/// they are counted on this node's clock, as the admissions beside them
/// are. Stamped with the store's clock (30 s ahead here), the count went
/// into a bucket in the feed's future: no estimate saw it, and every
/// admission recorded after it piled into that bucket unseen until this
/// node's clock caught up.
#[tokio::test]
async fn waiters_who_idle_out_are_counted_on_the_nodes_clock() {
    let h = Harness::with_store_ahead(
        r#"max_active = 1
queue_idle_timeout = "10s"
admission = { mode = "continuous", max_per_minute = 60 }"#,
        30_000,
    )
    .await;
    h.join_many("v", 20).await;
    assert_eq!(h.tick().await, 1, "the one slot is handed out");
    // Nobody polls: past the idle timeout the sweep ends every wait.
    for _ in 0..12 {
        h.step(1_000).await;
    }
    assert_eq!(h.stats().await.waiting, 0, "every waiter idled out");
    let churn = lock(&h.rt().live.admission.eta).churn_per_s(h.now_ms());
    assert!(
        churn > 0.0,
        "the waiters who idled out were not counted as of this node's clock"
    );
}

/// Batch mode: the visitor at the front is told when their batch leaves,
/// on the scheduler's grid (the event's anchor, on the store's clock, which
/// runs 4 s ahead of this node's here), and is admitted then, not before;
/// the one behind a full batch is told an interval more. A rate spread
/// each batch over its interval: the front was told 2 s for all of it.
#[tokio::test]
async fn a_batch_visitor_is_told_when_their_batch_leaves() {
    let h = Harness::with_store_ahead(
        r#"max_active = 100
admission = { mode = "batch", batch_size = 5, interval = "70s" }"#,
        4_000,
    )
    .await;
    let all = h.join_many("v", 12).await;
    assert_eq!(h.tick().await, 5, "the first batch leaves at once");
    h.step(7_000).await;
    let (front, next) = {
        let rt = h.rt();
        let feed = lock(&rt.live.admission.eta);
        (
            feed.estimate(h.now_ms(), 0).unwrap(),
            feed.estimate(h.now_ms(), 5).unwrap(),
        )
    };
    assert!(
        (1..=63_000).contains(&front.wait_ms),
        "the next batch is within the interval: {front:?}"
    );
    assert_eq!(front.seconds, (front.wait_ms + 720).div_ceil(1000));
    assert_eq!(next.wait_ms, front.wait_ms + 70_000, "{next:?}");
    // A tick (50 ms) before the time told: nobody; at it: the batch.
    let wait = i64::try_from(front.wait_ms).unwrap();
    assert_eq!(h.step(wait - 50).await, 0, "admitted before the time told");
    assert_eq!(h.step(50).await, 5, "not admitted at the time told");
    assert_eq!(h.admitted(&all).await.len(), 10);
}

/// Two nodes on one store and clock, an event admitting batches of 5
/// every 30 s into 3 slots: its batches owe what the slots cannot take.
async fn two_nodes_on_a_bound_batch() -> (
    Harness,
    std::sync::Arc<anteroom::state::AppState>,
    std::sync::Arc<anteroom::state::EventRuntime>,
) {
    let h = Harness::new(
        r#"max_active = 3
admission = { mode = "batch", batch_size = 5, interval = "30s" }"#,
    )
    .await;
    let other = h.another_node().await;
    let there = other.event(&h.id).unwrap();
    (h, other, there)
}

/// With two nodes, a visitor beyond the free slots is told the same wait
/// through either: what the batch under way still owes, which only the
/// node that began it counts, reaches the other node through the store.
/// Counted on one node only, that node told the next batch's time and the
/// other the slots', and a visitor polling through both saw the estimate
/// swing between the two.
#[tokio::test]
async fn a_batch_is_counted_alike_on_the_node_that_did_not_begin_it() {
    let (h, other, there) = two_nodes_on_a_bound_batch().await;
    let all = h.join_many("v", 40).await;
    let estimates = |rt: &anteroom::state::EventRuntime| {
        let feed = lock(&rt.live.admission.eta);
        (0..8)
            .map(|rank| feed.estimate(h.now_ms(), rank).map(|e| e.wait_ms / 1000))
            .collect::<Vec<_>>()
    };
    let mut redeems: VecDeque<(i64, String)> = VecDeque::new();
    let mut releases: VecDeque<(i64, String)> = VecDeque::new();
    let mut seen = std::collections::HashSet::new();
    let mut told = 0;
    for step in 0..240 {
        h.clock.advance(500);
        h.tick().await;
        if step % 2 == 0 {
            anteroom::scheduler::measure_clock(&other, &there).await;
        }
        anteroom::scheduler::refresh_once(&other, &there).await;
        for m in h.admitted(&all).await {
            if seen.insert(m.clone()) {
                redeems.push_back((h.now_ms() + 1_000, m));
            }
        }
        while redeems.front().is_some_and(|(at, _)| *at <= h.now_ms()) {
            let (_, m) = redeems.pop_front().unwrap();
            assert!(h.redeem(&m).await);
            releases.push_back((h.now_ms() + 8_000, m));
        }
        while releases.front().is_some_and(|(at, _)| *at <= h.now_ms()) {
            let (_, m) = releases.pop_front().unwrap();
            h.release(&m).await;
        }
        let (here, elsewhere) = (estimates(&h.rt()), estimates(&there));
        assert_eq!(
            elsewhere,
            here,
            "{} s in: the other node's estimates (s)",
            step / 2
        );
        told += usize::from(here.iter().any(Option::is_some));
    }
    assert!(told > 200, "estimates were told at {told} of 240 steps");
    // The node that began the batch stops: within 3 s its record lapses,
    // and nobody is told that a batch nobody pays takes them now.
    assert!(h.store.batch_owed(&h.id).await.unwrap().is_some());
    h.clock.advance(3_000);
    assert_eq!(
        h.store.batch_owed(&h.id).await.unwrap(),
        None,
        "kept 3 s after its node stopped"
    );
}

/// The node that began a batch keeps its record alive while it lives,
/// though another node wins every tick meanwhile (many nodes share the
/// ticks): lapsed, the other nodes' estimates fell back to the slots'.
#[tokio::test]
async fn a_batch_record_lives_while_its_node_loses_the_ticks() {
    let (h, other, there) = two_nodes_on_a_bound_batch().await;
    h.join_many("v", 12).await;
    assert_eq!(h.tick().await, 3, "the first batch takes the free slots");
    let record = h.store.batch_owed(&h.id).await.unwrap();
    assert!(record.is_some_and(|(_, owed)| owed == 2), "{record:?}");
    let tick_ms = 50;
    for _ in 0..20 {
        h.clock.advance(500);
        let tick = u64::try_from(h.now_ms() / tick_ms).unwrap();
        // The other node wins the tick; this one tries it after.
        anteroom::scheduler::tick_once(&other, &there, tick, tick_ms)
            .await
            .unwrap();
        anteroom::scheduler::tick_once(&h.state, &h.rt(), tick, tick_ms)
            .await
            .unwrap();
    }
    assert_eq!(
        h.store.batch_owed(&h.id).await.unwrap(),
        record,
        "10 s of lost ticks later"
    );
}
