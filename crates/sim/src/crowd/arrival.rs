//! When each visitor arrives: all at once, on a linear ramp, or as a Poisson
//! process. Offsets from the start of the run; randomness is passed in.

use std::time::Duration;

use rand::Rng;

/// The arrival model of `--arrival`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrival {
    /// Everybody at once, the ticket-drop case.
    Burst,
    /// The arrival rate climbs linearly from 0 to `--rate` per second.
    Ramp,
    /// Independent arrivals at `--rate` per second on average.
    Poisson,
}

/// Arrival offsets of `n` visitors, in non-decreasing order.
pub fn schedule(model: Arrival, n: usize, rate: f64, rng: &mut impl Rng) -> Vec<Duration> {
    let rate = rate.max(f64::MIN_POSITIVE);
    match model {
        Arrival::Burst => vec![Duration::ZERO; n],
        Arrival::Ramp => {
            // Rate r(t) = rate * t / T reaches `rate` at T = 2n / rate, when all
            // n have come; the i-th arrives when the integral of r reaches i.
            let span = 2.0 * n as f64 / rate;
            (0..n)
                .map(|i| Duration::from_secs_f64((2.0 * span * i as f64 / rate).sqrt()))
                .collect()
        }
        Arrival::Poisson => {
            let mut t = 0.0;
            (0..n)
                .map(|_| {
                    let u: f64 = rng.random_range(f64::EPSILON..1.0);
                    t += -u.ln() / rate;
                    Duration::from_secs_f64(t)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn ramp_ends_at_twice_n_over_rate() {
        let s = schedule(Arrival::Ramp, 101, 100.0, &mut StdRng::seed_from_u64(1));
        assert_eq!(s[0], Duration::ZERO);
        // 101 visitors, last index 100: T = 2*101/100; t = sqrt(2*T*100/100).
        let last = s[100].as_secs_f64();
        assert!((last - (2.0 * 2.02_f64).sqrt()).abs() < 1e-9, "{last}");
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn poisson_mean_rate_is_close() {
        let s = schedule(
            Arrival::Poisson,
            10_000,
            500.0,
            &mut StdRng::seed_from_u64(7),
        );
        let rate = 10_000.0 / s[9_999].as_secs_f64();
        assert!((450.0..550.0).contains(&rate), "{rate}");
    }
}
