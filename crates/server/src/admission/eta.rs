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

use anteroom_core::eta::{self, AdmissionHistory, Estimate, RATE_1M_MS};
use anteroom_store::EventStats;

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

/// One event's rate learning on this node.
#[derive(Debug, Default)]
pub struct EtaFeed {
    history: AdmissionHistory,
    started_ms: Option<i64>,
    /// When this node first saw an admission, and how many it saw since.
    first_admission: Option<(i64, u64)>,
    last_admitted_total: Option<u64>,
    smoothed: Option<(f64, i64)>,
    published: Option<f64>,
}

impl EtaFeed {
    /// Learns from one stats snapshot taken at `now_ms`.
    pub fn observe(&mut self, now_ms: i64, stats: &EventStats) {
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
        let young = self
            .first_admission
            .is_none_or(|(s, _)| now_ms.saturating_sub(s) < YOUNG_MS);
        if !young {
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
        [learnt, stored, since_first]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }
}

#[cfg(test)]
mod tests;
