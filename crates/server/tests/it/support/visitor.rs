//! The one scripted visitor: a browser-like cookie jar over one HTTP
//! request per connection, and the queue calls the tests make with it.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// One HTTP request on a fresh connection; `Err` if no answer came.
pub async fn try_send(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let res = client.request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, parts.headers, bytes))
}

/// A server a visitor talks to: the in-process one or a node process.
pub trait Gate {
    /// The URL of `path` on its public listener.
    fn public_url(&self, path: &str) -> String;
}

impl<T: Gate> Gate for std::sync::Arc<T> {
    fn public_url(&self, path: &str) -> String {
        T::public_url(self, path)
    }
}

/// A browser-like visitor with a cookie jar (session and pass cookies).
#[derive(Clone, Default, Debug)]
pub struct Visitor {
    pub cookies: Vec<(String, String)>,
    /// Every `Set-Cookie` it was sent, in order.
    pub set_cookies: Vec<String>,
    /// Successful redeems through [`Visitor::redeem`] (must never exceed 1).
    pub redeems: usize,
}

impl Visitor {
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// One request with the jar's cookies and `extra` headers; the answer's
    /// cookies go into the jar. `Err` if no answer within `limit`.
    pub async fn try_call(
        &mut self,
        method: Method,
        url: &str,
        extra: &[(&str, &str)],
        body: Option<&str>,
        limit: Option<Duration>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        let mut headers: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            headers.push(("cookie".into(), jar.join("; ")));
        }
        if body.is_some() {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let call = try_send(method, url, &headers, body.map(str::to_owned));
        let out = match limit {
            Some(limit) => tokio::time::timeout(limit, call)
                .await
                .map_err(|_| "timed out".to_owned())??,
            None => call.await?,
        };
        for sc in out.1.get_all("set-cookie") {
            let sc = sc.to_str().unwrap().to_owned();
            let (pair, _) = sc.split_once(';').unwrap_or((&sc, ""));
            let (k, v) = pair.split_once('=').unwrap();
            self.cookies.retain(|(name, _)| name != k);
            if !v.is_empty() {
                self.cookies.push((k.to_owned(), v.to_owned()));
            }
            self.set_cookies.push(sc);
        }
        Ok(out)
    }

    /// [`Visitor::try_call`] without a time limit; fails the test if no
    /// answer came.
    pub async fn call(
        &mut self,
        method: Method,
        url: &str,
        extra: &[(&str, &str)],
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        self.try_call(method, url, extra, body, None).await.unwrap()
    }

    /// A JSON call (`Accept: application/json`); the body as JSON (`Null`
    /// if it is not).
    pub async fn json(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let (status, _, bytes) = self
            .call(method, url, &[("accept", "application/json")], body)
            .await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A JSON call to a server that may be down or stopped: bounded to 5 s,
    /// and no answer reads as `502` with an empty body.
    pub async fn api(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Value) {
        let limit = Some(Duration::from_secs(5));
        let (status, h, bytes) = self
            .try_call(method, url, &[("accept", "application/json")], body, limit)
            .await
            .unwrap_or((StatusCode::BAD_GATEWAY, HeaderMap::new(), Bytes::new()));
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, h, json)
    }

    pub async fn enter(&mut self, gate: &impl Gate, event: &str) -> (StatusCode, HeaderMap, Value) {
        let url = gate.public_url(&format!("/api/queue/enter?eventId={event}"));
        self.api(Method::POST, &url, None).await
    }

    pub async fn position(&mut self, gate: &impl Gate, event: &str) -> Value {
        let url = gate.public_url(&format!("/api/queue/position?eventId={event}"));
        self.api(Method::GET, &url, None).await.2
    }

    pub async fn redeem(&mut self, gate: &impl Gate, event: &str, token: &str) -> StatusCode {
        let url = gate.public_url(&format!("/api/queue/redeem?eventId={event}"));
        let body = serde_json::json!({ "token": token }).to_string();
        let status = self.api(Method::POST, &url, Some(&body)).await.0;
        if status == StatusCode::OK {
            self.redeems += 1;
        }
        status
    }

    /// A request through the gate to a protected path.
    pub async fn fetch(&mut self, gate: &impl Gate, path: &str) -> StatusCode {
        self.api(Method::GET, &gate.public_url(path), None).await.0
    }

    pub async fn release(&mut self, gate: &impl Gate, event: &str) -> StatusCode {
        let url = gate.public_url(&format!("/api/queue/release?eventId={event}"));
        self.api(Method::POST, &url, None).await.0
    }

    /// Polls the position until ADMITTED, then redeems; panics after `limit`.
    /// Statuses seen on the way are appended to `seen`.
    pub async fn until_active(
        &mut self,
        gate: &impl Gate,
        event: &str,
        limit: Duration,
        seen: &mut Vec<String>,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            let p = self.position(gate, event).await;
            let status = p["status"].as_str().unwrap_or("?").to_owned();
            if seen.last() != Some(&status) {
                seen.push(status.clone());
            }
            match status.as_str() {
                "ADMITTED" => {
                    let token = p["token"].as_str().unwrap().to_owned();
                    assert_eq!(self.redeem(gate, event, &token).await, StatusCode::OK);
                    return;
                }
                "ACTIVE" => return,
                "NONE" => {
                    // The store lost the place (restart without data): join again,
                    // as the waiting page does.
                    self.enter(gate, event).await;
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "not admitted in {limit:?}; saw {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
