//! The public listener's hot routes, matched before the router: a waiting
//! crowd's position polls, its joins, redeems and releases (`POST`), and
//! the gate (every request the router would hand to its fallback: the
//! admitted crowd's pages). See [`serve::HotRoutes`] for why.
//!
//! The answers are the router's: the same handlers ([`api::enter::poll`],
//! [`api::enter::enter_from`], [`api::redeem::redeem_json`],
//! [`api::redeem::release`], [`gate::answer`], which the router's fallback
//! [`gate::gate`] calls with the peer it reads), after the same header-size
//! guard as the router's
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
use crate::serve::{Answer, HotAnswer, HotRoutes, HotWholeAnswer};
use crate::state::AppState;
use crate::{api, gate};

/// The path of the poll's hot route (`GET` only).
const POSITION: &str = "/api/queue/position";

/// The queue calls taken whole (`POST` only, body and all), each to its
/// route's own handler: a crowd's joins and redeems, and the releases of
/// those leaving.
const ENTER: &str = "/api/queue/enter";
const REDEEM: &str = "/api/queue/redeem";
const RELEASE: &str = "/api/queue/release";

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
        Whole::of(method, uri.path()).is_some()
    }

    fn answer_whole(&self, req: axum::extract::Request, peer: SocketAddr) -> HotWholeAnswer {
        let state = self.state.clone();
        let hsts = self.hsts.clone();
        if gate::headers_too_large(req.headers()) {
            let response = ApiError::HeadersTooLarge.into_response();
            return Box::pin(async move { whole_response(response, hsts).into() });
        }
        // One box per route, each the size of its own handler's future: a
        // box of their union would be the largest one's size for every
        // join, redeem and release, and a box's contents are copied in
        // whole on every request.
        // A join and the gate are given the peer (attached to the request,
        // where the router puts it, it would cost three allocations); a
        // redeem and a release do not read it.
        match Whole::of(req.method(), req.uri().path()) {
            Some(Whole::Enter) => Box::pin(async move {
                let response = api::enter::enter_from(&state, req, peer.ip()).await;
                whole_response(response.into_response(), hsts).into()
            }),
            Some(Whole::Redeem) => Box::pin(async move {
                let response = api::redeem::redeem_json(State(state), req).await;
                whole_response(response.into_response(), hsts).into()
            }),
            Some(Whole::Release) => Box::pin(async move {
                let response = api::redeem::release(State(state), req).await;
                whole_response(response.into_response(), hsts).into()
            }),
            // Taken as the gate (what `takes_whole` said), or asked
            // directly: the gate answers what the router's fallback would.
            // What the gate does before its first wait is done here, so
            // each box holds only what waits: a page's holds the request
            // made ready for the origin, not the gate's whole answer (whose
            // future would keep the visitor's request in every layer).
            Some(Whole::Gate) | None => match gate::begin(&state, req, peer.ip()) {
                gate::Begun::Answered(response) => {
                    Box::pin(async move { whole_response(response, hsts).into() })
                }
                gate::Begun::Forward(forward) => {
                    Box::pin(async move { whole(forward.finish(&state).await, hsts) })
                }
                gate::Begun::Waits(waits) => {
                    Box::pin(async move { whole(waits.finish(&state).await, hsts) })
                }
            },
        }
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
            set_hsts(response, hsts)
        })
    }
}

/// A whole request's answer as the router's route gives it: a body of
/// known size is announced in the head, so the answer is written as the
/// router writes it (not chunked) even when the connection closes right
/// after it. (Passed fields carry their answer's length.)
fn whole(answer: Answer, hsts: Option<HeaderValue>) -> Answer {
    match answer.passed {
        Some(_) => with_hsts(answer, hsts),
        None => whole_response(answer.response, hsts).into(),
    }
}

/// [`whole`] for an answer without passed fields.
fn whole_response(mut response: Response, hsts: Option<HeaderValue>) -> Response {
    if !response.headers().contains_key(header::CONTENT_LENGTH)
        && let Some(size) = axum::body::HttpBody::size_hint(response.body()).exact()
    {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    set_hsts(response, hsts)
}

/// Who answers a request taken whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Whole {
    /// Every method but `HEAD` and `CONNECT` on a path outside the router's
    /// prefixes. `HEAD` is left to the router, which strips the body from
    /// the answer (the gate's `429` has one); `CONNECT` too, the router
    /// refuses it.
    Gate,
    Enter,
    Redeem,
    Release,
}

impl Whole {
    fn of(method: &Method, path: &str) -> Option<Self> {
        if method == Method::POST {
            match path {
                ENTER => return Some(Self::Enter),
                REDEEM => return Some(Self::Redeem),
                RELEASE => return Some(Self::Release),
                _ => {}
            }
        }
        (method != Method::HEAD
            && method != Method::CONNECT
            && !ROUTER_PREFIXES.iter().any(|p| path.starts_with(p)))
        .then_some(Self::Gate)
    }
}

/// The answer with the `Strict-Transport-Security` header the router's HSTS
/// layer would set, when HTTPS sets one: in place of the origin's, as the
/// layer's `insert` puts it.
fn with_hsts(answer: Answer, hsts: Option<HeaderValue>) -> Answer {
    match answer.passed {
        Some(ref passed) if hsts.is_some() && passed.has_hsts() => {
            set_hsts(answer.into_response(), hsts).into()
        }
        _ => Answer {
            response: set_hsts(answer.response, hsts),
            passed: answer.passed,
        },
    }
}

fn set_hsts(mut response: Response, hsts: Option<HeaderValue>) -> Response {
    if let Some(v) = hsts {
        response
            .headers_mut()
            .insert(header::STRICT_TRANSPORT_SECURITY, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;
    use crate::serve::PassedFields;

    /// A proxied answer whose fields were passed through, with its
    /// `Content-Length` among them, and the origin's own HSTS if `hsts`.
    fn passed(hsts: bool) -> Answer {
        let mut passed = PassedFields::new(2, 0);
        passed.push(b"Content-Length", b"2");
        if hsts {
            passed.push(b"Strict-Transport-Security", b"max-age=1");
        }
        Answer {
            response: Response::new(Body::from("ok")),
            passed: Some(passed),
        }
    }

    #[test]
    fn https_hsts_replaces_an_origins_own_passed_through_or_not() {
        let ours = HeaderValue::from_static("max-age=31536000");
        for origins_own in [false, true] {
            let response = with_hsts(passed(origins_own), Some(ours.clone())).into_response();
            let all: Vec<_> = response
                .headers()
                .get_all(header::STRICT_TRANSPORT_SECURITY)
                .iter()
                .collect();
            assert_eq!(all, [&ours], "the origin sent its own: {origins_own}");
        }
    }

    #[test]
    fn a_passed_through_answer_keeps_its_one_length() {
        let response = whole(passed(false), None).into_response();
        let lengths: Vec<_> = response
            .headers()
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .collect();
        assert_eq!(lengths, [&HeaderValue::from_static("2")]);
    }
}
