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
