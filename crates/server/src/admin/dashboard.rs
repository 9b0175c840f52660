//! The operator dashboard at `GET /dashboard` on the admin listener: one
//! static page, its script and style compiled into the binary, under a
//! self-only Content-Security-Policy. The page itself is public (it holds no
//! data); everything it shows comes from the bearer-protected admin API, with
//! the token the operator types in.
//!
//! History lives in the browser: the page polls `GET /admin/events` every
//! second and keeps 15 minutes per event (in `sessionStorage`, so a reload
//! keeps the charts), so the server holds no per-viewer or per-event buffer.

use std::sync::Arc;

use crate::error::Path;
use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

pub use crate::state::observed::{Observed, current, phase_name};

use crate::error::ApiError;
use crate::state::AppState;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Self-only: the script, style and API calls come from this listener;
/// no inline code, nothing framed, no form posts elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; \
    base-uri 'none'; frame-ancestors 'none'";

/// `/dashboard` and its assets (merged into the admin router).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/dashboard", get(page))
        .route("/dashboard/{asset}", get(asset))
}

async fn page() -> Response {
    respond(HTML, include_str!("../../static/dashboard/dashboard.html"))
}

async fn asset(Path(name): Path<String>) -> Response {
    // A closed list: no path ever reaches the file system.
    match name.as_str() {
        "dashboard.js" => respond(JS, include_str!("../../static/dashboard/dashboard.js")),
        "dashboard.css" => respond(CSS, include_str!("../../static/dashboard/dashboard.css")),
        _ => ApiError::NotFound.into_response(),
    }
}

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    r
}
