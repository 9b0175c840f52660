//! The queue API (public listener): enter, position, redeem, release, and the
//! waiting page routes. Handlers are thin: they resolve the event and the
//! visitor, call the store, and answer through [`QueuePosition`] or
//! [`ApiError`].

pub mod enter;
pub mod page;
pub mod redeem;
pub mod stream;

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderValue, Uri, header};
use axum::response::Response;
use axum::routing::{get, post};
use percent_encoding::percent_decode_str;

use anteroom_store::MemberState;

use crate::error::ApiError;
use crate::position::Answer;
use crate::queue::Queue;
use crate::state::{AppState, EventRuntime};

pub use crate::position::{QueuePosition, Status};

/// One queue request for one event, resolved once: what the steps of enter,
/// the waiting page's join and the gate's queued answer share.
#[derive(Clone, Copy)]
pub struct Visit<'r> {
    pub state: &'r AppState,
    pub rt: &'r EventRuntime,
    pub headers: &'r HeaderMap,
    /// The caller's address (see [`client_ip`]).
    pub ip: IpAddr,
    pub answer: Answer<'r>,
}

impl<'r> Visit<'r> {
    pub fn new(
        state: &'r AppState,
        rt: &'r EventRuntime,
        parts: &'r Parts,
        peer: IpAddr,
        return_path: &'r str,
    ) -> Self {
        Self {
            state,
            rt,
            headers: &parts.headers,
            ip: crate::client_ip::client_ip(peer, &parts.headers, &state.server.trusted_proxies),
            answer: answer(&parts.headers, return_path),
        }
    }

    /// The request's store calls for the event.
    pub fn queue(&self) -> Queue<'r> {
        Queue::new(self.state, self.rt)
    }

    /// The QueuePosition of `member` in `member_state`, as this request
    /// wants it told.
    pub fn position(&self, member: &str, member_state: &MemberState) -> QueuePosition {
        QueuePosition::build(self.state, self.rt, member, member_state, self.answer)
    }
}

/// The public listener's API and page routes; the gate is the fallback.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/queue/enter", post(enter::enter))
        .route("/api/queue/position", get(enter::position))
        .route(
            "/api/queue/redeem",
            post(redeem::redeem_json).get(redeem::redeem_browser),
        )
        .route("/api/queue/release", post(redeem::release))
        .route("/api/queue/stream", get(stream::stream))
        .route("/queue/{event}", get(page::waiting_page))
        .route("/_anteroom/{*file}", get(page::asset))
}

/// The value of query parameter `name`, percent- and `+`-decoded.
pub fn query_param(uri: &Uri, name: &str) -> Option<String> {
    query_value(uri, name).map(Cow::into_owned)
}

/// [`query_param`], borrowed from the URI when it needs no decoding (an
/// event id always does not).
pub fn query_value<'u>(uri: &'u Uri, name: &str) -> Option<Cow<'u, str>> {
    // Every poll looks its event up here: the pairs are found as bytes
    // (`&` and `=` are ASCII, so every piece starts and ends on a character
    // boundary), where `str`'s character patterns cost a poll about 480
    // instructions.
    let mut rest = uri.query()?;
    loop {
        let end = memchr::memchr(b'&', rest.as_bytes()).unwrap_or(rest.len());
        let pair = &rest[..end];
        let (k, v) = match memchr::memchr(b'=', pair.as_bytes()) {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, ""),
        };
        if k == name {
            if memchr::memchr2(b'%', b'+', v.as_bytes()).is_none() {
                return Some(Cow::Borrowed(v));
            }
            return Some(Cow::Owned(
                percent_decode_str(&v.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned(),
            ));
        }
        if end == rest.len() {
            return None;
        }
        rest = &rest[end + 1..];
    }
}

/// The event a queue API call is about: `eventId`, or the only event.
pub fn resolve_event(state: &AppState, uri: &Uri) -> Result<Arc<EventRuntime>, ApiError> {
    match query_value(uri, "eventId") {
        // Any id that is not an event's is unknown, well-formed or not.
        Some(id) => state
            .events()
            .get_str(&id)
            .cloned()
            .ok_or(ApiError::UnknownEvent),
        None => state.events().only().cloned().ok_or_else(|| {
            ApiError::BadRequest("eventId is required when several events are configured".into())
        }),
    }
}

/// The caller's address for rate limits and risk: the TCP peer, or the
/// `X-Forwarded-For` hop that a trusted proxy (`limits.trusted_proxies`)
/// vouches for. Without a peer (a router driven in-process) it is loopback.
pub fn client_ip(state: &AppState, extensions: &Extensions, headers: &HeaderMap) -> IpAddr {
    crate::client_ip::client_ip(peer(extensions), headers, &state.server.trusted_proxies)
}

/// The TCP peer the router attached to a request (its `ConnectInfo`), or
/// loopback for a request without one (an in-process call). The hot routes
/// hand their handlers the peer instead: attaching it costs a request
/// three allocations.
pub fn peer(extensions: &Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |c| c.0.ip())
}

/// The request's `return` path, kept on this site ([`safe_return`]).
/// Borrowed from the URI when it needs no decoding, as a poll's usually
/// does: every poll reads it, and most have none (`/`).
pub fn return_path(uri: &Uri) -> Cow<'_, str> {
    match query_value(uri, "return") {
        Some(p) if is_safe_return(&p) => p,
        _ => Cow::Borrowed("/"),
    }
}

/// How a request wants its QueuePosition told: its `Accept-Language`, and
/// `return_path`.
pub fn answer<'r>(headers: &HeaderMap, return_path: &'r str) -> Answer<'r> {
    Answer {
        lang: lang(headers),
        return_path,
    }
}

/// Reads a request body of at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if crate::serve::is_body_timeout(&e) {
            ApiError::BodyTimeout
        } else if crate::serve::is_broken_body(&e) {
            ApiError::BadRequest("the request body was malformed or cut short".to_owned())
        } else {
            ApiError::BodyTooLarge
        }
    })
}

/// Parses an optional JSON body, which must be an object; an empty body is
/// `None`. (serde's derived structs also read an array of their fields in
/// order, which no documented body is: `["<token>"]` is refused like any
/// other malformed body.)
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<Option<T>, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Ok(None),
        Some(b'{') => {}
        Some(_) => {
            return Err(ApiError::BadRequest(
                "invalid JSON body: expected a JSON object".to_owned(),
            ));
        }
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

/// A `return` path that stays on this site: a relative path starting with a
/// single `/`, no scheme, no backslash, no control characters. Anything else
/// becomes `/`, so the redeem redirect can never be an open redirect.
pub fn safe_return(raw: Option<&str>) -> String {
    match raw {
        Some(p) if is_safe_return(p) => p.to_owned(),
        _ => "/".to_owned(),
    }
}

/// A path on this site: absolute, not scheme-relative, no backslash (which
/// browsers read as a slash), no control character, at most 2 KiB.
fn is_safe_return(p: &str) -> bool {
    p.starts_with('/')
        && !p.starts_with("//")
        && !p.contains('\\')
        && !p.chars().any(char::is_control)
        && p.len() <= 2048
}

/// Adds a `Set-Cookie` header when there is one.
pub fn add_cookie(headers: &mut HeaderMap, cookie: Option<HeaderValue>) {
    if let Some(c) = cookie {
        headers.append(header::SET_COOKIE, c);
    }
}

/// The `Accept-Language` header, for display strings.
pub fn lang(headers: &HeaderMap) -> anteroom_core::eta::Lang {
    let value = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    anteroom_core::eta::Lang::from_accept_language(value)
}

/// Responses built by hand never fail to build; this keeps the type honest.
pub fn empty(status: axum::http::StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_is_an_object_or_nothing() {
        #[derive(serde::Deserialize, Debug)]
        struct Redeem {
            #[allow(dead_code)]
            token: String,
        }
        assert!(parse_json::<Redeem>(b" \n").unwrap().is_none());
        assert!(
            parse_json::<Redeem>(br#" {"token":"t"}"#)
                .unwrap()
                .is_some()
        );
        for refused in [&br#"["t"]"#[..], b"\"t\"", b"null", b"1"] {
            let e = parse_json::<Redeem>(refused).unwrap_err();
            assert!(matches!(e, ApiError::BadRequest(_)), "{refused:?}: {e:?}");
        }
    }

    #[test]
    fn return_paths_stay_on_site() {
        let check =
            |raw: Option<&str>, expected: &str| assert_eq!(safe_return(raw), expected, "{raw:?}");
        check(Some("/shop?x=1"), "/shop?x=1");
        check(Some("//evil.example/"), "/");
        check(Some("https://evil.example/"), "/");
        check(Some("/\\evil.example"), "/");
        check(Some("/a\nb"), "/");
        check(None, "/");
    }

    #[test]
    fn a_return_path_is_borrowed_when_plain_and_safe_or_else_the_root() {
        let path =
            |q: &str| return_path(&format!("/p?eventId=e{q}").parse::<Uri>().unwrap()).into_owned();
        let uri: Uri = "/p?eventId=e&return=/shop/cart".parse().unwrap();
        assert!(matches!(return_path(&uri), Cow::Borrowed("/shop/cart")));
        assert_eq!(path(""), "/");
        assert_eq!(path("&return=%2Fshop%3Fa%3D1"), "/shop?a=1");
        assert_eq!(path("&return=//evil.example"), "/");
        assert_eq!(path("&return=%2F%5Cevil.example"), "/");
        assert_eq!(path("&return=https://evil.example"), "/");
    }

    #[test]
    fn query_params_are_decoded() {
        let uri: Uri = "/x?eventId=drop&return=%2Fshop%3Fa%3D1&t=a+b"
            .parse()
            .unwrap();
        assert_eq!(query_param(&uri, "eventId").as_deref(), Some("drop"));
        assert_eq!(query_param(&uri, "return").as_deref(), Some("/shop?a=1"));
        assert_eq!(query_param(&uri, "t").as_deref(), Some("a b"));
        assert_eq!(query_param(&uri, "missing"), None);
    }

    proptest::proptest! {
        /// The byte scan reads a query as splitting it on `&` and the first
        /// `=` does.
        #[test]
        fn the_query_scan_reads_as_splitting_does(
            query in "[a-c=&%+2F]{0,16}",
            name in "[a-c]{1,2}",
        ) {
            let uri: Uri = format!("/x?{query}").parse().unwrap();
            let split = query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (k == name).then(|| {
                    percent_decode_str(&v.replace('+', " "))
                        .decode_utf8_lossy()
                        .into_owned()
                })
            });
            proptest::prop_assert_eq!(query_param(&uri, &name), split);
        }
    }
}
