//! Fault injection on the gateway tier: two `anteroom` processes share one
//! Redis; one is killed with SIGKILL. Its visitors carry on through the other
//! node: passes verify there (same keys), waiting visitors keep their place
//! and are admitted, nobody twice, within max_active at the origin.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process;
use crate::support::process::Node;
use crate::support::visitor::Visitor;
use anteroom_store::testing::RedisServer;
use http::StatusCode;

const EVENT: &str = "tickets";
const MAX_ACTIVE: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_leaves_the_other_serving() {
    let started = Instant::now();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, &origin.url(), MAX_ACTIVE).continuous(600))
        .toml();
    let mut doomed = Node::start(&config, dir.clone()).await;
    let survivor = Node::start(&config, dir).await;

    // Everybody starts on the node that will die.
    let mut holder = Visitor::default();
    holder.enter(&doomed, EVENT).await;
    holder
        .until_active(&doomed, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let mut waiting = Vec::new();
    let mut ranks = Vec::new();
    for _ in 0..4 {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&doomed, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        ranks.push(p["rank"].as_u64());
        waiting.push(v);
    }

    doomed.kill9();
    let killed_at = Instant::now();

    // The pass holder goes on through the survivor without an error.
    for i in 0..5 {
        let path = format!("/{EVENT}/after{i}");
        assert_eq!(holder.fetch(&survivor, &path).await, StatusCode::OK);
    }
    let holder_ok_after = killed_at.elapsed();
    assert_eq!(
        holder.release(&survivor, EVENT).await,
        StatusCode::NO_CONTENT
    );
    // Waiting visitors keep their place on the survivor and get in, once each.
    let mut statuses = Vec::new();
    for v in &mut waiting {
        let p = v.position(&survivor, EVENT).await;
        statuses.push(p["status"].as_str().unwrap_or("?").to_owned());
        v.until_active(&survivor, EVENT, Duration::from_secs(15), &mut Vec::new())
            .await;
        assert_eq!(
            v.fetch(&survivor, &format!("/{EVENT}/in")).await,
            StatusCode::OK
        );
        assert_eq!(v.release(&survivor, EVENT).await, StatusCode::NO_CONTENT);
        assert_eq!(v.redeems, 1);
    }
    assert!(
        statuses
            .iter()
            .all(|s| s == "WAITING" || s == "ADMITTED" || s == "ACTIVE"),
        "{statuses:?}"
    );
    assert!(
        origin.peak() as u64 <= MAX_ACTIVE,
        "origin peak {}",
        origin.peak()
    );
    println!(
        "node kill: pass holder served by the survivor {holder_ok_after:?} after SIGKILL; \
         {} waiting visitors admitted there (ranks before {ranks:?}, status after {statuses:?}); \
         origin peak {}; test {:?}",
        waiting.len(),
        origin.peak(),
        started.elapsed()
    );
}
