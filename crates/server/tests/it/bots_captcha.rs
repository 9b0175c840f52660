//! The CAPTCHA hook against a local fake `siteverify` server on port 0:
//! success, failure, a slow provider, an unreachable one, and the form the
//! provider receives.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::bots::*;
use anteroom::bots::{
    BotDefence, BotRejection, BotsConfig, CaptchaConfig, ChallengeLevel, EnterAnswer, EnterVerdict,
    Entry, EventBots, HighRiskPolicy, RateLimits,
};
use anteroom::error::ApiError;
use anteroom_core::score::Placement;
use anteroom_store::QueueStore;
use axum::Router;
use axum::routing::post;

const NOW: i64 = 1_800_000_000_000;

/// A siteverify stand-in: `good` passes with secret `s3cret`, `slow` hangs.
async fn fake_provider() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().route(
        "/siteverify",
        post(move |body: String| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(body.clone());
                if body.contains("response=slow") {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                let ok = body.contains("secret=s3cret") && body.contains("response=good");
                let codes: &[&str] = if ok { &[] } else { &["invalid-input-response"] };
                axum::Json(serde_json::json!({"success": ok, "error-codes": codes}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/siteverify"), seen)
}

fn with_captcha(url: &str) -> BotDefence {
    let cfg = BotsConfig {
        captcha: Some(CaptchaConfig {
            verify_url: url.to_owned(),
            secret: "s3cret".into(),
            site_key: Some("site-key-1".into()),
            timeout: Duration::from_millis(300),
        }),
        ..BotsConfig::default()
    };
    defence(&cfg)
}

fn captcha_event() -> EventBots {
    EventBots {
        challenge: ChallengeLevel::Medium,
        difficulty: 8,
        high_risk: HighRiskPolicy::Captcha,
        adaptive_difficulty: false,
    }
}

async fn enter(
    d: &BotDefence,
    h: &http::HeaderMap,
    token: Option<&str>,
) -> Result<EnterVerdict, BotRejection> {
    let (_dir, store) = store().await;
    let answer = token.map(EnterAnswer::captcha);
    let req = signals(d, h, "100.64.0.9");
    let (ev, event, answer) = (captcha_event(), event(), answer.as_ref());
    let entry = Entry {
        ev: &ev,
        event: &event,
        session: "s1",
        req: &req,
        answer,
    };
    d.gate_enter(&entry, &store, NOW).await
}

fn reason_of(r: Result<EnterVerdict, BotRejection>) -> &'static str {
    match r {
        Err(BotRejection::CaptchaRequired { site_key, reason }) => {
            assert_eq!(site_key.as_deref(), Some("site-key-1"));
            reason
        }
        other => panic!("expected a captcha demand, got {other:?}"),
    }
}

#[tokio::test]
async fn high_risk_without_a_token_is_asked_for_one() {
    let (url, seen) = fake_provider().await;
    let d = with_captcha(&url);
    let got = enter(&d, &curl(), None).await;
    assert_eq!(reason_of(got), "captcha_required");
    assert!(seen.lock().unwrap().is_empty(), "nothing to verify yet");
    let api = ApiError::from(BotRejection::CaptchaRequired {
        site_key: Some("k".into()),
        reason: "captcha_required",
    });
    assert_eq!(
        (api.status().as_u16(), api.code()),
        (401, "challenge_required")
    );
}

#[tokio::test]
async fn verified_token_joins_normally() {
    let (url, seen) = fake_provider().await;
    let d = with_captcha(&url);
    let got = enter(&d, &curl(), Some("good")).await;
    assert_eq!(got.unwrap().placement(), Placement::ByArrival);
    let form = seen.lock().unwrap()[0].clone();
    assert_eq!(form, "secret=s3cret&response=good&remoteip=100.64.0.9");
}

#[tokio::test]
async fn refused_token_is_asked_again() {
    let (url, _) = fake_provider().await;
    let d = with_captcha(&url);
    assert_eq!(
        reason_of(enter(&d, &curl(), Some("bad")).await),
        "captcha_failed"
    );
    // Form-encoding keeps a hostile token from adding fields.
    assert_eq!(
        reason_of(enter(&d, &curl(), Some("x&response=good")).await),
        "captcha_failed"
    );
    assert_eq!(
        reason_of(enter(&d, &curl(), Some("")).await),
        "captcha_failed"
    );
    let huge = "g".repeat(10_000);
    assert_eq!(
        reason_of(enter(&d, &curl(), Some(&huge)).await),
        "captcha_failed"
    );
}

#[tokio::test]
async fn slow_or_unreachable_provider_is_not_verified() {
    let (url, _) = fake_provider().await;
    let d = with_captcha(&url);
    let started = Instant::now();
    assert_eq!(
        reason_of(enter(&d, &curl(), Some("slow")).await),
        "captcha_failed"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let d = with_captcha(&format!("http://{addr}/siteverify"));
    assert_eq!(
        reason_of(enter(&d, &curl(), Some("good")).await),
        "captcha_failed"
    );
}

#[tokio::test]
async fn medium_risk_still_solves_proof_of_work() {
    let (url, seen) = fake_provider().await;
    let d = with_captcha(&url);
    let mut medium = chrome();
    medium.remove("accept-language");
    let got = enter(&d, &medium, None).await;
    assert!(
        matches!(got, Err(BotRejection::ChallengeRequired { .. })),
        "{got:?}"
    );
    assert_eq!(
        enter(&d, &chrome(), None).await.unwrap().placement(),
        Placement::ByArrival
    );
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn captcha_policy_without_a_provider_places_at_the_back() {
    let d = defence(&BotsConfig::default());
    let ev = EventBots {
        challenge: ChallengeLevel::Off,
        ..captcha_event()
    };
    let (_dir, store) = store().await;
    let headers = curl();
    let req = signals(&d, &headers, "100.64.0.9");
    let event = event();
    let entry = Entry {
        ev: &ev,
        event: &event,
        session: "s1",
        req: &req,
        answer: None,
    };
    // Every high-risk arrival meets the missing provider, and any visitor
    // can look high-risk: it is said once, not once a visitor.
    let buf = crate::support::logs::LogBuf::default();
    let _guard = tracing::subscriber::set_default(buf.subscriber());
    for _ in 0..3 {
        let got = d.gate_enter(&entry, &store, NOW).await;
        assert_eq!(got.unwrap().placement(), Placement::Behind);
    }
    let text = buf.text();
    assert_eq!(
        text.matches("no bots.captcha configured").count(),
        1,
        "{text}"
    );
}

#[test]
fn only_plain_http_verify_urls_without_credentials_start() {
    for (url, why) in [
        (
            "https://challenges.cloudflare.com/turnstile/v0/siteverify",
            "must be an http:// URL",
        ),
        ("not a url", "not a URL"),
        ("/siteverify", "must be an http:// URL"),
        (
            "http://egress:hunter2@127.0.0.1:3128/siteverify",
            "must not carry credentials",
        ),
    ] {
        let cfg = BotsConfig {
            captcha: Some(CaptchaConfig {
                verify_url: url.into(),
                secret: "s3cret".into(),
                site_key: None,
                timeout: Duration::from_secs(1),
            }),
            ..BotsConfig::default()
        };
        let err = BotDefence::new(&cfg, RateLimits::default(), keyring())
            .err()
            .unwrap();
        assert!(err.to_string().contains("bots.captcha.verify_url"), "{err}");
        assert!(err.to_string().contains(why), "{url}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(
            !format!("{cfg:?}").contains("s3cret"),
            "the secret must not be logged"
        );
    }
}

/// Past the address's entry cap a CAPTCHA does not buy an arrival place:
/// one farmed CAPTCHA per entry would undercut the rising proof-of-work
/// price the cap asks of everyone else (and a bot can look high-risk on
/// purpose). Those entries join behind every verified visitor.
#[tokio::test]
async fn past_the_entry_cap_a_captcha_joins_behind() {
    let (url, _) = fake_provider().await;
    let cfg = BotsConfig {
        captcha: Some(CaptchaConfig {
            verify_url: url,
            secret: "s3cret".into(),
            site_key: Some("site-key-1".into()),
            timeout: Duration::from_millis(300),
        }),
        ..BotsConfig::default()
    };
    let limits = RateLimits {
        entries_per_ip: 2,
        ..RateLimits::default()
    };
    let d = BotDefence::new(&cfg, limits, crate::support::bots::keyring()).unwrap();
    for _ in 0..2 {
        match enter(&d, &curl(), Some("good")).await.unwrap() {
            EnterVerdict::Join {
                placement,
                entry: Some(entry),
            } => {
                assert_eq!(placement, Placement::ByArrival);
                entry.joined(NOW);
            }
            other => panic!("{other:?}"),
        }
    }
    let past = enter(&d, &curl(), Some("good")).await.unwrap();
    assert_eq!(past.placement(), Placement::Behind);
}

#[tokio::test]
async fn a_high_risk_visitor_in_the_queue_entering_again_is_not_asked_again() {
    let (url, seen) = fake_provider().await;
    let d = with_captcha(&url);
    let (_dir, store) = store().await;
    let headers = curl();
    let req = signals(&d, &headers, "100.64.0.9");
    let (ev, event) = (captcha_event(), event());
    let entry = Entry {
        ev: &ev,
        event: &event,
        session: "s1",
        req: &req,
        answer: None,
    };
    assert_eq!(
        reason_of(d.gate_enter(&entry, &store, NOW).await),
        "captcha_required"
    );
    let scoring = anteroom_core::score::JoinScoring::new(
        &anteroom_core::score::ScoreKey::new(SECRET.as_bytes()),
        "drop",
        "s1",
        0,
        0,
        Placement::Behind,
    );
    store.join(&event, "s1", &scoring).await.unwrap();
    // The page reloaded: its join changes nothing, so no second CAPTCHA.
    let verdict = d.gate_enter(&entry, &store, NOW + 1).await;
    assert!(
        matches!(verdict, Ok(EnterVerdict::Join { entry: None, .. })),
        "{verdict:?}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing was verified");
}
