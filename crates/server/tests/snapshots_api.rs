//! insta snapshots of the JSON contract: QueuePosition, error bodies and a
//! stable subset of `/metrics`. Timestamps and tokens are redacted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/server.rs"]
mod support;

use http::{Method, StatusCode};
use support::{TestServer, Visitor};

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
    let admitted = support::poll_until(
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
