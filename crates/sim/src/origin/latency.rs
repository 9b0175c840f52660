//! The origin's latency model, parsed from the `--latency` flag.
//!
//! `fixed:20ms` answers every request after 20 ms. `knee:20ms,200,5ms` adds
//! 5 ms per request in flight above 200, the way a real backend degrades once
//! its worker pool is saturated. Either may end in `,fail=N`: answer `503`
//! while more than N requests are in flight.

use std::{str::FromStr, time::Duration};

/// How long the origin takes to answer, and when it starts to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyModel {
    /// Latency at or under the knee.
    pub base: Duration,
    /// Concurrency above which each extra request adds `per_request`.
    pub knee: u64,
    /// Extra latency per request in flight above the knee.
    pub per_request: Duration,
    /// Concurrency above which requests are answered `503`.
    pub fail_above: Option<u64>,
}

impl LatencyModel {
    /// A model with a constant latency and no failures.
    pub fn fixed(base: Duration) -> Self {
        LatencyModel {
            base,
            knee: u64::MAX,
            per_request: Duration::ZERO,
            fail_above: None,
        }
    }

    /// Latency of a request that sees `concurrency` requests in flight (itself included).
    pub fn latency(&self, concurrency: u64) -> Duration {
        let extra = concurrency.saturating_sub(self.knee);
        let extra = u32::try_from(extra).unwrap_or(u32::MAX);
        self.base
            .saturating_add(self.per_request.saturating_mul(extra))
    }

    /// Whether a request that sees `concurrency` in flight should fail.
    pub fn fails(&self, concurrency: u64) -> bool {
        self.fail_above.is_some_and(|limit| concurrency > limit)
    }
}

impl FromStr for LatencyModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("latency model {s:?}: expected fixed:DUR or knee:DUR,N,DUR"))?;
        let mut parts: Vec<&str> = rest.split(',').map(str::trim).collect();
        let fail_above = match parts.last().and_then(|p| p.strip_prefix("fail=")) {
            Some(n) => {
                let n = n.parse().map_err(|_| format!("fail={n}: not a number"))?;
                parts.pop();
                Some(n)
            }
            None => None,
        };
        let mut model = match (kind, parts.as_slice()) {
            ("fixed", [base]) => LatencyModel::fixed(duration(base)?),
            ("knee", [base, knee, per]) => LatencyModel {
                base: duration(base)?,
                knee: knee
                    .parse()
                    .map_err(|_| format!("knee {knee:?}: not a number"))?,
                per_request: duration(per)?,
                fail_above: None,
            },
            _ => {
                return Err(format!(
                    "latency model {s:?}: expected fixed:DUR or knee:DUR,N,DUR"
                ));
            }
        };
        model.fail_above = fail_above;
        Ok(model)
    }
}

/// Parses `250us`, `20ms`, `1s` or `1.5s`.
fn duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("duration {s:?}: expected e.g. 20ms, 1s or 500us");
    let (number, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|at| s.split_at(at))
        .ok_or_else(bad)?;
    let n: f64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<LatencyModel, ()>) {
        assert_eq!(
            input.parse::<LatencyModel>().map_err(|_| ()),
            expected,
            "{input}"
        );
    }

    #[test]
    fn parses_models() {
        let ms = Duration::from_millis;
        check("fixed:20ms", Ok(LatencyModel::fixed(ms(20))));
        check(
            "knee:20ms,200,5ms",
            Ok(LatencyModel {
                base: ms(20),
                knee: 200,
                per_request: ms(5),
                fail_above: None,
            }),
        );
        check(
            "knee:1s,10,500us,fail=50",
            Ok(LatencyModel {
                base: ms(1000),
                knee: 10,
                per_request: Duration::from_micros(500),
                fail_above: Some(50),
            }),
        );
        check(
            "fixed:0ms,fail=3",
            Ok(LatencyModel {
                fail_above: Some(3),
                ..LatencyModel::fixed(ms(0))
            }),
        );
        check("fixed", Err(()));
        check("knee:20ms,200", Err(()));
        check("fixed:20parsecs", Err(()));
        check("linear:20ms", Err(()));
    }

    #[test]
    fn degrades_above_the_knee() {
        let m: LatencyModel = "knee:20ms,200,5ms,fail=300".parse().unwrap();
        assert_eq!(m.latency(1), Duration::from_millis(20));
        assert_eq!(m.latency(200), Duration::from_millis(20));
        assert_eq!(m.latency(202), Duration::from_millis(30));
        assert!(!m.fails(300));
        assert!(m.fails(301));
    }
}
