//! Smoke run of the simulator against a real Anteroom started in-process on
//! port 0, in front of the instrumented origin, with the embedded store in a
//! temp dir and fast batch admission. It keeps the simulator from rotting; it
//! asserts outcomes (all admitted, fair, origin within `max_active`), never
//! timings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anteroom_sim::{
    crowd::{Arrival, CrowdArgs, OriginSource, simulate},
    origin::serve_origin,
    report::render_text,
};
use tokio::net::TcpListener;

const MAX_ACTIVE: u64 = 25;

fn config(origin: &str, store: &std::path::Path) -> anteroom::Config {
    let text = format!(
        r#"
[server]
admin_token = "smoke-admin-token-0123456789"
insecure_cookies = true
[store]
kind = "embedded"
path = "{store}"
[keys]
secrets = ["smoke-test-secret-0123456789abcdef0123"]
[limits]
per_ip_per_second = 0
entries_per_ip = 0
per_session_per_second = 0
[[events]]
id = "smoke"
origin = "{origin}"
paths = ["/"]
max_active = {MAX_ACTIVE}
admission = {{ mode = "batch", batch_size = 50, interval = "100ms" }}
bots = {{ challenge = "off" }}
"#,
        store = store.display()
    );
    anteroom::Config::from_toml(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_visitors_are_all_admitted_in_order_within_max_active() {
    let origin = serve_origin(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        "fixed:5ms".parse().unwrap(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}", public.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(anteroom::run(
        public,
        admin,
        config(&format!("http://{}", origin.addr), dir.path()),
        async {
            let _ = stopped.await;
        },
    ));

    let args = CrowdArgs {
        target,
        // The server runs in this process: its peak RSS is ours.
        server_pid: vec![std::process::id()],
        event: "smoke".into(),
        visitors: 300,
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
        // Polling every 200 ms keeps the run short; honouring pollAfterMs is
        // covered by crowd_fake.rs.
        fixed_poll: Some(200),
        connections: 64,
        // Visitors near the front follow the push stream, as the page does.
        streams: 50,
        warmup: 0,
        timeout: 240,
        seed: 9,
    };
    let outcome = simulate(&args, OriginSource::Embedded(origin.stats_reader()))
        .await
        .unwrap();
    let r = &outcome.report;
    println!("{}", render_text(r));

    assert!(r.errors.is_empty(), "errors: {:?}", r.errors);
    assert_eq!(r.visitors, 300);
    assert_eq!(r.admitted, 300);
    assert_eq!(r.redeemed, 300);
    assert_eq!(r.inversions, 0);
    let max_origin = r.max_origin_concurrency.unwrap();
    assert!(max_origin >= 1, "the origin saw the admitted visitors");
    assert!(
        max_origin <= MAX_ACTIVE,
        "origin concurrency {max_origin} > max_active {MAX_ACTIVE}"
    );
    // Every admission's token carries its issue time, so the report can say
    // how long each took to reach its visitor and how full the slots were.
    let use_share = r.capacity_use.expect("capacity use is reported");
    assert!(use_share > 0.0 && use_share <= 1.0, "{use_share}");
    let lag_p99 = r
        .admission_to_visitor_p99_ms
        .expect("admission lag is reported");
    assert!(
        lag_p99 < 10_000.0,
        "an admission reached its visitor {lag_p99} ms late with 200 ms polls"
    );
    let drain = r.drain_rate_per_s.expect("the drain rate is reported");
    let allowed = r.capacity_per_s.expect("the capacity is reported");
    assert!(drain > 0.0, "{drain}");
    assert!(
        (allowed - MAX_ACTIVE as f64 * 10.0).abs() < 1e-9,
        "max_active {MAX_ACTIVE} / 100 ms browse: {allowed}"
    );
    assert!(
        r.server_peak_rss_bytes.is_some_and(|b| b > 1 << 20),
        "the server's peak RSS is read: {:?}",
        r.server_peak_rss_bytes
    );
    assert!(
        r.streams_opened > 0,
        "visitors near the front follow the stream"
    );
    assert!(
        r.stream_fallbacks.is_empty(),
        "no stream was refused or broke: {:?}",
        r.stream_fallbacks
    );
    let stats = origin.stats();
    assert_eq!(
        stats.gated_requests, stats.requests,
        "every origin request came through the gate"
    );

    let _ = stop.send(());
    server.await.unwrap().unwrap();
    origin.shutdown().await;
}
