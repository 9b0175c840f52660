//! The stats and revocation refresher, per event: twice a second each node
//! reads the event's stats and admin state and the revocations since its
//! last read, for the request path's answers (queue length, ETA, phase),
//! the pass checks and the dashboard's figures. Drain mode runs it too, once
//! the store is back, before the first answer after a drain.

use std::sync::Arc;
use std::time::Duration;

use anteroom_store::EventId;

use crate::locks::{lock, read, write};
use crate::metrics::timed_store;
use crate::state::{AppState, EventRuntime, Snapshot};

/// How often each node refreshes an event's stats and revocation cache.
pub const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// The refresher of one event: every [`REFRESH_EVERY`] while the event
/// exists on this node.
pub async fn run(state: Arc<AppState>, id: EventId) {
    let mut every = tokio::time::interval(REFRESH_EVERY);
    let mut seen = None;
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(rt) = state.event_for_task(&id, &mut seen).await else {
            return;
        };
        refresh_once(&state, &rt).await;
    }
}

/// Refreshes the stats snapshot and the revocation cache of one event. On a
/// store error the snapshot is marked unreachable (drain) and the revocation
/// cache is kept as it is.
pub async fn refresh_once(state: &AppState, rt: &EventRuntime) {
    let id = rt.id();
    let stats = timed_store("stats", state.store.stats(id)).await;
    let admin = timed_store("admin_state", state.store.admin_state(id)).await;
    let revocations = crate::passes::refresh_revocations(state, rt).await;
    let last_admin = read(&rt.live.snapshot).admin;
    let observed = crate::state::observed::observe(
        state,
        rt,
        stats.as_ref().ok(),
        *admin.as_ref().unwrap_or(&last_admin),
    );
    let mut snapshot = write(&rt.live.snapshot);
    match (stats, admin) {
        (Ok(stats), Ok(admin)) => {
            let event = id.to_string();
            metrics::gauge!("anteroom_waiting", "event" => event.clone()).set(stats.waiting as f64);
            metrics::gauge!("anteroom_active", "event" => event.clone()).set(stats.active as f64);
            metrics::gauge!("anteroom_admitted_total", "event" => event)
                .set(stats.admitted_total as f64);
            // Every node learns the admission rate from the snapshot, so
            // the ETA is as good where this node never wins a tick.
            {
                let mut feed = lock(&rt.live.admission.eta);
                feed.set_plan(crate::state::admission::eta::Plan::of(&rt.config));
                feed.observe(state.now_ms(), &stats);
            }
            *snapshot = Snapshot {
                stats,
                admin,
                reachable: revocations.is_ok(),
                refreshed_at_ms: state.now_ms(),
                observed,
            };
        }
        (Err(e), _) | (_, Err(e)) => {
            if snapshot.reachable {
                tracing::warn!(event = %id, error = e.kind(), "queue store unreachable; draining");
            }
            snapshot.reachable = false;
            snapshot.observed = observed;
        }
    }
}
