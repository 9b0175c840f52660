//! The `--store redis` branch of `anteroom-sim engine`: the same measurements
//! as the embedded run (through the same helpers), against a Redis or Redis
//! Cluster the caller points at, plus `baseline_zadd_per_s`: plain `ZADD NX`
//! of as many members with the same concurrency on the same server, in the
//! same run, so join throughput reads as a ratio of what Redis itself does.
//!
//! Only keys under `anteroom:{<bench event>}:` are written, and they are
//! deleted at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_store::redis::{RedisConfig, RedisStore};
use anteroom_store::{EventId, QueueStore};
use anyhow::{Context, bail};

use super::{EngineArgs, EngineReport, Histogram, admits, joins, member, ranks};

/// Every key the backend keeps per event (see `anteroom_store::redis`'s key
/// layout), so the benchmark can clean up without scanning.
const EVENT_KEYS: &[&str] = &[
    "q",
    "seen",
    "active",
    "active:ends",
    "tok",
    "tokexp",
    "used",
    "rev",
    "state",
    "totals",
    "h:admitted",
    "h:churn",
    "h:noshow",
];

/// A raw connection for the baseline, the memory probe and the clean-up.
enum Raw {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Raw {
    async fn connect(urls: &[String], cluster: bool) -> anyhow::Result<Self> {
        Ok(if cluster {
            let client = redis::cluster::ClusterClient::new(urls.to_vec())?;
            Raw::Cluster(client.get_async_connection().await?)
        } else {
            let url = urls
                .first()
                .context("--url is required for --store redis")?;
            Raw::Single(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            )
        })
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> anyhow::Result<T> {
        Ok(match self {
            Raw::Single(c) => cmd.query_async(&mut c.clone()).await?,
            Raw::Cluster(c) => cmd.query_async(&mut c.clone()).await?,
        })
    }

    /// `used_memory` of the node holding `key` (standalone: the server).
    async fn used_memory(&self, key: &str) -> anyhow::Result<u64> {
        // MEMORY STATS has no key to route by; a script with `key` runs on
        // the right node and reads INFO there.
        let script = "local i = redis.call('INFO', 'memory'); return tonumber(string.match(i, 'used_memory:(%d+)'))";
        self.query(redis::cmd("EVAL").arg(script).arg(1).arg(key))
            .await
    }

    async fn unlink(&self, keys: &[String]) -> anyhow::Result<()> {
        if !keys.is_empty() {
            let _: i64 = self.query(redis::cmd("UNLINK").arg(keys)).await?;
        }
        Ok(())
    }
}

fn event_keys(event: &EventId) -> Vec<String> {
    EVENT_KEYS
        .iter()
        .map(|k| format!("anteroom:{{{}}}:{k}", event.as_str()))
        .collect()
}

pub(super) async fn run(args: &EngineArgs) -> anyhow::Result<EngineReport> {
    let urls: Vec<String> = match &args.url {
        Some(u) => u
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect(),
        None => bail!(
            "--store redis needs --url redis://HOST:PORT (several, comma-separated, with --cluster)"
        ),
    };
    let cfg = RedisConfig {
        urls: urls.clone(),
        cluster: args.cluster,
        timeout: Duration::from_secs(10),
    };
    // A fresh event per run: never touches a previous run's (or anybody's) data.
    let event = EventId::new(&format!("bench-{:08x}", rand::random::<u32>()))?;
    let raw = Raw::connect(&urls, args.cluster).await?;
    let keys = event_keys(&event);
    let mem_before = raw.used_memory(&keys[0]).await?;

    let redis_store = RedisStore::connect(&cfg).await?;
    let store: Arc<dyn QueueStore> = Arc::new(redis_store);
    let hist = Arc::new(Histogram::new());
    let (joins_per_s, n) = joins(&store, &event, args, &hist).await?;
    let mem_after = raw.used_memory(&keys[0]).await?;
    let baseline_zadd_per_s = baseline_zadd(&raw, &event, n, args.tasks).await?;
    let (rank_p50_us, rank_p99_us, rank_max_us) =
        ranks(&store, &event, n, args.rank_samples).await?;
    let admitted = args.admits.min(n);
    let admits_per_s = admits(&store, &event, admitted).await?;

    // Redis keeps the queue when a gateway node restarts: "restart" is a new
    // node connecting and seeing every waiter.
    drop(store);
    let t = Instant::now();
    let store = RedisStore::connect(&cfg).await?;
    let left = store.queue_length(&event).await?;
    let restart_s = t.elapsed().as_secs_f64();
    if left != n - admitted {
        bail!("a new node sees {left} waiters, expected {}", n - admitted);
    }
    raw.unlink(&keys).await?;

    let per_waiter = mem_after.saturating_sub(mem_before) as f64 / n.max(1) as f64;
    Ok(EngineReport {
        store: if args.cluster {
            "redis-cluster"
        } else {
            "redis"
        },
        waiters: n,
        joins_per_s,
        join_ack_p99_ms: hist.quantile_us(0.99) as f64 / 1000.0,
        rank_p50_us,
        rank_p99_us,
        admits_per_s,
        bytes_per_waiter: per_waiter,
        restart_s,
        join_ack_p50_ms: hist.quantile_us(0.50) as f64 / 1000.0,
        join_tasks: args.tasks,
        bytes_per_waiter_after_joins: per_waiter,
        rank_max_us,
        baseline_zadd_per_s: Some(baseline_zadd_per_s),
    })
}

/// `n` plain `ZADD NX` from `tasks` concurrent tasks over one multiplexed
/// connection (pipelined the same way as the store's calls), on a key of the
/// bench event's slot; the key is deleted afterwards. Members per second.
async fn baseline_zadd(raw: &Raw, event: &EventId, n: u64, tasks: u64) -> anyhow::Result<f64> {
    let key = format!("anteroom:{{{}}}:baseline", event.as_str());
    let raw = Arc::new(match raw {
        Raw::Single(c) => Raw::Single(c.clone()),
        Raw::Cluster(c) => Raw::Cluster(c.clone()),
    });
    let tasks = tasks.max(1);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (raw, key) = (raw.clone(), key.clone());
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                let _: i64 = raw
                    .query(redis::cmd("ZADD").arg(&key).arg("NX").arg(i).arg(member(i)))
                    .await?;
                i += tasks;
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let per_s = n as f64 / start.elapsed().as_secs_f64().max(1e-9);
    raw.unlink(&[key]).await?;
    Ok(per_s)
}
