//! The operator dashboard in real headless Chromium against a real server:
//! sign in with the admin token (never in the URL), live figures and charts
//! that move at least every 2 s, the controls with their confirmation,
//! screenshots at 1280 and 390 px, and axe-core with no serious or critical
//! violation.

use crate::support::config::ADMIN_TOKEN;
use crate::support::process::{self, Node};
use crate::support::server;
use crate::support::visitor::Visitor;

use std::time::{Duration, Instant};

use crate::support::browser::axe::{axe_check, axe_source};
use crate::support::browser::{artifacts_dir, wait_for, with_browser, with_browser_args};
use crate::support::server::TestServer;
use anteroom_store::testing::RedisServer;
use anyhow::{Context, Result, bail, ensure};
use fantoccini::{Client, Locator};
use http::{Method, StatusCode};
use serde_json::{Value, json};

/// A named read-only admin token (dashboards on a wall screen).
const VIEWER_TOKEN: &str = "viewer-token-0123456789";

const STEP: Duration = Duration::from_secs(20);

/// Sizes the window so the viewport is `width`×`height` (headless Chromium's
/// window size includes its invisible frame).
async fn fit_viewport(client: &Client, width: u32, height: u32) -> Result<()> {
    client.set_window_size(width, height).await?;
    let inner: Value = client
        .execute("return [innerWidth, innerHeight]", vec![])
        .await?;
    let grow = |outer: u32, inner: &Value| {
        let inner = u32::try_from(inner.as_u64().unwrap_or(0)).unwrap_or(outer);
        outer + outer.saturating_sub(inner)
    };
    client
        .set_window_size(grow(width, &inner[0]), grow(height, &inner[1]))
        .await?;
    Ok(())
}

/// Shows the whole page at `width` and saves it as `name`.
async fn screenshot(client: &Client, width: u32, name: &str) -> Result<()> {
    fit_viewport(client, width, 800).await?;
    let height: Value = client
        .execute("return document.documentElement.scrollHeight", vec![])
        .await?;
    let height = u32::try_from(height.as_u64().unwrap_or(800)).unwrap_or(800);
    fit_viewport(client, width, height.clamp(600, 4000)).await?;
    let overflow: Value = client
        .execute(
            "return document.documentElement.scrollWidth > innerWidth",
            vec![],
        )
        .await?;
    ensure!(
        overflow == json!(false),
        "{name}: page wider than {width} px"
    );
    let path = artifacts_dir()?.join(name);
    std::fs::write(&path, client.screenshot().await?)
        .with_context(|| path.display().to_string())?;
    println!("saved {}", path.display());
    Ok(())
}

/// Types `token` into the sign-in form and submits it.
async fn sign_in(client: &Client, token: &str) -> Result<()> {
    let field = client.find(Locator::Id("token")).await?;
    field.send_keys(token).await?;
    client
        .find(Locator::Css("#login-form button"))
        .await?
        .click()
        .await?;
    Ok(())
}

async fn text_of(client: &Client, css: &str) -> Result<String> {
    Ok(client.find(Locator::Css(css)).await?.text().await?)
}

async fn wait_text(client: &Client, css: &str, want: &str) -> Result<String> {
    wait_for(&format!("{css} to contain {want:?}"), STEP, || async {
        let t = text_of(client, css).await.unwrap_or_default();
        Ok(t.contains(want).then_some(t))
    })
    .await
}

/// Waits until the event's badges read exactly `want` (e.g. "OPEN", not
/// "OPEN PAUSED" on the way between two states).
async fn wait_badges(client: &Client, event: &str, want: &str) -> Result<()> {
    let css = format!("[data-event={event}] .badges");
    wait_for(&format!("{css} to be {want:?}"), STEP, || async {
        let t = text_of(client, &css).await.unwrap_or_default();
        Ok((t.trim() == want).then_some(()))
    })
    .await
}

async fn points(client: &Client, event: &str) -> Result<usize> {
    let n: Value = client
        .execute(
            &format!(
                "const p = document.querySelector('[data-event={event}] svg polyline');
                 return p ? (p.getAttribute('points') || '').split(' ').filter(Boolean).length : 0"
            ),
            vec![],
        )
        .await?;
    Ok(usize::try_from(n.as_u64().unwrap_or(0)).unwrap_or(0))
}

/// Clicks a control of `event`, then the dialog's confirm (or cancel) button.
async fn control(client: &Client, event: &str, label: &str, confirm: bool) -> Result<()> {
    let card = client
        .find(Locator::Css(&format!("[data-event={event}]")))
        .await?;
    card.find(Locator::XPath(&format!(".//button[text()='{label}']")))
        .await?
        .click()
        .await?;
    let button = if confirm {
        "#confirm-ok"
    } else {
        "#confirm button[value=cancel]"
    };
    wait_for("the confirmation dialog", STEP, || async {
        let open: Value = client
            .execute("return document.getElementById('confirm').open", vec![])
            .await?;
        Ok((open == json!(true)).then_some(()))
    })
    .await?;
    client.find(Locator::Css(button)).await?.click().await?;
    Ok(())
}

async fn event_json(s: &TestServer, event: &str) -> Value {
    let (status, _, body) = s
        .admin_get(&format!("/admin/events/{event}"), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_signs_in_shows_live_figures_and_steers() {
    let axe = axe_source();
    let s = TestServer::start(&format!(
        "[[server.admin_tokens]]\nname = \"viewer\"\ntoken = \"{VIEWER_TOKEN}\"\nrole = \"read\"\n"
    ))
    .await;
    // Five visitors: max_active = 2 admits two (outstanding tokens), three wait.
    for _ in 0..5 {
        let (status, _) = Visitor::default()
            .json(
                Method::POST,
                &s.url("/api/queue/enter?eventId=tickets"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    server::wait_until("two admitted", || async {
        event_json(&s, "tickets").await["stats"]["outstanding"] == 2
    })
    .await;

    // The page is served with a self-only policy and no caching.
    let (status, headers, _) = s.admin_get("/dashboard", None).await;
    assert_eq!(status, StatusCode::OK);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(headers["cache-control"], "no-store");
    let (status, _, _) = s.admin_get("/dashboard/nope.js", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let base = format!("http://{}", s.admin);
    let s = &s;
    with_browser_args(&["--force-prefers-reduced-motion"], |client| async move {
        fit_viewport(&client, 1280, 800).await?;
        client.goto(&format!("{base}/dashboard")).await?;

        // A wrong token is refused and asked for again.
        let field = client.find(Locator::Id("token")).await?;
        ensure!(field.attr("type").await?.as_deref() == Some("password"));
        sign_in(&client, "not-the-token").await?;
        wait_text(&client, "#login-error", "refused").await?;

        sign_in(&client, ADMIN_TOKEN).await?;
        wait_text(&client, "[data-event=tickets] [data-stat=waiting]", "3").await?;
        let url = client.current_url().await?;
        ensure!(
            !url.as_str().contains(ADMIN_TOKEN) && url.path() == "/dashboard",
            "token in the URL: {url}"
        );
        let stored: Value = client
            .execute(
                "return [sessionStorage.getItem('anteroom.dashboard.token'), localStorage.length]",
                vec![],
            )
            .await?;
        ensure!(stored == json!([ADMIN_TOKEN, 0]), "{stored}");
        ensure!(
            text_of(&client, "[data-event=tickets] [data-stat=capacity]").await? == "2 / 2",
            "capacity"
        );
        ensure!(text_of(&client, "[data-event=tickets] [data-stat=outstanding]").await? == "2");
        wait_badges(&client, "tickets", "OPEN").await?;

        // The charts take a new point at least every 2 s.
        let before = points(&client, "tickets").await?;
        let started = Instant::now();
        wait_for("a new chart point", STEP, || async {
            Ok((points(&client, "tickets").await? > before).then_some(()))
        })
        .await?;
        let took = started.elapsed();
        ensure!(
            took <= Duration::from_secs(2),
            "chart updated after {took:?}"
        );
        wait_for("three chart points", STEP, || async {
            Ok((points(&client, "tickets").await? >= 3).then_some(()))
        })
        .await?;

        // Pause, cancelled first: nothing changes.
        control(&client, "tickets", "Pause", false).await?;
        ensure!(event_json(s, "tickets").await["state"] == "running");
        control(&client, "tickets", "Pause", true).await?;
        wait_badges(&client, "tickets", "PAUSED").await?;
        ensure!(event_json(s, "tickets").await["state"] == "paused");
        control(&client, "tickets", "Resume", true).await?;
        wait_badges(&client, "tickets", "OPEN").await?;
        ensure!(event_json(s, "tickets").await["state"] == "running");

        // max_active, with its confirmation; then the queue moves.
        let input = client
            .find(Locator::Css("[data-event=tickets] input[type=number]"))
            .await?;
        input.send_keys("4").await?;
        control(&client, "tickets", "Set max_active", true).await?;
        wait_text(&client, "[data-event=tickets] [data-stat=capacity]", "/ 4").await?;
        ensure!(event_json(s, "tickets").await["config"]["max_active"] == 4);
        wait_text(&client, "[data-event=tickets] [data-stat=waiting]", "1").await?;

        control(&client, "other", "Close event", true).await?;
        wait_badges(&client, "other", "CLOSED").await?;
        ensure!(event_json(s, "other").await["state"] == "closed");

        // After a few seconds of moves, the charts show them.
        screenshot(&client, 1280, "dashboard-1280.png").await?;
        axe_check(&client, &axe, "1280 px").await?;

        // A reload keeps the session's token and the charts' history.
        let kept = points(&client, "tickets").await?;
        client.refresh().await?;
        wait_text(&client, "[data-event=tickets] [data-stat=waiting]", "1").await?;
        let after = points(&client, "tickets").await?;
        ensure!(
            after + 5 >= kept,
            "history lost on reload: {kept} -> {after}"
        );

        screenshot(&client, 390, "dashboard-390.png").await?;
        axe_check(&client, &axe, "390 px").await?;

        // Signing out forgets the token.
        client.find(Locator::Id("signout")).await?.click().await?;
        let gone: Value = client
            .execute(
                "return sessionStorage.getItem('anteroom.dashboard.token')",
                vec![],
            )
            .await?;
        if !gone.is_null() {
            bail!("token kept after sign-out: {gone}");
        }
        ensure!(
            client
                .find(Locator::Id("token"))
                .await?
                .is_displayed()
                .await?
        );

        // A read-only token (named, role "read") hides the controls: the page
        // asks the real `GET /admin/whoami`.
        sign_in(&client, VIEWER_TOKEN).await?;
        wait_text(&client, "[data-event=tickets] [data-stat=waiting]", "1").await?;
        wait_for("the read-only notice", STEP, || async {
            Ok(client
                .find(Locator::Id("readonly"))
                .await?
                .is_displayed()
                .await?
                .then_some(()))
        })
        .await?;
        for event in ["tickets", "other"] {
            let controls = client
                .find(Locator::Css(&format!("[data-event={event}] .controls")))
                .await?;
            ensure!(!controls.is_displayed().await?, "{event}: controls shown");
        }
        Ok(())
    })
    .await;
}

/// A node that refuses a table stored through the admin API shows which and
/// why on its dashboard, and stops once it runs the table. Two nodes on one
/// real Redis, in process: the second's config file protects the path the
/// first stores another event on.
#[tokio::test(flavor = "multi_thread")]
async fn dashboard_shows_the_stored_events_its_node_refuses() {
    let axe = axe_source();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = "http://127.0.0.1:9";
    let base = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event("tickets", origin, 1));
    let one = Node::in_process(&base.clone().toml()).await;
    let local = process::event("local", origin, 1).paths(&["/local/"]);
    let two = Node::in_process(&base.event(local).toml()).await;
    let table = |path: &str| json!({ "paths": [path], "origin": origin, "max_active": 5 });
    let (status, ev) = one
        .admin_json(Method::PUT, "/admin/events/other", &table("/local/"))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    let url = two.admin_url("/dashboard");
    let one = &one;
    with_browser(|client| async move {
        fit_viewport(&client, 1280, 800).await?;
        client.goto(&url).await?;
        sign_in(&client, ADMIN_TOKEN).await?;
        wait_text(
            &client,
            "#refusals-list",
            "other: path /local/ is protected by event local here",
        )
        .await?;
        axe_check(&client, &axe, "a refusal shown").await?;
        screenshot(&client, 1280, "dashboard-refusal-1280.png").await?;

        // The table made runnable: node two runs it and the notice goes.
        let (status, ev) = one
            .admin_json(Method::PUT, "/admin/events/other", &table("/elsewhere/"))
            .await;
        ensure!(status == StatusCode::OK, "{ev}");
        wait_for("the refusal notice gone", STEP, || async {
            let shown = client
                .find(Locator::Id("refusals"))
                .await?
                .is_displayed()
                .await?;
            Ok((!shown).then_some(()))
        })
        .await?;
        Ok(())
    })
    .await;
}

/// An event id may be any `[A-Za-z0-9_-]` name, "constructor" and
/// "__proto__" too: on a plain object those find `Object.prototype`'s
/// members, and the page kept an event's history and card in plain objects,
/// so one such event stopped every card from updating.
#[tokio::test(flavor = "multi_thread")]
async fn events_named_like_object_members_get_their_cards() {
    let s = TestServer::start("").await;
    for id in ["constructor", "__proto__"] {
        let table = json!({ "paths": [format!("/{id}/")], "origin": "http://127.0.0.1:9", "max_active": 3 });
        let (status, _, body) = s
            .admin_call(
                Method::PUT,
                &format!("/admin/events/{id}"),
                Some(ADMIN_TOKEN),
                Some(&table.to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    let (status, _) = Visitor::default()
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let url = format!("http://{}/dashboard", s.admin);
    with_browser(|client| async move {
        fit_viewport(&client, 1280, 800).await?;
        client.goto(&url).await?;
        sign_in(&client, ADMIN_TOKEN).await?;
        wait_badges(&client, "constructor", "OPEN").await?;
        wait_badges(&client, "__proto__", "OPEN").await?;
        wait_text(
            &client,
            "[data-event=constructor] [data-stat=capacity]",
            "/ 3",
        )
        .await?;
        // Another event's card still follows its figures, and the page says
        // it is live, not that the API is unreachable.
        wait_text(&client, "[data-event=tickets] [data-stat=outstanding]", "1").await?;
        wait_text(&client, "#conn", "Live").await?;
        // A reload restores the charts' history kept for those ids.
        client.refresh().await?;
        wait_badges(&client, "__proto__", "OPEN").await?;
        wait_text(&client, "#conn", "Live").await?;
        Ok(())
    })
    .await;
    s.stop().await;
}

/// An address held off for guessing tokens is told so, with how long, not
/// that the admin API is unreachable.
#[tokio::test(flavor = "multi_thread")]
async fn an_address_held_off_for_guessing_is_told_so() {
    let s = TestServer::start("").await;
    for i in 0..20 {
        let (status, _, _) = s
            .admin_get("/admin/events", Some(&format!("guess-{i:08}")))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let url = format!("http://{}/dashboard", s.admin);
    with_browser(|client| async move {
        client.goto(&url).await?;
        sign_in(&client, ADMIN_TOKEN).await?;
        let said = wait_text(&client, "#conn", "Too many wrong tokens").await?;
        ensure!(said.contains(" s more"), "{said}");
        Ok(())
    })
    .await;
    s.stop().await;
}

/// Signing out while a poll is on its way: its answer is dropped, so the
/// charts are not drawn again and saved for the next operator of the tab,
/// and no poll follows without a token (which the API counted as a wrong
/// token, and the login said "refused" to someone who had signed out).
#[tokio::test(flavor = "multi_thread")]
async fn signing_out_during_a_poll_leaves_nothing_behind() {
    let s = TestServer::start("").await;
    let url = format!("http://{}/dashboard", s.admin);
    with_browser(|client| async move {
        fit_viewport(&client, 1280, 800).await?;
        client.goto(&url).await?;
        sign_in(&client, ADMIN_TOKEN).await?;
        wait_badges(&client, "tickets", "OPEN").await?;
        // Every answer of the admin API now reaches the page a second late,
        // and the page's requests are counted.
        client
            .execute(
                "const real = window.fetch;
                 window.sent = [];
                 window.fetch = (path, init) => {
                   window.sent.push([path, init.headers.Authorization]);
                   return real(path, init).then(r => new Promise(ok => setTimeout(() => ok(r), 1000)));
                 };",
                vec![],
            )
            .await?;
        wait_for("a poll on its way", STEP, || async {
            let n: Value = client.execute("return window.sent.length", vec![]).await?;
            Ok((n.as_u64() >= Some(1)).then_some(()))
        })
        .await?;
        client.find(Locator::Id("signout")).await?.click().await?;
        let sent_then: Value = client.execute("return window.sent.length", vec![]).await?;
        // Past the late answer, and a poll interval after it.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let left: Value = client
            .execute(
                "return { cards: document.querySelectorAll('[data-event]').length,
                          history: sessionStorage.getItem('anteroom.dashboard.history'),
                          error: document.getElementById('login-error').textContent,
                          sent: window.sent }",
                vec![],
            )
            .await?;
        ensure!(left["cards"] == 0, "cards drawn after the sign-out: {left}");
        ensure!(left["history"].is_null(), "history saved after the sign-out: {left}");
        ensure!(left["error"] == "", "the login says: {left}");
        ensure!(
            left["sent"].as_array().map(Vec::len) == sent_then.as_u64().map(|n| n as usize),
            "requests after the sign-out: {left}"
        );
        Ok(())
    })
    .await;
    s.stop().await;
}

/// The role check of a token signed out of answers late, after another
/// token signed in: it is dropped. It hid the next operator's controls (a
/// read-only token's late answer after an admin signed in).
#[tokio::test(flavor = "multi_thread")]
async fn a_late_role_of_a_token_signed_out_of_changes_nothing() {
    let s = TestServer::start(&format!(
        "[[server.admin_tokens]]\nname = \"viewer\"\ntoken = \"{VIEWER_TOKEN}\"\nrole = \"read\"\n"
    ))
    .await;
    let url = format!("http://{}/dashboard", s.admin);
    with_browser(|client| async move {
        fit_viewport(&client, 1280, 800).await?;
        client.goto(&url).await?;
        // The viewer's role check answers two seconds late; `window.late`
        // is set a moment after that answer reached the page.
        client
            .execute(
                &format!(
                    "const real = window.fetch;
                     window.late = false;
                     window.fetch = (path, init) => {{
                       const r = real(path, init);
                       if (path !== '/admin/whoami' || init.headers.Authorization !== 'Bearer {VIEWER_TOKEN}') return r;
                       return r.then(v => new Promise(ok => setTimeout(() => {{
                         ok(v);
                         setTimeout(() => {{ window.late = true; }}, 200);
                       }}, 2000)));
                     }};"
                ),
                vec![],
            )
            .await?;
        sign_in(&client, VIEWER_TOKEN).await?;
        wait_badges(&client, "tickets", "OPEN").await?;
        client.find(Locator::Id("signout")).await?.click().await?;
        sign_in(&client, ADMIN_TOKEN).await?;
        wait_badges(&client, "tickets", "OPEN").await?;
        wait_for("the viewer's late role", STEP, || async {
            let v: Value = client.execute("return window.late", vec![]).await?;
            Ok((v == json!(true)).then_some(()))
        })
        .await?;
        let controls = client
            .find(Locator::Css("[data-event=tickets] .controls"))
            .await?;
        ensure!(controls.is_displayed().await?, "the admin's controls hidden");
        ensure!(
            !client
                .find(Locator::Id("readonly"))
                .await?
                .is_displayed()
                .await?,
            "the read-only notice shown to the admin"
        );
        Ok(())
    })
    .await;
    s.stop().await;
}
