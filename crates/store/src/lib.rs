//! The `QueueStore` trait: everything the server asks of the queue's storage,
//! per event, with two backends (embedded redb, Redis / Redis Cluster) that
//! pass one conformance suite.
//!
//! Architecture invariant: every operation that touches more than one piece
//! of an event's state (join, admit, redeem, release, expire) is atomic in the
//! backend, so no interleaving of gateway nodes can double-admit a visitor,
//! lose a member or leak a slot (`conformance::test_suite` and
//! `model_check` on every backend; `tests/redis.rs`
//! `two_gateway_nodes_racing_admit_never_double_admit`).
// deny, not forbid: embedded/huge.rs and embedded/batch_policy.rs hold the
// two allowed unsafe blocks.
#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::fmt;

use anteroom_core::phase::AdminState;
use anteroom_core::score::JoinScoring;
use async_trait::async_trait;

pub use crate::error::{StoreError, Unavailable, UnavailableKind};

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod embedded;
mod error;
pub mod redis;
#[cfg(feature = "conformance")]
pub mod testing;

/// An event id, validated once at the border: `^[A-Za-z0-9_-]{1,64}$`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(String);

impl EventId {
    pub const MAX_LEN: usize = 64;

    pub fn new(id: &str) -> Result<Self, StoreError> {
        let ok = !id.is_empty()
            && id.len() <= Self::MAX_LEN
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(id.to_owned()))
        } else {
            Err(StoreError::InvalidInput(
                "event id must match ^[A-Za-z0-9_-]{1,64}$",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by event id can be searched with the id as sent (`&str`),
/// before any copy of it is made: the derived `Hash` and `Eq` are the
/// string's.
impl std::borrow::Borrow<str> for EventId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest member (session id or JWT `sub`) a store accepts, in bytes.
pub const MAX_MEMBER_LEN: usize = 256;

/// Checks a queue member id at the border; backends call it on every input.
pub fn check_member(member: &str) -> Result<(), StoreError> {
    if member.is_empty() || member.len() > MAX_MEMBER_LEN {
        return Err(StoreError::InvalidInput("member id must be 1..=256 bytes"));
    }
    Ok(())
}

/// Checks a gateway node id (for [`QueueStore::hold_share`]).
pub fn check_node(node: &str) -> Result<(), StoreError> {
    if node.is_empty()
        || node.len() > 64
        || !node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(StoreError::InvalidInput(
            "node id must be 1..=64 letters, digits or '-'",
        ));
    }
    Ok(())
}

/// A 128-bit single-use nonce (admission tokens, proof-of-work answers).
pub type Nonce = [u8; 16];

/// Where a member stands in one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// In the queue: `rank` visitors are ahead (0 = next).
    Waiting { rank: u64, queue_length: u64 },
    /// Left the queue with an admission token not yet redeemed.
    Admitted { nonce: Nonce, expires_at_us: i64 },
    /// Holds an active session.
    Active { expires_at_us: i64 },
    /// Not known to the event.
    None,
}

/// Whether a [`QueueStore::status`] read marks a waiting member as seen.
/// `expire` drops a waiter not seen for the idle timeout, so only the
/// visitor's own poll may keep a place alive: a read on their behalf (the
/// gate answering a queued request, drain mode, the bot check, benchmarks
/// and tests looking) must not, or a visitor who left would keep their place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// The visitor is there: the idle clock starts again.
    Seen,
    /// Only a look: the idle clock is left as it was.
    Peek,
}

/// What `join` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinOutcome {
    /// `true` only for the call that inserted the member (insert-if-absent).
    pub new: bool,
    /// The member's state after the call; a member already admitted or active
    /// keeps that state (a join never demotes anybody).
    pub state: MemberState,
}

/// One visitor released from the queue by `admit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub member: String,
    pub nonce: Nonce,
}

/// Parameters of one admission step.
#[derive(Clone, Debug)]
pub struct AdmitRequest {
    /// Admit at most this many (the policy's decision).
    pub max: u64,
    /// Hard cap: active + outstanding tokens never exceed it after the step.
    pub max_active: u64,
    /// One fresh random nonce per possible admission; `nonces.len() >= max`.
    pub nonces: Vec<Nonce>,
    /// How long the tokens issued by this step last, counted from the
    /// store's canonical clock at the moment it takes them from the queue.
    /// The store stamps the expiry itself, so a token's issue time is its
    /// admission's own instant: a step that reaches the store late (several
    /// nodes' ticks overlapping, a slow round trip) must not give later ranks
    /// an earlier issue time than the ranks another node admitted before them.
    /// Negative: issued already expired (the sweep's tests).
    pub token_ttl_us: i64,
}

/// What a gateway node asks of [`QueueStore::hold_share`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareRequest {
    /// The node's stable id.
    pub node: String,
    pub max_active: u64,
    /// Slots the node wants held for its own admissions should it lose the
    /// store (its drain share).
    pub reserve: u64,
    /// Slots the node is about to admit through the store (its next
    /// `admit`). Anteroom's nodes ask for none: they admit with
    /// [`QueueStore::admit_sharing`], which needs no hold first. It stays
    /// part of the hold so that a node of an earlier version, which holds
    /// its admissions this way, is still counted during a rolling upgrade.
    pub pending: u64,
    /// How long the hold lasts unless renewed; `0` drops it.
    pub ttl_ms: u64,
}

/// What [`QueueStore::hold_share`] granted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareGrant {
    pub reserve: u64,
    pub pending: u64,
    /// The other nodes' live holds (reserve + pending): an `admit` by this
    /// node must stay within `max_active - others`.
    pub others: u64,
}

/// What `redeem` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedeemOutcome {
    /// The nonce was consumed; the member now holds an active session,
    /// which started at `at_us` on the store's canonical clock (the time
    /// the store took the redeem), so that a revocation of this member read
    /// later on that clock ends it, and none made before it does.
    Redeemed { at_us: i64 },
    /// The nonce was consumed before (any second redemption, even by the same session).
    AlreadyUsed,
    /// No such outstanding token for this member (never issued, expired or evicted).
    NotAdmitted,
    /// The event is paused: no session opened and the token kept, so it
    /// redeems after a resume while it is valid. Checked in the same atomic
    /// step as the redeem, so once a pause is stored no node opens a session,
    /// whatever admin state it last read.
    Paused,
    /// The event is closed: no session opened.
    Closed,
}

/// Idle and lifetime limits applied by `expire`.
#[derive(Clone, Copy, Debug)]
pub struct ExpireRequest {
    /// Waiting members not seen since this canonical time lose their place.
    pub waiting_seen_before_us: i64,
}

/// What one `expire` sweep freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    pub idle_waiters: u64,
    pub unredeemed_tokens: u64,
    pub sessions: u64,
}

/// Live numbers of one event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventStats {
    pub waiting: u64,
    pub active: u64,
    /// Admission tokens issued and neither redeemed nor expired.
    pub outstanding: u64,
    pub admitted_total: u64,
    pub redeemed_total: u64,
    /// Admissions in the last 60 s / 300 s of canonical time.
    pub admitted_last_1m: u64,
    pub admitted_last_5m: u64,
    /// Waiters and sessions that ended (release, idle, expiry) in the last 60 s.
    pub churn_last_1m: u64,
    /// Unredeemed tokens that expired in the last 5 minutes (no-shows).
    pub no_shows_last_5m: u64,
}

/// What an admission tick reads once it has claimed its tick
/// ([`QueueStore::claim_tick_and_read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickView {
    /// The store's canonical clock when the tick was claimed.
    pub now_us: i64,
    pub stats: EventStats,
    pub admin: AdminState,
}

/// A session whose pass must stop working (released, evicted, expired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    pub member: String,
    pub at_us: i64,
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Every event's config document and the generation of the set
/// ([`QueueStore::event_config_set`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSet {
    pub generation: u64,
    pub configs: Vec<(EventId, String)>,
}

/// The queue's storage, per event. Implementations are cheap to clone behind
/// an `Arc` and safe to call from many tasks at once.
///
/// Time: every time-dependent decision uses the store's canonical clock
/// (`now_us`): Redis `TIME`, or the node's clock for the embedded store.
/// Gateway nodes never pass their own wall clock into ordering.
#[async_trait]
pub trait QueueStore: Send + Sync + 'static {
    /// Backend name for logs and benchmarks ("embedded", "redis", "redis-cluster").
    fn name(&self) -> &'static str;

    /// The events that other nodes sharing this store admit visitors into,
    /// as they do it (each admitting `admit` call once), so this node can
    /// tell its own waiting visitors at once. A hint, not a record: news can
    /// be lost (a subscriber reconnecting), so whoever listens still reads
    /// the store now and then. `None` when no other node can admit into
    /// this store's events (the embedded store). Must be called within a
    /// tokio runtime.
    fn admissions_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<EventId>> {
        None
    }

    /// The canonical clock, microseconds since the Unix epoch.
    async fn now_us(&self, event: &EventId) -> Result<i64>;

    /// The event's anchor: the canonical time of the first call for
    /// `event`, kept, and returned as it is by every later call, from
    /// every node sharing the store. Set if absent in one step, so nodes
    /// starting together cannot each fix their own: arrival scores count
    /// from it, and nodes holding different anchors would order their
    /// joins against different origins. [`QueueStore::delete_event`]
    /// forgets it.
    async fn anchor_us(&self, event: &EventId) -> Result<i64>;

    /// Insert-if-absent: a member already waiting keeps its score (a refresh
    /// never moves anybody back); a member admitted or active keeps that state.
    /// The score comes from `anteroom_core::score::arrival_score` at the
    /// canonical time of the join. Marks the member as seen.
    async fn join(
        &self,
        event: &EventId,
        member: &str,
        scoring: &JoinScoring,
    ) -> Result<JoinOutcome>;

    /// Where `member` stands. With [`Touch::Seen`], a waiting member is marked
    /// as seen now (position polls keep a place alive; see `expire`).
    async fn status(&self, event: &EventId, member: &str, touch: Touch) -> Result<MemberState>;

    /// Number of waiting members.
    async fn queue_length(&self, event: &EventId) -> Result<u64>;

    /// Atomically takes up to `min(req.max, req.max_active - active - outstanding)`
    /// best-ranked waiters, records one nonce each as their outstanding token,
    /// and counts them. Never admits while the event is paused or closed.
    async fn admit(&self, event: &EventId, req: &AdmitRequest) -> Result<Vec<Admission>>;

    /// [`Self::admit`] by `node`, one of several gateway nodes that hold
    /// shares of the event's capacity ([`Self::hold_share`]), in the same
    /// atomic step: forgets lapsed holds, drops `node`'s own hold (its
    /// admission comes out of its reserve) and takes at most
    /// `req.max_active - active - outstanding - the other nodes' live
    /// holds`. So active + outstanding + every live hold stays within
    /// `max_active`, as with a hold of the admission followed by the admit,
    /// but in one call, and no hold of the admitted slots outlives their
    /// admission (they are counted as outstanding at once).
    async fn admit_sharing(
        &self,
        event: &EventId,
        req: &AdmitRequest,
        node: &str,
    ) -> Result<Vec<Admission>>;

    /// Atomically consumes `nonce` if it is `member`'s outstanding token and
    /// turns it into an active session ending at `session_expires_at_us`.
    /// `opens`: the visitor's own redeem, which opens the session and is
    /// refused while the event is paused or closed; else the token of a
    /// session that is open already ([`Self::take_over_token`]). Callers
    /// use those two.
    async fn redeem_as(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        opens: bool,
    ) -> Result<RedeemOutcome>;

    /// Atomically consumes `nonce` if it is `member`'s outstanding token and
    /// opens an active session ending at `session_expires_at_us`.
    async fn redeem(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
    ) -> Result<RedeemOutcome> {
        self.redeem_as(event, member, nonce, session_expires_at_us, true)
            .await
    }

    /// [`Self::redeem`] of the store's token of a visitor who already holds
    /// a session this node opened while draining, now recorded: the token
    /// becomes that session, so the slot stays counted. Whatever the admin
    /// state: no session is opened that was not open already.
    async fn take_over_token(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
    ) -> Result<RedeemOutcome> {
        self.redeem_as(event, member, nonce, session_expires_at_us, false)
            .await
    }

    /// Moves an active session's end to `expires_at_us` (idle renewal by the
    /// gate; callers cap it at the session's lifetime), never earlier than
    /// it already is: renewals from several requests or nodes (each from its
    /// own clock) may land in any order, and the latest promise must stand.
    /// `true` if the member has a session (moved or already later), `false`
    /// if not active.
    async fn extend(&self, event: &EventId, member: &str, expires_at_us: i64) -> Result<bool>;

    /// Ends the member's presence (waiting, admitted or active) and records a
    /// revocation so every node stops honouring its pass. `false` if absent.
    async fn release(&self, event: &EventId, member: &str) -> Result<bool>;

    /// Records sessions that a node admitted on its own while the store was
    /// unreachable (drain mode), as active until `expires_at_us`. Members
    /// already active or admitted are left as they are; waiting ones leave the
    /// queue. Returns how many were newly recorded.
    async fn reconcile_active(&self, event: &EventId, members: &[(String, i64)]) -> Result<u64>;

    /// Atomically, at canonical now: forgets lapsed holds, then holds for
    /// `req.node` at most what is free, `max_active - active - outstanding -
    /// the other nodes' live holds`: `pending` first, then `reserve` from
    /// what is left. The hold replaces the node's previous one and lasts
    /// `ttl_ms`. So active + outstanding + every live hold never exceeds
    /// `max_active` through this call, and each node's `admit` stays within
    /// its own hold (`max_active - others`): a node that loses the store can
    /// admit its reserve on its own while the others go on through the store.
    async fn hold_share(&self, event: &EventId, req: &ShareRequest) -> Result<ShareGrant>;

    /// Drops idle waiters, expired tokens and ended sessions at canonical now.
    async fn expire(&self, event: &EventId, req: &ExpireRequest) -> Result<Expired>;

    async fn stats(&self, event: &EventId) -> Result<EventStats>;

    /// [`Self::expire`], then [`Self::stats`] as the sweep left them: the
    /// admission tick that sweeps decides on those counts. A store across a
    /// network answers both in the sweep's last round trip (Redis: its last
    /// script reads them too); this default makes the two calls.
    async fn expire_and_stats(
        &self,
        event: &EventId,
        req: &ExpireRequest,
    ) -> Result<(Expired, EventStats)> {
        let expired = self.expire(event, req).await?;
        Ok((expired, self.stats(event).await?))
    }

    /// Revocations recorded at or after `since_us` (canonical), oldest first.
    async fn revocations_since(&self, event: &EventId, since_us: i64) -> Result<Vec<Revocation>>;

    /// Single-use guard for proof-of-work answers: `true` the first time a
    /// nonce is seen, `false` ever after (until `expires_at_us` passes).
    async fn consume_once(
        &self,
        event: &EventId,
        nonce: &Nonce,
        expires_at_us: i64,
    ) -> Result<bool>;

    /// Cluster-wide tick guard: `true` for exactly one caller per
    /// `(event, tick)` within `ttl_ms`, however many gateway nodes ask. A
    /// guard claimed while the store's clock ran ahead (it stepped back
    /// since) holds nothing: the next caller takes it.
    async fn claim_tick(&self, event: &EventId, tick: u64, ttl_ms: u64) -> Result<bool>;

    /// Records what the batch that began at `start_ms` (the store's clock,
    /// ms) still owes, as the node that began it counts it, kept `ttl_ms`:
    /// only that node knows, and every node's wait estimate needs it. A
    /// later batch's record replaces an earlier one's; an earlier batch's
    /// never replaces a later one's.
    async fn set_batch_owed(
        &self,
        event: &EventId,
        start_ms: i64,
        owed: u64,
        ttl_ms: u64,
    ) -> Result<()>;
    /// The last [`Self::set_batch_owed`] record, `(start_ms, owed)`, while
    /// it is kept.
    async fn batch_owed(&self, event: &EventId) -> Result<Option<(i64, u64)>>;

    /// [`Self::claim_tick`], and for the caller that wins it what the tick
    /// reads next: the store's clock, the event's counts and its admin
    /// state; `None` for every other caller. A store across a network
    /// answers it in one round trip (Redis: one script); this default makes
    /// the calls, the reads together.
    async fn claim_tick_and_read(
        &self,
        event: &EventId,
        tick: u64,
        ttl_ms: u64,
    ) -> Result<Option<TickView>> {
        if !self.claim_tick(event, tick, ttl_ms).await? {
            return Ok(None);
        }
        let (now_us, stats, admin) = futures::try_join!(
            self.now_us(event),
            self.stats(event),
            self.admin_state(event)
        )?;
        Ok(Some(TickView {
            now_us,
            stats,
            admin,
        }))
    }

    /// Pause / resume / close, shared by every node and durable.
    async fn set_admin_state(&self, event: &EventId, state: AdminState) -> Result<()>;
    async fn admin_state(&self, event: &EventId) -> Result<AdminState>;

    /// [`Self::set_admin_state`] only while the stored state is `expected`,
    /// in one step: `None` when it was set, else the state found. Admin
    /// changes on several nodes each decide on the state they read; set
    /// unconditionally, a resume on one node undid a close that another
    /// node had just answered. The default is for a store no other process
    /// shares, whose caller serialises its admin changes.
    async fn set_admin_state_if(
        &self,
        event: &EventId,
        expected: AdminState,
        state: AdminState,
    ) -> Result<Option<AdminState>> {
        let found = self.admin_state(event).await?;
        if found != expected {
            return Ok(Some(found));
        }
        self.set_admin_state(event, state).await?;
        Ok(None)
    }

    /// Event configuration documents (JSON) put through the admin API, so a
    /// live change reaches every node and survives restart.
    async fn put_event_config(&self, event: &EventId, json: &str) -> Result<()>;
    async fn event_configs(&self) -> Result<Vec<(EventId, String)>> {
        Ok(self.event_config_set().await?.configs)
    }
    /// Every event's document, read in one step with the set's generation:
    /// a number every change of any document (put, replace, the deletion
    /// of an event) moves on.
    async fn event_config_set(&self) -> Result<ConfigSet>;
    /// The documents' generation alone: what a node reads every second to
    /// learn of another node's change (a deletion above all) without
    /// reading every document each time.
    async fn config_generation(&self) -> Result<u64> {
        Ok(self.event_config_set().await?.generation)
    }
    /// Stores the event's document only while the set's generation is still
    /// `generation` (moving it on), in one step; `false`, storing nothing,
    /// when any document changed since. Read the set, check a change against
    /// every event in it and replace with it, and two nodes changing events
    /// at once can neither lose a change nor store two events that only
    /// each one alone would allow (two claiming one path).
    async fn replace_event_config(
        &self,
        event: &EventId,
        generation: u64,
        json: &str,
    ) -> Result<bool>;

    /// Readiness of the data of one event (with Redis Cluster, of its slot's master).
    async fn ping(&self, event: &EventId) -> Result<()>;

    /// Removes everything of one event: its queue, tokens, sessions,
    /// revocations, admin state and configuration document. Its audit trail
    /// is kept (a record of who deleted it must outlive the event). Both
    /// backends override this; the default refuses, for test wrappers.
    async fn delete_event(&self, event: &EventId) -> Result<()> {
        let _ = event;
        Err(StoreError::unavailable(
            UnavailableKind::Stopped,
            "this store cannot delete events",
        ))
    }

    /// Appends one admin audit entry (a JSON document) to the event's trail,
    /// which keeps the newest [`AUDIT_KEEP`] entries. Both backends override
    /// this; the default refuses, for test wrappers.
    async fn append_audit(&self, event: &EventId, json: &str) -> Result<()> {
        let _ = (event, json);
        Err(StoreError::unavailable(
            UnavailableKind::Stopped,
            "this store keeps no audit trail",
        ))
    }

    /// The newest `limit` entries of the event's audit trail, newest first.
    async fn audit(&self, event: &EventId, limit: usize) -> Result<Vec<String>> {
        let _ = (event, limit);
        Ok(Vec::new())
    }

    /// Every event with an audit trail (deleted ones included), sorted.
    async fn audit_events(&self) -> Result<Vec<EventId>> {
        Ok(Vec::new())
    }
}

/// How long both backends keep a revocation (µs): a node that starts later
/// reads back this much, so nothing may honour a pass issued before a
/// revocation for longer (the gate's outage rule is bounded by it).
pub const REVOCATION_RETENTION_US: i64 = 3_600_000_000;

/// Audit entries kept per event; older ones are dropped as new ones come.
pub const AUDIT_KEEP: usize = 1000;
