//! The admission rate behind every visitor's ETA, learnt on every node.
//!
//! Each node feeds its own [`AdmissionHistory`] from the stats snapshot it
//! refreshes every ~500 ms (the growth of `admitted_total`), so nodes that
//! never win `claim_tick` know the rate as well as the one that admits.
//! Waiting visitors who idle out (churn) are known only to the node that ran
//! the expire sweep; elsewhere churn counts as zero, the conservative side.
//!
//! Honesty rule: an estimate shown to a visitor should not jump up while the
//! admission rate is steady. Batch admission makes the one-minute rate a
//! sawtooth (a batch enters or leaves the window), which would make a
//! visitor's ETA rise between two polls. So the published rate is smoothed —
//! it follows a rising rate within seconds ([`RISE_TAU_MS`]) but a falling
//! one over half a minute ([`FALL_TAU_MS`]) — and only republished when it
//! moved by more than [`DEADBAND`] (5 %: batch admission swings the blended one-minute rate by about 6 %). No per-visitor state is kept.
//!
//! Flash crowds: every first estimate of a burst is made in its first
//! seconds, when no measured rate means much yet (a 10 s floor under one
//! batch reads as a tenth of the real rate). While the history is young the
//! rate may therefore also come from the [`Plan`]: what the admission mode
//! is configured to admit, capped by what `max_active` slots allow for the
//! session length seen so far.

use anteroom_core::eta::{self, AdmissionHistory, Estimate, RATE_1M_MS};
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
/// may raise the rate.
const YOUNG_MS: i64 = 60_000;
/// The rate since the first admission is measured over at least this long:
/// long enough that a first burst (continuous mode's full bucket) does not
/// read as the steady rate, short enough that a flash crowd's first
/// estimates are not many times the real wait (the core's own history
/// measures over at least 30 s, which is right once the event runs).
const FIRST_SPAN_MS: i64 = 10_000;

/// A session is assumed to last at least this long when bounding the rate
/// by the slots (a visitor who releases at once says little of the rest).
const MIN_SESSION_MS: i64 = 1_000;

/// After the history stops being young, the plan stays a floor until the
/// measured rate reaches it, but for at most this long.
const HANDOVER_MS: i64 = 60_000;

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
}

impl Plan {
    pub fn of(config: &EventConfig) -> Self {
        let max_active = config.max_active;
        match &config.admission {
            Admission::Batch { size, interval } => {
                let secs = interval.as_secs_f64();
                Plan {
                    admit_per_s: (secs > 0.0).then(|| *size as f64 / secs),
                    slots: max_active,
                }
            }
            Admission::Continuous { max_per_minute } => Plan {
                admit_per_s: Some(*max_per_minute as f64 / 60.0),
                slots: max_active,
            },
            Admission::Capacity { target, .. } => Plan {
                admit_per_s: None,
                slots: (*target).min(max_active),
            },
            Admission::Adaptive { .. } => Plan::default(),
        }
    }
}

/// One event's rate learning on this node.
#[derive(Debug, Default)]
pub struct EtaFeed {
    history: AdmissionHistory,
    plan: Plan,
    /// Sessions ended so far (`redeemed_total - active`) at the first
    /// snapshot, and when this node first saw one end after it.
    ended_baseline: Option<u64>,
    first_end_ms: Option<i64>,
    started_ms: Option<i64>,
    /// When this node first saw an admission, and how many it saw since.
    first_admission: Option<(i64, u64)>,
    last_admitted_total: Option<u64>,
    smoothed: Option<(f64, i64)>,
    published: Option<f64>,
    /// Set once the measured rate reached the plan after the hand-over.
    plan_retired: bool,
}

impl EtaFeed {
    /// Sets what the admission mode plans (the configuration can change live).
    pub fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    /// Learns from one stats snapshot taken at `now_ms`.
    pub fn observe(&mut self, now_ms: i64, stats: &EventStats) {
        let ended = stats.redeemed_total.saturating_sub(stats.active);
        match self.ended_baseline {
            None => self.ended_baseline = Some(ended),
            Some(base) if ended > base && self.first_admission.is_some() => {
                self.first_end_ms.get_or_insert(now_ms);
            }
            // A store reset (smaller count) moves the baseline down with it.
            Some(base) if ended < base => self.ended_baseline = Some(ended),
            Some(_) => {}
        }
        let admitted = match self.last_admitted_total {
            // A smaller total means the store was reset: start over from it.
            Some(last) if stats.admitted_total >= last => stats.admitted_total - last,
            _ => 0,
        };
        self.last_admitted_total = Some(stats.admitted_total);
        self.started_ms.get_or_insert(now_ms);
        self.history.record(now_ms, admitted, 0);
        if let Some((_, seen)) = &mut self.first_admission {
            *seen = seen.saturating_add(admitted);
        } else if admitted > 0 {
            self.first_admission = Some((now_ms, admitted));
        }
        let Some(raw) = self.raw_rate(now_ms, stats) else {
            return;
        };
        let smoothed = match self.smoothed {
            None => raw,
            Some((prev, at)) => {
                let dt = now_ms.saturating_sub(at).max(0) as f64;
                let tau = if raw > prev { RISE_TAU_MS } else { FALL_TAU_MS };
                prev + (raw - prev) * (1.0 - (-dt / tau).exp())
            }
        };
        // The plan is configuration, not a noisy measurement: while the
        // history is young it applies at once instead of rising over
        // RISE_TAU_MS, or a flash crowd's first estimates would miss it. The
        // slot bound is a hard ceiling, so it applies after smoothing too
        // (the memory of an earlier, higher plan must not outlive it).
        let smoothed = if self.young(now_ms) {
            let capped = self
                .slot_cap(now_ms)
                .map_or(smoothed, |cap| smoothed.min(cap));
            self.planned_rate(now_ms)
                .map_or(capped, |planned| capped.max(planned))
        } else {
            // Hand-over: the measured rate takes over from the plan only
            // once it reaches it, so a steady rate never dips below the
            // plan it matched (which would raise every estimate by the
            // deadband); after HANDOVER_MS the plan is dropped regardless
            // and the smoothing lets a really lower rate down slowly.
            match self.handover_floor(now_ms) {
                Some(floor) if raw < floor => smoothed.max(floor),
                Some(_) => {
                    self.plan_retired = true;
                    smoothed
                }
                None => smoothed,
            }
        };
        self.smoothed = Some((smoothed, now_ms));
        let moved = match self.published {
            None => true,
            Some(p) if p <= 0.0 => smoothed > 0.0,
            Some(p) => ((smoothed - p) / p).abs() > DEADBAND,
        };
        if moved {
            self.published = Some(smoothed);
        }
    }

    /// Adds waiting visitors who idled out, seen by this node's expire sweep.
    pub fn record_abandoned(&mut self, now_ms: i64, abandoned: u64) {
        if abandoned > 0 {
            self.history.record_abandoned(now_ms, abandoned);
        }
    }

    /// The published admission rate, visitors per second.
    pub fn rate(&self) -> Option<f64> {
        self.published
    }

    /// The buffered estimate for a visitor with `rank` visitors ahead.
    pub fn estimate(&self, now_ms: i64, rank: u64) -> Option<Estimate> {
        let churn = self.history.churn_per_s(now_ms, RATE_1M_MS).unwrap_or(0.0);
        eta::estimate(rank, self.published, churn)
    }

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
        // run: a first burst (a batch counted at the start of its span, a
        // full bucket) read above it would be taken back at the hand-over,
        // raising every estimate.
        let young = match (young, self.plan.admit_per_s) {
            (Some(r), Some(max)) if max > 0.0 => Some(r.min(max)),
            (r, _) => r,
        };
        [young, self.planned_rate(now_ms)]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }

    /// The plan's rate as it stood when the history stopped being young,
    /// while the measured rate has not yet reached it (see `observe`).
    fn handover_floor(&self, now_ms: i64) -> Option<f64> {
        if self.plan_retired {
            return None;
        }
        let (first_at, _) = self.first_admission?;
        let end = first_at.saturating_add(YOUNG_MS);
        if now_ms.saturating_sub(end) >= HANDOVER_MS {
            return None;
        }
        self.planned_rate(end)
    }

    /// `slots / session length`: how fast the slots can turn over. Until a
    /// session ends, every session has lasted at least the time since the
    /// first admission, so that is the length used.
    fn slot_cap(&self, now_ms: i64) -> Option<f64> {
        let (first_at, _) = self.first_admission?;
        (self.plan.slots > 0).then(|| {
            let session_ms = self
                .first_end_ms
                .unwrap_or(now_ms)
                .min(now_ms)
                .saturating_sub(first_at)
                .max(MIN_SESSION_MS);
            self.plan.slots as f64 * 1000.0 / session_ms as f64
        })
    }

    fn young(&self, now_ms: i64) -> bool {
        self.first_admission
            .is_none_or(|(s, _)| now_ms.saturating_sub(s) < YOUNG_MS)
    }

    /// The plan's rate, bounded by the slots: `slots` sessions that each last
    /// the session length seen so far cannot turn over faster than
    /// `slots / length`. Until a session ends, every session has lasted at
    /// least the time since the first admission, so that is the length used.
    /// `None` before the first admission (the event may not be admitting at
    /// all) and where the mode has neither a rate nor a known slot count.
    fn planned_rate(&self, now_ms: i64) -> Option<f64> {
        self.first_admission?;
        let by_slots = self.slot_cap(now_ms);
        match (self.plan.admit_per_s, by_slots) {
            (Some(rate), Some(cap)) => Some(rate.min(cap)),
            (Some(rate), None) => Some(rate),
            // Without a configured rate, the slot bound is only a rate once
            // a session has really ended (before, it is merely a ceiling).
            (None, cap) => cap.filter(|_| self.first_end_ms.is_some()),
        }
        .filter(|r| r.is_finite() && *r > 0.0)
    }
}

#[cfg(test)]
mod tests;
