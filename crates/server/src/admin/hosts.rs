//! Which names the admin listener answers to.
//!
//! A page on any site can reach a loopback or internal admin listener
//! through the operator's browser by DNS rebinding: the page's own name,
//! pointed at `127.0.0.1` once the page has loaded, makes the browser treat
//! the listener as the page's origin. The page could then read `/metrics`
//! and `/openapi.json`, and send wrong tokens until the operator's own
//! address is locked out. Every such request names the attacker's domain in
//! `Host`, so a plain-HTTP admin listener answers only to addresses, to
//! `localhost` (which browsers resolve themselves, never by DNS), and to
//! the names listed in `server.admin_hosts`. Over TLS the check is not
//! needed: the browser refuses the certificate for the attacker's name
//! before it sends anything.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Middleware of the whole plain-HTTP admin listener, before the token is
/// read (a rebound page's wrong tokens must not count against the
/// operator's address): `421 unknown_host` for a name it does not answer
/// to. A request with no name at all (HTTP/1.0) is not a browser's, and
/// goes on.
pub async fn check(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let named = match req.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => match req.headers().get(header::HOST) {
            Some(value) => Some(value.to_str().unwrap_or("\u{fffd}")),
            None => None,
        },
    };
    match named {
        Some(host) if !state.server.admin_hosts.allows(host) => {
            ApiError::UnknownHost.into_response()
        }
        _ => next.run(req).await,
    }
}
