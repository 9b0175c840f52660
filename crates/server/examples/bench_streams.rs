//! The client of `scripts/bench-streams`: holds N push streams open against
//! a running `anteroom serve` and measures what they cost the server
//! process (its RSS and CPU time from `/proc/PID`), so the client's own work
//! never counts.
//!
//! Steps: pause the event; join N visitors; open one stream each over
//! HTTP/2 cleartext (`--per-conn` streams per connection: one process may
//! not hold 50 000 sockets under this box's descriptor limit, and browsers
//! multiplex EventSource over HTTP/2 the same way); an idle window
//! (heartbeats and presence reads only); resume, and an update window
//! while admissions move every rank. Prints one JSON line.
//!
//! usage: bench_streams PUBLIC ADMIN TOKEN PID EVENT STREAMS [PER_CONN] [IDLE_SECS] [UPDATE_SECS]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

type Sender = http2::SendRequest<Empty<Bytes>>;

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    positions: AtomicU64,
    heartbeats: AtomicU64,
    admitted: AtomicU64,
    ended: AtomicU64,
}

async fn connect(addr: &str) -> Sender {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
}

fn request(
    method: Method,
    url: &str,
    cookie: Option<&str>,
    token: Option<&str>,
) -> Request<Empty<Bytes>> {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(c) = cookie {
        req = req.header("cookie", format!("anteroom_sid={c}"));
    }
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.body(Empty::new()).unwrap()
}

async fn admin(addr: &str, token: &str, method: Method, path: &str) -> (u16, Bytes) {
    let mut s = connect(addr).await;
    s.ready().await.unwrap();
    let res = s
        .send_request(request(
            method,
            &format!("http://{addr}{path}"),
            None,
            Some(token),
        ))
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

/// `(rss bytes, cpu seconds)` of the server process.
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on every Linux this runs on.
    (rss_kb * 1024, ticks as f64 / 100.0)
}

async fn metric(admin_addr: &str, token: &str, name: &str) -> f64 {
    let (_, body) = admin(admin_addr, token, Method::GET, "/metrics").await;
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Joins `n` visitors (no cookie: each enter makes a session); returns
/// their session ids.
async fn join(public: &str, event: &str, n: usize) -> Vec<String> {
    let conns = 16;
    let per = n.div_ceil(conns);
    let mut tasks = Vec::new();
    for c in 0..conns {
        let count = per.min(n.saturating_sub(c * per));
        let public = public.to_owned();
        let url = format!("http://{public}/api/queue/enter?eventId={event}");
        tasks.push(tokio::spawn(async move {
            let sender = connect(&public).await;
            let mut sids = Vec::with_capacity(count);
            let mut inflight = futures::stream::FuturesUnordered::new();
            use futures::StreamExt;
            for i in 0..count {
                let mut s = sender.clone();
                let url = url.clone();
                inflight.push(async move {
                    s.ready().await.unwrap();
                    let res = s
                        .send_request(request(Method::POST, &url, None, None))
                        .await
                        .unwrap();
                    assert_eq!(res.status(), 200, "enter refused");
                    let sid = res
                        .headers()
                        .get_all("set-cookie")
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .find_map(|v| v.strip_prefix("anteroom_sid="))
                        .map(|v| v.split(';').next().unwrap().to_owned())
                        .expect("no session cookie");
                    let _ = res.into_body().collect().await;
                    sid
                });
                if inflight.len() >= 32 || i + 1 == count {
                    while inflight.len() > if i + 1 == count { 0 } else { 16 } {
                        sids.push(inflight.next().await.unwrap());
                    }
                }
            }
            sids
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

async fn follow(mut sender: Sender, url: String, sid: String, counts: Arc<Counts>) {
    sender.ready().await.unwrap();
    let res = sender
        .send_request(request(Method::GET, &url, Some(&sid), None))
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "stream refused");
    let mut body = res.into_body();
    let mut first = true;
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let text = String::from_utf8_lossy(&data);
        let positions = text.matches("event: position").count() as u64;
        if positions > 0 && first {
            first = false;
            counts.opened.fetch_add(1, Ordering::Relaxed);
        }
        counts.positions.fetch_add(positions, Ordering::Relaxed);
        // The server writes each heartbeat as a frame of its own.
        if &data[..] == b":\n\n" {
            counts.heartbeats.fetch_add(1, Ordering::Relaxed);
        }
        if text.contains("\"status\":\"ADMITTED\"") {
            counts.admitted.fetch_add(1, Ordering::Relaxed);
        }
    }
    counts.ended.fetch_add(1, Ordering::Relaxed);
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (public, admin_addr, token) = (a[0].clone(), a[1].clone(), a[2].clone());
    let pid: u32 = a[3].parse().unwrap();
    let event = a[4].clone();
    let n: usize = a[5].parse().unwrap();
    let per_conn: usize = a.get(6).map_or(200, |v| v.parse().unwrap());
    let idle = Duration::from_secs(a.get(7).map_or(10, |v| v.parse().unwrap()));
    let update = Duration::from_secs(a.get(8).map_or(10, |v| v.parse().unwrap()));

    let (s, _) = admin(
        &admin_addr,
        &token,
        Method::POST,
        &format!("/admin/events/{event}/pause"),
    )
    .await;
    assert_eq!(s, 204, "pause");
    let joined_at = Instant::now();
    let sids = join(&public, &event, n).await;
    let join_secs = joined_at.elapsed().as_secs_f64();

    let (rss0, cpu0) = usage(pid);
    let counts = Arc::new(Counts::default());
    let url = format!("http://{public}/api/queue/stream?eventId={event}");
    let opening = Instant::now();
    for chunk in sids.chunks(per_conn) {
        let sender = connect(&public).await;
        for sid in chunk {
            tokio::spawn(follow(
                sender.clone(),
                url.clone(),
                sid.clone(),
                counts.clone(),
            ));
        }
    }
    while (counts.opened.load(Ordering::Relaxed) as usize) < n {
        assert!(
            opening.elapsed() < Duration::from_secs(600),
            "streams did not open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open_secs = opening.elapsed().as_secs_f64();
    // Let the allocator and the first hub ticks settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss1, cpu1) = usage(pid);

    let (hb0, pos0) = (
        counts.heartbeats.load(Ordering::Relaxed),
        counts.positions.load(Ordering::Relaxed),
    );
    let reads0 = metric(&admin_addr, &token, "anteroom_stream_reads_total").await;
    let fan0 = metric(&admin_addr, &token, "anteroom_stream_fanout_reads_total").await;
    tokio::time::sleep(idle).await;
    let (rss2, cpu2) = usage(pid);
    let idle_positions = counts.positions.load(Ordering::Relaxed) - pos0;
    let idle_heartbeats = counts.heartbeats.load(Ordering::Relaxed) - hb0;
    let reads1 = metric(&admin_addr, &token, "anteroom_stream_reads_total").await;
    let fan1 = metric(&admin_addr, &token, "anteroom_stream_fanout_reads_total").await;

    let (s, _) = admin(
        &admin_addr,
        &token,
        Method::POST,
        &format!("/admin/events/{event}/resume"),
    )
    .await;
    assert_eq!(s, 204, "resume");
    let pos1 = counts.positions.load(Ordering::Relaxed);
    tokio::time::sleep(update).await;
    let (rss3, cpu3) = usage(pid);
    let updates = counts.positions.load(Ordering::Relaxed) - pos1;
    let reads2 = metric(&admin_addr, &token, "anteroom_stream_reads_total").await;
    let fan2 = metric(&admin_addr, &token, "anteroom_stream_fanout_reads_total").await;

    let nf = n as f64;
    println!(
        "{}",
        serde_json::json!({
            "streams": n,
            "per_conn": per_conn,
            "join_secs": join_secs,
            "open_secs": open_secs,
            "rss_before_mib": rss0 as f64 / 1048576.0,
            "rss_open_mib": rss1 as f64 / 1048576.0,
            "rss_bytes_per_stream": (rss1 as f64 - rss0 as f64) / nf,
            "cpu_us_per_open": (cpu1 - cpu0) * 1e6 / nf,
            "idle_secs": idle.as_secs_f64(),
            "idle_cpu_share": (cpu2 - cpu1) / idle.as_secs_f64(),
            "idle_cpu_us_per_stream_s": (cpu2 - cpu1) * 1e6 / nf / idle.as_secs_f64(),
            "idle_positions": idle_positions,
            "idle_heartbeats": idle_heartbeats,
            "idle_stream_reads": reads1 - reads0,
            "idle_fanout_reads": fan1 - fan0,
            "update_secs": update.as_secs_f64(),
            "updates": updates,
            "admitted_told": counts.admitted.load(Ordering::Relaxed),
            "update_cpu_share": (cpu3 - cpu2) / update.as_secs_f64(),
            "cpu_us_per_update": if updates > 0 { (cpu3 - cpu2) * 1e6 / updates as f64 } else { 0.0 },
            "update_stream_reads": reads2 - reads1,
            "update_fanout_reads": fan2 - fan1,
            "rss_end_mib": rss3 as f64 / 1048576.0,
            "rss_idle_mib": rss2 as f64 / 1048576.0,
        })
    );
    std::process::exit(0);
}
