//! Serving a router on a listener with hyper-util, so that hyper's own limits
//! sit above ours (a 40 KiB header gets our `431` JSON, not hyper's empty
//! one), upgrades (WebSocket) reach the proxy, and no client can pin the
//! node: a connection must deliver its first request head within
//! `server.header_read_timeout` of being accepted, a body must keep arriving
//! (`server.body_read_timeout`), idle HTTP/2 connections are closed, and
//! each listener holds at most its share of connections (see
//! [`connections`]), so the origin and store pools always find descriptors.
//!
//! The accept loop, the per-connection watchdog and the protocol settings
//! are separate functions so that wrapping the stream (TLS) touches only
//! the point where the stream is handed to hyper.

pub mod connections;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
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
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutBody;

use connections::Activity;
pub use connections::{ConnectionSlot, Limits};

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
    app: Router,
    limits: Limits,
    tls: Option<crate::tls::Tls>,
    stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    accept_loop(&listener, &app, &limits, tls.as_ref(), &slots, stop.clone()).await;
    drop(listener);
    // Every open connection holds one permit: all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await;
}

async fn accept_loop(
    listener: &TcpListener,
    app: &Router,
    limits: &Limits,
    tls: Option<&crate::tls::Tls>,
    slots: &Arc<Semaphore>,
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
            connections::refuse(stream, limits.max_connections, tls.is_none());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (app, limits, stop) = (app.clone(), *limits, stop.clone());
        match tls.cloned() {
            None => {
                tokio::spawn(serve_connection(
                    stream, peer, false, app, limits, permit, stop,
                ));
            }
            Some(tls) => {
                tokio::spawn(async move {
                    // The handshake is bounded by the header read timeout.
                    let Some(stream) = tls.accept(stream, limits.header_read_timeout).await else {
                        return;
                    };
                    serve_connection(stream, peer, true, app, limits, permit, stop).await;
                });
            }
        }
    }
}

/// One client connection, from accept to close. The permit is held until
/// the socket is closed (by an upgraded tunnel, if the connection upgrades).
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    https: bool,
    app: Router,
    limits: Limits,
    permit: OwnedSemaphorePermit,
    mut stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = ConnectionSlot::new(permit);
    let activity = Activity::new();
    let service = {
        let activity = activity.clone();
        tower::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let busy = activity.begin();
            let mut req = prepare(req, peer, limits.body_read_timeout, &slot);
            if https {
                req.extensions_mut()
                    .insert(crate::proxy::ClientScheme::Https);
            }
            let app = app.clone();
            async move {
                let response = app.oneshot(req).await?;
                Ok::<_, Infallible>(track(response, busy))
            }
        })
    };
    let builder = protocol_builder(&limits);
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let mut first_head = std::pin::pin!(tokio::time::sleep(limits.header_read_timeout));
    let mut idle_check = tokio::time::interval(limits.http2_idle_timeout / 4);
    idle_check.tick().await;
    let mut closing = false;
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
            _ = idle_check.tick(), if !closing => {
                if activity.idle_for() >= limits.http2_idle_timeout {
                    closing = true;
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "idle").increment(1);
                    conn.as_mut().graceful_shutdown();
                }
            }
            changed = stop.changed(), if !closing => {
                if changed.is_err() || *stop.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A request as the router sees it: the peer address and the connection
/// slot attached, the body timing out between pieces.
fn prepare(
    req: hyper::Request<hyper::body::Incoming>,
    peer: SocketAddr,
    body_read_timeout: Duration,
    slot: &ConnectionSlot,
) -> axum::extract::Request {
    let mut req = req.map(|b| Body::new(TimeoutBody::new(body_read_timeout, b)));
    req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
    req.extensions_mut().insert(slot.clone());
    req
}

/// The response with `busy` held until its body is fully sent (or dropped),
/// so a long download or push stream never counts as an idle connection.
fn track(response: axum::response::Response, busy: connections::Busy) -> axum::response::Response {
    response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _busy = &busy;
            frame
        }))
    })
}

/// Whether `err` (or one of its causes) is a request body that stopped
/// arriving for `server.body_read_timeout`.
pub fn is_body_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// HTTP/1 and HTTP/2 settings of one connection.
fn protocol_builder(limits: &Limits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
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
