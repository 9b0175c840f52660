//! `GET /queue/E` (the waiting page) and `GET /_anteroom/<asset>`, rendered by
//! [`crate::page`].
//!
//! The page is rendered with the visitor's position already in it: a
//! browser without JavaScript sees it, refreshes every few seconds through
//! the page's `<meta http-equiv="refresh">`, and once admitted follows a
//! plain link to redeem. With JavaScript the script starts from the same
//! position and takes over.

use std::sync::Arc;

use anteroom_store::EventId;
use axum::extract::{Request, State};

use crate::error::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use rand::RngCore;

use anteroom_core::phase::Phase;

use super::enter::join_checked;
use super::{Status, Visit, add_cookie};
use crate::bots::RateKind;
use crate::error::ApiError;
use crate::identity::{self, Mint, Visitor};
use crate::page::{PageContext, Refusal, content_security_policy, static_asset};
use crate::queue::{Presence, Read};
use crate::state::AppState;

/// The waiting page, with the visitor's position rendered in (joining a
/// visitor who is not in the queue yet).
pub async fn waiting_page(
    State(state): State<Arc<AppState>>,
    Path(event): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let id = EventId::new(&event).map_err(|_| ApiError::UnknownEvent)?;
    let rt = state.event(&id).ok_or(ApiError::UnknownEvent)?;
    let (parts, _) = req.into_parts();
    let return_path = super::return_path(&parts.uri);
    let visit = Visit::new(
        &state,
        &rt,
        &parts,
        super::peer(&parts.extensions),
        &return_path,
    );
    let lang = visit.answer.lang;
    // A JWT event's page load carries no bearer token: the script joins.
    let visitor = identity::resolve(
        &parts.headers,
        rt.jwt.as_ref(),
        Mint::Allowed,
        &state.server.cookies,
    )
    .ok()
    .flatten();
    let (position, refusal) = match &visitor {
        Some(v) => match rendered_position(&visit, v).await {
            Ok(p) => (Some(p), None),
            Err(refusal) => (None, refusal),
        },
        None => (None, None),
    };
    let mut nonce = [0u8; 16];
    rand::rng().fill_bytes(&mut nonce);
    let nonce = format!("{:032x}", u128::from_be_bytes(nonce));
    let ctx = PageContext {
        event_id: id.as_str().to_owned(),
        event_name: None,
        return_path: return_path.to_string(),
        lang,
        position,
        nonce: nonce.clone(),
        refusal,
        jitter: rand::random::<f64>(),
    };
    let html = state.pages.render(&ctx).map_err(|e| {
        tracing::error!(error = %e, "waiting page render failed");
        ApiError::Internal
    })?;
    let mut response = Html(html).into_response();
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&nonce)) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    add_cookie(response.headers_mut(), visitor.and_then(|v| v.new_cookie));
    Ok(response)
}

/// The visitor's QueuePosition JSON for the render: read, or — for a
/// visitor not in the queue — joined through the same rate limits and bot
/// defence as enter, so the page is no way around a challenge. A visitor
/// whose page was loaded before the pre-window is joined by the first render
/// inside it (the no-JavaScript refresh is timed to land there), as the
/// script joins then. `Err` when there is nothing true to show yet: why (a
/// challenge to solve, a refusal, a rate limit), so the page can say it; the
/// script, if any, takes over, and the refresh retries where that can help.
async fn rendered_position(
    visit: &Visit<'_>,
    visitor: &Visitor,
) -> Result<serde_json::Value, Option<Refusal>> {
    let Visit { state, rt, ip, .. } = *visit;
    let member = visitor.member.as_str();
    // A session created by this very request cannot be in the queue yet.
    let mut position = None;
    if !visitor.created {
        // The page load is a browser's own first call, right before the
        // script's: it counts against the address, not the session's few
        // calls a second.
        state
            .bots
            .check_rate_ip(RateKind::Position, ip)
            .map_err(|_| Some(Refusal::RateLimited))?;
        let (p, presence) = visit
            .queue()
            .position(member, Read::Poll, visit.answer)
            .await;
        // `NOT_OPEN` says nothing of the place: one not in the store yet is
        // joined once the pre-window lets it in.
        let outside = p.status == Status::NotOpen
            && presence == Presence::Unknown
            && state.phase_of(rt) == Phase::PreQueue;
        if !outside {
            position = Some(p);
        }
    }
    let position = match position {
        Some(p) if p.status != Status::None => p,
        _ => {
            state
                .bots
                .check_rate_ip(RateKind::Enter, ip)
                .map_err(|_| Some(Refusal::RateLimited))?;
            match join_checked(visit, visitor, None).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(event = %rt.id(), error = e.code(), "waiting page could not join");
                    return Err(refusal_of(&e));
                }
            }
        }
    };
    serde_json::to_value(&position).map_err(|_| None)
}

/// What the page tells a visitor whose server-side join `e` refused.
fn refusal_of(e: &ApiError) -> Option<Refusal> {
    match e {
        ApiError::ChallengeRequired { .. } => Some(Refusal::Challenge),
        ApiError::Blocked => Some(Refusal::Blocked),
        ApiError::RateLimited { .. } => Some(Refusal::RateLimited),
        ApiError::Draining { .. } => Some(Refusal::Unavailable),
        _ => None,
    }
}

/// The page's own static files; nothing third-party.
pub async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (content_type, bytes) = static_asset(&file).ok_or(ApiError::NotFound)?;
    let mut response = (StatusCode::OK, bytes).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    Ok(response)
}
