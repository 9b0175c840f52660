#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::{demo_shop, demo_shop_with_latency, pages};

async fn get(app: &Router, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut req = Request::get(path);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn home_links_to_the_protected_shop() {
    let (status, body) = get(&demo_shop(), "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Buy tickets"));
    assert!(body.contains("href=\"/shop\""));
    assert!(
        !body.contains("http://") && !body.contains("https://"),
        "third-party asset"
    );
}

#[tokio::test]
async fn shop_shows_the_gate_headers_escaped() {
    let headers = [("x-anteroom-event", "drop"), ("x-anteroom-session", "s<1>")];
    let (status, body) = get(&demo_shop(), "/shop", &headers).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("You're in!"));
    assert!(body.contains("<dd>drop</dd>"));
    assert!(body.contains("<dd>s&lt;1&gt;</dd>"));
    assert!(body.contains("data-event=\"drop\""));
}

#[tokio::test]
async fn shop_says_when_no_gate_sent_headers() {
    let (_, body) = get(&demo_shop(), "/shop", &[]).await;
    assert!(body.contains("not sent by a gate"));
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let (status, _) = get(&demo_shop(), "/nope", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Polls `/health` until it reports `n` (the requests started in other
/// tasks need a moment to reach the handler).
async fn wait_for_concurrency(app: &Router, n: usize) {
    let want = format!(r#"{{"concurrency":{n}}}"#);
    for _ in 0..200 {
        if get(app, "/health", &[]).await.1 == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("/health never reported {want}");
}

#[tokio::test]
async fn health_counts_requests_in_flight() {
    let app = demo_shop_with_latency(Duration::from_secs(1));
    assert_eq!(get(&app, "/health", &[]).await.1, r#"{"concurrency":0}"#);

    let slow = tokio::spawn({
        let app = app.clone();
        async move { get(&app, "/shop", &[]).await }
    });
    let slow2 = tokio::spawn({
        let app = app.clone();
        async move { get(&app, "/shop", &[]).await }
    });
    wait_for_concurrency(&app, 2).await;

    assert_eq!(slow.await.unwrap().0, StatusCode::OK);
    assert_eq!(slow2.await.unwrap().0, StatusCode::OK);
    assert_eq!(get(&app, "/health", &[]).await.1, r#"{"concurrency":0}"#);
}

#[tokio::test]
async fn abandoned_requests_leave_the_count() {
    let app = demo_shop_with_latency(Duration::from_secs(10));
    let slow = tokio::spawn({
        let app = app.clone();
        async move { get(&app, "/shop", &[]).await }
    });
    wait_for_concurrency(&app, 1).await;
    slow.abort();
    let _ = slow.await;
    assert_eq!(get(&app, "/health", &[]).await.1, r#"{"concurrency":0}"#);
}

#[test]
fn escape_covers_markup_and_quotes() {
    assert_eq!(
        pages::escape(r#"<a href="x">'&'</a>"#),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
}
