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
/// their current request (for up to `limits.shutdown_grace`). With `tls`,
/// each connection completes its handshake first (bounded by the header
/// read timeout).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<crate::tls::Tls>,
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
        let https = tls.is_some();
        let service = app
            .clone()
            .map_request(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                if https {
                    req.extensions_mut()
                        .insert(crate::proxy::ClientScheme::Https);
                }
                req
            });
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(MAX_HEADERS)
            .max_buf_size(MAX_BUF);
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(service);
            let result = match tls {
                None => {
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
                Some(tls) => {
                    let Some(stream) = tls.accept(stream, limits.header_read_timeout).await else {
                        return;
                    };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
            };
            if let Err(e) = result {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    // Closing the listener first makes new connections fail at once (a load
    // balancer retries them elsewhere) instead of waiting in the backlog.
    drop(listener);
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
}
