//! The gate read as an attacker would, through the real server: spellings
//! of a protected path that frameworks route to its handler, a pass for one
//! event on another event's path, and the contract's small holes (405 JSON,
//! the queued 429, redeeming while paused or closed). The origin answers
//! every path, so anything that gets through is seen.

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event, FAST_BATCH};
use crate::support::origin::Origin;
use crate::support::server;
use crate::support::visitor::Visitor;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::server::TestServer;
use http::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `tickets` protects `/tickets`, `vip` the longer `/tickets/vip`; every
/// other path goes to the same echoing origin.
async fn start() -> (TestServer, Arc<Origin>) {
    let origin = Origin::options().echo_headers().start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = ConfigBuilder::new()
        .server_line(&format!("default_origin = \"http://{}\"", origin.addr))
        .embedded(dir.path())
        .no_limits()
        .event(server::tickets(origin.addr))
        .event(
            Event::at("vip", origin.addr)
                .paths(&["/tickets/vip"])
                .admission(FAST_BATCH),
        )
        .toml();
    let server = TestServer::start_with(&toml, origin.clone(), dir).await;
    (server, origin)
}

/// One request written byte for byte (hyper's client would rewrite an
/// absolute-form or `*` target): the status and the body.
async fn raw(addr: SocketAddr, method: &str, target: &str, headers: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: shop.example\r\nAccept: application/json\r\n{headers}Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("answer within 30 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// The JSON `error` code of an answer whose body may be chunked.
fn error_code(body: &str) -> Option<String> {
    let start = body.find('{')?;
    let end = body.rfind('}')?;
    let json: Value = serde_json::from_str(&body[start..=end]).ok()?;
    json["error"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn protected_spellings_never_reach_the_origin() {
    let (s, origin) = start().await;
    for target in [
        "/tickets",
        "/tickets/2026",
        "/Tickets",
        "/tickets.json",
        "/tickets.html",
        "/TICKETS.JSON",
        "/tickets.",
        "/tickets;jsessionid=x",
        "/tickets;jsessionid=x/row",
        "/;jsessionid=x/tickets",
        "/%3B/tickets.",
        "/tickets%2ejson",
        "/tickets%2Ejson",
        "/tickets%3Bjsessionid=x",
        "/tickets%3bx",
        "/%74ickets.json",
        "//tickets",
        "/a/../tickets.json",
        "/a/%2e%2e/tickets",
        "/./tickets",
        "/tickets%252ejson",
        "/%2574ickets",
        "/tickets%2fx",
        "/a\\..\\tickets",
        "/tickets%00.json",
        "/tickets%09",
        "/tickets%0A",
        "/tickets%7F",
        "/tickets%20",
        "/%20tickets/2026",
        "/t%C4%B0ckets",
        "/tic%E2%84%AAets.json",
        "/t\u{130}ckets",
        "/public/..;/tickets",
        "/public/..%3B/tickets",
        "/tickets;x=1/vip.json",
        "/tickets/vip.json",
        "http://shop.example/tickets",
        "http://other.example/tickets.json?x=1",
    ] {
        let (status, body) = raw(s.public, "GET", target, "").await;
        let code = error_code(&body);
        assert!(
            (status == 429 && code.as_deref() == Some("queued"))
                || (status == 400 && code.as_deref() == Some("bad_request")),
            "{target} answered {status} {body}"
        );
    }
    let (status, body) = raw(s.public, "POST", "/tickets.json", "Content-Length: 0\r\n").await;
    assert_eq!(
        (status, error_code(&body).as_deref()),
        (429, Some("queued"))
    );
    // Not a path, not forwarded.
    let (status, _) = raw(s.public, "OPTIONS", "*", "").await;
    assert_eq!(status, 204);
    let (status, body) = raw(s.public, "CONNECT", "shop.example:443", "").await;
    assert_eq!(
        (status, error_code(&body).as_deref()),
        (405, Some("method_not_allowed"))
    );
    assert_eq!(origin.connections(), 0, "a protected spelling got through");
    // The origin is there for what is not protected.
    for target in ["/ticketsale", "/ticket", "/tickets-old/x", "/tickets/.."] {
        let (status, body) = raw(s.public, "GET", target, "").await;
        assert_eq!(status, 200, "{target}: {body}");
    }
    s.stop().await;
}

const ENTER: &str = "/api/queue/enter?eventId=tickets";
const POSITION: &str = "/api/queue/position?eventId=tickets";
const REDEEM: &str = "/api/queue/redeem?eventId=tickets";

/// Enters `tickets` and polls until admitted; returns the token.
async fn admitted(s: &TestServer, v: &mut Visitor) -> String {
    let (status, _) = v.json(Method::POST, &s.url(ENTER), None).await;
    assert_eq!(status, StatusCode::OK);
    let p = server::poll_until(v, &s.url(POSITION), "ADMITTED").await;
    p["token"].as_str().unwrap().to_owned()
}

async fn redeem(s: &TestServer, v: &mut Visitor, token: &str) -> (StatusCode, Value) {
    let body = serde_json::json!({ "token": token }).to_string();
    v.json(Method::POST, &s.url(REDEEM), Some(&body)).await
}

#[tokio::test]
async fn a_pass_for_one_event_does_not_open_another_events_suffixed_path() {
    let (s, _origin) = start().await;
    let mut v = Visitor::default();
    let token = admitted(&s, &mut v).await;
    let (status, body) = redeem(&s, &mut v, &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, seen) = v.json(Method::GET, &s.url("/tickets/row.json"), None).await;
    assert_eq!(status, StatusCode::OK, "the pass opens its own event");
    assert_eq!(seen["x-anteroom-event"], serde_json::json!(["tickets"]));
    for path in [
        "/tickets/vip.json",
        "/tickets/VIP.html",
        "/tickets/vip;jsessionid=1",
        "/tickets;x=1/vip",
    ] {
        let (status, body) = v.json(Method::GET, &s.url(path), None).await;
        assert_eq!(
            (status, body["error"].as_str(), body["eventId"].as_str()),
            (StatusCode::TOO_MANY_REQUESTS, Some("queued"), Some("vip")),
            "{path}: {body}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn the_gates_429_says_queued_and_where_to_join() {
    let (s, _origin) = start().await;
    let mut v = Visitor::default();
    let (status, headers, body) = v
        .call(
            Method::GET,
            &s.url("/tickets/a?b=c"),
            &[("accept", "application/json")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    let p: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(p["error"], "queued", "{p}");
    assert!(p["message"].is_string(), "{p}");
    assert_eq!(p["status"], "NONE");
    assert_eq!(p["eventId"], "tickets");
    assert_eq!(p["join"], "/api/queue/enter?eventId=tickets");
    assert_eq!(
        p["waitingRoom"],
        "/queue/tickets?return=%2Ftickets%2Fa%3Fb%3Dc"
    );
    for field in ["queueLength", "pollAfterMs", "timestamp", "rank", "token"] {
        assert!(p.get(field).is_some(), "{field} missing: {p}");
    }
    // The join link works as given.
    let (status, joined) = v
        .json(Method::POST, &s.url(p["join"].as_str().unwrap()), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{joined}");
    s.stop().await;
}

#[tokio::test]
async fn every_405_is_json_with_a_code() {
    let (s, _origin) = start().await;
    let public = [
        (Method::GET, "/api/queue/enter"),
        (Method::DELETE, "/api/queue/position"),
        (Method::PUT, "/api/queue/redeem"),
        (Method::GET, "/api/queue/release"),
        (Method::POST, "/queue/tickets"),
    ];
    for (method, path) in public {
        let (status, _, body) = server::send(method.clone(), &s.url(path), &[], None).await;
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")),
            "{method} {path}"
        );
    }
    let admin = [
        (Method::POST, "/healthz"),
        (Method::DELETE, "/metrics"),
        (Method::PATCH, "/admin/events"),
        (Method::GET, "/admin/events/tickets/pause"),
    ];
    for (method, path) in admin {
        let (status, _, body) = s
            .admin_call(method.clone(), path, Some(ADMIN_TOKEN), None)
            .await;
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")),
            "admin {method} {path}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn redeem_refuses_tokens_of_a_paused_or_closed_event() {
    let (s, _origin) = start().await;
    let mut v = Visitor::default();
    let token = admitted(&s, &mut v).await;
    s.pause("tickets", "pause").await;
    let (status, headers, body) = v
        .call(
            Method::POST,
            &s.url(REDEEM),
            &[("content-type", "application/json")],
            Some(&serde_json::json!({ "token": token }).to_string()),
        )
        .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("event_paused")),
        "{body}"
    );
    assert!(headers.contains_key("retry-after"));
    // The token was not spent: after the resume it opens the session.
    s.pause("tickets", "resume").await;
    let (status, body) = redeem(&s, &mut v, &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let mut late = Visitor::default();
    let token = admitted(&s, &mut late).await;
    s.pause("tickets", "close").await;
    let (status, body) = redeem(&s, &mut late, &token).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::GONE, Some("event_closed")),
        "{body}"
    );
    let url = format!("/api/queue/redeem?eventId=tickets&token={token}&return=/tickets");
    let (status, _, body) = late.call(Method::GET, &s.url(&url), &[], None).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(body.starts_with(b"{\"error\":\"event_closed\""));
    s.stop().await;
}
