//! Drain mode, per event: what a node does while the queue store cannot be
//! reached for an event, and how it hands back when the store returns.
//!
//! Neither fail-open nor fail-closed. While an event drains, this node
//! - answers new arrivals `503 draining` with `Retry-After` (the request
//!   path's store calls, `queue`, apply drain mode);
//! - admits visitors it knows to be queued, front first, from its cache of
//!   their last known rank (`state::drain::cache`), within its share of the capacity left
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
//! The records themselves (rank cache, local admissions, the hold) are the
//! event's state (`state::drain`); this module is the task that enters and
//! leaves drain, admits on its own, and takes the journal back on start.
//!
//! Architecture invariant: a drain token is redeemed at most once per node
//! (the local set), and a drain admission is recorded in the store before
//! this node's scheduler admits anybody else for the event
//! (`drain_share::a_draining_node_killed_after_admitting_reconciles_its_journal_on_restart`).

pub mod health;
pub mod share;
pub mod task;

use std::sync::atomic::Ordering;

use anteroom_store::UnavailableKind;

use crate::journal::{self, EventJournal};
use crate::locks::lock;
use crate::state::drain::{DrainState, LocalAdmission};
use crate::state::{AppState, EventRuntime};

pub use task::supervise;

/// The drain state of an event.
pub fn of(rt: &EventRuntime) -> &DrainState {
    &rt.live.drain
}

/// Switches the event to drain mode (the probe decided the store is down);
/// `kind` is why the store said it was unavailable, if it said.
fn enter_drain(state: &AppState, rt: &EventRuntime, why: &str, kind: Option<UnavailableKind>) {
    let snapshot = rt.live.snapshot();
    let stats = &snapshot.stats;
    if of(rt).enter(
        state.now_ms(),
        stats.active.saturating_add(stats.outstanding),
        snapshot.refreshed_at_ms,
    ) {
        let kind = kind.map_or("unknown", UnavailableKind::as_str);
        tracing::warn!(event = %rt.id(), why, kind, "queue store unreachable; draining");
        task::gauge(rt);
    }
}

/// The event's journal on this node (none for a bare state built by tests).
fn journal<'a>(state: &AppState, rt: &'a EventRuntime) -> Option<&'a EventJournal> {
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
                drain
                    .any_local
                    .store(true, std::sync::atomic::Ordering::Release);
                inner.local.insert(
                    nonce,
                    LocalAdmission {
                        member,
                        token_expires_at_ms,
                        redeemed_until_ms: None,
                        session_start_ms: None,
                        reconciled: false,
                        reconciled_at_ms: 0,
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
