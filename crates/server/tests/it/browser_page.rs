//! The waiting page in real headless Chromium, against an in-process fake of
//! the queue API (`browser/fake.rs`): the visitor's whole journey, screenshots
//! at phone and desktop sizes, and the proof-of-work solve time.

use crate::support::browser::fake;

use std::time::Duration;

use crate::support::browser::{
    artifacts_dir, status_text, wait_for, with_browser, with_browser_args,
};
use anyhow::{Context, Result, ensure};
use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

const STEP: Duration = Duration::from_secs(20);

async fn status_contains(client: &Client, what: &str) -> Result<String> {
    wait_for(&format!("status to say {what:?}"), STEP, || async {
        let text = status_text(client).await?;
        Ok(text.contains(what).then_some(text))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn journey_redirect_wait_pow_admit_arrive() {
    let (fake, addr) = fake::start(fake::Script {
        difficulty: Some(12),
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        // The gate sends the visitor to the waiting page, keeping the original path.
        client.goto(&format!("http://{addr}/protected?x=1")).await?;
        let url = client.current_url().await?;
        ensure!(
            url.path() == "/queue/demo",
            "not redirected to the page: {url}"
        );
        ensure!(url.query() == Some("return=%2Fprotected%3Fx%3D1"), "{url}");

        let region = client.find(Locator::Id("ar-announce")).await?;
        ensure!(region.attr("role").await?.as_deref() == Some("status"));
        ensure!(region.attr("aria-live").await?.as_deref() == Some("polite"));
        ensure!(region.attr("aria-atomic").await?.as_deref() == Some("true"));

        // Enter was answered with a challenge; the worker solved it and the fake
        // (using the core's verifier) accepted the answer.
        let text = status_contains(&client, "You are number 3 in line").await?;
        ensure!(
            text.contains("40 people in line") && text.contains("Estimated wait: about 3 minutes"),
            "{text}"
        );
        {
            let s = fake.script();
            ensure!(
                s.solved_nonce.is_some() && s.rejected_answers == 0,
                "challenge not solved: {s:?}"
            );
        }
        let pow: Value = client
            .execute("return window.anteroomLastPow || null", vec![])
            .await?;
        ensure!(pow["nonce"].as_u64() == fake.script().solved_nonce, "{pow}");

        // The page follows the queue as it moves.
        fake.script().rank = 1;
        status_contains(&client, "You are number 2 in line").await?;
        let progress: Value = client
            .execute(
                "return document.getElementById('ar-progress').value",
                vec![],
            )
            .await?;
        ensure!(progress == json!(97), "progress bar at {progress}");
        {
            let mut s = fake.script();
            s.rank = 0;
            s.wait_seconds = 20;
            s.display = "almost there".to_owned();
        }
        let text = status_contains(&client, "You are next in line").await?;
        ensure!(text.contains("Almost there"), "{text}");

        // Admission: the page redeems the token and lands on the original path.
        fake.script().admitted = true;
        wait_for("arrival at the original path", STEP, || async {
            let url = client.current_url().await?;
            Ok((url.path() == "/protected").then_some(url))
        })
        .await?;
        ensure!(client.current_url().await?.query() == Some("x=1"));
        let arrived = client.find(Locator::Id("arrived")).await?.text().await?;
        ensure!(arrived == "arrived", "the origin did not see the pass");
        let pass = client.get_named_cookie("anteroom_pass").await?;
        ensure!(pass.value() == "ok");
        ensure!(fake.script().redeemed);
        // The history entry of the page is replaced, so Back does not re-queue.
        let history: Value = client.execute("return history.length", vec![]).await?;
        ensure!(history.as_u64() <= Some(2), "history {history}");
        Ok(())
    })
    .await;
}

/// Sizes the window so the viewport (what the page sees) is `width`×`height`:
/// headless Chromium's window size includes its (invisible) browser frame.
async fn fit_viewport(client: &Client, width: u32, height: u32) -> Result<()> {
    client.set_window_size(width, height).await?;
    let inner: Value = client
        .execute("return [innerWidth, innerHeight]", vec![])
        .await?;
    let (iw, ih) = (
        inner[0].as_u64().context("innerWidth")?,
        inner[1].as_u64().context("innerHeight")?,
    );
    let frame = |outer: u32, inner: u64| {
        outer + outer.saturating_sub(u32::try_from(inner).unwrap_or(outer))
    };
    client
        .set_window_size(frame(width, iw), frame(height, ih))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn screenshots_phone_and_desktop() {
    let script = fake::Script {
        rank: 1233,
        queue_length: 50211,
        wait_seconds: 372,
        display: "about 7 minutes".to_owned(),
        poll_after_ms: 3000,
        ..Default::default()
    };
    let (_fake, addr) = fake::start(script).await;
    // Reduced motion turns the progress bar's width transition off (the
    // page's CSS honours it), so each screenshot shows the final width: the
    // transition runs on a shadow pseudo-element that `getAnimations` may
    // not list, so waiting on it alone could catch the bar mid-way.
    with_browser_args(&["--force-prefers-reduced-motion"], |client| async move {
        for (name, width, height) in [
            ("waiting-phone.png", 390, 844),
            ("waiting-desktop.png", 1280, 800),
        ] {
            fit_viewport(&client, width, height).await?;
            client
                .goto(&format!("http://{addr}/queue/demo?return=/shop"))
                .await?;
            status_contains(&client, "You are number 1,234 in line").await?;
            let inner: Value = client
                .execute("return [innerWidth, innerHeight]", vec![])
                .await?;
            ensure!(inner == json!([width, height]), "viewport {inner}");
            let reduced: Value = client
                .execute(
                    "return matchMedia('(prefers-reduced-motion: reduce)').matches",
                    vec![],
                )
                .await?;
            ensure!(reduced == json!(true), "reduced motion not emulated");
            // Let the progress bar finish its transition so the picture shows the real value.
            wait_for("transitions to settle", STEP, || async {
                let running: Value = client
                    .execute("return document.getAnimations().filter(a => a instanceof CSSTransition).length", vec![])
                    .await?;
                Ok((running == json!(0)).then_some(()))
            })
            .await?;
            let png = client.screenshot().await?;
            let path = artifacts_dir()?.join(name);
            std::fs::write(&path, png).with_context(|| path.display().to_string())?;
            println!("{name}: viewport {inner}, saved {}", path.display());
            // The page must fit the phone width: no horizontal scrolling.
            let overflow: Value = client
                .execute(
                    "return document.documentElement.scrollWidth > innerWidth",
                    vec![],
                )
                .await?;
            ensure!(
                overflow == json!(false),
                "{name}: page wider than the viewport"
            );
        }
        Ok(())
    })
    .await;
}

/// Solves `runs` fresh challenges at `difficulty` in a page worker and returns
/// the worker's reports ({nonce, hashes, ms, engine, challenge}).
async fn solve_in_worker(
    client: &Client,
    difficulty: u8,
    runs: u32,
    engine: Option<&str>,
) -> Result<Vec<Value>> {
    let script = r#"
        const [difficulty, runs, engine, done] = arguments;
        (async () => {
          const out = [];
          for (let i = 0; i < runs; i++) {
            // As long as a real signed challenge (~130 characters).
            const challenge = 'AQPH2eMbAAABnnBEiAAAAAGecEZcwAkJCQkJCQkJCQkJCQkJCQn6V6UtvwgZAhhSlzCj6Z22CAlkcm9wLTIwMjY.'
              + Math.random().toString(36).slice(2) + '-' + i;
            const worker = new Worker('/_anteroom/pow-worker.js');
            const result = await new Promise((resolve) => {
              worker.onmessage = (e) => resolve(e.data);
              worker.postMessage({ challenge, difficulty, engine });
            });
            worker.terminate();
            out.push(Object.assign({ challenge }, result));
          }
          done(out);
        })().catch((e) => done([{ error: String(e) }]));
    "#;
    let args = vec![json!(difficulty), json!(runs), json!(engine)];
    let Value::Array(results) = client.execute_async(script, args).await? else {
        anyhow::bail!("no results");
    };
    for r in &results {
        let challenge = r["challenge"].as_str().context("challenge")?;
        let nonce = r["nonce"]
            .as_u64()
            .with_context(|| format!("worker failed: {r}"))?;
        let bits =
            anteroom_core::pow::leading_zero_bits(&anteroom_core::pow::hash(challenge, nonce));
        ensure!(
            bits >= u32::from(difficulty),
            "worker answer rejected by the core: {r}"
        );
    }
    Ok(results)
}

/// The page's worker solves with sha256.js unless told otherwise, and with
/// WebCrypto when told to, answers the core accepts. The suite solves small
/// challenges; `scripts/bench-pow` sets `ANTEROOM_POW_TIMING` and measures
/// the solve times the default difficulty was chosen from. Those are a
/// benchmark, not a test: a 20-bit challenge's count of hashes is a
/// geometric draw, and one unlucky draw on a slow, loaded box took minutes.
#[tokio::test(flavor = "multi_thread")]
async fn the_pow_worker_solves_with_sha256_js_and_with_webcrypto() {
    let timing = std::env::var_os("ANTEROOM_POW_TIMING").is_some();
    let sizes: &[(u8, u32)] = if timing {
        &[(16, 4), (18, 2), (20, 1)]
    } else {
        &[(12, 2)]
    };
    let (_fake, addr) = fake::start(fake::Script::default()).await;
    with_browser(|client| async move {
        client
            .update_timeouts(TimeoutConfiguration::new(Some(Duration::from_secs(300)), None, None))
            .await?;
        client.goto(&format!("http://{addr}/queue/demo")).await?;
        // Told nothing, the worker takes the faster engine.
        let told_nothing = solve_in_worker(&client, 12, 1, None).await?;
        ensure!(told_nothing[0]["engine"] == "js", "{told_nothing:?}");
        let mut report = Vec::new();
        for engine in ["webcrypto", "js"] {
            for &(difficulty, runs) in sizes {
                let results = solve_in_worker(&client, difficulty, runs, Some(engine)).await?;
                ensure!(results.iter().all(|r| r["engine"] == engine), "{results:?}");
                let mut ms: Vec<f64> = results.iter().filter_map(|r| r["ms"].as_f64()).collect();
                ms.sort_by(f64::total_cmp);
                let hashes: f64 = results.iter().filter_map(|r| r["hashes"].as_f64()).sum();
                let total_ms: f64 = ms.iter().sum();
                let line = json!({
                    "engine": engine, "difficulty": difficulty, "runs": runs,
                    "median_ms": ms[ms.len() / 2], "mean_ms": (total_ms / ms.len() as f64).round(),
                    "max_ms": ms[ms.len() - 1],
                    "hashes_per_second": (hashes / (total_ms / 1000.0)).round(),
                    "expected_seconds": (2f64.powi(i32::from(difficulty)) / (hashes / (total_ms / 1000.0)) * 100.0).round() / 100.0,
                });
                println!("pow timing: {line}");
                report.push(line);
            }
        }
        if timing {
            let path = artifacts_dir()?.join("pow-timing.json");
            std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
            println!("saved {}", path.display());
        }
        Ok(())
    })
    .await;
}

/// What the live region holds now (its text as a screen reader reads it:
/// WebDriver's text of a visually hidden element may be empty).
async fn announced(client: &Client) -> Result<String> {
    let v: Value = client
        .execute(
            "return document.getElementById('ar-announce').textContent",
            vec![],
        )
        .await?;
    Ok(v.as_str().unwrap_or_default().to_owned())
}

/// What the live region said so far, recorded by a `MutationObserver` the
/// test installs (`window.heard`).
async fn heard(client: &Client) -> Result<Vec<String>> {
    let v: Value = client.execute("return window.heard", vec![]).await?;
    Ok(serde_json::from_value(v)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn screen_readers_hear_changes_that_matter_not_every_message() {
    let (fake, addr) = fake::start(fake::Script {
        rank: 40,
        queue_length: 500,
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        client.goto(&format!("http://{addr}/protected")).await?;
        status_contains(&client, "You are number 41 in line").await?;
        // The page was served before the visitor joined: joining is a new
        // status, said at once.
        let said = wait_for("the join said", STEP, || async {
            let text = announced(&client).await?;
            Ok(text.contains("You are number 41 in line").then_some(text))
        })
        .await?;
        ensure!(!said.contains("people"), "{said}");
        client
            .execute(
                "const r = document.getElementById('ar-announce');
                 window.heard = [];
                 new MutationObserver(() => window.heard.push(r.textContent))
                   .observe(r, { childList: true, characterData: true, subtree: true });",
                vec![],
            )
            .await?;

        // The line grows behind the visitor and they move up, message after
        // message (a poll every 300 ms here): seen at once, heard at most
        // once a window (30 s), and the line's length never.
        for (rank, length) in [(35, 800), (30, 1200), (25, 1500)] {
            {
                let mut s = fake.script();
                s.rank = rank;
                s.queue_length = length;
            }
            status_contains(&client, &format!("You are number {} in line", rank + 1)).await?;
        }
        let said = heard(&client).await?;
        ensure!(said.is_empty(), "announced within the window: {said:?}");
        ensure!(
            !announced(&client).await?.contains("people"),
            "the length is not said"
        );

        // A window later the next message says the latest place, once. The
        // place moves first and is seen, unsaid, before the clock does: a
        // poll answered before the move but read after the clock's jump
        // would say the place before it.
        fake.script().rank = 20;
        status_contains(&client, "You are number 21 in line").await?;
        ensure!(
            heard(&client).await?.is_empty(),
            "announced within the window"
        );
        client
            .execute(
                "const now = Date.now; Date.now = () => now() + 31000;",
                vec![],
            )
            .await?;
        let said = wait_for("the place said after the window", STEP, || async {
            let said = heard(&client).await?;
            Ok((!said.is_empty()).then_some(said))
        })
        .await?;
        ensure!(said.len() == 1, "{said:?}");
        ensure!(said[0].contains("You are number 21 in line"), "{said:?}");
        ensure!(said[0].contains("Estimated wait"), "{said:?}");
        ensure!(!said[0].contains("people"), "{said:?}");

        // Reaching the front is said at once, inside the window.
        fake.script().rank = 0;
        wait_for("the front said at once", STEP, || async {
            let said = heard(&client).await?;
            Ok((said.len() == 2).then_some(()))
        })
        .await?;
        ensure!(heard(&client).await?[1].contains("You are next in line"));

        // At the front the line's length still changes, unsaid.
        fake.script().queue_length = 900;
        status_contains(&client, "900 people").await?;
        ensure!(
            heard(&client).await?.len() == 2,
            "{:?}",
            heard(&client).await?
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_captcha_demand_is_said_and_handed_to_the_operators_widget_not_looped() {
    let (fake, addr) = fake::start(fake::Script {
        captcha: true,
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        client.goto(&format!("http://{addr}/protected")).await?;
        status_contains(&client, "One more check is needed").await?;
        // Nothing answers the demand on this page: the page waits, it does
        // not send enter again and again (it took the demand for proof of
        // work, answered a nonce of 0 and was asked again, for ever).
        let enters = fake.script().enters;
        ensure!(enters <= 2, "{enters} enters for one demand");
        // An operator's widget hears of the demand and hands the token in.
        client
            .execute(
                "window.demands = [];
                 document.addEventListener('anteroom:captcha', e => window.demands.push(e.detail));
                 window.anteroomCaptcha('bad');",
                vec![],
            )
            .await?;
        let demands = wait_for("the demand after a failed token", STEP, || async {
            let d: Value = client.execute("return window.demands", vec![]).await?;
            Ok((d.as_array().is_some_and(|a| !a.is_empty())).then_some(d))
        })
        .await?;
        ensure!(
            demands[0]["captcha"]["siteKey"] == "site-key-1",
            "{demands}"
        );
        ensure!(demands[0]["reason"] == "captcha_failed", "{demands}");
        client
            .execute("window.anteroomCaptcha('good')", vec![])
            .await?;
        status_contains(&client, "You are number 3 in line").await?;
        let s = fake.script();
        ensure!(
            s.captcha_tokens == ["bad", "good"],
            "{:?}",
            s.captcha_tokens
        );
        ensure!(s.enters == enters + 2, "{} enters", s.enters);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_proof_of_work_worker_that_does_not_load_is_made_again() {
    let (fake, addr) = fake::start(fake::Script {
        difficulty: Some(8),
        worker_refusals: 1,
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        client.goto(&format!("http://{addr}/protected")).await?;
        // The first worker's script is refused (a crowd's 503): the page
        // says so, waits, joins again, and solves with a new worker.
        status_contains(&client, "You are number 3 in line").await?;
        let s = fake.script();
        ensure!(s.solved_nonce.is_some() && s.worker_refusals == 0, "{s:?}");
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redeem_refused_by_a_pause_says_so_and_waits_as_told() {
    let (fake, addr) = fake::start(fake::Script {
        admitted: true,
        paused_redeems: 2,
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        client.goto(&format!("http://{addr}/protected")).await?;
        status_contains(&client, "The line is paused").await?;
        wait_for("arrival once the pause ends", STEP, || async {
            let url = client.current_url().await?;
            Ok((url.path() == "/protected").then_some(url))
        })
        .await?;
        let s = fake.script();
        // The token is tried again when the server says (Retry-After: 1),
        // not through a position that says "your turn" each second.
        ensure!(s.redeems == 3 && s.redeemed, "{s:?}");
        ensure!(s.polls == 0, "{} polls", s.polls);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_opening_a_month_away_is_waited_for_not_hammered() {
    // 30 days: past the 24.8 days a browser timer reaches, which it fires
    // at once, and the page then entered again at each answer.
    let (fake, addr) = fake::start(fake::Script {
        opens_in_ms: Some(30 * 24 * 3600 * 1000),
        poll_after_ms: 5000,
        ..Default::default()
    })
    .await;
    with_browser(|client| async move {
        client.goto(&format!("http://{addr}/protected")).await?;
        status_contains(&client, "The line opens soon").await?;
        let enters = fake.script().enters;
        // Two seconds is dozens of round trips on loopback.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let s = fake.script();
        ensure!(
            s.enters == enters && enters <= 2,
            "{} enters, {} then",
            s.enters,
            enters
        );
        Ok(())
    })
    .await;
}
