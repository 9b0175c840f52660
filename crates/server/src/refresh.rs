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
use crate::state::admission::eta::Plan;
use crate::state::{AppState, EventRuntime, Snapshot};

/// How often each node refreshes an event's stats and revocation cache.
pub const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// The refresher of one event: every [`REFRESH_EVERY`] while the event
/// exists on this node.
pub async fn run(state: Arc<AppState>, id: EventId, mut seen: Option<Arc<crate::state::Live>>) {
    let mut every = tokio::time::interval(REFRESH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(rt) = state.event_for_task(&id, &mut seen).await else {
            // Deleted: its gauges go to zero, unless the id runs again
            // (made anew), whose own refresher sets them.
            if state.event(&id).is_none() {
                crate::state::observed::forget(&id);
            }
            return;
        };
        refresh_once(&state, &rt).await;
    }
}

/// Refreshes the stats snapshot and the revocation cache of one event. On a
/// store error the snapshot is marked unreachable (drain) and the revocation
/// cache is kept as it is.
pub async fn refresh_once(state: &AppState, rt: &EventRuntime) {
    rt.live.drain.stamp_notes(state.now_ms());
    Refresh::read(state, rt).await.apply(state, rt);
}

/// One refresh: what the store said, read before the snapshot is written.
/// An admin state this node set in between (a pause, a resume, a close) is
/// newer than the one read: it is kept, not written over for half a
/// second, or, were the store lost before the next refresh, for a whole
/// outage (drain mode admits by the snapshot's state).
pub(crate) struct Refresh {
    stats: Result<anteroom_store::EventStats, anteroom_store::StoreError>,
    admin: Result<anteroom_core::phase::AdminState, anteroom_store::StoreError>,
    revocations_read: bool,
    /// In batch mode, what the store says the last batch still owes (as
    /// the node that began it records it), for this node's wait estimate.
    batch_owed: Option<Option<(i64, u64)>>,
    /// The snapshot's count of admin states set on this node, as it was
    /// before the store was read.
    admin_set: u64,
}

impl Refresh {
    pub(crate) async fn read(state: &AppState, rt: &EventRuntime) -> Self {
        let id = rt.id();
        let admin_set = read(&rt.live.snapshot).admin_set;
        let stats = timed_store("stats", state.store.stats(id)).await;
        let admin = timed_store("admin_state", state.store.admin_state(id)).await;
        let revocations = crate::passes::refresh_revocations(state, rt).await;
        // Unread (the store failing), the last record is not trusted: the
        // slots' estimate stands until the next read.
        let batch_owed = match rt.config.admission {
            crate::config::Admission::Batch { .. } => Some(
                timed_store("batch_owed", state.store.batch_owed(id))
                    .await
                    .ok()
                    .flatten(),
            ),
            _ => None,
        };
        Self {
            stats,
            admin,
            revocations_read: revocations.is_ok(),
            batch_owed,
            admin_set,
        }
    }

    pub(crate) fn apply(self, state: &AppState, rt: &EventRuntime) {
        let id = rt.id();
        let Self {
            stats,
            admin,
            revocations_read,
            batch_owed,
            admin_set,
        } = self;
        let (last_admin, set_since) = {
            let s = read(&rt.live.snapshot);
            (s.admin, s.admin_set != admin_set)
        };
        let admin = match admin {
            Ok(_) if set_since => Ok(last_admin),
            other => other,
        };
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
                metrics::gauge!("anteroom_waiting", "event" => event.clone())
                    .set(stats.waiting as f64);
                metrics::gauge!("anteroom_active", "event" => event.clone())
                    .set(stats.active as f64);
                metrics::gauge!("anteroom_admitted_total", "event" => event)
                    .set(stats.admitted_total as f64);
                // Every node learns the admission rate from the snapshot, so
                // the ETA is as good where this node never wins a tick.
                {
                    let now = state.now_ms();
                    let admitting =
                        state.phase_with(rt, admin) == anteroom_core::phase::Phase::Open;
                    let mut feed = lock(&rt.live.admission.eta);
                    feed.set_plan(Plan::of(&rt.config));
                    feed.set_admitting(now, admitting);
                    feed.observe(now, &stats);
                    if let Some(record) = batch_owed {
                        feed.set_shared_owed(record);
                    }
                }
                // Set again between the look above and this lock: newer still.
                let admin = if snapshot.admin_set == admin_set {
                    admin
                } else {
                    snapshot.admin
                };
                *snapshot = Snapshot {
                    stats,
                    admin,
                    admin_set: snapshot.admin_set,
                    reachable: revocations_read,
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
}
