//! The public listener's hot route (position polls answered before the
//! router) gives the router's answer: the same visitors, cookies and events
//! are asked both ways, on one state with a hand-moved clock, and every
//! status, header and JSON field must agree (except `pollAfterMs`, jittered
//! per answer, and the `Retry-After` it rounds). What the hot route does not
//! own goes back to the router untouched.

use std::net::SocketAddr;

use anteroom::HotRoutes;
use anteroom::app::hot::PublicHot;
use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, Method, Request, StatusCode, header};
use tower::ServiceExt as _;

use crate::support::admission::Harness;

const PEER: &str = "127.0.0.1:40000";

fn request(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

async fn through_router(h: &Harness, req: Request<Body>) -> Response {
    anteroom::public_router(h.state.clone())
        .oneshot(req)
        .await
        .unwrap()
}

async fn through_hot(hot: &PublicHot, req: Request<Body>) -> Option<Response> {
    if !hot.takes(req.method(), req.uri()) {
        return None;
    }
    let (head, _) = req.into_parts();
    let peer: SocketAddr = PEER.parse().unwrap();
    Some(hot.answer(head, peer).await)
}

/// Status, headers (without `Retry-After`'s value, and without
/// `Content-Length`: the router writes it into the head, the hot route
/// leaves it to hyper, which sends the same from the body's exact size) and
/// the JSON body without `pollAfterMs`.
async fn seen(r: Response) -> (StatusCode, Vec<(String, String)>, serde_json::Value) {
    let status = r.status();
    let headers = headers_of(&r, false);
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    if let Some(o) = json.as_object_mut() {
        o.remove("pollAfterMs");
    }
    (status, headers, json)
}

/// The answer's headers, sorted, with `Retry-After`'s value left out and
/// `Content-Length` only when `with_length`.
fn headers_of(r: &Response, with_length: bool) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = r
        .headers()
        .iter()
        .filter(|(k, _)| with_length || *k != header::CONTENT_LENGTH)
        .map(|(k, v)| {
            let v = if k == header::RETRY_AFTER {
                "[seconds]".to_owned()
            } else {
                v.to_str().unwrap().to_owned()
            };
            (k.as_str().to_owned(), v)
        })
        .collect();
    headers.sort();
    headers
}

/// The session cookie a router's enter sets, as a `Cookie` header.
async fn enter(h: &Harness) -> String {
    let r = through_router(h, request(Method::POST, "/api/queue/enter?eventId=e", &[])).await;
    assert_eq!(r.status(), StatusCode::OK);
    r.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ")
}

async fn same_answer(
    h: &Harness,
    hot: &PublicHot,
    uri: &str,
    headers: &[(&str, &str)],
) -> serde_json::Value {
    let routed = seen(through_router(h, request(Method::GET, uri, headers)).await).await;
    let direct = through_hot(hot, request(Method::GET, uri, headers))
        .await
        .unwrap_or_else(|| panic!("the hot route declined GET {uri}"));
    let direct = seen(direct).await;
    assert_eq!(direct, routed, "GET {uri} with {headers:?}");
    direct.2
}

#[tokio::test]
async fn a_hot_poll_is_answered_as_the_router_answers_it() {
    // Both ways ask the same sessions many times: no rate limits.
    let h = Harness::with_config("http://127.0.0.1:9", "max_active = 1", |c| c.no_limits()).await;
    let hot = PublicHot::new(h.state.clone(), None).unwrap();
    let first = enter(&h).await;
    let second = enter(&h).await;
    let url = "/api/queue/position?eventId=e";

    // Both waiting (nobody admitted yet), in French and in English.
    let w = same_answer(
        &h,
        &hot,
        url,
        &[("cookie", &second), ("accept-language", "fr")],
    )
    .await;
    assert_eq!(w["status"], "WAITING", "{w}");
    same_answer(&h, &hot, url, &[("cookie", &first)]).await;
    // The first is admitted: the same token and redeem link both ways.
    h.tick().await;
    let a = same_answer(
        &h,
        &hot,
        &format!("{url}&return=%2Fshop%2Fcart"),
        &[("cookie", &first)],
    )
    .await;
    assert_eq!(a["status"], "ADMITTED", "{a}");
    assert!(
        a["redirect"]
            .as_str()
            .unwrap()
            .contains("return=%2Fshop%2Fcart"),
        "{a}"
    );
    // No session, an unknown event, a garbage cookie, the only event implied.
    let n = same_answer(&h, &hot, url, &[]).await;
    assert_eq!(n["status"], "NONE", "{n}");
    let u = same_answer(
        &h,
        &hot,
        "/api/queue/position?eventId=nope",
        &[("cookie", &first)],
    )
    .await;
    assert_eq!(u["error"], "unknown_event", "{u}");
    same_answer(&h, &hot, url, &[("cookie", "__Host-anteroom_sid=garbage")]).await;
    same_answer(&h, &hot, "/api/queue/position", &[("cookie", &second)]).await;
    // A head past the 32 KiB guard is refused alike.
    let big = "x".repeat(40 * 1024);
    let t = same_answer(&h, &hot, url, &[("cookie", &second), ("x-padding", &big)]).await;
    assert_eq!(t["error"], "headers_too_large", "{t}");
}

#[tokio::test]
async fn the_hot_route_sets_hsts_and_leaves_everything_else_to_the_router() {
    let h = Harness::new("max_active = 1").await;
    let hsts = HeaderValue::from_static("max-age=31536000");
    let hot = PublicHot::new(h.state.clone(), Some(hsts.clone())).unwrap();
    let url = "/api/queue/position?eventId=e";
    let r = through_hot(&hot, request(Method::GET, url, &[]))
        .await
        .unwrap();
    assert_eq!(
        r.headers().get(header::STRICT_TRANSPORT_SECURITY),
        Some(&hsts)
    );

    // Other methods (HEAD is the router's GET without a body, POST a 405),
    // other spellings of the path and other routes are not the hot route's.
    for (method, uri) in [
        (Method::HEAD, url),
        (Method::POST, url),
        (Method::GET, "/api/queue/position/?eventId=e"),
        (Method::GET, "/api/queue//position?eventId=e"),
        (Method::GET, "/api/queue/stream?eventId=e"),
        (Method::GET, "/queue/e"),
        (Method::GET, "/shop/"),
    ] {
        assert!(
            through_hot(&hot, request(method.clone(), uri, &[]))
                .await
                .is_none(),
            "{method} {uri} was taken by the hot route"
        );
    }
}

#[tokio::test]
async fn with_the_access_log_on_every_request_goes_through_the_router() {
    // The access log is the router's middleware: no request may skip it.
    let h = Harness::with_config("http://127.0.0.1:9", "max_active = 1", |c| {
        c.server_line("access_log = true")
    })
    .await;
    assert!(PublicHot::new(h.state.clone(), None).is_none());
}

#[tokio::test]
async fn a_rate_limited_hot_poll_is_refused_as_the_router_refuses_it() {
    let h = Harness::new("max_active = 1").await;
    let hot = PublicHot::new(h.state.clone(), None).unwrap();
    let v = enter(&h).await;
    let url = "/api/queue/position?eventId=e";
    let mut limited = false;
    for _ in 0..1_000 {
        let r = through_hot(&hot, request(Method::GET, url, &[("cookie", &v)]))
            .await
            .unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = true;
            break;
        }
    }
    assert!(limited, "a thousand polls in a row were never limited");
    let r = same_answer(&h, &hot, url, &[("cookie", &v)]).await;
    assert_eq!(r["error"], "rate_limited", "{r}");
}

async fn through_hot_whole(hot: &PublicHot, req: Request<Body>) -> Option<Response> {
    if !hot.takes_whole(req.method(), req.uri()) {
        return None;
    }
    // No `ConnectInfo`: the router reads such a request as loopback's.
    Some(
        hot.answer_whole(req, "127.0.0.1:1".parse().unwrap())
            .await
            .into_response(),
    )
}

/// Status, headers (`Content-Length` included: the gate's hot route writes
/// it as the router does; `Retry-After`'s value left out) and the body as
/// text, with the JSON's `pollAfterMs` left out when the body is JSON.
async fn seen_raw(r: Response) -> (StatusCode, Vec<(String, String)>, String) {
    let status = r.status();
    let headers = headers_of(&r, true);
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(mut json) => {
            if let Some(o) = json.as_object_mut() {
                o.remove("pollAfterMs");
            }
            json.to_string()
        }
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    };
    (status, headers, body)
}

#[tokio::test]
async fn the_gate_is_taken_whole_only_outside_the_routers_paths() {
    let h = Harness::new("max_active = 1").await;
    let hot = PublicHot::new(h.state.clone(), None).unwrap();
    for (method, uri) in [
        (Method::GET, "/shop/"),
        (Method::POST, "/shop/cart"),
        (Method::PUT, "/"),
        (Method::DELETE, "/elsewhere?x=1"),
        // The router's paths are case-sensitive: this one is its fallback's.
        (Method::GET, "/API/queue/position?eventId=e"),
    ] {
        assert!(
            hot.takes_whole(&method, &uri.parse().unwrap()),
            "{method} {uri} was left to the router"
        );
    }
    // The queue calls with a body are taken whole too, each to its own
    // route's handler (see the test below), by exact method and path.
    for uri in [
        "/api/queue/enter?eventId=e",
        "/api/queue/redeem?eventId=e",
        "/api/queue/release",
    ] {
        assert!(
            hot.takes_whole(&Method::POST, &uri.parse().unwrap()),
            "POST {uri}"
        );
    }
    for (method, uri) in [
        (Method::HEAD, "/shop/"),
        (Method::CONNECT, "/shop/"),
        (Method::GET, "/api/queue/enter?eventId=e"),
        (Method::PUT, "/api/queue/redeem?eventId=e"),
        (Method::POST, "/api/queue/enter/"),
        (Method::POST, "/api/queue/position?eventId=e"),
        (Method::GET, "/api/queue/stream?eventId=e"),
        (Method::GET, "/api/elsewhere"),
        (Method::GET, "/queue/e"),
        (Method::GET, "/queue/e/more"),
        (Method::GET, "/_anteroom/app.js"),
    ] {
        assert!(
            !hot.takes_whole(&method, &uri.parse().unwrap()),
            "{method} {uri} was taken by the gate's hot route"
        );
    }
}

/// A method, a target and the request's headers.
type GateCase<'a> = (Method, &'a str, Vec<(&'a str, &'a str)>);

#[tokio::test]
async fn a_gated_request_is_answered_as_the_router_answers_it() {
    let h = Harness::new("max_active = 1").await;
    let hsts = HeaderValue::from_static("max-age=31536000");
    let hot = PublicHot::new(h.state.clone(), Some(hsts.clone())).unwrap();
    let router = tls_router(&h, hsts);
    let v = enter(&h).await;
    let big = "x".repeat(40 * 1024);
    let cases: [GateCase; 6] = [
        // An API client without a pass: 429 with the queue's JSON.
        (
            Method::GET,
            "/shop/item?id=1",
            vec![("accept", "application/json")],
        ),
        (Method::POST, "/shop/cart", vec![("cookie", &v)]),
        // A browser navigation: 302 to the waiting page.
        (Method::GET, "/shop/", vec![("accept", "text/html")]),
        // A path that does not normalise: 400.
        (Method::GET, "/shop/%2e%2e/x", vec![]),
        // An unprotected path with no origin to send it to.
        (Method::GET, "/elsewhere", vec![]),
        (Method::GET, "/shop/", vec![("x-padding", &big)]),
    ];
    for (method, uri, headers) in cases {
        let routed = seen_raw(
            router
                .clone()
                .oneshot(request(method.clone(), uri, &headers))
                .await
                .unwrap(),
        )
        .await;
        let direct = through_hot_whole(&hot, request(method.clone(), uri, &headers))
            .await
            .unwrap_or_else(|| panic!("the gate's hot route declined {method} {uri}"));
        let direct = seen_raw(direct).await;
        assert_eq!(direct, routed, "{method} {uri}");
        assert!(
            direct
                .1
                .iter()
                .any(|(k, _)| k == "strict-transport-security"),
            "{method} {uri}: no HSTS"
        );
    }
}

/// The public router as the HTTPS listener builds it (the HSTS layer on).
fn tls_router(h: &Harness, hsts: HeaderValue) -> axum::Router {
    anteroom::tls::with_hsts(anteroom::public_router(h.state.clone()), Some(hsts))
}

/// A queue call's target, headers and body.
type QueueCase<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

#[tokio::test]
async fn a_queue_call_taken_whole_is_answered_as_the_router_answers_it() {
    // Both ways ask for the same visitor: no rate limits.
    let h = Harness::with_config("http://127.0.0.1:9", "max_active = 1", |c| c.no_limits()).await;
    let hot = PublicHot::new(h.state.clone(), None).unwrap();
    let v = enter(&h).await;
    let too_big = format!("{{\"token\":\"{}\"}}", "t".repeat(200 * 1024));
    let json = [("content-type", "application/json"), ("cookie", v.as_str())];
    let cases: [QueueCase; 7] = [
        // The same visitor again: insert-if-absent, the same answer.
        (
            "/api/queue/enter?eventId=e",
            vec![("cookie", &v)],
            String::new(),
        ),
        (
            "/api/queue/enter?eventId=nope",
            vec![("cookie", &v)],
            String::new(),
        ),
        (
            "/api/queue/enter?eventId=e",
            json.to_vec(),
            "{not json".to_owned(),
        ),
        (
            "/api/queue/redeem?eventId=e",
            json.to_vec(),
            r#"{"token":"forged"}"#.to_owned(),
        ),
        ("/api/queue/redeem?eventId=e", json.to_vec(), String::new()),
        ("/api/queue/redeem?eventId=e", json.to_vec(), too_big),
        // Without a session (a release changes state: asked twice with
        // one, the second answer would differ by design).
        ("/api/queue/release?eventId=e", vec![], String::new()),
    ];
    for (uri, headers, body) in cases {
        let ask = || {
            let mut b = Request::builder().method(Method::POST).uri(uri);
            for (k, v) in &headers {
                b = b.header(*k, *v);
            }
            b.body(Body::from(body.clone())).unwrap()
        };
        let routed = seen_raw(
            anteroom::public_router(h.state.clone())
                .oneshot(ask())
                .await
                .unwrap(),
        )
        .await;
        let direct = through_hot_whole(&hot, ask())
            .await
            .unwrap_or_else(|| panic!("POST {uri} was left to the router"));
        let direct = seen_raw(direct).await;
        assert_eq!(direct, routed, "POST {uri} {}", &body[..body.len().min(40)]);
    }
}
