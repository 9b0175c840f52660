//! The origin as the gate sees it: a sliding window of proxied responses
//! (latency and whether the origin failed) that adaptive mode reads as p95
//! latency and 5xx share.

use std::collections::VecDeque;

/// How far back the window looks. Short enough that a backoff is seen within
/// a few ticks, long enough to hold more than `MIN_ORIGIN_SAMPLES` at
/// modest traffic.
pub const WINDOW_MS: i64 = 10_000;

/// At most this many responses are kept (the newest): under heavy traffic the
/// window covers less than [`WINDOW_MS`], which only makes it more recent,
/// while memory and the p95 sort stay bounded.
pub const MAX_SAMPLES: usize = 4_096;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: i64,
    latency_ms: u32,
    failed: bool,
}

/// Recent origin responses of one event.
#[derive(Debug, Default)]
pub struct OriginWindow {
    samples: VecDeque<Sample>,
}

/// What adaptive mode reads: `None` figures while the window is empty.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OriginSummary {
    pub p95_ms: Option<f64>,
    pub error_rate: Option<f64>,
    pub samples: u64,
}

impl OriginWindow {
    /// Adds one response. 5xx answers count as failures: the origin's own,
    /// and the proxy's 502/504 when the origin could not be reached in time.
    pub fn record(&mut self, now_ms: i64, latency_ms: i64, status: u16) {
        if self.samples.len() >= MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at_ms: now_ms,
            // A wall clock stepping back gives a negative span: count it as 0.
            latency_ms: u32::try_from(latency_ms.max(0)).unwrap_or(u32::MAX),
            failed: status >= 500,
        });
    }

    /// p95 latency and failure share of the responses of the last
    /// [`WINDOW_MS`] before `now_ms`.
    pub fn summary(&mut self, now_ms: i64) -> OriginSummary {
        let from = now_ms.saturating_sub(WINDOW_MS);
        while self.samples.front().is_some_and(|s| s.at_ms < from) {
            self.samples.pop_front();
        }
        let mut latencies: Vec<u32> = self.samples.iter().map(|s| s.latency_ms).collect();
        if latencies.is_empty() {
            return OriginSummary::default();
        }
        latencies.sort_unstable();
        let n = latencies.len();
        // Nearest rank: the smallest value with at least 95 % at or below it.
        let rank = (n * 95).div_ceil(100).clamp(1, n) - 1;
        let failed = self.samples.iter().filter(|s| s.failed).count();
        OriginSummary {
            p95_ms: latencies.get(rank).map(|v| f64::from(*v)),
            error_rate: Some(failed as f64 / n as f64),
            samples: n as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_error_rate_and_window() {
        let mut w = OriginWindow::default();
        assert_eq!(w.summary(0), OriginSummary::default());
        for i in 0..100 {
            w.record(1_000, i, if i < 10 { 503 } else { 200 });
        }
        let s = w.summary(1_000);
        assert_eq!(s.samples, 100);
        assert_eq!(s.p95_ms, Some(94.0));
        assert_eq!(s.error_rate, Some(0.1));
        // Everything is older than the window 10 s later.
        assert_eq!(w.summary(1_000 + WINDOW_MS + 1).samples, 0);
    }

    #[test]
    fn bounded_and_negative_latency_is_zero() {
        let mut w = OriginWindow::default();
        for _ in 0..MAX_SAMPLES + 10 {
            w.record(0, -5, 200);
        }
        let s = w.summary(0);
        assert_eq!(s.samples, MAX_SAMPLES as u64);
        assert_eq!(s.p95_ms, Some(0.0));
    }
}
