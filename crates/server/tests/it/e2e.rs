//! End-to-end: a real server on port 0, a real origin, real sockets.

use crate::support::config::{ADMIN_TOKEN, Event};
use crate::support::origin::Origin;
use crate::support::server;
use crate::support::visitor::Visitor;

use crate::support::server::{TestServer, wait_until};
use http::{Method, StatusCode};
use serde_json::Value;

const ENTER: &str = "/api/queue/enter?eventId=tickets";
const POSITION: &str = "/api/queue/position?eventId=tickets";
const REDEEM: &str = "/api/queue/redeem?eventId=tickets";
const RELEASE: &str = "/api/queue/release?eventId=tickets";

/// Enters and polls until ADMITTED; returns the admission token.
async fn admitted(s: &TestServer, v: &mut Visitor) -> String {
    let (status, _) = v.json(Method::POST, &s.url(ENTER), None).await;
    assert_eq!(status, StatusCode::OK);
    let p = server::poll_until(v, &s.url(POSITION), "ADMITTED").await;
    p["token"].as_str().unwrap().to_owned()
}

async fn redeem(s: &TestServer, v: &mut Visitor, token: &str) -> (StatusCode, Value) {
    v.json(
        Method::POST,
        &s.url(REDEEM),
        Some(&serde_json::json!({ "token": token }).to_string()),
    )
    .await
}

#[tokio::test]
async fn a_visitor_walks_from_enter_to_the_origin_and_releases() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    let (status, _, body) = v.call(Method::POST, &s.url(ENTER), &[], None).await;
    assert_eq!(status, StatusCode::OK);
    let p: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        ["WAITING", "ADMITTED"].contains(&p["status"].as_str().unwrap()),
        "{p}"
    );
    let sid = v
        .set_cookies
        .iter()
        .find(|c| c.starts_with("__Host-anteroom_sid="))
        .unwrap()
        .clone();
    assert!(
        sid.contains("HttpOnly")
            && sid.contains("Secure")
            && sid.contains("SameSite=Lax")
            && sid.contains("Path=/"),
        "{sid}"
    );

    let token = admitted(&s, &mut v).await;
    let (status, body) = redeem(&s, &mut v, &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ACTIVE");
    assert!(body["pass"].is_string() && body["expiresAt"].is_string());
    let pass = v.set_cookies.last().unwrap().clone();
    assert!(
        pass.starts_with("__Host-anteroom_pass=")
            && pass.contains("HttpOnly")
            && pass.contains("Secure")
            && pass.contains("SameSite=None"),
        "{pass}"
    );

    let (status, _, body) = v
        .call(Method::GET, &s.url("/tickets/seat/7?x=1"), &[], None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "origin saw /tickets/seat/7?x=1");
    let seen = s.origin.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen.1.as_deref(), Some("tickets"));
    assert_eq!(seen.2.as_deref(), v.cookie("__Host-anteroom_sid"));
    let (_, p) = v.json(Method::GET, &s.url(POSITION), None).await;
    assert_eq!(p["status"], "ACTIVE");

    // A sibling subdomain's form is same-site to the browser and carries the
    // `Lax` session cookie: its release is refused and the session goes on.
    for site in ["same-site", "cross-site"] {
        let (status, _, body) = v
            .call(
                Method::POST,
                &s.url(RELEASE),
                &[("sec-fetch-site", site)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{site}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "forbidden", "{site}");
    }
    let (_, p) = v.json(Method::GET, &s.url(POSITION), None).await;
    assert_eq!(p["status"], "ACTIVE", "a refused release ended the session");
    let (status, _, _) = v
        .call(
            Method::POST,
            &s.url(RELEASE),
            &[("sec-fetch-site", "same-origin")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The replayed old pass stops working within 2 s on this node.
    let old_pass = pass
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("__Host-anteroom_pass=")
        .to_owned();
    let mut replay = v.clone();
    replay
        .cookies
        .push(("__Host-anteroom_pass".into(), old_pass));
    let url = s.url("/tickets/seat/7");
    wait_until("released pass refused", || {
        let mut r = replay.clone();
        let url = url.clone();
        async move {
            r.call(Method::GET, &url, &[("accept", "application/json")], None)
                .await
                .0
                == StatusCode::TOO_MANY_REQUESTS
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn redeeming_twice_is_409_and_bad_tokens_are_401() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    let token = admitted(&s, &mut v).await;

    // Another session cannot use it.
    let mut thief = Visitor::default();
    thief.json(Method::POST, &s.url(ENTER), None).await;
    let (status, body) = redeem(&s, &mut thief, &token).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_token"))
    );
    // Nor for another event.
    let other = "/api/queue/redeem?eventId=other";
    let (status, _) = v
        .json(
            Method::POST,
            &s.url(other),
            Some(&format!("{{\"token\":\"{token}\"}}")),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A forged one (one signature byte changed) is refused.
    let mut forged = token.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let (status, _) = redeem(&s, &mut v, std::str::from_utf8(&forged).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, _) = redeem(&s, &mut v, &token).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = redeem(&s, &mut v, &token).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("token_used"))
    );
    s.stop().await;
}

#[tokio::test]
async fn an_unredeemed_token_expires_and_frees_its_slot() {
    let s = TestServer::start("token_ttl = \"400ms\"").await;
    let mut first = Visitor::default();
    let token = admitted(&s, &mut first).await;
    let mut second = Visitor::default();
    admitted(&s, &mut second).await;
    // max_active = 2 is used up by two outstanding tokens: a third waits...
    let mut third = Visitor::default();
    third.json(Method::POST, &s.url(ENTER), None).await;
    // ...until they expire unredeemed.
    server::poll_until(&third, &s.url(POSITION), "ADMITTED").await;
    let (status, _) = redeem(&s, &mut first, &token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    s.stop().await;
}

#[tokio::test]
async fn refresh_keeps_the_rank_and_two_visitors_keep_their_order() {
    let s = TestServer::start("").await;
    s.pause("tickets", "pause").await;
    let (mut a, mut b) = (Visitor::default(), Visitor::default());
    let (_, pa) = a.json(Method::POST, &s.url(ENTER), None).await;
    let (_, pb) = b.json(Method::POST, &s.url(ENTER), None).await;
    assert_eq!(
        (pa["status"].as_str(), pa["rank"].as_u64()),
        (Some("PAUSED"), Some(0)),
        "{pa}"
    );
    assert_eq!(
        (pb["rank"].as_u64(), pb["position"].as_u64()),
        (Some(1), Some(2)),
        "{pb}"
    );
    for _ in 0..3 {
        let (_, again) = b.json(Method::POST, &s.url(ENTER), None).await;
        assert_eq!(again["rank"].as_u64(), Some(1));
    }
    s.pause("tickets", "resume").await;
    server::poll_until(&a, &s.url(POSITION), "ADMITTED").await;
    let (_, pb) = b.json(Method::GET, &s.url(POSITION), None).await;
    assert_ne!(pb["status"], "ACTIVE");
    s.stop().await;
}

#[tokio::test]
async fn a_protected_path_without_a_pass_is_302_for_browsers_and_429_for_apis() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    let html = [("accept", "text/html,application/xhtml+xml")];
    let (status, headers, _) = v
        .call(Method::GET, &s.url("/tickets/a?b=c"), &html, None)
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(
        headers["location"],
        "/queue/tickets?return=%2Ftickets%2Fa%3Fb%3Dc"
    );
    let (status, headers, body) = v
        .call(Method::POST, &s.url("/tickets/a"), &html, None)
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key("retry-after"));
    let p: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(p["status"], "NONE");
    let (status, _, _) = v
        .call(
            Method::GET,
            &s.url("/tickets"),
            &[("accept", "application/json")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The redirect did not enqueue anybody.
    let (_, p) = v.json(Method::GET, &s.url(POSITION), None).await;
    assert_eq!(p["status"], "NONE");
    assert!(s.origin.requests.lock().unwrap().is_empty());
    // The waiting page itself renders.
    let (status, _, body) = v
        .call(
            Method::GET,
            &s.url("/queue/tickets?return=/tickets/a"),
            &html,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("<html"));
    s.stop().await;
}

#[tokio::test]
async fn path_tricks_do_not_bypass_the_gate() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    for path in [
        "/Tickets",
        "/TICKETS/x",
        "/%74ickets",
        "//tickets",
        "/a/../tickets",
        "/./tickets/",
        "/tickets%2fx",
    ] {
        let (status, _, _) = v
            .call(
                Method::GET,
                &s.url(path),
                &[("accept", "application/json")],
                None,
            )
            .await;
        assert!(status.is_client_error(), "{path} answered {status}");
    }
    assert!(
        s.origin.requests.lock().unwrap().is_empty(),
        "the origin was reached"
    );
    s.stop().await;
}

#[tokio::test]
async fn errors_are_json_with_stable_codes() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    let (status, body) = v
        .json(Method::POST, &s.url("/api/queue/enter?eventId=nope"), None)
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_event"))
    );
    let (status, body) = v.json(Method::POST, &s.url(ENTER), Some("{not json")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    let big = format!("{{\"challenge\":\"{}\"}}", "x".repeat(20_000));
    let (status, body) = v.json(Method::POST, &s.url(ENTER), Some(&big)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"))
    );
    // Unprotected paths with two events and no default origin have no route.
    let (status, _, body) = v.call(Method::GET, &s.url("/elsewhere"), &[], None).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("no_route"))
    );
    // 40 KiB of headers: our 431 JSON, not hyper's empty answer.
    let big = "y".repeat(40 * 1024);
    let (status, _, body) = v
        .call(Method::GET, &s.url("/tickets"), &[("x-big", &big)], None)
        .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, body["error"].as_str()),
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Some("headers_too_large")
        )
    );
    // Above 32 KiB over many fields (within the parser's 100): our JSON too.
    let many: Vec<(String, String)> = (0..90)
        .map(|i| (format!("x-h{i}"), "z".repeat(400)))
        .collect();
    let (status, _, body) = server::send(Method::GET, &s.url("/tickets"), &many, None).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(body.starts_with(b"{\"error\""));
    // More than 100 fields, whatever their size: refused by the parser.
    let too_many: Vec<(String, String)> = (0..600)
        .map(|i| (format!("x-h{i}"), "z".repeat(60)))
        .collect();
    let (status, _, _) = server::send(Method::GET, &s.url("/tickets"), &too_many, None).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    s.stop().await;
}

#[tokio::test]
async fn admin_needs_the_bearer_token() {
    let s = TestServer::start("").await;
    let (status, _, body) = s.admin_get("/admin/events", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.starts_with(b"{\"error\":\"unauthorized\""));
    let (status, _, _) = s.admin_get("/admin/events", Some("wrong-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = s.admin_get("/admin/events", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list[0]["id"], "tickets");
    let (status, _, _) = s.admin_get("/readyz", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = s.admin_get("/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        doc["paths"]["/api/queue/enter"].is_object()
            && doc["paths"]["/admin/events/{event}"].is_object()
    );
    // The rate limit and the challenge are part of the documented answers.
    let enter = &doc["paths"]["/api/queue/enter"]["post"]["responses"];
    let position = &doc["paths"]["/api/queue/position"]["get"]["responses"];
    assert!(
        enter["401"].is_object() && enter["429"].is_object(),
        "{enter}"
    );
    assert!(
        enter["429"]["headers"]["Retry-After"].is_object(),
        "{enter}"
    );
    assert!(position["429"].is_object(), "{position}");
    // The nonce is a number or a string of digits, as enter takes it.
    let nonce = &doc["components"]["schemas"]["EnterBody"]["properties"]["nonce"];
    let kinds: Vec<&str> = nonce["oneOf"]
        .as_array()
        .map(|a| a.iter().filter_map(|k| k["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(kinds, ["integer", "string"], "{nonce}");
    assert!(doc["paths"]["/admin/whoami"]["get"].is_object());
    // So is an admin change refused because the events kept changing.
    let event = &doc["paths"]["/admin/events/{event}"];
    for method in ["put", "patch"] {
        assert!(
            event[method]["responses"]["409"].is_object(),
            "{method}: {event}"
        );
    }
    s.stop().await;
}

/// A slot given back is handed to the next visitor within a fast tick (a
/// tenth of a second) while visitors wait, not at the next second: with
/// one-second ticks a freed slot sat idle half a second on average. Five
/// hand-overs in a row, timed from the release's answer to the next
/// visitor's first poll that says `ADMITTED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_slot_goes_to_the_next_visitor_within_a_fast_tick() {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let tickets = Event::at("tickets", origin_addr)
        .max_active(1)
        .continuous(60000);
    let toml = server::config(dir.path(), origin_addr, tickets).toml();
    assert!(toml.contains("max_per_minute = 60000"), "{toml}");
    let s = TestServer::start_with(&toml, origin, dir).await;
    let mut line: Vec<Visitor> = Vec::new();
    for _ in 0..6 {
        let mut v = Visitor::default();
        let (status, _) = v.json(Method::POST, &s.url(ENTER), None).await;
        assert_eq!(status, StatusCode::OK);
        line.push(v);
    }
    let mut hand_overs = Vec::new();
    for i in 0..5 {
        let p = server::poll_until(&line[i], &s.url(POSITION), "ADMITTED").await;
        let token = p["token"].as_str().unwrap().to_owned();
        let mut v = line[i].clone();
        let (status, body) = redeem(&s, &mut v, &token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        // The next visitor waits while the slot is held.
        let (_, p) = line[i + 1].json(Method::GET, &s.url(POSITION), None).await;
        assert_eq!(p["status"], "WAITING", "{p}");
        let (status, _, _) = v.call(Method::POST, &s.url(RELEASE), &[], None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let released = std::time::Instant::now();
        loop {
            let (_, p) = line[i + 1].json(Method::GET, &s.url(POSITION), None).await;
            if p["status"] == "ADMITTED" {
                break;
            }
            assert!(
                released.elapsed() < std::time::Duration::from_secs(5),
                "the freed slot was never handed on: {p}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        hand_overs.push(released.elapsed());
    }
    hand_overs.sort();
    let median = hand_overs[hand_overs.len() / 2];
    assert!(
        median < std::time::Duration::from_millis(400),
        "hand-overs {hand_overs:?}: the median should be about a fast tick"
    );
    s.stop().await;
}

/// A visitor who joins a queue nobody waited in, with slots free, is
/// admitted at the scheduler's next fast tick. An event nobody waits in
/// ticks once a second; the join wakes it, so the slots do not stand empty
/// until that idle tick (in a crowd that trickles in about as fast as it is
/// admitted, the queue empties again and again). The join is made just
/// after a second's start, so the idle tick is most of a second away; the
/// server's clock is this process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_into_an_idle_queue_is_admitted_at_the_next_fast_tick() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let now_ms = || {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(t.as_millis()).unwrap()
    };
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let tickets = Event::at("tickets", origin_addr)
        .max_active(5)
        .continuous(600);
    let toml = server::config(dir.path(), origin_addr, tickets).toml();
    let s = TestServer::start_with(&toml, origin, dir).await;
    let mut last = 0;
    for round in 0..3 {
        wait_until("just past the start of a second", || async {
            let now = now_ms();
            now.div_euclid(1000) > last && (50..150).contains(&now.rem_euclid(1000))
        })
        .await;
        let joined = now_ms();
        last = joined.div_euclid(1000);
        let mut v = Visitor::default();
        let (status, _) = v.json(Method::POST, &s.url(ENTER), None).await;
        assert_eq!(status, StatusCode::OK);
        server::poll_until(&v, &s.url(POSITION), "ADMITTED").await;
        let admitted = now_ms();
        let idle_tick = (joined.div_euclid(1000) + 1) * 1000;
        assert!(
            admitted < idle_tick,
            "round {round}: admitted {} ms after the join, not before the idle tick {} ms after it",
            admitted - joined,
            idle_tick - joined
        );
        // Nobody waits again: by the next round's second the scheduler's
        // snapshot (refreshed twice a second) shows an idle queue again.
        let (status, _, _) = v.call(Method::POST, &s.url(RELEASE), &[], None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    s.stop().await;
}

/// The enter answer times a visitor's first poll on their turn: the free
/// slots cover the first two visitors (`tickets` has two), so they are told
/// to poll again within about half a second — an admitted visitor who has
/// not heard holds a slot nobody uses. The crowd behind them keeps the
/// 0–3 s spread, so a burst's first polls do not arrive together.
#[tokio::test]
async fn the_enter_answer_times_the_first_poll_on_the_turn() {
    let s = TestServer::start("").await;
    let mut told = Vec::new();
    for _ in 0..12 {
        let mut v = Visitor::default();
        let (status, p) = v.json(Method::POST, &s.url(ENTER), None).await;
        assert_eq!(
            (status, p["status"].as_str()),
            (StatusCode::OK, Some("WAITING")),
            "{p}"
        );
        told.push(p["pollAfterMs"].as_u64().unwrap());
    }
    for (i, ms) in told[..2].iter().enumerate() {
        assert!(
            (400..=600).contains(ms),
            "visitor {i} was told {ms} ms: {told:?}"
        );
    }
    assert!(told[2..].iter().all(|&ms| ms < 3_000), "{told:?}");
    assert!(
        told[2..].iter().any(|&ms| ms > 600),
        "the crowd lost its spread: {told:?}"
    );
    s.stop().await;
}
