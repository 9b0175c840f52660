//! This node's hold on an event's capacity, kept in the store while the
//! store answers: a drain reserve (what the node may admit on its own should
//! it alone lose the store) and the admissions it is about to make through
//! the store. Only with `server.gateway_nodes` above 1: a lone node has
//! nobody to share with.
//!
//! Why: a node that loses the store cannot tell the others what it admits,
//! and the others go on admitting through the store. Dividing the headroom
//! last seen by the node count is not enough, since the connected nodes can
//! take all of it meanwhile. So every node's share is held in the store
//! (`hold_share`), and every `admit` stays within `max_active` minus what
//! the other nodes hold: active + outstanding + every hold never exceeds
//! `max_active`, and a node that loses the store admits at most the reserve
//! the store still holds for it.
//!
//! What the node may count on (its budget) is a lower bound of its hold in
//! the store: a renewal whose answer was lost may have lowered it, and a
//! node that admits gives its reserve up in the same step (its admission
//! comes out of it).

use std::time::Instant;

use anteroom_store::{Admission, AdmitRequest, ShareRequest, StoreError};

use super::of;
use crate::locks::lock;
use crate::metrics::timed_store;
use crate::state::{AppState, EventRuntime};

use crate::state::drain::ADMIT_WINDOW;

/// Whether holds are used: more than one gateway node shares the store.
pub fn shared(state: &AppState) -> bool {
    state.server.drain.gateway_nodes > 1
}

fn ttl_ms(rt: &EventRuntime) -> u64 {
    let hold = ADMIT_WINDOW + rt.config.token_ttl + rt.config.session_ttl;
    u64::try_from(hold.as_millis()).unwrap_or(u64::MAX)
}

/// A renewal of this node's hold: a reserve of `reserve`, nothing pending
/// (its admissions need no hold: `admit_sharing`).
fn request(state: &AppState, rt: &EventRuntime, reserve: u64) -> Option<ShareRequest> {
    let node = state.drain_journal.get()?.node_id().to_owned();
    Some(ShareRequest {
        node,
        max_active: rt.config.max_active,
        reserve,
        pending: 0,
        ttl_ms: ttl_ms(rt),
    })
}

/// Renews this node's reserve: its part of the capacity left at the last
/// refresh, `(max_active - active - outstanding) / gateway_nodes`, granted
/// at most what the store has free. Runs after every scheduler tick.
pub async fn renew(state: &AppState, rt: &EventRuntime) {
    if !shared(state) {
        return;
    }
    let (stats, _) = rt.live.stats_and_admin();
    let used = stats.active.saturating_add(stats.outstanding);
    let want = rt.config.max_active.saturating_sub(used) / state.server.drain.gateway_nodes;
    let Some(req) = request(state, rt, want) else {
        return;
    };
    {
        // Sent but unanswered, the store may hold `want` from now on; never
        // less than that or the previous reserve, whichever is smaller (it
        // grants the lesser of `want` and what is free, and the previous
        // reserve was free for this node).
        let mut inner = lock(&of(rt).inner);
        inner.share.floor = inner.share.floor.min(want);
    }
    match timed_store("hold_share", state.store.hold_share(rt.id(), &req)).await {
        Ok(grant) => {
            let mut inner = lock(&of(rt).inner);
            inner.share.floor = grant.reserve;
            inner.share.confirmed_at = Some(Instant::now());
            inner.share.confirmed_at_ms = state.now_ms();
            gauge(rt, grant.reserve);
        }
        Err(e) => tracing::debug!(event = %rt.id(), error = e.kind(), "drain reserve not renewed"),
    }
}

/// Gives up this node's holds in the store, at a graceful stop, once the
/// scheduler no longer renews them: a node that is gone for good would
/// otherwise pin its reserve for `ADMIT_WINDOW` + `token_ttl` +
/// `session_ttl`, capacity no other node may use. Not for an event that
/// drains or whose drain admissions the store has not recorded yet: the
/// hold covers those sessions (a restart with the same journal records
/// them). At most `limit` in all, so a store that hangs never holds the
/// stop up.
pub async fn give_up(state: &AppState, limit: std::time::Duration) {
    if !shared(state) {
        return;
    }
    let events = state.events();
    let all = async {
        for rt in events.iter() {
            let drain = of(rt);
            if drain.is_draining() || drain.holds_scheduler() {
                continue;
            }
            let Some(mut req) = request(state, rt, 0) else {
                continue;
            };
            // No time to live: the store drops the hold.
            req.ttl_ms = 0;
            match timed_store("hold_share", state.store.hold_share(rt.id(), &req)).await {
                Ok(_) => gauge(rt, 0),
                Err(e) => {
                    tracing::debug!(event = %rt.id(), error = e.kind(), "drain reserve not given up");
                }
            }
        }
    };
    if tokio::time::timeout(limit, all).await.is_err() {
        tracing::warn!(
            "drain reserves not all given up at the stop: the store is slow; they expire on their own"
        );
    }
}

/// Admits through the store: with several nodes, as this node
/// (`admit_sharing`), which stays out of the other nodes' holds and gives
/// this node's reserve up (its admission comes out of it) in the same step.
/// One store call: a hold of the admission first, then the admit, took two
/// round trips, and the hold outlived the admission until the next renewal,
/// counted beside the slots it had become.
pub async fn admit(
    state: &AppState,
    rt: &EventRuntime,
    req: &AdmitRequest,
) -> Result<Vec<Admission>, StoreError> {
    let node = if shared(state) {
        state.drain_journal.get().map(|j| j.node_id())
    } else {
        None
    };
    let Some(node) = node else {
        return timed_store("admit", state.store.admit(rt.id(), req)).await;
    };
    // Sent but unanswered, the store may have dropped the reserve already.
    lock(&of(rt).inner).share.floor = 0;
    gauge(rt, 0);
    timed_store("admit", state.store.admit_sharing(rt.id(), req, node)).await
}

/// `anteroom_drain_share{event}`: what this node may admit on its own now.
fn gauge(rt: &EventRuntime, n: u64) {
    metrics::gauge!("anteroom_drain_share", "event" => rt.id().to_string()).set(n as f64);
}
