//! The embedded store's side of `anteroom-sim engine`: joins, ranks (the
//! index alone, and the whole `status()` call), admits, then a restart in a
//! fresh child process, so its memory figure does not count what the
//! allocator kept from the first store.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anteroom_store::embedded::EmbeddedStore;
use anteroom_store::{EventId, ExpireRequest, QueueStore, Touch};
use anyhow::{Context, bail};

use super::{
    EngineArgs, EngineOutput, EngineReport, Histogram, SweepReport, admits, joins, member,
    open_embedded, p50_p99_max_us, polls, random_members, ranks, rss_bytes, settle,
};

const EVENT: &str = "bench";

pub(super) async fn run(args: &EngineArgs) -> anyhow::Result<EngineOutput> {
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().join("data"));
    let event = EventId::new(EVENT)?;
    let hist = Arc::new(Histogram::new());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (fsync_p50_ms, fsync_p99_ms) = fsync_latency(&dir)?;
    let baseline = rss_bytes();
    let embedded = open_embedded(&dir).await?;
    let store: Arc<dyn QueueStore> = Arc::new(embedded.clone());
    let (joins_per_s, n) = joins(&store, &event, args, &hist).await?;
    let after_joins = rss_bytes();
    let (rank_p50_us, rank_p99_us, rank_max_us) =
        index_ranks(&embedded, &event, n, args.rank_samples)?;
    let (status_p50_us, status_p99_us, _) = ranks(&store, &event, n, args.rank_samples).await?;
    let polls_per_s = polls(&store, &event, n, args.polls, args.tasks).await?;
    let poll_flush_s = settle(&store, &event).await?;
    let admitted = args.admits.min(n / 10);
    let admits_per_s = admits(&store, &event, admitted).await?;
    drop((store, embedded));
    let child = reopen_in_child(&dir)?;
    if child.waiters != n - admitted {
        bail!(
            "restart rebuilt {} waiters, expected {}",
            child.waiters,
            n - admitted
        );
    }
    let sweep = sweep_latency(&dir, &event, n).await?;
    Ok(EngineOutput {
        report: EngineReport {
            store: "embedded",
            waiters: n,
            joins_per_s,
            join_ack_p99_ms: hist.quantile_us(0.99) as f64 / 1000.0,
            rank_p50_us,
            rank_p99_us,
            admits_per_s,
            bytes_per_waiter: child.bytes_per_waiter,
            restart_s: child.restart_s,
            join_ack_p50_ms: hist.quantile_us(0.50) as f64 / 1000.0,
            join_tasks: args.tasks,
            bytes_per_waiter_after_joins: after_joins.saturating_sub(baseline) as f64
                / n.max(1) as f64,
            rank_max_us,
            polls_per_s,
            poll_flush_s,
            baseline_zadd_per_s: None,
        },
        status_p50_us: Some(status_p50_us),
        status_p99_us: Some(status_p99_us),
        fsync_p50_ms: Some(fsync_p50_ms),
        fsync_p99_ms: Some(fsync_p99_ms),
        sweep: Some(sweep),
    })
}

/// Polls `status` on random members back to back on its own thread until
/// told to stop; the latency of each poll in ns.
fn poller(
    store: &EmbeddedStore,
    event: &EventId,
    n: u64,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<Vec<u64>>> {
    let (store, event, stop) = (store.clone(), event.clone(), stop.clone());
    std::thread::spawn(move || {
        // With a timer: a call that meets an event's first start awaits it.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let mut ns = Vec::with_capacity(1 << 20);
        while !stop.load(Ordering::Relaxed) {
            let m = member(rand::random::<u64>() % n.max(1));
            let t0 = Instant::now();
            rt.block_on(store.status(&event, &m, Touch::Peek))?;
            ns.push(t0.elapsed().as_nanos() as u64);
        }
        Ok(ns)
    })
}

fn joined(h: std::thread::JoinHandle<anyhow::Result<Vec<u64>>>) -> anyhow::Result<Vec<u64>> {
    let ns = h
        .join()
        .map_err(|_| anyhow::anyhow!("the status poller panicked"))??;
    if ns.is_empty() {
        bail!("no status call ran");
    }
    Ok(ns)
}

/// Reopens the store and expires every waiter in one idle sweep while a
/// thread polls `status` back to back; the same poller for two seconds
/// before the sweep gives the box's own noise floor (a shared machine
/// preempts threads for milliseconds), so the two maxima can be compared.
async fn sweep_latency(dir: &Path, event: &EventId, n: u64) -> anyhow::Result<SweepReport> {
    let store = open_embedded(dir).await?;
    let waiters = store.queue_length(event).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let quiet = poller(&store, event, n, &stop);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut quiet = joined(quiet)?;
    let (_, quiet_p99, quiet_max) = p50_p99_max_us(&mut quiet);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = poller(&store, event, n, &stop);
    let t = Instant::now();
    let swept = store
        .expire(
            event,
            &ExpireRequest {
                waiting_seen_before_us: i64::MAX,
            },
        )
        .await?;
    let sweep_s = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut ns = joined(poller)?;
    if swept.idle_waiters != waiters {
        bail!(
            "the sweep expired {} of {waiters} waiters",
            swept.idle_waiters
        );
    }
    let (_, p99, max) = p50_p99_max_us(&mut ns);
    Ok(SweepReport {
        sweep_waiters: waiters,
        sweep_s,
        sweep_status_p99_us: p99,
        sweep_status_max_us: max,
        sweep_status_calls: ns.len() as u64,
        quiet_status_p99_us: quiet_p99,
        quiet_status_max_us: quiet_max,
    })
}

/// The disk's own durable-write latency in `dir`: 300 `fdatasync`s, each
/// after a 64 KiB write (about one group commit of joins); (p50, p99) in ms.
fn fsync_latency(dir: &Path) -> anyhow::Result<(f64, f64)> {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).context("creating the fsync probe file")?;
    let block = vec![0x5a_u8; 64 << 10];
    let mut ms = Vec::with_capacity(300);
    for i in 0..300u64 {
        f.seek(SeekFrom::Start((i % 16) * block.len() as u64))?;
        f.write_all(&block)?;
        let t = Instant::now();
        f.sync_data()?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(f);
    std::fs::remove_file(&path)?;
    ms.sort_by(f64::total_cmp);
    Ok((ms[ms.len() / 2], ms[ms.len() * 99 / 100]))
}

/// Times `samples` ranks of random waiters straight on the index, in
/// groups of 1000 under one lock; (p50, p99, max) in µs.
fn index_ranks(
    store: &EmbeddedStore,
    event: &EventId,
    n: u64,
    samples: u64,
) -> anyhow::Result<(f64, f64, f64)> {
    if n == 0 {
        return Ok((0.0, 0.0, 0.0));
    }
    let ids = random_members(n, samples);
    let mut ns = Vec::with_capacity(ids.len());
    for group in ids.chunks(1000) {
        let missing = store.with_queue(event, |q| {
            let mut missing = None;
            for m in group {
                let t0 = Instant::now();
                let rank = q.rank(m);
                ns.push(t0.elapsed().as_nanos() as u64);
                if rank.is_none() {
                    missing = Some(m.clone());
                }
            }
            missing
        })?;
        if let Some(m) = missing {
            bail!("{m} is not waiting");
        }
    }
    Ok(p50_p99_max_us(&mut ns))
}

/// What the child reports of the restart.
struct Restart {
    waiters: u64,
    restart_s: f64,
    bytes_per_waiter: f64,
}

fn reopen_in_child(dir: &Path) -> anyhow::Result<Restart> {
    let exe = std::env::current_exe().context("finding the benchmark binary")?;
    let out = Command::new(exe)
        .arg("engine")
        .arg("--json")
        .arg("--reopen")
        .arg(dir)
        .output()
        .context("running the restart child")?;
    if !out.status.success() {
        bail!(
            "restart child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading the restart child's report")?;
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    match (num("waiters"), num("restart_s"), num("bytes_per_waiter")) {
        (Some(w), Some(r), Some(b)) => Ok(Restart {
            waiters: w as u64,
            restart_s: r,
            bytes_per_waiter: b,
        }),
        _ => bail!("restart child's report lacks a figure: {v}"),
    }
}

/// The child's side: open the store, time it, and count the memory it took.
pub(super) async fn reopen(dir: &Path) -> anyhow::Result<EngineReport> {
    let event = EventId::new(EVENT)?;
    let baseline = rss_bytes();
    let t = Instant::now();
    let store = open_embedded(dir).await?;
    let restart_s = t.elapsed().as_secs_f64();
    let left = store.queue_length(&event).await?;
    let bytes = rss_bytes().saturating_sub(baseline);
    Ok(EngineReport {
        store: "embedded",
        waiters: left,
        joins_per_s: 0.0,
        join_ack_p99_ms: 0.0,
        rank_p50_us: 0.0,
        rank_p99_us: 0.0,
        admits_per_s: 0.0,
        bytes_per_waiter: bytes as f64 / left.max(1) as f64,
        restart_s,
        join_ack_p50_ms: 0.0,
        join_tasks: 0,
        bytes_per_waiter_after_joins: 0.0,
        rank_max_us: 0.0,
        polls_per_s: 0.0,
        poll_flush_s: 0.0,
        baseline_zadd_per_s: None,
    })
}
