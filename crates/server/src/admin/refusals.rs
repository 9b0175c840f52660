//! `GET /admin/refusals`: the event tables stored through the admin API that
//! this node does not run, and why. Every node takes the stored tables up
//! within seconds, unless its own config or key files (or its version) keep
//! it from one; the gauge `anteroom_stored_event_refused` says that much,
//! and this says why without the node's log. Per node: ask each one.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use crate::clock::rfc3339_ms;
use crate::locks::lock;
use crate::state::AppState;

/// One refused table.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RefusalEntry {
    pub event: String,
    /// What the node's validation, path check or parser said: the same text
    /// as the node's log line.
    pub reason: String,
    /// When this node first refused the table for this reason.
    pub since: String,
    pub since_ms: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RefusalsView {
    /// By event id; empty when this node runs every stored table.
    pub refusals: Vec<RefusalEntry>,
}

/// The stored event tables this node refuses to run, with the reasons.
#[utoipa::path(get, path = "/admin/refusals", tag = "admin", security(("bearer" = [])),
    responses((status = 200, body = RefusalsView)))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<RefusalsView> {
    let refusals = lock(&state.refusals)
        .iter()
        .map(|(id, r)| RefusalEntry {
            event: id.to_string(),
            reason: r.reason.clone(),
            since: rfc3339_ms(r.since_ms),
            since_ms: r.since_ms,
        })
        .collect();
    Json(RefusalsView { refusals })
}
