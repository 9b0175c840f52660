//! The admission rate behind every visitor's ETA, learnt on every node.
//!
//! Each node feeds its own [`AdmissionHistory`] from the stats snapshot it
//! refreshes every ~500 ms (the growth of `admitted_total`), so nodes that
//! never win `claim_tick` know the rate as well as the one that admits.
//! Waiting visitors who idle out (churn) are known only to the node that ran
//! the expire sweep; elsewhere churn counts as zero, the conservative side.
//!
//! Honesty rule: an estimate shown to a visitor should not jump up while the
//! admission rate is steady. Where the measured rate is used (see below),
//! batch admission makes the one-minute rate a sawtooth (a batch enters or
//! leaves the window), which would make a
//! visitor's ETA rise between two polls. So the published rate is smoothed —
//! it follows a rising rate within seconds ([`RISE_TAU_MS`]) but a falling
//! one over half a minute ([`FALL_TAU_MS`]) — and only republished when it
//! moved by more than [`DEADBAND`] (5 %: batch admission swings the blended one-minute rate by about 6 %). No per-visitor state is kept.
//!
//! The rate the queue moves at: the policy's rate while slots are free, the
//! turnover of `max_active` once they are full, whichever is lower
//! ([`eta::queue_rate`]). The turnover is `slots / holding time`, the holding
//! time learnt from the admitted and freed counts ([`eta::Turnover`]), so it
//! holds from a burst's first minute as well as hours in, and does not
//! confuse a queue that is short (admissions follow arrivals) with one that is
//! slow. The estimate is the longer of the policy's wait and the slots' own
//! wait (the wave a visitor belongs to: [`eta::Turnover::slot_wait_ms`]),
//! buffered, plus the poll that sees the admission
//! ([`eta::estimate_in_slots`]). A measured admission rate serves only where
//! that model cannot be made: adaptive mode (no configured rate, a moving window) and a node that
//! started mid-event, until slots admitted under its watch turn over.
//!
//! Flash crowds: the first estimates of a burst are made before any session
//! has ended, when the holding time is unknown. Nothing known bounds it
//! honestly then (a session may last until `session_ttl`, tens of times the
//! usual visit), so visitors beyond the free slots get no estimate
//! ("calculating…") until most of the first generation of slots has turned
//! over; those the free slots cover get the policy's rate at once. A slot is
//! freed by `token_ttl + session_ttl` at the latest, so the wait for a number
//! is bounded.

use anteroom_core::eta::{self, AdmissionHistory, Estimate, RATE_1M_MS, Turnover};
use anteroom_core::policy;
use anteroom_store::EventStats;

use crate::config::{Admission, EventConfig};

/// Time constant of the smoothed rate while the raw rate rises.
pub const RISE_TAU_MS: f64 = 5_000.0;
/// Time constant while it falls: slow, so a sawtooth does not reach visitors.
pub const FALL_TAU_MS: f64 = 30_000.0;
/// The published rate changes only when the smoothed one moved this much.
pub const DEADBAND: f64 = 0.05;
/// Until the history spans this long, the store's own 1 min / 5 min windows
/// (which survive a node restart) and the rate since the first admission
/// may raise the measured rate.
const YOUNG_MS: i64 = 60_000;
/// The rate since the first admission is measured over at least this long:
/// long enough that a first burst does not read as the steady rate.
const FIRST_SPAN_MS: i64 = 10_000;

/// What the event's admission mode plans to admit, from its configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Plan {
    /// Visitors per second the mode admits while slots are free: batch size
    /// over its interval, or continuous mode's `max_per_minute` / 60. `None`
    /// where the mode has no configured rate (capacity, adaptive).
    pub admit_per_s: Option<f64>,
    /// How many sessions may run at once: `max_active`, or capacity mode's
    /// `target` when lower. Zero where unknown (adaptive: its window moves).
    pub slots: u64,
    /// Batch mode's size and interval (ms): its batches leave on the
    /// scheduler's grid ([`Grid`]), not spread over their interval.
    pub batch: Option<(u64, u64)>,
}

/// Where the scheduler's batches leave, as this node knows it: on the
/// interval's grid from the event's anchor, at the first tick (of
/// `tick_ms`) at or after each start, all on the store's clock (this
/// node's, moved on by the offset it measured); and the no-show
/// compensation that makes a batch of `size` owe more admissions.
///
/// And when this node's policy began its last batch (`last_start_ms`, on
/// the store's clock): after a live change of the interval the next batch
/// is due an interval after it, later than the new grid's next start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    pub anchor_ms: i64,
    pub store_offset_ms: i64,
    pub tick_ms: i64,
    pub compensation: f64,
    pub last_start_ms: Option<i64>,
}

impl Grid {
    /// When the next batch leaves after `store_now_ms`, on the store's
    /// clock: the current period's, if its tick has not come yet.
    fn next_batch_ms(&self, interval_ms: u64, store_now_ms: i64) -> i64 {
        let on_tick = |t: i64| {
            let tick = self.tick_ms.max(1);
            t.div_euclid(tick)
                .saturating_add(i64::from(t.rem_euclid(tick) != 0))
                .saturating_mul(tick)
        };
        let interval = i64::try_from(interval_ms).unwrap_or(i64::MAX);
        let started = policy::batch_grid_start(self.anchor_ms, interval_ms, store_now_ms);
        let current = on_tick(started);
        let next = if store_now_ms < current {
            current
        } else {
            on_tick(started.saturating_add(interval))
        };
        match self.last_start_ms {
            Some(last) => next.max(on_tick(last.saturating_add(interval))),
            None => next,
        }
    }
}

impl Plan {
    pub fn of(config: &EventConfig) -> Self {
        let max_active = config.max_active;
        match &config.admission {
            Admission::Batch { size, interval } => {
                let secs = interval.as_secs_f64();
                let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
                Plan {
                    admit_per_s: (secs > 0.0).then(|| *size as f64 / secs),
                    slots: max_active,
                    batch: (*size > 0 && interval_ms > 0).then_some((*size, interval_ms)),
                }
            }
            Admission::Continuous { max_per_minute } => Plan {
                admit_per_s: Some(*max_per_minute as f64 / 60.0),
                slots: max_active,
                batch: None,
            },
            Admission::Capacity { target, .. } => Plan {
                admit_per_s: None,
                slots: (*target).min(max_active),
                batch: None,
            },
            Admission::Adaptive { .. } => Plan::default(),
        }
    }
}

/// A batch-mode visitor's wait on the scheduler's grid: exact where only
/// the batches stand in the way, at least that where the slots may too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchWait {
    Exact(u64),
    AtLeast(u64),
}

/// One event's rate learning on this node.
#[derive(Debug, Default)]
pub struct EtaFeed {
    history: AdmissionHistory,
    turnover: Turnover,
    plan: Plan,
    /// The scheduler's batch grid, once it told it (see [`Grid`]).
    grid: Option<Grid>,
    /// What the batch under way still owes, where this node began it.
    owed: Option<u64>,
    /// What the node that began the last batch recorded in the store it
    /// still owes, with the batch's start (the store's clock, ms): how a
    /// node that did not begin it counts it alike.
    shared_owed: Option<(i64, u64)>,
    /// When this node first saw an admission, and how many it saw since.
    first_admission: Option<(i64, u64)>,
    last_admitted_total: Option<u64>,
    smoothed: Option<(f64, i64)>,
    published: Option<f64>,
    /// Since when (this node's ms) the event admits nobody by decision
    /// (paused, closed, not yet open), and how long it stood so before: the
    /// measured rate's clock ([`Self::rate_ms`]) leaves those times out.
    halted_since: Option<i64>,
    halted_ms: i64,
}

impl EtaFeed {
    /// Sets what the admission mode plans (the configuration can change live).
    pub fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    /// Sets where the scheduler's batches begin (the store's clock offset
    /// is measured again every second, the compensation learnt).
    pub fn set_grid(&mut self, grid: Grid) {
        self.grid = Some(grid);
    }

    /// Sets what the batch under way still owes: known where this node
    /// began it (each of its ticks tells), `None` where another node did.
    pub fn set_owed(&mut self, owed: Option<u64>) {
        self.owed = owed;
    }

    /// Sets what the store says the last batch still owes, `(start_ms,
    /// owed)` (read every refresh): counted where this node did not begin
    /// the batch under way, once it is that batch's.
    pub fn set_shared_owed(&mut self, record: Option<(i64, u64)>) {
        self.shared_owed = record;
    }

    /// Whether the event admits now (open, not paused or closed), as of
    /// `now_ms`. While it does not, the measured rate's clock stands still:
    /// a pause is no evidence of how fast the queue moves, and measured
    /// through it the rate fell toward zero: after a pause of minutes the
    /// visitors near the front were told hours, and went on being told
    /// too much while the rate climbed back.
    pub fn set_admitting(&mut self, now_ms: i64, admitting: bool) {
        match (admitting, self.halted_since) {
            (false, None) => self.halted_since = Some(now_ms),
            (true, Some(since)) => {
                self.halted_ms = self
                    .halted_ms
                    .saturating_add(now_ms.saturating_sub(since).max(0));
                self.halted_since = None;
            }
            _ => {}
        }
    }

    /// `now_ms` on the measured rate's clock: this node's, less the times
    /// the event admitted nobody by decision ([`Self::set_admitting`]).
    fn rate_ms(&self, now_ms: i64) -> i64 {
        let halted_now = self
            .halted_since
            .map_or(0, |since| now_ms.saturating_sub(since).max(0));
        now_ms
            .saturating_sub(self.halted_ms)
            .saturating_sub(halted_now)
    }

    /// Learns from one stats snapshot taken at `now_ms`.
    pub fn observe(&mut self, now_ms: i64, stats: &EventStats) {
        let rate_ms = self.rate_ms(now_ms);
        let admitted = match self.last_admitted_total {
            // A smaller total means the store was reset: start over from it.
            Some(last) if stats.admitted_total >= last => stats.admitted_total - last,
            _ => 0,
        };
        self.last_admitted_total = Some(stats.admitted_total);
        self.history.record(rate_ms, admitted, 0);
        self.turnover.record(
            now_ms,
            stats.admitted_total,
            stats.active.saturating_add(stats.outstanding),
        );
        if let Some((_, seen)) = &mut self.first_admission {
            *seen = seen.saturating_add(admitted);
        } else if admitted > 0 {
            self.first_admission = Some((rate_ms, admitted));
        }
        if self.plan.slots > 0 {
            let model = eta::queue_rate(
                self.plan.admit_per_s,
                self.plan.slots,
                self.turnover.holding_ms(),
            );
            if let Some(rate) = model {
                // Configuration and an intrinsic length, not a sawtooth:
                // no smoothing, only the deadband against jitter.
                self.smoothed = Some((rate, now_ms));
                self.publish(rate);
                return;
            }
            if self.turnover.watched_from_start() {
                // Slots that may bind at a rate nobody knows yet: no figure
                // rather than a guess (visitors the free slots cover still
                // get one, see `estimate`).
                self.published = None;
                return;
            }
        }
        let Some(raw) = self.raw_rate(rate_ms, stats) else {
            return;
        };
        let smoothed = match self.smoothed {
            // Nothing learnt yet (no admission before), or a young history's
            // rate rising as admissions come (its first span is measured
            // conservatively already): taken as it is, not approached over
            // seconds, which told a fresh event's first visitors many
            // times their wait. Only a falling rate is followed
            // slowly, so no estimate jumps up.
            None => raw,
            Some((prev, _)) if prev <= 0.0 || (raw > prev && self.young(rate_ms)) => raw,
            Some((prev, at)) => {
                let dt = rate_ms.saturating_sub(at).max(0) as f64;
                let tau = if raw > prev { RISE_TAU_MS } else { FALL_TAU_MS };
                prev + (raw - prev) * (1.0 - (-dt / tau).exp())
            }
        };
        self.smoothed = Some((smoothed, rate_ms));
        self.publish(smoothed);
    }

    fn publish(&mut self, rate: f64) {
        let moved = match self.published {
            None => true,
            Some(p) if p <= 0.0 => rate > 0.0,
            Some(p) => ((rate - p) / p).abs() > DEADBAND,
        };
        if moved {
            self.published = Some(rate);
        }
    }

    /// Adds waiting visitors who idled out, seen by this node's expire sweep.
    pub fn record_abandoned(&mut self, now_ms: i64, abandoned: u64) {
        // Not while halted: the rate's clock stands still then, and a whole
        // pause's idle-outs in one bucket would shorten every estimate for
        // a minute after it, then let them all jump back up at once.
        if abandoned > 0 && self.halted_since.is_none() {
            let rate_ms = self.rate_ms(now_ms);
            self.history.record_abandoned(rate_ms, abandoned);
        }
    }

    /// Waiting visitors lost per second over the last minute as of
    /// `now_ms` (this node's clock): what shortens an estimate.
    pub fn churn_per_s(&self, now_ms: i64) -> f64 {
        self.history
            .churn_per_s(self.rate_ms(now_ms), RATE_1M_MS)
            .unwrap_or(0.0)
    }

    /// The published admission rate, visitors per second.
    pub fn rate(&self) -> Option<f64> {
        self.published
    }

    /// The holding time of a slot learnt so far, in ms.
    pub fn holding_ms(&self) -> Option<i64> {
        self.turnover.holding_ms()
    }

    /// Admissions this node's scheduler just made, ahead of the snapshot
    /// that will count them (the slots' wait maps ranks onto admissions).
    pub fn note_admitted(&mut self, now_ms: i64, admitted: u64) {
        self.turnover.note_admitted(now_ms, admitted);
    }

    /// The estimate for a visitor with `rank` visitors ahead: in batch
    /// mode, when their batch leaves ([`Self::batch_wait`]); otherwise the
    /// buffered estimate of the rate and the slots.
    pub fn estimate(&self, now_ms: i64, rank: u64) -> Option<Estimate> {
        match self.batch_wait(now_ms, rank) {
            Some(BatchWait::Exact(ms)) => Some(eta::on_schedule(ms)),
            Some(BatchWait::AtLeast(ms)) => {
                let e = self.estimate_by_rate(now_ms, rank)?;
                let floor = eta::on_schedule(ms);
                Some(if floor.wait_ms > e.wait_ms {
                    Estimate {
                        seconds: floor.seconds.max(e.seconds),
                        almost_there: floor.seconds.max(e.seconds) < eta::ALMOST_THERE_S,
                        wait_ms: floor.wait_ms,
                    }
                } else {
                    e
                })
            }
            None => self.estimate_by_rate(now_ms, rank),
        }
    }

    /// In batch mode, how long until the batch that can take a visitor
    /// with `rank` visitors ahead leaves: the next start on the scheduler's
    /// grid, plus an interval for each full batch ahead (counted with the
    /// no-show compensation this node learnt). Visitors ahead who leave
    /// unadmitted only make it sooner. The rate alone spread a batch over
    /// its interval: it told the front of a 50-a-minute queue 2 s for the
    /// whole minute, and its 50th a minute as its batch left.
    ///
    /// What the batch under way still owes goes out as slots free, before
    /// the next batch: known where this node began it, and on every other
    /// node from the store, where that node records it; then counted.
    /// Without either it is taken as paid where the free slots cover the visitor
    /// and everyone ahead (the batch then admitted all it owed at its tick,
    /// or the visitor would not be waiting), and unknown otherwise: no
    /// batch is waited for then, the slots' estimate stands. Where the free
    /// slots cover the visitor the batches alone stand in the way (the
    /// wait is exact); otherwise the slots may too (it is a floor).
    fn batch_wait(&self, now_ms: i64, rank: u64) -> Option<BatchWait> {
        let (size, interval_ms) = self.plan.batch?;
        let grid = self.grid?;
        let free = self.plan.slots.saturating_sub(self.turnover.occupied());
        let covered = rank < free;
        let store_now = now_ms.saturating_add(grid.store_offset_ms);
        let until_next = grid
            .next_batch_ms(interval_ms, store_now)
            .saturating_sub(store_now);
        // A record is the batch under way's until the next can begin; one
        // that starts more than an interval ahead of the store's time (a
        // store whose clock stepped back since) is nobody's.
        let interval = i64::try_from(interval_ms).unwrap_or(i64::MAX);
        let shared = self
            .shared_owed
            .filter(|&(start, _)| {
                store_now < start.saturating_add(interval)
                    && start.saturating_sub(interval) < store_now
            })
            .map(|(_, owed)| owed);
        let ahead = match (self.owed.or(shared), covered) {
            // Taken at the next tick, or as slots free.
            (Some(owed), true) if rank < owed => return Some(BatchWait::Exact(0)),
            (Some(owed), false) if rank < owed => return None,
            (Some(owed), _) => rank - owed,
            (None, true) => rank,
            (None, false) => return None,
        };
        let per_batch = policy::scale(size, grid.compensation).max(1);
        let batches = i64::try_from(ahead / per_batch).unwrap_or(i64::MAX);
        let wait =
            u64::try_from(batches.saturating_mul(interval).saturating_add(until_next)).ok()?;
        Some(if covered {
            BatchWait::Exact(wait)
        } else {
            BatchWait::AtLeast(wait)
        })
    }

    fn estimate_by_rate(&self, now_ms: i64, rank: u64) -> Option<Estimate> {
        let churn = self.churn_per_s(now_ms);
        let slots = self.plan.slots;
        if slots > 0 {
            if self.turnover.holding_ms().is_some() {
                return eta::estimate_in_slots(
                    rank,
                    self.plan.admit_per_s,
                    churn,
                    self.turnover.slot_wait_ms(now_ms, rank, slots),
                );
            }
            if self.published.is_none() {
                let free = slots.saturating_sub(self.turnover.occupied());
                return eta::within_free_slots(rank, self.plan.admit_per_s, free);
            }
        }
        eta::estimate(rank, self.published, churn)
    }

    /// What the next poll is timed on when `estimate` gave nothing: the
    /// soonest the policy could reach the visitor ([`eta::earliest_turn`]).
    pub fn poll_basis(&self, rank: u64) -> Option<Estimate> {
        if self.published.is_some() || self.plan.slots == 0 {
            return None;
        }
        let free = self.plan.slots.saturating_sub(self.turnover.occupied());
        eta::earliest_turn(rank, self.plan.admit_per_s, free)
    }

    /// The measured admission rate (the fallback where no model is made).
    fn raw_rate(&self, now_ms: i64, stats: &EventStats) -> Option<f64> {
        let learnt = self.history.blended_rate(now_ms);
        if !self.young(now_ms) {
            return learnt;
        }
        let per_s = |n: u64, secs: f64| (n > 0).then(|| n as f64 / secs);
        let stored = eta::blended_rate(
            per_s(stats.admitted_last_1m, 60.0),
            per_s(stats.admitted_last_5m, 300.0),
        );
        let since_first = self.first_admission.map(|(at, n)| {
            let span = now_ms.saturating_sub(at).max(FIRST_SPAN_MS);
            n as f64 * 1000.0 / span as f64
        });
        let young = [learnt, stored, since_first]
            .into_iter()
            .flatten()
            .reduce(f64::max);
        // A configured rate is also the most the mode admits in the long
        // run: a first burst read above it would be taken back later,
        // raising every estimate.
        match (young, self.plan.admit_per_s) {
            (Some(r), Some(max)) if max > 0.0 => Some(r.min(max)),
            (r, _) => r,
        }
    }

    fn young(&self, now_ms: i64) -> bool {
        self.first_admission
            .is_none_or(|(s, _)| now_ms.saturating_sub(s) < YOUNG_MS)
    }
}

#[cfg(test)]
mod tests;
