//! The pre-window keeps its word, in real headless Chromium against the real
//! server (`anteroom::run` on port 0, embedded store): a page opened before
//! the pre-window joins when it opens, so the visitor is in the shuffled
//! pre-window set and ahead of everyone who arrives after opening. Once with
//! the script, once with scripting off (the page's meta refresh is timed to
//! land inside the pre-window, and its render joins the visitor).
//!
//! The event opens a few seconds after the server starts, with a 5 s
//! pre-window; every wait is a readiness check on the server's own phase and
//! stats (`GET /admin/events/E` refreshes them), never a fixed sleep.

use crate::support::origin::Origin;
use crate::support::visitor::Visitor;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::browser::{drop_event, wait_for, with_browser, with_browser_args};
use crate::support::config::{ADMIN_TOKEN, ConfigBuilder};
use crate::support::server::TestServer;
use anyhow::{Result, bail, ensure};
use fantoccini::Client;
use http::{Method, StatusCode};
use serde_json::Value;

const ENTER: &str = "/api/queue/enter?eventId=drop";
const POSITION: &str = "/api/queue/position?eventId=drop";
/// Long enough for Chromium to start and load the page before it.
const TO_PRE_WINDOW: Duration = Duration::from_secs(12);
const PRE_WINDOW: &str = "5s";
const STEP: Duration = Duration::from_secs(30);

fn config(origin: std::net::SocketAddr, dir: &std::path::Path, opens_at: &str) -> String {
    ConfigBuilder::new()
        .server_line("insecure_cookies = true")
        .embedded(dir)
        .no_limits()
        .event(
            drop_event(origin)
                .line(&format!("opens_at = \"{opens_at}\""))
                .line(&format!("pre_window = \"{PRE_WINDOW}\"")),
        )
        .toml()
}

/// A server whose event opens `TO_PRE_WINDOW` + the pre-window from now,
/// paused so that nobody is admitted while the test compares places (a
/// pause keeps the pre-window: joins in it are still shuffled).
async fn server() -> TestServer {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let opens = UNIX_EPOCH + now + TO_PRE_WINDOW + Duration::from_secs(5);
    let opens_at = humantime::format_rfc3339_millis(opens).to_string();
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(origin_addr, dir.path(), &opens_at);
    let s = TestServer::start_with(&toml, origin, dir).await;
    s.pause("drop", "pause").await;
    s
}

/// The event as the admin API shows it, stats refreshed from the store.
async fn event(s: &TestServer) -> Result<Value> {
    let (status, _, body) = s.admin_get("/admin/events/drop", Some(ADMIN_TOKEN)).await;
    ensure!(status == StatusCode::OK, "admin show answered {status}");
    Ok(serde_json::from_slice(&body)?)
}

async fn phase(s: &TestServer) -> Result<String> {
    Ok(event(s).await?["stats"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Waits until the event's phase is `want`.
async fn phase_is(s: &TestServer, want: &str) -> Result<()> {
    wait_for(&format!("phase {want}"), STEP, || async {
        Ok((phase(s).await? == want).then_some(()))
    })
    .await
}

/// The page (already open before the pre-window) joins inside it: the
/// store counts one waiting visitor while the phase is still `pre_queue`.
async fn joined_inside_the_pre_window(s: &TestServer) -> Result<()> {
    ensure!(
        phase(s).await? == "scheduled",
        "the page loaded too late: the pre-window had already opened"
    );
    phase_is(s, "pre_queue").await?;
    wait_for("the page to join in the pre-window", STEP, || async {
        let e = event(s).await?;
        let waiting = e["stats"]["waiting"].as_u64().unwrap_or(0);
        let phase = e["stats"]["phase"].as_str().unwrap_or_default().to_owned();
        if waiting >= 1 {
            if phase != "pre_queue" {
                bail!("joined only once the queue opened (phase {phase})");
            }
            return Ok(Some(()));
        }
        if phase != "pre_queue" && phase != "scheduled" {
            bail!("the queue opened ({phase}) and the page had not joined");
        }
        Ok(None)
    })
    .await
}

/// After opening, scripted visitors arrive; each is behind the browser
/// (rank ≥ 1: the browser's pre-window place is ahead of every post-opening
/// arrival).
async fn later_arrivals_are_behind(s: &TestServer) -> Result<()> {
    phase_is(s, "paused").await?;
    for n in 1..=3u64 {
        let mut v = Visitor::default();
        let (status, p) = v.json(Method::POST, &s.url(ENTER), None).await;
        ensure!(status == StatusCode::OK, "enter answered {status}: {p}");
        let (_, p) = v.json(Method::GET, &s.url(POSITION), None).await;
        ensure!(
            p["status"] == "PAUSED" && p["rank"].as_u64() == Some(n),
            "post-opening arrival {n} is not behind the browser: {p}"
        );
    }
    Ok(())
}

async fn body_text(client: &Client) -> Result<String> {
    Ok(client
        .find(fantoccini::Locator::Css("body"))
        .await?
        .text()
        .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_open_before_the_pre_window_joins_it() {
    let s = server().await;
    let public = s.public;
    let s = &s;
    with_browser(|client| async move {
        client.goto(&format!("http://{public}/shop/item")).await?;
        wait_for("the NOT_OPEN heading", STEP, || async {
            let heading = client
                .find(fantoccini::Locator::Id("ar-heading"))
                .await?
                .text()
                .await?;
            Ok((heading == "The line is not open yet").then_some(()))
        })
        .await?;
        joined_inside_the_pre_window(s).await?;
        later_arrivals_are_behind(s).await?;
        // The page tells the browser its place once the queue opens.
        wait_for("the page to show the first place", STEP, || async {
            let text = body_text(&client).await?;
            Ok(text.contains("You are next in line").then_some(text))
        })
        .await?;
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_javascript_the_refresh_joins_inside_the_pre_window() {
    let s = server().await;
    let public = s.public;
    let s = &s;
    with_browser_args(
        &["--blink-settings=scriptEnabled=false"],
        |client| async move {
            client
                .goto(&format!("http://{public}/queue/drop?return=/shop"))
                .await?;
            let text = body_text(&client).await?;
            ensure!(text.contains("The line is not open yet"), "{text}");
            ensure!(
                text.contains("This page refreshes itself"),
                "scripting is not off: {text}"
            );
            // Chromium follows the page's own meta refresh: nothing else loads it.
            joined_inside_the_pre_window(s).await?;
            later_arrivals_are_behind(s).await?;
            wait_for(
                "the refreshed page to show the first place",
                STEP,
                || async {
                    let text = body_text(&client).await?;
                    Ok(text.contains("You are next in line").then_some(text))
                },
            )
            .await?;
            Ok(())
        },
    )
    .await;
}
