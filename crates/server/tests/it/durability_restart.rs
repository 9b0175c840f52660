//! Restart durability of the embedded store through the real binary: joins
//! at full speed over HTTP, `kill -9` while they are still arriving, restart
//! on the same data directory. Every acknowledged join is still there, in
//! the same relative order, and the admitted / active state is as it was.

use crate::support::config::{ConfigBuilder, Event};
use crate::support::process;
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::wait_for;
use http::{Method, StatusCode};

const JOINS: usize = 1200;
const KILL_AFTER: usize = 600;
const IN_FLIGHT: usize = 32;

fn config(origin: &str, dir: &std::path::Path) -> String {
    ConfigBuilder::new()
        .process()
        .embedded(&dir.join("data"))
        .no_limits()
        .event(
            Event::new("tickets", origin)
                .max_active(3)
                .token_ttl("5m")
                .line("queue_idle_timeout = \"10m\"")
                .continuous(600)
                .challenge_off(),
        )
        .toml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_joins_survive_kill_9() {
    let started = Instant::now();
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut node = Node::start(&config(&origin.url(), dir.path()), dir.clone()).await;

    // The capacity fills: one active session, two outstanding tokens.
    let mut firsts = Vec::new();
    for _ in 0..3 {
        let mut v = Visitor::default();
        assert_eq!(v.enter(&node, "tickets").await.0, StatusCode::OK);
        firsts.push(v);
    }
    let mut tokens = Vec::new();
    for v in &mut firsts {
        let url = node.url("/api/queue/position?eventId=tickets");
        let deadline = Instant::now() + Duration::from_secs(10);
        let token = loop {
            let p = v.api(Method::GET, &url, None).await.2;
            if let Some(t) = p["token"].as_str() {
                break t.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "first visitors not admitted: {p}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        tokens.push(token);
    }
    assert_eq!(
        firsts[0].redeem(&node, "tickets", &tokens[0]).await,
        StatusCode::OK
    );
    assert_eq!(firsts[0].fetch(&node, "/tickets/a").await, StatusCode::OK);

    // Joins at full speed; kill -9 once KILL_AFTER are acknowledged.
    let acked = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let enter = node.url("/api/queue/enter?eventId=tickets");
    let mut tasks = tokio::task::JoinSet::new();
    let joins_started = Instant::now();
    for _ in 0..JOINS {
        let (acked, gate, enter) = (acked.clone(), gate.clone(), enter.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let mut v = Visitor::default();
            let (status, _, p) = v.api(Method::POST, &enter, None).await;
            if status == StatusCode::OK && p["status"] == "WAITING" {
                acked.fetch_add(1, Ordering::SeqCst);
                return Some((v, p["rank"].as_u64().unwrap()));
            }
            None
        });
    }
    wait_for("joins acknowledged", Duration::from_secs(30), || {
        let n = acked.load(Ordering::SeqCst);
        async move { n >= KILL_AFTER }
    })
    .await;
    node.kill9();
    let killed_after = joins_started.elapsed();
    let mut joined = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Some(j) = r.unwrap() {
            joined.push(j);
        }
    }
    let rate = joined.len() as f64 / killed_after.as_secs_f64();

    let restart_started = Instant::now();
    node.restart().await;
    let restart = restart_started.elapsed();

    // Every acknowledged join is still waiting, in the same relative order.
    joined.sort_by_key(|(_, rank)| *rank);
    let mut after = Vec::new();
    let mut same_rank = 0;
    for (v, rank) in &mut joined {
        let p = v.position(&node, "tickets").await;
        assert_eq!(p["status"], "WAITING", "acknowledged join lost: {p}");
        let now = p["rank"].as_u64().unwrap();
        same_rank += usize::from(now == *rank);
        after.push(now);
    }
    assert!(
        after.windows(2).all(|w| w[0] < w[1]),
        "relative order changed"
    );

    // Admitted and active state as before: one active session whose pass
    // works, two tokens that redeem once.
    let (s, body) = node.admin(Method::GET, "/admin/events/tickets").await;
    assert_eq!(s, StatusCode::OK);
    let stats: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(stats["stats"]["active"], 1, "{stats}");
    assert_eq!(stats["stats"]["outstanding"], 2, "{stats}");
    assert!(stats["stats"]["waiting"].as_u64().unwrap() >= joined.len() as u64);
    assert_eq!(
        firsts[0].position(&node, "tickets").await["status"],
        "ACTIVE"
    );
    assert_eq!(firsts[0].fetch(&node, "/tickets/b").await, StatusCode::OK);
    for i in 1..3 {
        assert_eq!(
            firsts[i].position(&node, "tickets").await["status"],
            "ADMITTED"
        );
        let token = tokens[i].clone();
        assert_eq!(
            firsts[i].redeem(&node, "tickets", &token).await,
            StatusCode::OK
        );
        assert_eq!(
            firsts[i].redeem(&node, "tickets", &token).await,
            StatusCode::CONFLICT
        );
    }
    println!(
        "durability: {} joins acknowledged at {rate:.0}/s before kill -9 ({killed_after:?}); all \
         intact after restart ({restart:?} to ready), order kept, {same_rank} with the very same \
         rank; active 1, outstanding 2 as before; test {:?}",
        joined.len(),
        started.elapsed()
    );
}
