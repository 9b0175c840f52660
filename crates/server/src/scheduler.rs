//! Background work per event: the admission scheduler, the start of the
//! stats and revocation refresher (`refresh`), and the watcher that picks up
//! event changes made on other nodes.
//!
//! Architecture invariant: the scheduler never admits beyond `max_active`;
//! the store enforces the cap atomically as well, so two nodes ticking at
//! once cannot overshoot it, and `claim_tick` makes each tick run once
//! cluster-wide (`redis::two_gateway_nodes_racing_admit_never_double_admit`,
//! `redis::claim_tick_is_won_once_across_nodes` in the store's tests).

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::phase::phase;
use anteroom_core::policy::{Mode, Observed, PolicyState};
use anteroom_store::{AdmitRequest, EventId, ExpireRequest, StoreError};
use rand::RngCore;

use crate::config::{Admission, stored};
use crate::locks::lock;
use crate::metrics::timed_store;
use crate::state::admission::eta::Grid;
use crate::state::{AppState, EventRuntime};

/// The refresh of one event, also run by the admin API and tests.
pub use crate::refresh::refresh_once;

/// How often each node reads the stored tables' generation, which every
/// change on any node moves on (a deletion too): a forced delete through
/// another node must end the sessions here within the contract's 2 s, and
/// one number a second is all that costs.
const WATCH_GENERATION_EVERY: Duration = Duration::from_secs(1);
/// How often each node reads the stored tables whole, the generation
/// unmoved or not: a look that could not act on what it read (the store
/// failing between its reads) is made again.
const WATCH_CONFIGS_EVERY: Duration = Duration::from_secs(5);

/// Starts the background tasks of one event.
pub fn spawn_event(state: &Arc<AppState>, id: &EventId) {
    // Each task starts with the event's live state as it is now: one whose
    // first turn comes after the event was taken off the routes for a
    // moment (a delete whose store call then fails) waits for it, as for
    // an event it has seen, rather than end as if it never was.
    let seen = state.event(id).map(|rt| rt.live.clone());
    let mut tasks = lock(&state.tasks);
    // Drain mode: the drain task runs beside the scheduler and holds it while
    // drain admissions are not yet recorded in the store.
    tasks.spawn(crate::drain::supervise(
        state.clone(),
        id.clone(),
        seen.clone(),
        schedule(state.clone(), id.clone(), seen.clone()),
    ));
    tasks.spawn(crate::refresh::run(state.clone(), id.clone(), seen));
}

/// Starts every event's tasks and the config watcher.
pub fn spawn_all(state: &Arc<AppState>) {
    for id in &state.events().order {
        spawn_event(state, id);
    }
    lock(&state.tasks).spawn(watch_configs(state.clone()));
}

/// The core policy's mode for a configured admission.
pub fn mode(a: &Admission) -> Mode {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match a {
        Admission::Batch { size, interval } => Mode::Batch {
            size: *size,
            interval_ms: ms(*interval),
        },
        Admission::Continuous { max_per_minute } => Mode::Continuous {
            max_per_minute: *max_per_minute,
        },
        Admission::Capacity { target, .. } => Mode::Capacity { target: *target },
        Admission::Adaptive {
            target_p95,
            max_error_rate,
        } => Mode::Adaptive {
            target_p95_ms: target_p95.as_secs_f64() * 1000.0,
            max_error_rate: *max_error_rate,
        },
    }
}

/// The tick grid while visitors wait: a slot given back (a release, an
/// origin's `release` command, a session's end, a void token) is handed to
/// the next visitor within this much, so `max_active` stays nearly full. At
/// one tick a second a freed slot sat idle half a second on average, a third
/// of the capacity when visits last a second or two; at 100 ms the idle
/// slots were still 2–3 % of the capacity in the 100k rehearsal. A tick is
/// a handful of store calls per event, on the node that claims it.
pub const FAST_TICK: Duration = Duration::from_millis(50);

/// The tick rate while nobody waits: the expire sweep still frees ended
/// sessions, void tokens and idle waiters within a second, without a store
/// round twenty times a second for every idle event on every node.
pub const SLOW_TICK: Duration = Duration::from_secs(1);

/// The tick grid of an event: [`FAST_TICK`], or the batch interval when that
/// is shorter. Every node numbers ticks on the same grid of the store's
/// clock, so `claim_tick` gives each one to one node whatever rate each node
/// ticks at and whatever its own clock says. Batch cadence
/// is kept by the policy; between batches the ticks hand out what a batch
/// still owes as slots free.
pub fn tick_every(a: &Admission) -> Duration {
    a.tick().min(FAST_TICK).max(Duration::from_millis(1))
}

/// How often an event ticks: every tick of its grid while visitors wait
/// (a freed slot is handed on at once), else once a [`SLOW_TICK`], or at the
/// grid's next tick once somebody joins (`Live::arrivals`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    Fast,
    Slow,
}

/// The next tick on the grid of `grid_ms` after `now`: the next one at the
/// fast pace, else the first at or after the next [`SLOW_TICK`] boundary.
fn next_tick(now: i64, grid_ms: i64, pace: Pace) -> i64 {
    let next = now.div_euclid(grid_ms) + 1;
    if pace == Pace::Fast {
        return next;
    }
    let slow = i64::try_from(SLOW_TICK.as_millis()).unwrap_or(1000);
    let boundary = (now.div_euclid(slow) + 1) * slow;
    next.max(boundary.div_euclid(grid_ms) + i64::from(boundary % grid_ms != 0))
}

async fn schedule(state: Arc<AppState>, id: EventId, mut seen: Option<Arc<crate::state::Live>>) {
    let mut renewed: Option<tokio::time::Instant> = None;
    let mut measured: Option<tokio::time::Instant> = None;
    loop {
        let Some(rt) = state.event_for_task(&id, &mut seen).await else {
            return;
        };
        if measured.is_none_or(|at| at.elapsed() >= SLOW_TICK) {
            measured = Some(tokio::time::Instant::now());
            measure_clock(&state, &rt).await;
        }
        let offset_ms = lock(&rt.live.policy).store_offset_ms;
        let tick_ms = i64::try_from(tick_every(&rt.config.admission).as_millis())
            .unwrap_or(1000)
            .max(1);
        // Every node sees the queue through its refreshed snapshot (twice a
        // second), so all of them speed up and slow down together; the node
        // a visitor joins through wakes at once.
        let pace = if rt.live.stats_and_admin().0.waiting > 0 {
            Pace::Fast
        } else {
            Pace::Slow
        };
        let tick = match pace {
            Pace::Fast => until_tick(&state, offset_ms, tick_ms, Pace::Fast).await,
            // Somebody joined since (on this node): the queue is not idle
            // any more, whatever the snapshot says.
            Pace::Slow => tokio::select! {
                tick = until_tick(&state, offset_ms, tick_ms, Pace::Slow) => tick,
                () = rt.live.arrivals.notified() => until_tick(&state, offset_ms, tick_ms, Pace::Fast).await,
            },
        };
        let Some(rt) = state.event_for_task(&id, &mut seen).await else {
            return;
        };
        match tick_once(&state, &rt, u64::try_from(tick).unwrap_or(0), tick_ms).await {
            Ok(n) if n > 0 => tracing::debug!(event = %id, admitted = n, "admitted"),
            Ok(_) => {}
            Err(e) => tracing::warn!(event = %id, error = e.kind(), "admission tick failed"),
        }
        // Whoever won the tick: keep this node's drain reserve held, at the
        // slow rate (a store write per node, not per tick).
        if renewed.is_none_or(|at| at.elapsed() >= SLOW_TICK) {
            renewed = Some(tokio::time::Instant::now());
            crate::drain::share::renew(&state, &rt).await;
        }
    }
}

/// Tells the wait estimate what the batch under way still owes (known
/// where this node began it), after each tick that may have changed it.
fn tell_owed(rt: &EventRuntime, mode: &Mode, owed: Option<u64>) {
    if matches!(mode, Mode::Batch { .. }) {
        lock(&rt.live.admission.eta).set_owed(owed);
    }
}

/// How long a batch record is kept, and how often the node that began
/// the batch records it again while it goes on: were that node to stop
/// (a crash, a restart), nobody would pay what its batch owes until the
/// next, and a record kept on would tell the visitors it covers that they
/// go now, for up to an interval.
const OWED_KEPT_MS: u64 = 3_000;
const OWED_RECORDED_EVERY_MS: i64 = 1_000;

/// What the batch this node began owes, `(start_ms, owed)`, if that is
/// not what it last recorded, or was recorded a second ago or more.
fn owed_to_record(rt: &EventRuntime, now_ms: i64) -> Option<(i64, u64)> {
    let memory = lock(&rt.live.policy);
    let (start_ms, owed) = memory.state.as_ref().map(PolicyState::batch_progress)?;
    let record = (start_ms?, owed?);
    let fresh = memory.recorded_owed.is_some_and(|(last, at_ms)| {
        last == record && now_ms.saturating_sub(at_ms) < OWED_RECORDED_EVERY_MS
    });
    (!fresh).then_some(record)
}

/// Records in the store what the batch this node began still owes, when
/// that changed: the other nodes' wait estimates count it from there (read
/// at each refresh). Counted on one node only, a visitor beyond the free
/// slots was told the batch's time by that node and the slots' by the
/// others, and their estimate swung between the two from poll to poll. A
/// failed write is tried again at the next tick; the record is advice,
/// kept [`OWED_KEPT_MS`].
async fn record_owed(state: &AppState, rt: &EventRuntime, mode: &Mode) {
    if !matches!(mode, Mode::Batch { .. }) {
        return;
    }
    let now_ms = state.now_ms();
    let Some(record) = owed_to_record(rt, now_ms) else {
        return;
    };
    let write = state
        .store
        .set_batch_owed(rt.id(), record.0, record.1, OWED_KEPT_MS);
    if timed_store("batch_owed", write).await.is_ok() {
        lock(&rt.live.policy).recorded_owed = Some((record, now_ms));
    }
}

/// Measures the store's clock ([`measure_store_clock`]) and tells the
/// wait estimate the batch grid on it ([`publish_grid`]): once a second.
pub async fn measure_clock(state: &AppState, rt: &EventRuntime) {
    measure_store_clock(state, rt).await;
    publish_grid(rt);
}

/// The widest round trip whose clock reading is trusted as it is: off by
/// half of it at most, well within a tick claim's life (two ticks, 100 ms).
const CLOCK_SAMPLE_RTT_MS: i64 = 50;

/// Measures how far the store's clock runs ahead of this node's, once a
/// second (a store call per node, as the reserve's renewal). Every node
/// numbering ticks on its own clock let nodes whose clocks disagree by more
/// than a claim's life (two ticks, 100 ms) claim different numbers at the
/// same moment: each won every tick it tried and admitted a whole rate.
/// A reading is off by up to half its round trip: see [`weigh_reading`].
/// Kept as it was when the store does not answer (the tick fails then
/// anyway).
async fn measure_store_clock(state: &AppState, rt: &EventRuntime) {
    let before = state.now_ms();
    let Ok(store_us) = timed_store("now", state.store.now_us(rt.id())).await else {
        return;
    };
    let after = state.now_ms();
    let rtt = after.saturating_sub(before).max(0);
    let offset = store_us
        .div_euclid(1000)
        .saturating_sub(before.saturating_add(after) / 2);
    let mut memory = lock(&rt.live.policy);
    let (takes, trusted_rtt) = weigh_reading(memory.store_offset_rtt_ms, rtt);
    if takes {
        memory.store_offset_ms = offset;
    }
    memory.store_offset_rtt_ms = trusted_rtt;
}

/// Tells the wait estimate where this node's batches leave (the grid it
/// counts them on, with the clock offset just measured and the no-show
/// compensation learnt), so a visitor is never told sooner than their
/// batch. Once a second, as the clock is measured.
fn publish_grid(rt: &EventRuntime) {
    let grid = {
        let memory = lock(&rt.live.policy);
        let (last_start_ms, _) = memory
            .state
            .as_ref()
            .map_or((None, None), PolicyState::batch_progress);
        Grid {
            last_start_ms,
            anchor_ms: rt.anchor_us.div_euclid(1000),
            store_offset_ms: memory.store_offset_ms,
            tick_ms: i64::try_from(tick_every(&rt.config.admission).as_millis())
                .unwrap_or(1000)
                .max(1),
            compensation: memory.state.as_ref().map_or(1.0, PolicyState::compensation),
        }
    };
    lock(&rt.live.admission.eta).set_grid(grid);
}

/// Whether a clock reading whose round trip took `rtt_ms` replaces the one
/// kept (trusted for a round trip of `kept_rtt_ms`), and what the kept one
/// is trusted for afterwards. One that came back within
/// [`CLOCK_SAMPLE_RTT_MS`] always does, and so does the first. A slower
/// one (a store busy with a long script, this node stalled between its two
/// clock reads), whose offset may be off by more than a tick claim's life,
/// does only if it is within twice the kept one's; each one refused doubles
/// what the kept one counts for, so a single slow answer never moves the
/// grid, while a store that moved away for good (a failover to another
/// zone) is measured again within a few seconds.
fn weigh_reading(kept_rtt_ms: Option<i64>, rtt_ms: i64) -> (bool, Option<i64>) {
    match kept_rtt_ms {
        Some(kept) if rtt_ms > CLOCK_SAMPLE_RTT_MS && rtt_ms > kept.saturating_mul(2) => {
            (false, Some(kept.max(1).saturating_mul(2)))
        }
        _ => (true, Some(rtt_ms)),
    }
}

/// Waits for the next tick at `pace` on the store's clock (this node's,
/// moved on by `offset_ms`) and says which it is.
async fn until_tick(state: &AppState, offset_ms: i64, tick_ms: i64, pace: Pace) -> i64 {
    let now = state.now_ms().saturating_add(offset_ms);
    let tick = next_tick(now, tick_ms, pace);
    let wait = u64::try_from(tick * tick_ms - now).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    tick
}

/// One admission tick: claim → expire → learn outcomes → phase → observe →
/// decide → admit. Returns how many visitors were admitted.
///
/// The expire sweep and the no-show learning run on every claimed tick, also
/// while the event is paused, closed or has nobody to admit: an ending must
/// free its slot at the next tick whatever the admission state.
pub async fn tick_once(
    state: &AppState,
    rt: &EventRuntime,
    tick: u64,
    tick_ms: i64,
) -> Result<u64, StoreError> {
    let store = &state.store;
    let id = rt.id();
    let ttl = u64::try_from(tick_ms).unwrap_or(1000).saturating_mul(2);
    let full = is_full(tick, tick_ms);
    let previous_full = if full {
        lock(&rt.live.policy).last_full_attempt.replace(tick)
    } else {
        None
    };
    let started = std::time::Instant::now();
    // The claim and the reads the tick needs next (the store's clock, the
    // event's counts, its admin state) in one call: on Redis one round trip
    // before the tick decides, where a claim and then each read in turn
    // took four.
    let claimed = timed_store("claim_tick", store.claim_tick_and_read(id, tick, ttl)).await?;
    let Some(view) = claimed else {
        // Another node runs this tick: its batch and its share of the rate
        // are not this node's to hand out as well.
        let mode = mode(&rt.config.admission);
        let owed = {
            let mut memory = lock(&rt.live.policy);
            // On the store's clock, which the winner decided on.
            let now_ms = state.now_ms().saturating_add(memory.store_offset_ms);
            let policy = memory
                .state
                .get_or_insert_with(|| PolicyState::new(&mode, rt.config.max_active));
            policy.set_cadence_anchor(rt.anchor_us.div_euclid(1000));
            policy.adopt(&mode, rt.config.max_active);
            policy.forfeit(&mode, now_ms);
            policy.batch_progress().1
        };
        tell_owed(rt, &mode, owed);
        // Still this node's batch, whoever won the tick: its record must
        // not lapse while the node lives, losing ticks for seconds among
        // many nodes.
        record_owed(state, rt, &mode).await;
        return Ok(0);
    };
    let _timed = TickTimer { id, started };
    let mode = mode(&rt.config.admission);
    let (now_us, admin) = (view.now_us, view.admin);
    let stats = if full {
        // Less the drain that just ended, whose polls never reached the
        // store (see `DrainState::forgiven_idle_ms`).
        let forgiven_us = rt
            .live
            .drain
            .forgiven_idle_ms(state.now_ms())
            .saturating_mul(1000);
        let idle_us = micros(rt.config.queue_idle_timeout).saturating_add(forgiven_us);
        // The counts read again after the sweep, in its last call: they
        // count the slots the sweep freed.
        let (expired, stats) = timed_store(
            "expire",
            store.expire_and_stats(
                id,
                &ExpireRequest {
                    waiting_seen_before_us: now_us.saturating_sub(idle_us),
                },
            ),
        )
        .await?;
        // On this node's clock, as the rest of the feed: stamped with the
        // store's, a store running ahead put the count in a bucket in the
        // feed's future, where every admission after it piled up unseen
        // until the node's clock caught up.
        lock(&rt.live.admission.eta).record_abandoned(state.now_ms(), expired.idle_waiters);
        learn_outcomes(rt, &mode, tick, previous_full, &stats, &expired);
        stats
    } else {
        view.stats
    };
    let now_ms = now_us.div_euclid(1000);
    let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
    if !phase(now_ms, rt.config.opens_at_ms, pre_window, admin).admits() {
        return Ok(0);
    }
    let mut observed = Observed {
        now_ms,
        active: stats.active,
        outstanding: stats.outstanding,
        max_active: rt.config.max_active,
        queue_length: stats.waiting,
        ..Observed::default()
    };
    // The gate stamps its origin samples with this node's clock: the
    // window that summarises them is counted on it too, or a node whose
    // clock lags the store's by the window would see none of them.
    crate::admission::observe_origin(rt, state.now_ms(), &mut observed).await;
    let anchor_ms = rt.anchor_us.div_euclid(1000);
    // A batch this tick would begin is claimed first, so a refused or failed
    // claim leaves nothing half begun: refused, the batch is forfeited like
    // a lost tick's; failed, the next tick tries it again.
    let due = {
        let mut memory = lock(&rt.live.policy);
        let policy = memory
            .state
            .get_or_insert_with(|| PolicyState::new(&mode, rt.config.max_active));
        policy.set_cadence_anchor(anchor_ms);
        policy.batch_due_start(&mode, now_ms)
    };
    if let (Some(start_ms), Mode::Batch { interval_ms, .. }) = (due, &mode)
        && !claim_batch(state, rt, anchor_ms, start_ms, *interval_ms).await?
    {
        let owed = lock(&rt.live.policy).state.as_mut().and_then(|policy| {
            policy.adopt(&mode, rt.config.max_active);
            policy.forfeit(&mode, now_ms);
            policy.batch_progress().1
        });
        tell_owed(rt, &mode, owed);
        return Ok(0);
    }
    let (decision, owed) = {
        let mut memory = lock(&rt.live.policy);
        let policy = memory
            .state
            .get_or_insert_with(|| PolicyState::new(&mode, rt.config.max_active));
        let decision = policy.decide(&mode, &observed);
        let event = id.to_string();
        metrics::gauge!("anteroom_admission_no_show_rate", "event" => event.clone())
            .set(policy.no_show_rate());
        if matches!(mode, Mode::Adaptive { .. }) {
            metrics::gauge!("anteroom_admission_window", "event" => event).set(policy.window());
        }
        (decision, policy.batch_progress().1)
    };
    tracing::trace!(event = %id, admit = decision.admit, reason = decision.reason, "decided");
    if decision.admit == 0 {
        tell_owed(rt, &mode, owed);
        record_owed(state, rt, &mode).await;
        return Ok(0);
    }
    let nonces = (0..decision.admit.min(10_000))
        .map(|_| {
            let mut n = [0u8; 16];
            rand::rng().fill_bytes(&mut n);
            n
        })
        .collect::<Vec<_>>();
    let request = AdmitRequest {
        max: nonces.len() as u64,
        max_active: rt.config.max_active,
        nonces,
        // The store stamps the expiry at its pop: `now_us` is older by the
        // round trips above, and another node may have admitted in between.
        token_ttl_us: micros(rt.config.token_ttl),
    };
    // With several nodes the admission stays out of the others' holds.
    let admitted = crate::drain::share::admit(state, rt, &request).await?.len() as u64;
    // Summed over the ticks of a second, reported at its full tick.
    {
        let mut memory = lock(&rt.live.policy);
        memory.last_admitted = memory.last_admitted.saturating_add(admitted);
    }
    // The ETA maps ranks onto admissions: tell it before the next snapshot.
    // With what the batch still owes, in one step: told first, a visitor
    // these admissions took the free slots from read as covered and owed,
    // "almost there", until they were noted.
    {
        let mut feed = lock(&rt.live.admission.eta);
        feed.note_admitted(state.now_ms(), admitted);
        if matches!(mode, Mode::Batch { .. }) {
            feed.set_owed(owed);
        }
    }
    if admitted > 0 {
        // Streamed visitors hear now, not at the hub's next tick.
        state.push.kick(id);
    }
    // After the kick: the record is for other nodes' estimates, which no
    // admitted visitor should wait for.
    record_owed(state, rt, &mode).await;
    Ok(admitted)
}

/// Batch claims share the tick guard with the ticks, above every tick
/// number (a tick number is milliseconds since the epoch over the grid).
const BATCH_CLAIMS: u64 = 1 << 62;

/// Claims the batch starting at `start_ms` for this node: `true` for one
/// node per batch. The ticks a node wins are not enough: a node that did not
/// try the tick on which another node began a batch (its own last tick ran
/// long) never forfeited it, and began it again on the next tick it won.
/// Once a batch, so one store call an interval.
async fn claim_batch(
    state: &AppState,
    rt: &EventRuntime,
    anchor_ms: i64,
    start_ms: i64,
    interval_ms: u64,
) -> Result<bool, StoreError> {
    if interval_ms == 0 {
        // A batch every tick: the tick's own claim is the batch's.
        return Ok(true);
    }
    // Named by its start on the grid (ms from the anchor), which every node
    // computes alike; unlike its index, never reused after a live change of
    // the interval.
    let number = start_ms.saturating_sub(anchor_ms);
    let claim = BATCH_CLAIMS | (number as u64 & (BATCH_CLAIMS - 1));
    // Held past the batch's interval, so a late node cannot claim it again.
    let ttl = interval_ms.saturating_mul(2).max(1000);
    timed_store("claim_tick", state.store.claim_tick(rt.id(), claim, ttl)).await
}

/// Records a won tick's time, from its claim to its last store call,
/// however it ends: a tick that takes most of the tick interval (a slow
/// store, round trips to a distant one) delays every admission behind it.
struct TickTimer<'a> {
    id: &'a EventId,
    started: std::time::Instant,
}

impl Drop for TickTimer<'_> {
    fn drop(&mut self) {
        metrics::histogram!("anteroom_admission_tick_seconds", "event" => self.id.to_string())
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// Whether `tick` is the first of its second on the grid of `tick_ms`: the
/// tick that also sweeps (idle waiters, void tokens, ended sessions) and
/// teaches the policy its no-shows. The sweep walks every waiter, so it runs
/// once a second as it always did; a release frees its slot in the store at
/// once, so the ticks between only refill. Every node computes the same
/// from the tick number.
pub fn is_full(tick: u64, tick_ms: i64) -> bool {
    let ms = u64::try_from(tick_ms.max(1)).unwrap_or(1);
    let second = |t: u64| t.saturating_mul(ms) / 1_000;
    tick == 0 || second(tick) != second(tick - 1)
}

/// Feeds no-show compensation: redemptions (from `redeemed_total`) and
/// unredeemed tokens expired by this tick's sweep, once a second (full ticks
/// only). Both are counted only when this node also ran the full tick before,
/// so they cover the same second; with several nodes each learns from its
/// runs of full ticks won in a row, which keeps the learnt share unbiased.
fn learn_outcomes(
    rt: &EventRuntime,
    mode: &Mode,
    tick: u64,
    previous_full: Option<u64>,
    stats: &anteroom_store::EventStats,
    expired: &anteroom_store::Expired,
) {
    let mut memory = lock(&rt.live.policy);
    let consecutive = memory.last_tick.is_some() && memory.last_tick == previous_full;
    let redeemed = memory
        .last_redeemed_total
        .map_or(0, |last| stats.redeemed_total.saturating_sub(last));
    let admitted = std::mem::take(&mut memory.last_admitted);
    memory.last_redeemed_total = Some(stats.redeemed_total);
    memory.last_tick = Some(tick);
    let policy = memory
        .state
        .get_or_insert_with(|| PolicyState::new(mode, rt.config.max_active));
    if consecutive {
        policy.record_outcome(admitted, redeemed, expired.unredeemed_tokens);
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

async fn watch_configs(state: Arc<AppState>) {
    let mut every = tokio::time::interval(WATCH_GENERATION_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refusals = Refusals::shown_in(state.refusals.clone());
    // The generation and time of the last whole look.
    let mut looked: Option<(u64, tokio::time::Instant)> = None;
    loop {
        every.tick().await;
        if let Some((generation, at)) = looked
            && at.elapsed() < WATCH_CONFIGS_EVERY
        {
            // Unmoved, or the store not answering (a whole look would
            // fail as well): nothing to read yet.
            match state.store.config_generation().await {
                Ok(now) if now != generation => {}
                _ => continue,
            }
        }
        if let Some(look) = Look::read(&state).await {
            looked = Some((look.set.generation, tokio::time::Instant::now()));
            look.take_up(&state, &mut refusals).await;
        }
    }
}

/// One look of the watch at the stored tables, taken in turn with this
/// node's own admin writes. A look is a read, then acts on what it read; a
/// change this node made in between would be undone by it: a `PATCH` put
/// back for a few seconds, an event just deleted run again (its tasks
/// writing into the store that forgot it), one just re-created taken off
/// the routes. Holding the admin writes' lock from the read to the last
/// act makes every look see all or none of each change this node makes;
/// other nodes' changes come through the store, and a look older than
/// one of theirs is corrected by the next.
pub(crate) struct Look<'a> {
    _turn: tokio::sync::MutexGuard<'a, ()>,
    set: stored::DocSet,
}

impl<'a> Look<'a> {
    /// The stored tables, read in this node's admin writes' turn; `None`
    /// when the store did not answer.
    pub(crate) async fn read(state: &'a AppState) -> Option<Self> {
        let turn = state.admin_writes.lock().await;
        let set = stored::read_docs(state.store.as_ref()).await.ok()?;
        Some(Self { _turn: turn, set })
    }

    /// Runs here what the look read: other nodes' creations, changes and
    /// deletions, each refused while it does not validate on this node.
    pub(crate) async fn take_up(self, state: &Arc<AppState>, refusals: &mut Refusals) {
        refusals.now_ms = state.now_ms();
        let set = &self.set;
        for u in &set.unreadable {
            // The node goes on with what it runs of that event, if
            // anything (a newer version's key, say, during a rolling
            // upgrade).
            if refusals.refused(&u.id, Refused::Unreadable(&u.json), &u.error) {
                tracing::warn!(event = %u.id, error = %u.error, "stored event config ignored: this node cannot read it");
            }
        }
        let docs = &set.docs;
        for (id, doc) in docs {
            if doc.deleted {
                refusals.cleared(id);
                // Deleted through another node: its tasks here end at their next turn.
                if let Some(rt) = state.remove_event(id) {
                    rt.live.delete();
                    tracing::info!(event = %id, "event deleted on another node; stopped here");
                }
                continue;
            }
            let created_us = doc.created_floor();
            let Some(raw) = &doc.event else {
                // No table stored (only the file's base): nothing refused.
                refusals.cleared(id);
                // But a creation may be (a file table started again after a
                // deletion, on a node that restarted): the table this node
                // runs is that event now, with the new event's anchor (the
                // deletion made the store forget the old one).
                if let Some(rt) = state.event(id).filter(|rt| rt.created_us < created_us)
                    && let Some(anchor_us) = anchor_of(state, &rt.config, doc).await
                {
                    let times = stored::EventTimes {
                        anchor_us,
                        created_us,
                    };
                    if let Err(e) = state.upsert_event(rt.config.clone(), times) {
                        tracing::warn!(event = %id, error = %e, "event created again elsewhere not taken up");
                    }
                }
                continue;
            };
            // The same table created again (deleted and made anew between
            // two looks) is a change too: its sessions start over.
            if state
                .event(id)
                .is_some_and(|rt| rt.config.raw == *raw && rt.created_us >= created_us)
            {
                refusals.cleared(id);
                continue;
            }
            let config = match crate::config::event_from_raw(&format!("stored event {id}"), raw) {
                Ok(config) => config,
                Err(e) => {
                    // A table this node cannot run (a key file missing
                    // here, say) while another node runs it.
                    if refusals.refused(id, Refused::Table(raw), &e.to_string()) {
                        tracing::warn!(event = %id, error = %e, "stored event change not applied: its table does not validate on this node");
                    }
                    continue;
                }
            };
            // Checked beside this node's other events too: a table that
            // claims one of their paths (config files that differ between
            // nodes) is refused here, not run as a second event on that path.
            if let Some(taken) = path_held_by_another(state, &config) {
                let why = format!("path {} is protected by event {} here", taken.0, taken.1);
                if refusals.refused(id, Refused::Table(raw), &why) {
                    tracing::warn!(event = %id, path = %taken.0, by = %taken.1, "stored event change not applied: another event of this node protects that path");
                }
                continue;
            }
            let Some(anchor) = anchor_of(state, &config, doc).await else {
                continue;
            };
            let times = stored::EventTimes {
                anchor_us: anchor,
                created_us,
            };
            match state.upsert_event(config, times) {
                Ok(new) => {
                    if refusals.cleared(id) {
                        tracing::info!(event = %id, "stored event change applied after all");
                    }
                    if new {
                        spawn_event(state, id);
                    }
                }
                Err(e) => {
                    if refusals.refused(id, Refused::Table(raw), &format!("{e:#}")) {
                        tracing::warn!(event = %id, error = %e, "stored event change not applied");
                    }
                }
            }
        }
        // A refused table removed from the store stands refused no more.
        refusals
            .keep_only(|id| docs.contains_key(id) || set.unreadable.iter().any(|u| u.id == *id));
    }
}

/// The anchor of an event run from its stored document `doc`: its opening
/// time, or the document's, or the store's (a document stored by a node
/// that had not fixed it yet; an anchor of 0 would put every arrival at the
/// clamped top score, in no order at all). `None`, logged, while the store
/// does not give it.
async fn anchor_of(
    state: &AppState,
    config: &crate::config::EventConfig,
    doc: &stored::StoredEvent,
) -> Option<i64> {
    if let Some(ms) = config.opens_at_ms {
        return Some(ms.saturating_mul(1000));
    }
    if let Some(anchor) = doc.anchor_us {
        return Some(anchor);
    }
    match state.store.anchor_us(&config.id).await {
        Ok(anchor) => Some(anchor),
        Err(e) => {
            tracing::warn!(event = %config.id, error = %e, "stored event change not applied yet: the store did not give its anchor");
            None
        }
    }
}

/// The stored event tables this node refuses to run (or cannot read at
/// all), each with what was refused and why. The watch looks at the store
/// every few seconds, and a refusal lasts as long as the nodes' config or
/// key files (or versions) disagree: a log line each time would bury
/// everything else, so one is written per table and reason, and
/// `anteroom_stored_event_refused{event}` shows the refusal while it lasts
/// (1), and its end (0); `GET /admin/refusals` lists each with its reason.
#[derive(Default)]
pub(crate) struct Refusals {
    kept: std::collections::HashMap<EventId, (RefusedOwned, String)>,
    /// What the admin API shows: each refusal's reason and its start.
    shown: Arc<std::sync::Mutex<crate::state::Refusals>>,
    /// The time of the watch under way, which dates a new refusal.
    now_ms: i64,
}

/// What was refused: a table, or a document this node cannot read at all.
#[derive(Clone, Copy)]
enum Refused<'a> {
    Table(&'a crate::config::RawEvent),
    Unreadable(&'a str),
}

/// A [`Refused`] as kept between watches.
enum RefusedOwned {
    Table(Box<crate::config::RawEvent>),
    Unreadable(String),
}

impl Refused<'_> {
    fn is(self, owned: &RefusedOwned) -> bool {
        match (self, owned) {
            (Self::Table(a), RefusedOwned::Table(b)) => *a == **b,
            (Self::Unreadable(a), RefusedOwned::Unreadable(b)) => a == b,
            _ => false,
        }
    }

    fn kept(self) -> RefusedOwned {
        match self {
            Self::Table(t) => RefusedOwned::Table(Box::new(t.clone())),
            Self::Unreadable(j) => RefusedOwned::Unreadable(j.to_owned()),
        }
    }
}

impl Refusals {
    fn shown_in(shown: Arc<std::sync::Mutex<crate::state::Refusals>>) -> Self {
        Self {
            shown,
            ..Self::default()
        }
    }

    /// Notes that `id`'s stored table (or unreadable document) `what` was
    /// refused for `why`; true when that is news (a refusal of another
    /// table, or for another reason).
    fn refused(&mut self, id: &EventId, what: Refused<'_>, why: &str) -> bool {
        if self
            .kept
            .get(id)
            .is_some_and(|(r, w)| what.is(r) && w.as_str() == why)
        {
            return false;
        }
        self.kept.insert(id.clone(), (what.kept(), why.to_owned()));
        let shown = crate::state::Refusal {
            reason: why.to_owned(),
            since_ms: self.now_ms,
        };
        lock(&self.shown).insert(id.clone(), shown);
        refused_gauge(id, 1.0);
        true
    }

    /// Notes that `id`'s stored table is refused no more (it runs, or was
    /// deleted); true when it had been.
    fn cleared(&mut self, id: &EventId) -> bool {
        let was = self.kept.remove(id).is_some();
        if was {
            lock(&self.shown).remove(id);
            refused_gauge(id, 0.0);
        }
        was
    }

    fn keep_only(&mut self, keep: impl Fn(&EventId) -> bool) {
        let gone: Vec<EventId> = self.kept.keys().filter(|id| !keep(id)).cloned().collect();
        for id in gone {
            self.cleared(&id);
        }
    }
}

fn refused_gauge(id: &EventId, value: f64) {
    metrics::gauge!("anteroom_stored_event_refused", "event" => id.to_string()).set(value);
}

/// A path of `config` that another event this node runs already protects,
/// with that event; by the config file's rule, from the events as this node
/// validated them (no secret file is read again).
fn path_held_by_another(
    state: &AppState,
    config: &crate::config::EventConfig,
) -> Option<(String, EventId)> {
    let key = |p: &str| crate::config::path_key(p).ok();
    let events = state.events();
    for p in &config.paths {
        let Some(mine) = key(p) else { continue };
        for rt in events.iter().filter(|rt| *rt.id() != config.id) {
            if rt
                .config
                .paths
                .iter()
                .any(|q| key(q).as_ref() == Some(&mine))
            {
                return Some((p.clone(), rt.id().clone()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_clock_reading_moves_the_tick_grid_only_when_the_store_moved_away() {
        // The first reading is taken whatever it took, fast ones always.
        assert_eq!(weigh_reading(None, 400), (true, Some(400)));
        assert_eq!(weigh_reading(Some(400), 50), (true, Some(50)));
        // One slow answer after fast ones is refused: its offset may be off
        // by more than a tick claim's life. The next fast one is taken.
        assert_eq!(weigh_reading(Some(1), 300), (false, Some(2)));
        assert_eq!(weigh_reading(Some(2), 1), (true, Some(1)));
        // A store that is simply far away is measured.
        assert_eq!(weigh_reading(Some(80), 120), (true, Some(120)));
        // One that moved away for good (60 ms from 0 ms): refused five
        // times, taken the sixth second.
        let mut kept = Some(0);
        let mut refused = 0;
        for _ in 0..20 {
            let (takes, next) = weigh_reading(kept, 60);
            kept = next;
            if takes {
                break;
            }
            refused += 1;
        }
        assert_eq!((refused, kept), (5, Some(60)));
    }

    #[test]
    fn ticks_follow_the_grid_while_visitors_wait_and_the_second_otherwise() {
        // Waiting: the next grid tick.
        assert_eq!(next_tick(1_234, 100, Pace::Fast), 13);
        assert_eq!(next_tick(1_200, 100, Pace::Fast), 13);
        // Nobody waiting: the first grid tick at or after the next second,
        // numbered on the same grid so every node claims the same ticks.
        assert_eq!(next_tick(1_234, 100, Pace::Slow), 20);
        assert_eq!(next_tick(1_999, 100, Pace::Slow), 20);
        assert_eq!(next_tick(2_000, 100, Pace::Slow), 30);
        // A batch grid that does not divide the second rounds up to it
        // (tick 67 starts at 2010 ms, tick 66 at 1980 ms).
        assert_eq!(next_tick(1_234, 30, Pace::Slow), 67);
    }

    #[test]
    fn the_first_tick_of_each_second_is_the_full_one() {
        // 100 ms grid: ticks 10, 20, … start a second.
        assert!(is_full(20, 100));
        assert!(!is_full(21, 100));
        assert!(!is_full(29, 100));
        assert_eq!((0..100).filter(|t| is_full(*t, 100)).count(), 10);
        // 30 ms grid: tick 67 (2010 ms) is the first of second 2.
        assert!(is_full(67, 30));
        assert!(!is_full(66, 30));
        // The slow cadence lands on full ticks only.
        for now in [1_234, 1_999, 2_000, 5_555] {
            assert!(is_full(
                u64::try_from(next_tick(now, 100, Pace::Slow)).unwrap(),
                100
            ));
            assert!(is_full(
                u64::try_from(next_tick(now, 30, Pace::Slow)).unwrap(),
                30
            ));
        }
    }

    #[test]
    fn a_refusal_is_news_once_per_table_and_reason() {
        let (a, b) = (EventId::new("a").unwrap(), EventId::new("b").unwrap());
        let (x, y) = (table("x"), table("y"));
        let (x, y) = (Refused::Table(&x), Refused::Table(&y));
        let mut refusals = Refusals::default();
        assert!(refusals.refused(&a, x, "path /p/ taken"));
        // The next watches find the same refusal: nothing new to log.
        assert!(!refusals.refused(&a, x, "path /p/ taken"));
        // Another reason, or another table, is news.
        assert!(refusals.refused(&a, x, "cannot read key"));
        assert!(refusals.refused(&a, y, "cannot read key"));
        assert!(refusals.refused(&b, y, "cannot read key"));
        // A document that does not parse: news once per text.
        let unknown = Refused::Unreadable(r#"{"event":{"later":1}}"#);
        assert!(refusals.refused(&b, unknown, "unknown field `later`"));
        assert!(!refusals.refused(&b, unknown, "unknown field `later`"));
        let other = Refused::Unreadable(r#"{"event":{"later":2}}"#);
        assert!(refusals.refused(&b, other, "unknown field `later`"));
        // The admin API shows the latest reason of each, dated by the watch
        // that found it.
        let shown = |r: &Refusals| {
            lock(&r.shown)
                .iter()
                .map(|(id, r)| (id.to_string(), r.reason.clone(), r.since_ms))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shown(&refusals),
            [
                ("a".into(), "cannot read key".into(), 0),
                ("b".into(), "unknown field `later`".into(), 0)
            ]
        );
        // Applied (or deleted): cleared once, and a later refusal is news.
        assert!(refusals.cleared(&a));
        assert!(!refusals.cleared(&a));
        refusals.now_ms = 5_000;
        assert!(refusals.refused(&a, y, "cannot read key"));
        assert_eq!(
            shown(&refusals)[0],
            ("a".into(), "cannot read key".into(), 5_000)
        );
        // Tables gone from the store stand refused no more.
        refusals.keep_only(|id| *id == a);
        assert!(!refusals.cleared(&b));
        assert_eq!(shown(&refusals).len(), 1);
        assert!(refusals.cleared(&a));
        assert_eq!(shown(&refusals), []);
    }

    fn table(origin: &str) -> crate::config::RawEvent {
        crate::config::RawEvent {
            origin: Some(origin.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn the_grid_is_the_fast_tick_or_a_shorter_batch_interval() {
        let continuous = Admission::Continuous { max_per_minute: 60 };
        assert_eq!(tick_every(&continuous), FAST_TICK);
        let slow_batch = Admission::Batch {
            size: 10,
            interval: Duration::from_secs(5),
        };
        assert_eq!(tick_every(&slow_batch), FAST_TICK);
        let fast_batch = Admission::Batch {
            size: 1,
            interval: Duration::from_millis(20),
        };
        assert_eq!(tick_every(&fast_batch), Duration::from_millis(20));
    }
}
