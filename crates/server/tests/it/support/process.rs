//! Fault-injection harness: real `anteroom` processes (the binary cargo
//! built for these tests) on ports reserved by binding port 0, an in-process
//! origin that records its peak concurrency and who reached it, and a
//! visitor with a cookie jar. Every wait polls against a deadline; every
//! process is killed by PID when dropped.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub const ADMIN_TOKEN: &str = "fault-admin-token";
pub const SECRET: &str = "fault-secret-fault-secret-fault-secret-01";

/// What the origin saw: peak in-flight requests and each session that reached it.
#[derive(Default)]
pub struct Origin {
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub sessions: Mutex<HashSet<String>>,
    pub addr: Mutex<Option<SocketAddr>>,
}

impl Origin {
    /// Starts the origin; each request stays in flight for 20 ms so that
    /// overlapping holders of passes show up in the peak.
    pub async fn start() -> Arc<Self> {
        let log = Arc::new(Self::default());
        let app = axum::Router::new().fallback(handle).with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        *log.addr.lock().unwrap() = Some(listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        log
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr.lock().unwrap().unwrap())
    }

    pub fn peak(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

async fn handle(State(log): State<Arc<Origin>>, req: Request) -> &'static str {
    let now = log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    log.max_in_flight.fetch_max(now, Ordering::SeqCst);
    if let Some(s) = req.headers().get("x-anteroom-session") {
        let s = s.to_str().unwrap_or("").to_owned();
        log.sessions.lock().unwrap().insert(s);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    log.in_flight.fetch_sub(1, Ordering::SeqCst);
    "origin"
}

/// A loopback port free now (bind port 0, read it, release it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `anteroom serve` process.
pub struct Node {
    pub public: SocketAddr,
    pub admin: SocketAddr,
    child: Option<Child>,
    /// In-process nodes (started through `anteroom::run`) stop through this.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    config: PathBuf,
    /// Extra environment of the process (orchestrator variables, say).
    env: Vec<(String, String)>,
    /// The process's `RLIMIT_NOFILE` (soft and hard), if not inherited.
    nofile: Option<u64>,
    _dir: Arc<tempfile::TempDir>,
}

impl Node {
    /// Writes `config` (with `{public}` / `{admin}` filled in) and starts the
    /// binary; returns once `/healthz` answers.
    pub async fn start(config: &str, dir: Arc<tempfile::TempDir>) -> Self {
        Self::start_with_env(config, dir, &[]).await
    }

    /// [`Node::start`] with extra environment variables for the process.
    pub async fn start_with_env(
        config: &str,
        dir: Arc<tempfile::TempDir>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut node = Self::start_unspawned(config, dir);
        node.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        node.spawn().await;
        node
    }

    /// Writes the config; the process is not started yet.
    fn start_unspawned(config: &str, dir: Arc<tempfile::TempDir>) -> Self {
        let public: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // Each node has its own drain journal, kept across restarts.
        let journal = dir.path().join(format!("journal-{}", public.port()));
        let text = config
            .replace("{public}", &public.to_string())
            .replace("{admin}", &admin.to_string())
            .replace("{journal}", &journal.display().to_string());
        let path = dir.path().join(format!("anteroom-{}.toml", public.port()));
        std::fs::write(&path, text).unwrap();
        Self {
            public,
            admin,
            child: None,
            stop: None,
            config: path,
            env: Vec::new(),
            nofile: None,
            _dir: dir,
        }
    }

    /// [`Node::start`] with the process allowed `nofile` descriptors (soft
    /// and hard limit, set through util-linux `prlimit`), so that its
    /// connection caps come from a small descriptor budget.
    pub async fn start_with_nofile(config: &str, dir: Arc<tempfile::TempDir>, nofile: u64) -> Self {
        let mut node = Self::start_unspawned(config, dir);
        node.nofile = Some(nofile);
        node.spawn().await;
        node
    }

    /// The process id of a process node.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    async fn spawn(&mut self) {
        let bin = env!("CARGO_BIN_EXE_anteroom");
        let mut command = match self.nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the anteroom binary (or prlimit: apt-get install util-linux)");
        self.child = Some(child);
        let url = format!("http://{}/healthz", self.admin);
        let started = Instant::now();
        wait_for("anteroom /healthz", Duration::from_secs(20), || {
            let url = url.clone();
            async move { get_status(&url).await == Some(StatusCode::OK) }
        })
        .await;
        eprintln!(
            "anteroom on {} ready in {:?}",
            self.public,
            started.elapsed()
        );
    }

    /// Starts a node inside this process through `anteroom::run` (on
    /// listeners bound to port 0), for tests that need many requests more
    /// than a process boundary.
    pub async fn in_process(config: &str) -> Self {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let text = config
            .replace("{public}", "127.0.0.1:0")
            .replace("{admin}", "127.0.0.1:0")
            .replace("{journal}", &dir.path().display().to_string());
        let config = anteroom::Config::from_toml(&text).unwrap();
        let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(anteroom::run(public, admin, config, async move {
            let _ = stopped.await;
        }));
        let url = format!("http://{admin_addr}/healthz");
        wait_for(
            "in-process anteroom /healthz",
            Duration::from_secs(10),
            || {
                let url = url.clone();
                async move { get_status(&url).await == Some(StatusCode::OK) }
            },
        )
        .await;
        Self {
            public: public_addr,
            admin: admin_addr,
            child: None,
            stop: Some(stop),
            config: PathBuf::new(),
            env: Vec::new(),
            nofile: None,
            _dir: dir,
        }
    }

    /// `kill -9`, like a crash.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `SIGTERM`, as systemd or Kubernetes stop a service; waits up to
    /// `limit` for the process to exit and returns how it exited.
    pub async fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a process node");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("anteroom did not stop within {limit:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the process again with the same config (and data dir).
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.public, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    pub async fn admin(&self, method: Method, path: &str) -> (StatusCode, Bytes) {
        let auth = [("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}"))];
        let (s, _, b) = send(method, &self.admin_url(path), &auth, None)
            .await
            .unwrap();
        (s, b)
    }

    /// The value of `anteroom_draining{event="E"}`, if exported.
    pub async fn draining_gauge(&self, event: &str) -> Option<f64> {
        self.metric("anteroom_draining", event).await
    }

    /// The value of the series of `name` that has every one of `labels`, if exported.
    pub async fn metric_with(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let (_, _, body) = send(Method::GET, &self.admin_url("/metrics"), &[], None)
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let prefix = format!("{name}{{");
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (set, value) = rest.split_once("} ")?;
            let has = |(k, v): &(&str, &str)| set.split(',').any(|p| p == format!("{k}=\"{v}\""));
            labels.iter().all(has).then(|| value.trim().parse().ok())?
        })
    }

    /// The value of the metric `name{event="E"}`, if exported.
    pub async fn metric(&self, name: &str, event: &str) -> Option<f64> {
        let (_, _, body) = send(Method::GET, &self.admin_url("/metrics"), &[], None)
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let prefix = format!("{name}{{event=\"{event}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.kill9();
    }
}

async fn get_status(url: &str) -> Option<StatusCode> {
    send(Method::GET, url, &[], None).await.ok().map(|r| r.0)
}

/// One request on a fresh connection, bounded to 5 s.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> Result<(StatusCode, http::HeaderMap, Bytes), String> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let call = async {
        let res = client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = res.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, bytes))
    };
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .map_err(|_| "timed out".to_owned())?
}

/// Polls `check` every 20 ms until it holds; panics after `limit`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A visitor with a cookie jar (session and pass cookies).
#[derive(Clone, Default, Debug)]
pub struct Visitor {
    pub cookies: Vec<(String, String)>,
    /// Successful redeems (must never exceed 1).
    pub redeems: usize,
}

impl Visitor {
    pub async fn call(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> (StatusCode, http::HeaderMap, Value) {
        let mut headers = vec![("accept".to_owned(), "application/json".to_owned())];
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            headers.push(("cookie".into(), jar.join("; ")));
        }
        if body.is_some() {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let (status, h, bytes) = send(method, url, &headers, body.map(str::to_owned))
            .await
            .unwrap_or((
                StatusCode::BAD_GATEWAY,
                http::HeaderMap::new(),
                Bytes::new(),
            ));
        for sc in h.get_all("set-cookie") {
            let sc = sc.to_str().unwrap().to_owned();
            let (pair, _) = sc.split_once(';').unwrap_or((&sc, ""));
            let (k, v) = pair.split_once('=').unwrap();
            self.cookies.retain(|(name, _)| name != k);
            if !v.is_empty() {
                self.cookies.push((k.to_owned(), v.to_owned()));
            }
        }
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, h, json)
    }

    pub async fn enter(
        &mut self,
        node: &Node,
        event: &str,
    ) -> (StatusCode, http::HeaderMap, Value) {
        let url = node.url(&format!("/api/queue/enter?eventId={event}"));
        self.call(Method::POST, &url, None).await
    }

    pub async fn position(&mut self, node: &Node, event: &str) -> Value {
        let url = node.url(&format!("/api/queue/position?eventId={event}"));
        self.call(Method::GET, &url, None).await.2
    }

    pub async fn redeem(&mut self, node: &Node, event: &str, token: &str) -> StatusCode {
        let url = node.url(&format!("/api/queue/redeem?eventId={event}"));
        let body = serde_json::json!({ "token": token }).to_string();
        let status = self.call(Method::POST, &url, Some(&body)).await.0;
        if status == StatusCode::OK {
            self.redeems += 1;
        }
        status
    }

    /// A request through the gate to a protected path.
    pub async fn fetch(&mut self, node: &Node, path: &str) -> StatusCode {
        self.call(Method::GET, &node.url(path), None).await.0
    }

    pub async fn release(&mut self, node: &Node, event: &str) -> StatusCode {
        let url = node.url(&format!("/api/queue/release?eventId={event}"));
        self.call(Method::POST, &url, None).await.0
    }

    /// Polls the position until ADMITTED, then redeems; panics after `limit`.
    /// Statuses seen on the way are appended to `seen`.
    pub async fn until_active(
        &mut self,
        node: &Node,
        event: &str,
        limit: Duration,
        seen: &mut Vec<String>,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            let p = self.position(node, event).await;
            let status = p["status"].as_str().unwrap_or("?").to_owned();
            if seen.last() != Some(&status) {
                seen.push(status.clone());
            }
            match status.as_str() {
                "ADMITTED" => {
                    let token = p["token"].as_str().unwrap().to_owned();
                    assert_eq!(self.redeem(node, event, &token).await, StatusCode::OK);
                    return;
                }
                "ACTIVE" => return,
                "NONE" => {
                    // The store lost the place (restart without data): join again,
                    // as the waiting page does.
                    self.enter(node, event).await;
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "not admitted in {limit:?}; saw {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The config of one node in front of `origin`, with the Redis store at
/// `urls`; `events` is a list of `(id, max_active)`.
pub fn redis_config(
    origin: &str,
    urls: &[String],
    cluster: bool,
    nodes: u64,
    events: &[(&str, u64)],
    admission: &str,
) -> String {
    let urls = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = format!(
        r#"
[server]
listen = "{{public}}"
admin_listen = "{{admin}}"
admin_token = "{ADMIN_TOKEN}"
insecure_cookies = true
gateway_nodes = {nodes}
drain_journal = "{{journal}}"
[store]
kind = "redis"
urls = [{urls}]
cluster = {cluster}
timeout = "300ms"
[keys]
secrets = ["{SECRET}"]
[limits]
per_ip_per_second = 0
entries_per_ip = 0
per_session_per_second = 0
"#
    );
    for (id, max_active) in events {
        s.push_str(&format!(
            r#"
[[events]]
id = "{id}"
origin = "{origin}"
paths = ["/{id}"]
max_active = {max_active}
token_ttl = "2m"
admission = {admission}
bots = {{ challenge = "off" }}
"#
        ));
    }
    s
}

/// One admission per hour: the first visitor gets in, the rest wait.
pub const HOURLY: &str = r#"{ mode = "batch", batch_size = 1, interval = "1h" }"#;
/// Ten admissions a second (for `put_event`).
pub fn fast() -> Value {
    serde_json::json!({ "mode": "continuous", "max_per_minute": 600 })
}

/// Replaces the event through the admin API with another `admission`.
pub async fn put_event(node: &Node, id: &str, max_active: u64, origin: &str, admission: Value) {
    let body = serde_json::json!({
        "origin": origin,
        "paths": [format!("/{id}")],
        "max_active": max_active,
        "token_ttl": "2m",
        "admission": admission,
        "bots": { "challenge": "off" },
    });
    let auth = [
        ("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}")),
        ("content-type".to_owned(), "application/json".to_owned()),
    ];
    let url = node.admin_url(&format!("/admin/events/{id}"));
    let (status, _, body) = send(Method::PUT, &url, &auth, Some(body.to_string()))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}
