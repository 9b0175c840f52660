//! The crowd against a tiny fake of Anteroom's queue API (strict FIFO, batch
//! admission, proof-of-work for bot-like visitors), so the simulator's own
//! plumbing — cookies, challenges, polling, redeem, release, the report — is
//! checked without the real server. The real server's smoke test is `smoke.rs`.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use anteroom_sim::{
    crowd::{Arrival, CrowdArgs, OriginSource, simulate},
    http::{HttpArgs, measure},
};

use crate::support::crowd;
use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};

#[derive(Default)]
struct Queue {
    next_sid: u64,
    waiting: VecDeque<String>,
    admitted: HashMap<String, String>,
    active: HashMap<String, ()>,
}

type Shared = Arc<Mutex<Queue>>;

fn sid_of(h: &HeaderMap) -> Option<String> {
    let cookies = h.get(header::COOKIE)?.to_str().ok()?;
    cookies
        .split("; ")
        .find_map(|c| c.strip_prefix("anteroom_sid="))
        .map(str::to_owned)
}

fn position(q: &Queue, sid: &str) -> Value {
    if let Some(token) = q.admitted.get(sid) {
        return json!({"status": "ADMITTED", "token": token, "pollAfterMs": 50});
    }
    if q.active.contains_key(sid) {
        return json!({"status": "ACTIVE", "pollAfterMs": 50});
    }
    match q.waiting.iter().position(|s| s == sid) {
        Some(rank) => {
            json!({"status": "WAITING", "rank": rank, "estimatedWaitSeconds": 5 + rank / 10, "pollAfterMs": 50})
        }
        None => json!({"status": "NONE", "pollAfterMs": 50}),
    }
}

async fn enter(State(q): State<Shared>, h: HeaderMap, body: axum::body::Bytes) -> Response {
    let bot = h.get(header::ACCEPT_LANGUAGE).is_none();
    if bot {
        // Bots answer a 4-bit challenge first.
        let answered: Option<Value> = serde_json::from_slice(&body).ok();
        let ok = answered.is_some_and(|a| {
            let (c, n) = (
                a["challenge"].as_str().unwrap_or(""),
                a["nonce"].as_u64().unwrap_or(0),
            );
            c == "fake"
                && anteroom_core::pow::leading_zero_bits(&anteroom_core::pow::hash(c, n)) >= 4
        });
        if !ok {
            let body = json!({"error": "challenge_required", "message": "solve", "challenge": {"challenge": "fake", "difficulty": 4}});
            return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
        }
    }
    let mut q = q.lock().unwrap();
    let sid = match sid_of(&h) {
        Some(s) => s,
        None => {
            q.next_sid += 1;
            format!("s{}", q.next_sid)
        }
    };
    if !q.waiting.contains(&sid) && !q.admitted.contains_key(&sid) {
        q.waiting.push_back(sid.clone());
    }
    let cookie = format!("anteroom_sid={sid}; HttpOnly; Path=/");
    ([(header::SET_COOKIE, cookie)], Json(position(&q, &sid))).into_response()
}

async fn poll(State(q): State<Shared>, h: HeaderMap) -> Json<Value> {
    let q = q.lock().unwrap();
    Json(position(&q, &sid_of(&h).unwrap_or_default()))
}

async fn redeem(State(q): State<Shared>, h: HeaderMap, Json(body): Json<Value>) -> Response {
    let mut q = q.lock().unwrap();
    let sid = sid_of(&h).unwrap_or_default();
    if q.admitted.get(&sid).map(String::as_str) != body["token"].as_str() {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_token"})),
        )
            .into_response();
    }
    q.admitted.remove(&sid);
    q.active.insert(sid.clone(), ());
    let cookie = format!("anteroom_pass=p-{sid}; HttpOnly; Path=/");
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({"status": "ACTIVE", "pass": format!("p-{sid}")})),
    )
        .into_response()
}

async fn release(State(q): State<Shared>, h: HeaderMap) -> StatusCode {
    q.lock()
        .unwrap()
        .active
        .remove(&sid_of(&h).unwrap_or_default());
    StatusCode::NO_CONTENT
}

async fn gate(State(page): State<Duration>, h: HeaderMap) -> StatusCode {
    tokio::time::sleep(page).await;
    let cookies = h
        .get(header::COOKIE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("");
    if cookies.contains("anteroom_pass=") {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    }
}

/// A token the simulator can date: Anteroom's layout, its issue time (ms
/// on the fake's wall clock) at bytes 6..14 of the payload.
fn token(n: u64, issued_ms: i64) -> String {
    use base64::Engine as _;
    let mut payload = vec![0u8; 6];
    payload.extend_from_slice(&issued_ms.to_be_bytes());
    payload.extend_from_slice(&n.to_be_bytes());
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
    format!("{text}.sig")
}

/// Serves the fake and admits up to 25 every 20 ms while under 20 active.
async fn start_fake() -> String {
    start_fake_with_clock(|_| 0).await
}

/// The fake, its wall clock ahead of the true one by `ahead_ms(since its
/// start)` on the tokens it issues.
async fn start_fake_with_clock(ahead_ms: fn(Duration) -> i64) -> String {
    start_fake_at(ahead_ms, Duration::ZERO).await
}

/// The fake, its clock as [`start_fake_with_clock`] says, its origin taking
/// `page` to answer each page through the gate.
async fn start_fake_at(ahead_ms: fn(Duration) -> i64, page: Duration) -> String {
    let q: Shared = Arc::default();
    let app = Router::new()
        .route("/api/queue/enter", post(enter))
        .route("/api/queue/position", get(poll))
        .route("/api/queue/redeem", post(redeem))
        .route("/api/queue/release", post(release))
        .with_state(q.clone())
        .fallback_service(Router::new().fallback(gate).with_state(page));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    tokio::spawn(async move {
        let mut n = 0u64;
        let started = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut q = q.lock().unwrap();
            let room = 20usize
                .saturating_sub(q.active.len() + q.admitted.len())
                .min(25);
            for _ in 0..room {
                let Some(sid) = q.waiting.pop_front() else {
                    break;
                };
                n += 1;
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                q.admitted
                    .insert(sid, token(n, now_ms + ahead_ms(started.elapsed())));
            }
        }
    });
    format!("http://{addr}")
}

fn args(target: String) -> CrowdArgs {
    CrowdArgs {
        visitors: 200,
        arrival: Arrival::Poisson,
        rate: 2000.0,
        bots: 0.2,
        max_active: Some(20),
        connections: 64,
        seed: 3,
        ..crowd(target, "drop")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crowd_against_a_fifo_fake_is_judged_fair() {
    let outcome = simulate(&args(start_fake().await), OriginSource::None)
        .await
        .unwrap();
    let r = &outcome.report;
    println!("{}", anteroom_sim::report::render_text(r));
    assert_eq!(r.visitors, 200);
    assert_eq!(r.admitted, 200, "{r:#?}");
    assert_eq!(r.redeemed, 200, "{r:#?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.inversions, 0, "{r:#?}");
    assert!(r.challenges_solved > 0, "bots were challenged: {r:#?}");
    assert_eq!(r.server_clock_ahead_ms, 0.0, "the clocks agree: {r:#?}");
    assert!(r.max_active_observed <= 20, "{r:#?}");
    assert!(r.polls_per_visitor > 0.0);
    assert!(!outcome.timeline.is_empty());
    assert_eq!(r.completed, 200, "{r:#?}");
    assert_eq!(r.gave_up, 0, "{r:#?}");
    assert!(
        r.sim.connects <= 64,
        "one socket per pooled connection: {r:#?}"
    );
    assert!(
        r.sim.requests >= 200 * 7,
        "enter, poll, redeem, 4 pages, release: {r:#?}"
    );
    let json = serde_json::to_value(r).unwrap();
    for key in [
        "visitors",
        "admitted",
        "inversions",
        "kendall_tau",
        "max_origin_concurrency",
        "max_active",
        "eta_honest_share",
        "first_eta_to_wait_median",
        "polls_per_visitor",
        "errors",
        "bot_admitted_share",
        "human_admitted_share",
        "duration_s",
        "completed",
        "gave_up",
        "sim_cpu_share",
        "sim_lag_p99_ms",
        "bottleneck",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
}

/// The fake's wall clock runs ahead of the crowd's, by 300 ms and then
/// 0.5 ms more every second (a clock being slewed after a VM snapshot did
/// much the same): every token time lies after its visitor saw the
/// admission, however loaded the box. The report measures the excess and takes it out, and the
/// FIFO fake is still judged fair, not on when each visitor happened to
/// learn of its admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_clock_running_ahead_is_measured_not_judged_unfair() {
    let fake = start_fake_with_clock(|t| 300 + t.as_millis() as i64 / 2_000).await;
    let outcome = simulate(&args(fake), OriginSource::None).await.unwrap();
    let r = &outcome.report;
    assert_eq!(r.admitted, 200, "{r:#?}");
    assert!(r.server_clock_ahead_ms >= 200.0, "{r:#?}");
    assert_eq!(r.inversions, 0, "{r:#?}");
    let lag = r.admission_to_visitor_p50_ms.unwrap();
    assert!(lag > 0.0, "token times left on the visitors' own: {r:#?}");
}

/// A session lasts `--browse`, however slow the origin: each page is due at
/// a fixed offset from the redeem, so an origin taking 100 ms a page leaves
/// the session at 800 ms (it would be 1,200 ms were each page followed by
/// a whole pause), and `max_active` / `--browse` stays what it allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_origin_does_not_lengthen_a_session() {
    let fake = start_fake_at(|_| 0, Duration::from_millis(100)).await;
    let args = CrowdArgs {
        visitors: 40,
        bots: 0.0,
        browse: 800,
        ..args(fake)
    };
    let outcome = simulate(&args, OriginSource::None).await.unwrap();
    let r = &outcome.report;
    assert_eq!(r.completed, 40, "{r:#?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let session = r.slot_hold.expect("slots given back").session_mean_ms;
    assert!(
        (800.0..1_000.0).contains(&session),
        "a session of 800 ms, plus its release: {session} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_benchmark_measures_every_figure_against_the_fake() {
    let target = start_fake().await;
    let args = HttpArgs {
        target: target.clone(),
        event: Some("drop".into()),
        // The fake's gate answers 200 to a request carrying a pass cookie
        // and 429 otherwise: a baseline that fails is counted, not hidden.
        baseline: Some(format!("{target}/baseline")),
        baseline_proxy: None,
        origin: None,
        path: "/".into(),
        duration: 1,
        connections: 4,
        json: true,
    };
    let figures = measure(&args).await.unwrap();
    let names: Vec<&str> = figures.iter().map(|f| f.name).collect();
    assert_eq!(names, ["gate", "position_polls", "joins"]);
    for f in &figures {
        assert!(f.target.ok > 0, "{f:?}");
        assert!(f.baseline.is_some(), "{f:?}");
    }
}
