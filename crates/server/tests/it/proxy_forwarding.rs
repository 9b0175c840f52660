//! The proxy against a real origin over loopback sockets: headers, bodies
//! streamed both ways, keep-alive, and origin failures; and what the origin
//! is told through the real server (forwarding headers, cookies).

use crate::support::config::{ConfigBuilder, Event, FAST_BATCH};
use crate::support::origin::Origin;
use crate::support::server;
use crate::support::visitor::Visitor;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::support::proxy::{client, start_gate};
use anteroom::proxy::Proxy;
use axum::body::Body;
use bytes::Bytes;
use futures::SinkExt;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;

async fn json_of(response: http::Response<hyper::body::Incoming>) -> serde_json::Value {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn headers_are_forwarded_and_forged_anteroom_headers_dropped() {
    let origin = Origin::options().echo_headers().start().await;
    let extra = vec![
        (
            HeaderName::from_static("x-anteroom-event"),
            HeaderValue::from_static("drop"),
        ),
        (
            HeaderName::from_static("x-anteroom-session"),
            HeaderValue::from_static("real"),
        ),
    ];
    let gate = start_gate(Proxy::new(), origin.uri(), extra).await;
    let req = Request::get(format!("http://{gate}/headers?q=1&r=%2F"))
        .header("host", "shop.example")
        .header("x-anteroom-session", "forged")
        .header("x-anteroom-pass-ok", "yes")
        .header("x-forwarded-for", "198.51.100.9")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("accept", "text/html")
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = json_of(response).await;
    assert_eq!(seen["uri"], "/headers?q=1&r=%2F");
    assert_eq!(seen["x-anteroom-session"], serde_json::json!(["real"]));
    assert_eq!(seen["x-anteroom-event"], serde_json::json!(["drop"]));
    // The peer is no trusted proxy: its own address replaces the chain.
    assert_eq!(seen["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(seen["x-forwarded-proto"], serde_json::json!(["http"]));
    assert_eq!(
        seen["x-forwarded-host"],
        serde_json::json!(["shop.example"])
    );
    assert_eq!(seen["host"], serde_json::json!([origin.addr.to_string()]));
    assert_eq!(seen["accept"], serde_json::json!(["text/html"]));
    assert!(seen.get("x-anteroom-pass-ok").is_none());
    assert!(seen.get("x-hop").is_none());
}

#[tokio::test]
async fn large_bodies_stream_both_ways() {
    let origin = Origin::options().echo_headers().start().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;

    let upload: Vec<u8> = (0..16 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let req = Request::post(format!("http://{gate}/echo"))
        .body(Body::from(upload.clone()))
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let echoed = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        echoed == upload,
        "echo differs ({} bytes back)",
        echoed.len()
    );

    let n = 32 * 1024 * 1024 + 7;
    let req = Request::get(format!("http://{gate}/big?n={n}"))
        .body(Body::empty())
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    let mut received = 0;
    while let Some(frame) = body.frame().await {
        received += frame.unwrap().into_data().map_or(0, |d| d.len());
    }
    assert_eq!(received, n);
}

/// Each chunk must come back before the next is sent: a proxy that buffered
/// either body would deadlock here.
#[tokio::test]
async fn request_and_response_bodies_stream_concurrently() {
    let origin = Origin::options().echo_headers().start().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(1);
    let req = Request::post(format!("http://{gate}/echo"))
        .body(Body::from_stream(rx))
        .unwrap();
    tx.send(Ok(Bytes::from_static(b"chunk-0"))).await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), client().request(req))
        .await
        .expect("response head while the request body is still open")
        .unwrap();
    let mut body = response.into_body();
    for i in 0..5 {
        let mut got = Vec::new();
        let want = format!("chunk-{i}");
        while got.len() < want.len() {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .expect("echo of the chunk before the next one is sent")
                .unwrap()
                .unwrap();
            got.extend_from_slice(&frame.into_data().unwrap());
        }
        assert_eq!(got, want.as_bytes());
        if i < 4 {
            tx.send(Ok(Bytes::from(format!("chunk-{}", i + 1))))
                .await
                .unwrap();
        }
    }
    drop(tx);
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn origin_connections_are_kept_alive_and_reused() {
    let origin = Origin::options().echo_headers().start().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;
    for _ in 0..5 {
        let req = Request::get(format!("http://{gate}/headers"))
            .body(Body::empty())
            .unwrap();
        let response = client().request(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(origin.connections(), 1);
}

#[tokio::test]
async fn origin_down_is_502_json() {
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let gate = start_gate(
        Proxy::new(),
        format!("http://{closed}").parse().unwrap(),
        vec![],
    )
    .await;
    let req = Request::get(format!("http://{gate}/x"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = json_of(response).await;
    assert_eq!(body["error"], "bad_gateway");
    assert!(body["message"].is_string());
}

#[tokio::test]
async fn slow_origin_is_504_json() {
    let origin = Origin::options().echo_headers().start().await;
    let proxy = Proxy::with_timeouts(Duration::from_secs(5), Duration::from_millis(200));
    let gate = start_gate(proxy, origin.uri(), vec![]).await;
    let req = Request::get(format!("http://{gate}/slow"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let body = json_of(response).await;
    assert_eq!(body["error"], "gateway_timeout");
}

#[tokio::test]
async fn https_origin_is_refused_as_502() {
    let gate = start_gate(Proxy::new(), "https://127.0.0.1:1".parse().unwrap(), vec![]).await;
    let req = Request::get(format!("http://{gate}/"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
}

/// The real server in front of the echoing origin: `tickets` protects
/// `/tickets`, everything else goes to the same origin; `trusted` lists
/// `limits.trusted_proxies`.
async fn start_server(trusted: &str) -> (server::TestServer, Arc<Origin>) {
    let origin = Origin::options().echo_headers().start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .server_line(&format!("default_origin = \"http://{}\"", origin.addr))
        .embedded(dir.path())
        .no_rate_limits()
        .limit(&format!("trusted_proxies = [{trusted}]"))
        .event(Event::at("tickets", origin.addr).admission(FAST_BATCH))
        .toml();
    let s = server::TestServer::start_with(&toml, origin.clone(), dir).await;
    (s, origin)
}

/// Headers a client sends to be believed about who it is, how it came and
/// which path it wants, in the spellings stacks read the same.
const FORGED: &[(&str, &str)] = &[
    ("x-original-url", "/tickets"),
    ("x-rewrite-url", "/tickets"),
    ("x_original_url", "/tickets"),
    ("x-forwarded-for", "6.6.6.6"),
    ("x_forwarded_for", "6.6.6.6"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-prefix", "/tickets"),
    ("forwarded", "for=6.6.6.6;proto=https"),
    ("x-real-ip", "6.6.6.6"),
    ("x_real_ip", "6.6.6.6"),
    ("x-anteroom-event", "forged"),
    ("x_anteroom_session", "forged"),
];

/// What the origin saw for one request through the real server.
async fn seen_by_origin(
    s: &server::TestServer,
    v: &mut Visitor,
    path: &str,
    extra: &[(&str, &str)],
) -> serde_json::Value {
    let mut headers: Vec<(&str, &str)> = FORGED.to_vec();
    headers.extend_from_slice(extra);
    headers.push(("host", "shop.example"));
    headers.push(("accept", "application/json"));
    let (status, _, body) = v
        .call(http::Method::GET, &s.url(path), &headers, None)
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{path}: {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).unwrap()
}

/// Takes `v` through the queue of `tickets` to a redeemed pass.
async fn admit(s: &server::TestServer, v: &mut Visitor) {
    let enter = "/api/queue/enter?eventId=tickets";
    let (status, _) = v.json(http::Method::POST, &s.url(enter), None).await;
    assert_eq!(status, StatusCode::OK);
    let p = server::poll_until(v, &s.url("/api/queue/position?eventId=tickets"), "ADMITTED").await;
    let body = serde_json::json!({ "token": p["token"] }).to_string();
    let (status, _) = v
        .json(
            http::Method::POST,
            &s.url("/api/queue/redeem?eventId=tickets"),
            Some(&body),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[track_caller]
fn assert_rebuilt(seen: &serde_json::Value, xff: &str, proto: &str, host: &str) {
    assert_eq!(seen["x-forwarded-for"], serde_json::json!([xff]), "{seen}");
    assert_eq!(
        seen["x-forwarded-proto"],
        serde_json::json!([proto]),
        "{seen}"
    );
    assert_eq!(
        seen["x-forwarded-host"],
        serde_json::json!([host]),
        "{seen}"
    );
    let rebuilt = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"];
    for (name, forged) in FORGED.iter().filter(|(n, _)| !rebuilt.contains(n)) {
        // Only the gate's own X-Anteroom-* may be there, never the client's.
        let got = seen.get(*name).and_then(|v| v[0].as_str());
        let gates_own = name.starts_with("x-anteroom-") && got != Some(*forged);
        assert!(
            got.is_none() || gates_own,
            "{name} reached the origin: {seen}"
        );
    }
}

#[tokio::test]
async fn the_real_server_sends_one_rebuilt_set_of_forwarding_headers_and_none_of_its_cookies() {
    let (s, _origin) = start_server("").await;
    let mut v = Visitor::default();
    let cookies = [(
        "cookie",
        "theme=dark; anteroom_sid=forged; __Host-anteroom_pass=p; __Host-anteroom_sid=s",
    )];
    let seen = seen_by_origin(&s, &mut v, "/shop", &cookies).await;
    assert_rebuilt(&seen, "127.0.0.1", "http", "shop.example");
    assert_eq!(seen["cookie"], serde_json::json!(["theme=dark"]));
    assert!(seen.get("x-anteroom-event").is_none(), "{seen}");

    // An admitted visitor: the gate's own X-Anteroom-* and the visitor's
    // other cookies reach the origin, its Anteroom cookies do not.
    admit(&s, &mut v).await;
    v.cookies.push(("lang".into(), "fr".into()));
    let session = v.cookie("__Host-anteroom_sid").unwrap().to_owned();
    let seen = seen_by_origin(&s, &mut v, "/tickets/row/1", &[]).await;
    assert_rebuilt(&seen, "127.0.0.1", "http", "shop.example");
    assert_eq!(seen["x-anteroom-event"], serde_json::json!(["tickets"]));
    assert_eq!(seen["x-anteroom-session"], serde_json::json!([session]));
    assert_eq!(seen["cookie"], serde_json::json!(["lang=fr"]), "{seen}");
    // With only Anteroom's cookies (a planted look-alike among them), the
    // origin gets no `Cookie` field at all.
    v.cookies.retain(|(k, _)| k != "lang");
    v.cookies.push(("Anteroom_SID".into(), "planted".into()));
    let seen = seen_by_origin(&s, &mut v, "/tickets/row/2", &[]).await;
    assert!(seen.get("cookie").is_none(), "{seen}");
    assert_eq!(seen["x-anteroom-session"], serde_json::json!([session]));
    s.stop().await;
}

/// A `GET` sent over a connection from `from` (any loopback address: Linux
/// has the whole 127/8), its answer's status and body.
async fn get_from(
    from: &str,
    s: &server::TestServer,
    path: &str,
    cookie: &str,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = crate::support::raw::connect_from(from, s.public).await;
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: shop.example\r\naccept: application/json\r\n\
         cookie: {cookie}\r\nconnection: close\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8(answer).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let body = body.trim();
    // A `connection: close` answer may be chunked.
    let json = body
        .find('{')
        .map_or("null", |i| &body[i..=body.rfind('}').unwrap()]);
    (status, serde_json::from_str(json).unwrap())
}

#[tokio::test]
async fn the_origin_is_told_the_address_the_visitor_connected_from() {
    // Every other test connects from 127.0.0.1, which is also what a
    // request without a known peer is read as: this one connects from
    // another loopback address, so a peer lost on the way would show.
    let (s, _origin) = start_server("").await;
    let (status, seen) = get_from("127.0.0.2", &s, "/shop", "theme=dark").await;
    assert_eq!(status, 200, "{seen}");
    assert_rebuilt(&seen, "127.0.0.2", "http", "shop.example");

    let mut v = Visitor::default();
    admit(&s, &mut v).await;
    let cookie: Vec<String> = v
        .cookies
        .iter()
        .map(|(k, val)| format!("{k}={val}"))
        .collect();
    let (status, seen) = get_from("127.0.0.3", &s, "/tickets/row/1", &cookie.join("; ")).await;
    assert_eq!(status, 200, "{seen}");
    assert_rebuilt(&seen, "127.0.0.3", "http", "shop.example");
    assert_eq!(seen["x-anteroom-event"], serde_json::json!(["tickets"]));
    s.stop().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_client_its_scheme_and_host_are_kept() {
    let (s, _origin) = start_server(r#""127.0.0.1/32""#).await;
    let mut v = Visitor::default();
    let proxy_said = [
        ("x-forwarded-for", "6.6.6.6, 203.0.113.5"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "shop.example"),
    ];
    let mut headers: Vec<(&str, &str)> = proxy_said.to_vec();
    headers.push(("forwarded", "for=6.6.6.6"));
    headers.push(("x-real-ip", "6.6.6.6"));
    headers.push(("x-original-url", "/tickets"));
    headers.push(("host", "internal:8080"));
    let (status, _, body) = v
        .call(http::Method::GET, &s.url("/shop"), &headers, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        seen["x-forwarded-for"],
        serde_json::json!(["203.0.113.5"]),
        "{seen}"
    );
    assert_eq!(
        seen["x-forwarded-proto"],
        serde_json::json!(["https"]),
        "{seen}"
    );
    assert_eq!(
        seen["x-forwarded-host"],
        serde_json::json!(["shop.example"]),
        "{seen}"
    );
    for name in ["forwarded", "x-real-ip", "x-original-url"] {
        assert!(
            seen.get(name).is_none(),
            "{name} reached the origin: {seen}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn an_origin_with_a_path_gets_it_in_front_of_every_request() {
    let origin = Origin::options().echo_headers().start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .server_line(&format!(
            "default_origin = \"http://{}/base/\"",
            origin.addr
        ))
        .embedded(dir.path())
        .no_rate_limits()
        .event(Event::at("tickets", origin.addr).admission(FAST_BATCH))
        .toml();
    let s = server::TestServer::start_with(&toml, origin.clone(), dir).await;
    let mut v = Visitor::default();
    // A plain GET (the door and the lean origin client) and a HEAD and a
    // POST with a body (hyper's client), each with its query kept.
    let seen = seen_by_origin(&s, &mut v, "/shop/a%20b?c=d&e", &[]).await;
    assert_eq!(seen["uri"], "/base/shop/a%20b?c=d&e", "{seen}");
    let seen = seen_by_origin(&s, &mut v, "/", &[]).await;
    assert_eq!(seen["uri"], "/base/", "{seen}");
    let (status, _, body) = v
        .call(
            http::Method::POST,
            &s.url("/shop/form?x=1"),
            &[("accept", "application/json")],
            Some("a=1"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["uri"], "/base/shop/form?x=1", "{seen}");
    s.stop().await;
}

/// An origin that answers every request head on each connection with
/// `answer`, byte for byte.
async fn raw_origin(answer: &'static [u8]) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut buf, mut seen) = (vec![0u8; 4096], Vec::new());
                while let Ok(n @ 1..) = conn.read(&mut buf).await {
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        if conn.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// One answer off `conn` as sent: its head's lines and its body (framed by
/// its `Content-Length`).
async fn answer_as_sent(conn: &mut tokio::net::TcpStream) -> (Vec<String>, Vec<u8>) {
    use tokio::io::AsyncReadExt as _;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed inside the head");
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(got[..end].to_vec()).unwrap();
    let lines: Vec<String> = head.split("\r\n").map(str::to_owned).collect();
    let length: usize = lines
        .iter()
        .find_map(|l| {
            let (name, value) = l.split_once(": ")?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = got[end + 4..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed inside the body");
        body.extend_from_slice(&buf[..n]);
    }
    (lines, body)
}

/// The door writes a plain proxied answer's fields as the origin wrote
/// them (the lean client passes them through): each once, its names'
/// spelling kept, repeated fields in their order, its length, the date
/// and none of the origin's hop-by-hop fields.
#[tokio::test]
async fn a_proxied_page_carries_the_origins_fields_as_written_once_each() {
    proxied_page_fields(false).await;
}

/// With the access log on, every request goes through the router and
/// hyper, which take the passed fields as one response: the same fields,
/// once each, in hyper's spelling.
#[tokio::test]
async fn through_the_router_a_proxied_page_carries_the_same_fields() {
    proxied_page_fields(true).await;
}

async fn proxied_page_fields(access_log: bool) {
    let answers = two_pages_from(
        b"HTTP/1.1 200 OK\r\nServer: raw\r\nX-Case: Kept As Sent\r\nSet-Cookie: a=1\r\n\
          Content-Length: 2\r\nSet-Cookie: b=2\r\nConnection: keep-alive\r\n\
          Keep-Alive: timeout=5\r\nAnteroom-Not-A-Command: x\r\n\r\nok",
        access_log,
    )
    .await;
    for (lines, body) in &answers {
        assert_eq!(lines[0], "HTTP/1.1 200 OK");
        let named = |name| named(lines, name);
        if !access_log {
            // Spelt as sent: passed through, not rebuilt from a map.
            assert!(
                lines.iter().any(|l| l == "X-Case: Kept As Sent"),
                "{lines:?}"
            );
        }
        assert_eq!(named("x-case"), ["Kept As Sent"]);
        assert_eq!(named("server"), ["raw"]);
        assert_eq!(named("set-cookie"), ["a=1", "b=2"]);
        assert_eq!(named("content-length"), ["2"]);
        assert_eq!(named("anteroom-not-a-command"), ["x"]);
        assert_eq!(named("date").len(), 1, "{lines:?}");
        assert!(named("connection").is_empty() && named("keep-alive").is_empty());
        assert_eq!(body, b"ok");
    }
}

/// Two `GET /page`s on one visitor connection to a server whose default
/// origin answers every request with `answer`, the access log on or off:
/// each answer's head lines and body. (The second answer comes off a kept
/// origin connection.)
async fn two_pages_from(answer: &'static [u8], access_log: bool) -> Vec<(Vec<String>, Vec<u8>)> {
    two_answers_to(
        b"GET /page HTTP/1.1\r\nHost: shop.example\r\n\r\n",
        answer,
        access_log,
    )
    .await
}

/// A server whose default origin answers every request with `answer`,
/// the access log on or off.
async fn behind_raw_origin(answer: &'static [u8], access_log: bool) -> server::TestServer {
    let raw = raw_origin(answer).await;
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .server_line(&format!("default_origin = \"http://{raw}\""))
        .server_line(&format!("access_log = {access_log}"))
        .embedded(dir.path())
        .no_rate_limits()
        .event(Event::at("tickets", origin.addr))
        .toml();
    server::TestServer::start_with(&toml, origin, dir).await
}

/// [`two_pages_from`] for any `request` (sent twice).
async fn two_answers_to(
    request: &[u8],
    answer: &'static [u8],
    access_log: bool,
) -> Vec<(Vec<String>, Vec<u8>)> {
    let s = behind_raw_origin(answer, access_log).await;
    let mut conn = tokio::net::TcpStream::connect(s.public).await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        use tokio::io::AsyncWriteExt as _;
        conn.write_all(request).await.unwrap();
        answers.push(answer_as_sent(&mut conn).await);
    }
    s.stop().await;
    answers
}

/// The values of the head's fields named `name` (in any case), in order.
fn named<'l>(lines: &'l [String], name: &str) -> Vec<&'l str> {
    lines[1..]
        .iter()
        .filter_map(|l| l.split_once(": "))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .collect()
}

/// An origin that gives its length as a list of one value said again
/// (`2, 2`, and the field twice) is passed on with the one length, once:
/// the visitor never sees two `Content-Length` fields, whichever way the
/// answer is written (the door, or the router and hyper with the access
/// log on).
#[tokio::test]
async fn an_origins_length_said_again_reaches_the_visitor_once() {
    for access_log in [false, true] {
        let answers = two_pages_from(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nServer: raw\r\n\
              Content-Length: 2\r\n\r\nok",
            access_log,
        )
        .await;
        for (lines, body) in &answers {
            assert_eq!(lines[0], "HTTP/1.1 200 OK");
            assert_eq!(
                named(lines, "content-length"),
                ["2"],
                "access log {access_log}: {lines:?}"
            );
            assert_eq!(body, b"ok");
        }
    }
}

/// The `Cookie` header of `v`'s cookies.
fn cookie_header(v: &Visitor) -> String {
    v.cookies
        .iter()
        .map(|(k, val)| format!("{k}={val}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `Cookie` header of a new visitor admitted to `tickets` on `s`.
async fn admitted_cookies(s: &server::TestServer) -> String {
    let mut v = Visitor::default();
    admit(s, &mut v).await;
    cookie_header(&v)
}

/// Sends `head` and `body` on a new connection to `s` and reads the answer
/// to the end (the server closes a connection whose body broke).
async fn raw_exchange(s: &server::TestServer, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(s.public).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut got))
        .await
        .expect("an answer, then the close")
        .unwrap();
    String::from_utf8_lossy(&got).into_owned()
}

/// A body sent with a transfer coding other than one `chunked` (`gzip,
/// chunked`, `chunked, chunked`) is refused with `501 not_implemented` (RFC 9112, 6.1) before
/// the origin is asked. It was forwarded with the gate's own chunking only,
/// so the origin read the still-coded bytes as the plain body.
#[tokio::test]
async fn a_body_in_a_transfer_coding_the_gate_cannot_pass_on_is_refused() {
    let (s, origin) = start_server("").await;
    let cookies = admitted_cookies(&s).await;
    for coding in [
        "gzip, chunked",
        "x-custom, chunked",
        "deflate,chunked",
        // Chunked twice: one layer taken off, the other read by the origin
        // as the body.
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ] {
        let head = format!(
            "POST /tickets/coded HTTP/1.1\r\nHost: shop.example\r\nCookie: {cookies}\r\n\
             Transfer-Encoding: {coding}\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_exchange(&s, &head, b"2\r\nhi\r\n0\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 501 "), "{coding}: {answer}");
        assert!(answer.contains("\"error\":\"not_implemented\""), "{answer}");
    }
    let seen = origin.requests.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|(uri, _, _)| uri.contains("/tickets/coded")),
        "the origin saw {seen:?}"
    );
    // Plain chunking still goes through, an empty list element beside it
    // too (no coding).
    for coding in ["chunked", ", chunked"] {
        let head = format!(
            "POST /tickets/coded HTTP/1.1\r\nHost: shop.example\r\nCookie: {cookies}\r\n\
             Transfer-Encoding: {coding}\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_exchange(&s, &head, b"2\r\nhi\r\n0\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{coding}: {answer}");
    }
}

/// A visitor's malformed chunked body (a bad size line, a size past u64)
/// is the visitor's failure: `400 bad_request`, and never a sample of the
/// origin failing. It was a `502` counted as the origin's error, so one
/// admitted visitor could push the error rate adaptive admission steers by
/// far past `max_error_rate` and slow admission for everyone.
#[tokio::test]
async fn a_malformed_request_body_is_the_visitors_400_not_the_origins_failure() {
    let (s, _origin) = start_server("").await;
    let mut v = Visitor::default();
    admit(&s, &mut v).await;
    let cookies = cookie_header(&v);
    let bodies: [&[u8]; 2] = [b"1\nx\n0\n\n", b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n"];
    // The queue API reading such a body says the same (it said 413).
    for path in ["/tickets/buy", "/shop", "/api/queue/enter?eventId=tickets"] {
        for body in bodies {
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: shop.example\r\nCookie: {cookies}\r\n\
                 Transfer-Encoding: chunked\r\n\r\n"
            );
            let answer = raw_exchange(&s, &head, body).await;
            assert!(
                answer.starts_with("HTTP/1.1 400 "),
                "{path} {body:?}: {answer}"
            );
            assert!(answer.contains("\"error\":\"bad_request\""), "{answer}");
        }
    }
    // The admitted visitor's pages still come, and the gate counts no
    // origin failure among its samples.
    let (status, _, _) = v
        .call(http::Method::GET, &s.url("/tickets/page"), &[], None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = s
        .admin_get(
            "/admin/events/tickets",
            Some(crate::support::config::ADMIN_TOKEN),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let ev: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(ev["stats"]["origin_error_rate"], 0.0, "{ev}");
    s.stop().await;
}

/// An origin (or another app behind the default origin) cannot set or
/// clear Anteroom's own cookies in any of their forms: a visitor's session
/// fixed, or their pass wiped, from outside the waiting room. A cookie
/// without a name counts by its value's name: a browser sends it back as
/// its bare value (`=anteroom_sid=x` comes back as `anteroom_sid=x`). Its other
/// cookies reach the visitor, whichever client fetched the answer (the
/// lean one for a `GET`, hyper's pool for a `POST`) and whoever writes it.
#[tokio::test]
async fn an_origin_cannot_set_anterooms_own_cookies() {
    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\
        Set-Cookie: anteroom_pass=forged; Path=/\r\n\
        Set-Cookie: shop=1; Path=/\r\n\
        set-cookie: __Host-Anteroom_SID=fixed; Path=/; Secure\r\n\
        Set-Cookie:  __Secure-anteroom_pass = x\r\n\
        Set-Cookie: =anteroom_sid=0123456789abcdef0123456789abcdef; Path=/\r\n\
        Set-Cookie:  = __Host-anteroom_sid=y\r\n\
        Set-Cookie: anteroom_pass; Path=/\r\n\
        Set-Cookie: cart=2\r\n\r\nok";
    for access_log in [false, true] {
        for request in [
            &b"GET /page HTTP/1.1\r\nHost: shop.example\r\n\r\n"[..],
            b"POST /page HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 2\r\n\r\nhi",
        ] {
            for (lines, body) in two_answers_to(request, ANSWER, access_log).await {
                assert_eq!(
                    named(&lines, "set-cookie"),
                    ["shop=1; Path=/", "cart=2"],
                    "access log {access_log}, {}: {lines:?}",
                    String::from_utf8_lossy(request)
                );
                assert_eq!(body, b"ok");
            }
        }
    }
}

/// An origin's `204` and `304` reach the visitor without a length, as
/// hyper writes them (a `204` must carry none; a `304`'s would be read as
/// the length of the page it stands for), whoever writes the answer; the
/// next answer on the connection follows right after the head.
#[tokio::test]
async fn bodiless_answers_carry_no_length() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    for answer in [
        &b"HTTP/1.1 204 No Content\r\nServer: raw\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n",
    ] {
        let answer: &'static [u8] = answer;
        for access_log in [false, true] {
            let s = behind_raw_origin(answer, access_log).await;
            let mut conn = tokio::net::TcpStream::connect(s.public).await.unwrap();
            conn.write_all(
                b"GET /page HTTP/1.1\r\nHost: shop.example\r\n\r\n"
                    .repeat(2)
                    .as_slice(),
            )
            .await
            .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while got.windows(4).filter(|w| w == b"\r\n\r\n").count() < 2 {
                let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
                    .await
                    .expect("two answers")
                    .unwrap();
                assert!(n > 0, "closed after {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
            let status = &String::from_utf8_lossy(&answer[9..12]).into_owned();
            assert_eq!(
                text.matches(&format!("http/1.1 {status}")).count(),
                2,
                "access log {access_log}: {text}"
            );
            assert!(
                !text.contains("content-length") && !text.contains("transfer-encoding"),
                "access log {access_log}: {text}"
            );
            s.stop().await;
        }
    }
}

/// A renewed pass's cookie starts with the visitor's session id, which the
/// gate takes as who they are: the answer it rides on is made private to
/// the visitor, or a shared cache that stored the origin's publicly
/// cacheable page with it would hand that admission to everyone it serves.
#[tokio::test]
async fn an_answer_carrying_a_renewed_pass_is_private_to_the_visitor() {
    let raw = raw_origin(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\
          Cache-Control: public, max-age=600, s-maxage=3600\r\n\r\nok",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .embedded(dir.path())
        .no_rate_limits()
        .event(
            Event::at("tickets", raw)
                .admission(FAST_BATCH)
                .line("pass_ttl = \"2s\""),
        )
        .toml();
    let s = server::TestServer::start_with(&toml, Origin::start().await, dir).await;
    let mut v = Visitor::default();
    admit(&s, &mut v).await;
    // Until the pass is past half its life, the origin's answer goes on as
    // it came; the answer that renews it is private.
    let renewed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, headers, _) = v
                .call(http::Method::GET, &s.url("/tickets/page"), &[], None)
                .await;
            assert_eq!(status, StatusCode::OK);
            if headers.get("set-cookie").is_some() {
                return headers;
            }
            assert_eq!(
                headers["cache-control"],
                "public, max-age=600, s-maxage=3600"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a renewal within 10 s");
    assert!(
        renewed["set-cookie"]
            .to_str()
            .unwrap()
            .contains("anteroom_pass="),
        "{renewed:?}"
    );
    assert_eq!(renewed.get_all("cache-control").iter().count(), 1);
    assert_eq!(renewed["cache-control"], "private, max-age=600");
    s.stop().await;
}

/// The pass cookie holds the passes of every event the visitor is active
/// in, so it lives as long as the longest session any event allows. It
/// took the `session_ttl` of the event redeemed last: a shorter one dropped
/// another event's pass while its session went on, and that event's
/// waiting room then told the visitor they had access and sent them back,
/// round and round.
#[tokio::test]
async fn the_pass_cookie_lives_as_long_as_the_longest_session() {
    let origin = Origin::options().echo_headers().start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .embedded(dir.path())
        .no_rate_limits()
        .event(
            Event::at("tickets", origin.addr)
                .admission(FAST_BATCH)
                .line("session_ttl = \"10m\""),
        )
        .event(
            Event::at("merch", origin.addr)
                .paths(&["/merch"])
                .line("session_ttl = \"2h\""),
        )
        .toml();
    let s = server::TestServer::start_with(&toml, origin, dir).await;
    let mut v = Visitor::default();
    admit(&s, &mut v).await;
    let pass = v
        .set_cookies
        .iter()
        .rev()
        .find(|c| c.contains("anteroom_pass="))
        .expect("the redeem set the pass cookie");
    assert!(pass.contains("Max-Age=7200"), "{pass}");
    s.stop().await;
}
