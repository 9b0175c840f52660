//! `ApiError`: every answer Anteroom itself makes with a 4xx/5xx, mapped once
//! to a status, a stable JSON `error` code and a metric label.
//!
//! Messages never contain a token, cookie or session id: they are shown to
//! clients and written to logs.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use anteroom_store::StoreError;

/// JSON body of every error answer (API.md "Errors").
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable machine code, e.g. `unknown_event`.
    pub error: &'static str,
    /// Human text.
    pub message: String,
    /// Set with `challenge_required`: the proof-of-work challenge to solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub challenge: Option<serde_json::Value>,
}

/// Where an error came from: the client (downstream), the queue store or the
/// origin (upstream), or Anteroom itself (internal). Logged with the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Downstream,
    Upstream,
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no such event")]
    UnknownEvent,
    #[error("no origin serves this path")]
    NoRoute,
    #[error("not found")]
    NotFound,
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("the token is invalid, expired or not yours")]
    InvalidToken,
    #[error("the token was already redeemed")]
    TokenUsed,
    #[error("missing or invalid identity")]
    InvalidIdentity,
    #[error("missing or wrong admin token")]
    Unauthorized,
    /// A valid admin token whose role does not allow the call.
    #[error("{0}")]
    Forbidden(String),
    /// The call conflicts with the current state; `code` says how.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("too many requests")]
    RateLimited { retry_after_secs: u64 },
    #[error("blocked")]
    Blocked,
    #[error("a proof-of-work challenge must be solved first")]
    ChallengeRequired { challenge: serde_json::Value },
    #[error("the queue is unavailable right now; try again shortly")]
    Draining { retry_after_secs: u64 },
    #[error("request headers are larger than 32 KiB")]
    HeadersTooLarge,
    #[error("request body is too large")]
    BodyTooLarge,
    #[error("this method is not allowed here")]
    MethodNotAllowed,
    #[error("the event is paused; the token can be redeemed once it resumes, while it is valid")]
    EventPaused { retry_after_secs: u64 },
    #[error("the event is closed")]
    EventClosed,
    #[error("the request body stopped arriving")]
    BodyTimeout,
    /// A plain-HTTP admin listener named by a host it does not answer to
    /// (see `admin::hosts`).
    #[error(
        "the admin listener does not answer to this host name; an operator who reaches it by this name lists it in server.admin_hosts"
    )]
    UnknownHost,
    #[error("internal error")]
    Internal,
}

impl ApiError {
    /// Stable machine code: the JSON `error` field and the metric label.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::UnknownEvent => "unknown_event",
            ApiError::NoRoute => "no_route",
            ApiError::NotFound => "not_found",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::InvalidToken => "invalid_token",
            ApiError::TokenUsed => "token_used",
            ApiError::InvalidIdentity => "invalid_identity",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Conflict { code, .. } => code,
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Blocked => "blocked",
            ApiError::ChallengeRequired { .. } => "challenge_required",
            ApiError::Draining { .. } => "draining",
            ApiError::HeadersTooLarge => "headers_too_large",
            ApiError::BodyTooLarge => "body_too_large",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::EventPaused { .. } => "event_paused",
            ApiError::EventClosed => "event_closed",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::UnknownHost => "unknown_host",
            ApiError::Internal => "internal",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::UnknownEvent | ApiError::NoRoute | ApiError::NotFound => {
                StatusCode::NOT_FOUND
            }
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::InvalidToken
            | ApiError::InvalidIdentity
            | ApiError::Unauthorized
            | ApiError::ChallengeRequired { .. } => StatusCode::UNAUTHORIZED,
            ApiError::TokenUsed | ApiError::EventPaused { .. } | ApiError::Conflict { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::EventClosed => StatusCode::GONE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Blocked => StatusCode::FORBIDDEN,
            ApiError::Draining { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnknownHost => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn source(&self) -> Source {
        match self {
            ApiError::Draining { .. } => Source::Upstream,
            ApiError::Internal => Source::Internal,
            _ => Source::Downstream,
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after_secs }
            | ApiError::Draining { retry_after_secs }
            | ApiError::EventPaused { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

/// The `405` answer of every router: axum's own is an empty body, and every
/// answer Anteroom makes itself is JSON with a code. Register it after the
/// routes (`Router::method_not_allowed_fallback` covers those added before).
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => ApiError::Draining {
                retry_after_secs: 5,
            },
            StoreError::InvalidInput(what) => ApiError::BadRequest(what.to_owned()),
            StoreError::Corrupt(_) | StoreError::Storage(_) => {
                tracing::error!(error = %e, "queue store failure");
                ApiError::Internal
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        metrics::counter!("anteroom_rejections_total", "reason" => code).increment(1);
        // A drain is logged once, when it begins ("queue store unreachable;
        // draining"): the crowd's requests answered `draining` meanwhile
        // are counted (above), not each logged, or the log would grow with
        // the crowd's retries just when the operator reads it.
        if self.source() == Source::Internal {
            tracing::warn!(error = code, source = ?self.source(), "request failed");
        }
        let status = self.status();
        let retry_after = self.retry_after();
        let message = self.to_string();
        let challenge = match self {
            ApiError::ChallengeRequired { challenge } => Some(challenge),
            _ => None,
        };
        let mut response = (
            status,
            Json(ErrorBody {
                error: code,
                message,
                challenge,
            }),
        )
            .into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// axum's `Path` extractor, refusing with [`ApiError::BadRequest`]: axum's
/// own rejection is plain text (a path segment that is not UTF-8, such as
/// `/admin/events/%FF`), and every 4xx Anteroom makes is JSON with a
/// stable code.
pub struct Path<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(t)| Path(t))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log lines written while `f` runs.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    /// A crowd retrying through a drain would otherwise write a warning a
    /// request; an internal error is still logged.
    #[test]
    fn draining_answers_are_counted_not_logged() {
        let text = logged(|| {
            for _ in 0..3 {
                drop(
                    ApiError::Draining {
                        retry_after_secs: 2,
                    }
                    .into_response(),
                );
                drop(ApiError::UnknownEvent.into_response());
            }
            drop(ApiError::Internal.into_response());
        });
        assert_eq!(text.matches("request failed").count(), 1, "{text}");
        assert!(text.contains("error=\"internal\""), "{text}");
    }

    #[test]
    fn codes_and_statuses_are_stable() {
        let check = |e: ApiError, status: u16, code: &str| {
            assert_eq!((e.status().as_u16(), e.code()), (status, code));
        };
        check(ApiError::UnknownEvent, 404, "unknown_event");
        check(ApiError::NoRoute, 404, "no_route");
        check(ApiError::InvalidToken, 401, "invalid_token");
        check(ApiError::TokenUsed, 409, "token_used");
        check(ApiError::HeadersTooLarge, 431, "headers_too_large");
        check(ApiError::BodyTooLarge, 413, "body_too_large");
        check(ApiError::MethodNotAllowed, 405, "method_not_allowed");
        check(ApiError::EventClosed, 410, "event_closed");
        check(
            ApiError::EventPaused {
                retry_after_secs: 5,
            },
            409,
            "event_paused",
        );
        check(ApiError::BodyTimeout, 408, "body_timeout");
        check(
            ApiError::Draining {
                retry_after_secs: 1,
            },
            503,
            "draining",
        );
        check(
            StoreError::unavailable(anteroom_store::UnavailableKind::Refused, "x").into(),
            503,
            "draining",
        );
        check(StoreError::InvalidInput("x").into(), 400, "bad_request");
    }
}
