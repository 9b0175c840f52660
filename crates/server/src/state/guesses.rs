//! Failed admin authentications by client address, kept beside the state
//! so the admin API's middleware can count them per server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens an address may send within [`FAILURE_WINDOW`]; past them
/// its calls are answered `429` until the window ends, whatever token they
/// carry (a right one too: the answer must not tell a guess that hit).
pub const MAX_FAILURES: u32 = 20;
/// The window [`MAX_FAILURES`] counts over, from an address's first miss.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at once. Past it, after expired ones are forgotten, a
/// new address is not tracked: an attacker with that many addresses is
/// not slowed, but the operator is never locked out by someone else's
/// misses filling the table.
const MAX_TRACKED: usize = 16_384;

/// Failed admin authentications by client address (IPv6 by its /64), so
/// that a token cannot be guessed at the speed the listener answers.
#[derive(Debug, Default)]
pub struct Failures {
    by_address: Mutex<HashMap<u128, Strikes>>,
}

#[derive(Debug, Clone, Copy)]
struct Strikes {
    count: u32,
    since: Instant,
}

impl Failures {
    /// `Some(seconds)` to wait when `ip` has used up its misses.
    pub fn locked_out(&self, ip: IpAddr, now: Instant) -> Option<u64> {
        let key = crate::client_ip::address_key(ip);
        let map = crate::locks::lock(&self.by_address);
        let strikes = map.get(&key)?;
        let ends = strikes.since + FAILURE_WINDOW;
        (strikes.count >= MAX_FAILURES && now < ends)
            .then(|| ends.duration_since(now).as_secs().max(1))
    }

    /// Counts one wrong (or missing) token from `ip`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let key = crate::client_ip::address_key(ip);
        let mut map = crate::locks::lock(&self.by_address);
        if map.len() >= MAX_TRACKED && !map.contains_key(&key) {
            map.retain(|_, s| now < s.since + FAILURE_WINDOW);
            if map.len() >= MAX_TRACKED {
                return;
            }
        }
        let strikes = map.entry(key).or_insert(Strikes {
            count: 0,
            since: now,
        });
        if now >= strikes.since + FAILURE_WINDOW {
            *strikes = Strikes {
                count: 0,
                since: now,
            };
        }
        strikes.count = strikes.count.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_misses_waits_out_the_window_and_others_do_not() {
        let failures = Failures::default();
        let t0 = Instant::now();
        let a: IpAddr = "198.51.100.7".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b_neighbour: IpAddr = "2001:db8:1:2::99".parse().unwrap();
        for _ in 0..MAX_FAILURES - 1 {
            failures.failed(a, t0);
        }
        assert_eq!(failures.locked_out(a, t0), None);
        failures.failed(a, t0);
        assert_eq!(failures.locked_out(a, t0), Some(60));
        assert_eq!(
            failures.locked_out(a, t0 + Duration::from_secs(59)),
            Some(1)
        );
        assert_eq!(failures.locked_out(a, t0 + FAILURE_WINDOW), None);
        // Another address is not held by a's misses; an IPv6 /64 counts
        // as one address.
        assert_eq!(failures.locked_out(b, t0), None);
        for _ in 0..MAX_FAILURES {
            failures.failed(b, t0);
        }
        assert!(failures.locked_out(b_neighbour, t0).is_some());
        // A new window starts from the next miss after one ends.
        failures.failed(a, t0 + FAILURE_WINDOW);
        assert_eq!(failures.locked_out(a, t0 + FAILURE_WINDOW), None);
    }
}
