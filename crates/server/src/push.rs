//! The fan-out behind push streams (`GET /api/queue/stream`): one hub per
//! event with open streams on this node, and the node's cap on streams.
//!
//! Each tick ([`TICK`]) a hub makes **one** store read for its event (the
//! event's stats) and publishes what every stream needs from it in a
//! [`Tick`]: the event's admission progress (`admitted_total`), its queue
//! length and its phase. No stream reads the store per tick:
//!
//! - **Ranks** are derived. Admissions take the best-ranked waiters and,
//!   while admissions run, nobody joins ahead of a waiting visitor, so a
//!   visitor read at rank `r` is at rank `r - k` or better once `k` more
//!   have been admitted. A stream recomputes that lazily, at its own
//!   cadence, from the latest tick (never higher than the truth, so the
//!   rank shown never rises).
//! - **Admissions** wake only the streams they can concern: a stream read
//!   at rank `r` registers the admission count past which it must have been
//!   reached (`admitted_total` before its read + `r` + 1), and a tick wakes
//!   just the streams whose mark it passed; each of those reads its own
//!   status once. So the per-stream reads follow admissions, not ticks.
//! - **Phase changes** (pause, resume, close, opening) wake every stream
//!   through the tick's `watch` channel; that is rare.
//!
//! A stream still reads its own status now and then (see `api::stream`):
//! its admission mark is set a quarter short of its rank, since visitors
//! ahead who leave unadmitted are not counted; every second near the
//! front, where the few visitors there must see departures ahead at once;
//! and otherwise within a third of `queue_idle_timeout`, which is also what
//! keeps the place alive.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anteroom_core::phase::Phase;
use anteroom_store::EventId;
use tokio::sync::{Notify, watch};

use crate::locks::lock;

/// How often a hub reads its event's progress and wakes the streams it
/// concerns: the bound on another node's admission's way to its visitor,
/// besides the visitor's own status read. This node's own admissions kick
/// the hub at once ([`Push::kick`]). An admitted visitor who has not heard
/// yet holds a slot nobody uses.
pub const TICK: Duration = Duration::from_millis(100);

/// Reads remembered in [`Tick::recent`]: a stream's rank baseline is the
/// first read after its own, looked up here (4 s of ticks, fewer when kicks
/// come between them).
const RECENT: usize = 40;

/// What one hub tick learnt, shared by every stream of the event.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// Increases by one with each successful read.
    pub seq: u64,
    pub admitted_total: u64,
    pub waiting: u64,
    pub phase: Option<Phase>,
    /// The event is gone from this node (deleted): its streams end.
    pub gone: bool,
    /// `(seq, admitted_total)` of the last [`RECENT`] reads, newest last.
    recent: [(u64, u64); RECENT],
}

impl Tick {
    fn new(admitted_total: u64, waiting: u64) -> Self {
        Self {
            seq: 0,
            admitted_total,
            waiting,
            phase: None,
            gone: false,
            recent: [(0, admitted_total); RECENT],
        }
    }

    /// `admitted_total` as of the first read after tick `seq` (or a later
    /// one, which only undercounts admissions since then); `None` until
    /// there is one.
    pub fn admitted_after(&self, seq: u64) -> Option<u64> {
        if self.seq <= seq {
            return None;
        }
        self.recent
            .iter()
            .find(|(s, _)| *s > seq)
            .map(|(_, a)| *a)
            .or(Some(self.admitted_total))
    }

    fn record(&mut self, admitted_total: u64, waiting: u64) {
        self.seq += 1;
        self.admitted_total = admitted_total;
        self.waiting = waiting;
        self.recent.rotate_left(1);
        self.recent[RECENT - 1] = (self.seq, admitted_total);
    }
}

/// Streams open per client address ([`crate::client_ip::address_key`]);
/// only addresses with streams open are in it.
type ByAddress = Arc<std::sync::Mutex<HashMap<u128, usize>>>;

/// The node's push streams: the caps, the hubs, the shutdown signal.
pub struct Push {
    max_streams: usize,
    per_address: usize,
    open: Arc<AtomicUsize>,
    by_address: ByAddress,
    hubs: std::sync::Mutex<HashMap<EventId, Arc<Hub>>>,
    closing: watch::Sender<bool>,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("max_streams", &self.max_streams)
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Push {
    pub fn new(max_streams: usize, per_address: usize) -> Self {
        Self {
            max_streams,
            per_address,
            open: Arc::default(),
            by_address: Arc::default(),
            hubs: std::sync::Mutex::default(),
            closing: watch::channel(false).0,
        }
    }

    /// A place for one more stream of the client at `ip`, or `None` at
    /// `server.max_streams`, or when that client's address already holds
    /// `server.max_streams_per_address`: without the second cap, a client
    /// that cycles session cookies (no join needed: a stream before the
    /// opening follows the event) could hold every stream of the node from
    /// an address or two, and every other visitor would poll.
    pub fn try_open(&self, ip: std::net::IpAddr) -> Option<StreamPermit> {
        let key = crate::client_ip::address_key(ip);
        {
            let mut by_address = lock(&self.by_address);
            let held = by_address.entry(key).or_insert(0);
            if *held >= self.per_address {
                return None;
            }
            *held += 1;
        }
        // Dropped on the way out below, it gives the address's place back.
        let mut permit = StreamPermit {
            open: None,
            address: Some((self.by_address.clone(), key)),
        };
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_streams).then_some(n + 1)
            })
            .ok()?;
        metrics::gauge!("anteroom_streams_open").set((taken + 1) as f64);
        permit.open = Some(self.open.clone());
        Some(permit)
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once the server stops: every stream ends then.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Ends every stream (graceful shutdown).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Subscribes a stream to `event`'s hub. The hub is made if this is the
    /// event's first stream on this node, starting from `initial`'s
    /// `(admitted_total, waiting)`; it is returned then, and the caller runs
    /// its loop ([`Hub::publish`] each tick, [`Push::retire`] at the end).
    pub fn subscribe(
        &self,
        event: &EventId,
        initial: impl FnOnce() -> (u64, u64),
    ) -> (Subscription, Option<Arc<Hub>>) {
        let mut hubs = lock(&self.hubs);
        let (hub, started) = match hubs.get(event) {
            Some(hub) => (hub.clone(), None),
            None => {
                let (admitted_total, waiting) = initial();
                let hub = Arc::new(Hub {
                    kick: Notify::new(),
                    tick: watch::channel(Tick::new(admitted_total, waiting)).0,
                    waiters: std::sync::Mutex::default(),
                    streams: AtomicUsize::new(0),
                    next_id: AtomicU64::new(0),
                });
                hubs.insert(event.clone(), hub.clone());
                (hub.clone(), Some(hub))
            }
        };
        hub.streams.fetch_add(1, Ordering::AcqRel);
        let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
        let subscription = Subscription {
            tick: hub.tick.subscribe(),
            hub,
            id,
            wake: Arc::new(Notify::new()),
            mark: None,
        };
        (subscription, started)
    }

    /// This node has just admitted visitors of `event`: its hub, if it has
    /// one, reads the event at once instead of at its next tick, so a
    /// visitor on a stream hears of the admission within a store read. A
    /// kick while the hub is reading is kept for right after.
    pub fn kick(&self, event: &EventId) {
        if let Some(hub) = lock(&self.hubs).get(event) {
            hub.kick.notify_one();
        }
    }

    /// Ends `event`'s hub if no stream follows it any more (`true` then).
    /// Under the hubs lock: a stream subscribing now either finds the hub
    /// still listed (and keeps it running) or starts anew.
    pub fn retire_if_idle(&self, event: &EventId, hub: &Hub) -> bool {
        let mut hubs = lock(&self.hubs);
        if hub.streams.load(Ordering::Acquire) == 0 {
            hubs.remove(event);
            return true;
        }
        false
    }

    /// Ends `event`'s hub: the event is gone from this node (deleted), and
    /// its streams end.
    pub fn retire(&self, event: &EventId, hub: &Hub) {
        hub.tick.send_modify(|t| t.gone = true);
        lock(&self.hubs).remove(event);
    }
}

/// One open stream's place under `server.max_streams` and its address's
/// under `server.max_streams_per_address`, given back when dropped.
#[derive(Debug)]
pub struct StreamPermit {
    open: Option<Arc<AtomicUsize>>,
    address: Option<(ByAddress, u128)>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        if let Some(open) = &self.open {
            let left = open.fetch_sub(1, Ordering::AcqRel).saturating_sub(1);
            metrics::gauge!("anteroom_streams_open").set(left as f64);
        }
        if let Some((by_address, key)) = &self.address {
            let mut by_address = lock(by_address);
            if let Some(held) = by_address.get_mut(key) {
                *held = held.saturating_sub(1);
                if *held == 0 {
                    // The map holds only addresses with streams open.
                    by_address.remove(key);
                }
            }
        }
    }
}

/// One event's fan-out.
pub struct Hub {
    /// This node admitted: read now (see [`Push::kick`]).
    pub kick: Notify,
    tick: watch::Sender<Tick>,
    /// Streams waiting for `admitted_total` to reach a mark, by
    /// `(mark, stream id)`: a tick wakes the ones it passed, no others.
    waiters: std::sync::Mutex<BTreeMap<(u64, u64), Arc<Notify>>>,
    streams: AtomicUsize,
    next_id: AtomicU64,
}

/// A stream's handle on its event's hub.
pub struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    /// Woken when an admission may have reached this stream's visitor.
    pub wake: Arc<Notify>,
    /// The latest tick; `changed()` fires on phase changes only.
    pub tick: watch::Receiver<Tick>,
    mark: Option<(u64, u64)>,
}

impl Subscription {
    /// The latest tick (copied; the lock is not held).
    pub fn latest(&self) -> Tick {
        *self.tick.borrow()
    }

    /// Wake this stream once `admitted_total` reaches `mark` (replacing
    /// any earlier mark); `None` stops waking it for admissions.
    pub fn wake_at(&mut self, mark: Option<u64>) {
        let mut waiters = lock(&self.hub.waiters);
        if let Some(old) = self.mark.take() {
            waiters.remove(&old);
        }
        if let Some(m) = mark {
            let key = (m, self.id);
            waiters.insert(key, self.wake.clone());
            self.mark = Some(key);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.wake_at(None);
        self.hub.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Hub {
    /// Publishes one tick's read of the event and wakes the streams whose
    /// mark `admitted_total` passed; a phase change wakes every stream.
    pub fn publish(&self, admitted_total: u64, waiting: u64, phase: Phase) {
        self.tick.send_if_modified(|t| {
            t.record(admitted_total, waiting);
            let changed = t.phase != Some(phase);
            t.phase = Some(phase);
            changed
        });
        let due = {
            let mut waiters = lock(&self.waiters);
            let later = waiters.split_off(&(admitted_total.saturating_add(1), 0));
            std::mem::replace(&mut *waiters, later)
        };
        for wake in due.values() {
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_baseline_is_the_first_read_after_the_stream_s() {
        let mut t = Tick::new(100, 50);
        assert_eq!(t.admitted_after(0), None, "no read since");
        t.record(110, 40); // seq 1
        t.record(130, 20); // seq 2
        assert_eq!(t.admitted_after(0), Some(110));
        assert_eq!(t.admitted_after(1), Some(130));
        assert_eq!(t.admitted_after(2), None);
        for n in 0..40 {
            t.record(200 + n, 0);
        }
        // Fallen out of the window: a later read (fewer admissions counted).
        assert_eq!(t.admitted_after(1), Some(200 + 40 - RECENT as u64));
    }

    fn ip(text: &str) -> std::net::IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_cap_counts_open_streams_and_frees_on_drop() {
        let push = Push::new(2, 10);
        let a = push.try_open(ip("10.0.0.1")).unwrap();
        let _b = push.try_open(ip("10.0.0.2")).unwrap();
        assert!(push.try_open(ip("10.0.0.3")).is_none());
        drop(a);
        assert_eq!(push.open(), 1);
        assert!(push.try_open(ip("10.0.0.3")).is_some());
        assert!(
            Push::new(0, 10).try_open(ip("10.0.0.1")).is_none(),
            "0 turns streams off"
        );
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_gets_it_back() {
        let push = Push::new(100, 2);
        let a = push.try_open(ip("10.0.0.1")).unwrap();
        let _b = push.try_open(ip("10.0.0.1")).unwrap();
        assert!(push.try_open(ip("10.0.0.1")).is_none(), "past its share");
        // An IPv6 client is one client across its /64.
        let _c = push.try_open(ip("2001:db8::1")).unwrap();
        let _d = push.try_open(ip("2001:db8::ffff:2")).unwrap();
        assert!(push.try_open(ip("2001:db8::3")).is_none());
        assert!(
            push.try_open(ip("2001:db8:0:1::1")).is_some(),
            "another /64"
        );
        // Another client is not held back by it.
        assert!(push.try_open(ip("10.0.0.2")).is_some());
        drop(a);
        assert!(push.try_open(ip("10.0.0.1")).is_some());
        // A refusal at the node's cap gives the address's place back.
        let full = Push::new(1, 5);
        let _only = full.try_open(ip("10.0.0.9")).unwrap();
        for _ in 0..10 {
            assert!(full.try_open(ip("10.0.0.1")).is_none());
        }
        assert!(
            lock(&full.by_address)
                .get(&crate::client_ip::address_key(ip("10.0.0.1")))
                .is_none()
        );
        assert_eq!(full.open(), 1);
    }

    #[tokio::test]
    async fn a_kick_is_kept_for_a_hub_that_is_not_waiting_yet() {
        let push = Push::new(10, 10);
        let event = EventId::new("tickets").unwrap();
        let (_stream, hub) = push.subscribe(&event, || (0, 0));
        let hub = hub.expect("the first stream starts the hub");
        // The hub is busy reading (not waiting) when the admission lands:
        // the kick is kept and the next wait ends at once.
        push.kick(&event);
        tokio::time::timeout(Duration::from_millis(500), hub.kick.notified())
            .await
            .expect("the kick was lost");
        // Without a kick the hub waits for its tick.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), hub.kick.notified())
                .await
                .is_err()
        );
        // An event without streams on this node has no hub to kick.
        push.kick(&EventId::new("other").unwrap());
    }
}
