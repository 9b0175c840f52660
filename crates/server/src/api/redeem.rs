//! `POST|GET /api/queue/redeem` and `POST /api/queue/release`.
//!
//! Architecture invariant: an admission token is redeemed at most once; the
//! store consumes its nonce atomically, so a second redemption (any session,
//! any node) answers `409 token_used`
//! (`replay_storm::ten_thousand_redemptions_of_one_token_over_two_nodes_succeed_once`).

use std::sync::Arc;

use anteroom_core::phase::Phase;
use anteroom_core::token::{Expect, TokenKind};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{empty, parse_json, query_param, read_body, resolve_event, safe_return};
use crate::bots::RateKind;
use crate::clock::rfc3339_ms;
use crate::error::ApiError;
use crate::identity::{self, Mint};
use crate::page::RedeemFailure;
use crate::passes;
use crate::queue::Queue;
use crate::state::{AppState, EventRuntime};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeemBody {
    pub token: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Redeemed {
    /// Always `ACTIVE`.
    pub status: &'static str,
    pub pass: String,
    pub expires_at: String,
}

/// Consumes an admission token and sets the pass cookie.
#[utoipa::path(post, path = "/api/queue/redeem", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    request_body = RedeemBody,
    responses((status = 200, body = Redeemed), (status = 401, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody, description = "token_used, or event_paused (with Retry-After)"),
        (status = 410, body = crate::error::ErrorBody, description = "event_closed")))]
pub async fn redeem_json(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let rt = resolve_event(&state, &parts.uri)?;
    let body: Option<RedeemBody> =
        parse_json(&read_body(body, state.server.max_body_bytes).await?)?;
    let token = body
        .ok_or_else(|| ApiError::BadRequest("a JSON body {\"token\": ...} is required".into()))?
        .token;
    let (redeemed, cookie) = redeem(&state, &rt, &parts.headers, &token).await?;
    let mut response = crate::position::json_response(redeemed.to_json());
    response.headers_mut().append(header::SET_COOKIE, cookie);
    Ok(response)
}

impl Redeemed {
    /// The JSON of [`Serialize`], written by hand as a poll's is (see
    /// `position::QueuePosition::to_json`): serde_json's generic walk and
    /// its escape scan of the pass cost a redeem about 3k instructions. The
    /// unit test holds the two to the same bytes.
    fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.pass.len() + self.expires_at.len());
        let mut json = crate::position::JsonObject::new(&mut out);
        json.string("status", Some(self.status));
        json.string("pass", Some(&self.pass));
        json.string("expiresAt", Some(&self.expires_at));
        json.end();
        out
    }
}

/// The browser form: `GET ...&token=T&return=/path`, answered `302` to the
/// (same-site) return path.
#[utoipa::path(get, path = "/api/queue/redeem", tag = "queue",
    params(("eventId" = Option<String>, Query,), ("token" = String, Query,), ("return" = Option<String>, Query,)),
    responses((status = 302, description = "redeemed; Location is the return path"),
        (status = 401, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody),
        (status = 410, body = crate::error::ErrorBody)))]
pub async fn redeem_browser(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let rt = resolve_event(&state, req.uri())?;
    let target = safe_return(query_param(req.uri(), "return").as_deref());
    let redeemed = match query_param(req.uri(), "token") {
        Some(token) => redeem(&state, &rt, req.headers(), &token).await,
        None => Err(ApiError::InvalidToken),
    };
    let cookie = match redeemed {
        Ok((_, cookie)) => cookie,
        Err(e) if is_navigation(req.headers()) => {
            return Ok(failed_page(&state, &rt, req.headers(), &target, e));
        }
        Err(e) => return Err(e),
    };
    let mut response = empty(StatusCode::FOUND);
    let location = HeaderValue::from_str(&target).unwrap_or(HeaderValue::from_static("/"));
    response.headers_mut().insert(header::LOCATION, location);
    response.headers_mut().append(header::SET_COOKIE, cookie);
    // It carries the visitor's pass, as the JSON answer does.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// A browser loading the page (following the continue link or the no-JS
/// page's refresh), as opposed to an API client: `Sec-Fetch-Mode: navigate`,
/// or without Fetch Metadata an `Accept` that asks for HTML. A client that
/// asks for JSON gets JSON whatever else it says.
fn is_navigation(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    if accept.contains("application/json") {
        return false;
    }
    match headers.get("sec-fetch-mode").and_then(|v| v.to_str().ok()) {
        Some(mode) => mode == "navigate",
        None => accept.contains("text/html"),
    }
}

/// The failed redeem as an HTML page with a way back into the line; the
/// status and `Retry-After` stay those of the JSON error.
fn failed_page(
    state: &AppState,
    rt: &EventRuntime,
    headers: &HeaderMap,
    return_path: &str,
    e: ApiError,
) -> Response {
    let failure = match e {
        ApiError::InvalidToken | ApiError::TokenUsed | ApiError::InvalidIdentity => {
            RedeemFailure::Token
        }
        ApiError::EventPaused { .. } => RedeemFailure::Paused,
        ApiError::EventClosed => RedeemFailure::Closed,
        _ => RedeemFailure::Other,
    };
    let lang = super::lang(headers);
    let html = state
        .pages
        .render_redeem_failed(rt.id().as_str(), None, return_path, lang, failure);
    let mut response = e.into_response();
    let Ok(html) = html else {
        return response;
    };
    *response.body_mut() = axum::body::Body::from(html);
    let h = response.headers_mut();
    h.remove(header::CONTENT_LENGTH);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; \
             base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    response
}

async fn redeem(
    state: &AppState,
    rt: &EventRuntime,
    headers: &HeaderMap,
    token: &str,
) -> Result<(Redeemed, HeaderValue), ApiError> {
    let visitor = identity::resolve(headers, rt.jwt.as_ref(), Mint::Never, &state.server.cookies)?
        .ok_or(ApiError::InvalidToken)?;
    let now = state.now_ms();
    let expect = Expect {
        kind: TokenKind::Admission,
        event: rt.id().as_str(),
        session: &visitor.member,
    };
    let claims = state.keyring.verify(token, &expect, now).map_err(|e| {
        tracing::debug!(event = %rt.id(), reason = e.code(), "admission token refused");
        ApiError::InvalidToken
    })?;
    // A paused or closed event opens no session, even for a token issued
    // before the operator stopped it: the nonce stays unconsumed, so a
    // paused visitor can still redeem it after a resume while it is valid.
    match state.phase_of(rt) {
        Phase::Paused => {
            return Err(ApiError::EventPaused {
                retry_after_secs: 5,
            });
        }
        Phase::Closed => return Err(ApiError::EventClosed),
        Phase::Scheduled | Phase::PreQueue | Phase::Open => {}
    }
    // The first end is the idle timeout (capped by the lifetime).
    let session_end_us = crate::admission::lifecycle::session_end_us(rt, now, now);
    let session_start_us = Queue::new(state, rt)
        .redeem(&visitor.member, &claims.nonce, session_end_us, now)
        .await?;
    rt.counters.redeems.increment(1);
    let (pass, expires_at_ms) = passes::issue(
        &state.keyring,
        rt,
        claims.session_tag,
        now,
        session_start_us,
    );
    let cookie = passes::cookie(state, rt, headers, &visitor.member, Some(&pass));
    Ok((
        Redeemed {
            status: "ACTIVE",
            pass,
            expires_at: rfc3339_ms(expires_at_ms),
        },
        cookie,
    ))
}

/// Ends the caller's active session or leaves the queue; frees the slot.
#[utoipa::path(post, path = "/api/queue/release", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    responses((status = 204, description = "released (or nothing to release)"),
        (status = 403, body = crate::error::ErrorBody, description = "from another origin's page (Sec-Fetch-Site)"),
        (status = 404, body = crate::error::ErrorBody)))]
pub async fn release(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let rt = resolve_event(&state, req.uri())?;
    // `SameSite=Lax` keeps other sites' forms from releasing a visitor, but
    // not a sibling subdomain's: to the browser that is the same site, and
    // its form `POST` carries the session cookie. The waiting page's own
    // calls, and the origin's pages behind the gate, are same-origin.
    if identity::cookies::from_another_origin(req.headers()) {
        return Err(ApiError::Forbidden(
            "a release is made from this site's own pages, not from another origin's".into(),
        ));
    }
    let visitor = identity::resolve(
        req.headers(),
        rt.jwt.as_ref(),
        Mint::Never,
        &state.server.cookies,
    )?;
    let mut response = empty(StatusCode::NO_CONTENT);
    if let Some(visitor) = visitor {
        // Any session named reaches the store: a flood of made-up ones is
        // refused in memory, by the address, as enter's would be.
        let ip = super::client_ip(&state, req.extensions(), req.headers());
        state.bots.check_rate_ip(RateKind::Enter, ip)?;
        // The caller's own pass names the session this node must refuse at
        // once (the other nodes learn it from the store's revocation).
        let pass = state.server.cookies.pass(req.headers());
        let local = match passes::check(&state, &rt, &visitor.member, pass, state.now_ms()) {
            passes::PassCheck::Valid {
                session_start_us, ..
            }
            | passes::PassCheck::Expired {
                session_start_us, ..
            } => Some(session_start_us),
            passes::PassCheck::Missing => None,
        };
        Queue::new(&state, &rt)
            .release(&visitor.member, local)
            .await?;
        let cookie = passes::cookie(&state, &rt, req.headers(), &visitor.member, None);
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_hand_written_json_is_the_derived_serializers_byte_for_byte() {
        for (pass, expires_at) in [
            ("v1.abc-_DEF012", "2026-12-05T12:00:00.000Z"),
            ("", ""),
            ("a\"quote\\and\ncontrol\u{1}", "é ✓"),
        ] {
            let r = Redeemed {
                status: "ACTIVE",
                pass: pass.to_owned(),
                expires_at: expires_at.to_owned(),
            };
            assert_eq!(
                String::from_utf8(r.to_json()).unwrap(),
                serde_json::to_string(&r).unwrap()
            );
        }
    }
}
