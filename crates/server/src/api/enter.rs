//! `POST /api/queue/enter` and `GET /api/queue/position`.

use std::net::IpAddr;
use std::sync::Arc;

use anteroom_core::phase::Phase;
use anteroom_core::score::{JoinScoring, Placement};
use anteroom_store::MemberState;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{QueuePosition, Visit, add_cookie, client_ip, parse_json, read_body, resolve_event};
use crate::bots::{EnterAnswer, EnterVerdict, Entry, EventBots, RateKind};
use crate::error::ApiError;
use crate::identity::{self, Mint, Visitor};
use crate::queue::{Queue, Read, draining_error};
use crate::state::{AppState, EventRuntime};

/// Optional body of enter, as documented: a proof-of-work answer or a
/// CAPTCHA token. Requests are parsed as [`EnterAnswer`], which also takes
/// garbage answers (and answers them with a fresh challenge).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnterBody {
    /// The `challenge` string of the `401 challenge_required` answer.
    pub challenge: Option<String>,
    /// A decimal nonce (a JSON number, or a string of digits).
    #[schema(schema_with = nonce_schema)]
    pub nonce: Option<u64>,
    /// A CAPTCHA provider's token, when the challenge asked for one.
    #[serde(rename = "captchaToken")]
    pub captcha_token: Option<String>,
}

/// The nonce as enter takes it: a JSON number (clients search up to
/// 2^53 - 1, exact in JavaScript) or a string of decimal digits (any u64).
fn nonce_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(0)),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[0-9]{1,20}$")),
        )
        .build()
        .into()
}

/// Joins the queue (insert-if-absent) and answers the caller's position.
#[utoipa::path(post, path = "/api/queue/enter", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    request_body(content = Option<EnterBody>, content_type = "application/json"),
    responses((status = 200, body = QueuePosition),
        (status = 401, body = crate::error::ErrorBody,
            description = "challenge_required: the `challenge` object holds a proof-of-work challenge or a CAPTCHA demand"),
        (status = 403, body = crate::error::ErrorBody, description = "blocked"),
        (status = 404, body = crate::error::ErrorBody, description = "unknown_event"),
        (status = 429, body = crate::error::ErrorBody,
            description = "rate_limited (per IP or per session)",
            headers(("Retry-After" = u64, description = "seconds to wait before retrying"))),
        (status = 503, body = crate::error::ErrorBody, description = "draining",
            headers(("Retry-After" = u64, description = "seconds to wait before retrying")))))]
pub async fn enter(State(state): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let peer = super::peer(req.extensions());
    enter_from(&state, req, peer).await
}

/// A join from the TCP peer `peer`: the route's handler, and the public
/// listener's hot route (which calls it without the router).
pub async fn enter_from(
    state: &AppState,
    req: Request,
    peer: IpAddr,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let rt = resolve_event(state, &parts.uri)?;
    let body: Option<EnterAnswer> =
        parse_json(&read_body(body, state.server.max_body_bytes).await?)?;
    let visitor = identity::resolve(
        &parts.headers,
        rt.jwt.as_ref(),
        Mint::Allowed,
        &state.server.cookies,
    )?
    .ok_or(ApiError::InvalidIdentity)?;
    let return_path = super::return_path(&parts.uri);
    let visit = Visit::new(state, &rt, &parts, peer, &return_path);
    // Refused in memory, before any store work; a new visitor still gets
    // the cookie so the retry is the same session. The answer to a
    // challenge follows the call that asked for it within the second: under
    // the session limit a real browser would have it refused and solve
    // twice, so it counts against the address alone (an answer to nothing
    // enter asked, such as a made-up challenge, still counts against both).
    let answering = body.as_ref().is_some_and(|a| {
        state.bots.answers_what_enter_asks(
            &EventBots::from(&rt.config.bots),
            rt.id(),
            &visitor.member,
            a,
            state.now_ms(),
        )
    });
    let limited = if answering {
        state.bots.check_rate_ip(RateKind::Enter, visit.ip)
    } else {
        state
            .bots
            .check_rate(RateKind::Enter, visit.ip, &visitor.member)
    };
    if let Err(limited) = limited {
        return Ok(with_cookie(
            ApiError::from(limited).into_response(),
            &visitor,
        ));
    }
    rt.counters.joins.increment(1);

    // Drain mode: while the event drains, new arrivals are turned away (503 +
    // Retry-After) and visitors this node admitted itself get that answer.
    if let Some(p) = visit.queue().drain_answer(&visitor.member, visit.answer) {
        if p.status == super::Status::Draining {
            return Err(draining_error());
        }
        let mut response = p.respond(StatusCode::OK);
        add_cookie(response.headers_mut(), visitor.new_cookie);
        return Ok(response);
    }
    let position = match join_checked(&visit, &visitor, body.as_ref()).await {
        Ok(position) => position,
        // A challenge is bound to this session: a new visitor must get the
        // cookie with it, or the answer would come from a new session (and
        // a retry after a store error should also be the same session).
        Err(e) => return Ok(with_cookie(e.into_response(), &visitor)),
    };
    let mut response = position.respond(StatusCode::OK);
    add_cookie(response.headers_mut(), visitor.new_cookie);
    Ok(response)
}

/// The bot defence before a join (see [`crate::bots`] for the order of its
/// steps): where in the queue the visitor goes when they may join (by
/// arrival, or behind every verified visitor); otherwise `401 challenge_required` (a fresh
/// proof-of-work challenge or a CAPTCHA demand), `403 blocked`, or `503`
/// when the store cannot record a used answer.
pub async fn bot_check(
    visit: &Visit<'_>,
    visitor: &Visitor,
    answer: Option<&EnterAnswer>,
) -> Result<(Placement, Option<crate::bots::Pending>), ApiError> {
    let Visit { state, rt, .. } = *visit;
    let req = state.bots.signals(visit.headers, visit.ip);
    let entry = Entry {
        ev: &EventBots::from(&rt.config.bots),
        event: rt.id(),
        session: &visitor.member,
        req: &req,
        answer,
    };
    let verdict = state
        .bots
        .gate_enter(&entry, state.store.as_ref(), state.now_ms())
        .await;
    match verdict {
        Ok(EnterVerdict::Join { placement, entry }) => Ok((placement, entry)),
        Err(r) => Err(ApiError::from(r)),
    }
}

/// Joins `visitor` (insert-if-absent) after the bot defence and answers the
/// position; nobody joins before the pre-window or after the close. Both
/// enter and the waiting page's server-side render join through here, so
/// the page's join is noted for drain mode and jittered like enter's.
pub async fn join_checked(
    visit: &Visit<'_>,
    visitor: &Visitor,
    answer: Option<&EnterAnswer>,
) -> Result<QueuePosition, ApiError> {
    let Visit { state, rt, .. } = *visit;
    let member = &visitor.member;
    if matches!(state.phase_of(rt), Phase::Scheduled | Phase::Closed) {
        return Ok(visit.position(member, &MemberState::None));
    }
    let (placement, entry) = bot_check(visit, visitor, answer).await?;
    let scoring = JoinScoring::new(
        &state.score_key,
        rt.id().as_str(),
        member,
        rt.anchor_us,
        i64::try_from(rt.config.pre_window.as_micros()).unwrap_or(i64::MAX),
        placement,
    );
    let joined = visit.queue().join(member, &scoring).await?;
    // Counted against the address from its pricing until now (dropped
    // here when the visitor was queued already).
    if joined.new
        && let Some(entry) = entry
    {
        entry.joined(state.now_ms());
    }
    // A burst's first polls spread over a few seconds instead of arriving
    // together one `pollAfterMs` after the burst.
    Ok(visit.position(member, &joined.state).first_poll(joined.new))
}

/// An error answer that also carries a new visitor's session cookie.
fn with_cookie(mut response: Response, visitor: &Visitor) -> Response {
    add_cookie(response.headers_mut(), visitor.new_cookie.clone());
    response
}

/// Reads the caller's state (and keeps a waiting place alive).
#[utoipa::path(get, path = "/api/queue/position", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    responses((status = 200, body = QueuePosition),
        (status = 404, body = crate::error::ErrorBody, description = "unknown_event"),
        (status = 429, body = crate::error::ErrorBody,
            description = "rate_limited (per IP or per session)",
            headers(("Retry-After" = u64, description = "seconds to wait before retrying")))))]
pub async fn position(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    let ip = client_ip(&state, &parts.extensions, &parts.headers);
    poll(&state, &parts, ip).await
}

/// A position poll from the TCP peer `peer`: the route's handler, and the
/// public listener's hot route (which calls it without the router).
pub async fn poll(state: &AppState, parts: &Parts, peer: IpAddr) -> Result<Response, ApiError> {
    let ip = crate::client_ip::client_ip(peer, &parts.headers, &state.server.trusted_proxies);
    let rt = resolve_event(state, &parts.uri)?;
    rt.counters.polls.increment(1);
    let return_path = super::return_path(&parts.uri);
    let answer = super::answer(&parts.headers, &return_path);
    let visitor = polling_visitor(state, &rt, &parts.headers, ip)?;
    let Some(visitor) = visitor else {
        let none = QueuePosition::build(state, &rt, "", &MemberState::None, answer);
        return Ok(none.respond(StatusCode::OK));
    };
    let (position, _) = Queue::new(state, &rt)
        .position(&visitor.member, Read::Poll, answer)
        .await;
    Ok(position.respond(StatusCode::OK))
}

/// The caller of a position read (a poll, or a push stream opening: both
/// read the store, so both are limited alike), or `None` without a session.
/// Reads are refused in memory before they reach the store; a caller
/// without a session is limited by address alone.
/// `ip` is the caller's address (see [`client_ip`]).
pub fn polling_visitor(
    state: &AppState,
    rt: &EventRuntime,
    headers: &HeaderMap,
    ip: IpAddr,
) -> Result<Option<Visitor>, ApiError> {
    let visitor = identity::resolve(headers, rt.jwt.as_ref(), Mint::Never, &state.server.cookies)?;
    let member = visitor.as_ref().map_or("", |v| v.member.as_str());
    if let Err(limited) = state.bots.check_rate(RateKind::Position, ip, member) {
        // Refused, but the visitor is there: the place must not idle out
        // because the address (a NAT full of people) polls too much.
        state.bots.note_throttled_poll(rt.id(), member);
        return Err(limited.into());
    }
    Ok(visitor)
}
