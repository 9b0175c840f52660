//! Why forwarding failed, mapped once to a status and a stable JSON code.

use std::error::Error as _;
use std::io;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use thiserror::Error;

/// Why forwarding failed. Upstream failures (the origin is down, slow or
/// misconfigured) are never the visitor's fault, so never a 4xx; the
/// visitor-side ones (a body that stopped arriving or broke its framing,
/// an upgrade other than WebSocket) are.
#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("the request body stopped arriving")]
    BodyTimeout,
    #[error("the request body was malformed or cut short")]
    BrokenBody,
    #[error("only WebSocket upgrades are accepted")]
    UpgradeRefused,
    /// A transfer coding other than `chunked` (RFC 9112, 6.1: 501).
    #[error("the request's transfer coding is not supported: only chunked is")]
    UnknownCoding,
    #[error("the origin is not an absolute http:// URL")]
    BadOrigin,
    #[error("the origin could not be reached")]
    Unreachable(#[source] hyper_util::client::legacy::Error),
    /// The lean client's (see `proxy::origin`): refused, reset, or an
    /// answer that breaks HTTP/1.1.
    #[error("the origin could not be reached")]
    Origin(#[source] io::Error),
    #[error("the origin did not answer in time")]
    Timeout,
    #[error("the origin switched protocols unasked")]
    UnexpectedUpgrade,
    /// Another request in flight on the visitor's connection would count
    /// as a connection of its own, and the listener holds
    /// `server.max_connections`.
    #[error("the server is at its connection cap")]
    AtConnectionCap,
}

impl ProxyError {
    /// Classifies a client error: a connect timeout is a timeout (`504`),
    /// everything else (refused, reset, malformed answer) is `502`.
    pub(super) fn from_client(err: hyper_util::client::legacy::Error) -> Self {
        if crate::serve::is_body_timeout(&err) {
            return Self::BodyTimeout;
        }
        if crate::serve::is_broken_body(&err) {
            return Self::BrokenBody;
        }
        let mut source = err.source();
        while let Some(cause) = source {
            if cause
                .downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
            {
                return Self::Timeout;
            }
            source = cause.source();
        }
        Self::Unreachable(err)
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Self::AtConnectionCap => StatusCode::SERVICE_UNAVAILABLE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UpgradeRefused | Self::BrokenBody => StatusCode::BAD_REQUEST,
            Self::UnknownCoding => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// Stable machine code: the JSON `error` field and the metric label.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout => "gateway_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::UpgradeRefused => "upgrade_not_supported",
            Self::UnknownCoding => "not_implemented",
            Self::BrokenBody => "bad_request",
            Self::AtConnectionCap => "too_many_connections",
            _ => "bad_gateway",
        }
    }

    /// Whether the visitor's request, not the origin, failed: logged as
    /// such, never as the origin's failure.
    pub fn is_visitors(&self) -> bool {
        matches!(
            self,
            Self::BodyTimeout | Self::BrokenBody | Self::UpgradeRefused | Self::UnknownCoding
        )
    }
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        // The message names no address or internal detail: it reaches the
        // visitor; the details go to the log line written by the caller.
        let body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        let mut response = (self.status(), Json(body)).into_response();
        if let Self::AtConnectionCap = self {
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_past_the_connection_cap_is_told_to_come_back() {
        let refused = ProxyError::AtConnectionCap.into_response();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "too_many_connections");
    }
}
