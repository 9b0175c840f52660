//! The public listener's hot route, matched before the router: a waiting
//! crowd's position polls. See [`serve::HotRoutes`] for why.
//!
//! The answer is the router's: the same handler ([`api::enter::poll`]),
//! after the same header-size guard as the router's middleware, with the
//! same `Strict-Transport-Security` header when HTTPS sets one. Anything
//! else (another method, another spelling of the path, the access log on:
//! it logs from the router's middleware) goes to the router.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::IntoResponse as _;

use crate::error::ApiError;
use crate::serve::{HotAnswer, HotRoutes};
use crate::state::AppState;
use crate::{api, gate};

/// The path of the one hot route (`GET` only).
const POSITION: &str = "/api/queue/position";

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

    fn answer(&self, head: Parts, peer: SocketAddr) -> HotAnswer {
        let state = self.state.clone();
        let hsts = self.hsts.clone();
        Box::pin(async move {
            let mut response = if gate::headers_too_large(&head.headers) {
                ApiError::HeadersTooLarge.into_response()
            } else {
                match api::enter::poll(&state, &head, peer.ip()).await {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            };
            if let Some(v) = hsts {
                response
                    .headers_mut()
                    .insert(header::STRICT_TRANSPORT_SECURITY, v);
            }
            response
        })
    }
}
