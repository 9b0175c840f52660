//! The full journey in real headless Chromium against the real server
//! (`anteroom::run` on port 0, embedded store, in-process origin): a protected
//! URL redirects to the waiting page, which joins, shows the
//! position moving (and the pause), is admitted, redeems and lands on the
//! original path with the pass cookie.

use crate::support::origin::Origin;
use crate::support::visitor::Visitor;

use std::time::Duration;

use crate::support::browser::{drop_event, status_text, wait_for, with_browser};
use crate::support::config::ConfigBuilder;
use crate::support::server::TestServer;
use anyhow::{Context, Result, ensure};
use fantoccini::{Client, Locator};
use http::{Method, StatusCode};
use serde_json::json;

const ENTER: &str = "/api/queue/enter?eventId=drop";
const RELEASE: &str = "/api/queue/release?eventId=drop";
const STEP: Duration = Duration::from_secs(30);

fn config(origin: std::net::SocketAddr, dir: &std::path::Path) -> String {
    ConfigBuilder::new()
        .server_line("insecure_cookies = true")
        .embedded(dir)
        .event(
            drop_event(origin)
                .line(r#"bots = { challenge = "all", difficulty = 12, high_risk = "allow" }"#),
        )
        .toml()
}

/// A scripted visitor ahead of the browser; answers a challenge in Rust if asked.
async fn join(s: &TestServer) -> Visitor {
    let mut v = Visitor::default();
    let (status, body) = v.json(Method::POST, &s.url(ENTER), None).await;
    if status == StatusCode::OK {
        return v;
    }
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let challenge = body["challenge"]["challenge"].as_str().unwrap().to_owned();
    let difficulty =
        u32::from(u8::try_from(body["challenge"]["difficulty"].as_u64().unwrap()).unwrap());
    let nonce = (0u64..)
        .find(|&n| {
            anteroom_core::pow::leading_zero_bits(&anteroom_core::pow::hash(&challenge, n))
                >= difficulty
        })
        .unwrap();
    let answer = json!({ "challenge": challenge, "nonce": nonce }).to_string();
    let (status, body) = v.json(Method::POST, &s.url(ENTER), Some(&answer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    v
}

async fn status_contains(client: &Client, what: &str) -> Result<String> {
    wait_for(&format!("status to say {what:?}"), STEP, || async {
        let text = status_text(client).await?;
        Ok(text.contains(what).then_some(text))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn journey_against_the_real_server() {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(origin_addr, dir.path());
    let s = TestServer::start_with(&toml, origin, dir).await;
    // Paused, so the two visitors ahead stay ahead until the test lets them go.
    s.pause("drop", "pause").await;
    let mut ahead = [join(&s).await, join(&s).await];
    let public = s.public;

    with_browser(|client| async move {
        client
            .goto(&format!("http://{public}/shop/item?x=1"))
            .await?;
        let url = client.current_url().await?;
        ensure!(
            url.path() == "/queue/drop",
            "not redirected to the waiting page: {url}"
        );

        // The page joined by itself and shows the place and the pause. With
        // `challenge = "all"` enter let it in only after a valid answer, so
        // the place is itself proof the server accepted the page's work.
        let text = status_contains(&client, "You are number 3 in line").await?;
        ensure!(text.contains("paused"), "pause not shown: {text}");
        let pow: serde_json::Value = client
            .execute("return window.anteroomLastPow || null", vec![])
            .await?;
        ensure!(
            pow["nonce"].is_u64() && pow["hashes"].as_u64() >= Some(1),
            "the page solved no proof-of-work challenge: {pow}"
        );
        // With the faster engine: the worker loaded sha256.js from the node.
        ensure!(pow["engine"] == "js", "solved with {}", pow["engine"]);
        let eta = client.find(Locator::Id("ar-eta")).await?.text().await?;
        ensure!(!eta.is_empty(), "no ETA line");

        // Visitors ahead leave: the page follows.
        for (visitor, next) in ahead
            .iter_mut()
            .zip(["You are number 2 in line", "You are next in line"])
        {
            let (status, _, _) = visitor.call(Method::POST, &s.url(RELEASE), &[], None).await;
            ensure!(
                status == StatusCode::NO_CONTENT,
                "release answered {status}"
            );
            status_contains(&client, next).await?;
        }

        // Resume: admitted, redeemed, and on the original path through the gate.
        s.pause("drop", "resume").await;
        wait_for("arrival at the original path", STEP, || async {
            let url = client.current_url().await?;
            Ok((url.path() == "/shop/item").then_some(()))
        })
        .await?;
        ensure!(client.current_url().await?.query() == Some("x=1"));
        let body = client.find(Locator::Css("body")).await?.text().await?;
        ensure!(
            body.contains("origin saw /shop/item?x=1"),
            "origin did not answer: {body}"
        );
        let pass = client
            .get_named_cookie("anteroom_pass")
            .await
            .context("no pass cookie")?;
        ensure!(!pass.value().is_empty());
        Ok(())
    })
    .await;
}
