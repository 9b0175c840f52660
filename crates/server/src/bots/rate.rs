//! Per-IP and per-session rate limits on enter and position (`[limits]`), so
//! a polling flood is refused in memory before it reaches the queue store.
//!
//! Each kind of call has its own limiters: a visitor polling at the allowed
//! rate must still be able to enter. IPv6 clients are keyed by their /64,
//! the smallest block one subscriber is usually given, so rotating through
//! addresses of one prefix buys nothing.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// `[limits]` values the limiters (and the entry cap) need; 0 disables one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    pub per_ip_per_second: u32,
    pub per_session_per_second: u32,
    /// New queue entries per address per event and window before joining
    /// costs proof-of-work ([`super::entries`]).
    pub entries_per_ip: u32,
    pub entries_window_ms: i64,
}

impl Default for RateLimits {
    fn default() -> Self {
        let cap = super::EntryCap::default();
        Self {
            per_ip_per_second: 0,
            per_session_per_second: 0,
            entries_per_ip: cap.per_window,
            entries_window_ms: cap.window_ms,
        }
    }
}

/// Which API call is being limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateKind {
    Enter,
    Position,
}

/// A refused call: answer `429` with `Retry-After: retry_after_s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rate limited; retry after {retry_after_s} s")]
pub struct RateLimited {
    pub retry_after_s: u64,
}

struct Pair {
    ip: Option<DefaultKeyedRateLimiter<u128>>,
    session: Option<DefaultKeyedRateLimiter<u64>>,
}

/// The keyed limiters of one server.
pub struct Limiters {
    enter: Pair,
    position: Pair,
    clock: DefaultClock,
    /// Sessions are keyed by a keyed hash, not the id itself: no allocation
    /// per call, and the ids are not kept in yet another map.
    hasher: RandomState,
}

impl Limiters {
    pub fn new(limits: RateLimits) -> Self {
        let pair = || Pair {
            ip: quota(limits.per_ip_per_second).map(RateLimiter::dashmap),
            session: quota(limits.per_session_per_second).map(RateLimiter::dashmap),
        };
        Self {
            enter: pair(),
            position: pair(),
            clock: DefaultClock::default(),
            hasher: RandomState::new(),
        }
    }

    /// Counts one call; `Err` when the IP or the session is over its rate.
    pub fn check(&self, kind: RateKind, ip: IpAddr, session: &str) -> Result<(), RateLimited> {
        let pair = match kind {
            RateKind::Enter => &self.enter,
            RateKind::Position => &self.position,
        };
        if let Some(l) = &pair.ip {
            l.check_key(&crate::client_ip::address_key(ip))
                .map_err(|n| self.refusal(&n))?;
        }
        if let Some(l) = &pair.session
            && !session.is_empty()
        {
            let key = self.hasher.hash_one(session);
            l.check_key(&key).map_err(|n| self.refusal(&n))?;
        }
        Ok(())
    }

    /// Counts one call against the IP limit only: for calls a real browser
    /// makes on its own, right after another (the page load, the answer to
    /// a proof-of-work challenge), which the session limit would refuse.
    pub fn check_ip(&self, kind: RateKind, ip: IpAddr) -> Result<(), RateLimited> {
        self.check(kind, ip, "")
    }

    /// Forgets keys whose limit has fully replenished, so the maps hold only
    /// clients seen in the last second or so; called by the housekeeping task.
    pub fn retain_recent(&self) {
        for pair in [&self.enter, &self.position] {
            if let Some(l) = &pair.ip {
                l.retain_recent();
                l.shrink_to_fit();
            }
            if let Some(l) = &pair.session {
                l.retain_recent();
                l.shrink_to_fit();
            }
        }
    }

    fn refusal(
        &self,
        not_until: &governor::NotUntil<<DefaultClock as Clock>::Instant>,
    ) -> RateLimited {
        let wait = not_until.wait_time_from(self.clock.now());
        // Whole seconds, rounded up and at least 1: `Retry-After: 0` would
        // invite an immediate retry that is refused again.
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        RateLimited {
            retry_after_s: secs.max(1),
        }
    }
}

fn quota(per_second: u32) -> Option<Quota> {
    NonZeroU32::new(per_second).map(Quota::per_second)
}
