//! The public listener's event loops (`server.event_loops`), through the
//! real binary: with the shared runtime (0), one loop and more loops than
//! cores, a crowd of visitors on their own kept-alive connections joins,
//! is admitted, redeems, reaches the origin through the gate and releases,
//! every answer right; the process runs exactly the loops asked for (its
//! threads, by name), and a SIGTERM still stops it gracefully.

use crate::support::config::{ConfigBuilder, Event};
use crate::support::process::{self, Node};
use crate::support::visitor::Gate;
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

const EVENT: &str = "tickets";
const VISITORS: usize = 40;

fn config(origin: &str, dir: &std::path::Path, loops: u32) -> String {
    ConfigBuilder::new()
        .process()
        .server_line(&format!("event_loops = {loops}"))
        .server_line("shutdown_grace = \"5s\"")
        .embedded(&dir.join("data"))
        .no_limits()
        .event(
            Event::new(EVENT, origin)
                .paths(&["/shop"])
                .max_active(10)
                .admission("{ mode = \"batch\", batch_size = 10, interval = \"100ms\" }")
                .token_ttl("2m")
                .challenge_off(),
        )
        .toml()
}

/// The names of the process's threads that are event loops.
fn loop_threads(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("anteroom-io"))
        .collect();
    names.sort();
    names
}

/// The process runs exactly `loops` event loops, named in order. The admin
/// listener can answer the readiness probe before the public listener's
/// task has started its loops, so this waits for them to appear first.
async fn assert_loops(node: &Node, loops: u32) {
    let expected: Vec<String> = (0..loops).map(|i| format!("anteroom-io-{i}")).collect();
    let pid = node.pid().unwrap();
    crate::support::wait_for("the event loops", Duration::from_secs(10), || {
        let expected = expected.clone();
        async move { loop_threads(pid) == expected }
    })
    .await;
    assert_eq!(loop_threads(pid), expected, "event_loops = {loops}");
}

async fn crowd_through(loops: u32) {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut node = Node::start(&config(&origin.url(), dir.path(), loops), dir.clone()).await;
    assert_loops(&node, loops).await;

    let gate = Arc::new(Public(node.public));
    let mut crowd = tokio::task::JoinSet::new();
    for _ in 0..VISITORS {
        let gate = gate.clone();
        crowd.spawn(async move {
            let node = &*gate;
            let mut v = Visitor::default();
            let (status, _, joined) = v.enter(node, EVENT).await;
            assert_eq!(status, StatusCode::OK, "{joined}");
            let mut seen = Vec::new();
            v.until_active(node, EVENT, Duration::from_secs(60), &mut seen)
                .await;
            for page in ["/shop/", "/shop/cart", "/shop/pay"] {
                assert_eq!(v.fetch(node, page).await, StatusCode::OK, "{page}");
            }
            assert_eq!(v.release(node, EVENT).await, StatusCode::NO_CONTENT);
            // Released: the pass no longer opens the shop.
            assert_ne!(v.fetch(node, "/shop/").await, StatusCode::OK);
        });
    }
    while let Some(done) = crowd.join_next().await {
        done.unwrap();
    }
    let reached = origin.requests.lock().unwrap().len();
    assert_eq!(reached, VISITORS * 3, "every page reached the origin once");
    let status = node.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "SIGTERM: {status:?}");
}

/// The node's public address, shared by the visitors' tasks (the process
/// stays owned by the test, which stops it).
struct Public(std::net::SocketAddr);

impl Gate for Public {
    fn public_url(&self, path: &str) -> String {
        format!("http://{}{}", self.0, path)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_runtime_serves_the_whole_journey() {
    crowd_through(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_loop_serves_the_whole_journey() {
    crowd_through(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_loops_than_cores_serve_the_whole_journey_and_stop_gracefully() {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut node = Node::start(&config(&origin.url(), dir.path(), 5), dir.clone()).await;
    assert_loops(&node, 5).await;
    let mut v = Visitor::default();
    v.enter(&node, EVENT).await;
    v.until_active(&node, EVENT, Duration::from_secs(30), &mut Vec::new())
        .await;
    assert_eq!(v.fetch(&node, "/shop/").await, StatusCode::OK);
    let status = node.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "SIGTERM: {status:?}");
}
