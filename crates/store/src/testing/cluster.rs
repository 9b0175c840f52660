//! A Redis Cluster of masters (no replicas) made of `redis-server` children.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::MISSING_REDIS;
use super::distant::DistantProxy;
use super::server::{RedisServer, free_cluster_port};

/// How long the cluster may take to report `cluster_state:ok` everywhere.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A cluster started for a test; every node is killed by PID when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes, joins them with `redis-cli --cluster create`
    /// (16384 slots spread evenly, no replicas) and waits until every node
    /// reports `cluster_state:ok`.
    ///
    /// `cluster-require-full-coverage no` is what lets the surviving masters
    /// go on serving their slots when one dies, so only its events drain.
    pub fn start(masters: usize) -> anyhow::Result<Self> {
        if masters < 3 {
            bail!("redis-cli --cluster create needs at least 3 masters");
        }
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            let port = free_cluster_port()?;
            let extra = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-require-full-coverage",
                "no",
            ];
            nodes.push(RedisServer::start_with(
                port,
                extra.iter().map(|s| s.to_string()).collect(),
            )?);
        }
        let cluster = Self { nodes };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = create.output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(MISSING_REDIS),
            _ => anyhow::Error::new(e).context("running redis-cli --cluster create"),
        })?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        cluster.wait_ok()?;
        Ok(cluster)
    }

    fn wait_ok(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_DEADLINE;
        for node in &self.nodes {
            loop {
                if cli(node.port(), &["CLUSTER", "INFO"])?.contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "node {} not cluster_state:ok within {READY_DEADLINE:?}",
                        node.port()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Seed URLs of every node (dead ones included).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Puts every node `delay` away: a [`DistantProxy`] in front of each,
    /// and each node announcing its proxy's port (`cluster-announce-port`;
    /// the bus port stays the node's own), so a cluster client, which
    /// connects to the addresses the nodes announce, reaches every node
    /// through its proxy. Returns once every node's view names only the
    /// proxies; the proxies stop when dropped.
    pub async fn distant(&self, delay: Duration) -> anyhow::Result<Vec<DistantProxy>> {
        let mut proxies = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let proxy = DistantProxy::start(node.port(), delay).await?;
            let bus = (u32::from(node.port()) + 10_000).to_string();
            cli(
                node.port(),
                &["CONFIG", "SET", "cluster-announce-bus-port", &bus],
            )?;
            let port = proxy.port.to_string();
            cli(
                node.port(),
                &["CONFIG", "SET", "cluster-announce-port", &port],
            )?;
            proxies.push(proxy);
        }
        let wanted: Vec<u16> = proxies.iter().map(|p| p.port).collect();
        let deadline = Instant::now() + READY_DEADLINE;
        for node in &self.nodes {
            loop {
                let ports = master_ports(&cli(node.port(), &["CLUSTER", "NODES"])?);
                if ports.len() == wanted.len() && ports.iter().all(|p| wanted.contains(p)) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "node {} still announces {ports:?}, not the proxies {wanted:?}",
                        node.port()
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(proxies)
    }

    /// The port of the master that holds the slot of `event_id`'s keys.
    pub fn master_for_event(&self, event_id: &str) -> anyhow::Result<u16> {
        let probe = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .context("every node is down")?;
        let key = format!("anteroom:{{{event_id}}}:q");
        let slot: u16 = cli(probe.port(), &["CLUSTER", "KEYSLOT", &key])?
            .trim()
            .parse()?;
        let nodes = cli(probe.port(), &["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                continue;
            };
            if !flags.contains("master") {
                continue;
            }
            let owns = fields.iter().skip(8).any(|range| slot_in(range, slot));
            if owns {
                let port = addr
                    .split(['@', ':'])
                    .nth(1)
                    .context("node address without port")?;
                return Ok(port.parse()?);
            }
        }
        bail!("no master owns slot {slot}")
    }

    /// SIGKILLs the master holding `event_id`'s slot; returns its port.
    pub fn kill_master_for_event(&mut self, event_id: &str) -> anyhow::Result<u16> {
        let port = self.master_for_event(event_id)?;
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .context("master is not one of ours")?;
        node.kill()?;
        Ok(port)
    }

    /// Restarts the (killed) node on `port` with the same port, directory
    /// and `nodes.conf`, so it rejoins as the same node owning the same
    /// slots (and loads its `dump.rdb`, if one was `SAVE`d there); then
    /// waits until every node reports `cluster_state:ok`. Like the others,
    /// the new process is killed by PID when the cluster is dropped.
    pub fn restart_master(&mut self, port: u16) -> anyhow::Result<()> {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .context("no node of ours on that port")?;
        if node.pid().is_some() {
            bail!("node {port} is still running; kill it first");
        }
        node.restart()?;
        self.wait_ok()
    }
}

/// The client ports of the masters a `CLUSTER NODES` reply lists.
fn master_ports(nodes: &str) -> Vec<u16> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (addr, flags) = (fields.get(1)?, fields.get(2)?);
            if !flags.contains("master") {
                return None;
            }
            addr.split(['@', ':']).nth(1)?.parse().ok()
        })
        .collect()
}

/// `true` when a `CLUSTER NODES` slot field (`5461` or `0-5460`) holds `slot`.
fn slot_in(range: &str, slot: u16) -> bool {
    let mut ends = range.splitn(2, '-').map(str::parse::<u16>);
    match (ends.next(), ends.next()) {
        (Some(Ok(lo)), None) => lo == slot,
        (Some(Ok(lo)), Some(Ok(hi))) => (lo..=hi).contains(&slot),
        _ => false,
    }
}

/// Runs one `redis-cli` command against a local node; returns its stdout.
fn cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(MISSING_REDIS),
            _ => anyhow::Error::new(e).context("running redis-cli"),
        })?;
    if !out.status.success() {
        bail!("redis-cli {args:?} on port {port} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
