//! `POST /api/queue/enter` and `GET /api/queue/position`.

use std::sync::Arc;

use anteroom_core::phase::{Phase, phase};
use anteroom_core::score::JoinScoring;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{QueuePosition, add_cookie, lang, parse_json, read_body, resolve_event, safe_return};
use crate::app::{AppState, EventRuntime};
use crate::error::ApiError;
use crate::identity::{self, Visitor};

/// Optional body of enter: a proof-of-work answer.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnterBody {
    pub challenge: Option<String>,
    pub nonce: Option<u64>,
}

/// Joins the queue (insert-if-absent) and answers the caller's position.
#[utoipa::path(post, path = "/api/queue/enter", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    request_body(content = Option<EnterBody>, content_type = "application/json"),
    responses((status = 200, body = QueuePosition), (status = 401, body = crate::error::ErrorBody),
        (status = 403, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)))]
pub async fn enter(State(state): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let rt = resolve_event(&state, &parts.uri)?;
    let body: Option<EnterBody> = parse_json(&read_body(body, state.server.max_body_bytes).await?)?;
    let visitor = identity::resolve(
        &parts.headers,
        rt.jwt.as_ref(),
        true,
        state.server.insecure_cookies,
    )?
    .ok_or(ApiError::InvalidIdentity)?;
    let return_path = safe_return(super::query_param(&parts.uri, "return").as_deref());
    let lang = lang(&parts.headers);
    metrics::counter!("anteroom_joins_total", "event" => rt.id().to_string()).increment(1);

    let current = current_phase(&state, &rt);
    let position = if matches!(current, Phase::Scheduled | Phase::Closed) {
        // Nobody joins before the pre-window or after the close.
        QueuePosition::build(
            &state,
            &rt,
            &visitor.member,
            &anteroom_store::MemberState::None,
            lang,
            &return_path,
        )
    } else {
        let behind = bot_check(&state, &rt, &parts.headers, &visitor, body.as_ref()).await?;
        let scoring = JoinScoring::new(
            &state.score_key,
            rt.id().as_str(),
            &visitor.member,
            rt.anchor_us,
            i64::try_from(rt.config.pre_window.as_micros()).unwrap_or(i64::MAX),
            behind,
        );
        let outcome = crate::metrics::timed_store(
            "join",
            state.store.join(rt.id(), &visitor.member, &scoring),
        )
        .await
        .map_err(ApiError::from)?;
        QueuePosition::build(
            &state,
            &rt,
            &visitor.member,
            &outcome.state,
            lang,
            &return_path,
        )
    };
    let mut response = position.respond(StatusCode::OK);
    add_cookie(response.headers_mut(), visitor.new_cookie);
    Ok(response)
}

/// Hook for the bot defence (risk scoring and proof-of-work): decides, before
/// the join, whether the visitor must first solve a challenge
/// (`ApiError::ChallengeRequired`), is refused (`ApiError::Blocked`), or joins
/// behind every verified visitor (`Ok(true)`). Today every visitor joins
/// normally; `rt.config.bots` carries the configured policy.
async fn bot_check(
    _state: &AppState,
    _rt: &EventRuntime,
    _headers: &axum::http::HeaderMap,
    _visitor: &Visitor,
    _answer: Option<&EnterBody>,
) -> Result<bool, ApiError> {
    Ok(false)
}

/// Reads the caller's state (and keeps a waiting place alive).
#[utoipa::path(get, path = "/api/queue/position", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    responses((status = 200, body = QueuePosition), (status = 404, body = crate::error::ErrorBody)))]
pub async fn position(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    let rt = resolve_event(&state, &parts.uri)?;
    metrics::counter!("anteroom_polls_total", "event" => rt.id().to_string()).increment(1);
    let return_path = safe_return(super::query_param(&parts.uri, "return").as_deref());
    let lang = lang(&parts.headers);
    let visitor = identity::resolve(
        &parts.headers,
        rt.jwt.as_ref(),
        false,
        state.server.insecure_cookies,
    )?;
    let Some(visitor) = visitor else {
        let none = anteroom_store::MemberState::None;
        return Ok(
            QueuePosition::build(&state, &rt, "", &none, lang, &return_path)
                .respond(StatusCode::OK),
        );
    };
    let position = position_of(&state, &rt, &visitor.member, true, lang, &return_path).await;
    Ok(position.respond(StatusCode::OK))
}

/// The position of `member`, or DRAINING when the store cannot answer.
pub async fn position_of(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    touch: bool,
    lang: anteroom_core::eta::Lang,
    return_path: &str,
) -> QueuePosition {
    match crate::metrics::timed_store("status", state.store.status(rt.id(), member, touch)).await {
        Ok(s) => QueuePosition::build(state, rt, member, &s, lang, return_path),
        Err(e) => {
            tracing::warn!(event = %rt.id(), error = e.kind(), "position read failed; draining");
            QueuePosition::draining(state, rt)
        }
    }
}

/// The event's phase now, from its config and the last known admin state.
pub fn current_phase(state: &AppState, rt: &EventRuntime) -> Phase {
    let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
    phase(
        state.now_ms(),
        rt.config.opens_at_ms,
        pre_window,
        rt.live.snapshot().admin,
    )
}
