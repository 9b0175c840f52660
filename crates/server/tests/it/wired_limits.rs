//! `[limits]` as wired into enter, position and the gate, over real sockets:
//! `429 rate_limited` with `Retry-After`, keyed by the believed client address.

use crate::support::visitor::Visitor;
use crate::support::wired::{CHROME, ENTER, POSITION, call, retry_after, start, with_xff};
use http::{Method, StatusCode};

/// Asserts a `429 rate_limited` answer with a `Retry-After` of at least 1 s.
fn limited(status: StatusCode, h: &http::HeaderMap, body: &serde_json::Value) {
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")),
        "{body}"
    );
    assert!(retry_after(h) >= 1);
}

#[tokio::test]
async fn per_ip_limits_answer_429_with_retry_after_on_enter_and_position() {
    // One call per second per address; governor's burst is the rate, so the
    // second call inside the same second is refused.
    let head = "[limits]\nper_ip_per_second = 1\nper_session_per_second = 0\ntrusted_proxies = [\"127.0.0.1/32\"]";
    let s = start(head, "").await;
    let a_headers = with_xff(CHROME, "198.51.100.1");
    let mut a = Visitor::default();
    let (status, _, _) = call(&s, &mut a, Method::POST, ENTER, &a_headers, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut b = Visitor::default();
    let (status, h, body) = call(&s, &mut b, Method::POST, ENTER, &a_headers, None).await;
    limited(status, &h, &body);

    // Position has its own budget: a visitor polling at the limit can still enter.
    // (The scheduler may already have admitted `a`: either answer is a 200.)
    let (status, _, p) = call(&s, &mut a, Method::GET, POSITION, &a_headers, None).await;
    assert_eq!(status, StatusCode::OK, "{p}");
    assert!(
        matches!(p["status"].as_str(), Some("WAITING" | "ADMITTED")),
        "{p}"
    );
    let (status, h, body) = call(&s, &mut a, Method::GET, POSITION, &a_headers, None).await;
    limited(status, &h, &body);

    // The limit is per client as a trusted proxy reports it, not per proxy.
    let mut c = Visitor::default();
    let c_headers = with_xff(CHROME, "198.51.100.2");
    let (status, _, body) = call(&s, &mut c, Method::POST, ENTER, &c_headers, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The gate's 429 for API clients reads the store like a poll: limited too.
    let mut api = Visitor::default();
    let gated = with_xff(&[("accept", "application/json")], "198.51.100.3");
    let (status, _, body) = call(&s, &mut api, Method::GET, "/tickets/x", &gated, None).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("NONE")),
        "{body}"
    );
    let (status, h, body) = call(&s, &mut api, Method::GET, "/tickets/x", &gated, None).await;
    limited(status, &h, &body);

    // A release reaches the store for whichever session it names, so it
    // counts against its address as an enter does.
    let (mut e, mut f) = (Visitor::default(), Visitor::default());
    for (v, from) in [(&mut e, "198.51.100.5"), (&mut f, "198.51.100.6")] {
        let (status, _, body) =
            call(&s, v, Method::POST, ENTER, &with_xff(CHROME, from), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let releasing = with_xff(CHROME, "198.51.100.4");
    let release = "/api/queue/release?eventId=tickets";
    let (status, _, _) = call(&s, &mut e, Method::POST, release, &releasing, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, h, body) = call(&s, &mut f, Method::POST, release, &releasing, None).await;
    limited(status, &h, &body);
    s.stop().await;
}

#[tokio::test]
async fn per_session_limits_answer_429_with_retry_after() {
    let head = "[limits]\nper_ip_per_second = 0\nentries_per_ip = 0\nper_session_per_second = 1";
    let s = start(head, "").await;
    let mut v = Visitor::default();
    let (status, _, _) = call(&s, &mut v, Method::POST, ENTER, CHROME, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, h, body) = call(&s, &mut v, Method::POST, ENTER, CHROME, None).await;
    limited(status, &h, &body);
    // Another session from the same address is not affected.
    let mut w = Visitor::default();
    let (status, _, _) = call(&s, &mut w, Method::POST, ENTER, CHROME, None).await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

/// An answer to a challenge is counted against the address alone (it
/// follows the call that asked for it within the second), but only a real
/// one: a made-up challenge and a number, or a CAPTCHA token where none is
/// asked, bought its way past the session limit.
#[tokio::test]
async fn only_a_real_answer_is_spared_the_session_limit() {
    let head = "[limits]\nper_ip_per_second = 0\nentries_per_ip = 0\nper_session_per_second = 1";
    let s = start(head, "").await;
    for junk in [
        serde_json::json!({"challenge": "made-up", "nonce": 1}),
        serde_json::json!({"captchaToken": "x"}),
    ] {
        let mut v = Visitor::default();
        let (status, _, _) = call(&s, &mut v, Method::POST, ENTER, CHROME, None).await;
        assert_eq!(status, StatusCode::OK);
        let (status, h, body) = call(&s, &mut v, Method::POST, ENTER, CHROME, Some(&junk)).await;
        limited(status, &h, &body);
    }
    s.stop().await;
}

/// A join sent over a connection from `from` (any loopback address: Linux
/// has the whole 127/8) with a browser's headers and no session: its status.
async fn enter_from(from: &str, s: &crate::support::server::TestServer) -> StatusCode {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = crate::support::raw::connect_from(from, s.public).await;
    let mut head = format!("POST {ENTER} HTTP/1.1\r\nhost: shop.example\r\n");
    for (name, value) in CHROME.iter().filter(|(n, _)| *n != "connection") {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("content-length: 0\r\nconnection: close\r\n\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    StatusCode::from_u16(text[9..12].parse().unwrap()).unwrap()
}

/// The per-address limit counts the address each join connected from,
/// both on the public listener's hot route (which hands the join its peer)
/// and through the router (the access log on: the router attaches it).
/// Every other test connects from 127.0.0.1, which is also what a join
/// without a known peer is read as, so a peer lost on the way would put
/// every caller under one budget: the third join below would be refused.
#[tokio::test]
async fn a_join_is_limited_by_the_address_it_connected_from() {
    for access_log in [false, true] {
        let origin = crate::support::origin::Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let toml = crate::support::config::ConfigBuilder::new()
            .server_line(&format!("access_log = {access_log}"))
            .embedded(dir.path())
            .limit("per_ip_per_second = 1")
            .limit("per_session_per_second = 0")
            .limit("entries_per_ip = 0")
            .event(
                crate::support::config::Event::at("tickets", origin.addr)
                    .admission(crate::support::config::HOURLY),
            )
            .toml();
        let s = crate::support::server::TestServer::start_with(&toml, origin, dir).await;
        assert_eq!(enter_from("127.0.0.2", &s).await, StatusCode::OK);
        assert_eq!(
            enter_from("127.0.0.2", &s).await,
            StatusCode::TOO_MANY_REQUESTS,
            "the second join of an address within its second (access log {access_log})"
        );
        assert_eq!(
            enter_from("127.0.0.3", &s).await,
            StatusCode::OK,
            "another address has a budget of its own (access log {access_log})"
        );
        s.stop().await;
    }
}
