//! Fault injection on Redis Cluster: one of three masters is killed. Only
//! the event whose slot lived there drains (503 for new arrivals, its pass
//! holders still reach the origin); the event on another master goes on
//! admitting as before. When the master comes back (same port, same
//! `nodes.conf`, so the same node with the same slots) the event leaves
//! drain mode by itself and its waiting visitors resume.

use crate::support::process;
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::wait_for;
use anteroom_store::testing::RedisCluster;
use http::{Method, StatusCode};

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
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_cluster_node(&cluster.urls())
        .gateway_nodes(1)
        .event(process::event(doomed, &origin.url(), MAX_ACTIVE).continuous(600))
        .event(process::event(safe, &origin.url(), MAX_ACTIVE).continuous(600))
        .toml();
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
        let (status, _, _) = process::send(Method::GET, &readyz, &[], None)
            .await
            .unwrap();
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
    let (status, _, ready) = process::send(Method::GET, &node.admin_url("/readyz"), &[], None)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_master_ends_the_drain_and_waiting_visitors_resume() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3).expect("redis cluster (apt-get install redis-server)");
    let event = "east";
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    // One admission a minute: whoever joins after the first ones stays waiting.
    let config = process::redis_cluster_node(&cluster.urls())
        .gateway_nodes(1)
        .event(process::event(event, &origin.url(), MAX_ACTIVE).continuous(1))
        .toml();
    let node = Node::start(&config, dir).await;

    let mut holder = Visitor::default();
    assert_eq!(holder.enter(&node, event).await.0, StatusCode::OK);
    holder
        .until_active(&node, event, Duration::from_secs(10), &mut Vec::new())
        .await;
    assert_eq!(
        holder.fetch(&node, &format!("/{event}/a")).await,
        StatusCode::OK
    );
    let mut waiting = Vec::new();
    for _ in 0..5 {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&node, event).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        waiting.push(v);
    }

    // Snapshot the master's data so the restarted node has the queue back.
    let port = cluster.master_for_event(event).unwrap();
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "SAVE"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success());
    let killed_at = Instant::now();
    assert_eq!(cluster.kill_master_for_event(event).unwrap(), port);
    let readyz = node.admin_url("/readyz");
    wait_for("/readyz 503 after the kill", Duration::from_secs(5), || {
        let url = readyz.clone();
        async move {
            process::send(Method::GET, &url, &[], None)
                .await
                .map(|r| r.0)
                == Ok(StatusCode::SERVICE_UNAVAILABLE)
        }
    })
    .await;
    let entry = killed_at.elapsed();

    // During the drain: waiting visitors see DRAINING or are admitted by
    // the node (then redeem once); the pass holder still gets through.
    let mut statuses = Vec::new();
    for v in &mut waiting {
        let p = v.position(&node, event).await;
        let status = p["status"].as_str().unwrap_or("?").to_owned();
        if status == "ADMITTED" {
            let token = p["token"].as_str().unwrap().to_owned();
            assert_eq!(v.redeem(&node, event, &token).await, StatusCode::OK);
            assert_eq!(v.redeem(&node, event, &token).await, StatusCode::CONFLICT);
        }
        statuses.push(status);
    }
    assert!(
        statuses.iter().all(|s| s == "ADMITTED" || s == "DRAINING"),
        "{statuses:?}"
    );
    assert!(statuses.iter().any(|s| s == "DRAINING"), "{statuses:?}");
    assert_eq!(
        holder.fetch(&node, &format!("/{event}/d")).await,
        StatusCode::OK
    );

    // The master comes back; the event leaves drain mode by itself.
    let restart_at = Instant::now();
    cluster.restart_master(port).unwrap();
    let rejoined = restart_at.elapsed();
    wait_for(
        "/readyz 200 after the restart",
        Duration::from_secs(10),
        || {
            let url = readyz.clone();
            async move {
                process::send(Method::GET, &url, &[], None)
                    .await
                    .map(|r| r.0)
                    == Ok(StatusCode::OK)
            }
        },
    )
    .await;
    let exit = restart_at.elapsed();
    assert_eq!(node.draining_gauge(event).await, Some(0.0));

    // Waiting visitors resume: none is DRAINING any more.
    for (i, v) in waiting.iter_mut().enumerate() {
        let status = v.position(&node, event).await["status"]
            .as_str()
            .unwrap_or("?")
            .to_owned();
        let ok = if statuses[i] == "ADMITTED" {
            status == "ACTIVE"
        } else {
            status == "WAITING" || status == "ADMITTED"
        };
        assert!(
            ok,
            "visitor {i}: {} during the drain, {status} after",
            statuses[i]
        );
    }
    // Admissions speed up (a live config change) so the rest get in, each once.
    assert_eq!(holder.release(&node, event).await, StatusCode::NO_CONTENT);
    process::put_event(&node, event, MAX_ACTIVE, &origin.url(), process::fast()).await;
    for (i, v) in waiting.iter_mut().enumerate() {
        let mut seen = Vec::new();
        v.until_active(&node, event, Duration::from_secs(10), &mut seen)
            .await;
        assert_eq!(
            v.fetch(&node, &format!("/{event}/after")).await,
            StatusCode::OK
        );
        assert_eq!(v.release(&node, event).await, StatusCode::NO_CONTENT);
        assert_eq!(
            v.redeems, 1,
            "visitor {i} redeemed {} times; saw {seen:?}",
            v.redeems
        );
    }
    assert!(
        origin.peak() as u64 <= MAX_ACTIVE,
        "origin peak {}",
        origin.peak()
    );
    println!(
        "cluster restart: {event} drained {entry:?} after its master died; master rejoined \
         (cluster_state:ok everywhere) {rejoined:?} and the drain ended {exit:?} after the \
         restart began; during the drain {statuses:?}; origin peak {}; test {:?}",
        origin.peak(),
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "test took {:?}",
        started.elapsed()
    );
}
