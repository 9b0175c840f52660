//! Drain mode, per event: what a node does while the queue store cannot be
//! reached for an event, and how it hands back when the store returns.
//!
//! Neither fail-open nor fail-closed. While an event drains, this node
//! - answers new arrivals `503 draining` with `Retry-After` (hook in enter);
//! - admits visitors it knows to be queued, front first, from its cache of
//!   their last known rank ([`cache`]), within its share of the capacity left
//!   at the last refresh, never while the event was last seen paused or
//!   closed; the tokens it signs are redeemed against a local single-use set,
//!   since the store cannot consume their nonces;
//! - keeps proxying valid passes (they verify locally; see `passes`).
//!
//! When the store answers again the node records the sessions it admitted
//! with `reconcile_active` and only then leaves drain mode; the event's
//! scheduler on this node is held until that is done ([`task::supervise`]),
//! so the store cannot admit again a visitor this node already let in.
//!
//! Architecture invariant: a drain token is redeemed at most once per node
//! (the local set), and a drain admission is recorded in the store before
//! this node's scheduler admits anybody else for the event
//! (`drain_share::a_draining_node_killed_after_admitting_reconciles_its_journal_on_restart`).

pub mod cache;
pub mod clock;
pub mod health;
pub mod journal;
pub mod share;
pub mod task;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use anteroom_core::eta::Lang;
use anteroom_store::{MemberState, Nonce, RedeemOutcome, StoreError, UnavailableKind};

use crate::api::QueuePosition;
use crate::app::{AppState, EventRuntime, lock};
use crate::error::ApiError;

pub use task::supervise;

/// `Retry-After` for new arrivals while draining: the store is usually back
/// (or known to be gone for longer) within seconds.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Drain state of one event on this node; lives in [`crate::app::Live`].
#[derive(Debug, Default)]
pub struct DrainState {
    /// Read on every request, so kept outside the lock.
    draining: AtomicBool,
    /// Set from entry until the reconcile succeeded: the scheduler is held.
    holding: AtomicBool,
    /// A request saw the store fail: probe now instead of at the next tick,
    /// so a refused connection drains within milliseconds.
    wake: tokio::sync::Notify,
    inner: Mutex<Inner>,
    /// Where this node's drain admissions go before they are answered.
    journal: OnceLock<journal::EventJournal>,
}

#[derive(Debug, Default)]
struct Inner {
    ranks: cache::RankCache,
    /// Node time (ms) this drain started, for logs and figures.
    since_ms: Option<i64>,
    /// Capacity already taken at the last refresh: active + outstanding.
    used_at_entry: u64,
    /// Visitors this node admitted while draining, by token nonce. Kept until
    /// their token expires so a replay stays refused after the drain ends.
    local: HashMap<Nonce, LocalAdmission>,
    by_member: HashMap<String, Nonce>,
    /// This node's hold on the event's capacity in the store.
    share: share::ShareState,
}

#[derive(Debug, Clone)]
struct LocalAdmission {
    member: String,
    token_expires_at_ms: i64,
    /// `Some(session end)` once redeemed (the single use).
    redeemed_until_ms: Option<i64>,
    reconciled: bool,
}

impl DrainState {
    /// Whether new arrivals of the event are turned away now.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether the event's scheduler on this node must wait (drain, or drain
    /// admissions not yet recorded in the store).
    pub fn holds_scheduler(&self) -> bool {
        self.holding.load(Ordering::Acquire)
    }

    /// Remembers what the store said about `member` (position/enter answers).
    pub fn note(&self, member: &str, state: &MemberState) {
        let mut inner = lock(&self.inner);
        match state {
            MemberState::Waiting { rank, .. } => inner.ranks.note(member, *rank),
            _ => inner.ranks.forget(member),
        }
    }

    /// Enters drain mode (idempotent); `used` is active + outstanding as last
    /// known. Returns `true` for the call that switched it on.
    pub fn enter(&self, now_ms: i64, used: u64) -> bool {
        let mut inner = lock(&self.inner);
        self.holding.store(true, Ordering::Release);
        if self.draining.swap(true, Ordering::AcqRel) {
            return false;
        }
        inner.since_ms = Some(now_ms);
        inner.used_at_entry = used;
        true
    }

    /// How long the current drain has lasted, if draining.
    pub fn since_ms(&self) -> Option<i64> {
        lock(&self.inner).since_ms
    }

    fn local_answer(&self, member: &str, now_ms: i64) -> Option<MemberState> {
        let inner = lock(&self.inner);
        let nonce = inner.by_member.get(member)?;
        let local = inner.local.get(nonce)?;
        match local.redeemed_until_ms {
            None if now_ms < local.token_expires_at_ms => Some(MemberState::Admitted {
                nonce: *nonce,
                expires_at_us: local.token_expires_at_ms.saturating_mul(1000),
            }),
            // Once redeemed and recorded, the store knows the session.
            Some(until) if !local.reconciled => Some(MemberState::Active {
                expires_at_us: until.saturating_mul(1000),
            }),
            _ => None,
        }
    }
}

impl DrainState {
    /// Whether `member` redeemed a token this node signed while draining.
    fn redeemed_locally(&self, member: &str) -> bool {
        let inner = lock(&self.inner);
        inner
            .by_member
            .get(member)
            .and_then(|n| inner.local.get(n))
            .is_some_and(|l| l.redeemed_until_ms.is_some())
    }
}

/// What the store says about `member`, seen through this node's drain
/// records: a visitor who redeemed a drain token is ACTIVE even if the store
/// admitted them too (a tick that ran just before the outage, on a rank this
/// node had not seen yet); they are never offered a second token.
pub fn adjust(rt: &EventRuntime, member: &str, state: MemberState) -> MemberState {
    match state {
        MemberState::Admitted { expires_at_us, .. } if of(rt).redeemed_locally(member) => {
            MemberState::Active { expires_at_us }
        }
        other => other,
    }
}

/// The drain state of an event.
pub fn of(rt: &EventRuntime) -> &DrainState {
    &rt.live.drain
}

/// A store call of a request for the event failed as unreachable: probe the
/// store now. The request alone does not drain the event: under load one
/// call can time out while the store is alive, and drain turns every new
/// arrival away. The probe drains at once if the store refuses, and after
/// `server.drain_after` if it only stays silent ([`health`]).
pub fn store_failed(_state: &AppState, rt: &EventRuntime) {
    of(rt).wake.notify_one();
}

/// Switches the event to drain mode (the probe decided the store is down);
/// `kind` is why the store said it was unavailable, if it said.
fn enter_drain(state: &AppState, rt: &EventRuntime, why: &str, kind: Option<UnavailableKind>) {
    let (stats, _) = rt.live.stats_and_admin();
    if of(rt).enter(
        state.now_ms(),
        stats.active.saturating_add(stats.outstanding),
    ) {
        let kind = kind.map_or("unknown", UnavailableKind::as_str);
        tracing::warn!(event = %rt.id(), why, kind, "queue store unreachable; draining");
        task::gauge(rt, true);
    }
}

/// The answer this node gives `member` from its own drain records, if any:
/// a drain admission (ADMITTED with the locally signed token, or ACTIVE), or
/// DRAINING for everybody else while the event drains.
pub fn answer(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    lang: Lang,
    return_path: &str,
) -> Option<QueuePosition> {
    let drain = of(rt);
    if let Some(s) = drain.local_answer(member, state.now_ms()) {
        return Some(QueuePosition::build(
            state,
            rt,
            member,
            &s,
            lang,
            return_path,
        ));
    }
    drain
        .is_draining()
        .then(|| QueuePosition::draining(state, rt))
}

/// Redeems a token this node signed while draining. `None` when the nonce is
/// not a drain admission of this node (the store decides then). The
/// redemption is journaled before it is answered, so a replay stays refused
/// after a crash; a journal that cannot be written refuses it (`503`).
pub fn redeem_local(
    rt: &EventRuntime,
    member: &str,
    nonce: &Nonce,
    session_end_ms: i64,
) -> Option<Result<RedeemOutcome, ApiError>> {
    let drain = of(rt);
    let mut inner = lock(&drain.inner);
    let local = inner.local.get_mut(nonce)?;
    if local.member != member {
        return Some(Ok(RedeemOutcome::NotAdmitted));
    }
    if local.redeemed_until_ms.is_some() {
        return Some(Ok(RedeemOutcome::AlreadyUsed));
    }
    // Once the store recorded the admission the session is known there.
    if !local.reconciled
        && let Some(j) = drain.journal.get()
    {
        let record = journal::Record::Redeemed {
            nonce: *nonce,
            until_ms: session_end_ms,
        };
        if let Err(e) = j.append(&[record]) {
            tracing::error!(event = %rt.id(), error = %e, path = %j.path().display(), "drain journal write failed; redeem refused");
            return Some(Err(draining_error()));
        }
    }
    local.redeemed_until_ms = Some(session_end_ms);
    Some(Ok(RedeemOutcome::Redeemed))
}

/// The event's journal on this node (none for a bare state built by tests).
fn journal<'a>(state: &AppState, rt: &'a EventRuntime) -> Option<&'a journal::EventJournal> {
    let dir = state.drain_journal.get()?;
    Some(of(rt).journal.get_or_init(|| dir.event(rt.id())))
}

/// On start: takes back the drain admissions in the event's journal (left by
/// a crash before the store recorded them). They count against this node's
/// share and hold the scheduler until the store has recorded them, exactly
/// as if the drain had just ended. Returns how many were found.
pub fn restore(state: &AppState, rt: &EventRuntime) -> Result<usize, String> {
    let Some(j) = journal(state, rt) else {
        return Ok(0);
    };
    let records = j.replay()?;
    let drain = of(rt);
    let mut inner = lock(&drain.inner);
    for record in records {
        match record {
            journal::Record::Admitted {
                member,
                nonce,
                token_expires_at_ms,
            } => {
                inner.by_member.insert(member.clone(), nonce);
                inner.local.insert(
                    nonce,
                    LocalAdmission {
                        member,
                        token_expires_at_ms,
                        redeemed_until_ms: None,
                        reconciled: false,
                    },
                );
            }
            journal::Record::Redeemed { nonce, until_ms } => {
                if let Some(l) = inner.local.get_mut(&nonce) {
                    l.redeemed_until_ms = Some(until_ms);
                }
            }
        }
    }
    let n = inner.local.len();
    if n > 0 {
        drain.holding.store(true, Ordering::Release);
    }
    Ok(n)
}

/// Events draining on this node, for `/readyz`.
pub fn draining_events(state: &AppState) -> Vec<String> {
    state
        .events()
        .iter()
        .filter(|rt| of(rt).is_draining())
        .map(|rt| rt.id().to_string())
        .collect()
}

/// The `503 draining` answer for new arrivals.
pub fn draining_error() -> ApiError {
    ApiError::Draining {
        retry_after_secs: RETRY_AFTER_SECS,
    }
}

/// Maps a store error of a request. An unreachable store fails this request
/// with `503 draining` (it cannot be served) and wakes the probe, which
/// decides whether the whole event drains.
pub fn on_store_error(state: &AppState, rt: &EventRuntime, e: StoreError) -> ApiError {
    if matches!(e, StoreError::Unavailable(_)) {
        store_failed(state, rt);
        return draining_error();
    }
    ApiError::from(e)
}
