//! The plain-HTTP listener beside HTTPS: every request gets `308` to the
//! same URL on HTTPS, except the ACME HTTP-01 challenge paths, answered
//! from the tokens the ACME task is proving right now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};

use crate::error::Path;
use axum::response::{IntoResponse as _, Response};
use http::{HeaderValue, StatusCode, header};

/// HTTP-01 token → key authorization, shared by the ACME task and this
/// listener.
#[derive(Clone, Debug, Default)]
pub struct Challenges(Arc<Mutex<HashMap<String, String>>>);

impl Challenges {
    pub fn insert(&self, token: String, key_authorization: String) {
        self.lock().insert(token, key_authorization);
    }

    pub fn remove(&self, token: &str) {
        self.lock().remove(token);
    }

    fn get(&self, token: &str) -> Option<String> {
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Clone)]
struct Redirect {
    challenges: Challenges,
    /// The HTTPS port, left out of the `Location` when it is 443.
    https_port: u16,
}

pub fn router(challenges: Challenges, https_port: u16) -> Router {
    Router::new()
        .route(
            "/.well-known/acme-challenge/{token}",
            axum::routing::get(challenge),
        )
        .fallback(to_https)
        .with_state(Redirect {
            challenges,
            https_port,
        })
        .layer(axum::middleware::map_response(close))
}

/// Every answer here closes its connection: a browser sent to HTTPS does
/// not come back, nor does the CA after a validation, and a connection
/// kept alive would hold its slot of the listener until the header
/// timeout, idle (at the 10 s default, about 25 new visitors a second
/// through a listener of 256).
async fn close(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn challenge(State(r): State<Redirect>, Path(token): Path<String>) -> Response {
    match r.challenges.get(&token) {
        Some(key_authorization) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            key_authorization,
        )
            .into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found", "no such ACME challenge"),
    }
}

async fn to_https(State(r): State<Redirect>, req: Request) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().host().map(str::to_owned));
    let Some(host) = host.as_deref().and_then(host_only) else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_host",
            "a Host header naming this server is needed to redirect to HTTPS",
        );
    };
    let port = match r.https_port {
        443 => String::new(),
        p => format!(":{p}"),
    };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    match HeaderValue::from_str(&format!("https://{host}{port}{path}")) {
        Ok(location) => (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, location)],
        )
            .into_response(),
        Err(_) => error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "cannot redirect this URL",
        ),
    }
}

/// The host of a `Host` value without its port, if it is a plain DNS name,
/// IPv4 or bracketed IPv6 address (so nothing else ends up in `Location`).
fn host_only(value: &str) -> Option<&str> {
    let host = if value.starts_with('[') {
        let end = value.find(']')?;
        &value[..=end]
    } else {
        value.split(':').next()?
    };
    let ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'[' | b']' | b':'));
    ok.then_some(host)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": code, "message": message })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::host_only;

    #[test]
    fn hosts() {
        let check = |input: &str, want: Option<&str>| assert_eq!(host_only(input), want, "{input}");
        check("example.com", Some("example.com"));
        check("example.com:80", Some("example.com"));
        check("127.0.0.1:8080", Some("127.0.0.1"));
        check("[::1]:80", Some("[::1]"));
        check("", None);
        check("evil.com/x", None);
        check("a@b", None);
    }
}
