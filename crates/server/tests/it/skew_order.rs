//! Clock skew cannot reorder the queue: two gateway nodes share one Redis,
//! one node's clock runs 500 ms ahead and the other's 500 ms behind (the
//! test-only `server.test_clock_offset_ms`). Visitors arriving one after the
//! other, alternating between the nodes, hold ranks in true arrival order.
//!
//! Were arrival scores taken from the node clocks, every visitor on the slow
//! node would jump ~1 s ahead of the fast node's earlier arrivals (they join
//! a few ms apart); ranks 0, 1, 2, ... in arrival order are only possible
//! with the store's canonical clock (Redis `TIME`).

use crate::support::config::{ConfigBuilder, HOURLY};
use crate::support::process;
use crate::support::visitor::{Gate, Visitor, try_send};

use crate::support::process::Node;
use anteroom::config::stored::{self, StoredEvent};
use anteroom_store::testing::RedisServer;
use anteroom_store::{EventId, QueueStore};
use http::{Method, StatusCode};
use std::time::Duration;

const EVENT: &str = "tickets";
const VISITORS: usize = 40;

fn with_offset(config: &ConfigBuilder, offset_ms: i64) -> String {
    config
        .clone()
        .server_line(&format!("test_clock_offset_ms = {offset_ms}"))
        .toml()
}

/// Two nodes of `base`, one with its clock 500 ms ahead and one 500 ms
/// behind, the event paused (through the first).
async fn skewed_pair_paused(base: &ConfigBuilder) -> (Node, Node) {
    let ahead = Node::in_process(&with_offset(base, 500)).await;
    let behind = Node::in_process(&with_offset(base, -500)).await;
    let (status, _) = ahead
        .admin(Method::POST, "/admin/events/tickets/pause")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    (ahead, behind)
}

fn ms(rfc3339: &serde_json::Value) -> i64 {
    let t = humantime::parse_rfc3339(rfc3339.as_str().unwrap()).unwrap();
    i64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_arrivals_on_skewed_nodes_keep_arrival_order() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let base = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, "http://127.0.0.1:9", 1).admission(HOURLY));
    // Paused: nobody leaves the queue, so ranks only reflect arrival order.
    let (ahead, behind) = skewed_pair_paused(&base).await;

    let mut visitors = Vec::new();
    let mut node_times = (Vec::new(), Vec::new());
    for i in 0..VISITORS {
        let node = if i % 2 == 0 { &ahead } else { &behind };
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(node, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        if i % 2 == 0 {
            node_times.0.push(ms(&p["timestamp"]));
        } else {
            node_times.1.push(ms(&p["timestamp"]));
        }
        visitors.push(v);
    }
    // The node clocks really disagree: the slow node's answers carry times
    // about a second behind the fast node's, though they came later.
    let skew = node_times.0[1] - node_times.1[0];
    assert!(skew > 800, "node clocks differ by {skew} ms");

    // Everybody's rank, read from the node they did not join on.
    let mut ranks = Vec::new();
    for (i, v) in visitors.iter_mut().enumerate() {
        let node = if i % 2 == 0 { &behind } else { &ahead };
        let p = v.position(node, EVENT).await;
        // PAUSED once that node has refreshed the admin state; either way the
        // rank is what counts.
        assert!(p["status"] == "PAUSED" || p["status"] == "WAITING", "{p}");
        ranks.push(p["rank"].as_u64().unwrap());
    }
    let expected: Vec<u64> = (0..VISITORS as u64).collect();
    assert_eq!(ranks, expected, "ranks in arrival order");
    println!(
        "skew: {VISITORS} alternating arrivals, node clocks {skew} ms apart, ranks in arrival order"
    );
}

/// Nodes starting together on a new store fix one anchor between them.
/// Arrival scores count from the anchor (an event without `opens_at` opens
/// when it is first started): were each node to take its own start, the
/// later node's arrivals would all rank ahead of the earlier node's by the
/// gap between their starts, for the whole event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_count_from_one_anchor() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let nodes = [
        process::redis_store(&redis.url()).await,
        process::redis_store(&redis.url()).await,
    ];
    let toml = process::redis_node(&[redis.url()])
        .event(process::event(EVENT, "http://127.0.0.1:9", 1))
        .toml()
        .replace("{public}", "127.0.0.1:0")
        .replace("{admin}", "127.0.0.1:0")
        .replace("{journal}", "unused");
    let event = &anteroom::Config::from_toml(&toml).unwrap().events[0];
    // Each read the event's document before either stored an anchor.
    let (a, b) = tokio::join!(
        stored::anchor(event, StoredEvent::default(), &nodes[0]),
        stored::anchor(event, StoredEvent::default(), &nodes[1]),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "two nodes, two anchors {} µs apart", b - a);
    // The document a later node starts from holds it too.
    let docs = stored::read_all(&nodes[0]).await.unwrap();
    assert_eq!(docs[&event.id].anchor_us, Some(a));
}

/// An event whose stored document carries no anchor (stored by a node
/// before it fixed one) still orders its arrivals when another node takes
/// it up: that node asks the store for the anchor rather than counting
/// from the epoch, where every score would be clamped to one value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stored_without_its_anchor_still_orders_its_arrivals() {
    const LATE: &str = "late";
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let config = process::redis_node(&[redis.url()])
        .event(process::event(EVENT, "http://127.0.0.1:9", 1).admission(HOURLY));
    let node = Node::in_process(&config.toml()).await;
    let writer = process::redis_store(&redis.url()).await;
    let doc = serde_json::json!({
        "anchor_us": null,
        "event": {
            "id": LATE,
            "origin": "http://127.0.0.1:9",
            "paths": ["/late"],
            "max_active": 1,
            "admission": {"mode": "batch", "batch_size": 1, "interval": "1h"},
        },
    });
    writer
        .put_event_config(&EventId::new(LATE).unwrap(), &doc.to_string())
        .await
        .unwrap();

    // The node takes the stored event up at its next look at the store
    // (a read without a session joins nobody; an unknown event is a 404).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let url = node.public_url(&format!("/api/queue/position?eventId={LATE}"));
    loop {
        let (status, _, _) = try_send(Method::GET, &url, &[], None).await.unwrap();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            std::time::Instant::now() < deadline,
            "the stored event never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Paused: nobody leaves the queue, so ranks only reflect arrival order.
    let (status, _) = node
        .admin(Method::POST, &format!("/admin/events/{LATE}/pause"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let mut visitors = Vec::new();
    for _ in 0..12 {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&node, LATE).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        visitors.push(v);
    }
    let mut ranks = Vec::new();
    for v in &mut visitors {
        let p = v.position(&node, LATE).await;
        assert!(p["status"] == "PAUSED" || p["status"] == "WAITING", "{p}");
        ranks.push(p["rank"].as_u64().unwrap());
    }
    let expected: Vec<u64> = (0..visitors.len() as u64).collect();
    assert_eq!(ranks, expected, "ranks in arrival order");
}

/// Admitted so far, as the store counts it (read through `node`).
async fn admitted_total(node: &Node) -> u64 {
    let (s, body) = node
        .admin(Method::GET, &format!("/admin/events/{EVENT}"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["stats"]["admitted_total"].as_u64().unwrap()
}

/// Skewed node clocks cannot multiply the admission rate: two nodes whose
/// clocks are a second apart admit one batch per interval between them,
/// and no more on a loaded box where a node's tick runs long.
/// Were ticks numbered by each node's clock, the nodes would claim
/// different numbers at the same moment (twenty 50 ms ticks apart), each
/// would win every tick it tried, and each would admit a whole batch per
/// interval: twice the rate the operator set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_nodes_admit_one_rate_between_them() {
    const BATCH: u64 = 5;
    const INTERVAL_MS: u64 = 500;
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let admission =
        format!(r#"{{ mode = "batch", batch_size = {BATCH}, interval = "{INTERVAL_MS}ms" }}"#);
    let base = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, "http://127.0.0.1:9", 10_000).admission(&admission));
    // Paused while the line fills, so the window below starts on a full line.
    let (ahead, behind) = skewed_pair_paused(&base).await;
    for i in 0..200 {
        let node = if i % 2 == 0 { &ahead } else { &behind };
        let mut v = Visitor::default();
        assert_eq!(v.enter(node, EVENT).await.0, StatusCode::OK);
    }
    let (status, _) = ahead
        .admin(Method::POST, "/admin/events/tickets/resume")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // From the first admission on, for eight intervals.
    crate::support::wait_for("the first batch", Duration::from_secs(10), || async {
        admitted_total(&ahead).await > 0
    })
    .await;
    let start = admitted_total(&ahead).await;
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(8 * INTERVAL_MS)).await;
    let admitted = admitted_total(&ahead).await - start;
    let intervals = started.elapsed().as_millis() as u64 / INTERVAL_MS;
    // One batch per interval begun in the window, and the one due as it
    // opened: each batch is claimed in the store by one node, so a node
    // that did not try the tick on which the other began a batch (its own
    // last tick ran long on a loaded box) cannot begin it again.
    let most = (intervals + 1) * BATCH;
    println!(
        "skew: {admitted} admitted in {intervals} intervals of {INTERVAL_MS} ms (at most {most})"
    );
    assert!(
        admitted <= most,
        "{admitted} admitted in {intervals} intervals: more than one batch of {BATCH} per interval"
    );
    assert!(
        admitted >= intervals / 2 * BATCH,
        "{admitted} admitted in {intervals} intervals: batches lost"
    );
}
