//! Pause, resume, close and reopen. `close` is final until an explicit
//! `reopen`: `pause` and `resume` of a closed event are refused (`409
//! event_closed`), so a routine resume cannot undo a close by mistake.

use std::sync::Arc;

use anteroom_core::phase::AdminState;
use axum::Extension;
use axum::extract::State;

use crate::error::Path;
use axum::http::StatusCode;
use axum::response::Response;

use super::auth::Caller;
use super::{audit, event, state_name};
use crate::api::empty;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Pause,
    Resume,
    Close,
    Reopen,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Close => "close",
            Action::Reopen => "reopen",
        }
    }
}

/// The state `action` leads to from `current`.
fn target(action: Action, current: AdminState) -> Result<AdminState, ApiError> {
    match (action, current) {
        (Action::Close, _) => Ok(AdminState::Closed),
        (Action::Reopen, AdminState::Closed) => Ok(AdminState::Running),
        // Nothing to reopen: harmless, like repeating any other action.
        (Action::Reopen, other) => Ok(other),
        (Action::Pause | Action::Resume, AdminState::Closed) => Err(ApiError::Conflict {
            code: "event_closed",
            message: "the event is closed; POST /admin/events/E/reopen first".into(),
        }),
        (Action::Pause, _) => Ok(AdminState::Paused),
        (Action::Resume, _) => Ok(AdminState::Running),
    }
}

async fn set_state(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<Response, ApiError> {
    // The event as it runs once this change has its turn: a look of the
    // watch before it may have made it again in place, or removed it.
    let _writes = state.admin_writes.lock().await;
    let rt = event(state, id)?;
    // The lock above serialises this node's changes only: the store sets
    // the state only while it is the one this change was decided on, so a
    // resume on this node cannot undo a close another node just answered.
    // Decided again on what it found, at most a few times: each retry means
    // another node's change landed in between.
    let mut current = state.store.admin_state(rt.id()).await?;
    let mut tries = 0;
    let next = loop {
        let next = target(action, current)?;
        if next == current {
            break next;
        }
        match state
            .store
            .set_admin_state_if(rt.id(), current, next)
            .await?
        {
            None => break next,
            Some(found) if tries < 4 => {
                current = found;
                tries += 1;
            }
            Some(_) => {
                return Err(ApiError::Conflict {
                    code: "concurrent_change",
                    message:
                        "the event's state kept changing on other nodes; make the change again"
                            .into(),
                });
            }
        }
    };
    // In force here at once; other nodes see it at their next refresh, and
    // the store itself refuses admissions from the moment it answered.
    rt.live.set_admin(next);
    audit::record(
        state,
        caller,
        rt.id(),
        action.name(),
        serde_json::json!({ "state": state_name(current) }),
        serde_json::json!({ "state": state_name(next) }),
    )
    .await;
    Ok(empty(StatusCode::NO_CONTENT))
}

/// Stops admissions; visitors keep their places. `409` on a closed event.
#[utoipa::path(post, path = "/admin/events/{event}/pause", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), responses((status = 204), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody)))]
pub async fn pause(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    set_state(&state, &caller, &id, Action::Pause).await
}

/// Restarts admissions of a paused event. `409` on a closed event.
#[utoipa::path(post, path = "/admin/events/{event}/resume", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), responses((status = 204), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody)))]
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    set_state(&state, &caller, &id, Action::Resume).await
}

/// Closes the event: no joins, no admissions, until `reopen`.
#[utoipa::path(post, path = "/admin/events/{event}/close", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), responses((status = 204), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody, description = "concurrent_change")))]
pub async fn close(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    set_state(&state, &caller, &id, Action::Close).await
}

/// Reopens a closed event (running); on an event not closed it changes nothing.
#[utoipa::path(post, path = "/admin/events/{event}/reopen", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)), responses((status = 204), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody, description = "concurrent_change")))]
pub async fn reopen(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    set_state(&state, &caller, &id, Action::Reopen).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_is_final_until_reopen() {
        use AdminState::*;
        assert!(target(Action::Resume, Closed).is_err());
        assert!(target(Action::Pause, Closed).is_err());
        assert_eq!(target(Action::Reopen, Closed).unwrap(), Running);
        assert_eq!(target(Action::Reopen, Paused).unwrap(), Paused);
        assert_eq!(target(Action::Close, Paused).unwrap(), Closed);
        assert_eq!(target(Action::Resume, Paused).unwrap(), Running);
    }
}
