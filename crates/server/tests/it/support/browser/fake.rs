//! A tiny in-process stand-in for the Anteroom server, enough to drive the
//! waiting page in Chromium: the real `page::Pages` render and static assets
//! behind the real CSP, and scripted `/api/queue/*` answers the test steers
//! (challenge first, then the rank it sets, then admission).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use anteroom::page::{Lang, PageContext, Pages, content_security_policy, static_asset};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub const TOKEN: &str = "tok-1";

/// What the fake answers; the test changes it while the page polls.
#[derive(Debug, Clone)]
pub struct Script {
    /// Proof-of-work difficulty asked at the first enter, if any.
    pub difficulty: Option<u8>,
    pub rank: u64,
    pub queue_length: u64,
    pub wait_seconds: u64,
    pub display: String,
    pub poll_after_ms: u64,
    pub admitted: bool,
    /// The line opens this far ahead of every answer's `timestamp`
    /// (`NOT_OPEN`, the pre-window a minute before it); nobody joins.
    pub opens_in_ms: Option<i64>,
    /// Enter asks for a CAPTCHA until it gets the token `good`.
    pub captcha: bool,
    /// The proof-of-work worker's script is refused (`503`) this many times.
    pub worker_refusals: u32,
    /// Redeems refused with `409 event_paused` (`Retry-After: 1`) before
    /// one is let through.
    pub paused_redeems: u32,
    // Observations.
    pub challenge: Option<String>,
    pub solved_nonce: Option<u64>,
    pub rejected_answers: u32,
    pub enters: u32,
    pub polls: u32,
    pub redeemed: bool,
    pub redeems: u32,
    /// The CAPTCHA tokens enter was given, in order.
    pub captcha_tokens: Vec<String>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            difficulty: None,
            rank: 2,
            queue_length: 40,
            wait_seconds: 150,
            display: "about 3 minutes".to_owned(),
            poll_after_ms: 300,
            admitted: false,
            opens_in_ms: None,
            captcha: false,
            worker_refusals: 0,
            paused_redeems: 0,
            challenge: None,
            solved_nonce: None,
            rejected_answers: 0,
            enters: 0,
            polls: 0,
            redeemed: false,
            redeems: 0,
            captcha_tokens: Vec::new(),
        }
    }
}

pub struct Fake {
    pages: Pages,
    script: Mutex<Script>,
}

impl Fake {
    pub fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Serves the fake on a free port; it lives as long as the test's runtime.
pub async fn start(script: Script) -> (Arc<Fake>, SocketAddr) {
    let fake = Arc::new(Fake {
        pages: Pages::new(&HashMap::new()).unwrap(),
        script: Mutex::new(script),
    });
    let app = Router::new()
        .route("/queue/{event}", get(page))
        .route("/_anteroom/{file}", get(asset))
        .route("/api/queue/enter", post(enter))
        .route("/api/queue/position", get(position))
        .route("/api/queue/redeem", post(redeem))
        .route("/protected", get(protected))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fake, addr)
}

async fn page(
    State(fake): State<Arc<Fake>>,
    Path(event): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let nonce = format!("{:032x}", rand::random::<u128>());
    let ctx = PageContext {
        event_id: event,
        event_name: Some("Winter drop".to_owned()),
        return_path: query
            .get("return")
            .cloned()
            .unwrap_or_else(|| "/".to_owned()),
        lang: Lang::from_accept_language(accept),
        position: None,
        nonce: nonce.clone(),
        refusal: None,
        jitter: 0.5,
    };
    let html = fake.pages.render(&ctx).unwrap();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_owned()),
            (
                header::CONTENT_SECURITY_POLICY,
                content_security_policy(&nonce),
            ),
        ],
        html,
    )
        .into_response()
}

async fn asset(State(fake): State<Arc<Fake>>, Path(file): Path<String>) -> Response {
    if file == "pow-worker.js" {
        let mut s = fake.script();
        if s.worker_refusals > 0 {
            s.worker_refusals -= 1;
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    match static_asset(&file) {
        Some((content_type, body)) => {
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn position_json(s: &Script) -> Value {
    if let Some(ahead) = s.opens_in_ms {
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        let at = |ms: i64| anteroom::clock::rfc3339_ms(now + ms);
        return json!({"eventId": "demo", "status": "NOT_OPEN", "rank": null, "position": null,
            "queueLength": 0, "pollAfterMs": s.poll_after_ms, "token": null, "redirect": null,
            "timestamp": at(0), "opensAt": at(ahead), "preWindowStartsAt": at(ahead - 60_000)});
    }
    if s.admitted {
        return json!({"eventId": "demo", "status": "ADMITTED", "rank": null, "position": null,
            "queueLength": s.queue_length, "estimatedWaitSeconds": 0, "display": "almost there",
            "pollAfterMs": s.poll_after_ms, "token": TOKEN, "redirect": "/protected"});
    }
    json!({"eventId": "demo", "status": "WAITING", "rank": s.rank, "position": s.rank + 1,
        "queueLength": s.queue_length, "estimatedWaitSeconds": s.wait_seconds, "display": s.display,
        "pollAfterMs": s.poll_after_ms, "token": null, "redirect": null})
}

fn challenge_required(s: &mut Script, difficulty: u8) -> Response {
    let challenge = format!("fake-challenge-{:032x}", rand::random::<u128>());
    s.challenge = Some(challenge.clone());
    let body = json!({"error": "challenge_required", "message": "solve this",
        "challenge": {"challenge": challenge, "difficulty": difficulty, "expiresAt": "2099-01-01T00:00:00Z"}});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

async fn enter(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    let mut s = fake.script();
    s.enters += 1;
    if s.captcha {
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let token = answer["captchaToken"].as_str().map(str::to_owned);
        let reason = if token.is_some() {
            "captcha_failed"
        } else {
            "captcha_required"
        };
        if let Some(t) = token {
            s.captcha_tokens.push(t.clone());
            if t == "good" {
                s.captcha = false;
                return axum::Json(position_json(&s)).into_response();
            }
        }
        let body = json!({"error": "challenge_required", "message": "prove it",
            "challenge": {"captcha": {"siteKey": "site-key-1"}, "reason": reason}});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    if let (Some(difficulty), None) = (s.difficulty, s.solved_nonce) {
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (Some(challenge), Some(nonce)) =
            (answer["challenge"].as_str(), answer["nonce"].as_u64())
        else {
            return challenge_required(&mut s, difficulty);
        };
        // Verified with the core's own functions, as the real server does.
        let bits =
            anteroom_core::pow::leading_zero_bits(&anteroom_core::pow::hash(challenge, nonce));
        if s.challenge.as_deref() != Some(challenge) || bits < u32::from(difficulty) {
            s.rejected_answers += 1;
            return challenge_required(&mut s, difficulty);
        }
        s.solved_nonce = Some(nonce);
    }
    axum::Json(position_json(&s)).into_response()
}

async fn position(State(fake): State<Arc<Fake>>) -> Response {
    let mut s = fake.script();
    s.polls += 1;
    // Not in the line until the challenge is answered.
    if (s.difficulty.is_some() && s.solved_nonce.is_none()) || s.captcha {
        return axum::Json(json!({"eventId": "demo", "status": "NONE", "rank": null,
            "position": null, "queueLength": s.queue_length, "pollAfterMs": s.poll_after_ms,
            "token": null, "redirect": null}))
        .into_response();
    }
    axum::Json(position_json(&s)).into_response()
}

async fn redeem(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    let mut s = fake.script();
    s.redeems += 1;
    if s.admitted && s.paused_redeems > 0 {
        s.paused_redeems -= 1;
        return (
            StatusCode::CONFLICT,
            [(header::RETRY_AFTER, "1")],
            axum::Json(json!({"error": "event_paused", "message": "paused"})),
        )
            .into_response();
    }
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !s.admitted || s.redeemed || answer["token"] != TOKEN {
        return (
            StatusCode::CONFLICT,
            axum::Json(json!({"error": "token_used", "message": "no"})),
        )
            .into_response();
    }
    s.redeemed = true;
    (
        [(
            header::SET_COOKIE,
            "anteroom_pass=ok; Path=/; HttpOnly; SameSite=Strict",
        )],
        axum::Json(json!({"status": "ACTIVE", "pass": "ok", "expiresAt": "2099-01-01T00:00:00Z"})),
    )
        .into_response()
}

/// Plays the gate: without the pass, a browser is sent to the waiting page
/// with its original path and query as `return`.
async fn protected(uri: Uri, headers: HeaderMap) -> Response {
    let cookies = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if cookies.split(';').any(|c| c.trim() == "anteroom_pass=ok") {
        return (
            [(header::CONTENT_TYPE, "text/html")],
            "<!doctype html><title>origin</title><p id=arrived>arrived</p>",
        )
            .into_response();
    }
    let original = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let encoded =
        percent_encoding::utf8_percent_encode(original, percent_encoding::NON_ALPHANUMERIC);
    (
        StatusCode::FOUND,
        [(header::LOCATION, format!("/queue/demo?return={encoded}"))],
    )
        .into_response()
}
