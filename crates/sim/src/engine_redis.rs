//! The `--store redis` branch of `anteroom-sim engine`: the same measurements
//! as the embedded run (through the same helpers), against a Redis or Redis
//! Cluster the caller points at, plus `baseline_zadd_per_s`: plain `ZADD NX`
//! of as many members with the same concurrency on the same server, in the
//! same run, so join throughput reads as a ratio of what Redis itself does.
//!
//! With `--events E` the joins (and the baseline's ZADDs) go to E events
//! side by side, interleaved so every event is busy at once: on a cluster
//! that is the cluster-wide event throughput.
//!
//! Only keys under `anteroom:{<bench event>}:` are written, and they are
//! deleted at the end.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_store::redis::{RedisConfig, RedisStore};
use anteroom_store::{EventId, QueueStore};
use anyhow::{Context, bail};

use anteroom_core::score::JoinScoring;

use super::{EngineArgs, EngineReport, Histogram, admits, member, polls, ranks, settle};

/// Every key the backend keeps per event (see `anteroom_store::redis`'s key
/// layout), so the benchmark can clean up without scanning.
const EVENT_KEYS: &[&str] = &[
    "q",
    "seen",
    "active",
    "held",
    "tokb",
    "tokm",
    "jb",
    "jm",
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

    /// `used_memory` summed over the nodes holding `keys` (standalone: the
    /// server), each node counted once.
    async fn used_memory(&self, keys: &[String]) -> anyhow::Result<u64> {
        // MEMORY STATS has no key to route by; a script with a key runs on
        // the right node and reads INFO there, with the node's run id.
        // UNLINK (a previous run's clean-up) frees in the background: until
        // `lazyfree_pending_objects` is 0, used_memory is still falling and
        // a difference taken across that would be wrong.
        let script = "local i = redis.call('INFO'); return {tonumber(string.match(i, 'used_memory:(%d+)')), string.match(i, 'run_id:(%w+)'), tonumber(string.match(i, 'lazyfree_pending_objects:(%d+)') or '0')}";
        let mut nodes = std::collections::HashMap::new();
        for key in keys {
            for _ in 0..100 {
                let (bytes, node, pending): (u64, String, u64) = self
                    .query(redis::cmd("EVAL").arg(script).arg(1).arg(key))
                    .await?;
                nodes.insert(node, bytes);
                if pending == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(nodes.values().sum())
    }

    /// CPU seconds (`used_cpu_user + used_cpu_sys`) and EVALSHA calls of
    /// every node holding one of `keys`, by run id: the server-side cost of a
    /// phase is the change across it, steadier than throughput on a shared
    /// machine; scripts per operation show how well calls were batched.
    async fn server_cpu(&self, keys: &[String]) -> anyhow::Result<HashMap<String, (f64, u64)>> {
        let script = "local i = redis.call('INFO', 'cpu') .. redis.call('INFO', 'server') .. redis.call('INFO', 'commandstats'); return {string.match(i, 'used_cpu_sys:([%d.]+)'), string.match(i, 'used_cpu_user:([%d.]+)'), string.match(i, 'run_id:(%w+)'), string.match(i, 'cmdstat_evalsha:calls=(%d+)') or '0'}";
        let mut nodes = HashMap::new();
        for key in keys {
            let (sys, user, node, scripts): (String, String, String, String) = self
                .query(redis::cmd("EVAL").arg(script).arg(1).arg(key))
                .await?;
            nodes.insert(
                node,
                (sys.parse::<f64>()? + user.parse::<f64>()?, scripts.parse()?),
            );
        }
        Ok(nodes)
    }

    async fn unlink(&self, keys: &[String]) -> anyhow::Result<()> {
        if !keys.is_empty() {
            let _: i64 = self.query(redis::cmd("UNLINK").arg(keys)).await?;
        }
        Ok(())
    }
}

/// CPU seconds this process has used (user + system), from `/proc/self/stat`.
fn client_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of them, in clock ticks (100 per second on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// Where the CPU went during one phase, printed to stderr (the JSON report's
/// keys are shared with the embedded backend): client and server CPU per
/// operation, and how busy each server node was. A node far from 100 % busy
/// while the phase ran means the client, not Redis, bounded the phase.
struct Probe<'a> {
    raw: &'a Raw,
    keys: &'a [String],
    wall: Instant,
    client: f64,
    server: HashMap<String, (f64, u64)>,
}

impl<'a> Probe<'a> {
    async fn start(raw: &'a Raw, keys: &'a [String]) -> anyhow::Result<Probe<'a>> {
        Ok(Self {
            raw,
            keys,
            server: raw.server_cpu(keys).await?,
            client: client_cpu_s(),
            wall: Instant::now(),
        })
    }

    async fn report(self, phase: &str, ops: u64) -> anyhow::Result<()> {
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        let client = client_cpu_s() - self.client;
        let after = self.raw.server_cpu(self.keys).await?;
        let mut busy = Vec::new();
        let (mut server, mut scripts) = (0.0, 0);
        for (node, (cpu, calls)) in &after {
            let (cpu0, calls0) = self.server.get(node).copied().unwrap_or((*cpu, *calls));
            server += cpu - cpu0;
            scripts += calls - calls0;
            busy.push(format!("{:.0}%", 100.0 * (cpu - cpu0) / wall));
        }
        busy.sort();
        let per_op = |s: f64| 1e6 * s / ops.max(1) as f64;
        eprintln!(
            "{phase}: {ops} ops in {wall:.2} s = {:.0}/s; client {:.1} us/op ({:.0}% of a core); server {:.1} us/op, {:.1} ops per script; nodes busy {}",
            ops as f64 / wall,
            per_op(client),
            100.0 * client / wall,
            per_op(server),
            ops as f64 / scripts.max(1) as f64,
            busy.join(" "),
        );
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
    // Fresh events per run: never touch a previous run's (or anybody's) data.
    let run = rand::random::<u32>();
    let events = (0..args.events.max(1))
        .map(|e| EventId::new(&format!("bench-{run:08x}-{e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let spread = Spread::new(args.waiters, events.len() as u64);
    let raw = Raw::connect(&urls, args.cluster).await?;
    let queues: Vec<String> = events.iter().map(|e| event_keys(e)[0].clone()).collect();
    let mem_before = raw.used_memory(&queues).await?;

    let redis_store = RedisStore::connect(&cfg).await?;
    let store: Arc<dyn QueueStore> = Arc::new(redis_store);
    let hist = Arc::new(Histogram::new());
    let probe = Probe::start(&raw, &queues).await?;
    let joins_per_s = joins(&store, &events, spread, args.tasks, &hist).await?;
    let n = spread.n;
    probe.report("join", n).await?;
    let mem_after = raw.used_memory(&queues).await?;
    let probe = Probe::start(&raw, &queues).await?;
    let baseline_zadd_per_s = baseline_zadd(&raw, &events, spread, args.tasks).await?;
    probe.report("baseline zadd", n).await?;
    // The first event holds members 0..per_event, as `ranks` expects.
    let (event, per_event) = (&events[0], spread.per_event);
    let probe = Probe::start(&raw, &queues).await?;
    let (rank_p50_us, rank_p99_us, rank_max_us) =
        ranks(&store, event, per_event, args.rank_samples).await?;
    probe.report("status", args.rank_samples).await?;
    let probe = Probe::start(&raw, &queues).await?;
    let polls_per_s = polls(&store, event, per_event, args.polls, args.tasks).await?;
    let poll_flush_s = settle(&store, event).await?;
    probe
        .report("polls (concurrent status)", args.polls)
        .await?;
    let admitted = args.admits.min(per_event);
    let probe = Probe::start(&raw, &queues).await?;
    let admits_per_s = admits(&store, event, admitted).await?;
    probe.report("admit (members)", admitted).await?;

    // Redis keeps the queue when a gateway node restarts: "restart" is a new
    // node connecting and seeing every waiter.
    drop(store);
    let t = Instant::now();
    let store = RedisStore::connect(&cfg).await?;
    let left = store.queue_length(event).await?;
    let restart_s = t.elapsed().as_secs_f64();
    if left != per_event - admitted {
        bail!(
            "a new node sees {left} waiters, expected {}",
            per_event - admitted
        );
    }
    // One UNLINK per event: its keys share a slot, as a cluster requires.
    for e in &events {
        raw.unlink(&event_keys(e)).await?;
    }

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
        polls_per_s,
        poll_flush_s,
        baseline_zadd_per_s: Some(baseline_zadd_per_s),
    })
}

/// How `--waiters` are spread over the events: call `j` (0..n) goes to
/// event `j % events`, so consecutive calls of every task hit different
/// events, and member ids are laid out event by event (event 0 holds
/// members `0..per_event`).
#[derive(Clone, Copy)]
struct Spread {
    n: u64,
    events: u64,
    per_event: u64,
}

impl Spread {
    /// Waiters are rounded down to a whole number per event.
    fn new(waiters: u64, events: u64) -> Self {
        let per_event = waiters / events;
        Self {
            n: per_event * events,
            events,
            per_event,
        }
    }

    /// The event index and member id of call `j`.
    fn at(&self, j: u64) -> (usize, u64) {
        let e = j % self.events;
        (e as usize, e * self.per_event + j / self.events)
    }
}

/// Joins every member of `spread` from `tasks` concurrent tasks, each call
/// timed into `hist`; joins per second.
async fn joins(
    store: &Arc<dyn QueueStore>,
    events: &[EventId],
    spread: Spread,
    tasks: u64,
    hist: &Arc<Histogram>,
) -> anyhow::Result<f64> {
    let now = store.now_us(&events[0]).await?;
    let scoring = JoinScoring {
        opens_at_us: now - 1_000_000,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    };
    let events: Arc<[EventId]> = events.into();
    let tasks = tasks.max(1);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (store, events, hist) = (store.clone(), events.clone(), hist.clone());
        handles.push(tokio::spawn(async move {
            let mut j = t;
            while j < spread.n {
                let (e, i) = spread.at(j);
                let sc = JoinScoring {
                    tiebreak: (i & 1023) as i64,
                    ..scoring
                };
                let t0 = Instant::now();
                store.join(&events[e], &member(i), &sc).await?;
                hist.record(t0.elapsed().as_micros() as u64);
                j += tasks;
            }
            Ok::<(), anteroom_store::StoreError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(spread.n as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// As many plain `ZADD NX` as joins, spread over the events the same way,
/// from `tasks` concurrent tasks over one multiplexed connection (pipelined
/// the same way as the store's calls), on a key of each event's slot; the
/// keys are deleted afterwards. Members per second.
async fn baseline_zadd(
    raw: &Raw,
    events: &[EventId],
    spread: Spread,
    tasks: u64,
) -> anyhow::Result<f64> {
    let keys: Arc<[String]> = events
        .iter()
        .map(|e| format!("anteroom:{{{}}}:baseline", e.as_str()))
        .collect();
    let raw = Arc::new(match raw {
        Raw::Single(c) => Raw::Single(c.clone()),
        Raw::Cluster(c) => Raw::Cluster(c.clone()),
    });
    let tasks = tasks.max(1);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (raw, keys) = (raw.clone(), keys.clone());
        handles.push(tokio::spawn(async move {
            let mut j = t;
            while j < spread.n {
                let (e, i) = spread.at(j);
                let _: i64 = raw
                    .query(
                        redis::cmd("ZADD")
                            .arg(&keys[e])
                            .arg("NX")
                            .arg(i)
                            .arg(member(i)),
                    )
                    .await?;
                j += tasks;
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let per_s = spread.n as f64 / start.elapsed().as_secs_f64().max(1e-9);
    for key in keys.iter() {
        raw.unlink(std::slice::from_ref(key)).await?;
    }
    Ok(per_s)
}
