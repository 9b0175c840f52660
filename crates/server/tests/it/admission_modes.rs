//! Admission modes driven by real scheduler ticks on the embedded store with
//! a hand-moved clock: batch sizes and cadence, continuous refill on
//! release, capacity against a fake health endpoint (good, garbage and
//! unreachable answers), and a live mode change that keeps what was learnt.

use std::sync::{Arc, Mutex};

use crate::support::admission::Harness;
use anteroom::app::lock;
use anteroom::scheduler::tick_once;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

#[tokio::test]
async fn batch_releases_size_every_interval_and_ticks_every_second() {
    let h = Harness::new(
        r#"max_active = 1000
admission = { mode = "batch", batch_size = 10, interval = "5s" }"#,
    )
    .await;
    h.join_many("v", 100).await;
    let mut seen = vec![h.tick().await];
    for _ in 0..10 {
        seen.push(h.step(1_000).await);
    }
    assert_eq!(seen, [10, 0, 0, 0, 0, 10, 0, 0, 0, 0, 10]);
    let s = h.stats().await;
    assert_eq!((s.outstanding, s.waiting), (30, 70));
}

/// Two nodes on one store: a batch one node began is not begun again by
/// the other, though that node never tried the tick it was begun on (its
/// own last tick ran long) and so never forfeited it. The batch is claimed
/// in the store by the node that begins it.
#[tokio::test]
async fn a_batch_is_begun_once_among_nodes_whichever_ticks_each_tried() {
    let h = Harness::new(
        r#"max_active = 1000
admission = { mode = "batch", batch_size = 10, interval = "5s" }"#,
    )
    .await;
    h.join_many("v", 100).await;
    let other = h.another_node().await;
    let (one, two) = (h.rt(), other.event(&h.id).unwrap());
    let tick_ms = 50;
    let tick = |h: &Harness| u64::try_from(h.now_ms() / tick_ms).unwrap();
    let t = tick(&h);
    assert_eq!(tick_once(&h.state, &one, t, tick_ms).await.unwrap(), 10);
    // Node two's first tick comes after the one node one won.
    h.clock.advance(tick_ms);
    assert_eq!(
        tick_once(&other, &two, t + 1, tick_ms).await.unwrap(),
        0,
        "the interval's batch was node one's"
    );
    h.clock.advance(tick_ms);
    assert_eq!(tick_once(&h.state, &one, t + 2, tick_ms).await.unwrap(), 0);
    // The next interval's batch: node two ticks first; node one, which
    // missed that tick, finds the batch claimed.
    h.clock.advance(5_000);
    let t = tick(&h);
    assert_eq!(tick_once(&other, &two, t, tick_ms).await.unwrap(), 10);
    h.clock.advance(tick_ms);
    assert_eq!(tick_once(&h.state, &one, t + 1, tick_ms).await.unwrap(), 0);
    assert_eq!(h.stats().await.outstanding, 20);
}

#[tokio::test]
async fn batch_never_exceeds_max_active_and_owes_the_rest() {
    let h = Harness::new(
        r#"max_active = 15
admission = { mode = "batch", batch_size = 10, interval = "10s" }"#,
    )
    .await;
    let all = h.join_many("v", 100).await;
    assert_eq!(h.tick().await, 10);
    h.clock.advance(10_000);
    // The second batch finds 5 free slots: 5 now, the rest as slots free.
    assert_eq!(h.tick().await, 5);
    let s = h.stats().await;
    assert_eq!(s.active + s.outstanding, 15);
    let first = h.admitted(&all).await;
    h.redeem(&first[0]).await;
    h.release(&first[0]).await;
    assert_eq!(h.step(1_000).await, 1, "the batch still owed 5");
}

#[tokio::test]
async fn continuous_refills_slots_freed_by_release() {
    let h = Harness::new(
        r#"max_active = 5
admission = { mode = "continuous", max_per_minute = 600 }"#,
    )
    .await;
    let all = h.join_many("v", 50).await;
    assert_eq!(h.tick().await, 5);
    assert_eq!(h.step(1_000).await, 0, "full");
    let admitted = h.admitted(&all).await;
    for m in &admitted {
        assert!(h.redeem(m).await);
    }
    h.release(&admitted[0]).await;
    h.release(&admitted[1]).await;
    assert_eq!(h.step(1_000).await, 2, "two released slots refilled");
    let s = h.stats().await;
    assert_eq!(s.active + s.outstanding, 5);
}

#[derive(Clone)]
enum Health {
    Json(String),
    Status(u16),
}

async fn health(State(h): State<Arc<Mutex<Health>>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match h.lock().unwrap().clone() {
        Health::Json(body) => body.into_response(),
        Health::Status(s) => http::StatusCode::from_u16(s).unwrap().into_response(),
    }
}

/// A fake origin health endpoint on port 0 whose answer the test sets.
async fn fake_health() -> (std::net::SocketAddr, Arc<Mutex<Health>>) {
    let answer = Arc::new(Mutex::new(Health::Json(r#"{"concurrency": 0}"#.into())));
    let app = Router::new()
        .route("/health", get(health))
        .with_state(answer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, answer)
}

fn errors_metric(reason: &str) -> f64 {
    let text = anteroom::metrics::render();
    text.lines()
        .find(|l| {
            l.starts_with("anteroom_capacity_signal_errors_total")
                && l.contains("event=\"e\"")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn capacity_follows_the_health_field_and_admits_nothing_on_a_bad_signal() {
    anteroom::metrics::install();
    let (addr, answer) = fake_health().await;
    let h = Harness::new(&format!(
        r#"max_active = 100
admission = {{ mode = "capacity", health_url = "http://{addr}/health", field = "origin.in_flight", target = 20 }}"#
    ))
    .await;
    let all = h.join_many("v", 100).await;
    *answer.lock().unwrap() = Health::Json(r#"{"origin": {"in_flight": 5}}"#.into());
    assert_eq!(h.tick().await, 15, "up to the target of 20");
    assert_eq!(h.step(1_000).await, 0, "15 tokens on their way already");
    for m in h.admitted(&all).await {
        h.redeem(&m).await;
    }
    *answer.lock().unwrap() = Health::Json(r#"{"origin": {"in_flight": 12}}"#.into());
    assert_eq!(h.step(1_000).await, 8);

    // Every kind of bad answer: nothing new, and the metric says why.
    let cases = [
        (Health::Json("<html>busy</html>".into()), "garbage"),
        (
            Health::Json(r#"{"origin": {"in_flight": -3}}"#.into()),
            "garbage",
        ),
        (Health::Json(r#"{"other": 1}"#.into()), "garbage"),
        (Health::Status(503), "status"),
    ];
    for (case, reason) in cases {
        *answer.lock().unwrap() = Health::Json(r#"{"origin": {"in_flight": 0}}"#.into());
        let before = errors_metric(reason);
        *answer.lock().unwrap() = case;
        assert_eq!(h.step(1_000).await, 0, "{reason}");
        assert_eq!(errors_metric(reason), before + 1.0, "{reason}");
    }
}

#[tokio::test]
async fn capacity_with_an_unreachable_endpoint_admits_nobody() {
    anteroom::metrics::install();
    // A port that was free a moment ago: connection refused.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let h = Harness::new(&format!(
        r#"max_active = 100
admission = {{ mode = "capacity", health_url = "http://{addr}/health", target = 20 }}"#
    ))
    .await;
    h.join_many("v", 10).await;
    let before = errors_metric("unreachable");
    for _ in 0..3 {
        assert_eq!(h.step(1_000).await, 0);
    }
    assert_eq!(errors_metric("unreachable"), before + 3.0);
    assert_eq!(h.stats().await.outstanding, 0);
}

#[tokio::test]
async fn a_live_mode_change_keeps_the_learnt_no_shows() {
    let h = Harness::new(
        r#"max_active = 1000
token_ttl = "10s"
admission = { mode = "batch", batch_size = 20, interval = "1s" }"#,
    )
    .await;
    let all = h.join_many("v", 1000).await;
    // Half of the admitted visitors never redeem; tokens void after 10 s.
    let mut decided = std::collections::HashSet::new();
    for _ in 0..30 {
        h.step(1_000).await;
        for m in h.admitted(&all).await {
            if decided.insert(m.clone()) && decided.len() % 2 == 0 {
                h.redeem(&m).await;
            }
        }
    }
    let rt = h.rt();
    let learnt = lock(&rt.live.policy).state.as_ref().unwrap().no_show_rate();
    assert!(learnt > 0.3, "learnt {learnt}");
    // What PUT /admin/events/e does: a new config, same live state.
    let mut raw = rt.config.raw.clone();
    raw.admission = Some(anteroom::config::raw::RawAdmission {
        mode: Some("continuous".into()),
        max_per_minute: Some(60),
        ..Default::default()
    });
    let config = anteroom::config::event_from_raw("event", &raw).unwrap();
    let times = anteroom::config::stored::EventTimes {
        anchor_us: rt.anchor_us,
        created_us: rt.created_us,
    };
    assert!(!h.state.upsert_event(config, times).unwrap());
    h.step(1_000).await;
    let rt = h.rt();
    assert!(matches!(
        rt.config.admission,
        anteroom::config::Admission::Continuous { .. }
    ));
    let kept = lock(&rt.live.policy).state.as_ref().unwrap().no_show_rate();
    assert!(kept > 0.3, "kept {kept}");
    // The same table created again (deleted and made anew between two of
    // this node's looks at the store) is another event: nothing learnt of
    // the deleted one is kept, and its scheduler goes on with the new state.
    let times = anteroom::config::stored::EventTimes {
        anchor_us: rt.anchor_us,
        created_us: h.now_ms() * 1000,
    };
    assert!(!h.state.upsert_event(rt.config.clone(), times).unwrap());
    let fresh = h.rt();
    assert!(!std::sync::Arc::ptr_eq(&fresh.live, &rt.live));
    assert!(
        lock(&fresh.live.policy).state.is_none(),
        "the deleted event's policy was kept"
    );
    assert!(h.step(1_000).await > 0, "no admission after the creation");
    // A creation never goes back (a document read before the newer one was
    // stored, or rewritten by an earlier version without it): the event
    // keeps its creation and its state.
    let older = anteroom::config::stored::EventTimes {
        anchor_us: rt.anchor_us - 60_000_000,
        created_us: i64::MIN,
    };
    assert!(!h.state.upsert_event(fresh.config.clone(), older).unwrap());
    let kept = h.rt();
    assert_eq!(kept.created_us, times.created_us);
    assert_eq!(
        kept.anchor_us, fresh.anchor_us,
        "the deleted event's anchor came back"
    );
    assert!(std::sync::Arc::ptr_eq(&kept.live, &fresh.live));
    assert!(!kept.live.is_gone());
}
