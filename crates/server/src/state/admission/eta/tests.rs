use super::*;

fn stats(admitted_total: u64) -> EventStats {
    EventStats {
        admitted_total,
        ..EventStats::default()
    }
}

/// Batch admission (50 every 5 s, observed every 500 ms): once the rate is
/// learnt, the estimate of a visitor who keeps their rank never goes up.
#[test]
fn steady_batches_never_raise_a_visitors_estimate() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    let mut t = 0;
    let mut last: Option<u64> = None;
    while t < 600_000 {
        if t % 5_000 == 0 {
            total += 50;
        }
        feed.observe(t, &stats(total));
        if t >= 120_000 {
            // A visitor at a fixed rank between two batches.
            let e = feed.estimate(t, 500).unwrap().seconds;
            if t % 5_000 != 0
                && let Some(prev) = last
            {
                assert!(e <= prev, "estimate rose from {prev} to {e} at {t} ms");
            }
            last = Some(e);
        }
        t += 500;
    }
    // 10 visitors per second: 501 ahead-or-self take ~50 s, buffered ~60 s.
    let rate = feed.rate().unwrap();
    assert!((9.0..=10.5).contains(&rate), "rate {rate}");
}

#[test]
fn falling_rate_is_followed_slowly_and_rising_fast() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    for s in 0..300 {
        total += 10;
        feed.observe(s * 1000, &stats(total));
    }
    let before = feed.rate().unwrap();
    // Admissions stop for a minute: the raw blended rate falls to 2.4/s;
    // the published one follows, but over tens of seconds, not at once.
    for s in 300..310 {
        feed.observe(s * 1000, &stats(total));
    }
    let early = feed.rate().unwrap();
    assert!(early > before * 0.9, "{before} -> {early} after 10 s");
    for s in 310..360 {
        feed.observe(s * 1000, &stats(total));
    }
    let after = feed.rate().unwrap();
    assert!(
        after < before * 0.7 && after > 3.0,
        "{before} -> {after} after 60 s"
    );
    // Admissions resume at 10/s: the rate is back up within seconds.
    for s in 360..420 {
        total += 10;
        feed.observe(s * 1000, &stats(total));
    }
    assert!(feed.rate().unwrap() > 8.0, "{}", feed.rate().unwrap());
}

#[test]
fn no_rate_before_admissions_and_reset_total_is_safe() {
    let mut feed = EtaFeed::default();
    feed.observe(0, &stats(100));
    assert_eq!(feed.estimate(0, 10), None);
    feed.observe(1000, &stats(5));
    assert_eq!(feed.estimate(1000, 10), None);
}

fn stats_full(admitted_total: u64, redeemed_total: u64, active: u64) -> EventStats {
    EventStats {
        admitted_total,
        redeemed_total,
        active,
        ..EventStats::default()
    }
}

/// A flash crowd under batch admission (20 every second, 200 slots,
/// sessions that end at once): the first estimates, made a second or two
/// after the first batch, already use the planned 20/s rather than a
/// fraction of it.
#[test]
fn flash_crowd_first_estimates_use_the_plan() {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(20.0),
        slots: 200,
        batch: None,
    });
    feed.observe(0, &stats(0));
    feed.observe(500, &stats(20));
    feed.observe(1_000, &stats(20));
    feed.observe(1_500, &stats(40));
    // 1000 ahead at 20/s: 50 s, buffered 60 s, plus 0.6 s for the poll that
    // sees the admission (the old 10 s floor said 300 s).
    let e = feed.estimate(1_500, 999).unwrap().seconds;
    assert_eq!(e, 61, "estimate {e}");
}

/// Runs `seconds` of an event admitting `per_s` every second into `slots`
/// slots whose sessions last `hold_s`, observed every second.
fn run_slots(feed: &mut EtaFeed, per_s: u64, slots: u64, hold_s: i64, seconds: i64) {
    let mut ends: std::collections::VecDeque<i64> = std::collections::VecDeque::new();
    let mut total = 0;
    feed.observe(0, &stats_full(0, 0, 0));
    for t in 1..=seconds {
        while ends.front().is_some_and(|&e| e <= t) {
            ends.pop_front();
        }
        let n = per_s.min(slots - ends.len() as u64);
        total += n;
        ends.extend(std::iter::repeat_n(t + hold_s, n as usize));
        feed.observe(t * 1000, &stats_full(total, total, ends.len() as u64));
    }
}

/// While no session has ended, visitors the free slots cover get the
/// policy's rate and nobody else gets a number: the slots may bind at a
/// rate not known yet. Once sessions turn over, the estimate follows the
/// slots (100 held 8 s: 12.5/s), not the policy's 20/s.
#[test]
fn slots_that_bind_set_the_estimate() {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(20.0),
        slots: 100,
        batch: None,
    });
    run_slots(&mut feed, 20, 100, 8, 1);
    // 20 held, 80 free: rank 50 waits 51 / 20 s → 3.06 s + 0.6 → 4 s.
    assert_eq!(feed.estimate(1_000, 50).map(|e| e.seconds), Some(4));
    assert_eq!(feed.estimate(1_000, 80), None);
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(20.0),
        slots: 100,
        batch: None,
    });
    run_slots(&mut feed, 20, 100, 8, 6);
    assert_eq!(feed.estimate(6_000, 0), None, "slots full, none freed");
    assert_eq!(feed.rate(), None);
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(20.0),
        slots: 100,
        batch: None,
    });
    run_slots(&mut feed, 20, 100, 8, 120);
    let rate = feed.rate().unwrap();
    assert!((12.0..=13.0).contains(&rate), "rate {rate}");
    assert_eq!(feed.holding_ms(), Some(8_000));
    // 1000 ahead: ten generations of 8 s, buffered, plus the poll.
    let e = feed.estimate(120_000, 999).unwrap().seconds;
    assert!((90..=100).contains(&e), "estimate {e}");
}

/// Capacity and adaptive modes have no configured rate: no estimate until
/// the slots have turned over, then the turnover alone (50 slots held
/// 10 s: 5/s).
#[test]
fn no_configured_rate_waits_for_the_turnover() {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: None,
        slots: 50,
        batch: None,
    });
    run_slots(&mut feed, 50, 50, 10, 5);
    assert_eq!(feed.estimate(5_000, 0), None);
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: None,
        slots: 50,
        batch: None,
    });
    run_slots(&mut feed, 50, 50, 10, 60);
    let rate = feed.rate().unwrap();
    assert!((4.5..=5.5).contains(&rate), "rate {rate}");
}

/// Steady batches with the plan known from the start: the first estimate is
/// close to the real wait and, at a steady rate, a visitor's estimate never
/// rises from one poll to the next while they move forward.
#[test]
fn steady_batches_with_plan_never_raise_an_estimate() {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(10.0),
        slots: 10_000,
        batch: None,
    });
    let mut total = 0u64;
    let mut last: Option<u64> = None;
    // A visitor who joined with 2000 ahead, admitted at 10/s.
    let joined_rank = 2_000u64;
    for t in (0..200_000).step_by(500) {
        if t % 5_000 == 0 && t > 0 {
            total += 50;
        }
        feed.observe(t, &stats(total));
        let Some(rank) = joined_rank.checked_sub(total) else {
            break;
        };
        if let Some(e) = feed.estimate(t, rank) {
            if let Some(prev) = last {
                assert!(
                    e.seconds <= prev,
                    "estimate rose from {prev} to {} at {t} ms",
                    e.seconds
                );
            } else {
                // First estimate: ~200 s real wait, buffered 240 s.
                assert!((200..=260).contains(&e.seconds), "first {}", e.seconds);
            }
            last = Some(e.seconds);
        }
    }
}

/// The hand-over floor does not outlive HANDOVER_MS: a rate really below
/// the plan (5/s against a planned 10/s) reaches visitors in the end.
#[test]
fn plan_floor_yields_to_a_lower_measured_rate() {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(10.0),
        slots: 0,
        batch: None,
    });
    let mut total = 0;
    for s in 0..300 {
        total += 5;
        feed.observe(s * 1000, &stats(total));
    }
    let rate = feed.rate().unwrap();
    assert!((4.5..=5.5).contains(&rate), "rate {rate}");
}

/// A pause (or a close, or the time before the opening) is no evidence of
/// the admission rate: the estimate after six minutes paused is the one
/// before, not the hours a rate measured through the pause gave (a visitor
/// 23rd in line was told eleven hours, and admitted 75 s later).
#[test]
fn a_pause_does_not_count_as_a_rate_of_zero() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    let mut t = 0;
    // One admission every 3 s for five minutes, observed twice a second.
    while t < 300_000 {
        if t % 3_000 == 0 {
            total += 1;
        }
        feed.set_admitting(t, true);
        feed.observe(t, &stats(total));
        t += 500;
    }
    let before = feed.estimate(t, 23).unwrap().seconds;
    // Six minutes paused: nobody admitted.
    let paused_at = t;
    while t < paused_at + 360_000 {
        feed.set_admitting(t, false);
        feed.observe(t, &stats(total));
        // Waiting visitors idle out meanwhile (the sweep goes on): not
        // counted as the rate's churn, which a whole pause's worth at
        // once would shorten every estimate for a minute after it.
        if t % 10_000 == 0 {
            feed.record_abandoned(t, 3);
        }
        t += 500;
    }
    let during = feed.estimate(t, 23).unwrap().seconds;
    // Resumed: the first snapshots after it.
    feed.set_admitting(t, true);
    feed.observe(t, &stats(total));
    let after = feed.estimate(t, 23).unwrap().seconds;
    let near = |e: u64| e <= before * 11 / 10 && e >= before * 9 / 10;
    assert!(
        near(during) && near(after),
        "23rd in line: {before} s before the pause, {during} s during it, {after} s after it"
    );
    // And the rate stays the measured one as admissions go on.
    let resumed_at = t;
    while t < resumed_at + 30_000 {
        if t % 3_000 == 0 {
            total += 1;
        }
        feed.set_admitting(t, true);
        feed.observe(t, &stats(total));
        t += 500;
    }
    let later = feed.estimate(t, 23).unwrap().seconds;
    assert!(
        later <= before * 11 / 10,
        "{before} s before, {later} s 30 s after"
    );
}

/// A fresh event's first measured rate is published as measured, not
/// approached from zero (its first visitors were told ten to twenty times
/// their wait).
#[test]
fn the_first_measured_rate_is_taken_as_it_is() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    let mut t = 0;
    // Five admissions a second from the start, observed twice a second.
    feed.observe(t, &stats(total));
    while t < 3_000 {
        t += 500;
        total += 2;
        feed.observe(t, &stats(total));
    }
    let rate = feed.rate().unwrap();
    assert!(rate > 0.0, "rate {rate}");
    // Measured over the first span, the rate is what the admissions say
    // (6 in 3 s, over at least 10 s: 0.6/s at least), not a tenth of it.
    let raw = 6.0 / 10.0;
    assert!(
        rate >= raw * 0.9,
        "published {rate}/s against a measured {raw}/s at least"
    );
}

/// A feed planning batch admission: `size` every `interval_ms`, `slots`
/// sessions at once.
fn batch_feed_of(size: u64, interval_ms: u64, slots: u64) -> EtaFeed {
    let mut feed = EtaFeed::default();
    feed.set_plan(Plan {
        admit_per_s: Some(size as f64 * 1000.0 / interval_ms as f64),
        slots,
        batch: Some((size, interval_ms)),
    });
    feed
}

/// A batch queue of 50 a minute on a grid anchored at 17 s on the store's
/// clock, which runs 4 s ahead of this node's: ten minutes learnt, free
/// slots for all (sessions end at once).
fn batch_feed(compensation: f64) -> (EtaFeed, u64) {
    let mut feed = batch_feed_of(50, 60_000, 10_000);
    feed.set_grid(Grid {
        anchor_ms: 17_000,
        store_offset_ms: 4_000,
        tick_ms: 50,
        compensation,
        last_start_ms: None,
    });
    let mut total = 0;
    let mut t = 0;
    while t < 600_000 {
        // Batches leave at 13 s past each minute of this node's clock.
        if t % 60_000 == 13_000 {
            total += 50;
        }
        feed.observe(t, &stats(total));
        t += 500;
    }
    (feed, total)
}

/// Batch mode: the visitor at the front is never told sooner than the
/// batch they are in leaves, on the scheduler's grid (the event's anchor
/// on the store's clock), where the rate alone told them 2 s for the
/// whole minute; further back, an interval for every full batch ahead.
#[test]
fn a_batch_is_waited_for_to_its_tick() {
    let (feed, _) = batch_feed(1.0);
    // 8 s past the node's minute (`600_000 + 8_000`): the batch leaves at
    // 13 s, in 5 s; 0.72 s for the poll that sees it.
    let front = feed.estimate(608_000, 0).unwrap();
    assert_eq!((front.wait_ms, front.seconds), (5_000, 6), "{front:?}");
    // 14 s past: the next leaves in 59 s.
    let t = 614_000;
    let front = feed.estimate(t, 0).unwrap();
    assert_eq!((front.wait_ms, front.seconds), (59_000, 60), "{front:?}");
    assert!(!front.almost_there, "{front:?}");
    // The 51st is in the batch after, the 121st two batches on (deeper in
    // a batch the rate's own estimate is the longer one).
    assert_eq!(feed.estimate(t, 50).unwrap().wait_ms, 119_000);
    assert_eq!(feed.estimate(t, 120).unwrap().wait_ms, 179_000);
    assert!(feed.estimate(t, 49).unwrap().wait_ms >= 59_000);
}

/// The batch leaves at the scheduler's first tick at or after its start
/// on the grid: an anchor off the tick grid moves it to that tick.
#[test]
fn a_batch_leaves_at_the_first_tick_of_its_period() {
    let mut feed = batch_feed_of(5_000, 60_000, 10_000);
    feed.set_grid(Grid {
        anchor_ms: 17_020,
        store_offset_ms: 0,
        tick_ms: 50,
        compensation: 1.0,
        last_start_ms: None,
    });
    feed.observe(0, &stats(0));
    // The period starts at 77.02 s; its tick is at 77.05 s.
    assert_eq!(feed.estimate(77_000, 0).unwrap().wait_ms, 50);
    assert_eq!(feed.estimate(77_030, 0).unwrap().wait_ms, 20);
    assert_eq!(feed.estimate(77_050, 0).unwrap().wait_ms, 60_000);
}

/// Batches made larger for no-shows carry more visitors each.
#[test]
fn a_compensated_batch_carries_more() {
    let t = 614_000;
    let (plain, _) = batch_feed(1.0);
    assert_eq!(plain.estimate(t, 50).unwrap().wait_ms, 119_000);
    // 75 a batch: the 51st is in the next; the 76th in the one after.
    let (made_up, _) = batch_feed(1.5);
    assert!(made_up.estimate(t, 50).unwrap().wait_ms < 119_000);
    assert_eq!(made_up.estimate(t, 75).unwrap().wait_ms, 119_000);
}

/// A visitor followed from 141st in line until their batch takes them is
/// only ever told less, every 100 ms.
#[test]
fn a_batch_visitors_estimate_only_counts_down() {
    let (mut feed, mut total) = batch_feed(1.0);
    let mut rank = 140u64;
    let mut last = u64::MAX;
    let mut t = 600_000;
    loop {
        if t % 60_000 == 13_000 {
            if rank < 50 {
                break;
            }
            total += 50;
            rank -= 50;
        }
        if t % 500 == 0 {
            feed.observe(t, &stats(total));
        }
        let e = feed.estimate(t, rank).unwrap().seconds;
        assert!(
            e <= last,
            "rose from {last} to {e} s at {t} ms, rank {rank}"
        );
        last = e;
        t += 100;
    }
    assert_eq!(t, 733_000, "admitted by the third batch");
    assert!(last <= 2, "told {last} s just before");
}

/// A grid at the epoch, on a store clock equal to this node's.
fn plain_grid() -> Grid {
    Grid {
        anchor_ms: 0,
        store_offset_ms: 0,
        tick_ms: 50,
        compensation: 1.0,
        last_start_ms: None,
    }
}

/// A batch queue of 50 a minute with 100 slots, 90 of them held: the front
/// 10 are covered by the free slots, the 11th is not.
fn bound_feed() -> EtaFeed {
    let mut feed = batch_feed_of(50, 60_000, 100);
    feed.set_grid(plain_grid());
    // Ten admitted a second, each held 8 s, for a minute: the slots'
    // holding time is learnt. Then 90 of the 100 held.
    let mut total = 0;
    for t in 0..=60 {
        total += 10;
        feed.observe(
            t * 1000,
            &stats_full(total, total, (t + 1).min(8) as u64 * 10),
        );
    }
    feed.observe(61_000, &stats_full(total + 10, total + 10, 90));
    feed
}

/// Where the slots bind and nobody here knows what the batch under way
/// still owes, what it could not admit at its tick may go out as slots
/// free: no batch's tick is waited for then, the slots decide.
#[test]
fn slots_that_bind_keep_an_unknown_batch_out_of_it() {
    let feed = bound_feed();
    let covered = feed.estimate(61_000, 9).unwrap();
    assert_eq!(covered.wait_ms, 59_000, "{covered:?}");
    let beyond = feed.estimate(61_000, 10);
    assert!(
        beyond.is_some_and(|e| e.wait_ms < 59_000),
        "the 11th waits for a slot, not the tick: {beyond:?}"
    );
}

/// Where this node began the batch under way and it owes nothing more, a
/// visitor beyond the free slots waits for the next batch at least, a
/// slot freeing sooner or not: told a slot's time, they were then told
/// more once the slots covered them.
#[test]
fn a_paid_batch_is_waited_for_beyond_the_free_slots_too() {
    let mut feed = bound_feed();
    feed.set_owed(Some(0));
    let beyond = feed.estimate(61_000, 10);
    assert!(
        beyond.is_some_and(|e| e.wait_ms >= 59_000),
        "told sooner than the next batch: {beyond:?}"
    );
    // What it still owes goes out as slots free or at the next tick.
    feed.set_owed(Some(12));
    assert_eq!(
        feed.estimate(61_000, 5).unwrap().wait_ms,
        0,
        "covered, owed"
    );
    let owed_beyond = feed.estimate(61_000, 11);
    assert!(
        owed_beyond.is_some_and(|e| e.wait_ms < 59_000),
        "{owed_beyond:?}"
    );
    // Past what it owes: the next batch.
    let past = feed.estimate(61_000, 12);
    assert!(past.is_some_and(|e| e.wait_ms >= 59_000), "{past:?}");
}

/// Where another node began the batch under way, what it recorded in the
/// store that the batch owes counts as this node's own count would; a
/// record of an earlier batch (its interval over) counts for nothing.
#[test]
fn another_nodes_record_of_the_batch_under_way_is_counted() {
    let mut own = bound_feed();
    own.set_owed(Some(12));
    let mut shared = bound_feed();
    shared.set_shared_owed(Some((60_000, 12)));
    for rank in [5, 11, 12, 20] {
        assert_eq!(
            shared.estimate(61_000, rank),
            own.estimate(61_000, rank),
            "rank {rank}"
        );
    }
    let unknown = bound_feed();
    // An earlier batch's, and one from a store whose clock has since
    // stepped back by more than an interval.
    for start in [0, 200_000] {
        let mut stale = bound_feed();
        stale.set_shared_owed(Some((start, 12)));
        for rank in [5, 11, 12, 20] {
            assert_eq!(
                stale.estimate(61_000, rank),
                unknown.estimate(61_000, rank),
                "start {start}, rank {rank}"
            );
        }
    }
    assert_ne!(
        shared.estimate(61_000, 12),
        unknown.estimate(61_000, 12),
        "the record made no difference"
    );
}

/// After a live change of the interval the next batch is due an interval
/// after the last one began, not at the new grid's next start.
#[test]
fn a_changed_interval_counts_from_the_last_batch() {
    let mut feed = batch_feed_of(50, 45_000, 10_000);
    // The last batch began at 60 s, on the old minute's grid.
    feed.set_grid(Grid {
        last_start_ms: Some(60_000),
        ..plain_grid()
    });
    feed.observe(0, &stats(0));
    // At 70 s the new grid says 90 s; the scheduler begins it at 105 s.
    assert_eq!(feed.estimate(70_000, 0).unwrap().wait_ms, 35_000);
}

/// Until the scheduler has told where its batches leave, no batch is
/// counted on a grid nobody runs.
#[test]
fn no_grid_no_batch_wait() {
    let mut feed = batch_feed_of(50, 60_000, 10_000);
    feed.observe(0, &stats(0));
    let e = feed.estimate(1_000, 0).unwrap();
    assert!(e.wait_ms < 59_000, "{e:?}");
}
