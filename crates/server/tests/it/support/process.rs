//! Fault-injection harness: real `anteroom` processes (the binary cargo
//! built for these tests) on ports reserved by binding port 0, the origin
//! they stand in front of, and a visitor with a cookie jar. Every wait polls
//! against a deadline; every process is killed by PID when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::Value;

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event};
use crate::support::origin::Origin;
use crate::support::visitor::{Gate, try_send};
use crate::support::{free_port, wait_for};

/// The origin of these tests: each request stays in flight for 20 ms so
/// that overlapping holders of passes show up in the peak.
pub async fn origin() -> Arc<Origin> {
    Origin::options()
        .hold(Duration::from_millis(20))
        .start()
        .await
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
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self::start_on_fresh_ports(config, dir, |node| node.env = env.clone()).await
    }

    /// Starts a node on ports `free_port` found free; a node that exits at
    /// start is tried again on new ones. Another test's process may take a
    /// port between its check and the node's bind ("Address already in
    /// use", printed above): that is the harness's race, not the node's.
    async fn start_on_fresh_ports(
        config: &str,
        dir: Arc<tempfile::TempDir>,
        set: impl Fn(&mut Self),
    ) -> Self {
        const TRIES: u32 = 3;
        for tried in 1.. {
            let mut node = Self::start_unspawned(config, dir.clone());
            set(&mut node);
            match node.try_spawn().await {
                Ok(()) => return node,
                Err(status) if tried < TRIES => {
                    eprintln!("anteroom exited at start ({status}); again on other ports");
                }
                Err(status) => panic!("anteroom exited at start {TRIES} times, last {status}"),
            }
        }
        unreachable!()
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
        Self::start_on_fresh_ports(config, dir, |node| node.nofile = Some(nofile)).await
    }

    /// The process id of a process node.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    async fn spawn(&mut self) {
        if let Err(status) = self.try_spawn().await {
            panic!("anteroom exited at start: {status}");
        }
    }

    /// Starts the process and waits until it is ready; how it ended if it
    /// exited first.
    async fn try_spawn(&mut self) -> Result<(), std::process::ExitStatus> {
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
        let child = self.child.insert(child);
        let url = format!("http://{}/healthz", self.admin);
        let started = Instant::now();
        while get_status(&url).await != Some(StatusCode::OK) {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(status);
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "timed out waiting for: anteroom /healthz"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "anteroom on {} ready in {:?}",
            self.public,
            started.elapsed()
        );
        Ok(())
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

    /// An admin call with a JSON body; the answer read as JSON (`null`
    /// when empty).
    pub async fn admin_json(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
    ) -> (StatusCode, serde_json::Value) {
        let headers = [
            ("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}")),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        let (s, _, b) = send(
            method,
            &self.admin_url(path),
            &headers,
            Some(body.to_string()),
        )
        .await
        .unwrap();
        (
            s,
            serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null),
        )
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

impl Gate for Node {
    fn public_url(&self, path: &str) -> String {
        self.url(path)
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
    tokio::time::timeout(Duration::from_secs(5), try_send(method, url, headers, body))
        .await
        .map_err(|_| "timed out".to_owned())?
}

/// The config of one node with the standalone Redis store at `urls`:
/// listeners and drain journal where [`Node`] puts them, no limits; the
/// test adds its events ([`event`]).
pub fn redis_node(urls: &[String]) -> ConfigBuilder {
    node_with(ConfigBuilder::new().redis(urls))
}

/// A connection of the test's own to the standalone Redis at `url`, as
/// another gateway node holds one: to read or write the store behind the
/// nodes' backs.
pub async fn redis_store(url: &str) -> anteroom_store::redis::RedisStore {
    let config = anteroom_store::redis::RedisConfig {
        urls: vec![url.to_owned()],
        cluster: false,
        timeout: Duration::from_secs(5),
    };
    anteroom_store::redis::RedisStore::connect(&config)
        .await
        .expect("connect to the test's redis-server")
}

/// [`redis_node`] on a Redis Cluster reached through `urls`.
pub fn redis_cluster_node(urls: &[String]) -> ConfigBuilder {
    node_with(ConfigBuilder::new().redis_cluster(urls))
}

fn node_with(store: ConfigBuilder) -> ConfigBuilder {
    store.process().drain_journal().no_limits()
}

/// An event as these tests run it in front of `origin`: `max_active`
/// slots, tokens good for two minutes, no bot challenge; the test names the
/// admission.
pub fn event(id: &str, origin: &str, max_active: u64) -> Event {
    Event::new(id, origin)
        .max_active(max_active)
        .token_ttl("2m")
        .challenge_off()
}

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
