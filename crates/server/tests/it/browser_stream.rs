//! The waiting page's push stream in real headless Chromium against the real
//! server (`anteroom::run` on port 0, embedded store, in-process origin):
//! the page follows `GET /api/queue/stream` (EventSource) without polling
//! and is admitted through it; with streams refused (`server.max_streams =
//! 0`, a `503`) it polls by itself and is still admitted.

use crate::support::origin::Origin;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::browser::{drop_event, status_text, wait_for, with_browser};
use crate::support::config::ConfigBuilder;
use crate::support::server::TestServer;
use anyhow::{Result, ensure};
use fantoccini::Client;
use serde_json::Value;

const STEP: Duration = Duration::from_secs(30);

fn config(origin: std::net::SocketAddr, dir: &std::path::Path, max_streams: u64) -> String {
    ConfigBuilder::new()
        .server_line("insecure_cookies = true")
        .server_line(&format!("max_streams = {max_streams}"))
        .embedded(dir)
        .event(drop_event(origin).challenge_off())
        .toml()
}

async fn start(max_streams: u64) -> TestServer {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(origin_addr, dir.path(), max_streams);
    TestServer::start_with(&toml, origin, dir).await
}

/// `window.anteroomTransport`: streams opened, stream messages, polls.
async fn transport(client: &Client) -> Result<Value> {
    Ok(client
        .execute("return window.anteroomTransport || null", vec![])
        .await?)
}

async fn arrived(client: &Client) -> Result<()> {
    wait_for("arrival at the original path", STEP, || async {
        let url = client.current_url().await?;
        Ok((url.path() == "/shop/item").then_some(()))
    })
    .await?;
    let body = client
        .find(fantoccini::Locator::Css("body"))
        .await?
        .text()
        .await?;
    ensure!(body.contains("origin saw /shop/item"), "{body}");
    Ok(())
}

/// How the page learnt of its admission (`stream <ms>` or `poll <ms>`),
/// kept in sessionStorage across the navigation to the return path.
async fn admitted_via(client: &Client) -> Result<(String, u64)> {
    let v: Value = client
        .execute("return sessionStorage.getItem('anteroomAdmitted')", vec![])
        .await?;
    let text = v.as_str().unwrap_or("").to_owned();
    let (how, ms) = text.split_once(' ').unwrap_or(("", "0"));
    Ok((how.to_owned(), ms.parse().unwrap_or(0)))
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_follows_the_stream_and_is_admitted_through_it() {
    let s = start(100).await;
    // Paused, so the admission happens when the test says.
    s.pause("drop", "pause").await;
    let public = s.public;
    let s = &s;
    with_browser(|client| async move {
        client
            .goto(&format!("http://{public}/shop/item?x=1"))
            .await?;
        wait_for("the paused place on the page", STEP, || async {
            let text = status_text(&client).await?;
            Ok(text.contains("paused").then_some(()))
        })
        .await?;
        let t = wait_for("a message through the stream", STEP, || async {
            let t = transport(&client).await?;
            Ok((t["streamMessages"].as_u64() >= Some(1)).then_some(t))
        })
        .await?;
        ensure!(t["streams"] == 1, "{t}");

        let resumed_ms = now_ms();
        s.pause("drop", "resume").await;
        // Before the navigation: the page has not polled while it streamed.
        let before = transport(&client).await.unwrap_or(Value::Null);
        arrived(&client).await?;
        let (how, seen_ms) = admitted_via(&client).await?;
        ensure!(
            how == "stream",
            "admission learnt by {how:?}, not the stream"
        );
        ensure!(
            before.is_null() || before["polls"] == 0,
            "the page polled while it followed the stream: {before}"
        );
        let latency = seen_ms.saturating_sub(resumed_ms);
        eprintln!("resume to ADMITTED on the page through the stream: {latency} ms");
        // The contract's 1 s for the push, plus the scheduler's next tick
        // after the resume and a loaded box's slack.
        ensure!(
            latency < 5_000,
            "ADMITTED reached the page {latency} ms after the resume"
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_stream_falls_back_to_polling_and_is_still_admitted() {
    let s = start(0).await;
    s.pause("drop", "pause").await;
    let public = s.public;
    let s = &s;
    with_browser(|client| async move {
        client
            .goto(&format!("http://{public}/shop/item?x=1"))
            .await?;
        let t = wait_for("a refused stream, then polls", STEP, || async {
            let t = transport(&client).await?;
            Ok((t["streams"].as_u64() >= Some(1) && t["polls"].as_u64() >= Some(2)).then_some(t))
        })
        .await?;
        ensure!(t["streamMessages"] == 0, "a refused stream delivered: {t}");
        s.pause("drop", "resume").await;
        arrived(&client).await?;
        let (how, _) = admitted_via(&client).await?;
        ensure!(how == "poll", "admission learnt by {how:?}, not by polling");
        Ok(())
    })
    .await;
}
