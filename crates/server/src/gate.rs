//! The gate: every public request that is not the queue API or the waiting
//! page goes through a short pipeline of named phases.
//!
//! 1. [`classify`]: normalise the path and find the event protecting it, or
//!    none (unprotected). A path that does not normalise is refused (`400`),
//!    `CONNECT` too (`405`), and `OPTIONS *` is answered here.
//! 2. The pass check: the `anteroom_pass` cookie, verified locally
//!    ([`passes::check`]: signature, expiry, session binding, revocation
//!    cache). Never waits on the store, except to renew an expired pass of a
//!    session the store says is active ([`Waits`]).
//! 3. [`Forward`] to the origin with `X-Anteroom-Event` / `X-Anteroom-Session`
//!    (renewing the pass past half its life), or the waiting room ([`Waits`]):
//!    `302` to the waiting page for browser navigations, `429` +
//!    QueuePosition otherwise.
//!
//! [`begin`] runs everything up to the first wait, the origin's request
//! included; [`Begun::finish`] the rest. A gated page's future then holds
//! the request as made for the origin, not the visitor's request as well
//! in each layer it passed through.
//!
//! Architecture invariant: a request whose normalised path is protected never
//! reaches the origin without a valid pass for that event
//! (`gate_threats::protected_spellings_never_reach_the_origin`).

pub mod classify;
pub mod commands;

use std::future::Future;
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
use crate::config::{MAX_HEADER_BYTES, MAX_HEADER_FIELDS};
use crate::error::ApiError;
use crate::identity;
use crate::passes::{self, PassCheck};
use crate::proxy::{ClientHop, NotTheOrigins, Outgoing};
use crate::queue::{Queue, Read};
use crate::serve::Answer;
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

/// The gate's answer to `req` from the TCP peer `peer`: [`begin`], then
/// [`Begun::finish`].
pub async fn answer(state: &AppState, req: Request, peer: IpAddr) -> Response {
    begin(state, req, peer).finish(state).await.into_response()
}

/// What the gate makes of a request before anything can wait: phases 1
/// and 2, and for a request going to its origin (a valid pass's, an
/// unprotected path's) the origin's request itself. Only then does
/// anything wait, and what waits holds the prepared request, not the
/// visitor's (see [`crate::proxy::Proxy::prepare`]).
pub fn begin(state: &AppState, req: Request, peer: IpAddr) -> Begun {
    let route = match classify(state, req.method(), req.uri()) {
        Ok(route) => route,
        Err(e) => return Begun::Answered(e.into_response()),
    };
    match route {
        Route::Unprotected => {
            let origin = match &state.server.default_origin {
                Some(o) => o.clone(),
                None => match state.events().only() {
                    Some(rt) => rt.config.origin.clone(),
                    None => return Begun::Answered(ApiError::NoRoute.into_response()),
                },
            };
            count("unprotected");
            Begun::Forward(Forward {
                outgoing: prepare(state, req, &origin, peer, &[]),
                admitted: None,
            })
        }
        Route::Protected(rt) => protected(state, rt, req, peer),
        Route::ServerOptions => Begun::Answered(server_options()),
    }
}

/// A request as [`begin`] left it.
pub enum Begun {
    /// Answered by the gate itself (a refusal, `OPTIONS *`).
    Answered(Response),
    /// On its way to the origin.
    Forward(Forward),
    /// Waits for the store before it is forwarded or queued: a pass that
    /// ran out while its session may still be active, or a visitor to send
    /// to the waiting room. Boxed: these waits are the store's, and their
    /// size need not ride in every page's future.
    Waits(Box<Waits>),
}

impl Begun {
    /// The answer.
    pub async fn finish(self, state: &AppState) -> Answer {
        match self {
            Self::Answered(response) => response.into(),
            Self::Forward(forward) => forward.finish(state).await,
            Self::Waits(waits) => waits.finish(state).await,
        }
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

/// One request to a protected path on its way to the waiting room: the
/// event, the caller (`None` without a session or a valid JWT) and the TCP
/// peer.
struct Protected<'r> {
    state: &'r AppState,
    rt: &'r EventRuntime,
    member: Option<String>,
    ip: IpAddr,
}

/// Where the pass cookie's text lies in the request's `Cookie` fields, and
/// whether those fields carry any cookie that is not Anteroom's.
#[derive(Clone, Copy)]
struct PassAt {
    at: Option<(usize, usize)>,
    foreign: bool,
    fields: usize,
}

/// Phase 2 for a protected path, up to its first wait.
fn protected(state: &AppState, rt: Arc<EventRuntime>, req: Request, ip: IpAddr) -> Begun {
    // The cookies are read in one scan: the session, the pass, and whether
    // any cookie is the origin's.
    let scan = identity::scan_cookies(req.headers());
    let read = state.server.cookies.from_scan(req.headers(), &scan);
    // A bad or missing JWT is simply "no pass": the request is queued.
    let member = identity::gate_member(req.headers(), rt.jwt.as_ref(), &read);
    let cookie = read.pass();
    let pass_at = PassAt {
        at: cookie.map(|text| (text.as_ptr() as usize, text.len())),
        foreign: scan.foreign,
        fields: scan.fields,
    };
    let Some(member) = member else {
        return Begun::Waits(Box::new(Waits {
            rt,
            req,
            ip,
            member: None,
            expired: None,
        }));
    };
    let now_ms = state.now_ms();
    match passes::check(state, &rt, &member, cookie, now_ms) {
        PassCheck::Valid {
            session_start_us,
            renew,
            ..
        } => {
            let pass = ValidPass {
                session_start_us,
                renew,
                now_ms,
            };
            Begun::Forward(admitted(state, rt, req, member, pass, pass_at, ip))
        }
        // Whether the session goes on is the store's to say.
        PassCheck::Expired {
            session_start_us,
            claims,
        } => Begun::Waits(Box::new(Waits {
            rt,
            req,
            ip,
            member: Some(member),
            expired: Some(Expired {
                session_start_us,
                issued_at_ms: claims.issued_at_ms,
                now_ms,
                pass_at,
            }),
        })),
        PassCheck::Missing => Begun::Waits(Box::new(Waits {
            rt,
            req,
            ip,
            member: Some(member),
            expired: None,
        })),
    }
}

/// Phase 3a, up to its first wait: the request of a visitor with a valid
/// pass made ready for the event's origin, the pass renewed when due.
fn admitted(
    state: &AppState,
    rt: Arc<EventRuntime>,
    mut req: Request,
    member: String,
    pass: ValidPass,
    pass_at: PassAt,
    ip: IpAddr,
) -> Forward {
    // The passes' text is kept for an origin's `release` command (the
    // cookie that clears this event's pass keeps the visitor's passes of
    // other events) and a renewal, as the field it lies in. When every
    // cookie is Anteroom's, the field leaves the request here: the origin
    // gets none of it, and the proxy need not scan it again for cookies to
    // keep.
    let passes = if !pass_at.foreign && pass_at.fields == 1 {
        req.headers_mut()
            .remove(header::COOKIE)
            .and_then(|field| Passes::within(field, pass_at.at?))
    } else {
        pass_at.at.and_then(|at| {
            req.headers()
                .get_all(header::COOKIE)
                .iter()
                .find_map(|field| Passes::within(field.clone(), at))
        })
    };
    count("forwarded");
    // Renewal keeps the session start, so idling and the absolute
    // lifetime both bound the session (admission::lifecycle).
    let renewal = pass.renew.then(|| {
        renew(
            state,
            &rt,
            &member,
            pass.session_start_us,
            passes.as_ref().and_then(Passes::text),
        )
    });
    // An upgraded connection (WebSocket) outlives this request: the proxy
    // closes it when this session ends. Only a request with an `Upgrade`
    // field can be upgraded (the proxy asks the same field), so a plain
    // page does not pay for the watch.
    if req.headers().contains_key(header::UPGRADE) {
        req.extensions_mut().insert(passes::session_watch(
            state,
            &rt,
            &member,
            pass.session_start_us,
        ));
    }
    let extra = [
        (X_ANTEROOM_EVENT, rt.id_header.clone()),
        (X_ANTEROOM_SESSION, header_value(&member)),
    ];
    let outgoing = prepare(state, req, &rt.config.origin, ip, &extra);
    Forward {
        outgoing,
        admitted: Some(Admitted {
            rt,
            member,
            pass,
            passes,
            renewal,
        }),
    }
}

/// A request on its way to the origin, made ready by [`begin`].
pub struct Forward {
    outgoing: Outgoing,
    /// The admitted visitor's, on a protected path (`None`: unprotected).
    admitted: Option<Admitted>,
}

/// What the gate does with an admitted visitor's answer.
struct Admitted {
    rt: Arc<EventRuntime>,
    member: String,
    pass: ValidPass,
    passes: Option<Passes>,
    /// The renewed pass's `Set-Cookie`, when it was due.
    renewal: Option<HeaderValue>,
}

impl Forward {
    /// Phase 3a: sends the request and answers with the origin's answer,
    /// after the origin's commands, with a renewed pass when one was due.
    ///
    /// A plain function returning its future (not an `async fn`): an
    /// `async fn` keeps its argument twice, as given and as the local it
    /// moves into, and this one's body reads the fields where they lie.
    #[allow(clippy::manual_async_fn)]
    pub fn finish(mut self, state: &AppState) -> impl Future<Output = Answer> + Send + '_ {
        async move {
            // A wait for the visitor's connection's leave to reach the
            // origin is not the origin's latency: the clock starts after it.
            let sent_ms = if self.outgoing.needs_lease() {
                match state.proxy.lease(&mut self.outgoing).await {
                    Ok(waited) => waited.then(|| state.now_ms()),
                    Err(refused) => return refused,
                }
            } else {
                None
            };
            let started = Instant::now();
            // An answer's passed fields never hold an origin's command
            // (see `Proxy::send`): the map is where to look for one.
            let mut answer = state.proxy.send(self.outgoing).await;
            crate::metrics::proxy_latency().record(started.elapsed().as_secs_f64());
            let response = &mut answer.response;
            let Some(admitted) = &mut self.admitted else {
                if commands::take(response.headers_mut()).release {
                    commands::release_without_session();
                }
                return answer;
            };
            let Admitted {
                rt,
                member,
                pass,
                passes,
                renewal,
            } = admitted;
            // Adaptive admission reads the origin's latency and 5xx share
            // as the gate sees them, timed on the injected clock from the
            // pass's check (a few microseconds before, against
            // milliseconds).
            if response.extensions().get::<NotTheOrigins>().is_none() {
                let status = response.status().as_u16();
                let done_ms = state.now_ms();
                rt.live.admission.record_origin(
                    done_ms,
                    done_ms - sent_ms.unwrap_or(pass.now_ms),
                    status,
                );
            }
            let cookie = if commands::take(response.headers_mut()).release {
                commands::release(state, rt, member, pass.session_start_us).await;
                let text = passes.as_ref().and_then(Passes::text);
                Some(passes::cookie_over(state, rt, text, member, None))
            } else {
                renewal.take()
            };
            match cookie {
                Some(cookie) => {
                    // Rare (once per half a pass's life): the origin's
                    // passed fields go into the map to be edited.
                    let mut response = answer.into_response();
                    let headers = response.headers_mut();
                    headers.append(header::SET_COOKIE, cookie);
                    private_to_the_visitor(headers);
                    response.into()
                }
                None => answer,
            }
        }
    }
}

/// A protected request that waits for the store before the gate knows
/// what to do with it (see [`Begun::Waits`]).
pub struct Waits {
    rt: Arc<EventRuntime>,
    req: Request,
    ip: IpAddr,
    member: Option<String>,
    /// Its pass ran out: forwarded if the store says the session goes on.
    expired: Option<Expired>,
}

struct Expired {
    session_start_us: i64,
    /// When the pass was issued: the store moved the session's end to
    /// `session_idle_timeout` past it then (see `session_goes_on`).
    issued_at_ms: i64,
    /// When the pass was judged.
    now_ms: i64,
    pass_at: PassAt,
}

impl Waits {
    /// Forwarded with a renewed pass when the store says the session goes
    /// on; otherwise phase 3b, the waiting room.
    pub async fn finish(self: Box<Self>, state: &AppState) -> Answer {
        let Waits {
            rt,
            req,
            ip,
            member,
            expired,
        } = *self;
        if let (Some(member), Some(expired)) = (&member, expired)
            && let Some(pass) = session_goes_on(state, &rt, member, &expired).await
        {
            let member = member.clone();
            return admitted(state, rt, req, member, pass, expired.pass_at, ip)
                .finish(state)
                .await;
        }
        count("queued");
        let request = Protected {
            state,
            rt: &rt,
            member,
            ip,
        };
        request.queue(req).await.into()
    }
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

/// A valid pass, as phase 2 found it.
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

/// The end of phase 2 for a pass that ran out while the visitor was idle:
/// if the session is still active in the store (and not past its end,
/// which the sweep has yet to see), the pass is simply renewed. While the
/// store cannot say (it failed, or the event drains), the pass itself
/// does: the issue of a pass moved the session's end to
/// `session_idle_timeout` past it, so within that the session went on as
/// far as any node knew (a release asked for here has ended it here), and
/// a pass holder is not sent to the waiting room by an outage.
async fn session_goes_on(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    expired: &Expired,
) -> Option<ValidPass> {
    let goes_on = || ValidPass {
        session_start_us: expired.session_start_us,
        renew: true,
        // After the store's answer, which the origin's time must not
        // include.
        now_ms: state.now_ms(),
    };
    let known_until_us = || {
        let start_ms = expired.session_start_us.div_euclid(1000);
        let honour_ms =
            i64::try_from(passes::outage_honour(&rt.config).as_millis()).unwrap_or(i64::MAX);
        let honoured_us = expired
            .issued_at_ms
            .saturating_add(honour_ms)
            .saturating_mul(1000);
        crate::admission::lifecycle::session_end_us(rt, start_ms, expired.issued_at_ms)
            .min(honoured_us)
    };
    if rt.live.drain.is_draining() {
        return (expired.now_ms.saturating_mul(1000) < known_until_us()).then(goes_on);
    }
    match Queue::new(state, rt).active_until(member).await {
        Ok(Some(expires_at_us)) if expires_at_us > expired.now_ms.saturating_mul(1000) => {
            Some(goes_on())
        }
        Ok(_) => {
            passes::store_says_gone(state, rt, member, expired.session_start_us);
            None
        }
        Err(_) => (expired.now_ms.saturating_mul(1000) < known_until_us()).then(goes_on),
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

/// Makes an answer that carries the visitor's pass cookie private to the
/// visitor: the cookie starts with the visitor's session id, which the
/// gate takes as who they are, so a shared cache in front of Anteroom that
/// stored the origin's publicly cacheable page with it would hand that
/// admission to everyone it serves the page to. Only Anteroom knows it
/// added the cookie. An answer already `private` or `no-store` is left as
/// it is; otherwise `public` and `s-maxage` go and `private` comes first,
/// the origin's other directives (its `max-age` for the visitor's own
/// browser) kept.
fn private_to_the_visitor(headers: &mut HeaderMap) {
    let mut kept = Vec::new();
    for value in headers.get_all(header::CACHE_CONTROL) {
        for directive in value.as_bytes().split(|b| *b == b',') {
            let directive = directive.trim_ascii();
            let name = directive
                .split(|b| *b == b'=')
                .next()
                .unwrap_or(b"")
                .trim_ascii();
            if directive.eq_ignore_ascii_case(b"private") || name.eq_ignore_ascii_case(b"no-store")
            {
                return;
            }
            if !directive.is_empty()
                && !name.eq_ignore_ascii_case(b"public")
                && !name.eq_ignore_ascii_case(b"s-maxage")
            {
                kept.push(directive);
            }
        }
    }
    let mut value = b"private".to_vec();
    for directive in kept {
        value.extend_from_slice(b", ");
        value.extend_from_slice(directive);
    }
    // Made of the origin's own valid bytes and ASCII.
    if let Ok(value) = HeaderValue::from_bytes(&value) {
        headers.insert(header::CACHE_CONTROL, value);
    }
}

/// The origin's request for `req`, from the TCP peer `ip`, with `extra`
/// added (see [`crate::proxy::Proxy::prepare`]).
fn prepare(
    state: &AppState,
    req: Request,
    origin: &axum::http::Uri,
    ip: IpAddr,
    extra: &[(HeaderName, HeaderValue)],
) -> Outgoing {
    let client = ClientHop::read(&req, ip, &state.server.trusted_proxies);
    state.proxy.prepare(req, origin, &client, extra)
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
/// pass [`MAX_HEADER_BYTES`], or are more than [`MAX_HEADER_FIELDS`] (which
/// only an HTTP/2 request can get here with).
pub fn headers_too_large(headers: &HeaderMap) -> bool {
    // HTTP/2 may send each cookie as a field of its own ("crumbs", as
    // Firefox does); they are one `Cookie` line over HTTP/1, and counted so.
    if headers.len() > MAX_HEADER_FIELDS {
        let crumbs = headers.get_all(http::header::COOKIE).iter().count();
        if headers.len() - crumbs.saturating_sub(1) > MAX_HEADER_FIELDS {
            return true;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_with_the_pass_is_made_private_and_keeps_its_other_directives() {
        for (given, made) in [
            (&[][..], Some("private")),
            (&["public"], Some("private")),
            (&["public, max-age=600"], Some("private, max-age=600")),
            (
                &["max-age=0, S-MaxAge=10 ,must-revalidate"],
                Some("private, max-age=0, must-revalidate"),
            ),
            (&["public", "max-age=5"], Some("private, max-age=5")),
            // Already kept from shared caches: left as it is.
            (&["Private, max-age=60"], None),
            (&["no-store"], None),
            (&["max-age=60", "no-store"], None),
        ] {
            let mut headers = HeaderMap::new();
            for v in given {
                headers.append(header::CACHE_CONTROL, HeaderValue::from_static(v));
            }
            let before = headers.clone();
            private_to_the_visitor(&mut headers);
            match made {
                Some(made) => {
                    let all: Vec<_> = headers.get_all(header::CACHE_CONTROL).iter().collect();
                    assert_eq!(all, [made], "{given:?}");
                }
                None => assert_eq!(headers, before, "{given:?}"),
            }
        }
    }
}
