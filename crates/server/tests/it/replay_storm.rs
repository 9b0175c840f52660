//! Token replay storms: 10,000 concurrent redemptions of one admission token,
//! spread over two gateway nodes sharing Redis, give exactly one `200` and
//! `409 token_used` for all the rest; 10,000 concurrent uses of one
//! proof-of-work answer's nonce, spread over two store connections, are
//! accepted exactly once.
//!
//! The PoW storm goes to `QueueStore::consume_once` directly, the guard the
//! enter path uses for answers: the bot defence was still being wired into
//! enter when this was written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process;
use crate::support::process::Node;
use crate::support::visitor::Visitor;
use anteroom_store::testing::RedisServer;
use anteroom_store::{EventId, QueueStore};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const STORM: usize = 10_000;
/// Requests in flight at once (a 2-core machine; enough to overlap heavily).
const IN_FLIGHT: usize = 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_redemptions_of_one_token_over_two_nodes_succeed_once() {
    let started = Instant::now();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event("tickets", "http://127.0.0.1:9", 5).continuous(600))
        // A storm of calls that queue on one Redis must not drain the event (a
        // slow answer is not an outage; drain waits for `server.drain_after` of
        // silence). The store timeout is generous because on a 2-core box shared
        // with other test binaries a call can wait over a second behind the
        // storm, and a timed-out call answers 503 (retry), which is not what
        // this test is about: exactly one redemption.
        .store_timeout("5s")
        .toml();
    let a = Node::in_process(&config).await;
    let b = Node::in_process(&config).await;
    let mut v = Visitor::default();
    assert_eq!(v.enter(&a, "tickets").await.0, StatusCode::OK);
    let token = loop {
        let p = v.position(&a, "tickets").await;
        if p["status"] == "ADMITTED" {
            break p["token"].as_str().unwrap().to_owned();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{p}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cookie = v
        .cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let body = Bytes::from(serde_json::json!({ "token": token }).to_string());
    // Like any well-behaved client, it drops idle connections before the
    // server's `header_read_timeout` would close them under a request.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(IN_FLIGHT)
        .pool_idle_timeout(Duration::from_secs(5))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build_http();
    let urls = [&a, &b].map(|n| n.url("/api/queue/redeem?eventId=tickets"));
    let gate = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let storm_started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..STORM {
        let (client, gate, body, cookie) =
            (client.clone(), gate.clone(), body.clone(), cookie.clone());
        let url = urls[i % 2].clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let req = http::Request::post(url)
                .header("cookie", cookie)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .unwrap();
            match tokio::time::timeout(Duration::from_secs(10), client.request(req)).await {
                Ok(Ok(res)) => res.status(),
                _ => StatusCode::GATEWAY_TIMEOUT,
            }
        });
    }
    let (mut ok, mut used, mut other) = (0, 0, Vec::new());
    while let Some(status) = tasks.join_next().await {
        match status.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::CONFLICT => used += 1,
            s => other.push(s),
        }
    }
    let storm = storm_started.elapsed();
    assert!(
        other.is_empty(),
        "unexpected answers: {:?}",
        &other[..other.len().min(10)]
    );
    assert_eq!((ok, used), (1, STORM - 1));
    println!(
        "token storm: {STORM} redemptions over 2 nodes in {storm:?}: {ok} x 200, {used} x 409"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_uses_of_one_pow_nonce_over_two_connections_succeed_once() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let stores: [Arc<dyn QueueStore>; 2] = [
        Arc::new(process::redis_store(&redis.url()).await),
        Arc::new(process::redis_store(&redis.url()).await),
    ];
    let event = EventId::new("tickets").unwrap();
    let now = stores[0].now_us(&event).await.unwrap();
    let nonce = *b"pow-answer-nonce";
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..STORM {
        let store = stores[i % 2].clone();
        let event = event.clone();
        tasks.spawn(async move { store.consume_once(&event, &nonce, now + 60_000_000).await });
    }
    let (mut first, mut again) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        if r.unwrap().unwrap() {
            first += 1;
        } else {
            again += 1;
        }
    }
    assert_eq!((first, again), (1, STORM - 1));
    println!(
        "pow storm: {STORM} consume_once over 2 connections in {:?}: {first} accepted, {again} refused",
        started.elapsed()
    );
}
