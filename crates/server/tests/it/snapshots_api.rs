//! insta snapshots of the JSON contract: QueuePosition, error bodies and a
//! stable subset of `/metrics`. Timestamps and tokens are redacted.

use crate::support::server;
use crate::support::visitor::Visitor;

use crate::support::server::TestServer;
use http::{Method, StatusCode};

#[tokio::test]
async fn queue_position_and_error_json() {
    let s = TestServer::start("").await;
    s.pause("tickets", "pause").await;
    let mut v = Visitor::default();
    let (status, paused) = v
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    insta::assert_json_snapshot!("queue_position_paused", paused, {
        ".timestamp" => "[timestamp]",
        ".pollAfterMs" => "[poll]",
        ".display" => "[display]",
    });
    // Paused, the wording says so; "calculating…" would promise a figure.
    assert_eq!(
        paused["display"], "paused: no estimate until admissions resume",
        "{paused}"
    );
    let (_, none) = Visitor::default()
        .json(
            Method::GET,
            &s.url("/api/queue/position?eventId=tickets"),
            None,
        )
        .await;
    // queueLength comes from the stats snapshot, refreshed in the background.
    insta::assert_json_snapshot!("queue_position_none", none, {
        ".timestamp" => "[timestamp]",
        ".queueLength" => "[queue length]",
    });
    s.pause("tickets", "resume").await;
    let admitted = server::poll_until(
        &v,
        &s.url("/api/queue/position?eventId=tickets"),
        "ADMITTED",
    )
    .await;
    insta::assert_json_snapshot!("queue_position_admitted", admitted, {
        ".timestamp" => "[timestamp]",
        ".token" => "[token]",
        ".redirect" => "[redirect]",
        ".queueLength" => "[queue length]",
    });

    let (_, unknown) = v
        .json(
            Method::GET,
            &s.url("/api/queue/position?eventId=nope"),
            None,
        )
        .await;
    insta::assert_json_snapshot!("error_unknown_event", unknown);
    let (_, bad) = v
        .json(
            Method::POST,
            &s.url("/api/queue/redeem?eventId=tickets"),
            Some(r#"{"token":"x.y"}"#),
        )
        .await;
    insta::assert_json_snapshot!("error_invalid_token", bad);
    s.stop().await;
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_anteroom_names() {
    let s = TestServer::start("").await;
    let mut v = Visitor::default();
    v.json(
        Method::POST,
        &s.url("/api/queue/enter?eventId=tickets"),
        None,
    )
    .await;
    v.json(
        Method::GET,
        &s.url("/api/queue/position?eventId=tickets"),
        None,
    )
    .await;
    let (status, headers, body) = s.admin_get("/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = String::from_utf8(body.to_vec()).unwrap();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("anteroom_"), "{line}");
    }
    // The metric families every deployment exposes, names and types only
    // (values depend on what other tests in this process did).
    let mut families: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .filter(|l| {
            [
                "joins_total",
                "polls_total",
                "store_latency_seconds",
                "waiting ",
                "active ",
            ]
            .iter()
            .any(|n| l.contains(&format!("anteroom_{n}")))
        })
        .collect();
    families.sort();
    insta::assert_snapshot!("metrics_families", families.join("\n"));
    s.stop().await;
}

/// Before the event opens, the position carries the opening time (the page's
/// countdown reads it) and the pre-window's start; once open, both are null.
#[tokio::test]
async fn not_open_position_carries_opens_at() {
    let s = TestServer::start(r#"opens_at = "2099-01-01T10:00:00Z""#).await;
    let (status, p) = Visitor::default()
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(p["status"], "NOT_OPEN");
    let opens_at = p["opensAt"].as_str().unwrap();
    assert!(opens_at.starts_with("2099-01-01T10:00:00"), "{opens_at}");
    // And when the pre-window (default 60 s) opens: an enter before then
    // did not join, so the caller calls enter again from that time.
    let pre = p["preWindowStartsAt"].as_str().unwrap();
    assert!(pre.starts_with("2099-01-01T09:59:00"), "{pre}");
    let (_, open) = Visitor::default()
        .json(Method::POST, &s.url("/api/queue/enter?eventId=other"), None)
        .await;
    assert!(open["opensAt"].is_null(), "{open}");
    assert!(open["preWindowStartsAt"].is_null(), "{open}");
}

/// The enter that inserts a visitor answers a random first poll within the
/// spread, so a burst does not poll in lockstep.
#[tokio::test]
async fn first_poll_after_a_join_is_jittered() {
    let s = TestServer::start("").await;
    let mut polls = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let (_, p) = Visitor::default()
            .json(
                Method::POST,
                &s.url("/api/queue/enter?eventId=tickets"),
                None,
            )
            .await;
        if p["status"] == "WAITING" {
            let ms = p["pollAfterMs"].as_u64().unwrap();
            assert!(ms <= 3_000, "first poll {ms} ms");
            polls.insert(ms);
        }
    }
    assert!(polls.len() > 1, "first polls all equal: {polls:?}");
}
