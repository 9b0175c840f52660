//! Bot cost and shared addresses over real sockets: the per-address entry
//! cap prices joins in proof-of-work (rising with the excess) instead of
//! refusing them, a browser's page load and challenge answer fit under the
//! default session limit, and a rate-limited poll still keeps the place.

use crate::support::server;

use std::time::{Duration, Instant};

use crate::support::visitor::Visitor;
use crate::support::wired::{CHROME, ENTER, POSITION, call, start, with_xff};
use http::{Method, StatusCode};
use serde_json::{Value, json};

const NAT: &str = "198.51.100.7";

/// `(challenge, difficulty)` of a `401 challenge_required`.
fn challenge_of(status: StatusCode, body: &Value) -> (String, u8) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "challenge_required", "{body}");
    let c = &body["challenge"];
    (
        c["challenge"].as_str().unwrap().to_owned(),
        u8::try_from(c["difficulty"].as_u64().unwrap()).unwrap(),
    )
}

/// Enters from `ip`, solving a challenge if one is asked; the difficulty
/// paid (`None`: free).
async fn enter_from(s: &server::TestServer, v: &mut Visitor, ip: &str) -> Option<u8> {
    let h = with_xff(CHROME, ip);
    let (status, _, body) = call(s, v, Method::POST, ENTER, &h, None).await;
    if status == StatusCode::OK {
        return None;
    }
    let (challenge, difficulty) = challenge_of(status, &body);
    let nonce = anteroom_core::pow::solve(&challenge, difficulty);
    let answer = json!({ "challenge": challenge, "nonce": nonce });
    let (status, _, body) = call(s, v, Method::POST, ENTER, &h, Some(&answer)).await;
    assert_eq!(status, StatusCode::OK, "the answer was refused: {body}");
    assert_eq!(body["status"], "WAITING", "{body}");
    Some(difficulty)
}

#[tokio::test]
async fn past_the_entry_cap_an_address_pays_proof_of_work_rising_with_the_excess() {
    // The default session limit (2 a second) stays on: a browser's page
    // load, its enter and its answer come within one second.
    let head = "[limits]\nper_ip_per_second = 0\nentries_per_ip = 3\nentries_window = \"10m\"\n\
                trusted_proxies = [\"127.0.0.1/32\"]";
    let s = start(head, "bots = { challenge = \"off\", difficulty = 8 }").await;

    let mut first = Vec::new();
    for _ in 0..3 {
        let mut v = Visitor::default();
        assert_eq!(
            enter_from(&s, &mut v, NAT).await,
            None,
            "under the cap joins are free"
        );
        first.push(v);
    }
    // A visitor already in the queue makes no new entry and pays nothing.
    assert_eq!(enter_from(&s, &mut first[0], NAT).await, None);
    // Another address has its own count.
    assert_eq!(
        enter_from(&s, &mut Visitor::default(), "203.0.113.9").await,
        None
    );

    // Past the cap: the event's difficulty, as a browser meets it — page
    // load, enter, answer — all within the default session limit.
    let mut browser = Visitor::default();
    let page_headers = with_xff(&[("accept", "text/html"), ("sec-fetch-site", "none")], NAT);
    let (status, _, _) = browser
        .call(Method::GET, &s.url("/queue/tickets"), &page_headers, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(enter_from(&s, &mut browser, NAT).await, Some(8));

    // 5 and 6 recent entries are under twice the cap: still the base price;
    // from 6 (twice the cap) one more bit, i.e. twice the work.
    let mut paid = Vec::new();
    for _ in 0..4 {
        paid.push(enter_from(&s, &mut Visitor::default(), NAT).await);
    }
    assert_eq!(paid, [Some(8), Some(8), Some(9), Some(9)]);
}

/// Joins sent at one moment from one address are priced one after the
/// other: each in flight counts as an entry. They were all priced by the
/// count from before any of them, so 60 at once all joined free under a
/// cap of 3.
#[tokio::test]
async fn joins_sent_together_cannot_share_the_free_entries() {
    let head = "[limits]\nper_ip_per_second = 0\nper_session_per_second = 0\n\
                entries_per_ip = 3\nentries_window = \"10m\"\n\
                trusted_proxies = [\"127.0.0.1/32\"]";
    let s = start(head, "bots = { challenge = \"off\", difficulty = 8 }").await;
    let s = &s;
    let h = with_xff(CHROME, NAT);
    let answers = futures::future::join_all((0..60).map(|_| {
        let h = h.clone();
        async move {
            let mut v = Visitor::default();
            call(s, &mut v, Method::POST, ENTER, &h, None).await.0
        }
    }))
    .await;
    let free = answers.iter().filter(|s| **s == StatusCode::OK).count();
    let priced = answers
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!((free, priced), (3, 57), "{answers:?}");
}

#[tokio::test]
async fn a_rate_limited_poll_still_keeps_the_place_from_the_idle_sweep() {
    // One poll a second per address. A client without a session hammers
    // the address's budget, so the visitor behind the same address (a NAT)
    // is refused nearly every time; without the seen marks of refused polls
    // it would idle out after 3 s.
    let head = "[limits]\nper_ip_per_second = 1\nper_session_per_second = 0\nentries_per_ip = 0\n\
                trusted_proxies = [\"127.0.0.1/32\"]";
    let s = start(
        head,
        "queue_idle_timeout = \"3s\"\nbots = { challenge = \"off\" }",
    )
    .await;
    // Paused, so the visitor stays in the queue unless it idles out.
    s.pause("tickets", "pause").await;
    let nat = with_xff(CHROME, NAT);
    let mut v = Visitor::default();
    let (status, _, body) = call(&s, &mut v, Method::POST, ENTER, &nat, None).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("PAUSED")),
        "{body}"
    );

    let stop = Instant::now() + Duration::from_secs(7);
    let hog = {
        let url = s.url(POSITION);
        let nat: Vec<(String, String)> = nat
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        tokio::spawn(async move {
            while Instant::now() < stop {
                server::send(Method::GET, &url, &nat, None).await;
            }
        })
    };
    let (mut refused, mut answered) = (0u32, 0u32);
    while Instant::now() < stop {
        let (status, _, _) = call(&s, &mut v, Method::GET, POSITION, &nat, None).await;
        match status {
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            StatusCode::OK => answered += 1,
            other => panic!("poll answered {other}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    hog.await.unwrap();
    assert!(
        refused >= 10 && answered <= 2,
        "the visitor's polls were not refused: {refused} refused, {answered} answered"
    );
    // From an address with budget left: still in the queue.
    let (status, _, p) = call(
        &s,
        &mut v,
        Method::GET,
        POSITION,
        &with_xff(CHROME, "203.0.113.10"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        p["status"], "PAUSED",
        "refused polls let the place idle out: {p}"
    );
}
