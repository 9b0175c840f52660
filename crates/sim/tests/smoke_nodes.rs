//! Smoke run of the simulator against two Anteroom nodes sharing a real
//! `redis-server` (started on a free port, stopped by PID), the crowd's
//! connections spread over both as a round-robin load balancer would. It
//! keeps the multi-node mode of the rehearsals from rotting: every visitor
//! admitted and redeemed whichever node answered, in order, within
//! `max_active`, and both nodes served the crowd (the simulator counts
//! the answers of each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anteroom_sim::{
    crowd::{Arrival, CrowdArgs, OriginSource, simulate},
    origin::serve_origin,
    report::render_text,
};
use anteroom_store::testing::RedisServer;
use tokio::net::TcpListener;

const MAX_ACTIVE: u64 = 20;

fn config(origin: &str, redis: &str, journal: &std::path::Path) -> anteroom::Config {
    let text = format!(
        r#"
[server]
admin_token = "smoke-admin-token-0123456789"
insecure_cookies = true
drain_journal = "{journal}"
[store]
kind = "redis"
urls = ["{redis}"]
cluster = false
timeout = "1s"
[keys]
secrets = ["smoke-test-secret-0123456789abcdef0123"]
[limits]
per_ip_per_second = 0
entries_per_ip = 0
per_session_per_second = 0
[[events]]
id = "nodes"
origin = "{origin}"
paths = ["/"]
max_active = {MAX_ACTIVE}
admission = {{ mode = "batch", batch_size = 40, interval = "100ms" }}
bots = {{ challenge = "off" }}
"#,
        journal = journal.display()
    );
    anteroom::Config::from_toml(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_admit_the_whole_crowd_in_order() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = serve_origin(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        "fixed:5ms".parse().unwrap(),
    )
    .await
    .unwrap();
    let origin_url = format!("http://{}", origin.addr);
    let mut targets = Vec::new();
    let mut stops = Vec::new();
    // Each node keeps its own drain journal.
    let journals = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut servers = Vec::new();
    for journal in &journals {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        targets.push(format!("http://{}", public.local_addr().unwrap()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        servers.push(tokio::spawn(anteroom::run(
            public,
            admin,
            config(&origin_url, &redis.url(), &journal.path().join("journal")),
            async {
                let _ = stopped.await;
            },
        )));
    }

    let args = CrowdArgs {
        target: targets.join(","),
        server_pid: vec![],
        event: "nodes".into(),
        visitors: 200,
        arrival: Arrival::Burst,
        rate: 1000.0,
        bots: 0.0,
        abandon: 0.0,
        browse: 100,
        browse_path: "/".into(),
        json: false,
        plot: None,
        origin_stats: None,
        origin_listen: None,
        origin_latency: "fixed:0ms".parse().unwrap(),
        max_active: Some(MAX_ACTIVE),
        fixed_poll: Some(200),
        connections: 32,
        streams: 20,
        warmup: 0,
        timeout: 240,
        seed: 11,
    };
    let outcome = simulate(&args, OriginSource::Embedded(origin.stats_reader()))
        .await
        .unwrap();
    let r = &outcome.report;
    println!("{}", render_text(r));
    for (node, server) in servers.iter_mut().enumerate() {
        if server.is_finished() {
            panic!("node {node} stopped during the run: {:?}", server.await);
        }
    }

    assert!(r.errors.is_empty(), "errors: {:?}", r.errors);
    assert_eq!(r.admitted, 200);
    assert_eq!(r.redeemed, 200);
    assert_eq!(r.inversions, 0);
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

    for stop in stops {
        let _ = stop.send(());
    }
    for server in servers {
        server.await.unwrap().unwrap();
    }
    origin.shutdown().await;
}
