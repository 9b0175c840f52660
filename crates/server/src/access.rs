//! The optional access log (`server.access_log`): one structured line per
//! public request, under the `anteroom::access` target so it can be routed
//! or filtered apart from the server's own log (`RUST_LOG=anteroom::access=info`).
//!
//! Only the path is logged, never the query or any header: the browser
//! redeem path carries an admission token in its query, and cookies carry
//! passes. No token or secret value may reach a log line.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

pub async fn log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    tracing::info!(
        target: "anteroom::access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request"
    );
    response
}
