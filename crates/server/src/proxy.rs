//! The reverse proxy: forwards an admitted (or unprotected) request to its
//! origin and streams the answer back, WebSocket and other upgrades included.
//!
//! Bodies are streamed both ways, never buffered, so a large upload or a
//! long download costs the gateway a few buffers, not the body's size.
//! Connections to origins are kept alive in a pool, so a busy gate does not
//! pay a TCP handshake per request. Origins are plain `http://`: TLS, where
//! wanted, is terminated in front of Anteroom.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::uri::{PathAndQuery, Uri};
use http::{HeaderName, HeaderValue, Method, StatusCode, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

mod error;
mod headers;
mod origin;
pub mod upgrade;

/// Marked by the listener; read here for the forwarded scheme.
pub use crate::serve::ClientScheme;
use crate::serve::connections::OriginLease;
use crate::serve::{Answer, ConnectionSlot};
pub use error::ProxyError;
pub use headers::ClientHop;
pub use upgrade::{SESSION_WATCH_EVERY, SessionEnd, SessionWatch};

/// Pooled HTTP/1 clients to the origins: one pool for each event loop that
/// serves connections (see `serve::workers`) and one for the shared
/// runtime. A pooled connection is driven by a task on the runtime that
/// opened it, so a request reuses connections of its own loop and no other
/// thread is woken to carry it.
#[derive(Clone, Debug)]
pub struct Proxy {
    clients: std::sync::Arc<[Client<HttpConnector, Body>]>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Default for Proxy {
    fn default() -> Self {
        Self::new()
    }
}

impl Proxy {
    /// How long a TCP connect to an origin may take before `504`.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long an origin may take to answer with its response head before
    /// `504`; the body may then stream for as long as it needs.
    pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Idle pooled connections are closed after this, before an origin's
    /// own keep-alive timeout would close them under a request.
    const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

    /// One pool, for callers on the shared runtime.
    pub fn new() -> Self {
        Self::with_timeouts(Self::CONNECT_TIMEOUT, Self::RESPONSE_TIMEOUT)
    }

    /// A pool for each of the listener's `loops` event loops, besides the
    /// shared runtime's.
    pub fn for_loops(loops: usize) -> Self {
        Self::build(Self::CONNECT_TIMEOUT, Self::RESPONSE_TIMEOUT, loops)
    }

    pub fn with_timeouts(connect: Duration, response: Duration) -> Self {
        Self::build(connect, response, 0)
    }

    fn build(connect: Duration, response: Duration, loops: usize) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect));
        connector.set_nodelay(true);
        let client = || {
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(Self::POOL_IDLE_TIMEOUT)
                .build(connector.clone())
        };
        Self {
            clients: (0..=loops).map(|_| client()).collect(),
            connect_timeout: connect,
            response_timeout: response,
        }
    }

    /// The pool of the calling thread's event loop, or the shared one.
    fn client(&self) -> &Client<HttpConnector, Body> {
        match crate::serve::workers::current_loop() {
            Some(i) if i + 1 < self.clients.len() => &self.clients[i + 1],
            _ => &self.clients[0],
        }
    }

    /// Forwards `req` to `origin` (scheme and authority; a path there is
    /// prepended to the request's) and answers with the origin's response,
    /// or with `502`/`504` JSON when the origin fails: [`Proxy::prepare`],
    /// then [`Proxy::send`].
    pub async fn forward(
        &self,
        req: Request,
        origin: &Uri,
        client: &ClientHop,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Response {
        let outgoing = self.prepare(req, origin, client, extra);
        self.send(outgoing).await.into_response()
    }

    /// Makes `req` ready for `origin` without waiting for anything: what
    /// [`Proxy::send`] then sends. Taking the request apart before the
    /// first wait keeps it out of every future that waits for the origin
    /// (an `async fn` keeps an argument it was given across its waits, and
    /// a request is 240 bytes), and the caller's too when the caller
    /// prepares it before its own first wait.
    ///
    /// The origin sees one rebuilt set of `X-Forwarded-For` (the believed
    /// client address alone), `X-Forwarded-Proto` and `X-Forwarded-Host`,
    /// from `client`, and `Host: <origin authority>`. Every client-sent
    /// header that claims who the client is, how it came or which path it
    /// wants (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`, `X-Original-URL`,
    /// `X-Rewrite-URL`, `X-Anteroom-*`, in `-` or `_` spellings) is dropped,
    /// and so are Anteroom's cookies and any header named in `extra`, before
    /// `extra` is added: only the gate speaks for Anteroom.
    pub fn prepare(
        &self,
        req: Request,
        origin: &Uri,
        client: &ClientHop,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Outgoing {
        // Only a connection hyper serves carries its slot (the door's
        // HTTP/1 requests come one at a time, within the budget).
        let slot = req.extensions().get::<ConnectionSlot>().cloned();
        let to = match Self::outgoing(req, origin, client, extra) {
            Ok(to) => to,
            Err(err) => To::Refused(err),
        };
        Outgoing {
            origin: origin.clone(),
            to,
            slot,
            lease: None,
        }
    }

    fn outgoing(
        req: Request,
        origin: &Uri,
        client: &ClientHop,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<To, ProxyError> {
        let (mut parts, body) = req.into_parts();
        let authority = origin_authority(origin)?;
        let hop = headers::HopFields::read(&parts.headers);
        upgrade::check_asked(&hop)?;
        if hop.transfer_encoding {
            check_coding(&parts.headers)?;
        }
        let upgrade = hop.upgrade_protocol(&parts.headers);
        // A WebSocket handshake is HTTP/1.1 (RFC 6455, 4.1): on HTTP/1.0
        // (or HTTP/2) the server gives no way to take the visitor's
        // connection over, so the origin must not be asked to switch. Had
        // it been, its `101` would come back as an origin failure, which
        // any visitor could repeat to throttle an adaptive event's
        // admissions.
        if upgrade.is_some() && parts.extensions.get::<OnUpgrade>().is_none() {
            crate::metrics::REJECTIONS.increment("upgrade_not_supported", 1);
            return Err(ProxyError::UpgradeRefused);
        }
        let connection = hop.connection;
        if upgrade.is_none()
            && hyper::body::Body::is_end_stream(&body)
            && origin::eligible(&parts.method, &hop)
        {
            // A bodiless GET or HEAD on an event loop: the lean client, with
            // the origin's head written straight from the visitor's fields
            // (no rewritten map to build and then write out, no target URI
            // made only to be written out), and an answer whose hop-by-hop
            // fields never entered its map.
            let mut head = origin::request_line(
                &parts.method,
                origin_base(origin),
                &requested(&parts.uri),
                parts.headers.len(),
            );
            let forwarding = headers::Forwarding {
                client,
                origin_authority: Some(authority),
                upgrade: None,
                connection,
            };
            headers::for_origin(
                &parts.headers,
                forwarding,
                extra,
                &mut headers::HeadSink(&mut head),
            );
            head.extend_from_slice(b"\r\n");
            return Ok(To::Lean {
                head,
                head_only: parts.method == Method::HEAD,
            });
        }
        let target = target_uri(origin, &parts.uri)?;
        // Taken before the request is rebuilt: it is how the visitor's side
        // of an upgraded connection is reached once the origin agrees, with
        // the client connection's slot and the session it must end with.
        let client_side = upgrade.as_ref().and_then(|_| {
            Some(upgrade::ClientSide {
                upgrade: parts.extensions.remove::<OnUpgrade>()?,
                slot: parts.extensions.remove::<ConnectionSlot>(),
                session: parts.extensions.remove::<SessionWatch>(),
            })
        });
        let forwarding = headers::Forwarding {
            client,
            origin_authority: target.authority(),
            upgrade,
            connection,
        };
        headers::rewrite_request(&mut parts.headers, forwarding, extra);
        let mut request = Request::new(body);
        *request.method_mut() = parts.method;
        *request.uri_mut() = target;
        // The pool speaks HTTP/1.1 to origins whatever the visitor spoke.
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = parts.headers;
        Ok(To::Pooled(Box::new(Pooled {
            request,
            client_side,
        })))
    }

    /// Sends what [`Proxy::prepare`] made and answers with the origin's
    /// response, or with `502`/`504` JSON when the origin fails (or the
    /// request could not be made ready for it). A plain answer of the lean
    /// client's (framed by its length, no field its `Connection` names, no
    /// `Anteroom-Command`) comes with its fields passed through as lines,
    /// its map empty for what the gate adds.
    ///
    /// A plain function returning its future, like the gate's
    /// `Forward::finish`: an `async fn` would keep `outgoing` twice.
    #[allow(clippy::manual_async_fn)]
    pub fn send(&self, mut outgoing: Outgoing) -> impl Future<Output = Answer> + Send + '_ {
        async move {
            // No future is made where no lease is needed (the door's).
            if outgoing.needs_lease()
                && let Err(refused) = self.lease(&mut outgoing).await
            {
                return refused;
            }
            let lease = outgoing.lease.take();
            let sent = match outgoing.to {
                To::Lean { head, head_only } => match origin_authority(&outgoing.origin) {
                    Ok(authority) => origin::send_head(
                        head_only,
                        authority.as_str(),
                        head,
                        self.connect_timeout,
                        self.response_timeout,
                    )
                    .await
                    .map(|(response, passed)| Answer {
                        response: response.map(Body::new),
                        passed,
                    }),
                    Err(err) => Err(err),
                },
                To::Pooled(pooled) => self.send_pooled(*pooled).await.map(Answer::from),
                To::Refused(err) => Err(err),
            };
            match sent {
                Ok(answer) => match lease {
                    Some(lease) => answer.holding(*lease),
                    None => answer,
                },
                Err(err) if err.is_visitors() => {
                    // Anyone can send a broken body: not worth a warning,
                    // and never the origin's failure in an operator's log.
                    tracing::debug!(error = %err, "proxy: the visitor's request failed");
                    err.into_response().into()
                }
                Err(err) => {
                    let origin = &outgoing.origin;
                    tracing::warn!(error = ?err, origin = %origin, "proxy: origin failed");
                    err.into_response().into()
                }
            }
        }
    }

    /// Takes the client connection's leave for `outgoing` to hold an
    /// origin connection (see [`ConnectionSlot::origin_lease`]), unless it
    /// has it already or needs none: a request the door serves, or one
    /// refused already. `Ok(true)` when it had to wait for it (the wait is
    /// the visitor's connection's, not the origin's latency); `Err` with the
    /// answer to give instead of sending: `503 too_many_connections`, marked
    /// [`NotTheOrigins`]. [`Proxy::send`] takes it when its caller did not.
    pub async fn lease(&self, outgoing: &mut Outgoing) -> Result<bool, Answer> {
        let Some(slot) = &outgoing.slot else {
            return Ok(false);
        };
        let wait = match &outgoing.to {
            _ if outgoing.lease.is_some() => return Ok(false),
            To::Refused(_) => return Ok(false),
            To::Lean { .. } => Some(self.response_timeout),
            To::Pooled(pooled) => hyper::body::Body::is_end_stream(pooled.request.body())
                .then_some(self.response_timeout),
        };
        match slot.origin_lease(wait).await {
            Ok((lease, waited)) => {
                outgoing.lease = Some(Box::new(lease));
                Ok(waited)
            }
            Err(_) => {
                let mut refused = ProxyError::AtConnectionCap.into_response();
                refused.extensions_mut().insert(NotTheOrigins);
                Err(refused.into())
            }
        }
    }

    async fn send_pooled(&self, pooled: Pooled) -> Result<Response, ProxyError> {
        let Pooled {
            request,
            client_side,
        } = pooled;
        let pending = self.client().request(request);
        let mut response = tokio::time::timeout(self.response_timeout, pending)
            .await
            .map_err(|_| ProxyError::Timeout)?
            .map_err(ProxyError::from_client)?;

        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client_side) = client_side else {
                return Err(ProxyError::UnexpectedUpgrade);
            };
            let origin_side = hyper::upgrade::on(&mut response);
            upgrade::tunnel(client_side, origin_side);
        }
        let (mut parts, body) = response.into_parts();
        headers::rewrite_response(&mut parts.headers, parts.status);
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// Marks an answer the proxy gave without asking the origin, which says
/// nothing of the origin's health (adaptive admission skips it).
#[derive(Clone, Copy, Debug)]
pub struct NotTheOrigins;

impl Outgoing {
    /// Whether [`Proxy::lease`] has work to do: a connection hyper serves,
    /// not leased yet. Checked before its future is made.
    pub fn needs_lease(&self) -> bool {
        self.slot.is_some() && self.lease.is_none()
    }
}

/// A request made ready for its origin by [`Proxy::prepare`].
pub struct Outgoing {
    origin: Uri,
    to: To,
    /// The client connection's slot, which bounds what it holds of the
    /// origin at once (see [`ConnectionSlot::origin_lease`]).
    slot: Option<ConnectionSlot>,
    /// Its leave to, once taken ([`Proxy::lease`]); boxed, so that the
    /// door's requests, which take none, do not carry its size.
    lease: Option<Box<OriginLease>>,
}

enum To {
    /// The lean client's whole request head (a bodiless `GET` or `HEAD`).
    Lean { head: Vec<u8>, head_only: bool },
    /// A request for the pool (a body, an upgrade, another method): boxed,
    /// so its size does not ride in every page's future.
    Pooled(Box<Pooled>),
    /// Not sendable: answered with the error's JSON.
    Refused(ProxyError),
}

struct Pooled {
    request: Request,
    client_side: Option<upgrade::ClientSide>,
}

/// The origin's authority: origins are plain `http://` URIs.
fn origin_authority(origin: &Uri) -> Result<&http::uri::Authority, ProxyError> {
    if origin.scheme() != Some(&http::uri::Scheme::HTTP) {
        return Err(ProxyError::BadOrigin);
    }
    origin.authority().ok_or(ProxyError::BadOrigin)
}

/// The origin's own path, put in front of every request's, without its
/// trailing `/` (empty for an origin without one).
fn origin_base(origin: &Uri) -> &str {
    origin.path().trim_end_matches('/')
}

/// The request's path and query (`/` for a target without one).
fn requested(request: &Uri) -> std::borrow::Cow<'_, str> {
    match request.path_and_query().map(PathAndQuery::as_str) {
        // An absolute-form target without a path (`http://host?x`) has the
        // root as its path, as the gate classified it: a request line of
        // `?x` alone is no HTTP.
        Some(pq) if pq.starts_with('?') => format!("/{pq}").into(),
        Some(pq) => pq.into(),
        None => "/".into(),
    }
}

/// Refuses a body sent with any transfer coding but one `chunked` (`gzip,
/// chunked`, or `chunked, chunked` over one line or two). The HTTP parser
/// takes one layer of chunks off, but the gate's hop to the origin carries
/// only its own chunking: the origin would read what is left (still coded,
/// or still chunk-framed) as the plain body, unseen by anything in between
/// that checked it. RFC 9112 (6.1) answers an unknown coding `501`. Empty
/// list elements (`, chunked`) are no coding (RFC 9110, 5.6.1).
fn check_coding(headers: &http::HeaderMap) -> Result<(), ProxyError> {
    let mut codings = 0usize;
    let mut chunked = 0usize;
    for value in headers.get_all(http::header::TRANSFER_ENCODING) {
        let Ok(value) = value.to_str() else {
            codings += 1;
            continue;
        };
        for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            codings += 1;
            chunked += usize::from(token.eq_ignore_ascii_case("chunked"));
        }
    }
    if codings == 1 && chunked == 1 {
        Ok(())
    } else {
        crate::metrics::REJECTIONS.increment("not_implemented", 1);
        Err(ProxyError::UnknownCoding)
    }
}

/// The origin's scheme and authority, the origin's path (if any) followed
/// by the request's path and query.
fn target_uri(origin: &Uri, request: &Uri) -> Result<Uri, ProxyError> {
    let authority = origin_authority(origin)?.clone();
    let requested = requested(request);
    let base = origin_base(origin);
    let path_and_query = if base.is_empty() {
        PathAndQuery::try_from(requested.as_ref())
    } else {
        PathAndQuery::try_from(format!("{base}{requested}"))
    }
    .map_err(|_| ProxyError::BadOrigin)?;
    Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| ProxyError::BadOrigin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(origin: &str, request: &str, expected: Option<&str>) {
        let origin: Uri = origin.parse().unwrap();
        let request: Uri = request.parse().unwrap();
        let got = target_uri(&origin, &request).ok().map(|u| u.to_string());
        assert_eq!(got.as_deref(), expected);
    }

    #[test]
    fn target_uri_keeps_path_and_query() {
        check("http://o:9000", "/a/b?c=d", Some("http://o:9000/a/b?c=d"));
        check("http://o:9000/", "/", Some("http://o:9000/"));
        check("http://o/base/", "/a?x", Some("http://o/base/a?x"));
        check("http://o", "http://visitor.example/a", Some("http://o/a"));
        check("http://o", "http://visitor.example?x", Some("http://o/?x"));
        check("https://o", "/a", None);
        check("/relative", "/a", None);
    }
}
