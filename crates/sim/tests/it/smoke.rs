//! Smoke run of the simulator against a real Anteroom started in-process on
//! port 0, in front of the instrumented origin, with the embedded store in a
//! temp dir and fast batch admission. It keeps the simulator from rotting; it
//! asserts outcomes (all admitted, fair, origin within `max_active`), never
//! timings.

use anteroom_sim::{
    crowd::{CrowdArgs, OriginSource, simulate},
    report::render_text,
};

use crate::support::{Anteroom, Event, Store, config, crowd, instrumented_origin};

const MAX_ACTIVE: u64 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_visitors_are_all_admitted_in_order_within_max_active() {
    let origin = instrumented_origin("fixed:5ms").await;
    let dir = tempfile::tempdir().unwrap();
    let event = Event {
        id: "smoke",
        max_active: MAX_ACTIVE,
        batch_size: 50,
        per_ip_per_second: 0,
    };
    let server = Anteroom::start(config(
        &format!("http://{}", origin.addr),
        &Store::Embedded(dir.path()),
        &event,
    ))
    .await;

    let args = CrowdArgs {
        // The server runs in this process: its peak RSS is ours.
        server_pid: vec![std::process::id()],
        browse: 100,
        max_active: Some(MAX_ACTIVE),
        // Polling every 200 ms keeps the run short; honouring pollAfterMs is
        // covered by crowd_fake.rs.
        fixed_poll: Some(200),
        connections: 64,
        // Visitors near the front follow the push stream, as the page does.
        streams: 50,
        timeout: 240,
        seed: 9,
        ..crowd(server.target.clone(), "smoke")
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

    server.stop().await;
    origin.shutdown().await;
}
