//! `anteroom demo --crowd N`: virtual shoppers who queue beside the person
//! trying the demo, so the line has people in it and moves. Each one does
//! what a browser on the waiting page does — joins, solves a proof-of-work
//! challenge if asked, polls as told by `pollAfterMs`, redeems its token,
//! browses the shop for a few seconds, frees its place — then comes back
//! later as a new visitor. It is a demo, not a load test: see `anteroom-sim`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::Rng as _;
use serde_json::Value;

use super::PROTECTED_PREFIX;

const EVENT: &str = "drop";

type HttpClient = Client<HttpConnector, Body>;

/// Runs `n` shoppers until the process ends.
pub async fn run(public: SocketAddr, n: usize) {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    for i in 0..n {
        let client = client.clone();
        tokio::spawn(async move {
            // Arrivals spread over the first seconds, like a real drop.
            let stagger = rand::rng().random_range(0..3000 + 20 * n as u64);
            tokio::time::sleep(Duration::from_millis(stagger)).await;
            loop {
                let mut shopper = Shopper::new(client.clone(), public, i);
                if let Err(e) = shopper.visit().await {
                    tracing::debug!(shopper = i, error = %e, "demo shopper gave up");
                }
                let pause = rand::rng().random_range(5_000..20_000);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        });
    }
}

struct Shopper {
    client: HttpClient,
    public: SocketAddr,
    /// The shopper's own address, sent as `X-Forwarded-For`.
    address: String,
    cookies: BTreeMap<String, String>,
}

impl Shopper {
    fn new(client: HttpClient, public: SocketAddr, i: usize) -> Self {
        Self {
            client,
            public,
            address: format!("198.18.{}.{}", (i / 250) % 250, i % 250 + 1),
            cookies: BTreeMap::new(),
        }
    }

    async fn visit(&mut self) -> anyhow::Result<()> {
        let q = format!("eventId={EVENT}");
        let (status, body) = self
            .call(Method::POST, &format!("/api/queue/enter?{q}"), None)
            .await?;
        if status == StatusCode::UNAUTHORIZED {
            let challenge = &body["challenge"];
            let text = challenge["challenge"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let difficulty = challenge["difficulty"].as_u64().unwrap_or(16);
            let nonce = tokio::task::spawn_blocking({
                let text = text.clone();
                move || anteroom_core::pow::solve(&text, u8::try_from(difficulty).unwrap_or(16))
            })
            .await?;
            let answer = serde_json::json!({ "challenge": text, "nonce": nonce });
            self.call(Method::POST, &format!("/api/queue/enter?{q}"), Some(answer))
                .await?;
        }
        let token = loop {
            let (status, body) = self
                .call(Method::GET, &format!("/api/queue/position?{q}"), None)
                .await?;
            if status.is_success()
                && body["status"] == "ADMITTED"
                && let Some(token) = body["token"].as_str()
            {
                break token.to_owned();
            }
            let wait = body["pollAfterMs"]
                .as_u64()
                .unwrap_or(3000)
                .clamp(500, 10_000);
            let jitter = rand::rng().random_range(0..=wait / 5);
            tokio::time::sleep(Duration::from_millis(wait + jitter)).await;
        };
        let redeem = serde_json::json!({ "token": token });
        self.call(
            Method::POST,
            &format!("/api/queue/redeem?{q}"),
            Some(redeem),
        )
        .await?;
        let browse = rand::rng().random_range(3..9);
        for _ in 0..browse {
            self.call(Method::GET, PROTECTED_PREFIX, None).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.call(Method::POST, &format!("/api/queue/release?{q}"), None)
            .await?;
        Ok(())
    }

    async fn call(
        &mut self,
        method: Method,
        path: &str,
        json: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.public))
            // Headers of an ordinary browser, so the shopper scores as one.
            .header(
                header::USER_AGENT,
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36",
            )
            .header(header::ACCEPT, "application/json")
            .header(header::ACCEPT_LANGUAGE, "en-GB,en;q=0.9")
            .header("x-forwarded-for", &self.address);
        if !self.cookies.is_empty() {
            let cookie: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header(header::COOKIE, cookie.join("; "));
        }
        let body = match json {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        let response = self.client.request(req.body(body)?).await?;
        let status = response.status();
        for value in response.headers().get_all(header::SET_COOKIE) {
            if let Ok(text) = value.to_str()
                && let Some((pair, _)) = text.split_once(';').or(Some((text, "")))
                && let Some((name, value)) = pair.split_once('=')
            {
                self.cookies
                    .insert(name.trim().to_owned(), value.trim().to_owned());
            }
        }
        let bytes: Bytes = response.into_body().collect().await?.to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }
}
