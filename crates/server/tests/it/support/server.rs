//! Test harness: starts Anteroom through `run` on port 0 with an embedded
//! store in a temp dir, in front of the recording [`Origin`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event, FAST_BATCH};
use crate::support::origin::Origin;
use crate::support::visitor::{Gate, Visitor, try_send};

pub struct TestServer {
    pub public: SocketAddr,
    pub admin: SocketAddr,
    pub origin: Arc<Origin>,
    pub origin_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

/// The `tickets` event most tests use: two slots, one admission every 100 ms.
pub fn tickets(origin: SocketAddr) -> Event {
    Event::at("tickets", origin)
        .max_active(2)
        .admission(FAST_BATCH)
}

/// The config most tests use: the embedded store in `dir`, no limits (the
/// rate limits are exercised on their own in wired_limits), `tickets` as
/// given and a second event, `other`.
pub fn config(dir: &std::path::Path, origin: SocketAddr, tickets: Event) -> ConfigBuilder {
    ConfigBuilder::new()
        .embedded(dir)
        .no_limits()
        .event(tickets)
        .event(Event::at("other", origin).admission(FAST_BATCH))
}

impl TestServer {
    /// The [`config`] with `extra` lines in `tickets`, in front of a new
    /// [`Origin`].
    pub async fn start(extra: &str) -> Self {
        let origin = Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let toml = config(dir.path(), origin.addr, tickets(origin.addr).line(extra)).toml();
        Self::start_with(&toml, origin, dir).await
    }

    /// The server of `toml` (whose store is in `dir`) in front of `origin`.
    pub async fn start_with(toml: &str, origin: Arc<Origin>, dir: tempfile::TempDir) -> Self {
        let config = anteroom::Config::from_toml(toml).unwrap();
        let store = anteroom::open_store(&config).await.unwrap();
        Self::start_on(config, store, origin, dir).await
    }

    /// The server of `toml` on `store` (which the test opened, to wrap or
    /// share it), its files in `dir`, in front of `origin`.
    pub async fn start_on(
        config: anteroom::Config,
        store: Arc<dyn anteroom_store::QueueStore>,
        origin: Arc<Origin>,
        dir: tempfile::TempDir,
    ) -> Self {
        let origin_addr = origin.addr;
        let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(anteroom::run_with_store(
            public,
            admin,
            config,
            store,
            async move {
                let _ = stopped.await;
            },
        ));
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
        let origin = self.origin.clone();
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
        Self::start_with(toml, origin, dir).await
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

    /// The data directory (what [`config`] was given).
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

/// One HTTP request with a fresh connection; fails the test if no answer
/// came.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> (StatusCode, HeaderMap, Bytes) {
    try_send(method, url, headers, body).await.unwrap()
}

/// Polls `check` until it holds, failing after 10 s.
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait_for(what, Duration::from_secs(10), check).await;
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

impl Gate for TestServer {
    fn public_url(&self, path: &str) -> String {
        self.url(path)
    }
}
