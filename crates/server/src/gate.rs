//! The gate: every public request that is not the queue API or the waiting
//! page goes through a short pipeline of named phases.
//!
//! 1. [`classify`]: normalise the path and find the event protecting it, or
//!    none (unprotected). A path that does not normalise is refused (`400`),
//!    `CONNECT` too (`405`), and `OPTIONS *` is answered here.
//! 2. [`check_pass`]: the `anteroom_pass` cookie, verified locally (signature,
//!    expiry, session binding, revocation cache). Never waits on the store,
//!    except to renew an expired pass of a session the store says is active.
//! 3. [`forward`] to the origin with `X-Anteroom-Event` / `X-Anteroom-Session`
//!    (renewing the pass past half its life), or [`queue`]: `302` to the
//!    waiting page for browser navigations, `429` + QueuePosition otherwise.
//!
//! Architecture invariant: a request whose normalised path is protected never
//! reaches the origin without a valid pass for that event
//! (`gate_threats::protected_spellings_never_reach_the_origin`).

pub mod classify;
pub mod commands;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;

use anteroom_store::MemberState;

use crate::api::{QueuePosition, empty};
use crate::bots::RateKind;
use crate::config::MAX_HEADER_BYTES;
use crate::error::ApiError;
use crate::identity;
use crate::passes::{self, PassCheck};
use crate::proxy::ClientHop;
use crate::queue::{Queue, Read};
use crate::state::{AppState, EventRuntime};

/// Only the gate speaks for Anteroom to the origin (made once: a name made
/// from a `&str` is checked on every request).
const X_ANTEROOM_EVENT: HeaderName = HeaderName::from_static("x-anteroom-event");
const X_ANTEROOM_SESSION: HeaderName = HeaderName::from_static("x-anteroom-session");

/// Where a request goes, from its method and target alone.
pub enum Route {
    Protected(Arc<EventRuntime>),
    Unprotected,
    ServerOptions,
}

/// The axum fallback of the public listener.
pub async fn gate(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let peer = peer_ip(&req);
    answer(&state, req, peer).await
}

/// The gate's answer to `req` from the TCP peer `peer` (the hot routes
/// give it apart from the request).
pub async fn answer(state: &AppState, req: Request, peer: IpAddr) -> Response {
    let route = match classify(state, req.method(), req.uri()) {
        Ok(route) => route,
        Err(e) => return e.into_response(),
    };
    match route {
        Route::Unprotected => forward_unprotected(state, req, peer).await,
        Route::Protected(rt) => protected(state, rt, req, peer).await,
        Route::ServerOptions => server_options(),
    }
}

/// Phase 1: which event, if any, protects a request with this method and
/// target (see [`classify::classify`]).
pub fn classify(
    state: &AppState,
    method: &Method,
    uri: &axum::http::Uri,
) -> Result<Route, ApiError> {
    let events = state.events();
    match classify::classify(&events.routes, method, uri) {
        Ok(classify::Class::Protected(id)) => Ok(match events.get(id) {
            Some(rt) => Route::Protected(rt.clone()),
            // The table and the events are one snapshot; a prefix without
            // its event would be a bug, and unprotected is never the safe
            // answer for a configured prefix.
            None => return Err(ApiError::Internal),
        }),
        Ok(classify::Class::Unprotected) => Ok(Route::Unprotected),
        Ok(classify::Class::ServerOptions) => Ok(Route::ServerOptions),
        Err(classify::Refusal::Connect) => Err(ApiError::MethodNotAllowed),
        Err(refusal) => Err(ApiError::BadRequest(refusal.to_string())),
    }
}

/// `OPTIONS *` asks about the server, not a resource: Anteroom answers it
/// (load balancers use it as a probe) and the origin never sees it.
fn server_options() -> Response {
    let mut response = empty(StatusCode::NO_CONTENT);
    response.headers_mut().insert(
        header::ALLOW,
        HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    response
}

/// One request to a protected path on its way through phases 2 and 3: the
/// event, the caller (`None` without a session or a valid JWT) and the TCP
/// peer.
struct Protected<'r> {
    state: &'r AppState,
    rt: &'r EventRuntime,
    member: Option<String>,
    ip: IpAddr,
}

async fn protected(state: &AppState, rt: Arc<EventRuntime>, req: Request, ip: IpAddr) -> Response {
    // The cookies are read in one scan: the session, the pass, and whether
    // any cookie is the origin's.
    let scan = identity::scan_cookies(req.headers());
    let (foreign, fields) = (scan.foreign, scan.fields);
    let read = state.server.cookies.from_scan(req.headers(), &scan);
    // A bad or missing JWT is simply "no pass": the request is queued.
    let member = identity::gate_member(req.headers(), rt.jwt.as_ref(), &read);
    let request = Protected {
        state,
        rt: &rt,
        member,
        ip,
    };
    let cookie = read.pass();
    if let Some(member) = &request.member
        && let Some(pass) = check_pass(state, &rt, member, cookie).await
    {
        let at = cookie.map(|text| (text.as_ptr() as usize, text.len()));
        let mut req = req;
        // The passes' text is kept for an origin's `release` command (the
        // cookie that clears this event's pass keeps the visitor's passes
        // of other events) and a renewal, as the field it lies in. When
        // every cookie is Anteroom's, the field leaves the request here:
        // the origin gets none of it, and the proxy need not scan it again
        // for cookies to keep.
        let passes = if !foreign && fields == 1 {
            req.headers_mut()
                .remove(header::COOKIE)
                .and_then(|field| Passes::within(field, at?))
        } else {
            at.and_then(|at| {
                req.headers()
                    .get_all(header::COOKIE)
                    .iter()
                    .find_map(|field| Passes::within(field.clone(), at))
            })
        };
        count("forwarded");
        return request.forward(req, member, pass, passes).await;
    }
    count("queued");
    request.queue(req).await
}

/// The passes' text of a forwarded request's pass cookie, kept without a
/// copy: the `Cookie` field it lies in (its bytes shared, not copied) and
/// where in it.
struct Passes {
    field: HeaderValue,
    range: std::ops::Range<usize>,
}

impl Passes {
    /// `field` with the text at address `at.0`, `at.1` bytes long, when the
    /// text lies in it.
    fn within(field: HeaderValue, at: (usize, usize)) -> Option<Self> {
        let start = at.0.checked_sub(field.as_bytes().as_ptr() as usize)?;
        let range = start..start.checked_add(at.1)?;
        (range.end <= field.len()).then_some(Self { field, range })
    }

    /// The text (it was read as text by the cookie scan).
    fn text(&self) -> Option<&str> {
        std::str::from_utf8(self.field.as_bytes().get(self.range.clone())?).ok()
    }
}

/// A valid pass found by [`check_pass`].
#[derive(Clone, Copy, Debug)]
pub struct ValidPass {
    /// The session it belongs to (see `state::revocations`).
    pub session_start_us: i64,
    /// Past half its life (or expired while the session went on): renew it.
    pub renew: bool,
    /// The node's clock when the pass was judged: the start of the origin's
    /// time for adaptive admission, read once per request.
    pub now_ms: i64,
}

/// Phase 2: the request's valid pass for the event, if its pass cookie
/// (`cookie`, the passes' text) carries one.
pub async fn check_pass(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    cookie: Option<&str>,
) -> Option<ValidPass> {
    let now_ms = state.now_ms();
    match passes::check(state, rt, member, cookie, now_ms) {
        PassCheck::Valid {
            session_start_us,
            renew,
            ..
        } => Some(ValidPass {
            session_start_us,
            renew,
            now_ms,
        }),
        // The pass ran out while the visitor was idle; if the session is
        // still active in the store (and not past its end, which the sweep
        // has yet to see), the pass is simply renewed.
        PassCheck::Expired {
            session_start_us, ..
        } => match Queue::new(state, rt).active_until(member).await {
            Ok(Some(expires_at_us)) if expires_at_us > now_ms.saturating_mul(1000) => {
                Some(ValidPass {
                    session_start_us,
                    renew: true,
                    // After the store's answer, which the origin's time
                    // must not include.
                    now_ms: state.now_ms(),
                })
            }
            Ok(_) => {
                passes::store_says_gone(state, rt, member, session_start_us);
                None
            }
            Err(_) => None,
        },
        PassCheck::Missing => None,
    }
}

impl Protected<'_> {
    /// Phase 3a: proxy to the event's origin, renewing the pass when due.
    async fn forward(
        &self,
        req: Request,
        member: &str,
        pass: ValidPass,
        passes: Option<Passes>,
    ) -> Response {
        let Self { state, rt, .. } = *self;
        let passes_text = || passes.as_ref().and_then(Passes::text);
        // Renewal keeps the session start, so idling and the absolute
        // lifetime both bound the session (admission::lifecycle).
        let renewal = pass
            .renew
            .then(|| renew(state, rt, member, pass.session_start_us, passes_text()));
        let mut req = req;
        // An upgraded connection (WebSocket) outlives this request: the proxy
        // closes it when this session ends. Only a request with an `Upgrade`
        // field can be upgraded (the proxy asks the same field), so a plain
        // page does not pay for the watch.
        if req.headers().contains_key(header::UPGRADE) {
            req.extensions_mut().insert(passes::session_watch(
                state,
                rt,
                member,
                pass.session_start_us,
            ));
        }
        let extra = [
            (X_ANTEROOM_EVENT, rt.id_header.clone()),
            (X_ANTEROOM_SESSION, header_value(member)),
        ];
        // Adaptive admission reads the origin's latency and 5xx share
        // as the gate sees them, timed on the injected clock from the
        // pass's check (a few microseconds before, against milliseconds).
        let started_ms = pass.now_ms;
        let mut response = timed_forward(state, req, &rt.config.origin, self.ip, &extra).await;
        let status = response.status().as_u16();
        let done_ms = state.now_ms();
        rt.live
            .admission
            .record_origin(done_ms, done_ms - started_ms, status);
        if commands::take(response.headers_mut()).release {
            commands::release(state, rt, member, pass.session_start_us).await;
            let cleared = passes::cookie_over(state, rt, passes_text(), member, None);
            response.headers_mut().append(header::SET_COOKIE, cleared);
        } else if let Some(cookie) = renewal {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
        response
    }
}

/// The gate's renewal of an active session's pass: a new pass carrying the
/// same session start, and the session's end moved forward in the background
/// (the request never waits for the store; see `admission::lifecycle`).
/// Returns the `Set-Cookie` value.
fn renew(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    session_start_us: i64,
    passes: Option<&str>,
) -> HeaderValue {
    let now = state.now_ms();
    let start_ms = session_start_us.div_euclid(1000);
    let tag = anteroom_core::token::session_tag(member);
    let (pass, _) = passes::issue(&state.keyring, rt, tag, now, session_start_us);
    let until_us = crate::admission::lifecycle::session_end_us(rt, start_ms, now);
    Queue::new(state, rt).extend_in_background(member, session_start_us, until_us);
    passes::cookie_over(state, rt, passes, member, Some(&pass))
}

/// The gate's `429` for a client that is not a browser navigation: the
/// QueuePosition fields, with `"error": "queued"` so a JSON client can tell
/// it from `rate_limited`, and where to join.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Queued {
    error: &'static str,
    message: &'static str,
    #[serde(flatten)]
    position: QueuePosition,
    /// The enter call that joins this event's queue (`POST`).
    join: String,
    /// The waiting page, returning to the request's path and query.
    waiting_room: String,
}

impl Protected<'_> {
    /// Phase 3b: send the visitor to the waiting room.
    async fn queue(&self, req: Request) -> Response {
        let Self { state, rt, .. } = *self;
        let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let waiting_room = format!(
            "/queue/{}?return={}",
            rt.id(),
            utf8_percent_encode(target, NON_ALPHANUMERIC)
        );
        let navigation =
            matches!(*req.method(), Method::GET | Method::HEAD) && accepts_html(req.headers());
        if navigation {
            let mut response = empty(StatusCode::FOUND);
            response
                .headers_mut()
                .insert(header::LOCATION, header_value(&waiting_room));
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return response;
        }
        // Each of these answers reads the store like a position poll, so it
        // counts against the position limits, by the client's own address.
        let ip = crate::client_ip::client_ip(self.ip, req.headers(), &state.server.trusted_proxies);
        let member = self.member.as_deref();
        if let Err(limited) = state
            .bots
            .check_rate(RateKind::Position, ip, member.unwrap_or(""))
        {
            return ApiError::from(limited).into_response();
        }
        crate::metrics::REJECTIONS.increment("queued", 1);
        let answer = crate::api::answer(req.headers(), target);
        let position = match member {
            Some(m) => {
                Queue::new(state, rt)
                    .position(m, Read::Look, answer)
                    .await
                    .0
            }
            None => QueuePosition::build(state, rt, "", &MemberState::None, answer),
        };
        let retry_after = position.retry_after_value();
        let body = Queued {
            error: "queued",
            message: "this path is behind the waiting room: join the queue, then redeem the admission token",
            position,
            join: format!("/api/queue/enter?eventId={}", rt.id()),
            waiting_room,
        };
        let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::RETRY_AFTER, retry_after);
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

async fn forward_unprotected(state: &AppState, req: Request, ip: IpAddr) -> Response {
    let origin = match &state.server.default_origin {
        Some(o) => o.clone(),
        None => match state.events().only() {
            Some(rt) => rt.config.origin.clone(),
            None => return ApiError::NoRoute.into_response(),
        },
    };
    count("unprotected");
    let mut response = timed_forward(state, req, &origin, ip, &[]).await;
    if commands::take(response.headers_mut()).release {
        commands::release_without_session();
    }
    response
}

async fn timed_forward(
    state: &AppState,
    req: Request,
    origin: &axum::http::Uri,
    ip: IpAddr,
    extra: &[(HeaderName, HeaderValue)],
) -> Response {
    let client = ClientHop::read(&req, ip, &state.server.trusted_proxies);
    let started = Instant::now();
    let response = state.proxy.forward(req, origin, &client, extra).await;
    crate::metrics::proxy_latency().record(started.elapsed().as_secs_f64());
    response
}

/// Middleware for the whole public listener: refuses request heads above
/// 32 KiB in total with `431` JSON (hyper's own limits are set higher, so
/// this answer, with its body, is the one clients see).
pub async fn limit_headers(req: Request, next: Next) -> Response {
    if headers_too_large(req.headers()) {
        return ApiError::HeadersTooLarge.into_response();
    }
    next.run(req).await
}

/// Whether a request's header fields, as sent (`name: value\r\n` each),
/// pass [`MAX_HEADER_BYTES`].
pub fn headers_too_large(headers: &HeaderMap) -> bool {
    let size: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    size > MAX_HEADER_BYTES
}

fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

/// The TCP peer. [`ClientHop::read`] turns it (with a trusted proxy's
/// headers) into what the origin is told about the client.
fn peer_ip(req: &Request) -> IpAddr {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |c| c.0.ip())
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""))
}

fn count(outcome: &'static str) {
    crate::metrics::count_gate(outcome);
}
