//! The proxy against a real origin over loopback sockets: headers, bodies
//! streamed both ways, keep-alive, and origin failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/proxy.rs"]
mod support;

use std::convert::Infallible;
use std::time::Duration;

use anteroom::proxy::Proxy;
use axum::body::Body;
use bytes::Bytes;
use futures::SinkExt;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use support::{client, start_gate, start_origin};

async fn json_of(response: http::Response<hyper::body::Incoming>) -> serde_json::Value {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn headers_are_forwarded_and_forged_anteroom_headers_dropped() {
    let origin = start_origin().await;
    let extra = vec![
        (
            HeaderName::from_static("x-anteroom-event"),
            HeaderValue::from_static("drop"),
        ),
        (
            HeaderName::from_static("x-anteroom-session"),
            HeaderValue::from_static("real"),
        ),
    ];
    let gate = start_gate(Proxy::new(), origin.uri(), extra).await;
    let req = Request::get(format!("http://{gate}/headers?q=1&r=%2F"))
        .header("host", "shop.example")
        .header("x-anteroom-session", "forged")
        .header("x-anteroom-pass-ok", "yes")
        .header("x-forwarded-for", "198.51.100.9")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("accept", "text/html")
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = json_of(response).await;
    assert_eq!(seen["uri"], "/headers?q=1&r=%2F");
    assert_eq!(seen["x-anteroom-session"], serde_json::json!(["real"]));
    assert_eq!(seen["x-anteroom-event"], serde_json::json!(["drop"]));
    assert_eq!(
        seen["x-forwarded-for"],
        serde_json::json!(["198.51.100.9, 127.0.0.1"])
    );
    assert_eq!(seen["x-forwarded-proto"], serde_json::json!(["http"]));
    assert_eq!(
        seen["x-forwarded-host"],
        serde_json::json!(["shop.example"])
    );
    assert_eq!(seen["host"], serde_json::json!([origin.addr.to_string()]));
    assert_eq!(seen["accept"], serde_json::json!(["text/html"]));
    assert!(seen.get("x-anteroom-pass-ok").is_none());
    assert!(seen.get("x-hop").is_none());
}

#[tokio::test]
async fn large_bodies_stream_both_ways() {
    let origin = start_origin().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;

    let upload: Vec<u8> = (0..16 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let req = Request::post(format!("http://{gate}/echo"))
        .body(Body::from(upload.clone()))
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let echoed = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        echoed == upload,
        "echo differs ({} bytes back)",
        echoed.len()
    );

    let n = 32 * 1024 * 1024 + 7;
    let req = Request::get(format!("http://{gate}/big?n={n}"))
        .body(Body::empty())
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    let mut received = 0;
    while let Some(frame) = body.frame().await {
        received += frame.unwrap().into_data().map_or(0, |d| d.len());
    }
    assert_eq!(received, n);
}

/// Each chunk must come back before the next is sent: a proxy that buffered
/// either body would deadlock here.
#[tokio::test]
async fn request_and_response_bodies_stream_concurrently() {
    let origin = start_origin().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(1);
    let req = Request::post(format!("http://{gate}/echo"))
        .body(Body::from_stream(rx))
        .unwrap();
    tx.send(Ok(Bytes::from_static(b"chunk-0"))).await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), client().request(req))
        .await
        .expect("response head while the request body is still open")
        .unwrap();
    let mut body = response.into_body();
    for i in 0..5 {
        let mut got = Vec::new();
        let want = format!("chunk-{i}");
        while got.len() < want.len() {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .expect("echo of the chunk before the next one is sent")
                .unwrap()
                .unwrap();
            got.extend_from_slice(&frame.into_data().unwrap());
        }
        assert_eq!(got, want.as_bytes());
        if i < 4 {
            tx.send(Ok(Bytes::from(format!("chunk-{}", i + 1))))
                .await
                .unwrap();
        }
    }
    drop(tx);
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn origin_connections_are_kept_alive_and_reused() {
    let origin = start_origin().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;
    for _ in 0..5 {
        let req = Request::get(format!("http://{gate}/headers"))
            .body(Body::empty())
            .unwrap();
        let response = client().request(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(origin.connections(), 1);
}

#[tokio::test]
async fn origin_down_is_502_json() {
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let gate = start_gate(
        Proxy::new(),
        format!("http://{closed}").parse().unwrap(),
        vec![],
    )
    .await;
    let req = Request::get(format!("http://{gate}/x"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = json_of(response).await;
    assert_eq!(body["error"], "bad_gateway");
    assert!(body["message"].is_string());
}

#[tokio::test]
async fn slow_origin_is_504_json() {
    let origin = start_origin().await;
    let proxy = Proxy::with_timeouts(Duration::from_secs(5), Duration::from_millis(200));
    let gate = start_gate(proxy, origin.uri(), vec![]).await;
    let req = Request::get(format!("http://{gate}/slow"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let body = json_of(response).await;
    assert_eq!(body["error"], "gateway_timeout");
}

#[tokio::test]
async fn https_origin_is_refused_as_502() {
    let gate = start_gate(Proxy::new(), "https://127.0.0.1:1".parse().unwrap(), vec![]).await;
    let req = Request::get(format!("http://{gate}/"))
        .body(Body::empty())
        .unwrap();
    let response = client().request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
}
