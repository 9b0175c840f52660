//! The built-in demo shop: the origin `anteroom demo` puts behind the gate,
//! so a new user sees a waiting room work with nothing else installed.
//!
//! `/` is the public home page, [`PROTECTED_PREFIX`] (`/shop`) the page the
//! demo event protects; it shows the `X-Anteroom-*` headers the gate added.
//! `/health` reports `{"concurrency": N}`, the requests in flight, which is
//! what the capacity admission mode polls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

pub mod crowd;
mod pages;
mod setup;
#[cfg(test)]
mod tests;

pub use setup::DemoSetup;

/// The path prefix the demo event protects.
pub const PROTECTED_PREFIX: &str = "/shop";

/// Requests being served right now, `/health` excluded.
#[derive(Clone, Default)]
struct InFlight(Arc<AtomicUsize>);

/// Counts one request for as long as it is alive, also when its client
/// goes away mid-request and the handler future is dropped.
struct InFlightGuard(Arc<AtomicUsize>);

impl InFlight {
    fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(Arc::clone(&self.0))
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The demo shop, answering at once.
pub fn demo_shop() -> Router {
    demo_shop_with_latency(Duration::ZERO)
}

/// The demo shop, taking `latency` to render the shop page, like an origin
/// doing real work: it makes the in-flight count rise with admitted load.
pub fn demo_shop_with_latency(latency: Duration) -> Router {
    let in_flight = InFlight::default();
    let shop = Router::new()
        .route("/", get(home))
        .route(
            PROTECTED_PREFIX,
            get(move |headers: HeaderMap| shop(headers, latency)),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            in_flight.clone(),
            count_in_flight,
        ));
    Router::new()
        .route("/health", get(health))
        .with_state(in_flight)
        .merge(shop)
}

async fn count_in_flight(State(in_flight): State<InFlight>, req: Request, next: Next) -> Response {
    let _guard = in_flight.enter();
    next.run(req).await
}

async fn health(State(in_flight): State<InFlight>) -> Json<serde_json::Value> {
    let concurrency = in_flight.0.load(Ordering::Relaxed);
    Json(serde_json::json!({ "concurrency": concurrency }))
}

async fn home() -> Html<String> {
    Html(pages::home())
}

async fn shop(headers: HeaderMap, latency: Duration) -> Response {
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let page = pages::shop(header("x-anteroom-event"), header("x-anteroom-session"));
    // The page names the visitor's session: no cache may keep it.
    let no_store = [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))];
    (no_store, Html(page)).into_response()
}

async fn not_found() -> impl IntoResponse {
    (axum::http::StatusCode::NOT_FOUND, Html(pages::not_found()))
}
