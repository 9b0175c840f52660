//! Adaptive admission end to end: real scheduler ticks, real requests
//! through the gate to an in-process origin whose latency rises past a
//! knee of 50 concurrent sessions. The gate's own measurements (timed on
//! the injected clock, which the origin moves by its latency) must settle
//! the admission near the knee, and 5xx answers must make it back off.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::support::admission::{Harness, TestClock};
use anteroom::app::Clock;
use axum::Router;
use axum::body::Body;
use http::Request;
use tower::ServiceExt;

const KNEE: u64 = 50;

struct Origin {
    clock: Arc<TestClock>,
    load: AtomicU64,
    failing: AtomicBool,
    served: AtomicU64,
}

async fn origin_handler(
    axum::extract::State(o): axum::extract::State<Arc<Origin>>,
) -> http::StatusCode {
    let load = o.load.load(Ordering::SeqCst);
    // 2 ms up to the knee, then 2 ms more per extra session.
    let latency = 2 + 2 * load.saturating_sub(KNEE);
    o.clock.advance(i64::try_from(latency).unwrap());
    let n = o.served.fetch_add(1, Ordering::SeqCst);
    if o.failing.load(Ordering::SeqCst) && n % 5 == 0 {
        http::StatusCode::INTERNAL_SERVER_ERROR
    } else {
        http::StatusCode::OK
    }
}

#[tokio::test]
async fn adaptive_settles_near_the_knee_and_backs_off_on_5xx() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let h = Harness::with_origin(
        &format!("http://{addr}"),
        r#"max_active = 400
queue_idle_timeout = "1h"
admission = { mode = "adaptive", target_p95 = "10ms", max_error_rate = 0.05 }"#,
    )
    .await;
    let origin = Arc::new(Origin {
        clock: h.clock.clone(),
        load: AtomicU64::new(0),
        failing: AtomicBool::new(false),
        served: AtomicU64::new(0),
    });
    let app = Router::new()
        .fallback(origin_handler)
        .with_state(origin.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let gate = anteroom::public_router(h.state.clone());

    let mut queue = VecDeque::new();
    for i in 0..2_500u64 {
        let m = format!("{i:032x}");
        h.join(&m).await;
        queue.push_back(m);
        h.clock.advance(1);
    }
    // Sessions browse for 5 s, one request per second each.
    let mut sessions: VecDeque<(i64, String)> = VecDeque::new();
    let mut active_by_second = Vec::new();
    for second in 0..150 {
        if second == 120 {
            origin.failing.store(true, Ordering::SeqCst);
        }
        let boundary = (h.now_ms() / 1000 + 1) * 1000;
        h.clock.set(boundary);
        let n = h.tick().await;
        for _ in 0..n {
            let m = queue.pop_front().unwrap();
            assert!(h.redeem(&m).await);
            sessions.push_back((h.now_ms() + 5_000, m));
        }
        while sessions.front().is_some_and(|(at, _)| *at <= h.now_ms()) {
            let (_, m) = sessions.pop_front().unwrap();
            h.release(&m).await;
        }
        origin.load.store(sessions.len() as u64, Ordering::SeqCst);
        active_by_second.push(sessions.len() as u64);
        // Ten requests a second through the gate are plenty of samples.
        let rt = h.rt();
        for (_, m) in sessions.iter().take(10) {
            let now = h.clock.now_ms();
            let (pass, _) = anteroom::passes::issue(
                &h.state.keyring,
                &rt,
                anteroom_core::token::session_tag(m),
                now,
                now * 1000,
            );
            let req = Request::get("/shop/item")
                .header(
                    "cookie",
                    format!("__Host-anteroom_sid={m}; __Host-anteroom_pass={pass}"),
                )
                .body(Body::empty())
                .unwrap();
            let status = gate.clone().oneshot(req).await.unwrap().status();
            assert!(status.is_success() || status.is_server_error(), "{status}");
        }
    }
    let settled = &active_by_second[60..120];
    let mean = settled.iter().sum::<u64>() as f64 / settled.len() as f64;
    let max = settled.iter().max().copied().unwrap();
    println!("active per second: {active_by_second:?}");
    assert!(
        mean >= KNEE as f64 * 0.5 && mean <= KNEE as f64 * 1.2,
        "mean {mean} not near the knee {KNEE}"
    );
    assert!(max <= KNEE * 3 / 2, "overshoot to {max}");
    let failing = &active_by_second[135..];
    let after = failing.iter().sum::<u64>() as f64 / failing.len() as f64;
    assert!(after < mean * 0.6, "no backoff on 5xx: {mean} -> {after}");
}

/// A node whose clock lags the store's still steers by what its gate
/// measured: the samples are stamped with the node's clock, and the window
/// that summarises them is counted on it too. Counted on the store's clock
/// (30 s ahead here), every sample looked older than the window and the
/// origin's breach went unseen.
#[tokio::test]
async fn a_node_lagging_the_stores_clock_still_sees_its_origin_samples() {
    let h = Harness::with_store_ahead(
        r#"max_active = 200
queue_idle_timeout = "1h"
admission = { mode = "adaptive", target_p95 = "10ms", max_error_rate = 0.05 }"#,
        30_000,
    )
    .await;
    h.join_many("v", 100).await;
    // No samples yet: the first window (a twentieth of max_active) fills.
    assert_eq!(h.tick().await, 10);
    let window = || {
        anteroom::app::lock(&h.rt().live.policy)
            .state
            .as_ref()
            .unwrap()
            .window()
    };
    assert_eq!(window(), 10.0);
    // The origin answers in 500 ms against a 10 ms target.
    for _ in 0..50 {
        h.rt().live.admission.record_origin(h.now_ms(), 500, 200);
    }
    h.step(1_000).await;
    assert_eq!(window(), 5.0, "the breach halves the window");
}
