//! The shipped Grafana dashboard and alert rules against Debian's real
//! `prometheus` scraping a real Anteroom on loopback: `promtool check rules`
//! and `promtool test rules` pass, Prometheus loads the rules without an evaluation error, and every
//! dashboard query and every alert expression returns a series (an alert
//! whose condition does not hold here is checked for the presence of each
//! metric it reads).

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event};
use crate::support::free_port;
use crate::support::origin::Origin;
use crate::support::server;
use crate::support::visitor::Visitor;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::server::{TestServer, poll_until, send};
use http::{Method, StatusCode};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

const MISSING: &str =
    "prometheus not found: install it with `apt-get install prometheus` (scripts/test does this)";

/// Metrics the rules and dashboard read that this test's server cannot
/// export, with the reason: they are checked by promtool only.
const NOT_HERE: &[(&str, &str)] = &[
    (
        "anteroom_tls_cert_expiry_seconds",
        "exported only with [server.tls]",
    ),
    (
        "anteroom_stored_event_refused",
        "exported only once a node refuses a stored event (admin_nodes tests)",
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `prometheus`, stopped by PID when dropped (also when the test panics).
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(target: std::net::SocketAddr, rules: &Path) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: anteroom\n    static_configs:\n      - targets: ['{target}']\n",
            rules = rules.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
    Prometheus {
        child,
        port,
        _dir: dir,
    }
}

impl Prometheus {
    async fn get(&self, path: &str) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let res = client.get(url.parse().ok()?).await.ok()?;
        let ok = res.status() == StatusCode::OK;
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .ok()?
            .to_bytes();
        if !ok {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// The instant vector of `query`, `None` on an error answer.
    async fn query(&self, query: &str) -> Option<Vec<Value>> {
        let q = utf8_percent_encode(query, NON_ALPHANUMERIC);
        let v = self.get(&format!("/api/v1/query?query={q}")).await?;
        v["data"]["result"].as_array().cloned()
    }
}

/// Every `expr` of the dashboard's panels (rows included), with Grafana's
/// variables replaced as Grafana would for "All" over a 1 s scrape.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/anteroom.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("deploy/grafana/anteroom.json is JSON");
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("every target has an expr");
                out.push(
                    expr.replace("$event", ".*")
                        .replace("$__rate_interval", "30s"),
                );
            }
            walk(&p["panels"], out);
        }
    }
    walk(&dash["panels"], &mut out);
    assert!(out.len() >= 10, "dashboard has {} queries", out.len());
    out
}

fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("anteroom_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        names.insert(expr[start..end].to_owned());
        i = end;
    }
    names
}

fn config(origin: std::net::SocketAddr, dir: &Path) -> String {
    ConfigBuilder::new()
        .embedded(dir)
        .no_limits()
        .event(server::tickets(origin))
        .event(Event::at("guarded", origin).line(r#"bots = { challenge = "all", difficulty = 8 }"#))
        .event(
            Event::at("adaptive", origin)
                .admission(r#"{ mode = "adaptive", target_p95 = "500ms", max_error_rate = 0.05 }"#),
        )
        .toml()
}

/// Traffic that makes every family appear: joins, polls, an admission,
/// a redemption, proxied requests, a queued API refusal, a proof-of-work
/// challenge, an adaptive event.
async fn traffic(s: &TestServer) {
    let mut v = Visitor::default();
    let (status, _) = v
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let p = poll_until(
        &v,
        &s.url("/api/queue/position?eventId=tickets"),
        "ADMITTED",
    )
    .await;
    let token = p["token"].as_str().unwrap();
    let (status, body) = v
        .json(
            Method::POST,
            &s.url("/api/queue/redeem?eventId=tickets"),
            Some(&serde_json::json!({ "token": token }).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for _ in 0..3 {
        let (status, _, _) = v
            .call(Method::GET, &s.url("/tickets/seat"), &[], None)
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    for _ in 0..3 {
        Visitor::default()
            .json(
                Method::POST,
                &s.url("/api/queue/enter?eventId=tickets"),
                None,
            )
            .await;
    }
    let (status, _, _) = send(
        Method::GET,
        &s.url("/tickets/api"),
        &[("accept".into(), "application/json".into())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _) = Visitor::default()
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=guarded"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = Visitor::default()
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=adaptive"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_queries_and_alerts_return_series_in_real_prometheus() {
    let rules = repo().join("deploy/prometheus/alerts.yml");
    let check = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .unwrap_or_else(|e| panic!("promtool: {MISSING} ({e})"));
    assert!(
        check.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    // The rules' own unit tests: each alert fires on the series meant to raise it.
    let unit = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg("alerts_test.yml")
        .current_dir(repo().join("deploy/prometheus"))
        .output()
        .unwrap_or_else(|e| panic!("promtool: {MISSING} ({e})"));
    assert!(
        unit.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&unit.stdout),
        String::from_utf8_lossy(&unit.stderr)
    );

    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(origin_addr, dir.path());
    let s = TestServer::start_with(&toml, origin, dir).await;
    traffic(&s).await;
    // The admin JSON carries the figures the gauges export.
    let (_, _, body) = s
        .admin_get("/admin/events/guarded", Some(ADMIN_TOKEN))
        .await;
    let ev: Value = serde_json::from_slice(&body).unwrap();
    // One first contact, asked for proof-of-work.
    assert_eq!(ev["stats"]["arrivals_1m"], 1, "{ev}");
    assert_eq!(ev["stats"]["pow_share_1m"], 1.0, "{ev}");
    let (_, _, body) = s
        .admin_get("/admin/events/tickets", Some(ADMIN_TOKEN))
        .await;
    let ev: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(ev["stats"]["pow_share_1m"], 0.0, "{ev}");
    assert_eq!(ev["stats"]["max_active"], 2, "{ev}");
    // The origin window (10 s) still holds the three proxied requests, all 2xx.
    assert_eq!(ev["stats"]["origin_samples"], 3, "{ev}");
    assert_eq!(ev["stats"]["origin_error_rate"], 0.0, "{ev}");
    assert!(ev["stats"]["origin_p95_ms"].is_number(), "{ev}");
    let prom = start_prometheus(s.admin, &rules);

    // Ready, scraping, and with a few scrapes in (rate() needs two).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let scrapes = prom
            .query("count_over_time(up{job=\"anteroom\"}[1m])")
            .await;
        let n = scrapes
            .as_ref()
            .and_then(|r| r.first())
            .and_then(|v| v["value"][1].as_str())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
        if n >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus did not scrape anteroom 4 times in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let up = prom.query("up{job=\"anteroom\"}").await.unwrap();
    assert_eq!(up[0]["value"][1], "1", "{up:?}");

    // Every rule loaded and evaluated without error.
    let loaded = loop {
        let r = prom.get("/api/v1/rules").await.unwrap();
        let rules: Vec<Value> = r["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        if !rules.is_empty() && rules.iter().all(|r| r["health"] == "ok") {
            break rules;
        }
        let bad: Vec<_> = rules.iter().filter(|r| r["health"] == "err").collect();
        assert!(bad.is_empty(), "rules failing to evaluate: {bad:?}");
        assert!(Instant::now() < deadline, "rules not evaluated: {rules:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let alerts: Vec<(String, String)> = loaded
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["query"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");

    // Every dashboard query answers a series.
    let queries = dashboard_queries();
    let mut missing = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        missing.clear();
        for q in &queries {
            if NOT_HERE.iter().any(|(n, _)| q.contains(n)) {
                continue;
            }
            if prom.query(q).await.is_none_or(|r| r.is_empty()) {
                missing.push(q.clone());
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        missing.is_empty(),
        "dashboard queries with no series: {missing:#?}"
    );

    // Every alert expression answers, or each metric it reads is scraped.
    let mut absent = Vec::new();
    for (name, expr) in &alerts {
        let answered = prom.query(expr).await;
        assert!(
            answered.is_some(),
            "{name}: {expr} is refused by prometheus"
        );
        if answered.is_some_and(|r| !r.is_empty()) {
            println!("{name}: returns a series now");
            continue;
        }
        let names = metric_names(expr);
        assert!(
            !names.is_empty() || expr.contains("up{"),
            "{name} reads no metric"
        );
        for metric in names {
            if NOT_HERE.iter().any(|(n, _)| *n == metric) {
                println!("{name}: {metric} not checked here");
                continue;
            }
            let found = prom.query(&format!("count({metric})")).await;
            if found.is_none_or(|r| r.is_empty()) {
                absent.push(format!("{name}: {metric}"));
            }
        }
    }
    assert!(
        absent.is_empty(),
        "alerts read metrics the server does not export: {absent:#?}"
    );

    // And the admin JSON carries the same figures the gauges show.
    let (_, _, body) = s
        .admin_get("/admin/events/adaptive", Some(ADMIN_TOKEN))
        .await;
    let ev: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(ev["stats"]["origin_target_p95_ms"], 500.0, "{ev}");
    assert_eq!(ev["stats"]["phase"], "open", "{ev}");
    drop(prom);
    s.stop().await;
}
