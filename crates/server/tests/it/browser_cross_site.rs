//! Journeys that come back from another site, in real headless Chromium
//! against the real server with `Secure` cookies: a second site on another
//! loopback address (127.0.0.2, another site to Chromium) links and
//! form-posts to Anteroom on 127.0.0.1.
//!
//! Chromium treats http://127.0.0.1 as a secure context, so it stores and
//! sends `Secure`, `__Host-` and `SameSite=None` cookies over plain http
//! there: the production cookie settings are tested as they are, with no
//! browser flag and no `insecure_cookies`.

use crate::support::origin::Origin;

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::browser::{drop_event, status_text, wait_for, with_browser};
use crate::support::config::{ADMIN_TOKEN, ConfigBuilder};
use crate::support::server::TestServer;
use anyhow::{Context, Result, ensure};
use axum::Router;
use axum::response::Html;
use fantoccini::{Client, Locator};

const STEP: Duration = Duration::from_secs(30);

fn config(origin: SocketAddr, dir: &std::path::Path, cookies: &str) -> String {
    ConfigBuilder::new()
        .server_line(cookies)
        .embedded(dir)
        .event(drop_event(origin).challenge_off())
        .toml()
}

/// The other site: a page with a link to the waiting page, a link to a
/// protected path and a payment provider's auto-less form `POST` to one.
async fn other_site(anteroom: SocketAddr) -> SocketAddr {
    let html = format!(
        r#"<!doctype html><html><body>
<a id="to-queue" href="http://{anteroom}/queue/drop?return=%2Fshop%2Fcart">back to the queue</a>
<a id="to-shop" href="http://{anteroom}/shop/next">back to the shop</a>
<form id="pay" method="post" action="http://{anteroom}/shop/paid">
<input type="hidden" name="payment" value="ok"><button id="pay-button">return</button>
</form></body></html>"#
    );
    let app = Router::new().fallback(move || {
        let html = html.clone();
        async move { Html(html) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("cannot bind 127.0.0.2 (a loopback /8 address; Linux has it)");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn session_cookie(client: &Client, name: &str) -> Result<String> {
    let c = client
        .get_named_cookie(name)
        .await
        .with_context(|| format!("no {name} cookie"))?;
    Ok(c.value().to_owned())
}

async fn status_contains(client: &Client, what: &str) -> Result<String> {
    wait_for(&format!("status to say {what:?}"), STEP, || async {
        let text = status_text(client).await?;
        Ok(text.contains(what).then_some(text))
    })
    .await
}

async fn body_text(client: &Client) -> Result<String> {
    Ok(client.find(Locator::Css("body")).await?.text().await?)
}

async fn waiting(s: &TestServer) -> u64 {
    let (_, _, body) = s.admin_get("/admin/events/drop", Some(ADMIN_TOKEN)).await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    body["stats"]["waiting"].as_u64().unwrap_or(u64::MAX)
}

/// Every journey with the given `[server.cookies]` lines, with the pass
/// cookie named `pass_name`.
async fn journeys(cookies: &str, sid_name: &'static str, post_reaches_origin: bool) {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(origin_addr, dir.path(), cookies);
    let s = TestServer::start_with(&toml, origin, dir).await;
    s.pause("drop", "pause").await;
    let public = s.public;
    let other = other_site(public).await;

    with_browser(|client| async move {
        // A visitor takes a place.
        client
            .goto(&format!("http://{public}/queue/drop?return=%2Fshop%2Fcart"))
            .await?;
        status_contains(&client, "You are next in line").await?;
        let sid = session_cookie(&client, sid_name).await?;
        let s = &s;
        wait_for("one visitor waiting", STEP, || async {
            Ok((waiting(s).await == 1).then_some(()))
        })
        .await?;

        // Away to another site (an email, a search result) and back by a
        // link: the same session, the same place, nobody new in the queue.
        client.goto(&format!("http://{other}/")).await?;
        client.find(Locator::Id("to-queue")).await?.click().await?;
        wait_for("the waiting page", STEP, || async {
            Ok((client.current_url().await?.path() == "/queue/drop").then_some(()))
        })
        .await?;
        status_contains(&client, "You are next in line").await?;
        ensure!(
            session_cookie(&client, sid_name).await? == sid,
            "the link from another site replaced the session"
        );
        ensure!(
            waiting(s).await == 1,
            "the link from another site queued a second visitor"
        );

        // Admitted: the page redeems and lands on the return path.
        s.pause("drop", "resume").await;
        wait_for("arrival at the return path", STEP, || async {
            Ok((client.current_url().await?.path() == "/shop/cart").then_some(()))
        })
        .await?;
        ensure!(body_text(&client).await?.contains("origin saw /shop/cart"));

        // An active visitor comes back from another site by a link...
        client.goto(&format!("http://{other}/")).await?;
        client.find(Locator::Id("to-shop")).await?.click().await?;
        wait_for("the origin behind the link", STEP, || async {
            let body = body_text(&client).await?;
            Ok(body.contains("origin saw /shop/next").then_some(()))
        })
        .await?;

        // ... and by a payment provider's form post.
        client.goto(&format!("http://{other}/")).await?;
        client
            .find(Locator::Id("pay-button"))
            .await?
            .click()
            .await?;
        wait_for("the answer to the form post", STEP, || async {
            let url = client.current_url().await?;
            let body = body_text(&client).await?;
            Ok((url.path() == "/shop/paid" && !body.is_empty()).then_some(body))
        })
        .await
        .and_then(|body| {
            ensure!(
                body.contains("origin saw /shop/paid") == post_reaches_origin,
                "form post from another site: {body}"
            );
            Ok(())
        })?;
        ensure!(
            session_cookie(&client, sid_name).await? == sid,
            "the session changed along the way"
        );
        Ok(())
    })
    .await;
}

/// The defaults with `Secure` cookies: `__Host-` names, session `Lax`, pass
/// `None` (read cross-site on top-level navigations only).
#[tokio::test(flavor = "multi_thread")]
async fn a_visitor_keeps_the_place_and_the_pass_across_sites() {
    journeys("", "__Host-anteroom_sid", true).await;
}

/// Whatever `SameSite` the operator picks, a link from another site never
/// costs the place: with a `Strict` session the page's load carries no
/// cookie, so it must not mint one; the page's own call then finds the place.
/// A `Lax` pass cannot come with a cross-site `POST`: that return is queued,
/// which is why the pass defaults to `None`.
#[tokio::test(flavor = "multi_thread")]
async fn a_strict_session_still_keeps_the_place_and_a_lax_pass_queues_the_post() {
    journeys(
        "[server.cookies]\nsession_same_site = \"strict\"\npass_same_site = \"lax\"",
        "__Host-anteroom_sid",
        false,
    )
    .await;
}
