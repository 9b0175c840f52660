//! `anteroom-sim http`: the hot-path throughput benchmark. Position polls,
//! durable joins and admitted traffic through the gate, each measured beside
//! the same load against a baseline on the same box (nginx `return 200`, and
//! nginx `proxy_pass` for the gate), so the figures are ratios that travel
//! between machines rather than absolute numbers that do not.
//!
//! Both sides are driven by the same client in the same process, so client
//! cost weighs on both equally; on a 2-core box it still steals CPU from the
//! server, which is why docs/benchmarks.md also gives the wrk recipe.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use reqwest::{Client, Method, RequestBuilder};
use serde::Serialize;
use tokio::time::Instant;

use crate::crowd::{Cookies, QueuePosition};

/// `anteroom-sim http`.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Anteroom's public listener, e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    pub target: String,
    /// Event id (may be omitted when the server has exactly one event).
    #[arg(long)]
    pub event: Option<String>,
    /// Baseline URL answering `200` at once, e.g. nginx `return 200`.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Baseline for gate traffic, e.g. nginx `proxy_pass` to the same origin.
    #[arg(long)]
    pub baseline_proxy: Option<String>,
    /// The origin itself, to compare gated traffic with direct hits.
    #[arg(long)]
    pub origin: Option<String>,
    /// Protected path requested through the gate.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Seconds of load per figure.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// Concurrent connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One load run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Load {
    pub requests_per_second: f64,
    pub ok: u64,
    pub failed: u64,
}

/// One figure beside its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: &'static str,
    pub target: Load,
    pub baseline: Option<Load>,
    /// `target / baseline` requests per second.
    pub ratio: Option<f64>,
}

/// Runs `anteroom-sim http` and prints the figures.
pub async fn run(args: HttpArgs) -> anyhow::Result<()> {
    let figures = measure(&args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "{:<16} {:>12} {:>12} {:>7} {:>9}",
            "figure", "target/s", "baseline/s", "ratio", "failed"
        );
        for f in &figures {
            let base = f
                .baseline
                .map_or("-".to_owned(), |b| format!("{:.0}", b.requests_per_second));
            let ratio = f.ratio.map_or("-".to_owned(), |r| format!("{r:.2}"));
            println!(
                "{:<16} {:>12.0} {:>12} {:>7} {:>9}",
                f.name, f.target.requests_per_second, base, ratio, f.target.failed
            );
        }
    }
    Ok(())
}

/// Measures every figure in turn (never two loads at once).
pub async fn measure(args: &HttpArgs) -> anyhow::Result<Vec<Figure>> {
    let client = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(args.connections)
        .timeout(Duration::from_secs(10))
        .build()?;
    let bench = Bench {
        client,
        duration: Duration::from_secs(args.duration),
        connections: args.connections.max(1),
    };
    let base = args.target.trim_end_matches('/').to_owned();
    let query = args
        .event
        .as_ref()
        .map_or(String::new(), |e| format!("?eventId={e}"));
    let mut figures = Vec::new();

    // Admitted traffic first, while the queue is short enough to be admitted
    // at once: one pass, then the gate verifies it on every request.
    let pass = admitted(&bench.client, &base, &query).await?;
    let url = format!("{base}{}", args.path);
    let target = bench
        .load(|c, _, _| c.get(&url).header("cookie", &pass))
        .await;
    let proxy = args.baseline_proxy.as_deref().or(args.baseline.as_deref());
    figures.push(bench.beside("gate", target, proxy, Method::GET).await);
    if let Some(origin) = &args.origin {
        let url = format!("{}{}", origin.trim_end_matches('/'), args.path);
        let direct = bench.load(|c, _, _| c.get(&url)).await;
        let ratio = ratio(target, direct);
        figures.push(Figure {
            name: "gate_vs_origin",
            target,
            baseline: Some(direct),
            ratio,
        });
    }

    // Position polls: each connection polls as its own queued visitor.
    let mut sessions = Vec::with_capacity(bench.connections);
    for i in 0..bench.connections {
        let (cookies, _) = enter(&bench.client, &base, &query, i as u64).await?;
        sessions.push(cookies.header().context("enter set no session cookie")?);
    }
    let sessions = Arc::new(sessions);
    let url = format!("{base}/api/queue/position{query}");
    let target = bench
        .load(|c, conn, _| {
            human(c.get(&url))
                .header("cookie", &sessions[conn])
                .header("accept", "application/json")
        })
        .await;
    figures.push(
        bench
            .beside(
                "position_polls",
                target,
                args.baseline.as_deref(),
                Method::GET,
            )
            .await,
    );

    // Joins: a fresh visitor per request, so every one is a durable insert.
    let url = format!("{base}/api/queue/enter{query}");
    let target = bench
        .load(|c, _, n| human(c.post(&url)).header("x-forwarded-for", bench_ip(n)))
        .await;
    figures.push(
        bench
            .beside("joins", target, args.baseline.as_deref(), Method::POST)
            .await,
    );

    Ok(figures)
}

struct Bench {
    client: Client,
    duration: Duration,
    connections: usize,
}

impl Bench {
    /// `connections` loops sending `make(client, connection, request number)`
    /// back to back for `duration`.
    async fn load<F>(&self, make: F) -> Load
    where
        F: Fn(&Client, usize, u64) -> RequestBuilder + Send + Sync,
    {
        let (ok, failed, issued) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let start = Instant::now();
        let deadline = start + self.duration;
        let loops = (0..self.connections).map(|conn| {
            let (make, ok, failed, issued) = (&make, &ok, &failed, &issued);
            async move {
                while Instant::now() < deadline {
                    let n = issued.fetch_add(1, Ordering::Relaxed);
                    let answered = make(&self.client, conn, n).send().await;
                    let good = match answered {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    let counter = if good { ok } else { failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        futures::future::join_all(loops).await;
        let secs = start.elapsed().as_secs_f64();
        let ok = ok.load(Ordering::Relaxed);
        Load {
            requests_per_second: ok as f64 / secs,
            ok,
            failed: failed.load(Ordering::Relaxed),
        }
    }

    /// The same load against `baseline` (requests of `method`, as the
    /// target's were), and the ratio.
    async fn beside(
        &self,
        name: &'static str,
        target: Load,
        baseline: Option<&str>,
        method: Method,
    ) -> Figure {
        let baseline = match baseline {
            Some(url) => Some(self.load(|c, _, _| c.request(method.clone(), url)).await),
            None => None,
        };
        Figure {
            name,
            target,
            ratio: baseline.and_then(|b| ratio(target, b)),
            baseline,
        }
    }
}

fn ratio(target: Load, baseline: Load) -> Option<f64> {
    (baseline.requests_per_second > 0.0)
        .then(|| target.requests_per_second / baseline.requests_per_second)
}

/// A distinct benchmarking-range (RFC 2544) address per request, only ever a
/// header: per-IP limits see distinct clients when loopback is a trusted proxy.
fn bench_ip(n: u64) -> String {
    format!("198.18.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

/// Browser-like headers, so the bot rules do not challenge the benchmark.
fn human(req: RequestBuilder) -> RequestBuilder {
    req.header("user-agent", "Mozilla/5.0 (X11; Linux x86_64) anteroom-sim")
        .header("accept-language", "en")
}

/// Joins as a new visitor.
async fn enter(
    client: &Client,
    base: &str,
    query: &str,
    n: u64,
) -> anyhow::Result<(Cookies, QueuePosition)> {
    let resp = human(client.post(format!("{base}/api/queue/enter{query}")))
        .header("x-forwarded-for", bench_ip(n))
        .send()
        .await?;
    let mut cookies = Cookies::default();
    cookies.absorb(resp.headers());
    let status = resp.status();
    let body = resp.bytes().await?;
    if !status.is_success() {
        bail!(
            "enter answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok((cookies, serde_json::from_slice(&body)?))
}

/// Joins, waits to be admitted (60 s at most), redeems; the `Cookie` header.
async fn admitted(client: &Client, base: &str, query: &str) -> anyhow::Result<String> {
    let (mut cookies, mut pos) = enter(client, base, query, 65_535).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while pos.status != "ADMITTED" {
        if Instant::now() > deadline {
            bail!("not admitted within 60 s (status {})", pos.status);
        }
        tokio::time::sleep(Duration::from_millis(
            pos.poll_after_ms.unwrap_or(500).min(1000),
        ))
        .await;
        let cookie = cookies.header().unwrap_or_default();
        let resp = client
            .get(format!("{base}/api/queue/position{query}"))
            .header("cookie", cookie)
            .send()
            .await?;
        cookies.absorb(resp.headers());
        pos = resp.json().await?;
    }
    let token = pos.token.context("ADMITTED without a token")?;
    let resp = client
        .post(format!("{base}/api/queue/redeem{query}"))
        .header("cookie", cookies.header().unwrap_or_default())
        .json(&serde_json::json!({ "token": token }))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("redeem answered {}", resp.status());
    }
    cookies.absorb(resp.headers());
    cookies.header().context("no cookies after redeem")
}

/// `anteroom-sim tokens`: admitted visitors for a redeem benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct TokensArgs {
    /// Anteroom's public listener, e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    pub target: String,
    /// Event id; it must admit `--count` visitors at once (a `max_active`
    /// and a batch at least that large).
    #[arg(long)]
    pub event: String,
    /// How many admitted visitors.
    #[arg(long)]
    pub count: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Written here: one `cookie<TAB>token` line per visitor, the session
    /// cookie the token is bound to and the token, unredeemed.
    #[arg(long)]
    pub out: std::path::PathBuf,
}

/// Joins `count` visitors, waits until each is admitted and writes its
/// session cookie and admission token, so a redeem benchmark can spend
/// each token once (a token is single use: a second redeem is refused).
pub async fn tokens(args: TokensArgs) -> anyhow::Result<()> {
    use futures::StreamExt;
    let client = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(args.connections)
        .timeout(Duration::from_secs(30))
        .build()?;
    let base = args.target.trim_end_matches('/').to_owned();
    let query = format!("?eventId={}", args.event);
    let joined: Vec<anyhow::Result<(String, Option<String>)>> =
        futures::stream::iter(0..args.count as u64)
            .map(|n| {
                let (client, base, query) = (&client, &base, &query);
                async move {
                    let (cookies, pos) = enter(client, base, query, n).await?;
                    let cookie = cookies.header().context("enter set no session cookie")?;
                    Ok((cookie, pos.token))
                }
            })
            .buffer_unordered(args.connections.max(1))
            .collect()
            .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut lines = String::new();
    let mut waiting = Vec::new();
    for j in joined {
        match j? {
            (cookie, Some(token)) => lines += &format!("{cookie}\t{token}\n"),
            (cookie, None) => waiting.push(cookie),
        }
    }
    while !waiting.is_empty() {
        if Instant::now() > deadline {
            bail!("{} visitors not admitted within 120 s", waiting.len());
        }
        let url = format!("{base}/api/queue/position{query}");
        let polled: Vec<anyhow::Result<(String, Option<String>)>> =
            futures::stream::iter(std::mem::take(&mut waiting))
                .map(|cookie| {
                    let (client, url) = (&client, &url);
                    async move {
                        let pos: QueuePosition = human(client.get(url))
                            .header("cookie", &cookie)
                            .send()
                            .await?
                            .json()
                            .await?;
                        Ok((cookie, pos.token))
                    }
                })
                .buffer_unordered(args.connections.max(1))
                .collect()
                .await;
        for p in polled {
            match p? {
                (cookie, Some(token)) => lines += &format!("{cookie}\t{token}\n"),
                (cookie, None) => waiting.push(cookie),
            }
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    std::fs::write(&args.out, lines).with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}
