//! Admission policies: how many waiting visitors to admit at one scheduler tick, as pure functions of what the scheduler observed.
//!
//! Architecture invariant: whatever the mode and whatever the inputs,
//! `decide` never admits more than [`headroom`], so active sessions plus
//! outstanding tokens never exceed `max_active` (proptests
//! `tests::never_exceeds_headroom`, `tests::a_crowd_never_overfills`).
//!
//! Every mode also compensates for no-shows: visitors admitted who never
//! redeem their token hold a slot until it expires and then vanish, so a 30 %
//! no-show rate would silently cut throughput by 30 %. [`PolicyState`] learns
//! that share from [`PolicyState::record_outcome`] and releases
//! correspondingly more, at most [`MAX_COMPENSATION`] times the target.

use serde::{Deserialize, Serialize};

/// Why a decision admits what it admits; stable strings for logs and metric labels.
pub mod reason {
    /// Batch mode released (part of) a batch.
    pub const BATCH: &str = "batch";
    /// Batch mode waits for the next interval.
    pub const BATCH_INTERVAL: &str = "batch_interval";
    /// Continuous mode filled freed slots.
    pub const CONTINUOUS: &str = "continuous";
    /// Continuous mode spent its per-minute budget.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// Capacity mode admitted up to the target.
    pub const CAPACITY: &str = "capacity";
    /// Capacity mode had no valid concurrency reading: admit nothing new.
    pub const CAPACITY_UNKNOWN: &str = "capacity_unknown";
    /// Capacity mode's origin is at (or over) the target.
    pub const AT_TARGET: &str = "at_target";
    /// Adaptive mode admitted into its window.
    pub const ADAPTIVE: &str = "adaptive";
    /// Adaptive mode saw the origin breach its targets and halved its window.
    pub const BACKOFF: &str = "backoff";
    /// Adaptive mode's window is full.
    pub const WINDOW_FULL: &str = "window_full";
    /// The hard cap: active sessions plus outstanding tokens reached `max_active`.
    pub const MAX_ACTIVE: &str = "max_active";
    /// Nobody is waiting.
    pub const QUEUE_EMPTY: &str = "queue_empty";
}

/// How an event admits visitors; changeable live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Mode {
    /// `size` visitors every `interval_ms`.
    Batch { size: u64, interval_ms: u64 },
    /// Into every freed slot, at most `max_per_minute`.
    Continuous { max_per_minute: u64 },
    /// Up to `target` concurrent users at the origin, from its health endpoint.
    Capacity { target: u64 },
    /// AIMD on the origin's p95 latency and error rate as the gate sees them.
    Adaptive {
        target_p95_ms: f64,
        max_error_rate: f64,
    },
}

/// What the scheduler observed for one event at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Observed {
    pub now_ms: i64,
    /// Active sessions (redeemed, not yet ended).
    pub active: u64,
    /// Admitted, token not yet redeemed or expired.
    pub outstanding: u64,
    pub max_active: u64,
    /// Visitors waiting.
    pub queue_length: u64,
    /// Capacity mode: the origin's concurrency; `None` when the health
    /// endpoint is unreachable or answered garbage.
    pub downstream_concurrency: Option<u64>,
    /// Adaptive mode: what the gate measured of the origin recently.
    pub origin_p95_ms: Option<f64>,
    pub origin_error_rate: Option<f64>,
    /// How many origin responses those two figures come from.
    pub origin_samples: u64,
}

/// Free slots: `max_active - (active + outstanding)`, never negative.
pub fn headroom(o: &Observed) -> u64 {
    o.max_active
        .saturating_sub(o.active.saturating_add(o.outstanding))
}

/// How many visitors to admit now, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admit: u64,
    pub reason: &'static str,
}

/// No-show compensation never releases more than this multiple of the target.
pub const MAX_COMPENSATION: f64 = 2.0;

/// Weight of the newest outcome report in the no-show average, reported
/// once a second. Tokens resolve in bursts (a batch redeems within
/// seconds and its no-shows expire minutes later), so the average spans about
/// fifty seconds to smooth over several batches.
const NO_SHOW_ALPHA: f64 = 0.02;

/// Below this many (decayed) resolved tokens the no-show share is not
/// trusted: one early expiry must not double the next batch.
const NO_SHOW_MIN_WEIGHT: f64 = 20.0;

/// Continuous mode's budget can bank this much time's worth of admissions, so
/// a tick that found no free slot does not lose its share, while no minute
/// ever sees more than `max_per_minute` plus this burst.
const BURST_MS: f64 = 6_000.0;

/// Adaptive mode ignores origin figures built from fewer responses: a few
/// slow requests are noise, not a trend.
pub const MIN_ORIGIN_SAMPLES: u64 = 20;

/// Adaptive mode changes its window at most this often, whatever the tick
/// rate: the origin's figures move at the pace of sessions, not of ticks, and
/// the step sizes below are per adjustment.
pub const ADJUST_EVERY_MS: i64 = 1_000;

/// Adaptive mode halves its window on a breach.
const DECREASE: f64 = 0.5;

/// Adaptive mode grows its window only while it is this full: a window that
/// nobody fills says nothing about what the origin can take.
const WINDOW_USED: f64 = 0.9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Batch,
    Continuous,
    Capacity,
    Adaptive,
}

impl Kind {
    fn of(mode: &Mode) -> Kind {
        match mode {
            Mode::Batch { .. } => Kind::Batch,
            Mode::Continuous { .. } => Kind::Continuous,
            Mode::Capacity { .. } => Kind::Capacity,
            Mode::Adaptive { .. } => Kind::Adaptive,
        }
    }
}

/// Per-event scheduler memory between ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyState {
    kind: Kind,
    /// Batch: when the current batch started, and how much of it is still
    /// owed (released as slots free, until the next batch replaces it).
    batch_started_ms: Option<i64>,
    batch_owed: u64,
    /// Batch: whether this node began the current batch (then what it
    /// owes is known here; a batch another node began is its to pay).
    batch_begun_here: bool,
    /// Batch: the instant batches are counted from, so that every node
    /// starts its batches on one grid (the event's anchor on the store's
    /// clock).
    cadence_anchor_ms: i64,
    /// Continuous: the per-minute budget as a token bucket.
    budget: f64,
    budget_at_ms: Option<i64>,
    /// Adaptive: the AIMD window over active sessions plus expected arrivals.
    window: f64,
    slow_start: bool,
    /// When the window last changed (growth or decrease).
    adjusted_at_ms: Option<i64>,
    /// No-show tracker: decayed counts of redeemed and expired tokens.
    redeemed_w: f64,
    expired_w: f64,
}

impl PolicyState {
    pub fn new(mode: &Mode, max_active: u64) -> Self {
        PolicyState {
            kind: Kind::of(mode),
            batch_started_ms: None,
            batch_owed: 0,
            batch_begun_here: false,
            cadence_anchor_ms: 0,
            budget: 0.0,
            budget_at_ms: None,
            window: initial_window(max_active),
            slow_start: true,
            adjusted_at_ms: None,
            redeemed_w: 0.0,
            expired_w: 0.0,
        }
    }

    /// Batch: when the current batch started (on the clock `decide` was
    /// given), and what it still owes if this node began it (`None` for a
    /// batch another node began, or outside batch mode).
    pub fn batch_progress(&self) -> (Option<i64>, Option<u64>) {
        let here = self.kind == Kind::Batch && self.batch_begun_here;
        (self.batch_started_ms, here.then_some(self.batch_owed))
    }

    /// Counts batches from `anchor_ms` (the event's anchor): every node
    /// given the same anchor starts its batches at the same instants, so a
    /// batch begun by one node is the batch every other node forfeits or
    /// finds claimed, never one of a cadence shifted by where each node
    /// happened to start.
    pub fn set_cadence_anchor(&mut self, anchor_ms: i64) {
        self.cadence_anchor_ms = anchor_ms;
    }

    /// Takes up `mode` if it is not the mode this state was kept for: a live
    /// mode change starts the new mode fresh, but what was learnt about
    /// no-shows is still true, and the cadence anchor is the event's.
    /// [`Self::decide`] does it; a caller that [`Self::forfeit`]s a batch
    /// of a mode it never decided in does it first, or the batch would look
    /// due again at every tick.
    pub fn adopt(&mut self, mode: &Mode, max_active: u64) {
        if Kind::of(mode) != self.kind {
            *self = PolicyState {
                redeemed_w: self.redeemed_w,
                expired_w: self.expired_w,
                cadence_anchor_ms: self.cadence_anchor_ms,
                ..PolicyState::new(mode, max_active)
            };
        }
    }

    /// When the batch that [`Self::decide`] at `now_ms` would begin starts,
    /// if it would begin one. With several nodes the caller claims that
    /// batch in the store first (one node per batch, whatever ticks each
    /// node tried), and [`Self::forfeit`]s it if another node holds it.
    pub fn batch_due_start(&self, mode: &Mode, now_ms: i64) -> Option<i64> {
        let Mode::Batch { interval_ms, .. } = *mode else {
            return None;
        };
        // A mode changed to batch starts fresh in `decide`: due at once.
        let due = Kind::of(mode) != self.kind || self.batch_due(interval_ms, now_ms);
        due.then(|| self.batch_start(interval_ms, now_ms))
    }

    /// A tick another node won (several gateway nodes share the ticks, one
    /// node each): its batch and its share of the rate were that node's to
    /// hand out. Without this every node would owe a whole batch per interval
    /// and refill its budget for the time others ticked, and the event would
    /// admit up to one rate per node. Batch: a batch due now counts as begun
    /// (by the other node) with nothing owed here; continuous: the budget
    /// does not grow for this tick's span.
    pub fn forfeit(&mut self, mode: &Mode, now_ms: i64) {
        match *mode {
            Mode::Batch { interval_ms, .. } => {
                if self.batch_due(interval_ms, now_ms) {
                    self.batch_started_ms = Some(self.batch_start(interval_ms, now_ms));
                    self.batch_owed = 0;
                    self.batch_begun_here = false;
                }
            }
            Mode::Continuous { .. } => {
                self.budget_at_ms = Some(refilled_until(self.budget_at_ms, now_ms));
            }
            Mode::Capacity { .. } | Mode::Adaptive { .. } => {}
        }
    }

    fn batch_due(&self, interval_ms: u64, now_ms: i64) -> bool {
        let interval = i64::try_from(interval_ms).unwrap_or(i64::MAX);
        match self.batch_started_ms {
            None => true,
            Some(started) => {
                now_ms >= started.saturating_add(interval)
                    || stepped_back(started, interval, now_ms)
            }
        }
    }

    /// When a batch due at `now_ms` starts: on the grid of intervals from
    /// the cadence anchor, so ticks that arrive a little late keep the
    /// cadence, batches missed while nobody ticked are not caught up, and
    /// every node agrees where each batch begins.
    fn batch_start(&self, interval_ms: u64, now_ms: i64) -> i64 {
        batch_grid_start(self.cadence_anchor_ms, interval_ms, now_ms)
    }

    /// How many visitors to admit now. The caller admits exactly
    /// `decision.admit` (or fewer, if fewer are left to admit).
    pub fn decide(&mut self, mode: &Mode, o: &Observed) -> Decision {
        self.adopt(mode, o.max_active);
        let factor = self.compensation();
        match *mode {
            Mode::Batch { size, interval_ms } => self.batch(size, interval_ms, factor, o),
            Mode::Continuous { max_per_minute } => self.continuous(max_per_minute, factor, o),
            Mode::Capacity { target } => match o.downstream_concurrency {
                // Never over-admit on a bad reading.
                None => Decision {
                    admit: 0,
                    reason: reason::CAPACITY_UNKNOWN,
                },
                Some(current) => {
                    let want = fill(target, current, o.outstanding, factor);
                    let idle = if want == 0 {
                        reason::AT_TARGET
                    } else {
                        reason::CAPACITY
                    };
                    cap(want, idle, o)
                }
            },
            Mode::Adaptive {
                target_p95_ms,
                max_error_rate,
            } => self.adaptive(target_p95_ms, max_error_rate, factor, o),
        }
    }

    /// Reports what happened to admitted visitors since the last call (call it
    /// once a second: [`NO_SHOW_ALPHA`] is per report): how many were
    /// admitted, how many redeemed their token, and how many tokens expired
    /// unredeemed.
    pub fn record_outcome(&mut self, admitted: u64, redeemed: u64, expired_unredeemed: u64) {
        // `admitted` is not needed: a token counts once it is resolved, since
        // the share of no-shows is only known then.
        let _ = admitted;
        let keep = 1.0 - NO_SHOW_ALPHA;
        self.redeemed_w = self.redeemed_w * keep + redeemed as f64;
        self.expired_w = self.expired_w * keep + expired_unredeemed as f64;
    }

    /// The learnt share of admitted visitors who never redeem, in `[0, 1]`.
    pub fn no_show_rate(&self) -> f64 {
        let total = self.redeemed_w + self.expired_w;
        if total < NO_SHOW_MIN_WEIGHT || !total.is_finite() {
            return 0.0;
        }
        (self.expired_w / total).clamp(0.0, 1.0)
    }

    /// What every target is multiplied by to make up for no-shows:
    /// `1 / (1 - no_show)`, in `[1, MAX_COMPENSATION]`.
    pub fn compensation(&self) -> f64 {
        let show = 1.0 - self.no_show_rate();
        if show <= 1.0 / MAX_COMPENSATION {
            MAX_COMPENSATION
        } else {
            1.0 / show
        }
    }

    /// Adaptive mode's current window: how many active sessions (plus
    /// expected arrivals) the origin is believed to take.
    pub fn window(&self) -> f64 {
        self.window
    }

    fn batch(&mut self, size: u64, interval_ms: u64, factor: f64, o: &Observed) -> Decision {
        if self.batch_due(interval_ms, o.now_ms) {
            self.batch_started_ms = Some(self.batch_start(interval_ms, o.now_ms));
            self.batch_owed = scale(size, factor);
            self.batch_begun_here = true;
        }
        if self.batch_owed == 0 {
            return Decision {
                admit: 0,
                reason: reason::BATCH_INTERVAL,
            };
        }
        let d = cap(self.batch_owed, reason::BATCH, o);
        self.batch_owed -= d.admit;
        d
    }

    fn continuous(&mut self, max_per_minute: u64, factor: f64, o: &Observed) -> Decision {
        let per_ms = max_per_minute as f64 * factor / 60_000.0;
        let capacity = if per_ms > 0.0 {
            (per_ms * BURST_MS).max(1.0)
        } else {
            0.0
        };
        self.budget = match self.budget_at_ms {
            // A fresh bucket starts full: the first tick may fill a burst.
            None => capacity,
            Some(at) => {
                let elapsed = o.now_ms.saturating_sub(at).max(0) as f64;
                (self.budget + elapsed * per_ms).min(capacity)
            }
        };
        self.budget_at_ms = Some(refilled_until(self.budget_at_ms, o.now_ms));
        let tokens = self.budget.max(0.0).floor() as u64;
        let mut d = cap(tokens, reason::CONTINUOUS, o);
        if tokens < headroom(o).min(o.queue_length) {
            // The budget, not the free slots, was the limit.
            d.reason = reason::RATE_LIMITED;
        }
        self.budget -= d.admit as f64;
        d
    }

    fn adaptive(
        &mut self,
        target_p95_ms: f64,
        max_error_rate: f64,
        factor: f64,
        o: &Observed,
    ) -> Decision {
        let ceiling = (o.max_active as f64).max(1.0);
        self.window = self.window.clamp(1.0, ceiling);
        let load = o.active.saturating_add(o.outstanding) as f64;
        let mut backed_off = false;
        // Between adjustments the window only refills (a clock that stepped
        // back allows one at once).
        let due = self
            .adjusted_at_ms
            .is_none_or(|at| o.now_ms >= at.saturating_add(ADJUST_EVERY_MS) || o.now_ms < at);
        match health(target_p95_ms, max_error_rate, o) {
            _ if !due => {}
            Health::Unknown => {}
            Health::Breach => {
                // A breach seen while the load is still above the window
                // reflects the load before the last decrease: wait for that
                // decrease to take effect instead of halving again.
                if load <= self.window {
                    self.window = (self.window * DECREASE).max(1.0);
                    self.slow_start = false;
                    self.adjusted_at_ms = Some(o.now_ms);
                    backed_off = true;
                }
            }
            Health::Healthy if load >= self.window * WINDOW_USED => {
                // Grow by a tenth per tick until the first breach, to find the
                // origin's limit in tens of ticks; then by a fiftieth. Tokens
                // take seconds to redeem, so the origin reports a window's load
                // several ticks late: a small step keeps the overshoot small.
                let step = self.window / if self.slow_start { 10.0 } else { 50.0 };
                self.window = (self.window + step.max(1.0)).min(ceiling);
                self.adjusted_at_ms = Some(o.now_ms);
            }
            Health::Healthy => {}
        }
        let want = fill(self.window.floor() as u64, o.active, o.outstanding, factor);
        let idle = match () {
            _ if backed_off => reason::BACKOFF,
            _ if want == 0 => reason::WINDOW_FULL,
            _ => reason::ADAPTIVE,
        };
        cap(want, idle, o)
    }
}

/// The first adaptive window: small, a twentieth of `max_active`.
fn initial_window(max_active: u64) -> f64 {
    (max_active / 20).max(1) as f64
}

/// The origin as adaptive mode's targets judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Healthy,
    /// Latency or error rate past its target.
    Breach,
    /// Too few figures, or unusable ones: the window holds.
    Unknown,
}

/// The origin's health by adaptive mode's targets.
fn health(target_p95_ms: f64, max_error_rate: f64, o: &Observed) -> Health {
    let usable = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0);
    if o.origin_samples < MIN_ORIGIN_SAMPLES {
        return Health::Unknown;
    }
    let (Some(p95), Some(errors)) = (usable(o.origin_p95_ms), usable(o.origin_error_rate)) else {
        return Health::Unknown;
    };
    // NaN targets compare false: a broken target never reads as a breach.
    if p95 > target_p95_ms || errors > max_error_rate {
        Health::Breach
    } else {
        Health::Healthy
    }
}

/// `n × factor`, rounded up.
/// `n` made up for no-shows: `n × factor` ([`PolicyState::compensation`]),
/// rounded up. A batch of `size` owes `scale(size, factor)` admissions.
pub fn scale(n: u64, factor: f64) -> u64 {
    (n as f64 * factor).ceil() as u64
}

/// How many to admit so that `current` plus the expected arrivals reach
/// `limit`: outstanding tokens and new admissions arrive at the show-up rate
/// `1 / factor`, so `current + (outstanding + n) / factor = limit`.
fn fill(limit: u64, current: u64, outstanding: u64, factor: f64) -> u64 {
    let gap = limit.saturating_sub(current) as f64;
    (gap * factor - outstanding as f64).max(0.0).floor() as u64
}

/// `want`, cut to the free slots and to the visitors waiting; the reason says
/// which limit bit.
fn cap(want: u64, reason: &'static str, o: &Observed) -> Decision {
    let free = headroom(o);
    let admit = want.min(free).min(o.queue_length);
    let reason = match () {
        _ if o.queue_length == 0 => reason::QUEUE_EMPTY,
        _ if free < want.min(o.queue_length) => reason::MAX_ACTIVE,
        _ => reason,
    };
    Decision { admit, reason }
}

/// Where the bucket's next refill counts from after a tick at `now_ms`.
/// Never back for a small step (a tick timed on another clock, a little
/// jitter): the span up to the later instant was refilled already. Back to
/// `now_ms` when the clock stepped back further than a burst: holding the
/// old instant would stall the bucket until the clock caught up (a store
/// failed over to a replica whose clock is behind), and refilling the
/// span twice gives at most one burst.
fn refilled_until(at_ms: Option<i64>, now_ms: i64) -> i64 {
    match at_ms {
        Some(at) if now_ms >= at.saturating_sub(BURST_MS as i64) => at.max(now_ms),
        _ => now_ms,
    }
}

/// The start of the batch period `now_ms` falls in, on the grid of
/// `interval_ms` counted from `anchor_ms` (all on one clock: the store's,
/// for the scheduler). The scheduler begins its batches there, and the
/// wait estimate counts them on the same grid.
pub fn batch_grid_start(anchor_ms: i64, interval_ms: u64, now_ms: i64) -> i64 {
    let interval = i64::try_from(interval_ms).unwrap_or(i64::MAX);
    if interval <= 0 {
        return now_ms;
    }
    now_ms.saturating_sub(now_ms.saturating_sub(anchor_ms).rem_euclid(interval))
}

/// Whether the clock is now more than an interval behind the batch that
/// started at `started_ms`: it stepped back (a store failed over to a
/// replica whose clock is behind). A new cadence starts then, instead of
/// no batch until the clock catches up; a smaller step only delays the next
/// batch by the step, so a little jitter never makes an extra batch.
fn stepped_back(started_ms: i64, interval_ms: i64, now_ms: i64) -> bool {
    now_ms < started_ms.saturating_sub(interval_ms)
}

#[cfg(test)]
mod tests;
