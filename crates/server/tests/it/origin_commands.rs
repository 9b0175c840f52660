//! Origin commands through the real binary: an origin that answers
//! `Anteroom-Command: release` ends the visitor's session at once — the
//! pass it held is refused on that node and on every other node within the
//! contract's 2 s, the slot is free (the admin stats' `active` drops), the
//! visitor never sees the header and gets the pass cookie cleared (keeping
//! the passes of other events). An unknown command changes nothing, reaches
//! nobody and is counted.
//!
//! The pass lives far longer than the contract (`pass_ttl` 60 s), so only
//! the release, never plain expiry, can make these tests pass.

use crate::support::config::{ConfigBuilder, Event};
use crate::support::process;
use crate::support::visitor::Visitor;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process::Node;
use anteroom_store::testing::RedisServer;
use axum::http::{HeaderMap, HeaderValue};
use http::{Method, StatusCode};

const EVENT: &str = "tickets";
const CONTRACT: Duration = Duration::from_secs(2);

/// The node config without its store: the caller adds it.
fn config(origin: &str, nodes: u64) -> ConfigBuilder {
    ConfigBuilder::new()
        .process()
        .gateway_nodes(nodes)
        .drain_journal()
        .no_limits()
        .event(
            Event::new(EVENT, origin)
                .max_active(10)
                .line("pass_ttl = \"60s\"")
                .line("session_ttl = \"10m\"")
                .continuous(6000)
                .challenge_off(),
        )
}

/// The origin: `/tickets/done` answers with `Anteroom-Command: release`
/// (the end of a checkout), `/tickets/odd` with commands the gate does not
/// know, `/free/done` (unprotected) with a release; anything else plainly.
async fn start_origin() -> SocketAddr {
    async fn answer(uri: http::Uri) -> (HeaderMap, &'static str) {
        let mut headers = HeaderMap::new();
        let command = match uri.path() {
            "/tickets/done" | "/free/done" => Some("release"),
            "/tickets/odd" => Some("frobnicate, Later"),
            _ => None,
        };
        if let Some(c) = command {
            headers.insert("anteroom-command", HeaderValue::from_static(c));
        }
        (headers, "origin")
    }
    let app = axum::Router::new().fallback(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn embedded_node(origin: SocketAddr) -> Node {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    Node::start(
        &config(&format!("http://{origin}"), 1)
            .embedded(&dir.path().join("data"))
            .toml(),
        dir,
    )
    .await
}

/// A visitor with an active session on `node`.
async fn admitted(node: &Node) -> Visitor {
    let mut v = Visitor::default();
    assert_eq!(v.enter(node, EVENT).await.0, StatusCode::OK);
    let mut seen = Vec::new();
    v.until_active(node, EVENT, Duration::from_secs(30), &mut seen)
        .await;
    v
}

fn jar(v: &Visitor) -> String {
    v.cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A JSON client's `GET` with exactly this cookie header.
async fn get(node: &Node, path: &str, cookie: &str) -> (StatusCode, HeaderMap) {
    let headers = [
        ("accept".to_owned(), "application/json".to_owned()),
        ("cookie".to_owned(), cookie.to_owned()),
    ];
    let (status, headers, _) = process::send(Method::GET, &node.url(path), &headers, None)
        .await
        .unwrap();
    (status, headers)
}

async fn active(node: &Node) -> u64 {
    let (status, body) = node
        .admin(Method::GET, &format!("/admin/events/{EVENT}"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["stats"]["active"].as_u64().unwrap()
}

/// The sum of `anteroom_origin_commands_total` series with `label`.
async fn commands_counted(node: &Node, label: &str) -> f64 {
    let (_, _, body) = process::send(Method::GET, &node.admin_url("/metrics"), &[], None)
        .await
        .unwrap();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("anteroom_origin_commands_total{") && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Replays `cookie` on `node` until it is sent to the waiting room
/// (`429 queued`); returns how long after `since` that was, failing past
/// the contract. Then checks it stays refused.
async fn refused_within_contract(node: &Node, cookie: &str, since: Instant) -> Duration {
    let refused_at = loop {
        let (status, _) = get(node, "/tickets/page", cookie).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            break since.elapsed();
        }
        assert_eq!(status, StatusCode::OK, "neither forwarded nor queued");
        assert!(
            since.elapsed() < CONTRACT,
            "the released pass still opened the gate {:?} after the release",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for _ in 0..3 {
        let (status, _) = get(node, "/tickets/page", cookie).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "refused, then let in again"
        );
    }
    refused_at
}

#[tokio::test(flavor = "multi_thread")]
async fn an_origin_release_ends_the_session_frees_the_slot_and_stays_with_the_gate() {
    let origin = start_origin().await;
    let node = embedded_node(origin).await;
    let v = admitted(&node).await;
    let cookie = jar(&v);
    assert_eq!(get(&node, "/tickets/page", &cookie).await.0, StatusCode::OK);
    crate::support::wait_for(
        "the session counted active",
        Duration::from_secs(10),
        || async { active(&node).await == 1 },
    )
    .await;

    let released_before = commands_counted(&node, "command=\"release\"").await;
    let (status, headers) = get(&node, "/tickets/done", &cookie).await;
    let answered = Instant::now();
    assert_eq!(status, StatusCode::OK, "the origin's answer goes on");
    assert!(
        headers.get("anteroom-command").is_none(),
        "the visitor saw the origin's command: {headers:?}"
    );
    let cleared = headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|c| c.starts_with("anteroom_pass=;") || c.starts_with("anteroom_pass=; "));
    assert!(cleared, "the pass cookie was not cleared: {headers:?}");

    let took = refused_within_contract(&node, &cookie, answered).await;
    eprintln!("released pass refused on the node {took:?} after the origin's answer");
    crate::support::wait_for("the slot freed (active 0)", CONTRACT, || async {
        active(&node).await == 0
    })
    .await;
    assert_eq!(
        commands_counted(&node, "outcome=\"applied\"").await - released_before,
        1.0,
        "one release applied"
    );

    // The visitor can queue again and is admitted into the freed slot.
    let mut again = v.clone();
    again.cookies.retain(|(k, _)| k != "anteroom_pass");
    let mut seen = Vec::new();
    again
        .until_active(&node, EVENT, Duration::from_secs(30), &mut seen)
        .await;
    assert_eq!(
        get(&node, "/tickets/page", &jar(&again)).await.0,
        StatusCode::OK
    );
}

/// The cookie that clears a released event's pass keeps the visitor's pass
/// of another event: the gate reads the passes once, before the request
/// goes on to the origin, and the release is made from that reading.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_keeps_the_pass_of_another_event() {
    release_keeps_the_other_pass(None).await;
}

/// As above with a cookie of the origin's beside Anteroom's: the gate then
/// keeps the passes' text from a field it leaves in the request, where
/// without one the field leaves the request at the gate.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_keeps_the_pass_of_another_event_beside_the_origins_cookies() {
    release_keeps_the_other_pass(Some(("theme", "dark"))).await;
}

async fn release_keeps_the_other_pass(origins_cookie: Option<(&str, &str)>) {
    const OTHER: &str = "merch";
    let origin = start_origin().await;
    let origin = format!("http://{origin}");
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let toml = config(&origin, 1)
        .event(
            Event::new(OTHER, &origin)
                .max_active(10)
                .line("pass_ttl = \"60s\"")
                .line("session_ttl = \"10m\"")
                .continuous(6000)
                .challenge_off(),
        )
        .embedded(&dir.path().join("data"))
        .toml();
    let node = Node::start(&toml, dir).await;
    let mut v = admitted(&node).await;
    let mut seen = Vec::new();
    assert_eq!(v.enter(&node, OTHER).await.0, StatusCode::OK);
    v.until_active(&node, OTHER, Duration::from_secs(30), &mut seen)
        .await;
    if let Some((k, val)) = origins_cookie {
        v.cookies.insert(0, (k.to_owned(), val.to_owned()));
    }
    let cookie = jar(&v);
    assert_eq!(get(&node, "/tickets/page", &cookie).await.0, StatusCode::OK);
    assert_eq!(get(&node, "/merch/page", &cookie).await.0, StatusCode::OK);

    let (status, headers) = get(&node, "/tickets/done", &cookie).await;
    assert_eq!(status, StatusCode::OK);
    let pass = headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("anteroom_pass="))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no pass cookie in the release's answer: {headers:?}"));
    assert!(!pass.is_empty(), "the other event's pass was dropped");
    v.cookies.retain(|(k, _)| k != "anteroom_pass");
    v.cookies
        .push(("anteroom_pass".to_owned(), pass.to_owned()));
    let cookie = jar(&v);
    assert_eq!(
        get(&node, "/merch/page", &cookie).await.0,
        StatusCode::OK,
        "the other event's pass no longer opens its pages"
    );
    assert_eq!(
        get(&node, "/tickets/page", &cookie).await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "the released event's pass still opens its pages"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_origin_commands_are_dropped_counted_and_change_nothing() {
    let origin = start_origin().await;
    let node = embedded_node(origin).await;
    let v = admitted(&node).await;
    let cookie = jar(&v);
    let unknown_before = commands_counted(&node, "command=\"unknown\"").await;

    let (status, headers) = get(&node, "/tickets/odd", &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers.get("anteroom-command").is_none(),
        "an unknown command reached the visitor: {headers:?}"
    );
    let counted = commands_counted(&node, "command=\"unknown\"").await - unknown_before;
    assert_eq!(counted, 2.0, "frobnicate and Later, one each");
    // The session goes on: the pass still opens the gate, the slot is held.
    assert_eq!(get(&node, "/tickets/page", &cookie).await.0, StatusCode::OK);
    assert_eq!(active(&node).await, 1);

    // On an unprotected path there is no session to end: the header is
    // still removed, and the release is counted as without a session.
    let (status, headers) = get(&node, "/free/done", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("anteroom-command").is_none(), "{headers:?}");
    assert_eq!(commands_counted(&node, "outcome=\"no_session\"").await, 1.0);
    assert_eq!(get(&node, "/tickets/page", &cookie).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_origin_release_on_one_node_stops_the_pass_on_the_other_within_two_seconds() {
    let origin = start_origin().await;
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let config = config(&format!("http://{origin}"), 2)
        .redis(&[redis.url()])
        .store_timeout("1s")
        .toml();
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let a = Node::start(&config, dir.clone()).await;
    let b = Node::start(&config, dir).await;
    let v = admitted(&a).await;
    let cookie = jar(&v);
    assert_eq!(get(&b, "/tickets/page", &cookie).await.0, StatusCode::OK);

    let (status, headers) = get(&a, "/tickets/done", &cookie).await;
    let answered = Instant::now();
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("anteroom-command").is_none(), "{headers:?}");
    let on_b = refused_within_contract(&b, &cookie, answered).await;
    let on_a = refused_within_contract(&a, &cookie, answered).await;
    eprintln!("released pass refused on the other node after {on_b:?}, on its own after {on_a:?}");
    crate::support::wait_for("the slot freed (active 0)", CONTRACT, || async {
        active(&b).await == 0
    })
    .await;
}
