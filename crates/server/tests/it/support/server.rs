//! Test harness: starts Anteroom through `run` on port 0 with an embedded
//! store in a temp dir, in front of an in-process origin that records what it
//! saw (max concurrency, the X-Anteroom-* headers).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const SECRET: &str = "test-secret-test-secret-test-secret-0123";

/// One request as the origin saw it: the URI, `X-Anteroom-Event` and
/// `X-Anteroom-Session`.
pub type Seen = (String, Option<String>, Option<String>);

/// What the origin observed.
#[derive(Default)]
pub struct OriginLog {
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub requests: Mutex<Vec<Seen>>,
}

pub async fn start_origin() -> (SocketAddr, Arc<OriginLog>) {
    let log = Arc::new(OriginLog::default());
    let app = Router::new()
        .fallback(origin_handler)
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, log)
}

async fn origin_handler(State(log): State<Arc<OriginLog>>, req: Request) -> String {
    let now = log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    log.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let uri = req.uri().to_string();
    {
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let seen = (
            uri.clone(),
            header("x-anteroom-event"),
            header("x-anteroom-session"),
        );
        log.requests.lock().unwrap().push(seen);
    }
    drop(req);
    tokio::time::sleep(Duration::from_millis(5)).await;
    log.in_flight.fetch_sub(1, Ordering::SeqCst);
    format!("origin saw {uri}")
}

pub struct TestServer {
    pub public: SocketAddr,
    pub admin: SocketAddr,
    pub origin: Arc<OriginLog>,
    pub origin_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

/// The event table used by most tests; `extra` lines are appended to it.
pub fn config_toml(origin: SocketAddr, dir: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
[server]
admin_token = "{ADMIN_TOKEN}"
[store]
path = "{}"
[keys]
secrets = ["{SECRET}"]
# These tests poll and re-enter as fast as they can; the rate limits are
# exercised on their own in wired_limits.rs.
[limits]
per_ip_per_second = 0
entries_per_ip = 0
per_session_per_second = 0
[[events]]
id = "tickets"
origin = "http://{origin}"
paths = ["/tickets"]
max_active = 2
admission = {{ mode = "batch", batch_size = 1, interval = "100ms" }}
{extra}
[[events]]
id = "other"
origin = "http://{origin}"
paths = ["/other"]
admission = {{ mode = "batch", batch_size = 1, interval = "100ms" }}
"#,
        dir.display()
    )
}

impl TestServer {
    pub async fn start(extra: &str) -> Self {
        let (origin_addr, origin) = start_origin().await;
        let dir = tempfile::tempdir().unwrap();
        let toml = config_toml(origin_addr, dir.path(), extra);
        Self::start_with(&toml, origin_addr, origin, dir).await
    }

    pub async fn start_with(
        toml: &str,
        origin_addr: SocketAddr,
        origin: Arc<OriginLog>,
        dir: tempfile::TempDir,
    ) -> Self {
        let config = anteroom::Config::from_toml(toml).unwrap();
        let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(anteroom::run(public, admin, config, async move {
            let _ = stopped.await;
        }));
        let server = Self {
            public: public_addr,
            admin: admin_addr,
            origin,
            origin_addr,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        };
        wait_until("server ready", || async {
            server.admin_get("/healthz", None).await.0 == StatusCode::OK
        })
        .await;
        server
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }

    /// Stops the server and starts it again on the same data directory with
    /// `toml` (which should name that directory: see [`Self::dir`]).
    pub async fn restart(self, toml: &str) -> Self {
        let (origin_addr, origin) = (self.origin_addr, self.origin.clone());
        let dir = self.stop_keeping_dir().await;
        // The stopped server's last tasks may still hold the embedded store
        // for a moment after `run` returned: wait until its files open.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let opts = anteroom_store::embedded::EmbeddedOptions::default();
            match anteroom_store::embedded::EmbeddedStore::open(dir.path(), opts).await {
                Ok(store) => break drop(store),
                Err(e) => assert!(Instant::now() < deadline, "store not released: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self::start_with(toml, origin_addr, origin, dir).await
    }

    /// Stops the server and hands back its data directory.
    pub async fn stop_keeping_dir(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
        self._dir
    }

    /// The data directory (what [`config_toml`] was given).
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.public, path)
    }

    pub async fn admin_get(
        &self,
        path: &str,
        token: Option<&str>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        self.admin_call(Method::GET, path, token, None).await
    }

    pub async fn admin_call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut headers = vec![];
        if let Some(t) = token {
            headers.push(("authorization".to_owned(), format!("Bearer {t}")));
        }
        send(
            method,
            &format!("http://{}{}", self.admin, path),
            &headers,
            body.map(str::to_owned),
        )
        .await
    }

    pub async fn pause(&self, event: &str, what: &str) {
        let (status, _, _) = self
            .admin_call(
                Method::POST,
                &format!("/admin/events/{event}/{what}"),
                Some(ADMIN_TOKEN),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{what} {event}");
    }
}

/// One HTTP request with a fresh connection.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> (StatusCode, HeaderMap, Bytes) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, bytes)
}

/// Polls `check` until it holds, failing after 10 s.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the visitor's position until its status is `want`; returns it.
pub async fn poll_until(v: &Visitor, url: &str, want: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, p) = v.clone().json(Method::GET, url, None).await;
        if p["status"] == want {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {want}; last {p}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A browser-like visitor with a cookie jar.
#[derive(Clone, Default, Debug)]
pub struct Visitor {
    pub cookies: Vec<(String, String)>,
    pub set_cookies: Vec<String>,
}

impl Visitor {
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub async fn call(
        &mut self,
        method: Method,
        url: &str,
        extra: &[(&str, &str)],
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut headers: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
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
        let out = send(method, url, &headers, body.map(str::to_owned)).await;
        for sc in out.1.get_all("set-cookie") {
            let sc = sc.to_str().unwrap().to_owned();
            let (pair, _) = sc.split_once(';').unwrap_or((&sc, ""));
            let (k, v) = pair.split_once('=').unwrap();
            self.cookies.retain(|(name, _)| name != k);
            if !v.is_empty() {
                self.cookies.push((k.to_owned(), v.to_owned()));
            }
            self.set_cookies.push(sc);
        }
        out
    }

    pub async fn json(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let (status, _, bytes) = self
            .call(method, url, &[("accept", "application/json")], body)
            .await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }
}
