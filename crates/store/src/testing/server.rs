//! One `redis-server` child process on a free loopback port.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::MISSING_REDIS;

/// How long a fresh server may take to answer PING.
const READY_DEADLINE: Duration = Duration::from_secs(10);

/// A `redis-server` started for a test; killed by PID when dropped.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server without persistence on a free port.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(free_port()?, Vec::new())
    }

    /// Starts a server on `port` with extra command-line arguments (cluster
    /// nodes use this).
    pub(crate) fn start_with(port: u16, extra: Vec<String>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("temp dir for redis-server")?;
        let mut server = Self {
            port,
            dir,
            extra,
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(MISSING_REDIS),
                _ => anyhow::Error::new(e).context("spawning redis-server"),
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Polls PING until the server answers or the deadline passes.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if ping(self.port) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "redis-server on port {} exited early with {status}",
                    self.port
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server on port {} not ready within {READY_DEADLINE:?}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The working directory (cluster nodes keep their `nodes.conf` there).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Graceful stop (SIGTERM), waiting for the process to exit.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.signal("-TERM")?;
        self.reap()
    }

    /// Abrupt stop (SIGKILL), like a crash.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut() {
            child.kill().context("killing redis-server")?;
        }
        self.reap()
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal("-STOP")
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal("-CONT")
    }

    /// Stops the server and starts an empty one on the same port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        self.spawn()
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else {
            bail!("redis-server on port {} is not running", self.port)
        };
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill {sig} {pid} failed with {status}");
        }
        Ok(())
    }

    fn reap(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.wait().context("waiting for redis-server to exit")?;
        }
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends a SIGSTOPped process; errors mean it is gone.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port nobody listens on now: bind port 0, read it, release it.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A free port for a cluster node: `port + 10000` (its cluster bus port)
/// must be free too.
pub(crate) fn free_cluster_port() -> anyhow::Result<u16> {
    for _ in 0..100 {
        let port = free_port()?;
        if let Some(bus) = port.checked_add(10_000)
            && TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return Ok(port);
        }
    }
    bail!("no free loopback port pair for a cluster node")
}

/// `true` when a server answers `PING` with `+PONG` on `port`.
pub(crate) fn ping(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        s.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf)?;
        Ok(&buf == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}
