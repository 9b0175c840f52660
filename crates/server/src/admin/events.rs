//! Changing events through the admin API: `PUT` (create or replace),
//! `PATCH` (only the named fields), `DELETE` (the event and its queue) and
//! session eviction. Every change is validated by the same function as the
//! config file, against every other event, and recorded in the audit trail.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Query, Request, State};

use crate::error::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::{EventView, audit, event, view};
use crate::api::{empty, parse_json, read_body};
use crate::config::stored::{self, Change, DocSet};
use crate::config::{EventConfig, RawEvent, event_beside, event_from_raw};
use crate::error::ApiError;
use crate::state::AppState;

/// Largest event body the admin API reads.
const MAX_EVENT_BODY: usize = 64 * 1024;

/// How many times a `DELETE` tries to store its deletion marker after the
/// wipe, and the pause between two tries: a blip of the store is waited
/// out, an outage answered.
const DELETE_MARK_TRIES: u32 = 3;
const DELETE_MARK_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The config as the admin API shows and records it: secrets redacted.
/// Unset fields are left out rather than shown as `null`.
pub fn shown(raw: &RawEvent) -> Value {
    let mut v = serde_json::to_value(raw.redacted()).unwrap_or(Value::Null);
    strip_nulls(&mut v);
    v
}

fn strip_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, x| !x.is_null());
        m.values_mut().for_each(strip_nulls);
    }
}

/// Creates or replaces an event (same fields as a `[[events]]` table); in
/// force on this node when it answers, on the others within seconds.
#[utoipa::path(put, path = "/admin/events/{event}", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), request_body(content = Object, description = "an [[events]] table as JSON"),
    responses((status = 200, body = EventView), (status = 400, body = crate::error::ErrorBody),
        (status = 403, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody)))]
pub async fn put(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(req.into_body(), MAX_EVENT_BODY).await?;
    let raw: RawEvent = parse_json(&body)?
        .ok_or_else(|| ApiError::BadRequest("an event JSON body is required".into()))?;
    // Refused before the store is asked: bad input is a 400 even while the
    // store is away.
    let raw = checked(&id, raw)?;
    // The whole table is written now: every key is held to its use.
    crate::config::unused_keys("event", &raw, |_| true)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let _writes = state.admin_writes.lock().await;
    apply(&state, &caller, &id, "put", |_| Ok(raw.clone())).await
}

/// Changes only the fields the body names (a JSON merge patch, RFC 7396:
/// `null` resets a field to its default); the result is validated whole.
#[utoipa::path(patch, path = "/admin/events/{event}", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), request_body(content = Object, description = "some fields of an [[events]] table"),
    responses((status = 200, body = EventView), (status = 400, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody)))]
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(req.into_body(), MAX_EVENT_BODY).await?;
    let patch: Value = parse_json(&body)?
        .ok_or_else(|| ApiError::BadRequest("a JSON object body is required".into()))?;
    if !patch.is_object() {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    }
    let _writes = state.admin_writes.lock().await;
    let running = event(&state, &id)?;
    apply(&state, &caller, &id, "patch", |current| {
        // Over the event as the store has it: another node may have
        // changed it in the seconds before this node took the change up.
        let current = match current {
            Current::Deleted => return Err(ApiError::UnknownEvent),
            Current::Stored(raw) => raw,
            Current::Running => &running.config.raw,
        };
        let mut doc = serde_json::to_value(current).map_err(|_| ApiError::Internal)?;
        merge_patch(&mut doc, &patch);
        let raw: RawEvent = serde_json::from_value(doc)
            .map_err(|e| ApiError::BadRequest(format!("invalid event field: {e}")))?;
        // Only what the patch names: a mode change leaves the old mode's
        // keys in the merged table, unused and harmless.
        let named = |path: &str| {
            path.split('.')
                .try_fold(&patch, |v, k| v.get(k))
                .is_some_and(|v| !v.is_null())
        };
        crate::config::unused_keys("event", &raw, named)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        Ok(raw)
    })
    .await
}

/// The event a change is made over, as the store has it.
enum Current<'a> {
    /// Changed through the admin API: the stored table (the newest, even
    /// when this node has not taken it up yet).
    Stored(&'a RawEvent),
    /// Never changed through the admin API: the table this node runs.
    Running,
    /// Deleted through another node, which this node has not seen yet.
    Deleted,
}

/// RFC 7396: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Makes the event `id` with `make` over its current table, validates it
/// beside every other event, stores it, puts it in force here and records
/// the change. The store keeps it only if no event's document changed since
/// they were read; otherwise it is made and checked again over the newer
/// ones, so two operators changing events on two nodes at once lose neither
/// change, and never give one path to two events.
async fn apply(
    state: &Arc<AppState>,
    caller: &Caller,
    id: &str,
    action: &str,
    make: impl Fn(Current<'_>) -> Result<RawEvent, ApiError>,
) -> Result<Response, ApiError> {
    // An id no event can have finds no document and no running event; the
    // check below refuses it, naming the key.
    let key = anteroom_store::EventId::new(id).ok();
    let running = key
        .as_ref()
        .and_then(|e| state.event(e))
        .map(|rt| shown(&rt.config.raw));
    for _ in 0..stored::REPLACE_TRIES {
        let set = stored::read_set(state.store.as_ref()).await?;
        let doc = key.as_ref().map(|k| set.get(k)).unwrap_or_default();
        let current = match &doc.event {
            _ if doc.deleted => Current::Deleted,
            Some(raw) => Current::Stored(raw),
            None => Current::Running,
        };
        let before = match current {
            Current::Stored(raw) => Some(shown(raw)),
            Current::Running => running.clone(),
            Current::Deleted => None,
        };
        // A creation only over a deletion on record: an event this node
        // does not run may run on another (a file table of its own, or
        // started again there), whose sessions this change must not end.
        let creates = matches!(current, Current::Deleted);
        let raw = checked(id, make(current)?)?;
        let config = validate(state, id, &raw, &set)?;
        let change = Change {
            by: caller.name.clone(),
            at_ms: state.now_ms(),
            file_base: state.file_events.get(&config.id).cloned(),
            creates,
        };
        let store = state.store.as_ref();
        let (doc, times) = stored::changed(store, doc, &config, &change).await?;
        if stored::replace(store, &config.id, set.generation, &doc).await? {
            return in_force(state, caller, config, times, action, before).await;
        }
    }
    Err(ApiError::Conflict {
        code: "concurrent_change",
        message: format!(
            "the events were changed elsewhere {} times while this change to {id} was made; \
             make the change again",
            stored::REPLACE_TRIES
        ),
    })
}

/// The table a change gives, with its id the path's and no inline secret.
fn checked(id: &str, mut raw: RawEvent) -> Result<RawEvent, ApiError> {
    if raw.id.as_deref().is_some_and(|given| given != id) {
        return Err(ApiError::BadRequest(
            "the body's id differs from the path's".into(),
        ));
    }
    raw.id = Some(id.to_owned());
    if raw.jwt.as_ref().is_some_and(|j| j.secret.is_some()) {
        return Err(ApiError::BadRequest(
            "event.jwt.secret: the admin API takes no inline secret, as the store would keep it \
             in plain text; name a file (jwt.secret_file) or an environment variable \
             (jwt.secret_env) instead"
                .into(),
        ));
    }
    Ok(raw)
}

/// Puts a stored change in force on this node, records it and answers
/// with the event as it now runs.
async fn in_force(
    state: &Arc<AppState>,
    caller: &Caller,
    config: EventConfig,
    times: stored::EventTimes,
    action: &str,
    before: Option<Value>,
) -> Result<Response, ApiError> {
    let event_id = config.id.clone();
    let new = state
        .upsert_event(config, times)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if new {
        crate::scheduler::spawn_event(state, &event_id);
    }
    let rt = state.event(&event_id).ok_or(ApiError::Internal)?;
    audit::record(
        state,
        caller,
        &event_id,
        action,
        before.unwrap_or(Value::Null),
        shown(&rt.config.raw),
    )
    .await;
    crate::refresh::refresh_once(state, &rt).await;
    Ok((StatusCode::OK, Json(view(state, &rt))).into_response())
}

/// The same check as the config file's: this event in full, beside all the
/// others, as the store has them where it has them (another node's new
/// event, or its change of a path, counts before this node takes it up),
/// else as this node runs them. The others count by their ids and paths
/// (as this node checked them when it took them up): checking them again
/// would read their key files anew, so one removed since start would refuse
/// every change of every other event.
fn validate(
    state: &AppState,
    id: &str,
    raw: &RawEvent,
    set: &DocSet,
) -> Result<EventConfig, ApiError> {
    let events = state.events();
    let mut others: BTreeMap<&str, &EventConfig> = events
        .iter()
        .filter(|rt| rt.id().as_str() != id)
        .map(|rt| (rt.id().as_str(), &rt.config))
        .collect();
    // The stored tables, each checked once, kept alive beside `others`.
    let mut stored: Vec<EventConfig> = Vec::new();
    for (other, doc) in &set.docs {
        if other.as_str() == id {
            continue;
        }
        if doc.deleted {
            others.remove(other.as_str());
        } else if let Some(table) = &doc.event {
            // A stored table this node cannot run (its watch of the store
            // skips it, logged) is left out rather than block every change
            // of every other event with its error; the one it runs, if any,
            // stands in.
            if let Ok(config) = event_from_raw(&format!("stored event {other}"), table) {
                others.remove(other.as_str());
                stored.push(config);
            }
        }
    }
    let held = others
        .values()
        .copied()
        .chain(stored.iter())
        .map(|e| (&e.id, e.paths.as_slice()));
    event_beside("event", raw, held).map_err(|e| ApiError::BadRequest(e.to_string()))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Delete even while visitors wait or hold sessions.
    #[serde(default)]
    pub force: bool,
}

/// Removes an event and its queue; `409` while anybody waits, holds a token
/// or a session, unless `?force=true`. The audit trail stays.
#[utoipa::path(delete, path = "/admin/events/{event}", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,), ("force" = Option<bool>, Query,)),
    responses((status = 204), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody)))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let _writes = state.admin_writes.lock().await;
    let rt = event(&state, &id)?;
    let stats = state.store.stats(rt.id()).await?;
    let present = stats.waiting + stats.outstanding + stats.active;
    if present > 0 && !q.force {
        return Err(ApiError::Conflict {
            code: "visitors_present",
            message: format!(
                "{} waiting, {} admitted, {} active: delete with ?force=true to end them all",
                stats.waiting, stats.outstanding, stats.active
            ),
        });
    }
    // Off the routes first, so no join re-creates the queue being removed.
    let taken = state.remove_event(rt.id());
    if let Err(e) = state.store.delete_event(rt.id()).await {
        if let Some(rt) = taken {
            state.restore_event(rt);
        }
        return Err(e.into());
    }
    // The marker is what tells the other nodes, and this one after a
    // restart, that the event is gone: the wipe above took its stored
    // table, so without the marker they ran it on over an empty queue. A
    // store that does not take it after a few tries puts the event back on
    // this node's routes, as the other nodes still run it, so a repeated
    // `DELETE` finds it here (not `404`) and finishes the deletion.
    let change = Change {
        by: caller.name.clone(),
        at_ms: state.now_ms(),
        file_base: state.file_events.get(rt.id()).cloned(),
        creates: false,
    };
    let mut tries = 0;
    while let Err(e) = stored::put_deleted(state.store.as_ref(), rt.id(), change.clone()).await {
        tries += 1;
        if tries == DELETE_MARK_TRIES {
            if let Some(rt) = taken {
                state.restore_event(rt);
            }
            return Err(e.into());
        }
        tokio::time::sleep(DELETE_MARK_PAUSE).await;
    }
    // Its sessions are over: their WebSockets through this node close
    // (the state taken off the routes, which the watch may have renewed
    // since `rt` was read, too).
    rt.live.delete();
    if let Some(taken) = &taken {
        taken.live.delete();
    }
    let before = serde_json::json!({
        "config": shown(&rt.config.raw),
        "waiting": stats.waiting, "admitted": stats.outstanding, "active": stats.active,
    });
    audit::record(&state, &caller, rt.id(), "delete", before, Value::Null).await;
    Ok(empty(StatusCode::NO_CONTENT))
}

/// Evicts a session (waiting, admitted or active); its pass stops working.
#[utoipa::path(delete, path = "/admin/events/{event}/sessions/{session}", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,), ("session" = String, Path,)),
    responses((status = 204), (status = 404, body = crate::error::ErrorBody)))]
pub async fn evict(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((id, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let rt = event(&state, &id)?;
    if !state.store.release(rt.id(), &session).await? {
        return Err(ApiError::NotFound);
    }
    // The session id is a bearer secret of its visitor: the trail keeps a
    // digest, enough to match it with the visitor's own report.
    let digest = Sha256::digest(session.as_bytes());
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    audit::record(
        &state,
        &caller,
        rt.id(),
        "evict",
        serde_json::json!({ "session_sha256": short }),
        Value::Null,
    )
    .await;
    Ok(empty(StatusCode::NO_CONTENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An admin call's status, made as the operator would.
    fn admin(
        state: &Arc<crate::state::AppState>,
        method: &str,
        body: &str,
    ) -> tokio::task::JoinHandle<axum::http::StatusCode> {
        admin_at(state, method, "/admin/events/tickets?force=true", body)
    }

    /// An admin call to `uri`'s status, made as the operator would.
    fn admin_at(
        state: &Arc<crate::state::AppState>,
        method: &str,
        uri: &str,
        body: &str,
    ) -> tokio::task::JoinHandle<axum::http::StatusCode> {
        use tower::ServiceExt as _;
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", "Bearer admin-token-123")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        let router = super::super::router(state.clone());
        tokio::spawn(async move { router.oneshot(req).await.unwrap().status() })
    }

    /// The slots `tickets` runs with here, `None` when it does not run.
    fn slots(state: &crate::state::AppState) -> Option<u64> {
        state
            .event(&anteroom_store::EventId::new("tickets").unwrap())
            .map(|rt| rt.config.max_active)
    }

    /// Background tasks of `state` still running (finished ones reaped).
    fn tasks_running(state: &crate::state::AppState) -> usize {
        let mut tasks = crate::locks::lock(&state.tasks);
        while tasks.try_join_next().is_some() {}
        tasks.len()
    }

    /// An event deleted and made again before its tasks' next turn (the
    /// scheduler of an idle event sleeps up to a second, its refresher half
    /// that) runs one set of background tasks, not one more per round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_event_deleted_and_made_again_runs_one_set_of_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        crate::scheduler::spawn_event(&state, &anteroom_store::EventId::new("tickets").unwrap());
        let one_set = tasks_running(&state);
        assert!(one_set >= 2, "{one_set} tasks for one event");
        // First made again in place, as the watch does for an event another
        // node deleted and made anew: the tasks may still hold the earlier
        // live state when this one is deleted.
        made_again_in_place(&state);
        let again = r#"{"origin": "http://127.0.0.1:9", "paths": ["/tickets"], "max_active": 3}"#;
        for _ in 0..3 {
            assert!(admin(&state, "DELETE", "").await.unwrap().is_success());
            assert!(admin(&state, "PUT", again).await.unwrap().is_success());
        }
        assert_eq!(slots(&state), Some(3));
        // The deleted events' tasks end at their next turn.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let running = tasks_running(&state);
            if running == one_set {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{running} tasks run for the event made again; one set is {one_set}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `tickets` created again in place, with a newer creation time, as the
    /// watch takes up an event another node deleted and made anew.
    fn made_again_in_place(state: &crate::state::AppState) {
        let rt = state
            .event(&anteroom_store::EventId::new("tickets").unwrap())
            .unwrap();
        let times = stored::EventTimes {
            anchor_us: rt.anchor_us,
            created_us: rt.created_us.max(0) + 1,
        };
        assert!(!state.upsert_event(rt.config.clone(), times).unwrap());
        assert!(rt.live.is_gone());
    }

    /// An event off the routes for a while and put back (a delete whose
    /// store call failed), after it was made again in place, keeps its
    /// tasks: they wait for it rather than end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_event_put_back_after_a_failed_delete_keeps_its_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let id = anteroom_store::EventId::new("tickets").unwrap();
        crate::scheduler::spawn_event(&state, &id);
        let one_set = tasks_running(&state);
        made_again_in_place(&state);
        let taken = state.remove_event(&id).unwrap();
        // Off the routes past every task's turn (the idle scheduler's is a
        // second): each finds it gone and waits.
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        state.restore_event(taken);
        assert_eq!(
            tasks_running(&state),
            one_set,
            "tasks ended while the event was off the routes"
        );
    }

    /// An admin change whose client goes away before the answer (a closed
    /// tab; hyper then drops the call) runs to its end all the same: in
    /// force on the node and in its audit trail, not in the store alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_whose_client_goes_away_runs_to_its_end() {
        use anteroom_core::phase::AdminState;
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let rt = state
            .event(&anteroom_store::EventId::new("tickets").unwrap())
            .unwrap();
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        // The change waits for its turn behind another write of this node,
        // and its client goes away meanwhile.
        let turn = state.admin_writes.lock().await;
        let call = admin_at(&state, "POST", "/admin/events/tickets/pause", "");
        // The call's own task and the change's, once it has begun.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while tasks() < before + 2 && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        drop(turn);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while rt.live.snapshot().admin != AdminState::Paused {
            assert!(
                std::time::Instant::now() < deadline,
                "the change was dropped with its client"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            state.store.admin_state(rt.id()).await.unwrap(),
            AdminState::Paused
        );
        let trail = state.store.audit(rt.id(), 10).await.unwrap();
        assert!(
            trail.iter().any(|e| e.contains("\"pause\"")),
            "no audit entry: {trail:?}"
        );
    }

    /// A pause, resume or close made on this node while a refresh is under
    /// way (its store read before, its snapshot written after) stands: the
    /// refresh does not write the state it read back over it. (Drain mode
    /// admits by the snapshot's state, so a stale `running` kept through a
    /// store outage would admit on a paused event.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refresh_under_way_never_undoes_an_admin_state_set_meanwhile() {
        use anteroom_core::phase::AdminState;
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let rt = state
            .event(&anteroom_store::EventId::new("tickets").unwrap())
            .unwrap();
        for (action, after) in [
            ("pause", AdminState::Paused),
            ("resume", AdminState::Running),
            ("close", AdminState::Closed),
            ("reopen", AdminState::Running),
        ] {
            let refresh = crate::refresh::Refresh::read(&state, &rt).await;
            let status = admin_at(
                &state,
                "POST",
                &format!("/admin/events/tickets/{action}"),
                "",
            )
            .await
            .unwrap();
            assert_eq!(status, axum::http::StatusCode::NO_CONTENT, "{action}");
            refresh.apply(&state, &rt);
            assert_eq!(
                rt.live.snapshot().admin,
                after,
                "after {action} and the refresh"
            );
            crate::refresh::refresh_once(&state, &rt).await;
            assert_eq!(
                rt.live.snapshot().admin,
                after,
                "after {action} and a later refresh"
            );
        }
    }

    /// Each admin change made on this node while a look of the watch is
    /// under way: its read is older than the change, its acts come after.
    /// The change waits for the look, and stands once both are done. (Were
    /// they not taken in turn, the change would be answered at once, and
    /// the look would then act on a table older than it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_look_at_the_stored_tables_never_undoes_a_change_this_node_makes_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let mut refusals = crate::scheduler::Refusals::default();
        // What each change must leave: a change of slots (the first over
        // the file's table, the second over a stored one, which a stale
        // look would put back), a deletion (a stale look would run the
        // event again), the event made again (a stale look showing it
        // deleted would take it off the routes).
        let changes = [
            ("PATCH", r#"{"max_active": 5}"#, Some(5)),
            ("PATCH", r#"{"max_active": 7}"#, Some(7)),
            ("DELETE", "", None),
            (
                "PUT",
                r#"{"origin": "http://127.0.0.1:9", "paths": ["/tickets"], "max_active": 3}"#,
                Some(3),
            ),
        ];
        let mut overtaken = Vec::new();
        for (method, body, after) in changes {
            let look = crate::scheduler::Look::read(&state).await.unwrap();
            let mut change = admin(&state, method, body);
            // Given time to overtake the look, it does not.
            let early = tokio::time::timeout(std::time::Duration::from_millis(300), &mut change)
                .await
                .ok();
            let overtook = early.is_some();
            look.take_up(&state, &mut refusals).await;
            let status = match early {
                Some(answered) => answered.unwrap(),
                None => change.await.unwrap(),
            };
            assert!(status.is_success(), "{method}: {status}");
            assert_eq!(slots(&state), after, "after {method} and the look");
            if overtook {
                overtaken.push(method);
            }
            // The next look, of the tables as they now are, keeps it.
            crate::scheduler::Look::read(&state)
                .await
                .unwrap()
                .take_up(&state, &mut refusals)
                .await;
            assert_eq!(slots(&state), after, "after {method} and a later look");
        }
        assert_eq!(overtaken, [""; 0], "changes answered during a look");
    }

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut doc = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        merge_patch(
            &mut doc,
            &serde_json::json!({"a": null, "b": {"c": 9}, "e": [2], "f": "x"}),
        );
        assert_eq!(
            doc,
            serde_json::json!({"b": {"c": 9, "d": 3}, "e": [2], "f": "x"})
        );
    }
}
