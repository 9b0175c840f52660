//! The process as an operator runs it, through the real binary: stopped by
//! `SIGTERM` under load without losing an acknowledged join, started beside
//! orchestrator variables that share its prefix, `anteroom check` beside a
//! live server, error messages said once with the key and the event, logs
//! without colour codes off a terminal, an access log that never carries a
//! token, a trace-level log of a whole journey (join, admit, redeem, browse,
//! release, admin calls, failed redeems) that holds no secret or token value,
//! the example configuration and the systemd unit.

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event, HOURLY, SECRET};
use crate::support::process;
use crate::support::visitor::Visitor;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::{free_port, wait_for};
use http::{Method, StatusCode};

const BIN: &str = env!("CARGO_BIN_EXE_anteroom");

fn config(origin: &str, dir: &Path, extra_server: &str) -> String {
    ConfigBuilder::new()
        .process()
        .server_line("shutdown_grace = \"5s\"")
        .server_line(extra_server)
        .embedded(&dir.join("data"))
        .no_limits()
        .event(
            Event::new("tickets", origin)
                .max_active(2)
                .line("queue_idle_timeout = \"10m\"")
                .admission(HOURLY)
                .challenge_off(),
        )
        .toml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_stops_gracefully_and_loses_no_acknowledged_join() {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut node = Node::start(&config(&origin.url(), dir.path(), ""), dir.clone()).await;

    // Joins at full speed from 32 callers; SIGTERM once 300 are acknowledged.
    let acked = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let enter = node.url("/api/queue/enter?eventId=tickets");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (acked, stopped, enter) = (acked.clone(), stopped.clone(), enter.clone());
        tasks.spawn(async move {
            let mut joined = Vec::new();
            let mut refused = 0usize;
            while !stopped.load(Ordering::SeqCst) {
                let mut v = Visitor::default();
                let (status, _, p) = v.api(Method::POST, &enter, None).await;
                if status == StatusCode::OK && p["status"] == "WAITING" {
                    acked.fetch_add(1, Ordering::SeqCst);
                    joined.push(v);
                } else {
                    // After SIGTERM: the listener is closed (the harness
                    // reports a failed connection as 502) or the connection
                    // was closed by the graceful stop.
                    refused += 1;
                    if refused > 50 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            joined
        });
    }
    wait_for("300 joins acknowledged", Duration::from_secs(60), || {
        let n = acked.load(Ordering::SeqCst);
        async move { n >= 300 }
    })
    .await;
    let signalled = Instant::now();
    let status = node.terminate(Duration::from_secs(15)).await;
    let stop_took = signalled.elapsed();
    stopped.store(true, Ordering::SeqCst);
    assert!(status.success(), "SIGTERM must exit 0, got {status:?}");
    let mut joined = Vec::new();
    while let Some(r) = tasks.join_next().await {
        joined.extend(r.unwrap());
    }
    assert!(joined.len() >= 300);

    // New connections are refused once it stopped.
    let (s, _, _) = Visitor::default().api(Method::POST, &enter, None).await;
    assert_eq!(s, StatusCode::BAD_GATEWAY, "the stopped node still answers");

    node.restart().await;
    for v in &mut joined {
        let p = v.position(&node, "tickets").await;
        // The first arrivals may have been admitted meanwhile: kept too.
        assert!(
            p["status"] == "WAITING" || p["status"] == "ADMITTED",
            "acknowledged join lost: {p}"
        );
    }
    eprintln!(
        "{} acknowledged joins kept; stopped {:?} after SIGTERM",
        joined.len(),
        stop_took
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrator_variables_that_share_the_prefix_do_not_stop_the_start() {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    // What Kubernetes injects for a service named "anteroom", plus one real
    // key through the environment, which must still be read.
    let env = [
        ("ANTEROOM_PORT", "tcp://10.0.0.7:8080"),
        ("ANTEROOM_PORT_8080_TCP", "tcp://10.0.0.7:8080"),
        ("ANTEROOM_PORT_8080_TCP_ADDR", "10.0.0.7"),
        ("ANTEROOM_PORT_8080_TCP_PORT", "8080"),
        ("ANTEROOM_PORT_8080_TCP_PROTO", "tcp"),
        ("ANTEROOM_SERVICE_HOST", "10.0.0.7"),
        ("ANTEROOM_SERVICE_PORT", "8080"),
        ("ANTEROOM_SERVER__MAX_BODY_BYTES", "100"),
    ];
    let node =
        Node::start_with_env(&config(&origin.url(), dir.path(), ""), dir.clone(), &env).await;
    // The real key was read: a 200-byte body is now over the limit.
    let mut v = Visitor::default();
    let body = format!("{{\"challenge\":\"{}\",\"nonce\":1}}", "x".repeat(200));
    let (status, _, p) = v
        .api(
            Method::POST,
            &node.url("/api/queue/enter?eventId=tickets"),
            Some(&body),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{p}");
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let text = text
        .replace("{public}", &format!("127.0.0.1:{}", free_port()))
        .replace("{admin}", &format!("127.0.0.1:{}", free_port()));
    let path = dir.join(format!("check-{}.toml", free_port()));
    std::fs::write(&path, text).unwrap();
    path
}

fn check(path: &Path) -> (bool, String, String) {
    let out = Command::new(BIN)
        .arg("check")
        .arg("-c")
        .arg(path)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_runs_beside_a_live_server_and_names_key_and_event_once() {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let text = config(&origin.url(), dir.path(), "");
    let _live = Node::start(&text, dir.clone()).await;
    // The live server holds the embedded store's files: check never opens them.
    let (ok, out, err) = check(&write_config(dir.path(), &text));
    assert!(
        ok,
        "check of a valid config failed beside a live server: {err}"
    );
    assert!(out.contains("valid (1 event)"), "{out}");

    for (bad, key, message) in [
        (
            text.replace("max_active = 2", "max_active = \"lots\""),
            "events[0].max_active (event \"tickets\")",
            "invalid type",
        ),
        (
            text.replace("max_active = 2", "max_active = 0"),
            "events[0].max_active (event \"tickets\")",
            "must be > 0",
        ),
        (
            text.replace("shutdown_grace = \"5s\"", "shutdown_grace = \"soon\""),
            "server.shutdown_grace",
            "is not a duration",
        ),
    ] {
        let (ok, _, err) = check(&write_config(dir.path(), &bad));
        assert!(!ok, "an invalid config passed check");
        assert!(err.contains(key) && err.contains(message), "{err}");
        assert_eq!(
            err.matches(message).count(),
            1,
            "said more than once: {err}"
        );
        assert!(!err.contains("backtrace"), "{err}");
    }
}

/// Starts the binary with its output piped, returns the first lines it logs
/// after `trigger` ran against it.
async fn logs_of(text: &str, dir: &Path, trigger: impl AsyncFnOnce(&str)) -> Vec<String> {
    let public = free_port();
    let admin = free_port();
    let text = text
        .replace("{public}", &format!("127.0.0.1:{public}"))
        .replace("{admin}", &format!("127.0.0.1:{admin}"));
    let path = dir.join(format!("logs-{public}.toml"));
    std::fs::write(&path, text).unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("-c")
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    };
    let health = format!("http://127.0.0.1:{admin}/healthz");
    wait_for("anteroom /healthz", Duration::from_secs(20), || {
        let health = health.clone();
        async move {
            process::send(Method::GET, &health, &[], None)
                .await
                .is_ok_and(|r| r.0 == StatusCode::OK)
        }
    })
    .await;
    trigger(&format!("http://127.0.0.1:{public}")).await;
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    reader.join().unwrap();
    lines.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_have_no_colour_off_a_terminal_and_the_access_log_never_carries_a_token() {
    let origin = process::origin().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_query = "token=SECRET-TOKEN-VALUE-1234";
    let text = config(&origin.url(), dir.path(), "access_log = true");
    let lines = logs_of(&text, dir.path(), async |base| {
        let url = format!("{base}/api/queue/redeem?eventId=tickets&{secret_query}&return=/tickets");
        let _ = process::send(Method::GET, &url, &[], None).await;
        let _ = process::send(Method::GET, &format!("{base}/tickets/x"), &[], None).await;
    })
    .await;
    assert!(!lines.is_empty(), "nothing logged");
    assert!(
        lines.iter().all(|l| !l.contains('\u{1b}')),
        "colour codes in a piped log: {lines:?}"
    );
    let access: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("anteroom::access"))
        .collect();
    assert!(
        access
            .iter()
            .any(|l| l.contains("/api/queue/redeem") && l.contains("status=")),
        "no access line for the redeem: {lines:?}"
    );
    assert!(access.iter().any(|l| l.contains("/tickets/x")), "{lines:?}");
    assert!(
        lines.iter().all(|l| !l.contains("SECRET-TOKEN-VALUE")),
        "a token reached the log: {lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("SIGTERM")), "{lines:?}");

    // JSON logs: every line is one JSON object.
    let text = config(&origin.url(), dir.path(), "log_format = \"json\"");
    let lines = logs_of(&text, dir.path(), async |_| {}).await;
    assert!(!lines.is_empty());
    for l in &lines {
        serde_json::from_str::<serde_json::Value>(l)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"));
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_example_configuration_is_valid() {
    let (ok, out, err) = check(&repo_root().join("anteroom.example.toml"));
    assert!(ok, "anteroom.example.toml fails check: {err}");
    assert!(out.contains("valid"), "{out}");
}

#[test]
fn the_systemd_unit_verifies() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        panic!("systemd-analyze is missing: install Debian's `systemd` package");
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo_root().join("deploy/anteroom.service")).unwrap();
    // verify checks that ExecStart's binary exists: point it at this build.
    let unit = unit.replace("/usr/local/bin/anteroom", BIN);
    let path = dir.path().join("anteroom.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed: {err}");
    // Unknown or misspelt keys are only warnings: none is allowed.
    assert!(
        err.trim().is_empty(),
        "systemd-analyze verify warned: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_keeps_its_home_page_public_and_its_crowd_moves_the_line() {
    let shop = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shop_addr = shop.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(shop, anteroom::demo::demo_shop()).await });
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let demo = anteroom::demo::DemoSetup::new(public_addr, admin_addr, dir.path(), shop_addr, 6);
    let config = anteroom::Config::from_toml(&demo.config_toml()).unwrap();
    tokio::spawn(anteroom::run(public, admin, config, std::future::pending()));
    let base = format!("http://{public_addr}");
    wait_for("demo up", Duration::from_secs(10), || {
        let url = format!("{base}/");
        async move { process::send(Method::GET, &url, &[], None).await.is_ok() }
    })
    .await;

    // The home page (which says it is public) reaches the shop's origin;
    // the shop page is behind the queue.
    let html = [("accept".to_owned(), "text/html".to_owned())];
    let (s, _, body) = process::send(Method::GET, &format!("{base}/"), &html, None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("Buy tickets"));
    let (s, h, _) = process::send(Method::GET, &format!("{base}/shop"), &html, None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::FOUND);
    assert!(h["location"].to_str().unwrap().starts_with("/queue/drop"));

    // The virtual crowd joins, gets admitted, redeems and frees its places.
    tokio::spawn(anteroom::demo::crowd::run(public_addr, 6));
    let auth = [(
        "authorization".to_owned(),
        format!("Bearer {}", demo.admin_token()),
    )];
    let url = format!("http://{admin_addr}/admin/events/drop");
    wait_for("the crowd redeems", Duration::from_secs(40), || {
        let (url, auth) = (url.clone(), auth.clone());
        async move {
            let Ok((_, _, body)) = process::send(Method::GET, &url, &auth, None).await else {
                return false;
            };
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            v["stats"]["redeemed_total"].as_u64().unwrap_or(0) >= 2
        }
    })
    .await;
}

/// Every secret value of one visitor's whole journey and one operator's
/// calls, for the scan of the trace log.
struct Secrets(Vec<(&'static str, String)>);

impl Secrets {
    fn add(&mut self, what: &'static str, value: &str) {
        assert!(value.len() >= 16, "{what} too short to scan for: {value:?}");
        self.0.push((what, value.to_owned()));
        // A token's MAC alone is as secret as the token: a line that logged
        // only the part after the dot would still give it away.
        if let Some((_, mac)) = value.rsplit_once('.')
            && mac.len() >= 16
        {
            self.0.push((what, mac.to_owned()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_log_of_a_whole_journey_holds_no_secret_or_token_value() {
    const OLD_SECRET: &str = "rotated-out-secret-rotated-out-secret-02";
    const WRONG_ADMIN: &str = "wrong-admin-token-wrong-admin-token";
    const FORGED: &str = "AQFmb3JnZWQtdG9rZW4tcGF5bG9hZA.Zm9yZ2VkLW1hYy12YWx1ZS1mb3JnZWQtbWFj";
    let origin = process::origin().await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&origin.url(), dir.path(), "access_log = true")
        .replace(
            &format!("secrets = [\"{}\"]", SECRET),
            &format!("secrets = [\"{}\", \"{OLD_SECRET}\"]", SECRET),
        )
        .replace(
            r#"admission = { mode = "batch", batch_size = 1, interval = "1h" }"#,
            r#"admission = { mode = "continuous", max_per_minute = 600 }"#,
        );
    assert!(text.contains(OLD_SECRET) && text.contains("continuous"));
    let public = free_port();
    let admin = free_port();
    let text = text
        .replace("{public}", &format!("127.0.0.1:{public}"))
        .replace("{admin}", &format!("127.0.0.1:{admin}"));
    let path = write_config(dir.path(), &text);
    // Everything the binary says, at the most detailed level, on both streams.
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|stream| {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    })
    .collect();
    let base = format!("http://127.0.0.1:{public}");
    let admin_base = format!("http://127.0.0.1:{admin}");
    let health = format!("{admin_base}/healthz");
    wait_for("anteroom /healthz", Duration::from_secs(20), || {
        let health = health.clone();
        async move {
            process::send(Method::GET, &health, &[], None)
                .await
                .is_ok_and(|r| r.0 == StatusCode::OK)
        }
    })
    .await;

    let mut secrets = Secrets(Vec::new());
    secrets.add("the key secret", SECRET);
    secrets.add("the rotated-out key secret", OLD_SECRET);
    secrets.add("the admin token", ADMIN_TOKEN);
    secrets.add("a wrong admin token", WRONG_ADMIN);
    secrets.add("a forged admission token", FORGED);

    // The visitor: joins, is admitted, redeems, browses, releases.
    let mut v = Visitor::default();
    let url = |path: &str| format!("{base}{path}");
    let redeem = |t: &str| serde_json::json!({ "token": t }).to_string();
    let (status, _, body) = v
        .api(Method::POST, &url("/api/queue/enter?eventId=tickets"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let started = Instant::now();
    let token = loop {
        let (_, _, p) = v
            .api(
                Method::GET,
                &url("/api/queue/position?eventId=tickets"),
                None,
            )
            .await;
        if p["status"] == "ADMITTED" {
            break p["token"].as_str().unwrap().to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not admitted: {p}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    secrets.add("the admission token", &token);
    let redeem_url = url("/api/queue/redeem?eventId=tickets");
    let (status, _, body) = v
        .api(Method::POST, &redeem_url, Some(&redeem(&token)))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Failed redeems: the same token again, and a forged one.
    for t in [token.as_str(), FORGED] {
        let (status, _, body) = v.api(Method::POST, &redeem_url, Some(&redeem(t))).await;
        assert!(status.is_client_error(), "{status} {body}");
    }
    let cookie = |name: &str| {
        v.cookies
            .iter()
            .find(|(k, _)| k.ends_with(name))
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("no {name} cookie: {:?}", v.cookies))
    };
    let sid = cookie("anteroom_sid");
    let pass = cookie("anteroom_pass");
    secrets.add("the session id", &sid);
    secrets.add("the pass", &pass);
    for path in ["/tickets/a", "/tickets/b?q=1"] {
        let (status, _, _) = v.api(Method::GET, &url(path), None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    let (status, _, _) = v
        .api(
            Method::POST,
            &url("/api/queue/release?eventId=tickets"),
            None,
        )
        .await;
    assert!(status.is_success(), "release: {status}");
    let (status, _, _) = v.api(Method::GET, &url("/tickets/c"), None).await;
    assert_ne!(
        status,
        StatusCode::OK,
        "a released pass still reached the origin"
    );

    // The operator: reads, pauses and resumes with the token, and one call
    // with a wrong token.
    let bearer = |t: &str| [("authorization".to_owned(), format!("Bearer {t}"))];
    for (method, path) in [
        (Method::GET, "/admin/events"),
        (Method::POST, "/admin/events/tickets/pause"),
        (Method::POST, "/admin/events/tickets/resume"),
        (Method::GET, "/admin/audit"),
    ] {
        let url = format!("{admin_base}{path}");
        let (status, _, body) = process::send(method, &url, &bearer(ADMIN_TOKEN), None)
            .await
            .unwrap();
        assert!(status.is_success(), "{path}: {status} {body:?}");
    }
    let url = format!("{admin_base}/admin/events");
    let (status, _, _) = process::send(Method::GET, &url, &bearer(WRONG_ADMIN), None)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    for r in readers {
        r.join().unwrap();
    }
    let lines = lines.lock().unwrap().clone();
    // The scan means something only if the journey was logged in detail.
    assert!(
        lines.iter().any(|l| l.contains("TRACE")),
        "no trace line: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("anteroom::access") && l.contains("/api/queue/redeem")),
        "the redeem was not logged"
    );
    assert!(
        lines.iter().any(|l| l.contains("anteroom::audit")),
        "the pause was not audited"
    );
    for (what, value) in &secrets.0 {
        let found: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(value.as_str()))
            .collect();
        assert!(found.is_empty(), "{what} reached the log: {found:?}");
    }
}

/// An operator can tell how often the gate's memo spares a pass its MAC:
/// a session's pages find its pass remembered, a forged pass is opened
/// every time, and both are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pass_checks_metric_counts_remembered_and_opened_passes() {
    const PAGES: usize = 200;
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let node = Node::start(&config(&origin.url(), dir.path(), ""), dir.clone()).await;
    let mut visitor = Visitor::default();
    visitor.enter(&node, "tickets").await;
    visitor
        .until_active(&node, "tickets", Duration::from_secs(10), &mut Vec::new())
        .await;
    for _ in 0..PAGES {
        assert_eq!(visitor.fetch(&node, "/tickets/page").await, StatusCode::OK);
    }
    // Each event loop adds its counts every 64 checks, so the loops that
    // served the 200 pages have added at least 200 - 2 * 63 of them.
    let counted = |result: &'static str| {
        let node = &node;
        async move {
            node.metric_with("anteroom_pass_checks_total", &[("result", result)])
                .await
                .unwrap_or(0.0)
        }
    };
    let (remembered, opened) = (counted("remembered").await, counted("opened").await);
    assert!(
        remembered + opened >= (PAGES - 2 * 63) as f64,
        "remembered {remembered}, opened {opened}"
    );
    // A pass is opened once per event loop, then remembered.
    assert!(opened <= 2.0, "remembered {remembered}, opened {opened}");
    assert!(
        remembered >= 1.0,
        "remembered {remembered}, opened {opened}"
    );

    // A forged pass (the visitor's own, one character changed) is opened
    // on every request and never reaches the origin.
    let pass = visitor.cookie("anteroom_pass").unwrap().to_owned();
    let mut forged = pass.into_bytes();
    let i = forged.len() / 3;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for (name, value) in visitor.cookies.iter_mut() {
        if name == "anteroom_pass" {
            *value = forged.clone();
        }
    }
    let before = counted("opened").await;
    for _ in 0..PAGES {
        assert_ne!(visitor.fetch(&node, "/tickets/page").await, StatusCode::OK);
    }
    let after = counted("opened").await;
    assert!(
        after - before >= (PAGES - 2 * 63) as f64,
        "opened {before} before the forged passes, {after} after"
    );
}

/// `SIGHUP`, an operator's reload, leaves a node without certificate files
/// serving (it ended the process at once, dropping every request in
/// flight), and says what it reloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_does_not_stop_the_node() {
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut node = Node::start(&config(&origin.url(), dir.path(), ""), dir.clone()).await;
    let pid = node.pid().expect("a process node");
    for _ in 0..2 {
        let status = std::process::Command::new("kill")
            .arg("-HUP")
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -HUP failed");
    }
    // Still answering; and it exits as SIGTERM has it, not by SIGHUP (its
    // exit status would say that signal).
    let (status, _) = node.admin(Method::GET, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    let status = node.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
}
