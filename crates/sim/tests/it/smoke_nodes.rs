//! Smoke run of the simulator against two Anteroom nodes sharing a real
//! `redis-server` (started on a free port, stopped by PID), the crowd's
//! connections spread over both as a round-robin load balancer would. It
//! keeps the multi-node mode of the rehearsals from rotting: every visitor
//! admitted and redeemed whichever node answered, in order, within
//! `max_active`, and both nodes served the crowd (the simulator counts
//! the answers of each).

use anteroom_sim::{
    crowd::{CrowdArgs, OriginSource, simulate},
    report::render_text,
};
use anteroom_store::testing::RedisServer;

use crate::support::{Anteroom, Event, Store, config, crowd, instrumented_origin};

const MAX_ACTIVE: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_admit_the_whole_crowd_in_order() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = instrumented_origin("fixed:5ms").await;
    let origin_url = format!("http://{}", origin.addr);
    let event = Event {
        id: "nodes",
        max_active: MAX_ACTIVE,
        batch_size: 40,
        per_ip_per_second: 0,
    };
    // Each node keeps its own drain journal.
    let journals = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut servers = Vec::new();
    for journal in &journals {
        let store = Store::Redis {
            url: &redis.url(),
            journal: &journal.path().join("journal"),
        };
        servers.push(Anteroom::start(config(&origin_url, &store, &event)).await);
    }
    let targets: Vec<String> = servers.iter().map(|s| s.target.clone()).collect();

    let args = CrowdArgs {
        target: targets.join(","),
        visitors: 200,
        browse: 100,
        max_active: Some(MAX_ACTIVE),
        fixed_poll: Some(200),
        connections: 32,
        streams: 20,
        timeout: 240,
        seed: 11,
        ..crowd(String::new(), "nodes")
    };
    let outcome = simulate(&args, OriginSource::Embedded(origin.stats_reader()))
        .await
        .unwrap();
    let r = &outcome.report;
    println!("{}", render_text(r));
    for (node, server) in servers.iter_mut().enumerate() {
        if server.task.is_finished() {
            panic!(
                "node {node} stopped during the run: {:?}",
                (&mut server.task).await
            );
        }
    }

    assert!(r.errors.is_empty(), "errors: {:?}", r.errors);
    assert_eq!(r.admitted, 200);
    assert_eq!(r.redeemed, 200);
    assert_eq!(r.inversions, 0);
    assert_eq!(r.inversions_across_nodes, Some(0));
    let max_origin = r.max_origin_concurrency.unwrap();
    assert!(
        (1..=MAX_ACTIVE).contains(&max_origin),
        "origin concurrency {max_origin}, max_active {MAX_ACTIVE}"
    );
    assert!(r.drain_rate_per_s.is_some_and(|d| d > 0.0));
    assert_eq!(r.requests_by_node.len(), 2);
    for (node, served) in r.requests_by_node.iter().enumerate() {
        assert!(
            *served >= 100,
            "node {node} answered {served} requests: the crowd did not reach both nodes"
        );
    }

    for server in servers {
        server.stop().await;
    }
    origin.shutdown().await;
}
