//! `AppState`: everything a request handler or background task shares — the
//! validated config, the store, the keyring, the route table and the live
//! state of each event (policy, stats snapshot, revocation cache).
//!
//! Events can be replaced at run time (`PUT /admin/events/E`): the set of
//! events is an `Arc` swapped under a lock, and each event's live state
//! ([`Live`]) survives the swap so a config change keeps its history.

pub mod admission;
pub mod drain;
pub mod guesses;
pub mod observed;
pub mod renewals;
pub mod revocations;
#[cfg(test)]
pub mod testing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use anteroom_core::phase::{AdminState, Phase, phase};
use anteroom_core::score::ScoreKey;
use anteroom_core::token::Keyring;
use anteroom_store::{EventId, EventStats, QueueStore};

use crate::bots::{BotDefence, RateLimits};
use crate::clock::Clock;
use crate::config::stored::EventTimes;
use crate::config::{Config, EventConfig, Identity, ServerConfig};
use crate::identity::JwtVerifier;
use crate::locks::{read, write};
use crate::page::Pages;
use crate::proxy::Proxy;
use crate::routes::RouteTable;
use revocations::Revocations;

/// What the refresher last learnt about an event from the store.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub stats: EventStats,
    pub admin: AdminState,
    /// How many admin states this node set ([`Live::set_admin`]): a refresh
    /// whose read of the store began before one keeps the state it set.
    pub admin_set: u64,
    /// `false` while the store cannot be reached for this event (drain).
    pub reachable: bool,
    pub refreshed_at_ms: i64,
    /// Phase, origin and bot figures of the same refresh (admin view, gauges).
    pub observed: observed::Observed,
}

/// Per-event state that outlives config changes.
#[derive(Debug, Default)]
pub struct Live {
    pub snapshot: RwLock<Snapshot>,
    pub revocations: RwLock<Revocations>,
    /// The admission policy's memory (no-show compensation, AIMD window).
    pub policy: Mutex<PolicyMemory>,
    /// Drain mode (rank cache, local admissions, reconcile).
    pub drain: drain::DrainState,
    /// Origin observations, capacity probe and ETA rate.
    pub admission: admission::AdmissionLive,
    /// Session extensions this node sent lately (one write per burst).
    pub renewals: Mutex<renewals::Renewals>,
    /// Told of every new arrival in the queue: an idle event's scheduler
    /// (ticking once a second while its snapshot shows nobody waiting)
    /// wakes for the next tick of its grid, so a visitor who joins a queue
    /// with free slots is admitted within a fast tick, not up to a second
    /// later while the slots stand empty.
    pub arrivals: tokio::sync::Notify,
    /// This node runs the event no more as the one this state is of: it
    /// was deleted, or created again under its id (which gets new live
    /// state). Its sessions' WebSockets close (`passes::session_watch`).
    pub gone: std::sync::atomic::AtomicBool,
    /// The event this state is of was deleted from this node (not created
    /// again in place): its background tasks end, even where an event of
    /// its id runs again by their next turn, since that one was started
    /// with tasks of its own. Shared with the states made in place after it
    /// ([`Live::after`]): a task may still hold an earlier one of them.
    deleted: Arc<std::sync::atomic::AtomicBool>,
}

impl Live {
    /// Fresh state for an event created again in place of the one `old` is
    /// of, keeping only what belongs to the store rather than the event:
    /// how far its clock runs ahead of this node's.
    fn after(old: &Live) -> Self {
        let fresh = Live {
            deleted: old.deleted.clone(),
            ..Live::default()
        };
        {
            let before = crate::locks::lock(&old.policy);
            let mut memory = crate::locks::lock(&fresh.policy);
            memory.store_offset_ms = before.store_offset_ms;
            memory.store_offset_rtt_ms = before.store_offset_rtt_ms;
        }
        fresh
    }

    /// Marks the event this state is of as gone from this node.
    pub fn retire(&self) {
        self.gone.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The admin state this node just set in the store, in force here at
    /// once, and newer than any refresh's read of the store under way.
    pub fn set_admin(&self, admin: AdminState) {
        let mut s = write(&self.snapshot);
        s.admin = admin;
        s.admin_set += 1;
    }

    /// Marks the event this state is of as deleted from this node: gone,
    /// and its tasks end at their next turn (see [`AppState::event_for_task`]).
    pub fn delete(&self) {
        self.deleted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.retire();
    }

    fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What the scheduler keeps between ticks of one event.
#[derive(Debug, Default)]
pub struct PolicyMemory {
    pub state: Option<anteroom_core::policy::PolicyState>,
    /// `redeemed_total` at the previous tick, to report redemptions per tick.
    pub last_redeemed_total: Option<u64>,
    /// The last full tick (the first of its second) this node ran: outcomes
    /// are learnt only across two full ticks in a row of this node, so
    /// redemptions and expiries cover the same second.
    pub last_tick: Option<u64>,
    /// The last full tick this node tried to claim, won or not.
    pub last_full_attempt: Option<u64>,
    /// How many this node admitted since its last full tick (reported with
    /// the outcomes).
    pub last_admitted: u64,
    /// How far the store's clock runs ahead of this node's (ms), as last
    /// measured by the scheduler: ticks are numbered, and lost ticks
    /// forfeited, on the store's clock, so nodes whose clocks disagree still
    /// claim the same ticks.
    pub store_offset_ms: i64,
    /// The round trip of the reading `store_offset_ms` came from (its error
    /// is half that at most); `None` before the first.
    pub store_offset_rtt_ms: Option<i64>,
    /// What this node last recorded in the store that the batch it began
    /// owes, `(start_ms, owed)`, and when (this node's ms): recorded again
    /// when it changes, and once a second so that it lapses soon after
    /// this node stops.
    pub recorded_owed: Option<((i64, u64), i64)>,
}

impl Live {
    pub fn snapshot(&self) -> Snapshot {
        read(&self.snapshot).clone()
    }

    /// The last refreshed stats and admin state, without cloning the rest of
    /// the snapshot (the request path reads these on every poll).
    pub fn stats_and_admin(&self) -> (EventStats, AdminState) {
        let s = read(&self.snapshot);
        (s.stats.clone(), s.admin)
    }
}

/// One configured event: its validated config plus its live state.
#[derive(Debug)]
pub struct EventRuntime {
    pub config: EventConfig,
    /// Canonical µs that arrival scores count from (see `config::stored`).
    pub anchor_us: i64,
    /// Canonical µs this event was created at as it now runs: a session
    /// that started before it was a deleted event's of the same id, and its
    /// passes are refused (`i64::MIN`: no creation on record).
    pub created_us: i64,
    pub jwt: Option<JwtVerifier>,
    pub live: Arc<Live>,
    /// The event's request counters, registered once.
    pub counters: crate::metrics::EventCounters,
    /// The event's id as the `X-Anteroom-Event` value the gate sends the
    /// origin with every admitted request, made once.
    pub id_header: axum::http::HeaderValue,
}

impl EventRuntime {
    fn new(config: EventConfig, times: EventTimes, live: Arc<Live>) -> anyhow::Result<Self> {
        let jwt = match &config.identity {
            Identity::Jwt(j) => Some(JwtVerifier::new(j)?),
            Identity::Cookie => None,
        };
        let counters = crate::metrics::EventCounters::new(config.id.as_str());
        // Event ids are checked to be letters, digits, `-` and `_`.
        let id_header = axum::http::HeaderValue::from_str(config.id.as_str())
            .map_err(|_| anyhow::anyhow!("event {}: not a header value", config.id))?;
        Ok(Self {
            config,
            anchor_us: times.anchor_us,
            created_us: times.created_us,
            jwt,
            live,
            counters,
            id_header,
        })
    }

    pub fn id(&self) -> &EventId {
        &self.config.id
    }
}

/// The current set of events and the route table built from it.
#[derive(Debug, Default)]
pub struct Events {
    /// foldhash: every poll and gated request looks its event up here, and
    /// the keys are the configuration's.
    pub by_id: HashMap<EventId, Arc<EventRuntime>, foldhash::fast::RandomState>,
    /// Configuration order, for listings.
    pub order: Vec<EventId>,
    pub routes: RouteTable,
}

impl Events {
    fn build(list: Vec<Arc<EventRuntime>>) -> Self {
        let mut prefixes = Vec::new();
        let mut by_id = HashMap::default();
        let mut order = Vec::new();
        for rt in list {
            for p in &rt.config.paths {
                prefixes.push((p.clone(), rt.id().clone()));
            }
            order.push(rt.id().clone());
            by_id.insert(rt.id().clone(), rt);
        }
        Self {
            by_id,
            order,
            routes: RouteTable::new(prefixes),
        }
    }

    pub fn get(&self, id: &EventId) -> Option<&Arc<EventRuntime>> {
        self.by_id.get(id)
    }

    /// The event whose id is `id` as a request spelled it.
    pub fn get_str(&self, id: &str) -> Option<&Arc<EventRuntime>> {
        self.by_id.get(id)
    }

    /// The only event, when exactly one is configured.
    pub fn only(&self) -> Option<&Arc<EventRuntime>> {
        (self.order.len() == 1)
            .then(|| self.order.first().and_then(|id| self.by_id.get(id)))
            .flatten()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<EventRuntime>> {
        self.order.iter().filter_map(|id| self.by_id.get(id))
    }
}

pub struct AppState {
    pub server: ServerConfig,
    pub store: Arc<dyn QueueStore>,
    pub keyring: Keyring,
    pub score_key: ScoreKey,
    pub proxy: Proxy,
    pub pages: Pages,
    pub clock: Arc<dyn Clock>,
    /// Risk scoring, proof-of-work and rate limits for enter and position.
    pub bots: BotDefence,
    /// Background tasks (scheduler, refreshers); aborted at shutdown.
    pub tasks: Mutex<tokio::task::JoinSet<()>>,
    /// The locked `server.drain_journal` directory, set once at start-up
    /// (bare states built by tests have none).
    pub drain_journal: std::sync::OnceLock<crate::journal::JournalDir>,
    /// The config file's table of each event it has, secrets redacted: the
    /// base a stored admin change is made against (see `config::stored`).
    pub file_events: HashMap<EventId, crate::config::RawEvent>,
    /// Serialises this node's admin writes, so two changes never validate
    /// against the same old set of events.
    pub admin_writes: tokio::sync::Mutex<()>,
    /// Admin changes under way, each in a task of its own (see
    /// `admin::auth`): a graceful stop waits for them before it stops the
    /// event tasks, so none is cut between its store write and its audit.
    pub admin_changes: tokio_util::task::TaskTracker,
    /// Open push streams and the per-event fan-out behind them.
    pub push: crate::push::Push,
    /// The stored event tables this node refuses to run, kept by the watch
    /// of stored configs (`scheduler`), shown by `GET /admin/refusals`.
    pub refusals: Arc<Mutex<Refusals>>,
    /// Failed admin authentications by client address.
    pub admin_failures: guesses::Failures,
    events: RwLock<Arc<Events>>,
}

/// Refused stored tables by event.
pub type Refusals = std::collections::BTreeMap<EventId, Refusal>;

/// Why this node does not run an event's stored table, since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub since_ms: i64,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// `events` come from [`crate::config::stored::resolve`], with their times.
    pub fn new(
        config: &Config,
        events: Vec<(EventConfig, EventTimes)>,
        store: Arc<dyn QueueStore>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let keyring = Keyring::new(&config.secrets)?;
        let score_key = keyring.score_key();
        // The bot defence holds its own handle on the keys: challenges are
        // verified from its tasks without borrowing the state.
        let bots = BotDefence::new(
            &config.bots,
            RateLimits::from(&config.limits),
            Arc::new(Keyring::new(&config.secrets)?),
        )
        .map_err(|e| anyhow::anyhow!("invalid configuration: bots: {e}"))?;
        let mut list = Vec::new();
        for (e, times) in events {
            list.push(Arc::new(EventRuntime::new(e, times, Arc::default())?));
        }
        Ok(Self {
            server: config.server.clone(),
            store,
            keyring,
            score_key,
            proxy: Proxy::for_loops(config.server.connections.event_loops),
            pages: Pages::new(&HashMap::new())?,
            clock,
            bots,
            tasks: Mutex::default(),
            drain_journal: std::sync::OnceLock::new(),
            file_events: config
                .events
                .iter()
                .map(|e| (e.id.clone(), e.raw.redacted()))
                .collect(),
            admin_writes: tokio::sync::Mutex::new(()),
            admin_changes: tokio_util::task::TaskTracker::new(),
            push: crate::push::Push::new(
                config.server.max_streams,
                config.server.max_streams_per_address,
            ),
            refusals: Arc::default(),
            admin_failures: guesses::Failures::default(),
            events: RwLock::new(Arc::new(Events::build(list))),
        })
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The event's phase now, from its config and the last known admin state.
    pub fn phase_of(&self, rt: &EventRuntime) -> Phase {
        self.phase_with(rt, rt.live.stats_and_admin().1)
    }

    /// The event's phase now, were its admin state `admin`.
    pub fn phase_with(&self, rt: &EventRuntime, admin: AdminState) -> Phase {
        let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
        phase(self.now_ms(), rt.config.opens_at_ms, pre_window, admin)
    }

    /// The current events (a cheap snapshot; never held across a swap).
    pub fn events(&self) -> Arc<Events> {
        read(&self.events).clone()
    }

    pub fn event(&self, id: &EventId) -> Option<Arc<EventRuntime>> {
        self.events().get(id).cloned()
    }

    /// The event `id` as it runs now, for one of its background tasks,
    /// which last saw it with the live state `seen`: `None` once that event
    /// was deleted from this node ([`Live::delete`], on it or on a state
    /// made in place after it). An event taken off the routes for a moment
    /// (an admin delete whose store call failed puts it back) is waited
    /// for: its tasks ended then, and it ran on without a scheduler until a
    /// restart. An event created again in place (another node deleted and
    /// made it between two looks of the watch) is the task's to carry on
    /// with; one made again after this node deleted it is not: it was
    /// started with tasks of its own, and the deleted one's would run
    /// beside them, a set more for every delete and re-create.
    pub async fn event_for_task(
        &self,
        id: &EventId,
        seen: &mut Option<Arc<Live>>,
    ) -> Option<Arc<EventRuntime>> {
        loop {
            if seen.as_ref().is_some_and(|live| live.is_deleted()) {
                return None;
            }
            if let Some(rt) = self.event(id) {
                *seen = Some(rt.live.clone());
                return Some(rt);
            }
            match seen {
                Some(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                None => return None,
            }
        }
    }

    /// Creates or replaces an event; its live state is kept, unless the
    /// event was created again (deleted and made anew since this node took
    /// it up): what this node learnt of the deleted one (its rates, its
    /// revocations, the policy's memory, its drain's sessions) is not the
    /// new one's. A creation never goes back: one older than the event's
    /// (a document read before the newer creation was stored, or rewritten
    /// by a node of an earlier version, which drops it) changes only the
    /// configuration. Returns `true` when the event is new (the caller
    /// starts its background tasks).
    pub fn upsert_event(&self, config: EventConfig, times: EventTimes) -> anyhow::Result<bool> {
        let mut guard = write(&self.events);
        let current = guard.clone();
        let existing = current.get(&config.id).cloned();
        let (live, times) = match &existing {
            Some(rt) if rt.created_us == times.created_us => (rt.live.clone(), times),
            // An older creation: its anchor is the deleted event's too.
            Some(rt) if rt.created_us > times.created_us => (
                rt.live.clone(),
                EventTimes {
                    anchor_us: rt.anchor_us,
                    created_us: rt.created_us,
                },
            ),
            Some(rt) => (Arc::new(Live::after(&rt.live)), times),
            None => (Arc::default(), times),
        };
        let new = existing.is_none();
        let replacement = Arc::new(EventRuntime::new(config, times, live)?);
        if let Some(rt) = existing
            .as_ref()
            .filter(|rt| rt.created_us < times.created_us)
        {
            rt.live.retire();
        }
        let mut list: Vec<Arc<EventRuntime>> = current
            .iter()
            .map(|rt| {
                if rt.id() == replacement.id() {
                    replacement.clone()
                } else {
                    rt.clone()
                }
            })
            .collect();
        if new {
            list.push(replacement);
        }
        *guard = Arc::new(Events::build(list));
        Ok(new)
    }
}

impl AppState {
    /// Removes an event from this node (its background tasks end at their
    /// next turn); returns it, so a failed deletion can put it back.
    pub fn remove_event(&self, id: &EventId) -> Option<Arc<EventRuntime>> {
        let mut guard = write(&self.events);
        let current = guard.clone();
        let removed = current.get(id).cloned()?;
        let list: Vec<Arc<EventRuntime>> =
            current.iter().filter(|rt| rt.id() != id).cloned().collect();
        *guard = Arc::new(Events::build(list));
        Some(removed)
    }

    /// Puts back an event taken out by [`Self::remove_event`].
    pub fn restore_event(&self, rt: Arc<EventRuntime>) {
        let mut guard = write(&self.events);
        let current = guard.clone();
        let mut list: Vec<Arc<EventRuntime>> = current
            .iter()
            .filter(|r| r.id() != rt.id())
            .cloned()
            .collect();
        list.push(rt);
        *guard = Arc::new(Events::build(list));
    }
}
