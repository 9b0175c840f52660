use super::*;
use proptest::prelude::*;

const BIG_QUEUE: u64 = 1_000_000;

fn obs(now_ms: i64, active: u64, outstanding: u64, max_active: u64) -> Observed {
    Observed {
        now_ms,
        active,
        outstanding,
        max_active,
        queue_length: BIG_QUEUE,
        ..Observed::default()
    }
}

/// Runs `steps` through one fresh state and checks each decision.
fn check(mode: Mode, steps: &[(Observed, u64, &str)]) {
    let max_active = steps.first().map_or(0, |s| s.0.max_active);
    let mut state = PolicyState::new(&mode, max_active);
    for (i, (o, admit, why)) in steps.iter().enumerate() {
        let d = state.decide(&mode, o);
        assert_eq!((d.admit, d.reason), (*admit, *why), "step {i}: {o:?}");
    }
}

#[test]
fn headroom_table() {
    assert_eq!(headroom(&obs(0, 0, 0, 10)), 10);
    assert_eq!(headroom(&obs(0, 3, 4, 10)), 3);
    assert_eq!(headroom(&obs(0, 8, 4, 10)), 0);
    assert_eq!(headroom(&obs(0, u64::MAX, u64::MAX, 10)), 0);
}

#[test]
fn batch_admits_size_every_interval() {
    use reason::*;
    let mode = Mode::Batch {
        size: 50,
        interval_ms: 5_000,
    };
    check(
        mode,
        &[
            (obs(0, 0, 0, 1_000), 50, BATCH), // the first tick admits at once
            (obs(1_000, 50, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(4_999, 50, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(5_000, 50, 0, 1_000), 50, BATCH),
            (obs(6_500, 100, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(10_200, 100, 0, 1_000), 50, BATCH), // a late tick keeps the cadence:
            (obs(14_999, 100, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(15_000, 100, 0, 1_000), 50, BATCH), // due at 15 000, not 15 200
            (obs(40_000, 100, 0, 1_000), 50, BATCH), // missed batches are not caught up
            (obs(44_000, 100, 0, 1_000), 0, BATCH_INTERVAL),
        ],
    );
}

/// Two nodes given one anchor begin their batches at the same instants,
/// whichever node ticks when: the batch one node begins is the batch the
/// other forfeits, or finds claimed, never one of its own shifted cadence.
/// Counted from where each node happened to start, the cadences drifted a
/// tick apart, and a node whose batch fell due a tick before the other's
/// began a second batch in the same interval.
#[test]
fn batches_start_on_the_anchors_grid_whichever_node_begins_them() {
    let mode = Mode::Batch {
        size: 5,
        interval_ms: 5_000,
    };
    let (mut a, mut b) = (PolicyState::new(&mode, 100), PolicyState::new(&mode, 100));
    a.set_cadence_anchor(1_000);
    b.set_cadence_anchor(1_000);
    // A wins a tick 30 ms into the grid's interval: the batch starts at
    // the grid's instant, not at the tick.
    assert_eq!(a.batch_due_start(&mode, 1_030), Some(1_000));
    assert_eq!(a.decide(&mode, &obs(1_030, 0, 0, 100)).admit, 5);
    assert_eq!(a.batch_due_start(&mode, 1_040), None);
    // B loses the next tick: the same batch, forfeited.
    b.forfeit(&mode, 1_040);
    assert_eq!(b.batch_due_start(&mode, 5_990), None);
    assert_eq!(b.decide(&mode, &obs(5_990, 5, 0, 100)).admit, 0);
    // Both find the next batch due at 6 000 and call it the same batch,
    // whoever ticks first and however late.
    assert_eq!(b.batch_due_start(&mode, 6_000), Some(6_000));
    assert_eq!(b.decide(&mode, &obs(6_000, 5, 0, 100)).admit, 5);
    assert_eq!(a.batch_due_start(&mode, 6_020), Some(6_000));
    // The store gave that batch to B: A forfeits it and owes nothing of it.
    a.forfeit(&mode, 6_020);
    assert_eq!(a.decide(&mode, &obs(6_070, 10, 0, 100)).admit, 0);
    assert_eq!(a.batch_due_start(&mode, 11_000), Some(11_000));
    assert_eq!(a.decide(&mode, &obs(11_000, 10, 0, 100)).admit, 5);
}

/// A mode changed to batch begins a batch at once, on the grid.
#[test]
fn a_mode_changed_to_batch_is_due_at_once_on_the_grid() {
    let continuous = Mode::Continuous {
        max_per_minute: 600,
    };
    let batch = Mode::Batch {
        size: 5,
        interval_ms: 5_000,
    };
    let mut s = PolicyState::new(&continuous, 100);
    s.set_cadence_anchor(1_000);
    s.decide(&continuous, &obs(2_000, 0, 0, 100));
    assert_eq!(s.batch_due_start(&batch, 7_500), Some(6_000));
    // Another node holds that batch: taken up and forfeited, it is not due
    // again at the next tick (kept for the old mode, it was, every tick).
    let mut other = s.clone();
    other.adopt(&batch, 100);
    other.forfeit(&batch, 7_500);
    assert_eq!(other.batch_due_start(&batch, 7_550), None);
    assert_eq!(other.batch_due_start(&batch, 11_000), Some(11_000));
    assert_eq!(s.decide(&batch, &obs(7_500, 0, 0, 100)).admit, 5);
    assert_eq!(s.batch_due_start(&batch, 7_600), None);
    assert_eq!(s.batch_due_start(&continuous, 7_600), None);
}

#[test]
fn a_clock_stepped_back_delays_a_batch_by_the_step_at_most_and_never_stalls_it() {
    use reason::*;
    let mode = Mode::Batch {
        size: 50,
        interval_ms: 5_000,
    };
    check(
        mode,
        &[
            (obs(100_000, 0, 0, 1_000), 50, BATCH),
            // A step back smaller than an interval: the next batch waits
            // for the old cadence, no extra batch.
            (obs(99_000, 50, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(104_999, 50, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(105_000, 50, 0, 1_000), 50, BATCH),
        ],
    );
    // An hour back: the first tick after the step starts a new cadence
    // there, instead of an hour without a batch.
    check(
        Mode::Batch {
            size: 50,
            interval_ms: 5_000,
        },
        &[
            (obs(3_600_000, 0, 0, 1_000), 50, BATCH),
            (obs(100_000, 50, 0, 1_000), 50, BATCH),
            (obs(101_000, 100, 0, 1_000), 0, BATCH_INTERVAL),
            (obs(105_000, 100, 0, 1_000), 50, BATCH),
        ],
    );
}

#[test]
fn a_clock_stepped_back_refills_from_where_it_is_now() {
    use reason::*;
    // 600 per minute = 10 per second, with a 6 s burst.
    check(
        Mode::Continuous {
            max_per_minute: 600,
        },
        &[
            (obs(3_600_000, 0, 0, 10_000), 60, RATE_LIMITED),
            // An hour back: nothing for the step...
            (obs(0, 60, 0, 10_000), 0, RATE_LIMITED),
            // ...then a second's refill a second later, not an hour's wait.
            (obs(1_000, 60, 0, 10_000), 10, RATE_LIMITED),
        ],
    );
}

#[test]
fn batch_blocked_by_max_active_is_released_as_slots_free() {
    use reason::*;
    let mode = Mode::Batch {
        size: 50,
        interval_ms: 5_000,
    };
    let short_queue = Observed {
        queue_length: 10,
        ..obs(10_000, 0, 0, 100)
    };
    check(
        mode,
        &[
            (obs(0, 80, 0, 100), 20, MAX_ACTIVE),
            (obs(1_000, 80, 20, 100), 0, MAX_ACTIVE),
            (obs(2_000, 50, 20, 100), 30, BATCH), // the rest of the batch
            (obs(3_000, 0, 0, 100), 0, BATCH_INTERVAL),
            (obs(5_000, 0, 0, 100), 50, BATCH),
            (short_queue, 10, BATCH),
            (
                Observed {
                    queue_length: 0,
                    ..obs(11_000, 0, 0, 100)
                },
                0,
                QUEUE_EMPTY,
            ),
        ],
    );
}

#[test]
fn continuous_refills_its_per_minute_budget() {
    use reason::*;
    // 600 per minute = 10 per second, with a 6 s burst.
    let mode = Mode::Continuous {
        max_per_minute: 600,
    };
    check(
        mode,
        &[
            (obs(0, 0, 0, 10_000), 60, RATE_LIMITED),
            (obs(0, 60, 0, 10_000), 0, RATE_LIMITED),
            (obs(1_000, 60, 0, 10_000), 10, RATE_LIMITED),
            (obs(1_500, 70, 0, 10_000), 5, RATE_LIMITED),
            (obs(20_000, 75, 0, 10_000), 60, RATE_LIMITED), // the bank is capped
            (obs(21_000, 9_997, 0, 10_000), 3, MAX_ACTIVE), // freed slots only
            (obs(22_000, 0, 0, 10_000), 17, RATE_LIMITED),  // 7 left + 10 refilled
            (obs(21_000, 0, 0, 10_000), 0, RATE_LIMITED),   // a clock step back refills nothing
            (obs(22_100, 0, 0, 10_000), 1, RATE_LIMITED),
        ],
    );
    check(
        Mode::Continuous { max_per_minute: 0 },
        &[
            (obs(0, 0, 0, 100), 0, RATE_LIMITED),
            (obs(60_000, 0, 0, 100), 0, RATE_LIMITED),
        ],
    );
    // A slow event still admits: the bucket holds at least one.
    check(
        Mode::Continuous { max_per_minute: 2 },
        &[
            (obs(0, 0, 0, 100), 1, RATE_LIMITED),
            (obs(29_999, 1, 0, 100), 0, RATE_LIMITED),
            (obs(30_100, 1, 0, 100), 1, RATE_LIMITED),
        ],
    );
}

#[test]
fn capacity_admits_up_to_target_and_nothing_on_a_bad_reading() {
    use reason::*;
    let at = |concurrency: Option<u64>, active, outstanding, max_active| Observed {
        downstream_concurrency: concurrency,
        ..obs(0, active, outstanding, max_active)
    };
    let mode = Mode::Capacity { target: 400 };
    check(
        mode.clone(),
        &[(at(None, 0, 0, 1_000), 0, CAPACITY_UNKNOWN)],
    );
    check(mode.clone(), &[(at(Some(400), 0, 0, 1_000), 0, AT_TARGET)]);
    check(mode.clone(), &[(at(Some(900), 0, 0, 1_000), 0, AT_TARGET)]);
    check(mode.clone(), &[(at(Some(300), 0, 0, 1_000), 100, CAPACITY)]);
    check(mode.clone(), &[(at(Some(300), 0, 40, 1_000), 60, CAPACITY)]);
    check(mode.clone(), &[(at(Some(0), 0, 0, 1_000), 400, CAPACITY)]);
    check(
        mode.clone(),
        &[(at(Some(300), 950, 0, 1_000), 50, MAX_ACTIVE)],
    );
    check(
        mode,
        &[
            (at(Some(300), 0, 0, 1_000), 100, CAPACITY),
            (at(None, 0, 100, 1_000), 0, CAPACITY_UNKNOWN),
        ],
    );
}

fn origin(now_ms: i64, active: u64, outstanding: u64, p95: f64, errors: f64) -> Observed {
    Observed {
        origin_p95_ms: Some(p95),
        origin_error_rate: Some(errors),
        origin_samples: 100,
        ..obs(now_ms, active, outstanding, 1_000)
    }
}

#[test]
fn adaptive_window_table() {
    let mode = Mode::Adaptive {
        target_p95_ms: 300.0,
        max_error_rate: 0.02,
    };
    // (observation, window after, admit, reason); the window starts at 1000/20 = 50.
    let steps: &[(Observed, f64, u64, &str)] = &[
        // Too few samples: hold the window, fill it.
        (obs(0, 0, 0, 1_000), 50.0, 50, reason::ADAPTIVE),
        // Healthy and full: slow start grows by a tenth.
        (origin(1_000, 50, 0, 100.0, 0.0), 55.0, 5, reason::ADAPTIVE),
        (origin(2_000, 55, 0, 100.0, 0.0), 60.5, 5, reason::ADAPTIVE),
        // Healthy but not full: no growth.
        (origin(3_000, 20, 0, 100.0, 0.0), 60.5, 40, reason::ADAPTIVE),
        // Unusable figures: hold.
        (
            origin(4_000, 60, 0, f64::NAN, 0.0),
            60.5,
            0,
            reason::WINDOW_FULL,
        ),
        // Latency breach: halve.
        (origin(5_000, 60, 0, 301.0, 0.0), 30.25, 0, reason::BACKOFF),
        // Still breaching while the load is above the window: wait for it.
        (
            origin(6_000, 60, 0, 500.0, 0.0),
            30.25,
            0,
            reason::WINDOW_FULL,
        ),
        // Load under the window and still breaching: halve again.
        (origin(7_000, 30, 0, 500.0, 0.0), 15.125, 0, reason::BACKOFF),
        // Errors breach too.
        (origin(8_000, 10, 0, 100.0, 0.5), 7.5625, 0, reason::BACKOFF),
        // After the first breach growth slows to a fiftieth (at least one).
        (origin(9_000, 7, 0, 100.0, 0.0), 8.5625, 1, reason::ADAPTIVE),
        (
            origin(10_000, 100, 0, 100.0, 0.0),
            9.5625,
            0,
            reason::WINDOW_FULL,
        ),
    ];
    let mut state = PolicyState::new(&mode, 1_000);
    for (i, (o, window, admit, why)) in steps.iter().enumerate() {
        let d = state.decide(&mode, o);
        assert_eq!(
            (state.window(), d.admit, d.reason),
            (*window, *admit, *why),
            "step {i}"
        );
    }
}

/// A deterministic crowd in front of an origin, driven by an injected clock.
struct World {
    now_ms: i64,
    tick_ms: i64,
    /// Per admitted token: when it is redeemed (`None`: never) and when it expires.
    tokens: Vec<(Option<i64>, i64)>,
    /// End time of each active session.
    sessions: Vec<i64>,
    admitted_total: u64,
    /// Out of every ten admitted visitors, this many never redeem.
    no_shows_in_ten: u64,
    token_ttl_ms: i64,
    session_ms: i64,
    redeemed_at: Vec<i64>,
    last_admitted: u64,
}

impl World {
    fn new(no_shows_in_ten: u64, session_ms: i64) -> Self {
        World {
            now_ms: 0,
            tick_ms: 1_000,
            tokens: Vec::new(),
            sessions: Vec::new(),
            admitted_total: 0,
            no_shows_in_ten,
            token_ttl_ms: 120_000,
            session_ms,
            redeemed_at: Vec::new(),
            last_admitted: 0,
        }
    }

    /// Advances the clock by one tick and resolves tokens and sessions.
    fn advance(&mut self, state: &mut PolicyState) {
        self.now_ms += self.tick_ms;
        let now = self.now_ms;
        let (mut redeemed, mut expired) = (0, 0);
        let sessions = &mut self.sessions;
        let redeemed_at = &mut self.redeemed_at;
        let session_ms = self.session_ms;
        self.tokens
            .retain(|&(redeem_at, expires_at)| match redeem_at {
                Some(t) if t <= now => {
                    redeemed += 1;
                    sessions.push(now + session_ms);
                    redeemed_at.push(now);
                    false
                }
                _ if expires_at <= now => {
                    expired += 1;
                    false
                }
                _ => true,
            });
        self.sessions.retain(|&end| end > now);
        state.record_outcome(self.last_admitted, redeemed, expired);
    }

    fn observe(&self, max_active: u64) -> Observed {
        obs(
            self.now_ms,
            self.sessions.len() as u64,
            self.tokens.len() as u64,
            max_active,
        )
    }

    fn admit(&mut self, n: u64) {
        for _ in 0..n {
            let i = self.admitted_total;
            self.admitted_total += 1;
            // Redeem after 2 to 11 s; the pattern spreads no-shows evenly.
            let redeem_at = (i % 10 >= self.no_shows_in_ten)
                .then(|| self.now_ms + 2_000 + (i * 7 % 10) as i64 * 1_000);
            self.tokens
                .push((redeem_at, self.now_ms + self.token_ttl_ms));
        }
        self.last_admitted = n;
    }

    fn redeemed_between(&self, from_ms: i64, to_ms: i64) -> usize {
        self.redeemed_at
            .iter()
            .filter(|&&t| t > from_ms && t <= to_ms)
            .count()
    }
}

#[test]
fn no_show_compensation_keeps_batch_throughput() {
    // 50 every 6 s = 500 per minute; 30 % of admitted visitors never redeem.
    let mode = Mode::Batch {
        size: 50,
        interval_ms: 6_000,
    };
    let max_active = 5_000;
    let mut state = PolicyState::new(&mode, max_active);
    let mut world = World::new(3, 60_000);
    for _ in 0..30 * 60 {
        world.advance(&mut state);
        let o = world.observe(max_active);
        let d = state.decide(&mode, &o);
        assert!(d.admit <= headroom(&o));
        world.admit(d.admit);
    }
    let end = world.now_ms;
    let per_minute = world.redeemed_between(end - 5 * 60_000, end) as f64 / 5.0;
    assert!(
        per_minute >= 475.0,
        "redeemed {per_minute}/min, no-show {}",
        state.no_show_rate()
    );
    assert!(
        per_minute <= 550.0,
        "redeemed {per_minute}/min: over-compensated"
    );
    assert!(
        (state.no_show_rate() - 0.3).abs() < 0.05,
        "{}",
        state.no_show_rate()
    );
}

#[test]
fn no_show_compensation_is_capped() {
    let mode = Mode::Batch {
        size: 50,
        interval_ms: 6_000,
    };
    let mut state = PolicyState::new(&mode, 10_000);
    assert_eq!(state.compensation(), 1.0);
    // A handful of resolutions is not enough to trust.
    state.record_outcome(10, 0, 3);
    assert_eq!(state.compensation(), 1.0);
    for _ in 0..100 {
        state.record_outcome(100, 10, 90);
    }
    assert_eq!(state.compensation(), MAX_COMPENSATION);
    assert_eq!(state.decide(&mode, &obs(0, 0, 0, 10_000)).admit, 100);
    // The capacity and adaptive modes count outstanding tokens at the show-up rate.
    let mode = Mode::Capacity { target: 400 };
    let o = Observed {
        downstream_concurrency: Some(300),
        ..obs(0, 0, 50, 10_000)
    };
    assert_eq!(state.decide(&mode, &o).admit, 150);
}

/// The model origin: fine up to `knee` concurrent users, then 5 ms slower per
/// extra user.
fn model_origin(o: Observed, knee: u64, errors: f64) -> Observed {
    let over = o.active.saturating_sub(knee) as f64;
    Observed {
        origin_p95_ms: Some(50.0 + over * 5.0),
        origin_error_rate: Some(errors),
        origin_samples: if o.active > 0 { 100 } else { 0 },
        ..o
    }
}

#[test]
fn adaptive_settles_near_the_knee_and_halves_on_5xx() {
    let knee = 200;
    let mode = Mode::Adaptive {
        target_p95_ms: 100.0, // breached above knee + 10
        max_error_rate: 0.02,
    };
    let max_active = 2_000;
    let mut state = PolicyState::new(&mode, max_active);
    let mut world = World::new(0, 30_000);
    let mut loads = Vec::new();
    for _ in 0..20 * 60 {
        world.advance(&mut state);
        let o = model_origin(world.observe(max_active), knee, 0.0);
        let d = state.decide(&mode, &o);
        assert!(d.admit <= headroom(&o));
        world.admit(d.admit);
        loads.push(o.active);
    }
    let last = &loads[loads.len() - 600..];
    let mean = last.iter().sum::<u64>() as f64 / last.len() as f64;
    let peak = last.iter().copied().max().unwrap_or(0);
    assert!(
        (0.6 * knee as f64..=1.1 * knee as f64).contains(&mean),
        "mean concurrency {mean}"
    );
    assert!(peak as f64 <= 1.4 * knee as f64, "peak concurrency {peak}");

    // A 5xx burst halves the window at once.
    let before = state.window();
    world.advance(&mut state);
    let o = Observed {
        active: (before * 0.8) as u64,
        outstanding: 0,
        ..model_origin(world.observe(max_active), knee, 0.5)
    };
    let d = state.decide(&mode, &o);
    assert_eq!(d.reason, reason::BACKOFF);
    assert_eq!(state.window(), (before * 0.5).max(1.0));
}

#[test]
fn adaptive_does_not_grow_an_unused_window() {
    let mode = Mode::Adaptive {
        target_p95_ms: 300.0,
        max_error_rate: 0.02,
    };
    let mut state = PolicyState::new(&mode, 1_000);
    for t in 0..1_000 {
        let o = Observed {
            queue_length: 0,
            ..origin(t * 1_000, 3, 0, 50.0, 0.0)
        };
        assert_eq!(state.decide(&mode, &o).admit, 0);
    }
    assert_eq!(state.window(), 50.0);
}

#[test]
fn a_mode_change_starts_fresh_but_keeps_no_shows() {
    let batch = Mode::Batch {
        size: 10,
        interval_ms: 60_000,
    };
    let mut state = PolicyState::new(&batch, 100);
    for _ in 0..100 {
        state.record_outcome(10, 8, 2);
    }
    let no_show = state.no_show_rate();
    assert_eq!(state.decide(&batch, &obs(0, 0, 0, 100)).admit, 13);
    assert_eq!(state.decide(&batch, &obs(1_000, 0, 13, 100)).admit, 0);
    let continuous = Mode::Continuous { max_per_minute: 60 };
    assert_eq!(state.decide(&continuous, &obs(2_000, 0, 13, 100)).admit, 7);
    // Back to batch: a new batch at once.
    assert_eq!(state.decide(&batch, &obs(3_000, 0, 20, 100)).admit, 13);
    assert_eq!(state.no_show_rate(), no_show);
}

#[test]
fn mode_serde_shape() {
    let mode: Mode =
        serde_json::from_str(r#"{"mode":"batch","size":50,"interval_ms":5000}"#).unwrap();
    assert_eq!(
        mode,
        Mode::Batch {
            size: 50,
            interval_ms: 5_000
        }
    );
    let mode: Mode =
        serde_json::from_str(r#"{"mode":"adaptive","target_p95_ms":300.0,"max_error_rate":0.02}"#)
            .unwrap();
    assert_eq!(
        mode,
        Mode::Adaptive {
            target_p95_ms: 300.0,
            max_error_rate: 0.02
        }
    );
}

fn any_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        (any::<u64>(), any::<u64>())
            .prop_map(|(size, interval_ms)| Mode::Batch { size, interval_ms }),
        (0u64..100, 0u64..20_000).prop_map(|(size, interval_ms)| Mode::Batch { size, interval_ms }),
        any::<u64>().prop_map(|max_per_minute| Mode::Continuous { max_per_minute }),
        any::<u64>().prop_map(|target| Mode::Capacity { target }),
        (any::<f64>(), any::<f64>()).prop_map(|(target_p95_ms, max_error_rate)| Mode::Adaptive {
            target_p95_ms,
            max_error_rate
        }),
        (0.0f64..500.0, 0.0f64..0.1).prop_map(|(target_p95_ms, max_error_rate)| Mode::Adaptive {
            target_p95_ms,
            max_error_rate
        }),
    ]
}

fn small_or_any() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..200, any::<u64>()]
}

fn any_observed() -> impl Strategy<Value = Observed> {
    (
        (any::<i64>(), -10_000i64..10_000_000),
        (
            small_or_any(),
            small_or_any(),
            small_or_any(),
            small_or_any(),
        ),
        proptest::option::of(small_or_any()),
        (
            proptest::option::of(any::<f64>()),
            proptest::option::of(any::<f64>()),
            small_or_any(),
        ),
    )
        .prop_map(
            |(
                (far, near),
                (active, outstanding, max_active, queue_length),
                downstream_concurrency,
                (p95, errors, samples),
            )| Observed {
                now_ms: if far % 2 == 0 { far } else { near },
                active,
                outstanding,
                max_active,
                queue_length,
                downstream_concurrency,
                origin_p95_ms: p95,
                origin_error_rate: errors,
                origin_samples: samples,
            },
        )
}

proptest! {
    /// The hard invariant: never more than the free slots, whatever the inputs.
    #[test]
    fn never_exceeds_headroom(
        first in any_mode(),
        steps in proptest::collection::vec((any_mode(), any_observed(), (small_or_any(), small_or_any(), small_or_any())), 1..40),
    ) {
        let mut state = PolicyState::new(&first, steps[0].1.max_active);
        for (mode, o, (admitted, redeemed, expired)) in &steps {
            let d = state.decide(mode, o);
            prop_assert!(d.admit <= headroom(o), "{:?} {:?} -> {:?}", mode, o, d);
            prop_assert!(d.admit <= o.queue_length);
            prop_assert!((1.0..=MAX_COMPENSATION).contains(&state.compensation()));
            state.record_outcome(*admitted, *redeemed, *expired);
        }
    }

    /// Against a live crowd: active sessions plus outstanding tokens stay within
    /// `max_active` at every tick, and everything drains once admissions stop.
    #[test]
    fn a_crowd_never_overfills(mode in any_mode(), max_active in 1u64..300, no_shows in 0u64..10, session_ms in 1_000i64..60_000) {
        let mut state = PolicyState::new(&mode, max_active);
        let mut world = World::new(no_shows, session_ms);
        world.token_ttl_ms = 15_000;
        for t in 0..200 {
            world.advance(&mut state);
            let o = Observed { downstream_concurrency: Some(world.sessions.len() as u64), ..model_origin(world.observe(max_active), 50, 0.0) };
            let d = state.decide(&mode, &o);
            prop_assert!(o.active + o.outstanding + d.admit <= max_active, "tick {}", t);
            world.admit(d.admit);
        }
        for _ in 0..100 {
            world.advance(&mut state);
        }
        prop_assert!(world.tokens.is_empty() && world.sessions.is_empty());
    }
}

/// The window grows and shrinks per second, not per tick: ticking ten times
/// a second (to refill freed slots at once) must not make adaptive mode ten
/// times as aggressive.
#[test]
fn adaptive_adjusts_at_the_same_pace_at_any_tick_rate() {
    let mode = Mode::Adaptive {
        target_p95_ms: 300.0,
        max_error_rate: 0.02,
    };
    let run = |tick_ms: i64, p95: f64| {
        // The window starts at 1000 / 20 = 50, far below the cap of 1000.
        let mut state = PolicyState::new(&mode, 1_000);
        let mut t = 0;
        while t <= 10_000 {
            // Always full, so it grows whenever it may.
            let load = state.window().ceil() as u64;
            state.decide(&mode, &origin(t, load, 0, p95, 0.0));
            t += tick_ms;
        }
        state.window()
    };
    assert_eq!(run(100, 100.0), run(1_000, 100.0));
    let grown = run(100, 100.0);
    assert!(
        grown > 100.0 && grown < 200.0,
        "eleven steps of a tenth: {grown}"
    );
    // Breaching: halves once a second at most (load at the window).
    assert_eq!(run(100, 900.0), run(1_000, 900.0));
}

/// Two nodes share the ticks (one node each, alternately): a tick a node
/// loses is forfeited, so together they admit the configured rate, not one
/// rate each.
#[test]
fn nodes_sharing_the_ticks_admit_one_rate_between_them() {
    let run = |mode: Mode, forfeit: bool| {
        let (mut a, mut b) = (
            PolicyState::new(&mode, 1_000_000),
            PolicyState::new(&mode, 1_000_000),
        );
        let mut admitted = 0;
        for tick in 0..100i64 {
            let now = tick * 100;
            let (winner, loser) = if tick % 2 == 0 {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            if forfeit {
                loser.forfeit(&mode, now);
            }
            let mut o = obs(now, 0, 0, 1_000_000);
            o.queue_length = 1_000_000;
            admitted += winner.decide(&mode, &o).admit;
        }
        admitted
    };
    // Ten every second for ten seconds.
    let batch = Mode::Batch {
        size: 10,
        interval_ms: 1_000,
    };
    assert_eq!(run(batch.clone(), true), 100);
    assert_eq!(
        run(batch, false),
        200,
        "without forfeits each node owes its own"
    );
    // Ten a second, with one six-second burst banked at the start.
    let continuous = Mode::Continuous {
        max_per_minute: 600,
    };
    let shared = run(continuous.clone(), true);
    assert!((150..=170).contains(&shared), "{shared}");
    assert!(
        run(continuous, false) > 250,
        "without forfeits each refills"
    );
}
