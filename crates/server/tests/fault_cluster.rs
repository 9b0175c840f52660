//! Fault injection on Redis Cluster: one of three masters is killed. Only
//! the event whose slot lived there drains (503 for new arrivals, its pass
//! holders still reach the origin); the event on another master goes on
//! admitting as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fault_support/node.rs"]
mod node;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_store::testing::RedisCluster;
use http::{Method, StatusCode};
use node::{Node, Origin, Visitor, redis_config};

const MAX_ACTIVE: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_master_drains_only_its_events() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3).expect("redis cluster (apt-get install redis-server)");
    // Two events whose slots live on different masters.
    let doomed = "east";
    let doomed_master = cluster.master_for_event(doomed).unwrap();
    let safe = ["west", "north", "south", "x1", "x2", "x3", "x4", "x5"]
        .into_iter()
        .find(|e| cluster.master_for_event(e).unwrap() != doomed_master)
        .unwrap();
    let origin = Origin::start().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = redis_config(
        &origin.url(),
        &cluster.urls(),
        true,
        1,
        &[(doomed, MAX_ACTIVE), (safe, MAX_ACTIVE)],
        r#"{ mode = "continuous", max_per_minute = 600 }"#,
    );
    let node = Node::start(&config, dir).await;

    // A pass holder on each event.
    let mut holders = Vec::new();
    for event in [doomed, safe] {
        let mut v = Visitor::default();
        assert_eq!(v.enter(&node, event).await.0, StatusCode::OK);
        v.until_active(&node, event, Duration::from_secs(10), &mut Vec::new())
            .await;
        assert_eq!(v.fetch(&node, &format!("/{event}/x")).await, StatusCode::OK);
        holders.push(v);
    }

    let killed_at = Instant::now();
    cluster.kill_master_for_event(doomed).unwrap();
    // Timed on the mode (/readyz), not on a request whose own store call
    // failed: that one is answered 503 too, but only the probe drains.
    let readyz = node.admin_url("/readyz");
    let entry = loop {
        let (status, _, _) = node::send(Method::GET, &readyz, &[], None).await.unwrap();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break killed_at.elapsed();
        }
        assert!(killed_at.elapsed() < Duration::from_secs(5), "no drain");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (status, _, body) = Visitor::default().enter(&node, doomed).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "draining");

    // The doomed event's pass holder still gets through; /readyz names only it.
    for i in 0..3 {
        let path = format!("/{doomed}/during{i}");
        assert_eq!(holders[0].fetch(&node, &path).await, StatusCode::OK);
    }
    let (status, _, ready) = node::send(Method::GET, &node.admin_url("/readyz"), &[], None)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let ready: serde_json::Value = serde_json::from_slice(&ready).unwrap();
    assert_eq!(ready["draining"], serde_json::json!([doomed]));
    assert_eq!(node.draining_gauge(doomed).await, Some(1.0));
    assert_eq!(node.draining_gauge(safe).await, Some(0.0));

    // The other event goes on: new visitors join, are admitted, redeem, and
    // reach the origin, each exactly once, within max_active.
    assert_eq!(
        holders[1].release(&node, safe).await,
        StatusCode::NO_CONTENT
    );
    let mut admitted = 0;
    for _ in 0..4 {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&node, safe).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        v.until_active(&node, safe, Duration::from_secs(10), &mut Vec::new())
            .await;
        assert_eq!(v.fetch(&node, &format!("/{safe}/y")).await, StatusCode::OK);
        assert_eq!(v.release(&node, safe).await, StatusCode::NO_CONTENT);
        assert_eq!(v.redeems, 1);
        admitted += 1;
    }
    assert!(
        origin.peak() as u64 <= MAX_ACTIVE,
        "origin peak {}",
        origin.peak()
    );
    println!(
        "cluster: {doomed} drained {entry:?} after its master died; {safe} admitted {admitted} \
         meanwhile; origin peak {}; test {:?}",
        origin.peak(),
        started.elapsed()
    );
}
