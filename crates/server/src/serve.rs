//! Serving a router on a listener with hyper-util, so that hyper's own limits
//! sit above ours (a 40 KiB header gets our `431` JSON, not hyper's empty
//! one), upgrades (WebSocket) reach the proxy, and no client can pin the
//! node: a connection must deliver its first request head within
//! `server.header_read_timeout` of being accepted, a body must keep arriving
//! at 64 KiB per `server.body_read_timeout` at least (so a small one is
//! whole within it), idle HTTP/2 connections are closed, and
//! each listener holds at most its share of connections (see
//! [`connections`]), so the origin and store pools always find descriptors.
//!
//! The accept loop, the per-connection watchdog and the protocol settings
//! are separate functions so that wrapping the stream (TLS) touches only
//! the point where the stream is handed to hyper.

mod answer;
pub mod connections;
mod door;
pub mod send_deadline;
pub mod workers;

use futures::future::Either;
use std::convert::Infallible;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http_body_util::BodyExt as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

pub use answer::{Answer, PassedFields};
use connections::Activity;
pub use connections::{ConnectionSlot, Limits};
use send_deadline::SendDeadline;

/// How the client reached this server, as a request extension: set by the
/// listener for TLS connections (`Https`); absent means plain `http`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientScheme {
    Http,
    Https,
}

/// The requests a listener answers before its router. A crowd's polls are
/// most of a public listener's requests, and for one of them the router's
/// match, the middleware's boxed futures and the body and extension
/// wrapping that every routed request gets cost as much as the answer
/// itself; a hand match on the method and the exact path takes the hot
/// route straight to its handler. Whatever it declines goes to the router
/// unchanged, so the router stays the whole contract and a hot route is an
/// answer the router would give too.
pub trait HotRoutes: Send + Sync + 'static {
    /// Whether a request for `uri` with `method` is a hot route's.
    fn takes(&self, method: &http::Method, uri: &http::Uri) -> bool;

    /// The answer to a request [`HotRoutes::takes`] took. `peer` is the TCP
    /// peer. The request's body is dropped
    /// unread, so a hot route must be one whose handler never reads a body;
    /// and its answer must be a whole buffer (never a stream): the
    /// connection counts as idle again once the answer is made.
    fn answer(&self, head: http::request::Parts, peer: SocketAddr) -> HotAnswer;

    /// Whether a request for `uri` with `method` is one the hot routes take
    /// whole: body and all, with an answer that may stream (a proxied one).
    /// It must be a request the router would hand to its fallback, or to a
    /// route whose handler the hot routes call as the router would.
    fn takes_whole(&self, method: &http::Method, uri: &http::Uri) -> bool;

    /// The answer to a request [`HotRoutes::takes_whole`] took, given as the
    /// router's fallback would see it, the scheme attached and the body
    /// timing out, but its TCP peer given apart as `peer`: the door does
    /// not attach it, because a gated request reads it once, and the first
    /// entry in a request's extensions costs three allocations. (Nor the
    /// connection's slot, which the router attaches for an upgrade: a head
    /// asking to upgrade is never the door's, so no answer it asks for
    /// outlives the connection.) The connection stays busy until the
    /// answer's body is sent.
    fn answer_whole(&self, req: axum::extract::Request, peer: SocketAddr) -> HotWholeAnswer;
}

/// A hot route's answer to a head, still to be awaited.
pub type HotAnswer = Pin<Box<dyn std::future::Future<Output = axum::response::Response> + Send>>;

/// A hot route's answer to a whole request, still to be awaited: it may
/// pass a proxied answer's fields through (see [`Answer`]).
pub type HotWholeAnswer = Pin<Box<dyn std::future::Future<Output = Answer> + Send>>;

/// What a listener serves: its router and, on the public listener, the
/// hot routes answered before it.
#[derive(Clone)]
pub struct App {
    pub router: Router,
    pub hot: Option<Arc<dyn HotRoutes>>,
}

impl From<Router> for App {
    fn from(router: Router) -> Self {
        Self { router, hot: None }
    }
}

/// hyper's read buffer: room for a request head well past our 32 KiB limit.
const MAX_BUF: usize = 256 * 1024;
/// Streams one HTTP/2 connection may have open at once.
const H2_MAX_STREAMS: u32 = 256;

/// Accepts connections until `stop` turns true, then lets open ones finish
/// their current request (for up to `limits.shutdown_grace`). With `tls`,
/// each connection completes its handshake first (bounded by the header
/// read timeout).
pub async fn serve(
    listener: TcpListener,
    app: impl Into<App>,
    limits: Limits,
    tls: Option<crate::tls::Tls>,
    stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(connections::CLEAN_REFUSALS));
    let loops = match limits.event_loops {
        0 => None,
        n => match workers::Workers::start(n, "anteroom-io") {
            Ok(w) => Some(w),
            Err(e) => {
                // Still served, on the shared runtime: slower, not down.
                tracing::error!(error = %e, "cannot start the event loops; serving on the shared runtime");
                None
            }
        },
    };
    let loop_state = (&slots, &refusing, loops.as_ref());
    let app = app.into();
    accept_loop(
        &listener,
        &app,
        &limits,
        tls.as_ref(),
        loop_state,
        stop.clone(),
    )
    .await;
    drop(listener);
    // Every open connection holds one permit: all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await;
    if let Some(loops) = loops {
        loops.stop().await;
    }
}

type LoopState<'a> = (
    &'a Arc<Semaphore>,
    &'a Arc<Semaphore>,
    Option<&'a workers::Workers>,
);

async fn accept_loop(
    listener: &TcpListener,
    app: &App,
    limits: &Limits,
    tls: Option<&crate::tls::Tls>,
    (slots, refusing, loops): LoopState<'_>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    connections::accept_failed(&e, slots).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            connections::refuse(stream, limits.max_connections, tls.is_none(), refusing);
            continue;
        };
        // The first request head is due this long after the accept,
        // whatever comes before it (a TLS handshake) or carries it.
        let head_due = Instant::now() + limits.header_read_timeout;
        let _ = stream.set_nodelay(true);
        let (app, limits, stop) = (app.clone(), *limits, stop.clone());
        let tls = tls.cloned();
        let serve = move |stream: tokio::net::TcpStream| async move {
            let written = Arc::default();
            match tls {
                None => {
                    let first = First {
                        scheme: ClientScheme::Http,
                        head_due,
                        written: Arc::clone(&written),
                    };
                    let stream = SendDeadline::counting(stream, limits.send_timeout, written);
                    serve_http1_first(stream, peer, first, app, limits, permit, stop).await;
                }
                Some(tls) => {
                    let stream =
                        SendDeadline::counting(stream, limits.send_timeout, Arc::clone(&written));
                    let Some(stream) = tls.accept(stream, head_due).await else {
                        return;
                    };
                    // A client that chose HTTP/2 goes straight to hyper.
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        let stream = door::Prefixed::new(bytes::Bytes::new(), stream);
                        let slot = ConnectionSlot::new(permit);
                        let first = First {
                            scheme: ClientScheme::Https,
                            head_due,
                            written,
                        };
                        serve_connection(stream, peer, first, app, limits, slot, stop).await;
                        return;
                    }
                    let first = First {
                        scheme: ClientScheme::Https,
                        head_due,
                        written,
                    };
                    serve_http1_first(stream, peer, first, app, limits, permit, stop).await;
                }
            }
        };
        match loops {
            Some(loops) => loops.spawn(stream, serve),
            None => {
                tokio::spawn(serve(stream));
            }
        }
    }
}

/// How a connection came, when its first request head is due, and what
/// counts the bytes its client has taken (see [`SendDeadline::counting`]).
#[derive(Clone, Debug)]
struct First {
    scheme: ClientScheme,
    head_due: Instant,
    written: Arc<std::sync::atomic::AtomicU64>,
}

/// A connection whose first requests the door may answer (see [`door`]):
/// with head-only hot routes, the door serves it until a request is not
/// one of theirs, then hyper serves it from that request on.
async fn serve_http1_first<S>(
    stream: S,
    peer: SocketAddr,
    first: First,
    app: App,
    limits: Limits,
    permit: OwnedSemaphorePermit,
    mut stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = ConnectionSlot::new(permit);
    let (stream, first) = match &app.hot {
        Some(hot) => {
            let visit = door::Visit {
                peer,
                scheme: first.scheme,
                header_read_timeout: limits.header_read_timeout,
                head_due: first.head_due,
            };
            match door::serve(stream, hot, visit, &mut stop).await {
                door::Left::Closed => return,
                door::Left::ToHyper(stream, head_due) => (stream, First { head_due, ..first }),
            }
        }
        None => (door::Prefixed::new(bytes::Bytes::new(), stream), first),
    };
    serve_connection(stream, peer, first, app, limits, slot, stop).await;
}

/// One client connection, from accept (or the door's hand-off) to close.
/// The permit is held until the socket is closed (by an upgraded tunnel, if
/// the connection upgrades).
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    first: First,
    app: App,
    limits: Limits,
    slot: ConnectionSlot,
    mut stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let scheme = first.scheme;
    let activity = Activity::new();
    let service = {
        let activity = activity.clone();
        tower::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let busy = activity.begin();
            // An HTTP/2 answer's body is watched from its head on (see
            // `connections::SendWatch`), not while the answer is made.
            let h2 = (req.version() == http::Version::HTTP_2).then(|| activity.clone());
            let prepared = |req| {
                let mut req = prepare(req, peer, limits.body_read_timeout, &slot);
                // Only TLS is marked: an absent mark reads as plain `http`.
                if scheme == ClientScheme::Https {
                    req.extensions_mut().insert(ClientScheme::Https);
                }
                req
            };
            let route = match &app.hot {
                Some(hot) if hot.takes(req.method(), req.uri()) => {
                    Served::Head(hot.answer(req.into_parts().0, peer))
                }
                Some(hot) if hot.takes_whole(req.method(), req.uri()) => {
                    Served::Whole(hot.answer_whole(prepared(req), peer))
                }
                _ => Served::Router(app.router.clone(), prepared(req)),
            };
            async move {
                match route {
                    // A head-only hot answer is a whole buffer, written at
                    // once: the connection is busy until it is made.
                    Served::Head(hot) => {
                        let response = hot.await;
                        match h2 {
                            // Over HTTP/2 a client may take none of it.
                            Some(_) => Ok::<_, Infallible>(track(response, busy, h2)),
                            None => {
                                drop(busy);
                                Ok(response)
                            }
                        }
                    }
                    Served::Whole(hot) => Ok(track(hot.await.into_response(), busy, h2)),
                    Served::Router(router, req) => Ok(track(router.oneshot(req).await?, busy, h2)),
                }
            }
        })
    };
    let builder = protocol_builder(&limits);
    let (io, service) = (TokioIo::new(stream), TowerToHyperService::new(service));
    // hyper-util's connection with upgrades reads the protocol from the
    // first bytes whatever the builder allows: an HTTP/1-only listener
    // takes the connection without upgrades, which keeps to HTTP/1.
    let conn = if limits.http1_only {
        Either::Left(builder.serve_connection(io, service))
    } else {
        Either::Right(builder.serve_connection_with_upgrades(io, service))
    };
    tokio::pin!(conn);
    let mut first_head = std::pin::pin!(tokio::time::sleep_until(first.head_due));
    let mut idle_check = tokio::time::interval(limits.http2_idle_timeout / 4);
    idle_check.tick().await;
    let mut send_check =
        tokio::time::interval((limits.send_timeout / 4).max(Duration::from_millis(1)));
    send_check.tick().await;
    let mut closing = false;
    let mut watching = false;
    // A graceful close waits for the streams open, and a client can keep
    // one from ever ending (it opens no window for an answer hyper has
    // taken whole into its buffers): once closing, the connection goes when
    // the client has taken nothing for `send_timeout`.
    let mut progress = Progress::new(&first.written);
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                return;
            }
            // hyper's own header timer starts only once the protocol is
            // known (after the first bytes): a silent connection or a partial
            // preface would be held forever without this.
            () = &mut first_head, if !activity.any_request() => {
                // The request may have arrived in this very wake-up.
                if !activity.any_request() {
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "header_timeout").increment(1);
                    return;
                }
            }
            // The stall checks start with the connection's first HTTP/2
            // answer: an HTTP/1 connection never wakes for them.
            () = activity.first_watch(), if !watching => {
                watching = true;
                send_check.reset();
            }
            // An HTTP/2 answer the client has left without window for
            // `send_timeout` is cut (see `connections::SendWatch`): what it
            // held goes, as it does with an HTTP/1 client that takes no byte.
            _ = send_check.tick(), if watching => {
                let (cut, stuck) = activity.cut_stalled(limits.send_timeout);
                if cut > 0 {
                    metrics::counter!("anteroom_http2_streams_cut_total").increment(cut as u64);
                    tracing::debug!(%peer, cut, "HTTP/2 answers waited server.send_timeout for their window; cut");
                }
                // hyper holds a cut stream until the client opens its window:
                // a client that keeps many so, or any once the connection
                // closes, would hold the connection for good.
                if stuck >= STUCK_STREAMS || (closing && stuck > 0)
                    || (closing && progress.stalled(limits.send_timeout))
                {
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "send_timeout").increment(1);
                    return;
                }
            }
            _ = idle_check.tick() => {
                if closing && progress.stalled(limits.send_timeout) {
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "send_timeout").increment(1);
                    return;
                }
                if !closing && activity.idle_for() >= limits.http2_idle_timeout {
                    closing = true;
                    progress = Progress::new(&first.written);
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "idle").increment(1);
                    shut_down_gracefully(conn.as_mut());
                }
            }
            changed = stop.changed(), if !closing => {
                if changed.is_err() || *stop.borrow() {
                    closing = true;
                    progress = Progress::new(&first.written);
                    shut_down_gracefully(conn.as_mut());
                }
            }
        }
    }
}

/// Cut HTTP/2 streams still held open (see `connections::SendWatch`) past
/// which a connection is closed: a page with a paused video or two keeps
/// its connection; a client holding streams open by the dozen does not.
const STUCK_STREAMS: usize = 8;

/// Fewer bytes than this taken by the client count as no progress (a PING
/// answered every few seconds is not a reader).
const MIN_PROGRESS: u64 = 1024;

/// Whether a closing connection's client still takes what it is sent.
struct Progress<'a> {
    written: &'a std::sync::atomic::AtomicU64,
    bytes: u64,
    at: Instant,
}

impl<'a> Progress<'a> {
    fn new(written: &'a std::sync::atomic::AtomicU64) -> Self {
        Self {
            written,
            bytes: written.load(std::sync::atomic::Ordering::Relaxed),
            at: Instant::now(),
        }
    }

    /// Whether the client has taken less than [`MIN_PROGRESS`] for
    /// `limit`; a slow reader still draining an answer's tail is not.
    fn stalled(&mut self, limit: Duration) -> bool {
        let now = self.written.load(std::sync::atomic::Ordering::Relaxed);
        if now.saturating_sub(self.bytes) >= MIN_PROGRESS {
            self.bytes = now;
            self.at = Instant::now();
            return false;
        }
        self.at.elapsed() >= limit
    }
}

/// Who answers a request: a hot route from its head alone, a hot route
/// with the whole request, or the router.
// The value is moved once, into the request's future, which holds the
// request either way; boxing it would cost an allocation per routed request.
#[allow(clippy::large_enum_variant)]
enum Served {
    Head(HotAnswer),
    Whole(HotWholeAnswer),
    Router(Router, axum::extract::Request),
}

/// A request as the router sees it: the peer address and the connection
/// slot attached, the body timing out (see [`ReadTimeoutBody`]).
fn prepare(
    req: hyper::Request<hyper::body::Incoming>,
    peer: SocketAddr,
    body_read_timeout: Duration,
    slot: &ConnectionSlot,
) -> axum::extract::Request {
    let mut req = req.map(|b| Body::new(ReadTimeoutBody::new(b, body_read_timeout)));
    req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
    req.extensions_mut().insert(slot.clone());
    req
}

/// The response with `busy` held until its body is fully sent (or dropped),
/// so a long download or push stream never counts as an idle connection;
/// on HTTP/2 (`h2`: its connection's activity), each wait for the
/// client's window watched too ([`Watched`]).
fn track(
    response: axum::response::Response,
    busy: connections::Busy,
    h2: Option<Activity>,
) -> axum::response::Response {
    match h2 {
        None => response.map(|body| {
            Body::new(body.map_frame(move |frame| {
                let _busy = &busy;
                frame
            }))
        }),
        Some(activity) => response.map(|body| {
            Body::new(Watched {
                watch: activity.watch_send(Sending {
                    body,
                    rest: None,
                    _busy: busy,
                }),
            })
        }),
    }
}

/// The most of a body [`Watched`] hands hyper at once: the client's wait
/// is timed per piece, and an origin's chunk of 400 KiB read at 10 KB/s
/// took longer than `send_timeout` though bytes kept flowing.
const WATCHED_PIECE: usize = 16 * 1024;

/// What a watched answer holds until it is sent whole or cut: its body
/// (with what that holds of the origin), what is left of a data frame
/// larger than a piece, and its request's busy mark.
struct Sending {
    body: Body,
    rest: Option<bytes::Bytes>,
    _busy: connections::Busy,
}

/// An HTTP/2 answer's body, telling its [`connections::SendWatch`] when
/// hyper polls it and when it gave hyper a piece to send, in pieces of at
/// most [`WATCHED_PIECE`]; once cut, an error (hyper resets the stream).
struct Watched {
    watch: Arc<connections::SendWatch<Sending>>,
}

/// The first [`WATCHED_PIECE`] of `data`, the rest kept in `rest`. A piece
/// is copied out of a larger frame, so a stream cut while hyper holds its
/// piece does not pin the whole of the origin's chunk.
fn piece(
    mut data: bytes::Bytes,
    rest: &mut Option<bytes::Bytes>,
) -> hyper::body::Frame<bytes::Bytes> {
    if data.len() > WATCHED_PIECE {
        let first = bytes::Bytes::copy_from_slice(&data[..WATCHED_PIECE]);
        *rest = Some(data.split_off(WATCHED_PIECE));
        data = first;
    }
    hyper::body::Frame::data(data)
}

impl hyper::body::Body for Watched {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let watch = Arc::clone(&self.watch);
        let mut held = watch.held();
        let Some(sending) = held.as_mut() else {
            return Poll::Ready(Some(Err(axum::Error::new(
                "the client opened no window for server.send_timeout",
            ))));
        };
        if let Some(rest) = sending.rest.take() {
            watch.owed();
            return Poll::Ready(Some(Ok(piece(rest, &mut sending.rest))));
        }
        match Pin::new(&mut sending.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                watch.owed();
                Poll::Ready(Some(Ok(match frame.into_data() {
                    Ok(data) => piece(data, &mut sending.rest),
                    Err(frame) => frame,
                })))
            }
            Poll::Ready(None) => {
                watch.paid();
                // Sent whole: the request is over.
                *held = None;
                Poll::Ready(None)
            }
            other => {
                watch.paid();
                other
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // A cut answer is not at its end: hyper must not end the stream
        // as if it were whole.
        self.watch
            .held()
            .as_ref()
            .is_some_and(|s| s.rest.is_none() && s.body.is_end_stream())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self.watch.held().as_ref() {
            Some(s) => {
                let rest = s.rest.as_ref().map_or(0, |r| r.len() as u64);
                let inner = s.body.size_hint();
                let mut hint = hyper::body::SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(rest));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(rest));
                }
                hint
            }
            None => hyper::body::SizeHint::default(),
        }
    }
}

/// Each this many bytes of a request body extend its whole-body deadline by
/// one `body_read_timeout`.
const BODY_BYTES_PER_TIMEOUT: usize = 64 * 1024;

/// A request body that fails with [`BodyTimeout`] when no piece arrives for
/// `timeout`, or when it falls behind 64 KiB per `timeout` on average: its
/// first 64 KiB must arrive within `timeout` of the first wait for it, each
/// further 64 KiB within one more. A wait between pieces alone would let a
/// client that sends a byte just inside the timeout hold its connection
/// (and, through the gate, an origin connection) for days; with the
/// average, any body the queue API reads must be complete within
/// `timeout`, while an upload only needs 64 KiB per `timeout` (about
/// 2 KiB/s at the default 30 s). The clocks start at the first wait, so a
/// body that is already there costs no timer.
struct ReadTimeoutBody<B> {
    inner: B,
    timeout: Duration,
    /// The next piece's deadline and the whole body's, once waited for.
    clocks: Option<Clocks>,
    /// Bytes received since the whole-body deadline last moved.
    credit: usize,
}

struct Clocks {
    piece: Pin<Box<Sleep>>,
    whole: Pin<Box<Sleep>>,
}

impl<B> ReadTimeoutBody<B> {
    fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            clocks: None,
            credit: 0,
        }
    }
}

/// A request body stopped arriving, or arrived too slowly, for
/// `server.body_read_timeout`.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body read timed out")
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that broke off or broke its framing (a malformed chunk,
/// a connection closed inside it): the visitor's failure, whoever reads
/// the body, never the origin's.
#[derive(Debug)]
pub struct BrokenBody(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for BrokenBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body was malformed or cut short")
    }
}

impl std::error::Error for BrokenBody {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl<B> hyper::body::Body for ReadTimeoutBody<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, Self::Error>>> {
        use hyper::body::Buf as _;
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(clocks) = &mut this.clocks {
                    let now = Instant::now();
                    clocks.piece.as_mut().reset(now + this.timeout);
                    if let Some(data) = frame.data_ref() {
                        this.credit += data.remaining();
                        while this.credit >= BODY_BYTES_PER_TIMEOUT {
                            this.credit -= BODY_BYTES_PER_TIMEOUT;
                            let later = clocks.whole.deadline() + this.timeout;
                            clocks.whole.as_mut().reset(later);
                        }
                    }
                } else if let Some(data) = frame.data_ref() {
                    this.credit += data.remaining();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(BrokenBody(e.into()))))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let timeout = this.timeout;
                let clocks = this.clocks.get_or_insert_with(|| Clocks {
                    piece: Box::pin(tokio::time::sleep(timeout)),
                    whole: Box::pin(tokio::time::sleep(timeout)),
                });
                let piece = clocks.piece.as_mut().poll(cx).is_ready();
                let whole = clocks.whole.as_mut().poll(cx).is_ready();
                if piece || whole {
                    return Poll::Ready(Some(Err(Box::new(BodyTimeout))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `err` (or one of its causes) is a request body that stopped
/// arriving, or arrived too slowly, for `server.body_read_timeout`.
pub fn is_body_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<BodyTimeout>(err)
}

/// Whether `err` or one of its causes is an `E`.
fn caused_by<E: std::error::Error + 'static>(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.is::<E>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// Whether `err` (or one of its causes) is a request body that broke off
/// or broke its framing ([`BrokenBody`]).
pub fn is_broken_body(err: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<BrokenBody>(err)
}

/// HTTP/1 and HTTP/2 settings of one connection.
/// A connection as hyper serves it: HTTP/1 only, or either protocol with
/// upgrades.
type Conn<'b, A, B> = Either<
    hyper_util::server::conn::auto::Connection<'b, A, B, TokioExecutor>,
    hyper_util::server::conn::auto::UpgradeableConnection<'b, A, B, TokioExecutor>,
>;

/// Asks hyper to finish the connection's requests in flight and close it.
fn shut_down_gracefully<A, B>(conn: std::pin::Pin<&mut Conn<'_, A, B>>)
where
    A: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::service::HttpService<hyper::body::Incoming>,
    B::Future: 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B::ResBody: 'static,
    <B::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: hyper_util::server::conn::auto::HttpServerConnExec<B::Future, B::ResBody>,
{
    match conn.as_pin_mut() {
        Either::Left(conn) => conn.graceful_shutdown(),
        Either::Right(conn) => conn.graceful_shutdown(),
    }
}

fn protocol_builder(limits: &Limits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    if limits.http1_only {
        builder = builder.http1_only();
    }
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // hyper's default header count (100) is parsed into arrays on the
        // stack; any other count is a heap array written in full for every
        // request head, which cost an eighth of a position poll's CPU at
        // 2048. Browsers send 10-30 fields; a head with more than 100 gets
        // hyper's bare 431 before any handler runs (docs/api.md).
        .max_buf_size(MAX_BUF);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.http2_keep_alive_interval))
        .keep_alive_timeout(limits.http2_keep_alive_timeout)
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(u32::try_from(MAX_BUF).unwrap_or(u32::MAX));
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hyper::body::Frame;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A closing connection whose client takes less than 1 KiB for the
    /// send timeout is stalled, however many PINGs it answers; one still
    /// draining an answer's tail, slowly, is not, and each 1 KiB it takes
    /// starts the timeout again.
    #[tokio::test(start_paused = true)]
    async fn a_closing_client_that_takes_under_a_kibibyte_per_send_timeout_is_stalled() {
        let limit = Duration::from_secs(4);
        let written = AtomicU64::new(50_000);
        let mut progress = Progress::new(&written);
        // A slow reader: 1 KiB every 3 s, never stalled.
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(3)).await;
            written.fetch_add(MIN_PROGRESS, Ordering::Relaxed);
            assert!(!progress.stalled(limit));
        }
        // PING answers and a trickle under 1 KiB: stalled once the send
        // timeout passed since its last 1 KiB, not before.
        tokio::time::advance(Duration::from_secs(2)).await;
        written.fetch_add(MIN_PROGRESS - 1, Ordering::Relaxed);
        assert!(!progress.stalled(limit));
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(!progress.stalled(limit));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(progress.stalled(limit));
    }

    /// A body fed piece by piece from the test.
    struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

    impl hyper::body::Body for Fed {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            self.0
                .poll_recv(cx)
                .map(|piece| piece.map(|b| Ok(Frame::data(b))))
        }
    }

    /// A fed body wrapped like a request's.
    fn fed(timeout: Duration) -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        (tx, Body::new(ReadTimeoutBody::new(Fed(rx), timeout)))
    }

    /// An HTTP/2 answer's body goes to hyper in pieces of at most 16 KiB,
    /// each owing a poll, so a reader is timed per piece, not per chunk
    /// of the origin's (one of 400 KiB read at 10 KB/s took 40 s); and a
    /// body cut for its stall ends its stream with an error.
    #[tokio::test]
    async fn an_http2_answer_goes_in_pieces_and_a_cut_one_errs() {
        let activity = Activity::new();
        let whole = Bytes::from(vec![7u8; 100_000]);
        let response = axum::response::Response::new(Body::from(whole.clone()));
        let mut body = track(response, activity.begin(), Some(activity.clone())).into_body();
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= 16 * 1024, "{}", data.len());
            got.extend_from_slice(&data);
        }
        assert_eq!(got, whole);
        assert!(activity.idle_for() > Duration::ZERO, "sent whole: not busy");
        // One that waits for its window past the limit is cut.
        let response = axum::response::Response::new(Body::from(whole));
        let mut body = track(response, activity.begin(), Some(activity.clone())).into_body();
        assert!(body.frame().await.unwrap().is_ok());
        assert_eq!(activity.cut_stalled(Duration::ZERO), (1, 1));
        assert_eq!(
            activity.cut_stalled(Duration::ZERO),
            (0, 1),
            "cut once, held open by hyper"
        );
        assert!(!hyper::body::Body::is_end_stream(&body), "cut is no end");
        assert!(body.frame().await.unwrap().is_err());
        assert!(
            activity.idle_for() > Duration::ZERO,
            "a cut answer is not busy"
        );
        drop(body);
        assert_eq!(activity.cut_stalled(Duration::ZERO), (0, 0), "reset: gone");
    }

    #[tokio::test]
    async fn a_body_trickled_just_inside_the_piece_timeout_still_times_out() {
        // A byte every 100 ms never waits a whole second for a piece, but a
        // small body must be complete within the second.
        let (tx, body) = fed(Duration::from_secs(1));
        tokio::spawn(async move {
            while tx.send(Bytes::from_static(b"x")).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let started = std::time::Instant::now();
        let err = axum::body::to_bytes(body, 1 << 20).await.unwrap_err();
        assert!(is_body_timeout(&err), "{err}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(950),
            "timed out early: {took:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "timed out only after {took:?}"
        );
    }

    #[tokio::test]
    async fn a_large_body_that_keeps_its_average_rate_is_read_whole() {
        // 64 KiB every 100 ms for 1.5 s: more than a second in all, yet each
        // 64 KiB is well within its second.
        let (tx, body) = fed(Duration::from_secs(1));
        tokio::spawn(async move {
            for _ in 0..15 {
                let piece = Bytes::from(vec![b'x'; BODY_BYTES_PER_TIMEOUT]);
                tx.send(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let bytes = axum::body::to_bytes(body, 1 << 24).await.unwrap();
        assert_eq!(bytes.len(), 15 * BODY_BYTES_PER_TIMEOUT);
    }

    #[tokio::test]
    async fn a_stalled_body_times_out_and_one_already_there_needs_no_clock() {
        let (tx, body) = fed(Duration::from_millis(300));
        tx.send(Bytes::from_static(b"half")).await.unwrap();
        let err = axum::body::to_bytes(body, 1024).await.unwrap_err();
        assert!(is_body_timeout(&err), "{err}");
        drop(tx);

        let (tx, body) = fed(Duration::from_millis(1));
        tx.send(Bytes::from_static(b"all")).await.unwrap();
        drop(tx);
        let bytes = axum::body::to_bytes(body, 1024).await.unwrap();
        assert_eq!(&bytes[..], b"all");
    }
}
