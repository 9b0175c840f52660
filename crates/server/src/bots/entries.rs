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
use std::sync::{Arc, Mutex};

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
    /// Joins priced and not finished yet ([`Pending`]): they count as
    /// entries until they end, so joins sent at one moment cannot all be
    /// priced by the count from before any of them.
    pending: u32,
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
                pending: self.pending,
            };
        } else if windows == 1 {
            self.previous = self.count;
            self.count = 0;
            self.start_ms += window_ms;
        }
    }
}

type Windows = Arc<Mutex<HashMap<(EventId, u128), Window>>>;

fn lock(windows: &Windows) -> std::sync::MutexGuard<'_, HashMap<(EventId, u128), Window>> {
    windows.lock().unwrap_or_else(|p| p.into_inner())
}

/// New entries per (event, address) on this node.
#[derive(Default)]
pub struct EntryCounter {
    windows: Windows,
}

/// A join priced by [`EntryCounter::price`] and not finished yet: it counts
/// as an entry of its address until it is dropped, and becomes one with
/// [`Pending::joined`].
#[derive(Debug)]
pub struct Pending {
    windows: Windows,
    key: (EventId, u128),
    cap: EntryCap,
    done: bool,
}

impl Pending {
    /// The join made a new queue entry: counted in the address's window.
    pub fn joined(mut self, now_ms: i64) {
        let mut windows = lock(&self.windows);
        if let Some(w) = windows.get_mut(&self.key) {
            w.roll(now_ms, self.cap.window_ms);
            w.pending = w.pending.saturating_sub(1);
            w.count = w.count.saturating_add(1);
        }
        self.done = true;
    }
}

impl Drop for Pending {
    /// The join was refused, failed, or found the visitor already queued.
    fn drop(&mut self) {
        if !self.done
            && let Some(w) = lock(&self.windows).get_mut(&self.key)
        {
            w.pending = w.pending.saturating_sub(1);
        }
    }
}

impl EntryCounter {
    /// The extra proof-of-work bits a new entry from `ip` costs now: `None`
    /// under the cap, `Some(0)` at it (the event's own difficulty), one
    /// more bit each time the address's recent entries double past it.
    /// Joins from the address still in flight count as entries, and this
    /// one counts from now until its [`Pending`] is dropped (or joined):
    /// in one step with the price, so joins sent together are priced one
    /// after the other. `None` for the pending entry when the cap is off
    /// or the node tracks as many addresses as it may.
    pub fn price(
        &self,
        cap: EntryCap,
        event: &EventId,
        ip: IpAddr,
        now_ms: i64,
    ) -> (Option<u8>, Option<Pending>) {
        if cap.per_window == 0 {
            return (None, None);
        }
        let mut windows = lock(&self.windows);
        let key = (event.clone(), address_key(ip));
        if !windows.contains_key(&key) && windows.len() >= MAX_ADDRESSES {
            metrics::counter!("anteroom_entry_cap_untracked_total").increment(1);
            return (None, None);
        }
        let w = windows.entry(key.clone()).or_insert(Window {
            window_ms: cap.window_ms,
            start_ms: now_ms,
            count: 0,
            previous: 0,
            pending: 0,
        });
        w.roll(now_ms, cap.window_ms);
        let recent = w.recent(now_ms, cap.window_ms) + u64::from(w.pending);
        w.pending = w.pending.saturating_add(1);
        let pending = Pending {
            windows: self.windows.clone(),
            key,
            cap,
            done: false,
        };
        (extra_bits(recent, cap.per_window), Some(pending))
    }

    /// Forgets addresses with nothing left in their window and no join in
    /// flight; called by the housekeeping task.
    pub fn retain_recent(&self, now_ms: i64) {
        lock(&self.windows)
            .retain(|_, w| w.pending > 0 || now_ms - w.start_ms < w.window_ms.saturating_mul(2));
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

    /// One finished join that made a new entry.
    fn record(c: &EntryCounter, cap: EntryCap, e: &EventId, ip: IpAddr, now_ms: i64) {
        if let (_, Some(pending)) = c.price(cap, e, ip, now_ms) {
            pending.joined(now_ms);
        }
    }

    /// The price a join would pay now (the join then given up).
    fn price(c: &EntryCounter, cap: EntryCap, e: &EventId, ip: IpAddr, now_ms: i64) -> Option<u8> {
        c.price(cap, e, ip, now_ms).0
    }

    #[test]
    fn entries_are_counted_per_event_and_address_and_age_out() {
        let c = EntryCounter::default();
        let e = EventId::new("e").unwrap();
        let other = EventId::new("f").unwrap();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let ip2: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..4 {
            assert_eq!(price(&c, CAP, &e, ip, 0), None);
            record(&c, CAP, &e, ip, 0);
        }
        assert_eq!(price(&c, CAP, &e, ip, 0), Some(0));
        assert_eq!(price(&c, CAP, &other, ip, 0), None);
        assert_eq!(price(&c, CAP, &e, ip2, 0), None);
        // Half a window into the next one, half the old entries still count.
        record(&c, CAP, &e, ip, 90_000);
        assert_eq!(price(&c, CAP, &e, ip, 90_000), None);
        // Two windows later nothing is left.
        record(&c, CAP, &e, ip, 200_000);
        assert_eq!(price(&c, CAP, &e, ip, 200_000), None);
        c.retain_recent(500_000);
        assert!(c.windows.lock().unwrap().is_empty());
    }

    /// Joins sent at one moment are priced one after the other: each one in
    /// flight counts as an entry, so they cannot all be priced by the count
    /// from before any of them (60 at once all joined free under a cap of
    /// 3). One that ends without a new entry gives its count back.
    #[test]
    fn joins_in_flight_count_until_they_end() {
        let c = EntryCounter::default();
        let e = EventId::new("e").unwrap();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let in_flight: Vec<_> = (0..16).map(|_| c.price(CAP, &e, ip, 0)).collect();
        let prices: Vec<_> = in_flight.iter().map(|(p, _)| *p).collect();
        assert_eq!(&prices[..4], [None; 4]);
        assert_eq!(&prices[4..8], [Some(0); 4]);
        assert_eq!(&prices[8..16], [Some(1); 8]);
        // Refused or already queued: nothing counted.
        drop(in_flight);
        assert_eq!(price(&c, CAP, &e, ip, 0), None);
        // Joined: counted, and the window keeps it while joins are in flight.
        let held = c.price(CAP, &e, ip, 0).1.unwrap();
        for _ in 0..3 {
            record(&c, CAP, &e, ip, 0);
        }
        assert_eq!(price(&c, CAP, &e, ip, 0), Some(0));
        c.retain_recent(500_000);
        assert_eq!(
            c.windows.lock().unwrap().len(),
            1,
            "a join in flight keeps its window"
        );
        drop(held);
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
        record(&c, off, &e, ip, 0);
        assert_eq!(price(&c, off, &e, ip, 0), None);
        assert!(c.windows.lock().unwrap().is_empty());
    }
}
