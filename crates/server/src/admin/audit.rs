//! The audit trail: every admin action as one structured log line and one
//! entry in the store, per event (who, what, when, before and after), and
//! `GET /admin/audit` to read it back.

use std::sync::Arc;

use anteroom_store::{AUDIT_KEEP, EventId};
use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Caller;
use crate::clock::rfc3339_ms;
use crate::error::ApiError;
use crate::state::AppState;

/// One admin action.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// RFC 3339 with milliseconds, UTC.
    pub at: String,
    pub at_ms: i64,
    /// The admin token's name.
    pub by: String,
    pub event: String,
    /// `pause`, `resume`, `close`, `reopen`, `put`, `patch`, `delete`, `evict`.
    pub action: String,
    /// Top-level config keys the action changed (`max_active`, ...), or `state`.
    #[serde(default)]
    pub changed: Vec<String>,
    /// The state or config before and after (secrets redacted); `null`
    /// where there was none (a new event, a deleted one).
    #[schema(value_type = Object)]
    pub before: Value,
    #[schema(value_type = Object)]
    pub after: Value,
}

/// Top-level keys whose values differ between two JSON objects.
pub fn changed_keys(before: &Value, after: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = b
        .keys()
        .chain(a.keys())
        .filter(|k| b.get(*k).filter(|v| !v.is_null()) != a.get(*k).filter(|v| !v.is_null()))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Logs the action and appends it to the event's trail. The action already
/// happened: a store that cannot take the entry now is logged as an error
/// (the log line still holds the whole entry).
pub async fn record(
    state: &AppState,
    caller: &Caller,
    event: &EventId,
    action: &str,
    before: Value,
    after: Value,
) {
    let at_ms = state.now_ms();
    let changed = if before.is_object() || after.is_object() {
        changed_keys(&before, &after)
    } else {
        Vec::new()
    };
    let entry = AuditEntry {
        at: rfc3339_ms(at_ms),
        at_ms,
        by: caller.name.clone(),
        event: event.to_string(),
        action: action.to_owned(),
        changed,
        before,
        after,
    };
    let json = serde_json::to_string(&entry).unwrap_or_default();
    tracing::info!(
        target: "anteroom::audit",
        event = %entry.event,
        action = %entry.action,
        by = %entry.by,
        changed = ?entry.changed,
        before = %entry.before,
        after = %entry.after,
        "admin action"
    );
    if let Err(e) = state.store.append_audit(event, &json).await {
        tracing::error!(event = %entry.event, action = %entry.action, error = %e, "audit entry not stored");
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this event's entries.
    pub event: Option<String>,
    /// Only entries of this action.
    pub action: Option<String>,
    /// Only entries by this token name.
    pub by: Option<String>,
    /// At most this many (default 100, at most 1000), newest first.
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    pub entries: Vec<AuditEntry>,
}

/// The audit trail, newest first; filters `event`, `action`, `by`, `limit`.
#[utoipa::path(get, path = "/admin/audit", tag = "admin", security(("bearer" = [])),
    params(("event" = Option<String>, Query,), ("action" = Option<String>, Query,),
        ("by" = Option<String>, Query,), ("limit" = Option<usize>, Query,)),
    responses((status = 200, body = AuditView), (status = 400, body = crate::error::ErrorBody)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AuditView>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=AUDIT_KEEP).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and {AUDIT_KEEP}"
        )));
    }
    let events = match &q.event {
        Some(e) => vec![
            EventId::new(e).map_err(|_| ApiError::BadRequest("event is not an event id".into()))?,
        ],
        None => state.store.audit_events().await?,
    };
    let filtered = q.action.is_some() || q.by.is_some();
    let mut entries = Vec::new();
    for ev in &events {
        // Filters apply after reading, so read the whole trail when filtering.
        let take = if filtered { AUDIT_KEEP } else { limit };
        for json in state.store.audit(ev, take).await? {
            let Ok(entry) = serde_json::from_str::<AuditEntry>(&json) else {
                continue;
            };
            let keep = q.action.as_ref().is_none_or(|a| *a == entry.action)
                && q.by.as_ref().is_none_or(|b| *b == entry.by);
            if keep {
                entries.push(entry);
            }
        }
        // Only the newest `limit` can be answered: what is held at once is
        // one event's trail, not every event's ever audited (an entry may
        // carry two tables of up to 64 KiB each).
        entries.sort_by_key(|e| std::cmp::Reverse(e.at_ms));
        entries.truncate(limit);
    }
    Ok(Json(AuditView { entries }))
}
