//! The bot defence as wired into enter, over real sockets: proof-of-work
//! for a script, single-use answers, the high-risk policies with an IP
//! reputation file, and `X-Forwarded-For` believed only from trusted proxies.

use crate::support::server;
use crate::support::visitor::Visitor;
use crate::support::wired::{CHROME, CURL, ENTER, POSITION, call, start, with_xff};
use http::{Method, StatusCode};
use serde_json::{Value, json};

const MEDIUM: &str =
    r#"bots = { challenge = "medium", difficulty = 12, high_risk = "back_of_queue" }"#;

/// Asserts API.md's `401 challenge_required` shape; returns the challenge.
fn challenge_of(status: StatusCode, body: &Value) -> (String, u8) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "challenge_required", "{body}");
    assert!(body["message"].is_string(), "{body}");
    let c = &body["challenge"];
    assert!(c["expiresAt"].as_str().unwrap().ends_with('Z'), "{body}");
    assert!(c["reason"].is_string(), "{body}");
    (
        c["challenge"].as_str().unwrap().to_owned(),
        u8::try_from(c["difficulty"].as_u64().unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn a_script_solves_the_challenge_joins_and_its_answer_is_single_use() {
    let s = start(
        "[limits]\nper_ip_per_second = 0\nentries_per_ip = 0\nper_session_per_second = 0",
        MEDIUM,
    )
    .await;
    let mut bot = Visitor::default();
    let (status, _, body) = call(&s, &mut bot, Method::POST, ENTER, CURL, None).await;
    let (challenge, difficulty) = challenge_of(status, &body);
    assert_eq!(difficulty, 12);
    assert_eq!(body["challenge"]["reason"], "challenge_required");
    // The challenge is bound to the session it was issued with, so that
    // session's cookie comes with it.
    assert!(bot.cookie("__Host-anteroom_sid").is_some());

    let nonce = anteroom_core::pow::solve(&challenge, difficulty);
    let answer = json!({ "challenge": challenge, "nonce": nonce });
    let (status, _, joined) = call(&s, &mut bot, Method::POST, ENTER, CURL, Some(&answer)).await;
    assert_eq!(status, StatusCode::OK, "{joined}");
    assert_eq!(joined["status"], "WAITING", "{joined}");

    // The same answer from another session: a fresh challenge, not a join.
    let mut thief = Visitor::default();
    let (status, _, body) = call(&s, &mut thief, Method::POST, ENTER, CURL, Some(&answer)).await;
    let (fresh, _) = challenge_of(status, &body);
    assert_ne!(fresh, challenge);
    let (_, _, p) = call(&s, &mut thief, Method::GET, POSITION, CURL, None).await;
    assert_eq!(p["status"], "NONE", "{p}");

    // And again from the session that solved it, now in the queue (a
    // reload, a second tab): its join changes nothing, so it is not asked
    // again, with the spent answer or without one, and is told where it
    // stands (the queue moves a visitor every 100 ms here: admitted by now,
    // maybe).
    for again in [Some(&answer), None] {
        let (status, _, body) = call(&s, &mut bot, Method::POST, ENTER, CURL, again).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let place = body["status"].as_str().unwrap_or_default();
        assert!(["WAITING", "ADMITTED"].contains(&place), "{body}");
        if place == "WAITING" {
            assert!(
                body["position"].as_u64() <= joined["position"].as_u64(),
                "{body}"
            );
        }
    }

    // A garbage answer is a fresh challenge too, never a 400 or a panic.
    let garbage = json!({ "challenge": 7, "nonce": "-1e999" });
    let (status, _, body) = call(&s, &mut thief, Method::POST, ENTER, CURL, Some(&garbage)).await;
    challenge_of(status, &body);

    // A browser is not asked to work.
    let mut person = Visitor::default();
    let (status, _, body) = call(&s, &mut person, Method::POST, ENTER, CHROME, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    s.stop().await;
}

/// A known-bot list holding 203.0.113.0/24, and loopback (every test
/// client's peer) as the trusted proxy.
fn known_bots(dir: &std::path::Path, trusted: bool) -> String {
    let file = dir.join("known_bot.txt");
    std::fs::write(&file, "# test list\n203.0.113.0/24\n").unwrap();
    let trusted = if trusted { r#"["127.0.0.1/32"]"# } else { "[]" };
    format!(
        "[limits]\nper_ip_per_second = 0\nentries_per_ip = 0\nper_session_per_second = 0\ntrusted_proxies = {trusted}\n\
         [bots]\nreputation = {{ known_bot = \"{}\" }}\n",
        file.display()
    )
}

#[tokio::test]
async fn reject_blocks_a_known_bot_address_behind_a_trusted_proxy_only() {
    let lists = tempfile::tempdir().unwrap();
    let reject = r#"bots = { challenge = "off", high_risk = "reject" }"#;
    let s = start(&known_bots(lists.path(), true), reject).await;
    let mut v = Visitor::default();
    let bot = with_xff(CHROME, "203.0.113.7");
    let (status, _, body) = call(&s, &mut v, Method::POST, ENTER, &bot, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("blocked")),
        "{body}"
    );
    // The right-most untrusted hop counts: a client cannot hide behind a
    // clean address it writes itself further left.
    let spoof = with_xff(CHROME, "198.51.100.1, 203.0.113.7");
    let (status, _, _) = call(&s, &mut v, Method::POST, ENTER, &spoof, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let clean = with_xff(CHROME, "198.51.100.1");
    let (status, _, body) = call(&s, &mut v, Method::POST, ENTER, &clean, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    s.stop().await;

    // Without trusted proxies the header is the client's own word: ignored.
    let s = start(&known_bots(lists.path(), false), reject).await;
    let mut v = Visitor::default();
    let (status, _, body) = call(&s, &mut v, Method::POST, ENTER, &bot, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    s.stop().await;
}

#[tokio::test]
async fn back_of_queue_ranks_a_risky_visitor_behind_a_later_verified_one() {
    let lists = tempfile::tempdir().unwrap();
    let back = r#"bots = { challenge = "off", high_risk = "back_of_queue" }"#;
    let s = start(&known_bots(lists.path(), true), back).await;
    // The event lets its first batch (one visitor) in at the first tick and
    // nobody for an hour after: a first visitor takes that place, so the two
    // below stay WAITING whenever the scheduler's first tick comes.
    let mut holder = Visitor::default();
    call(&s, &mut holder, Method::POST, ENTER, CHROME, None).await;
    server::poll_until(&holder, &s.url(POSITION), "ADMITTED").await;
    let mut risky = Visitor::default();
    let risky_headers = with_xff(CHROME, "203.0.113.7");
    let (status, _, p) = call(&s, &mut risky, Method::POST, ENTER, &risky_headers, None).await;
    assert_eq!(
        (status, p["rank"].as_u64()),
        (StatusCode::OK, Some(0)),
        "{p}"
    );

    let mut person = Visitor::default();
    let person_headers = with_xff(CHROME, "198.51.100.1");
    let (_, _, p) = call(&s, &mut person, Method::POST, ENTER, &person_headers, None).await;
    assert_eq!(
        p["rank"].as_u64(),
        Some(0),
        "arrived later, ranks first: {p}"
    );
    let (_, _, p) = call(&s, &mut risky, Method::GET, POSITION, &risky_headers, None).await;
    assert_eq!(
        (p["status"].as_str(), p["rank"].as_u64()),
        (Some("WAITING"), Some(1)),
        "{p}"
    );
    s.stop().await;
}
