//! How fast an event's slots really turn over: the holding time of a slot
//! (admission to the slot being free again: token outstanding, then the
//! session), learnt from the cumulative admitted and freed counts.
//!
//! The queue moves at the policy's rate only while slots are free. Once
//! `max_active` is full it moves at `slots / holding time`, whatever the
//! policy allows, so [`queue_rate`] is the lower of the two. The holding time
//! is measured by matching the two cumulative curves in order (the k-th slot
//! freed against the k-th admission) and averaging over the last
//! [`GENERATION_SHARE`] of the peak occupancy: one "generation" of slots,
//! so a wave of short sessions does not pass for the mean.
//!
//! Before enough slots have been freed the holding time is unknown, and so is
//! the rate of a queue whose slots will bind: nothing known then bounds it
//! honestly (a session may last until `session_ttl`, tens of times the
//! usual visit), so no rate is given rather than a guess. Visitors that the
//! free slots already cover need no holding time ([`within_free_slots`]).

use std::collections::VecDeque;

use super::{ALMOST_THERE_S, BUFFER, Estimate, FRONT_POLL_MS, NEAR_POLL_MS};

/// Most points kept per curve. Points are added only when a count grows, at
/// most once per stats snapshot (~500 ms), so this covers over half an hour
/// of steady admissions: longer than any holding time that matters.
pub const MAX_POINTS: usize = 4096;

/// The holding time is the mean over the last `GENERATION_SHARE × peak
/// occupancy` slots freed. The first slots of a burst to free are its
/// shortest sessions: averaging over less than most of a generation reads the
/// turnover too fast; waiting for all of it would let one visitor who idles
/// until the idle timeout hold every estimate back.
pub const GENERATION_SHARE: f64 = 0.75;

/// Shortest holding time used: a visitor who releases at once says little
/// of the others, and a rate needs a positive divisor.
pub const MIN_HOLD_MS: i64 = 1_000;

/// When nothing has been freed for this many times the holding time, the
/// slots have stalled (sessions became longer, the origin is stuck): the age
/// of the next slot due to free, divided by this, becomes a floor under the
/// holding time, so a stall lowers the rate instead of being ignored.
pub const STALL_FACTOR: f64 = 1.5;

/// How far back the peak occupancy is taken.
pub const PEAK_WINDOW_MS: i64 = 300_000;

/// Added to a queue-aware estimate: a visitor learns of the admission at
/// the next poll, which in the last seconds of the expected wait comes every
/// [`FRONT_POLL_MS`] + 20 % jitter (0.6 s), so the wait they live is up to
/// that much longer than the wait for the slot. Far back it does not matter;
/// at the front it is much of the wait.
pub const SEEN_WITHIN_MS: u64 = FRONT_POLL_MS * 12 / 10;

/// Points of the freed range the mean is taken over (evenly spaced).
const QUANTILES: u64 = 32;

/// Cumulative admitted and freed counts of one event, with the holding time
/// they imply.
#[derive(Debug, Clone, Default)]
pub struct Turnover {
    /// `(t_ms, admitted_total)` each time the total grew; the first point is
    /// where watching started (admissions up to it have no known time).
    admitted: VecDeque<(i64, u64)>,
    /// `(t_ms, freed_total)` likewise; freed = admitted - active - outstanding.
    freed: VecDeque<(i64, u64)>,
    /// `(t_ms, occupied)` of the last [`PEAK_WINDOW_MS`].
    occupied: VecDeque<(i64, u64)>,
    /// The last mean measured over a generation: once known it is kept
    /// while a larger peak occupancy makes the next one wait for more frees.
    last_mean_ms: Option<i64>,
    /// That mean with the stall floor: the holding time given out.
    last_hold_ms: Option<i64>,
    /// Admissions the scheduler reported since (`(t_ms, admitted_total)`
    /// after them): ahead of the next snapshot, so a wave admitted between
    /// two snapshots does not leave every rank mapped to the wrong slot.
    noted: Option<(i64, u64)>,
}

impl Turnover {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one snapshot: admissions so far and slots held now (active
    /// sessions plus outstanding tokens).
    pub fn record(&mut self, now_ms: i64, admitted_total: u64, occupied: u64) {
        let occupied = occupied.min(admitted_total);
        let freed = admitted_total - occupied;
        // A smaller total means the store was reset: start over from it.
        if self
            .admitted
            .back()
            .is_some_and(|&(_, a)| admitted_total < a)
        {
            *self = Self::default();
        }
        // A clock that steps back keeps the curves in time order.
        let now_ms = self.admitted.back().map_or(now_ms, |&(t, _)| now_ms.max(t));
        if self.admitted.is_empty() && freed == 0 && admitted_total > 0 {
            // The first snapshot comes after the first admissions but
            // nothing was ever freed: the event is at its start (a queue
            // already formed when it opened), not a node joining one under
            // way. Its admissions are dated at the scheduler's report, or at
            // this snapshot (at most one refresh late), and the curves start
            // from zero, so the holding time waits for these very slots.
            let (t0, n0) = self.noted.map_or((now_ms, admitted_total), |(t, n)| {
                (t.min(now_ms), n.min(admitted_total))
            });
            self.admitted.push_back((t0, 0));
            self.freed.push_back((t0, 0));
            self.admitted.push_back((t0, n0));
        }
        push_if_grown(&mut self.admitted, now_ms, admitted_total);
        if self.noted.is_some_and(|(_, a)| a <= admitted_total) {
            self.noted = None;
        }
        // Freed only grows; a snapshot that reads fewer (active and
        // outstanding read a moment apart) is ignored.
        push_if_grown(&mut self.freed, now_ms, freed);
        let horizon = now_ms.saturating_sub(PEAK_WINDOW_MS);
        while self.occupied.front().is_some_and(|&(t, _)| t < horizon)
            || self.occupied.len() >= MAX_POINTS
        {
            self.occupied.pop_front();
        }
        self.occupied.push_back((now_ms, occupied));
        if let Some(hold) = self.measure(now_ms) {
            self.last_hold_ms = Some(hold);
        }
    }

    /// Adds `n` admissions made at `now_ms` by this node's scheduler, ahead
    /// of the snapshot that will count them.
    pub fn note_admitted(&mut self, now_ms: i64, n: u64) {
        if n == 0 {
            return;
        }
        let total = self.admitted_total().saturating_add(n);
        self.noted = Some((now_ms, total));
    }

    /// Admissions so far: the last snapshot's, or more if the scheduler
    /// reported some since.
    fn admitted_total(&self) -> u64 {
        let snap = self.admitted.back().map_or(0, |&(_, a)| a);
        self.noted.map_or(snap, |(_, a)| a.max(snap))
    }

    /// Slots held: the last snapshot's, plus admissions reported since.
    pub fn occupied(&self) -> u64 {
        let snap = self.admitted.back().map_or(0, |&(_, a)| a);
        let held = self.occupied.back().map_or(0, |&(_, o)| o);
        held.saturating_add(self.admitted_total().saturating_sub(snap))
    }

    /// Whether watching started before the first admission, so every slot's
    /// admission time is known.
    pub fn watched_from_start(&self) -> bool {
        self.admitted.front().is_some_and(|&(_, a)| a == 0)
    }

    /// The holding time of a slot, in ms; `None` until enough slots have
    /// been freed under watch (see [`GENERATION_SHARE`]).
    pub fn holding_ms(&self) -> Option<i64> {
        self.last_hold_ms
    }

    /// How long until a visitor with `rank` visitors ahead gets a slot, by
    /// the slots alone, in ms from `now_ms`: FIFO reuse of the slots, so the
    /// visitor takes the slot of the admission `slots` places before it,
    /// free one holding time after that admission (or now, if freed
    /// already), plus one holding time per further generation. Unlike
    /// `rank / rate` this keeps the waves of a burst: slots filled together
    /// free together, and a visitor just behind a wave waits for the next
    /// one. `None` while the holding time is unknown or without slots.
    pub fn slot_wait_ms(&self, now_ms: i64, rank: u64, slots: u64) -> Option<i64> {
        let hold = self.last_hold_ms?;
        if slots == 0 {
            return None;
        }
        let &(_, snap) = self.admitted.back()?;
        let &(_, freed) = self.freed.back()?;
        let admitted = self.admitted_total();
        let ahead = rank.saturating_add(1);
        let generations = ahead.div_ceil(slots);
        let reused = admitted
            .saturating_add(ahead)
            .saturating_sub(generations.saturating_mul(slots));
        let first = if reused <= freed {
            now_ms
        } else {
            // Admitted before watching: its end is unknown, so no wave is
            // claimed for it (the rate's estimate stands alone).
            let at = match self.noted {
                Some((t, _)) if reused > snap => Some(t),
                _ => time_reached(&self.admitted, reused),
            };
            at.map_or(now_ms, |t| t.saturating_add(hold).max(now_ms))
        };
        let later = i64::try_from(generations - 1)
            .unwrap_or(i64::MAX)
            .saturating_mul(hold);
        Some(first.saturating_add(later).saturating_sub(now_ms))
    }

    fn measure(&mut self, now_ms: i64) -> Option<i64> {
        let &(_, known_from) = self.admitted.front()?;
        let &(_, freed_from) = self.freed.front()?;
        let &(_, freed) = self.freed.back()?;
        let &(_, admitted) = self.admitted.back()?;
        let peak = self.occupied.iter().map(|&(_, o)| o).max().unwrap_or(0);
        let m = ((peak as f64 * GENERATION_SHARE).ceil() as u64).max(1);
        let generation = freed
            .checked_sub(m)
            .filter(|lo| *lo >= known_from && *lo >= freed_from);
        let mean = match generation {
            Some(lo) => {
                let mut sum = 0i64;
                for j in 1..=QUANTILES {
                    let k = lo + (m * j).div_ceil(QUANTILES);
                    let t_freed = time_reached(&self.freed, k)?;
                    let t_admitted = time_reached(&self.admitted, k)?;
                    sum = sum.saturating_add(t_freed.saturating_sub(t_admitted));
                }
                let mean = sum / QUANTILES as i64;
                self.last_mean_ms = Some(mean);
                mean
            }
            // Not a generation freed yet under watch: keep what was known.
            None => self.last_mean_ms?,
        };
        // A stall: the next slot due to free (in admission order) has been
        // held far longer than the holding time says.
        let stalled = if freed < admitted {
            time_reached(&self.admitted, freed + 1)
                .map(|t| (now_ms.saturating_sub(t) as f64 / STALL_FACTOR) as i64)
        } else {
            None
        };
        Some(mean.max(stalled.unwrap_or(0)).max(MIN_HOLD_MS))
    }
}

fn push_if_grown(curve: &mut VecDeque<(i64, u64)>, now_ms: i64, total: u64) {
    if curve.back().is_none_or(|&(_, last)| total > last) {
        if curve.len() >= MAX_POINTS {
            curve.pop_front();
        }
        curve.push_back((now_ms, total));
    }
}

/// When the curve first reached `k`: the time of the first point at or
/// above it. `None` when `k` is not above the first point (before watching)
/// or not reached yet.
fn time_reached(curve: &VecDeque<(i64, u64)>, k: u64) -> Option<i64> {
    if curve.front().is_none_or(|&(_, first)| k <= first) {
        return None;
    }
    let i = curve.partition_point(|&(_, total)| total < k);
    curve.get(i).map(|&(t, _)| t)
}

/// The rate the queue really moves at, visitors per second: the policy's
/// rate and `slots / holding time`, whichever is lower.
///
/// `None` while the holding time is unknown (the slots may bind at a rate
/// nobody knows yet), or when neither a policy rate nor slots are known.
/// Without a policy rate (capacity mode) the slots' turnover is the rate.
pub fn queue_rate(admit_per_s: Option<f64>, slots: u64, holding_ms: Option<i64>) -> Option<f64> {
    let policy = admit_per_s.filter(|r| r.is_finite() && *r > 0.0);
    let turnover = holding_ms
        .filter(|_| slots > 0)
        .map(|h| slots as f64 * 1000.0 / h.max(MIN_HOLD_MS) as f64)?;
    Some(policy.map_or(turnover, |p| p.min(turnover)))
}

/// The estimate of a visitor in a queue whose slots may bind: the policy's
/// own wait (`position / (rate + churn)`, churn at most
/// [`super::MAX_CHURN_SHARE`] of the rate) or the slots' wait
/// ([`Turnover::slot_wait_ms`]), whichever is longer, buffered, plus
/// [`SEEN_WITHIN_MS`]. `None` when neither is known.
///
/// The slots' wait already holds their turnover (one holding time per
/// generation), so the policy's side needs only the policy's rate: taking
/// `min(rate, turnover)` there as well would count the slots twice.
pub fn estimate_in_slots(
    rank: u64,
    policy_per_s: Option<f64>,
    churn_per_s: f64,
    slot_wait_ms: Option<i64>,
) -> Option<Estimate> {
    let position = rank.saturating_add(1) as f64;
    let by_policy = policy_per_s
        .filter(|r| r.is_finite() && *r > 0.0)
        .map(|rate| {
            let churn = if churn_per_s.is_finite() {
                churn_per_s.clamp(0.0, rate * super::MAX_CHURN_SHARE)
            } else {
                0.0
            };
            position / (rate + churn)
        });
    let by_slots = slot_wait_ms.map(|ms| ms.max(0) as f64 / 1000.0);
    let wait_s = match (by_policy, by_slots) {
        (Some(a), Some(b)) => a.max(b),
        (one, other) => one.or(other)?,
    };
    Some(buffered(wait_s))
}

/// The estimate of a wait the scheduler's own grid decides (batch
/// admission, while free slots cover the visitor: their batch leaves at its
/// tick, whatever a rate would say). It is a time, not a rate's guess, so
/// it is not buffered: only the poll that sees the admission is added. A
/// rate spread a batch over its interval: the front of a 50-a-minute queue
/// was told 2 s for the whole minute, and its back a minute when its batch
/// was about to leave.
pub fn on_schedule(wait_ms: u64) -> Estimate {
    let seconds = wait_ms.saturating_add(SEEN_WITHIN_MS).div_ceil(1000);
    Estimate {
        seconds,
        almost_there: seconds < ALMOST_THERE_S,
        wait_ms,
    }
}

/// `wait_s × BUFFER + SEEN_WITHIN_MS`, rounded up to the second.
fn buffered(wait_s: f64) -> Estimate {
    // `as` saturates, so an absurd wait is u64::MAX.
    let seconds = (wait_s * BUFFER + SEEN_WITHIN_MS as f64 / 1000.0 - 1e-9).ceil() as u64;
    Estimate {
        seconds,
        almost_there: seconds < ALMOST_THERE_S,
        wait_ms: super::ms(wait_s),
    }
}

/// The estimate of a visitor the free slots already cover (`rank < free`):
/// the policy's rate alone decides when their turn comes, whatever the
/// sessions' length. `None` for anyone further back, or without a rate.
pub fn within_free_slots(rank: u64, admit_per_s: Option<f64>, free: u64) -> Option<Estimate> {
    if rank >= free {
        return None;
    }
    estimate_in_slots(rank, admit_per_s, 0.0, None)
}

/// Continuous mode's bucket banks this much time's worth of admissions (the
/// policy's burst): the most admissions can run ahead of the rate.
const POLICY_BURST_S: f64 = 6.0;

/// While a visitor beyond the free slots gets no estimate, the soonest the
/// policy could reach them, as an estimate for [`super::poll_after_ms`] only
/// (never shown): the free slots, then a full burst, then twice the rate
/// (no-show compensation releases up to [`crate::policy::MAX_COMPENSATION`]
/// times it). A lower bound, so polling after a quarter of it is still well
/// before the turn, and a crowd waiting for its first figure does not poll
/// every [`super::UNKNOWN_POLL_MS`] all at once.
pub fn earliest_turn(rank: u64, admit_per_s: Option<f64>, free: u64) -> Option<Estimate> {
    let rate = admit_per_s.filter(|r| r.is_finite() && *r > 0.0)? * crate::policy::MAX_COMPENSATION;
    let beyond = rank.saturating_add(1).saturating_sub(free) as f64 - rate * POLICY_BURST_S;
    let wait_s = beyond.max(0.0) / rate;
    // Buffered like a shown estimate. The poll interval follows `wait_ms`:
    // this lower bound, but never the front's fast polls — the turn may come
    // far later than the soonest, and a burst's whole first wave of
    // visitors can be this close to it.
    let seconds = (wait_s * BUFFER).ceil() as u64;
    Some(Estimate {
        seconds,
        almost_there: seconds < ALMOST_THERE_S,
        wait_ms: super::ms(wait_s).max(2 * NEAR_POLL_MS),
    })
}

#[cfg(test)]
#[path = "turnover_tests.rs"]
mod tests;
