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
use crate::support::visitor::Visitor;

use crate::support::process::Node;
use anteroom_store::testing::RedisServer;
use http::{Method, StatusCode};

const EVENT: &str = "tickets";
const VISITORS: usize = 40;

fn with_offset(config: &ConfigBuilder, offset_ms: i64) -> String {
    config
        .clone()
        .server_line(&format!("test_clock_offset_ms = {offset_ms}"))
        .toml()
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
    let ahead = Node::in_process(&with_offset(&base, 500)).await;
    let behind = Node::in_process(&with_offset(&base, -500)).await;
    // Paused: nobody leaves the queue, so ranks only reflect arrival order.
    let (status, _) = ahead
        .admin(Method::POST, "/admin/events/tickets/pause")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

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
