//! The proof-of-work step of enter against the embedded store: challenge,
//! solve, join; replay, expiry, tampering, too-low difficulty and garbage
//! answers each earn a fresh challenge; the high-risk policies.

use crate::support::bots::*;
use anteroom::bots::{
    BotDefence, BotRejection, BotsConfig, ChallengeLevel, EnterAnswer, EnterVerdict, Entry,
    EventBots, HighRiskPolicy,
};
use anteroom::error::ApiError;
use anteroom_core::pow;
use anteroom_core::score::Placement;
use anteroom_store::QueueStore;
use http::HeaderMap;

const NOW: i64 = 1_800_000_000_000;
const SESSION: &str = "session-one";

fn ev(challenge: ChallengeLevel, high_risk: HighRiskPolicy) -> EventBots {
    EventBots {
        challenge,
        difficulty: 8,
        high_risk,
        adaptive_difficulty: false,
    }
}

async fn enter(
    d: &BotDefence,
    ev: &EventBots,
    h: &HeaderMap,
    answer: Option<&EnterAnswer>,
    store: &dyn QueueStore,
    now_ms: i64,
) -> Result<EnterVerdict, BotRejection> {
    let req = signals(d, h, "100.64.0.1");
    let (event, session) = (event(), SESSION);
    let entry = Entry {
        ev,
        event: &event,
        session,
        req: &req,
        answer,
    };
    d.gate_enter(&entry, store, now_ms).await
}

/// The challenge of a rejection, or a panic naming what came instead.
fn challenge_of(r: Result<EnterVerdict, BotRejection>) -> (String, u8, i64, &'static str) {
    match r {
        Err(BotRejection::ChallengeRequired {
            challenge,
            difficulty,
            expires_at_ms,
            reason,
        }) => (challenge, difficulty, expires_at_ms, reason),
        other => panic!("expected a challenge, got {other:?}"),
    }
}

#[tokio::test]
async fn challenge_then_solve_then_join() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let (challenge, difficulty, expires, reason) =
        challenge_of(enter(&d, &ev, &chrome(), None, &store, NOW).await);
    assert_eq!((difficulty, reason), (8, "challenge_required"));
    assert_eq!(expires, NOW + 120_000);
    let answer = EnterAnswer::pow(&challenge, pow::solve(&challenge, difficulty));
    let verdict = enter(&d, &ev, &chrome(), Some(&answer), &store, NOW + 1).await;
    assert_eq!(verdict.unwrap().placement(), Placement::ByArrival);
}

#[tokio::test]
async fn replayed_answer_gets_a_fresh_challenge() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let (challenge, difficulty, ..) =
        challenge_of(enter(&d, &ev, &chrome(), None, &store, NOW).await);
    let answer = EnterAnswer::pow(&challenge, pow::solve(&challenge, difficulty));
    enter(&d, &ev, &chrome(), Some(&answer), &store, NOW)
        .await
        .unwrap();
    let (fresh, _, _, reason) =
        challenge_of(enter(&d, &ev, &chrome(), Some(&answer), &store, NOW + 5).await);
    assert_eq!(reason, "challenge_used");
    assert_ne!(fresh, challenge);
    let api = ApiError::from(BotRejection::ChallengeRequired {
        challenge: fresh,
        difficulty: 8,
        expires_at_ms: NOW,
        reason,
    });
    assert_eq!(
        (api.status().as_u16(), api.code()),
        (401, "challenge_required")
    );
}

#[tokio::test]
async fn expired_answer_gets_a_fresh_challenge() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let (challenge, difficulty, expires, _) =
        challenge_of(enter(&d, &ev, &chrome(), None, &store, NOW).await);
    let answer = EnterAnswer::pow(&challenge, pow::solve(&challenge, difficulty));
    let (.., reason) =
        challenge_of(enter(&d, &ev, &chrome(), Some(&answer), &store, expires).await);
    assert_eq!(reason, "token_expired");
}

#[tokio::test]
async fn tampered_foreign_or_cheap_challenges_are_refused() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let keyring = keyring();
    let check = |challenge: String, reason: &'static str| {
        let d = d.clone();
        let store = &store;
        async move {
            let answer = EnterAnswer::pow(&challenge, pow::solve(&challenge, 8));
            let got = challenge_of(enter(&d, &ev, &chrome(), Some(&answer), store, NOW).await);
            assert_eq!(got.3, reason, "{challenge}");
        }
    };
    // Issued by us at difficulty 1: signed, but cheaper than the event asks.
    let cheap = pow::issue(&keyring, "drop", SESSION, 1, NOW, 60_000, [1; 16]);
    check(cheap, "pow_difficulty_too_low").await;
    let other_session = pow::issue(&keyring, "drop", "someone-else", 8, NOW, 60_000, [2; 16]);
    check(other_session, "token_wrong_session").await;
    let other_event = pow::issue(&keyring, "other", SESSION, 8, NOW, 60_000, [3; 16]);
    check(other_event, "token_wrong_event").await;
    let foreign =
        anteroom_core::token::Keyring::new(&["another-secret-that-is-32-bytes-or-more!!"]).unwrap();
    let forged = pow::issue(&foreign, "drop", SESSION, 8, NOW, 60_000, [4; 16]);
    check(forged, "token_unknown_key").await;
    // Flip one character of the signature.
    let genuine = pow::issue(&keyring, "drop", SESSION, 8, NOW, 60_000, [5; 16]);
    let mut bytes = genuine.into_bytes();
    let last = bytes.len() - 2;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    check(String::from_utf8(bytes).unwrap(), "token_bad_signature").await;
}

#[tokio::test]
async fn insufficient_work_is_refused() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let (challenge, difficulty, ..) =
        challenge_of(enter(&d, &ev, &chrome(), None, &store, NOW).await);
    let lazy = (0..)
        .find(|&n| pow::leading_zero_bits(&pow::hash(&challenge, n)) < u32::from(difficulty))
        .unwrap();
    let answer = EnterAnswer::pow(&challenge, lazy);
    let (.., reason) = challenge_of(enter(&d, &ev, &chrome(), Some(&answer), &store, NOW).await);
    assert_eq!(reason, "pow_insufficient_work");
}

#[tokio::test]
async fn garbage_answers_get_a_fresh_challenge() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let long = "A".repeat(100_000);
    let bodies = [
        (
            r#"{"challenge": "x.y", "nonce": -1}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": 1.5}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": 18446744073709551616}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": 1e300}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": "12ab"}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": {"n": 1}}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": "x.y", "nonce": null}"#.to_owned(),
            "answer_malformed",
        ),
        (
            r#"{"challenge": 42, "nonce": 1}"#.to_owned(),
            "answer_malformed",
        ),
        (r#"{"nonce": 1}"#.to_owned(), "answer_malformed"),
        (
            r#"{"challenge": "", "nonce": 1}"#.to_owned(),
            "token_malformed",
        ),
        (
            r#"{"challenge": "not.a.token", "nonce": "7"}"#.to_owned(),
            "token_malformed",
        ),
        (
            format!(r#"{{"challenge": "{long}", "nonce": 99999999999999999999}}"#),
            "answer_malformed",
        ),
        (
            format!(r#"{{"challenge": "{long}", "nonce": 1}}"#),
            "token_malformed",
        ),
        (r#"{}"#.to_owned(), "challenge_required"),
    ];
    for (body, reason) in bodies {
        let answer: EnterAnswer = serde_json::from_str(&body).unwrap();
        let got = challenge_of(enter(&d, &ev, &chrome(), Some(&answer), &store, NOW).await);
        assert_eq!(got.3, reason, "{}", &body[..body.len().min(80)]);
    }
    // Unknown fields are a 400 for the handler, not a silent pass.
    assert!(serde_json::from_str::<EnterAnswer>(r#"{"nonce": 1, "bypass": true}"#).is_err());
}

#[tokio::test]
async fn who_must_solve() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let medium = without_language(chrome());
    let cases = [
        (ChallengeLevel::Off, &curl(), false),
        (ChallengeLevel::High, &medium, false),
        (ChallengeLevel::High, &curl(), true),
        (ChallengeLevel::Medium, &chrome(), false),
        (ChallengeLevel::Medium, &medium, true),
        (ChallengeLevel::All, &chrome(), true),
    ];
    for (level, h, must_solve) in cases {
        let ev = ev(level, HighRiskPolicy::Allow);
        let got = enter(&d, &ev, h, None, &store, NOW).await;
        assert_eq!(got.is_err(), must_solve, "{level:?} {h:?}: {got:?}");
    }
}

fn without_language(mut h: HeaderMap) -> HeaderMap {
    h.remove("accept-language");
    h
}

#[tokio::test]
async fn high_risk_goes_behind_every_verified_visitor() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let off = ev(ChallengeLevel::Off, HighRiskPolicy::BackOfQueue);
    let got = enter(&d, &off, &curl(), None, &store, NOW).await.unwrap();
    assert_eq!(got.placement(), Placement::Behind);
    let got = enter(&d, &off, &chrome(), None, &store, NOW).await.unwrap();
    assert_eq!(got.placement(), Placement::ByArrival);
    let allow = ev(ChallengeLevel::Off, HighRiskPolicy::Allow);
    let got = enter(&d, &allow, &curl(), None, &store, NOW).await.unwrap();
    assert_eq!(got.placement(), Placement::ByArrival);

    // With a challenge too: solving it does not buy a normal place.
    let high = ev(ChallengeLevel::High, HighRiskPolicy::BackOfQueue);
    let (c, diff, ..) = challenge_of(enter(&d, &high, &curl(), None, &store, NOW).await);
    let answer = EnterAnswer::pow(&c, pow::solve(&c, diff));
    let got = enter(&d, &high, &curl(), Some(&answer), &store, NOW)
        .await
        .unwrap();
    assert_eq!(got.placement(), Placement::Behind);
}

#[tokio::test]
async fn reject_blocks_high_risk_only() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let reject = ev(ChallengeLevel::All, HighRiskPolicy::Reject);
    let got = enter(&d, &reject, &curl(), None, &store, NOW).await;
    assert!(matches!(got, Err(BotRejection::Blocked)), "{got:?}");
    let api = ApiError::from(got.unwrap_err());
    assert_eq!((api.status().as_u16(), api.code()), (403, "blocked"));
    let got = enter(&d, &reject, &chrome(), None, &store, NOW).await;
    assert!(
        matches!(got, Err(BotRejection::ChallengeRequired { .. })),
        "{got:?}"
    );
}

#[tokio::test]
async fn difficulty_rises_with_the_share_of_risky_arrivals() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let mut ev = ev(ChallengeLevel::High, HighRiskPolicy::Allow);
    ev.adaptive_difficulty = true;
    // 15 browsers and 5 scripts: 25 % risky, two extra bits.
    for i in 0..20 {
        let h = if i % 4 == 0 { curl() } else { chrome() };
        let _ = enter(&d, &ev, &h, None, &store, NOW + i).await;
    }
    assert_eq!(d.difficulty(&ev, &event(), NOW + 30), 10);
    let (.., difficulty, _, _) =
        challenge_of(enter(&d, &ev, &curl(), None, &store, NOW + 40).await);
    assert_eq!(difficulty, 10);
    // A minute later the window has emptied.
    assert_eq!(d.difficulty(&ev, &event(), NOW + 61_000), 8);
    // Capped at base + 4, however many scripts.
    for i in 0..40 {
        let _ = enter(&d, &ev, &curl(), None, &store, NOW + 70_000 + i).await;
    }
    assert_eq!(d.difficulty(&ev, &event(), NOW + 70_100), 12);
    ev.adaptive_difficulty = false;
    assert_eq!(d.difficulty(&ev, &event(), NOW + 70_100), 8);
}

#[test]
fn challenge_json_matches_the_api() {
    let api = ApiError::from(BotRejection::ChallengeRequired {
        challenge: "abc.def".into(),
        difficulty: 18,
        expires_at_ms: 1_796_119_392_412,
        reason: "challenge_required",
    });
    let ApiError::ChallengeRequired { challenge } = api else {
        panic!("{api:?}");
    };
    assert_eq!(
        challenge,
        serde_json::json!({"challenge": "abc.def", "difficulty": 18,
            "expiresAt": "2026-12-01T10:03:12.412Z", "reason": "challenge_required"})
    );
}

/// Joins `session` to the store as enter would after its bot check.
async fn join(store: &dyn QueueStore, session: &str) {
    let scoring = anteroom_core::score::JoinScoring::new(
        &anteroom_core::score::ScoreKey::new(SECRET.as_bytes()),
        "drop",
        session,
        0,
        0,
        Placement::ByArrival,
    );
    assert!(store.join(&event(), session, &scoring).await.unwrap().new);
}

#[tokio::test]
async fn a_visitor_in_the_queue_entering_again_is_not_asked_to_work_again() {
    let (_dir, store) = store().await;
    let d = defence(&BotsConfig::default());
    let ev = ev(ChallengeLevel::All, HighRiskPolicy::BackOfQueue);
    let (challenge, difficulty, ..) =
        challenge_of(enter(&d, &ev, &chrome(), None, &store, NOW).await);
    let answer = EnterAnswer::pow(&challenge, pow::solve(&challenge, difficulty));
    enter(&d, &ev, &chrome(), Some(&answer), &store, NOW + 1)
        .await
        .unwrap();
    join(&store, SESSION).await;
    // A reload of the waiting page, a second tab: the join changes nothing,
    // so neither a missing answer nor the spent one earns a challenge.
    for again in [None, Some(&answer)] {
        let verdict = enter(&d, &ev, &chrome(), again, &store, NOW + 2).await;
        assert!(
            matches!(verdict, Ok(EnterVerdict::Join { entry: None, .. })),
            "{verdict:?}"
        );
    }
    // Still in the queue after the admission: as known, so not asked.
    let admitted = store
        .admit(
            &event(),
            &anteroom_store::AdmitRequest {
                max: 1,
                max_active: 10,
                nonces: vec![[7; 16]],
                token_ttl_us: 60_000_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(admitted.len(), 1);
    let verdict = enter(&d, &ev, &chrome(), None, &store, NOW + 3).await;
    assert!(
        matches!(verdict, Ok(EnterVerdict::Join { .. })),
        "{verdict:?}"
    );
}
