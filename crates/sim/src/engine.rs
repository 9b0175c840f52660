//! `anteroom-sim engine`: the queue engine benchmark, straight against a
//! `QueueStore` (no HTTP): durable joins/s with many concurrent callers (so
//! group commit is exercised), join acknowledgement p99, rank latency
//! (status calls), admits/s, resident bytes per waiter and restart time.
//!
//! The measuring code takes an `Arc<dyn QueueStore>`, so another backend only
//! needs its own way to open (and reopen) the store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anteroom_core::score::JoinScoring;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use anteroom_store::{AdmitRequest, EventId, QueueStore, Touch};
use anyhow::{Context, bail};
use serde::Serialize;

#[path = "engine_redis.rs"]
mod redis;

#[path = "engine_embedded.rs"]
mod embedded;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    Embedded,
    Redis,
}

/// Command-line arguments of `engine`.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// Waiters to join (and rebuild at restart).
    #[arg(long, default_value_t = 1_000_000)]
    pub waiters: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Backend under test.
    #[arg(long, value_enum, default_value_t = StoreKind::Embedded)]
    pub store: StoreKind,
    /// Redis URL (for `--store redis`); with `--cluster`, comma-separated seed nodes.
    #[arg(long)]
    pub url: Option<String>,
    /// The Redis at `--url` is a Redis Cluster.
    #[arg(long)]
    pub cluster: bool,
    /// Redis only: events side by side, the joins spread evenly over them
    /// (each event is its own hash tag, so a cluster spreads them over its
    /// masters); rank, admit and restart figures are taken on the first.
    #[arg(long, default_value_t = 1)]
    pub events: u64,
    /// Concurrent joining tasks: the joins in flight, which group commit
    /// needs (throughput ≈ in-flight joins / commit latency).
    #[arg(long, default_value_t = 1024)]
    pub tasks: u64,
    /// Status calls timed for the rank percentiles.
    #[arg(long, default_value_t = 200_000)]
    pub rank_samples: u64,
    /// Members admitted in the admit phase (at most a tenth of the waiters).
    #[arg(long, default_value_t = 200_000)]
    pub admits: u64,
    /// Position polls (status with the seen mark, as the API's poll) made
    /// from `--tasks` concurrent tasks, for `polls_per_s`.
    #[arg(long, default_value_t = 200_000)]
    pub polls: u64,
    /// Times the whole benchmark runs (each on a fresh store); every figure
    /// is reported as the median with its min and max, so one lucky run
    /// cannot stand for the figure.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Data directory for the embedded store (default: a fresh temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Internal: only reopen the embedded store in this directory and report
    /// restart time and memory (the benchmark runs itself with it, so that a
    /// fresh process measures memory after restart).
    #[arg(long, hide = true)]
    pub reopen: Option<PathBuf>,
}

/// The report plus figures only some backends have.
#[derive(Debug, Serialize)]
pub struct EngineOutput {
    #[serde(flatten)]
    pub report: EngineReport,
    /// Embedded: `rank_*` is the in-process index cost; this is the whole
    /// `status()` call (async path, event lookup, locks) for comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_p99_us: Option<f64>,
    /// Embedded: the disk's own `fdatasync` latency (64 KiB writes in the
    /// data directory), measured in the same run: the floor under the join
    /// acknowledgement latency, since a join is answered after its commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsync_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsync_p99_ms: Option<f64>,
    /// Embedded: an idle sweep that expires every waiter left after the
    /// restart, while one caller polls `status` back to back: the worst and
    /// p99 latency of those polls, how long the sweep took and how many it
    /// expired (the sweep and the repack hold the event only a slice at a time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepReport>,
}

/// Status latency while the idle sweep runs.
#[derive(Debug, Serialize)]
pub struct SweepReport {
    pub sweep_waiters: u64,
    pub sweep_s: f64,
    pub sweep_status_p99_us: f64,
    pub sweep_status_max_us: f64,
    pub sweep_status_calls: u64,
    /// The same poller for 2 s before the sweep: the machine's noise floor.
    pub quiet_status_p99_us: f64,
    pub quiet_status_max_us: f64,
}

impl From<EngineReport> for EngineOutput {
    fn from(report: EngineReport) -> Self {
        Self {
            report,
            status_p50_us: None,
            status_p99_us: None,
            fsync_p50_ms: None,
            fsync_p99_ms: None,
            sweep: None,
        }
    }
}

/// The figures; the first nine keys are the stable contract of `--json`.
#[derive(Debug, Serialize)]
pub struct EngineReport {
    pub store: &'static str,
    pub waiters: u64,
    pub joins_per_s: f64,
    pub join_ack_p99_ms: f64,
    pub rank_p50_us: f64,
    pub rank_p99_us: f64,
    pub admits_per_s: f64,
    pub bytes_per_waiter: f64,
    pub restart_s: f64,
    pub join_ack_p50_ms: f64,
    pub join_tasks: u64,
    pub bytes_per_waiter_after_joins: f64,
    pub rank_max_us: f64,
    /// Position polls per second from `join_tasks` concurrent callers.
    pub polls_per_s: f64,
    /// Seconds to make the poll phase's last-seen touches durable (the
    /// embedded store writes them with the next commit; Redis at once).
    pub poll_flush_s: f64,
    /// Redis only: plain `ZADD NX` per second, same server, concurrency and run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_zadd_per_s: Option<f64>,
}

/// Latencies in whole µs, 1 µs buckets up to 1 s; lock-free so 256 tasks can record.
struct Histogram(Vec<AtomicU64>);

impl Histogram {
    fn new() -> Self {
        Self((0..1_000_001).map(|_| AtomicU64::new(0)).collect())
    }
    fn record(&self, us: u64) {
        let i = (us as usize).min(self.0.len() - 1);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }
    fn quantile_us(&self, q: f64) -> u64 {
        let total: u64 = self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let want = ((total as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, c) in self.0.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= want.max(1) {
                return i as u64;
            }
        }
        self.0.len() as u64
    }
}

/// Resident set size of this process, from `/proc/self/statm`.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A member id shaped like a 128-bit session id (32 hex digits), derived from `i`.
fn member(i: u64) -> String {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{:016x}{:016x}", z ^ (z >> 31), i)
}

pub async fn run(args: &EngineArgs) -> anyhow::Result<EngineOutput> {
    match args.store {
        StoreKind::Embedded => match &args.reopen {
            Some(dir) => embedded::reopen(dir).await.map(EngineOutput::from),
            None => embedded::run(args).await,
        },
        StoreKind::Redis => redis::run(args).await.map(EngineOutput::from),
    }
}

async fn open_embedded(dir: &Path) -> anyhow::Result<EmbeddedStore> {
    EmbeddedStore::open(dir, EmbeddedOptions::default())
        .await
        .with_context(|| format!("opening the embedded store in {}", dir.display()))
}

/// Joins `args.waiters` members from `args.tasks` concurrent tasks.
async fn joins(
    store: &Arc<dyn QueueStore>,
    event: &EventId,
    args: &EngineArgs,
    hist: &Arc<Histogram>,
) -> anyhow::Result<(f64, u64)> {
    let now = store.now_us(event).await?;
    let scoring = JoinScoring {
        opens_at_us: now - 1_000_000,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    };
    let tasks = args.tasks.max(1);
    let n = args.waiters;
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (store, event, hist) = (store.clone(), event.clone(), hist.clone());
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                let mut sc = scoring;
                sc.tiebreak = (i & 1023) as i64;
                let t0 = Instant::now();
                store.join(&event, &member(i), &sc).await?;
                hist.record(t0.elapsed().as_micros() as u64);
                i += tasks;
            }
            Ok::<(), anteroom_store::StoreError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((n as f64 / secs, n))
}

/// `samples` ids drawn at random among the first `n` members.
fn random_members(n: u64, samples: u64) -> Vec<String> {
    (0..samples)
        .map(|_| member(rand::random::<u64>() % n))
        .collect()
}

/// (p50, p99, max) in µs of latencies in ns (sorted in place).
fn p50_p99_max_us(ns: &mut [u64]) -> (f64, f64, f64) {
    ns.sort_unstable();
    let q = |p: f64| ns[((ns.len() as f64 * p) as usize).min(ns.len() - 1)] as f64 / 1000.0;
    (q(0.50), q(0.99), q(1.0))
}

/// Times `samples` status calls on random waiters; (p50, p99, max) in µs.
async fn ranks(
    store: &Arc<dyn QueueStore>,
    event: &EventId,
    n: u64,
    samples: u64,
) -> anyhow::Result<(f64, f64, f64)> {
    if n == 0 {
        return Ok((0.0, 0.0, 0.0));
    }
    let ids = random_members(n, samples);
    let mut ns = Vec::with_capacity(ids.len());
    for m in &ids {
        let t0 = Instant::now();
        let st = store.status(event, m, Touch::Peek).await?;
        ns.push(t0.elapsed().as_nanos() as u64);
        if !matches!(st, anteroom_store::MemberState::Waiting { .. }) {
            bail!("{m} is not waiting: {st:?}");
        }
    }
    Ok(p50_p99_max_us(&mut ns))
}

/// Position polls as the API makes them (`status` with the seen mark) from
/// `tasks` concurrent tasks, on random members among the first `n`: polls
/// per second.
async fn polls(
    store: &Arc<dyn QueueStore>,
    event: &EventId,
    n: u64,
    total: u64,
    tasks: u64,
) -> anyhow::Result<f64> {
    if n == 0 || total == 0 {
        return Ok(0.0);
    }
    let left = Arc::new(AtomicU64::new(total));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks.max(1) {
        let (store, event, left) = (store.clone(), event.clone(), left.clone());
        handles.push(tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                let m = member(rand::random::<u64>() % n);
                store.status(&event, &m, Touch::Seen).await?;
            }
            Ok::<(), anteroom_store::StoreError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Waits until every change made so far is on disk, by one durable call
/// that changes nothing (releasing a member that never joined): the
/// embedded store persists position-poll touches with the next commit, so
/// without this the first admit batch after the poll phase would carry
/// (and the admit figure would time) the rewrite of every polled waiter's
/// row. Seconds it took.
async fn settle(store: &Arc<dyn QueueStore>, event: &EventId) -> anyhow::Result<f64> {
    let t = Instant::now();
    if store.release(event, &member(u64::MAX)).await? {
        bail!("the settling release found a member");
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Admits `total` members in steps of 1024 from 16 concurrent schedulers
/// (so their steps share group commits); members per second. Earlier
/// changes are settled first (see [`settle`]): the figure is admissions alone.
async fn admits(store: &Arc<dyn QueueStore>, event: &EventId, total: u64) -> anyhow::Result<f64> {
    settle(store, event).await?;
    let ttl = 3_600_000_000;
    let left = Arc::new(AtomicU64::new(total));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..16 {
        let (store, event, left) = (store.clone(), event.clone(), left.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let step = left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                        Some(l.saturating_sub(1024))
                    })
                    .map_or(0, |l| l.min(1024));
                if step == 0 {
                    return Ok::<(), anyhow::Error>(());
                }
                let req = AdmitRequest {
                    max: step,
                    max_active: u64::MAX,
                    nonces: (0..step).map(|_| rand::random()).collect(),
                    token_ttl_us: ttl,
                };
                let got = store.admit(&event, &req).await?.len() as u64;
                if got != step {
                    bail!("admit returned {got} of {step}");
                }
            }
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Every run's report, and the medians and spread over them.
pub struct Runs {
    pub runs: Vec<serde_json::Value>,
}

/// Runs the benchmark `args.runs` times (the restart child once).
pub async fn run_all(args: &EngineArgs) -> anyhow::Result<Runs> {
    let n = if args.reopen.is_some() {
        1
    } else {
        args.runs.max(1)
    };
    let mut runs = Vec::new();
    for i in 0..n {
        let report = run(args).await?;
        if n > 1 && !args.json {
            eprintln!(
                "run {}/{n}: admits_per_s {:.0}, joins_per_s {:.0}",
                i + 1,
                report.report.admits_per_s,
                report.report.joins_per_s
            );
        }
        runs.push(serde_json::to_value(&report)?);
    }
    Ok(Runs { runs })
}

/// Numeric leaves of a report, keys joined with `.` (`sweep.sweep_s`).
fn numbers(v: &serde_json::Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, val) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                numbers(val, &key, out);
            }
        }
        serde_json::Value::Number(x) => {
            if let Some(x) = x.as_f64() {
                out.push((prefix.to_owned(), x));
            }
        }
        _ => {}
    }
}

/// (min, median, max); the median of an even count is the lower middle
/// one, a value some run really measured.
fn spread(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[0], xs[(xs.len() - 1) / 2], xs[xs.len() - 1])
}

/// Replaces every number of `v` by its median over the runs.
fn put_medians(
    v: &mut serde_json::Value,
    prefix: &str,
    medians: &std::collections::HashMap<String, f64>,
) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                put_medians(val, &key, medians);
            }
        }
        serde_json::Value::Number(_) => {
            if let Some(m) = medians
                .get(prefix)
                .and_then(|m| serde_json::Number::from_f64(*m))
            {
                *v = serde_json::Value::Number(m);
            }
        }
        _ => {}
    }
}

impl Runs {
    /// Per numeric key, in report order: (key, min, median, max).
    fn figures(&self) -> Vec<(String, f64, f64, f64)> {
        let mut first = Vec::new();
        numbers(&self.runs[0], "", &mut first);
        let all: Vec<Vec<(String, f64)>> = self
            .runs
            .iter()
            .map(|r| {
                let mut v = Vec::new();
                numbers(r, "", &mut v);
                v
            })
            .collect();
        first
            .iter()
            .map(|(key, _)| {
                let xs: Vec<f64> = all
                    .iter()
                    .filter_map(|r| r.iter().find(|(k, _)| k == key).map(|(_, x)| *x))
                    .collect();
                let (lo, mid, hi) = spread(xs);
                (key.clone(), lo, mid, hi)
            })
            .collect()
    }

    /// One JSON object: the first run's shape with every number replaced by
    /// its median over the runs (so the keys keep their meaning), `runs`,
    /// and `spread`: `{key: {min, median, max}}` for every number.
    pub fn to_json(&self) -> serde_json::Value {
        let figures = self.figures();
        let medians = figures.iter().map(|(k, _, m, _)| (k.clone(), *m)).collect();
        let mut out = self.runs[0].clone();
        put_medians(&mut out, "", &medians);
        if let Some(map) = out.as_object_mut() {
            map.insert("runs".into(), serde_json::json!(self.runs.len()));
            let spread: serde_json::Map<String, serde_json::Value> = figures
                .iter()
                .map(|(k, lo, mid, hi)| {
                    (
                        k.clone(),
                        serde_json::json!({ "min": lo, "median": mid, "max": hi }),
                    )
                })
                .collect();
            map.insert("spread".into(), serde_json::Value::Object(spread));
        }
        out
    }
}

/// Prints the runs as a table (min / median / max per figure) or as one
/// JSON object (see [`Runs::to_json`]). The restart child prints its one
/// report as it is, for the parent to read.
pub fn print(runs: &Runs, args: &EngineArgs) -> anyhow::Result<()> {
    if args.reopen.is_some() {
        println!("{}", serde_json::to_string(&runs.runs[0])?);
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string(&runs.to_json())?);
        return Ok(());
    }
    if let Some(store) = runs.runs[0].get("store") {
        println!("{:>36}  {store}, {} runs", "store", runs.runs.len());
    }
    println!(
        "{:>36}  {:>14}  {:>14}  {:>14}",
        "figure", "min", "median", "max"
    );
    for (k, lo, mid, hi) in runs.figures() {
        println!("{k:>36}  {lo:>14.3}  {mid:>14.3}  {hi:>14.3}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_the_spread_over_runs_and_json_keeps_keys() {
        let runs = Runs {
            runs: vec![
                serde_json::json!({"store": "embedded", "admits_per_s": 3.0, "sweep": {"sweep_s": 1.0}}),
                serde_json::json!({"store": "embedded", "admits_per_s": 1.0, "sweep": {"sweep_s": 5.0}}),
                serde_json::json!({"store": "embedded", "admits_per_s": 2.0, "sweep": {"sweep_s": 3.0}}),
            ],
        };
        let f = runs.figures();
        assert_eq!(f[0], ("admits_per_s".into(), 1.0, 2.0, 3.0));
        assert_eq!(f[1], ("sweep.sweep_s".into(), 1.0, 3.0, 5.0));
        let j = runs.to_json();
        assert_eq!(j["admits_per_s"], 2.0);
        assert_eq!(j["sweep"]["sweep_s"], 3.0);
        assert_eq!(j["store"], "embedded");
        assert_eq!(j["runs"], 3);
        assert_eq!(j["spread"]["admits_per_s"]["min"], 1.0);
        assert_eq!(j["spread"]["sweep.sweep_s"]["max"], 5.0);
    }
}
