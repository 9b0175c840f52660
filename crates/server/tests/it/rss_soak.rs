//! Memory stays flat under sustained load when nobody scrapes `/metrics`:
//! the real binary answers tens of thousands of position polls and proxied
//! requests on kept-alive connections, and its resident set (from
//! `/proc/PID/status`) may not grow with the request count. This is the
//! suite's short guard against a per-request leak of a retained buffer or
//! entry; the exporter's own leak (histogram samples kept until a scrape,
//! about 20 bytes per request before its upkeep thread) is too small to
//! see in the requests a debug build drives in 30 s, and is measured over
//! millions of requests with the release binary by `scripts/soak-rss`
//! (docs/benchmarks.md).

use crate::support::config::{ConfigBuilder, Event};
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::raw::{connect, head};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const EVENT: &str = "tickets";
/// Kept-alive client connections, each alternating a poll and a proxied
/// request.
const CONNECTIONS: usize = 8;
/// Requests written at once on a connection before their answers are read.
const PIPELINE: usize = 16;
/// Load before the first sample: allocator arenas, connection buffers, the
/// store's caches and one full cycle of the exporter's buffering (its upkeep
/// runs every 5 s) reach their working size.
const WARM_UP: Duration = Duration::from_secs(7);
/// Load while sampling; spans several upkeep cycles.
const MEASURE: Duration = Duration::from_secs(18);
/// Each end of the measured window: the highest RSS inside it counts, so
/// that where in an upkeep cycle a sample falls does not matter.
const EDGE: Duration = Duration::from_secs(5);
/// How much RSS may grow in the window: [`NOISE`] plus this many bytes per
/// request. With nothing leaking, the allocator's working set still moves
/// by up to half of [`NOISE`] either way over a debug build's window (the
/// measured movement is in docs/benchmarks.md, "Memory under sustained
/// load"). Twice that movement plus 100 bytes per request fails a leak of
/// a buffer or entry per request (several hundred bytes each) and never
/// the noise.
const MAX_BYTES_PER_REQUEST: f64 = 100.0;
const NOISE: f64 = 4.0 * 1024.0 * 1024.0;
/// Fewer requests than this in the window measure nothing.
const MIN_REQUESTS: u64 = 5_000;

fn config(origin: &str, dir: &std::path::Path) -> String {
    ConfigBuilder::new()
        .process()
        .embedded(&dir.join("data"))
        .no_limits()
        .event(
            Event::new(EVENT, origin)
                .max_active(100)
                .token_ttl("10m")
                .continuous(6000)
                .challenge_off(),
        )
        .toml()
}

/// A connection whose answers are read in order, bytes of the next one kept.
struct Pipelined {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Pipelined {
    /// The next answer's status and body (every answer here has a
    /// `content-length`).
    async fn next(&mut self) -> (u16, String) {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while self.buf.len() < end + 4 + len {
                    self.fill().await;
                }
                let body = String::from_utf8_lossy(&self.buf[end + 4..end + 4 + len]).into_owned();
                self.buf.drain(..end + 4 + len);
                return (status, body);
            }
            self.fill().await;
        }
    }

    async fn fill(&mut self) {
        let n = self.s.read_buf(&mut self.buf).await.unwrap();
        assert!(n > 0, "the server closed a kept-alive connection");
    }
}

/// `VmRSS` of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_stays_flat_under_polls_and_proxied_requests_without_a_scraper() {
    let test_started = Instant::now();
    // An origin in this process: its memory is not the node's.
    let app = axum::Router::new().fallback(|| async { "origin" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let node = Node::start(&config(&origin, dir.path()), dir.clone()).await;
    let pid = node.pid().unwrap();
    let addr = node.public;

    let mut visitor = Visitor::default();
    visitor.enter(&node, EVENT).await;
    visitor
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let cookie = visitor
        .cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let poll = head(
        addr,
        &format!("GET /api/queue/position?eventId={EVENT} HTTP/1.1"),
    ) + &format!("Cookie: {cookie}\r\n\r\n");
    let gate =
        head(addr, &format!("GET /{EVENT}/page HTTP/1.1")) + &format!("Cookie: {cookie}\r\n\r\n");

    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (requests, stop) = (requests.clone(), stop.clone());
        let (poll, gate) = (poll.clone(), gate.clone());
        load.spawn(async move {
            let mut conn = Pipelined {
                s: connect(addr).await,
                buf: Vec::with_capacity(64 * 1024),
            };
            // Pipelined batches: the server's cost per request is the same,
            // the syscalls on both sides far fewer, so a debug build on two
            // shared cores gets through several times more requests.
            let batch = (poll.clone() + &gate).repeat(PIPELINE / 2);
            while !stop.load(Ordering::Relaxed) {
                conn.s.write_all(batch.as_bytes()).await.unwrap();
                for i in 0..PIPELINE {
                    let (status, body) = conn.next().await;
                    let what = if i % 2 == 0 { "poll" } else { "gate" };
                    assert_eq!(status, 200, "{what}: {body}");
                }
                requests.fetch_add(PIPELINE as u64, Ordering::Relaxed);
            }
        });
    }

    tokio::time::sleep(WARM_UP).await;
    let warm_requests = requests.load(Ordering::Relaxed);
    let warm_rss = rss(pid);
    // (elapsed since the measure began, requests, rss)
    let mut samples = Vec::new();
    let measure_started = Instant::now();
    while measure_started.elapsed() < MEASURE {
        samples.push((
            measure_started.elapsed(),
            requests.load(Ordering::Relaxed),
            rss(pid),
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::SeqCst);
    while let Some(r) = load.join_next().await {
        r.unwrap();
    }

    let window = |from: Duration, to: Duration| {
        let inside: Vec<_> = samples
            .iter()
            .filter(|(t, _, _)| *t >= from && *t < to)
            .collect();
        let max_rss = inside.iter().map(|s| s.2).max().unwrap();
        let mid_requests = inside[inside.len() / 2].1;
        (max_rss, mid_requests)
    };
    let (first_rss, first_requests) = window(Duration::ZERO, EDGE);
    let (last_rss, last_requests) = window(MEASURE - EDGE, MEASURE);
    let measured = last_requests - first_requests;
    let growth = last_rss as f64 - first_rss as f64;
    let per_request = growth / measured as f64;
    let total = requests.load(Ordering::Relaxed);
    let series: Vec<String> = samples
        .iter()
        .step_by(5)
        .map(|(t, n, r)| format!("{:.0}s {n} {:.2}", t.as_secs_f64(), *r as f64 / 1048576.0))
        .collect();
    eprintln!("RSS (MiB) by time and requests: {}", series.join(", "));
    eprintln!(
        "{total} requests ({warm_requests} to warm up), {:.0} req/s; RSS {:.1} MiB after the \
         warm-up, {:.1} MiB at most early in the window, {:.1} MiB at most at its end: \
         {per_request:.2} bytes per request over {measured} requests; no scrape; {:?} in all",
        (total - warm_requests) as f64 / MEASURE.as_secs_f64(),
        warm_rss as f64 / 1048576.0,
        first_rss as f64 / 1048576.0,
        last_rss as f64 / 1048576.0,
        test_started.elapsed()
    );
    assert!(
        measured >= MIN_REQUESTS,
        "only {measured} requests measured in {MEASURE:?}: the box is too loaded to measure growth"
    );
    let allowed = NOISE + MAX_BYTES_PER_REQUEST * measured as f64;
    assert!(
        growth < allowed,
        "RSS grew {growth:.0} bytes over {measured} requests ({per_request:.2} per request; \
         allowed {allowed:.0}) with nobody scraping /metrics"
    );
}
