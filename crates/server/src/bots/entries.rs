//! The per-address entry cap (`bots.entries_per_ip` new queue entries per
//! `bots.entries_window`, per event): past it, joining from that address
//! costs proof-of-work, harder the further past it.
//!
//! A price rather than a refusal, because one address is often many people
//! (a carrier NAT, a campus, an office): they are slowed, never shut out,
//! while a script that floods a pre-window with lottery tickets from one
//! address pays for each ticket, and pays more the more it takes. The
//! counts are this node's own (no store round trip on the join path).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use anteroom_store::EventId;

use crate::client_ip::address_key;

/// Addresses tracked per node at most; past it new addresses go uncounted
/// (and are counted in a metric) rather than memory growing without bound.
const MAX_ADDRESSES: usize = 200_000;

/// Extra bits at most on top of the event's difficulty: each bit doubles
/// the work, so +8 is 256 times the base price.
const MAX_EXTRA_BITS: u8 = 8;

/// The cap of one event: `per_window` new entries per `window_ms` per
/// address; 0 disables it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryCap {
    pub per_window: u32,
    pub window_ms: i64,
}

/// `bots.entries_per_ip` when unset: more people than share one home
/// address, few enough that one address cannot buy a pre-window's lottery.
pub const DEFAULT_ENTRIES_PER_IP: u32 = 20;
/// `bots.entries_window` when unset.
pub const DEFAULT_ENTRIES_WINDOW_MS: i64 = 10 * 60 * 1000;

impl Default for EntryCap {
    fn default() -> Self {
        Self {
            per_window: DEFAULT_ENTRIES_PER_IP,
            window_ms: DEFAULT_ENTRIES_WINDOW_MS,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Window {
    window_ms: i64,
    start_ms: i64,
    count: u32,
    previous: u32,
}

impl Window {
    /// Entries in the sliding window ending now: this fixed window's count
    /// plus the share of the previous one the sliding window still covers.
    fn recent(&self, now_ms: i64, window_ms: i64) -> u64 {
        let elapsed = (now_ms - self.start_ms).clamp(0, window_ms);
        let carried = u64::from(self.previous) * u64::try_from(window_ms - elapsed).unwrap_or(0)
            / u64::try_from(window_ms).unwrap_or(1).max(1);
        u64::from(self.count) + carried
    }

    fn roll(&mut self, now_ms: i64, window_ms: i64) {
        let windows = (now_ms - self.start_ms).div_euclid(window_ms);
        if windows >= 2 {
            *self = Window {
                window_ms,
                start_ms: now_ms,
                count: 0,
                previous: 0,
            };
        } else if windows == 1 {
            self.previous = self.count;
            self.count = 0;
            self.start_ms += window_ms;
        }
    }
}

/// New entries per (event, address) on this node.
#[derive(Default)]
pub struct EntryCounter {
    windows: Mutex<HashMap<(EventId, u128), Window>>,
}

impl EntryCounter {
    /// The extra proof-of-work bits a new entry from `ip` costs now: `None`
    /// under the cap, `Some(0)` at it (the event's own difficulty), one
    /// more bit each time the address's recent entries double past it.
    pub fn price(&self, cap: EntryCap, event: &EventId, ip: IpAddr, now_ms: i64) -> Option<u8> {
        if cap.per_window == 0 {
            return None;
        }
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let recent = windows
            .get(&(event.clone(), address_key(ip)))
            .map_or(0, |w| w.recent(now_ms, cap.window_ms));
        extra_bits(recent, cap.per_window)
    }

    /// Counts one new entry from `ip`.
    pub fn record(&self, cap: EntryCap, event: &EventId, ip: IpAddr, now_ms: i64) {
        if cap.per_window == 0 {
            return;
        }
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let key = (event.clone(), address_key(ip));
        if !windows.contains_key(&key) && windows.len() >= MAX_ADDRESSES {
            metrics::counter!("anteroom_entry_cap_untracked_total").increment(1);
            return;
        }
        let w = windows.entry(key).or_insert(Window {
            window_ms: cap.window_ms,
            start_ms: now_ms,
            count: 0,
            previous: 0,
        });
        w.roll(now_ms, cap.window_ms);
        w.count = w.count.saturating_add(1);
    }

    /// Forgets addresses with nothing left in their window; called by the
    /// housekeeping task.
    pub fn retain_recent(&self, now_ms: i64) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.retain(|_, w| now_ms - w.start_ms < w.window_ms.saturating_mul(2));
    }
}

/// `None` below `cap`; else `floor(log2(recent / cap))`, at most
/// [`MAX_EXTRA_BITS`].
fn extra_bits(recent: u64, cap: u32) -> Option<u8> {
    let cap = u64::from(cap);
    if recent < cap {
        return None;
    }
    let ratio = recent / cap;
    let bits = u8::try_from(ratio.ilog2()).unwrap_or(u8::MAX);
    Some(bits.min(MAX_EXTRA_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: EntryCap = EntryCap {
        per_window: 4,
        window_ms: 60_000,
    };

    #[test]
    fn the_price_starts_at_the_cap_and_rises_per_doubling() {
        assert_eq!(extra_bits(3, 4), None);
        assert_eq!(extra_bits(4, 4), Some(0));
        assert_eq!(extra_bits(7, 4), Some(0));
        assert_eq!(extra_bits(8, 4), Some(1));
        assert_eq!(extra_bits(16, 4), Some(2));
        assert_eq!(extra_bits(u64::MAX, 4), Some(MAX_EXTRA_BITS));
    }

    #[test]
    fn entries_are_counted_per_event_and_address_and_age_out() {
        let c = EntryCounter::default();
        let e = EventId::new("e").unwrap();
        let other = EventId::new("f").unwrap();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let ip2: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..4 {
            assert_eq!(c.price(CAP, &e, ip, 0), None);
            c.record(CAP, &e, ip, 0);
        }
        assert_eq!(c.price(CAP, &e, ip, 0), Some(0));
        assert_eq!(c.price(CAP, &other, ip, 0), None);
        assert_eq!(c.price(CAP, &e, ip2, 0), None);
        // Half a window into the next one, half the old entries still count.
        c.record(CAP, &e, ip, 90_000);
        assert_eq!(c.price(CAP, &e, ip, 90_000), None);
        // Two windows later nothing is left.
        c.record(CAP, &e, ip, 200_000);
        assert_eq!(c.price(CAP, &e, ip, 200_000), None);
        c.retain_recent(500_000);
        assert!(c.windows.lock().unwrap().is_empty());
    }

    #[test]
    fn a_disabled_cap_counts_nothing() {
        let c = EntryCounter::default();
        let e = EventId::new("e").unwrap();
        let off = EntryCap {
            per_window: 0,
            window_ms: 60_000,
        };
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        c.record(off, &e, ip, 0);
        assert_eq!(c.price(off, &e, ip, 0), None);
        assert!(c.windows.lock().unwrap().is_empty());
    }
}
