//! The admin listener: event management behind the bearer token, plus
//! `/metrics`, `/healthz`, `/readyz` and `/openapi.json` (unauthenticated, as
//! the listener itself should only be reachable by operators).

pub mod audit;
pub mod auth;
pub mod dashboard;
pub mod events;
pub mod hosts;
pub mod openapi;
pub mod refusals;
pub mod state;

use std::sync::Arc;

use anteroom_core::phase::AdminState;
use anteroom_store::EventId;
use axum::Json;
use axum::Router;
use axum::extract::State;

use crate::error::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Serialize;

use crate::error::ApiError;
use crate::state::{AppState, EventRuntime};

/// An event as the admin API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub id: String,
    /// `running`, `paused` or `closed`.
    pub state: String,
    /// The event's `[[events]]` table; secrets show as `"[redacted]"`.
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
    pub stats: StatsView,
    /// `false` while the store cannot be reached for this event (drain).
    pub reachable: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StatsView {
    pub waiting: u64,
    pub active: u64,
    pub outstanding: u64,
    pub admitted_total: u64,
    pub redeemed_total: u64,
    /// Admissions per minute over the last minute / five minutes.
    pub admission_rate_1m: f64,
    pub admission_rate_5m: f64,
    /// Estimated wait in seconds of a visitor joining the back of the queue now.
    pub eta_back_of_queue_seconds: Option<u64>,
    #[serde(flatten)]
    pub observed: dashboard::Observed,
}

pub fn router(state: Arc<AppState>) -> Router {
    let admin = Router::new()
        .route("/admin/events", get(list))
        .route(
            "/admin/events/{event}",
            get(show)
                .put(events::put)
                .patch(events::patch)
                .delete(events::delete),
        )
        .route("/admin/events/{event}/pause", post(state::pause))
        .route("/admin/events/{event}/resume", post(state::resume))
        .route("/admin/events/{event}/close", post(state::close))
        .route("/admin/events/{event}/reopen", post(state::reopen))
        .route(
            "/admin/events/{event}/sessions/{session}",
            delete(events::evict),
        )
        .route("/admin/audit", get(audit::list))
        .route("/admin/refusals", get(refusals::list))
        .route("/admin/whoami", get(auth::whoami))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ));
    // Over TLS the browser checks the name against the certificate first.
    let plain = !state.server.tls.as_ref().is_some_and(|t| t.admin)
        && state
            .server
            .admin_hosts
            .checked_on(state.server.admin_listen);
    let router = Router::new()
        .merge(admin)
        .merge(dashboard::router())
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(crate::error::method_not_allowed)
        .with_state(state.clone());
    if plain {
        router.layer(middleware::from_fn_with_state(state, hosts::check))
    } else {
        router
    }
}

/// `running`, `paused` or `closed`.
pub fn state_name(s: AdminState) -> &'static str {
    match s {
        AdminState::Running => "running",
        AdminState::Paused => "paused",
        AdminState::Closed => "closed",
    }
}

pub(crate) fn event(state: &AppState, id: &str) -> Result<Arc<EventRuntime>, ApiError> {
    let id = EventId::new(id).map_err(|_| ApiError::UnknownEvent)?;
    state.event(&id).ok_or(ApiError::UnknownEvent)
}

pub(crate) fn view(state: &AppState, rt: &EventRuntime) -> EventView {
    let snap = rt.live.snapshot();
    let s = &snap.stats;
    let now_ms = state.now_ms();
    let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
    let phase = anteroom_core::phase::phase(now_ms, rt.config.opens_at_ms, pre_window, snap.admin);
    let eta = crate::state::observed::back_of_queue_eta(rt, phase, now_ms, s.waiting);
    EventView {
        id: rt.id().to_string(),
        state: state_name(snap.admin).to_owned(),
        config: events::shown(&rt.config.raw),
        stats: StatsView {
            waiting: s.waiting,
            active: s.active,
            outstanding: s.outstanding,
            admitted_total: s.admitted_total,
            redeemed_total: s.redeemed_total,
            admission_rate_1m: s.admitted_last_1m as f64,
            admission_rate_5m: s.admitted_last_5m as f64 / 5.0,
            eta_back_of_queue_seconds: eta,
            observed: dashboard::current(&snap),
        },
        reachable: snap.reachable,
    }
}

/// Every event with live stats.
#[utoipa::path(get, path = "/admin/events", tag = "admin", security(("bearer" = [])),
    responses((status = 200, body = [EventView]), (status = 401, body = crate::error::ErrorBody)))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<EventView>> {
    Json(state.events().iter().map(|rt| view(&state, rt)).collect())
}

/// One event: config and stats.
#[utoipa::path(get, path = "/admin/events/{event}", tag = "admin", security(("bearer" = [])),
    params(("event" = String, Path,)),
    responses((status = 200, body = EventView), (status = 404, body = crate::error::ErrorBody)))]
pub async fn show(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let rt = event(&state, &id)?;
    crate::refresh::refresh_once(&state, &rt).await;
    Ok(Json(view(&state, &rt)))
}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, content_type = "text/plain")))]
pub async fn metrics() -> Response {
    let mut r = crate::metrics::render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// Ready when no event drains: otherwise `503` naming the
/// draining events, so a load balancer and an operator see the mode.
#[utoipa::path(get, path = "/readyz", tag = "ops", responses((status = 200), (status = 503, body = crate::error::ErrorBody)))]
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let draining = crate::drain::draining_events(&state);
    if draining.is_empty() {
        return "ready".into_response();
    }
    let body = serde_json::json!({
        "error": "draining",
        "message": "the queue store is unreachable for these events; they drain",
        "draining": draining,
    });
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::state::drain::RETRY_AFTER_SECS),
    );
    r
}
