//! Real headless Chromium for the browser tests: starts `chromedriver` on a free
//! port, opens a session, and always closes both (by session, then by PID).
//!
//! A missing browser fails the test with what to install; it never skips.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod axe;
pub mod fake;

use crate::support::config::Event;

/// The event the browser tests drive: `drop` protects `/shop`, five slots,
/// one admission every 200 ms.
pub fn drop_event(origin: std::net::SocketAddr) -> Event {
    Event::at("drop", origin)
        .paths(&["/shop"])
        .max_active(5)
        .admission(r#"{ mode = "batch", batch_size = 1, interval = "200ms" }"#)
}

use anyhow::{Context, Result, bail};
use fantoccini::{Client, ClientBuilder};
use futures::FutureExt;

const MISSING: &str = "chromium not found: install it with `apt-get install chromium chromium-driver` (scripts/test does this)";

/// `chromedriver`, stopped by PID when dropped (also when a test panics).
struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn driver_ready(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    // `Connection: close` so the answer ends with the stream; chromedriver keeps
    // HTTP/1.0 connections open otherwise.
    let request =
        format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let _ = stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.read_to_end(&mut answer));
    String::from_utf8_lossy(&answer)
        .replace(' ', "")
        .contains("\"ready\":true")
}

async fn start_driver() -> Result<(Driver, PathBuf)> {
    let chromium = find_program("chromium").context(MISSING)?;
    let chromedriver = find_program("chromedriver").context(MISSING)?;
    // The port is free when bound; chromedriver takes it right after.
    let port = crate::support::free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context(MISSING)?;
    let driver = Driver {
        child,
        port,
        _profile: tempfile::tempdir()?,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !driver_ready(port) {
        if Instant::now() > deadline {
            bail!("chromedriver did not become ready on port {port} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((driver, chromium))
}

async fn connect(driver: &Driver, chromium: &PathBuf, extra_args: &[&str]) -> Result<Client> {
    let args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]
    .iter()
    .chain(extra_args)
    .map(|a| (*a).to_owned())
    .chain([format!(
        "--user-data-dir={}",
        driver._profile.path().display()
    )])
    .collect::<Vec<_>>();
    let caps = serde_json::json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": chromium, "args": args },
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let client = ClientBuilder::native()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .context("cannot open a Chromium session through chromedriver")?;
    Ok(client)
}

/// Runs `body` with a fresh headless Chromium, then closes the session and the
/// driver whatever happened, and re-raises the body's failure.
pub async fn with_browser<F, Fut>(body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    with_browser_args(&[], body).await;
}

/// [`with_browser`] with extra Chromium command-line switches (e.g.
/// `--force-prefers-reduced-motion`, so a screenshot is not caught mid-transition).
pub async fn with_browser_args<F, Fut>(extra_args: &[&str], body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let (driver, chromium) = start_driver().await.unwrap_or_else(|e| panic!("{e:#}"));
    let client = connect(&driver, &chromium, extra_args)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let outcome = AssertUnwindSafe(body(client.clone())).catch_unwind().await;
    let _ = client.close().await;
    drop(driver);
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => panic!("{err:#}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Polls `probe` every 50 ms until it yields a value or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(err) => last_error = Some(err),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what} (last error: {last_error:?})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the page's status block (`#ar-status`): what the visitor
/// sees. What screen readers are told is `#ar-announce`.
pub async fn status_text(client: &Client) -> Result<String> {
    let region = client.find(fantoccini::Locator::Id("ar-status")).await?;
    Ok(region.text().await?)
}

/// `target/artifacts/`, created if needed.
pub fn artifacts_dir() -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("artifacts");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
