//! Shared by the `wired_*` tests: a server started through `run` on port 0
//! with the bot defence, limits and trusted proxies each test asks for, and
//! the header sets of a script and of a browser.

use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use crate::support::config::{ConfigBuilder, Event, HOURLY};
use crate::support::origin::Origin;
use crate::support::server::TestServer;
use crate::support::visitor::Visitor;

pub const ENTER: &str = "/api/queue/enter?eventId=tickets";
pub const POSITION: &str = "/api/queue/position?eventId=tickets";

/// What `curl -X POST` sends: high risk by the default rules.
pub const CURL: &[(&str, &str)] = &[("user-agent", "curl/8.5.0"), ("accept", "*/*")];

/// What Chromium sends for a `fetch` from the waiting page: low risk.
pub const CHROME: &[(&str, &str)] = &[
    ("connection", "keep-alive"),
    ("sec-ch-ua", "\"Chromium\";v=\"131\""),
    (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    ("accept", "*/*"),
    ("sec-fetch-site", "same-origin"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("accept-language", "en-GB,en;q=0.9"),
];

/// Starts a server whose `tickets` event has `event` lines appended and
/// whose file has `head` (e.g. `[limits]`, `[bots]`) before the events.
/// Admissions run once an hour unless `event` says otherwise, so statuses
/// stay WAITING while a test looks at them.
pub async fn start(head: &str, event: &str) -> TestServer {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let tickets = Event::at("tickets", origin_addr).max_active(1);
    let tickets = if event.contains("admission") {
        tickets
    } else {
        tickets.admission(HOURLY)
    };
    let toml = ConfigBuilder::new()
        .embedded(dir.path())
        .section(head)
        .event(tickets.line(event))
        .toml();
    TestServer::start_with(&toml, origin, dir).await
}

/// One call with `headers` (plus the visitor's cookies); the body as JSON.
pub async fn call(
    s: &TestServer,
    v: &mut Visitor,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (StatusCode, HeaderMap, Value) {
    let body = body.map(Value::to_string);
    let (status, h, bytes) = v.call(method, &s.url(path), headers, body.as_deref()).await;
    (
        status,
        h,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// `headers` followed by `X-Forwarded-For: xff`.
pub fn with_xff<'a>(headers: &[(&'a str, &'a str)], xff: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut h = headers.to_vec();
    h.push(("x-forwarded-for", xff));
    h
}

/// `Retry-After` in seconds.
pub fn retry_after(h: &HeaderMap) -> u64 {
    h.get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in {h:?}"))
}
