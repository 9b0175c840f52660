//! Capacity mode's signal: the origin's own count of concurrent users, read
//! from its health endpoint (a JSON field) once per tick.
//!
//! Any doubt reads as "unknown", never as a number: an unreachable endpoint,
//! a slow one, a non-2xx answer, a body that is not JSON or a field that is
//! missing, negative or not a number all give [`SignalError`], and the policy
//! then admits nobody new (over-admitting on a bad reading is how an origin
//! falls over).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A health answer larger than this is garbage, not a status document.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest wait for the health endpoint: a tick must not stall on it.
pub const TIMEOUT: Duration = Duration::from_millis(500);

/// Why a reading failed; `label()` is the metric label.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignalError {
    #[error("health endpoint unreachable")]
    Unreachable,
    #[error("health endpoint did not answer in time")]
    Timeout,
    #[error("health endpoint answered status {0}")]
    Status(u16),
    #[error("health answer is not a JSON document with a non-negative number at the field")]
    Garbage,
}

impl SignalError {
    pub fn label(&self) -> &'static str {
        match self {
            SignalError::Unreachable => "unreachable",
            SignalError::Timeout => "timeout",
            SignalError::Status(_) => "status",
            SignalError::Garbage => "garbage",
        }
    }
}

type HealthClient = Client<HttpConnector, Empty<Bytes>>;

/// One event's health poller: a pooled client (made on first use, inside the
/// runtime) and the current run of failed readings, so the log warns once
/// when the signal is lost rather than every tick.
#[derive(Debug, Default)]
pub struct Probe {
    client: OnceLock<HealthClient>,
    failures: AtomicU64,
}

impl Probe {
    /// Reads `field` from the JSON at `url`.
    pub async fn read(&self, url: &http::Uri, field: &str) -> Result<u64, SignalError> {
        let client = self.client.get_or_init(|| {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(TIMEOUT));
            Client::builder(TokioExecutor::new()).build(connector)
        });
        let fetch = async {
            let response = client
                .get(url.clone())
                .await
                .map_err(|_| SignalError::Unreachable)?;
            if !response.status().is_success() {
                return Err(SignalError::Status(response.status().as_u16()));
            }
            let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|_| SignalError::Garbage)?
                .to_bytes();
            parse(&body, field)
        };
        let result = match tokio::time::timeout(TIMEOUT, fetch).await {
            Ok(r) => r,
            Err(_) => Err(SignalError::Timeout),
        };
        match &result {
            Ok(_) => {
                self.failures.store(0, Ordering::Relaxed);
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Consecutive failed readings (1 on the first failure after a good one).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// The concurrency at `field` (a dotted path, `"origin.in_flight"`) of a JSON
/// body: a non-negative integer, or a non-negative finite number rounded up.
pub fn parse(body: &[u8], field: &str) -> Result<u64, SignalError> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(|_| SignalError::Garbage)?;
    let value = field
        .split('.')
        .try_fold(&doc, |v, key| v.get(key))
        .ok_or(SignalError::Garbage)?;
    if let Some(n) = value.as_u64() {
        return Ok(n);
    }
    match value.as_f64() {
        Some(f) if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 => Ok(f.ceil() as u64),
        _ => Err(SignalError::Garbage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let check = |body: &str, field: &str, expected: Result<u64, SignalError>| {
            assert_eq!(parse(body.as_bytes(), field), expected, "{body} at {field}");
        };
        check(r#"{"concurrency": 12}"#, "concurrency", Ok(12));
        check(r#"{"concurrency": 12.2}"#, "concurrency", Ok(13));
        check(r#"{"o": {"in_flight": 3}}"#, "o.in_flight", Ok(3));
        check(
            r#"{"concurrency": -1}"#,
            "concurrency",
            Err(SignalError::Garbage),
        );
        check(
            r#"{"concurrency": "12"}"#,
            "concurrency",
            Err(SignalError::Garbage),
        );
        check(r#"{"other": 1}"#, "concurrency", Err(SignalError::Garbage));
        check("<html>", "concurrency", Err(SignalError::Garbage));
        check("", "concurrency", Err(SignalError::Garbage));
    }
}
