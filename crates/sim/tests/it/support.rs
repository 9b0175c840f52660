//! What the simulator tests share: a real Anteroom started in this process
//! through `run` on port 0 (embedded store in a temp dir), its config, and
//! the crowd every test starts from.

use anteroom_sim::crowd::{Arrival, CrowdArgs};
use anteroom_sim::origin::{OriginHandle, serve_origin};
use tokio::net::TcpListener;

/// The simulator's instrumented origin on port 0, answering after
/// `latency` (a `--latency` model such as `fixed:5ms`).
pub async fn instrumented_origin(latency: &str) -> OriginHandle {
    serve_origin(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        latency.parse().unwrap(),
    )
    .await
    .unwrap()
}

/// The one event of the config, by the keys the tests vary.
pub struct Event<'a> {
    pub id: &'a str,
    pub max_active: u64,
    /// Admitted per 100 ms batch.
    pub batch_size: u64,
    /// `limits.per_ip_per_second` (0: no limit).
    pub per_ip_per_second: u64,
}

/// Where a node keeps the queue.
pub enum Store<'a> {
    /// The embedded store in this directory.
    Embedded(&'a std::path::Path),
    /// The Redis at `url`, shared with other nodes; this node's drain
    /// journal at `journal`.
    Redis {
        url: &'a str,
        journal: &'a std::path::Path,
    },
}

/// The config: `event` in front of `origin`, protecting `/`, no bot
/// challenge, no limit but the per-address one the event names.
pub fn config(origin: &str, store: &Store<'_>, event: &Event<'_>) -> anteroom::Config {
    let (journal, store) = match store {
        Store::Embedded(path) => (
            String::new(),
            format!("kind = \"embedded\"\npath = \"{}\"", path.display()),
        ),
        Store::Redis { url, journal } => (
            format!("drain_journal = \"{}\"", journal.display()),
            format!("kind = \"redis\"\nurls = [\"{url}\"]\ncluster = false\ntimeout = \"1s\""),
        ),
    };
    let text = format!(
        r#"
[server]
admin_token = "sim-admin-token-0123456789"
insecure_cookies = true
# The whole crowd comes from one loopback address.
max_streams_per_address = 100000
{journal}
[store]
{store}
[keys]
secrets = ["sim-test-secret-0123456789abcdef0123"]
[limits]
per_ip_per_second = {per_ip}
entries_per_ip = 0
per_session_per_second = 0
[[events]]
id = "{id}"
origin = "{origin}"
paths = ["/"]
max_active = {max_active}
admission = {{ mode = "batch", batch_size = {batch}, interval = "100ms" }}
bots = {{ challenge = "off" }}
"#,
        per_ip = event.per_ip_per_second,
        id = event.id,
        max_active = event.max_active,
        batch = event.batch_size,
    );
    anteroom::Config::from_toml(&text).unwrap()
}

/// Anteroom running in this process until [`Anteroom::stop`].
pub struct Anteroom {
    /// Its public URL.
    pub target: String,
    stop: tokio::sync::oneshot::Sender<()>,
    /// `run`, until it returns.
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Anteroom {
    /// Starts `config` on listeners bound to port 0.
    pub async fn start(config: anteroom::Config) -> Self {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = format!("http://{}", public.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(anteroom::run(public, admin, config, async {
            let _ = stopped.await;
        }));
        Self { target, stop, task }
    }

    /// Stops it and waits until `run` returned cleanly.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

/// The crowd the tests start from: a burst of plain visitors (no bots, no
/// abandons) browsing `/` against `target`'s `event`, no output files, no
/// warm-up; each test sets its own size, pace and deadline.
pub fn crowd(target: String, event: &str) -> CrowdArgs {
    CrowdArgs {
        target,
        server_pid: vec![],
        event: event.into(),
        visitors: 300,
        arrival: Arrival::Burst,
        rate: 1000.0,
        bots: 0.0,
        abandon: 0.0,
        browse: 40,
        browse_path: "/".into(),
        json: false,
        plot: None,
        origin_stats: None,
        origin_listen: None,
        origin_latency: "fixed:0ms".parse().unwrap(),
        max_active: None,
        fixed_poll: None,
        connections: 16,
        streams: 0,
        warmup: 0,
        timeout: 120,
        seed: 1,
    }
}
