//! The crowd against a real Anteroom (in-process, port 0, embedded store)
//! whose per-IP limits are on and which does not trust loopback as a proxy,
//! so every visitor is the same address: most are rate limited. Every
//! visitor must still be accounted for: it either lived its whole plan or
//! is counted once under `gave_up_<kind>` in `errors`, and the rate-limited
//! answers are counted by kind. Also checks the simulator reports its own
//! CPU share, send lag and memory.

use anteroom_sim::{
    crowd::{CrowdArgs, OriginSource, simulate},
    report::render_text,
};

use crate::support::{Anteroom, Event, Store, config, crowd, instrumented_origin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_visitors_are_counted_never_dropped() {
    let origin = instrumented_origin("fixed:1ms").await;
    let dir = tempfile::tempdir().unwrap();
    let event = Event {
        id: "limits",
        max_active: 50,
        batch_size: 50,
        per_ip_per_second: 20,
    };
    let server = Anteroom::start(config(
        &format!("http://{}", origin.addr),
        &Store::Embedded(dir.path()),
        &event,
    ))
    .await;

    let args = CrowdArgs {
        max_active: Some(50),
        fixed_poll: Some(100),
        // Short on purpose: visitors still retrying then are counted as
        // `gave_up_deadline`, which is part of what is checked.
        timeout: 6,
        seed: 5,
        ..crowd(server.target.clone(), "limits")
    };
    let outcome = simulate(&args, OriginSource::Embedded(origin.stats_reader()))
        .await
        .unwrap();
    let r = &outcome.report;
    println!("{}", render_text(r));

    assert_eq!(r.visitors, 300);
    assert_eq!(
        r.completed as u64 + r.gave_up,
        300,
        "every visitor completed or gave up: {r:#?}"
    );
    let gave_up: u64 = r
        .errors
        .iter()
        .filter(|(k, _)| k.starts_with("gave_up_"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(gave_up, r.gave_up, "{:?}", r.errors);
    assert!(
        r.gave_up > 0,
        "a shared address at 20/s cannot serve 300 visitors in 6 s: {r:#?}"
    );
    assert!(
        r.errors.keys().any(|k| k.contains("429_rate_limited")),
        "rate-limited answers are counted by kind: {:?}",
        r.errors
    );
    assert!(r.admitted >= r.redeemed);
    assert!(r.sim_cpu_share > 0.0 && r.sim_cpu_share <= 1.0, "{r:#?}");
    assert!(r.sim_lag_p99_ms.is_some(), "{r:#?}");
    assert!(r.sim.rss_max_bytes > 0);
    assert!(r.sim.requests > 300, "{r:#?}");
    assert!(
        r.sim.connects <= 16 * 4,
        "a fixed pool of keep-alive connections, not one per request: {r:#?}"
    );
    let json = serde_json::to_value(r).unwrap();
    for key in [
        "sim_cpu_share",
        "sim_lag_p99_ms",
        "bottleneck",
        "completed",
        "gave_up",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }

    server.stop().await;
    origin.shutdown().await;
}
