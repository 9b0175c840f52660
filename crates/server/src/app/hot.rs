//! The public listener's hot routes, matched before the router: a waiting
//! crowd's position polls, and the gate (every request the router would
//! hand to its fallback: the admitted crowd's pages). See
//! [`serve::HotRoutes`] for why.
//!
//! The answers are the router's: the same handlers ([`api::enter::poll`],
//! [`gate::gate`]), after the same header-size guard as the router's
//! middleware, with the same `Strict-Transport-Security` header when HTTPS
//! sets one. Anything else (another method, another spelling of the poll's
//! path, a path under one of the router's prefixes, the access log on: it
//! logs from the router's middleware) goes to the router.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse as _, Response};

use crate::error::ApiError;
use crate::serve::{HotAnswer, HotRoutes};
use crate::state::AppState;
use crate::{api, gate};

/// The path of the poll's hot route (`GET` only).
const POSITION: &str = "/api/queue/position";

/// Every route of the public router lies under one of these; a path under
/// none of them can only be the router's fallback, the gate. Declining a
/// path under them is always safe (the router then answers it), so the
/// prefixes are wider than the routes.
const ROUTER_PREFIXES: [&str; 3] = ["/api/", "/queue/", "/_anteroom/"];

pub struct PublicHot {
    state: Arc<AppState>,
    hsts: Option<HeaderValue>,
}

impl PublicHot {
    /// The hot routes of the public listener of `state`; `None` while the
    /// access log is on (every request is then logged by the router).
    pub fn new(state: Arc<AppState>, hsts: Option<HeaderValue>) -> Option<Self> {
        (!state.server.access_log).then_some(Self { state, hsts })
    }
}

impl HotRoutes for PublicHot {
    fn takes(&self, method: &Method, uri: &Uri) -> bool {
        method == Method::GET && uri.path() == POSITION
    }

    fn takes_whole(&self, method: &Method, uri: &Uri) -> bool {
        // HEAD is left to the router, which strips the body from the answer
        // (the gate's `429` has one); CONNECT too, the router refuses it.
        let path = uri.path();
        method != Method::HEAD
            && method != Method::CONNECT
            && !ROUTER_PREFIXES.iter().any(|p| path.starts_with(p))
    }

    fn answer_whole(&self, req: axum::extract::Request) -> HotAnswer {
        let state = self.state.clone();
        let hsts = self.hsts.clone();
        Box::pin(async move {
            let mut response = if gate::headers_too_large(req.headers()) {
                ApiError::HeadersTooLarge.into_response()
            } else {
                gate::gate(State(state), req).await
            };
            // As the router's route does: a body of known size is announced
            // in the head, so the answer is written as the router writes it
            // (not chunked) even when the connection closes right after it.
            if !response.headers().contains_key(header::CONTENT_LENGTH)
                && let Some(size) = axum::body::HttpBody::size_hint(response.body()).exact()
            {
                response
                    .headers_mut()
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            }
            with_hsts(response, hsts)
        })
    }

    fn answer(&self, head: Parts, peer: SocketAddr) -> HotAnswer {
        let state = self.state.clone();
        let hsts = self.hsts.clone();
        Box::pin(async move {
            let response = if gate::headers_too_large(&head.headers) {
                ApiError::HeadersTooLarge.into_response()
            } else {
                match api::enter::poll(&state, &head, peer.ip()).await {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            };
            with_hsts(response, hsts)
        })
    }
}

/// The answer with the `Strict-Transport-Security` header the router's HSTS
/// layer would set, when HTTPS sets one.
fn with_hsts(mut response: Response, hsts: Option<HeaderValue>) -> Response {
    if let Some(v) = hsts {
        response
            .headers_mut()
            .insert(header::STRICT_TRANSPORT_SECURITY, v);
    }
    response
}
