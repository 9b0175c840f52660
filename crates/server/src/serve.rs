//! Serving a router on a listener with hyper-util, so that hyper's own limits
//! sit above ours (a 40 KiB header gets our `431` JSON, not hyper's empty
//! one), slow clients time out while sending their headers, and upgrades
//! (WebSocket) reach the proxy.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt as _;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    /// How long a graceful stop waits for requests in flight.
    pub shutdown_grace: Duration,
}

/// hyper's header count limit, far above what 32 KiB can hold in practice.
const MAX_HEADERS: usize = 2048;
/// hyper's read buffer: room for a request head well past our 32 KiB limit.
const MAX_BUF: usize = 256 * 1024;

/// Accepts connections until `stop` turns true, then lets open ones finish
/// their current request (for up to `limits.shutdown_grace`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(MAX_HEADERS)
            .max_buf_size(MAX_BUF);
        let conn = builder.serve_connection_with_upgrades(
            TokioIo::new(stream),
            TowerToHyperService::new(service),
        );
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    // Closing the listener first makes new connections fail at once (a load
    // balancer retries them elsewhere) instead of waiting in the backlog.
    drop(listener);
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
}
