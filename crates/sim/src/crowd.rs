//! `anteroom-sim crowd`: a flash crowd of virtual visitors against a real
//! Anteroom, judged by [`crate::report`].
//!
//! Visitors are not tasks: each is a small record in one array, advanced by
//! one scheduler ([`fleet`]) over a fixed pool of `--connections` HTTP/1.1
//! keep-alive connections, so a million-visitor crowd needs a few tens of
//! megabytes and a few hundred sockets. The report says how much CPU the
//! simulator itself used and how late its requests left against their
//! schedule, so a run tells whether the simulator or the server held it
//! back. A sampler records the timeline for `--plot` every 250 ms.

mod arrival;
mod conn;
mod fleet;
mod stream;
mod usage;
mod visitor;
mod wire;

pub use wire::{Cookies, QueuePosition};

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use hyper::{Uri, header::HeaderValue};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::time::Instant;

pub use arrival::{Arrival, schedule};
use fleet::{Config, Fleet, Live};

use crate::{
    origin::{LatencyModel, OriginStats, StatsReader, serve_origin},
    report::{self, Report, RunFacts, Sample, SimFacts},
};

/// `anteroom-sim crowd`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrowdArgs {
    /// Anteroom's public listener, e.g. `http://127.0.0.1:8080`; several
    /// nodes as a comma-separated list (`http://127.0.0.1:8080,http://127.0.0.1:8081`),
    /// the connections spread over them in turn and `Host` the first one's.
    #[arg(long)]
    pub target: String,
    /// PID of a server process (repeatable: one per node) whose peak RSS
    /// (`VmHWM`) the report gives as `server_peak_rss_bytes` (the largest).
    #[arg(long)]
    pub server_pid: Vec<u32>,
    /// Event id.
    #[arg(long)]
    pub event: String,
    /// Number of visitors.
    #[arg(long, default_value_t = 1000)]
    pub visitors: usize,
    #[arg(long, value_enum, default_value = "burst")]
    pub arrival: Arrival,
    /// Arrivals per second (ramp: the final rate; poisson: the mean).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Share of visitors that look like bots (bot user agent, no Accept-Language).
    #[arg(long, default_value_t = 0.0)]
    pub bots: f64,
    /// Share of admitted visitors that leave without releasing their slot.
    #[arg(long, default_value_t = 0.0)]
    pub abandon: f64,
    /// How long an admitted visitor browses the origin, in milliseconds:
    /// from its redeem answered to its release, four pages read at even
    /// steps, however long the origin takes to answer them.
    #[arg(long, default_value_t = 1000)]
    pub browse: u64,
    /// Path requested through the gate while browsing.
    #[arg(long, default_value = "/")]
    pub browse_path: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG timeline here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// `GET` URL of the origin's statistics (`anteroom-sim origin`'s `/__sim/stats`).
    #[arg(long)]
    pub origin_stats: Option<String>,
    /// Serve an instrumented origin here for the run (point the event's origin at it).
    #[arg(long)]
    pub origin_listen: Option<SocketAddr>,
    /// Latency model of the embedded origin.
    #[arg(long, default_value = "fixed:20ms")]
    pub origin_latency: LatencyModel,
    /// The event's `max_active`, to compare with the origin's concurrency.
    #[arg(long)]
    pub max_active: Option<u64>,
    /// Poll every this many milliseconds instead of honouring `pollAfterMs`.
    #[arg(long)]
    pub fixed_poll: Option<u64>,
    /// Keep-alive connections (sockets) the visitors share: the most
    /// requests in flight at once.
    #[arg(long, default_value_t = 512)]
    pub connections: usize,
    /// Visitors follow the push stream instead of polling, as the waiting
    /// page does, on a socket each: at most this many at once (0: everyone
    /// polls); a visitor opens one on its enter's answer while there are
    /// streams to spare, else once near the front (told to poll again within
    /// ~2 s). A stream the server refuses or ends sends its visitor back to
    /// polling.
    #[arg(long, default_value_t = 256)]
    pub streams: usize,
    /// Seconds after the first admission left out of `capacity_use`, to
    /// judge a policy that starts small (adaptive mode's slow start) on its
    /// steady state.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Stop the run after this many seconds, whatever is left.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Seed of the arrival times and the bot/abandon draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Where the origin's statistics come from.
#[derive(Clone)]
pub enum OriginSource {
    None,
    Url(String),
    Embedded(StatsReader),
}

impl OriginSource {
    async fn read(&self, client: &reqwest::Client) -> Option<OriginStats> {
        match self {
            OriginSource::None => None,
            OriginSource::Embedded(r) => Some(r.stats()),
            OriginSource::Url(url) => client.get(url).send().await.ok()?.json().await.ok(),
        }
    }
}

/// A finished run: the report and its timeline.
pub struct Outcome {
    pub report: Report,
    pub timeline: Vec<Sample>,
}

/// Runs `anteroom-sim crowd` and prints the report.
pub async fn run(args: CrowdArgs) -> anyhow::Result<()> {
    let mut embedded = None;
    let source = match (&args.origin_listen, &args.origin_stats) {
        (Some(addr), _) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let handle = serve_origin(listener, args.origin_latency).await?;
            eprintln!("embedded origin on http://{}", handle.addr);
            let reader = handle.stats_reader();
            embedded = Some(handle);
            OriginSource::Embedded(reader)
        }
        (None, Some(url)) => OriginSource::Url(url.clone()),
        (None, None) => OriginSource::None,
    };
    let outcome = simulate(&args, source).await?;
    if let Some(handle) = embedded {
        handle.shutdown().await;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, crate::plot::svg(&outcome.timeline, args.max_active))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome.report)?);
    } else {
        print!("{}", report::render_text(&outcome.report));
    }
    Ok(())
}

/// The target's socket address and `Host`, from `http://host:port`.
async fn target(url: &str) -> anyhow::Result<(std::net::SocketAddr, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("--target must be an http:// URL (the crowd speaks plain HTTP/1.1): {url}");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let with_port = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = tokio::net::lookup_host(&with_port)
        .await
        .with_context(|| format!("resolving {with_port}"))?
        .next()
        .with_context(|| format!("{with_port} has no address"))?;
    Ok((addr, authority.to_owned()))
}

/// Runs the crowd to completion (or `--timeout`) and judges it.
pub async fn simulate(args: &CrowdArgs, origin: OriginSource) -> anyhow::Result<Outcome> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut addrs = Vec::new();
    let mut host = None;
    for url in args
        .target
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        let (addr, authority) = target(url).await?;
        addrs.push(addr);
        host.get_or_insert(authority);
    }
    let Some(host) = host else {
        bail!("--target names no server");
    };
    let uri = |path: &str| -> anyhow::Result<Uri> {
        format!("{path}?eventId={}", args.event)
            .parse()
            .with_context(|| format!("event id {:?} in a URL", args.event))
    };
    let cfg = Config {
        addrs,
        host: HeaderValue::from_str(&host).context("target host")?,
        enter: uri("/api/queue/enter")?,
        position: uri("/api/queue/position")?,
        stream: uri("/api/queue/stream")?,
        streams: args.streams,
        redeem: uri("/api/queue/redeem")?,
        release: uri("/api/queue/release")?,
        browse: args.browse_path.parse().context("--browse-path")?,
        fixed_poll_us: args.fixed_poll.map(|ms| ms * 1000),
        browse_pause_us: args.browse * 1000 / 4,
        connections: args.connections.max(1),
        deadline_us: args.timeout.saturating_mul(1_000_000),
    };
    let load_start = usage::load_average();
    let rss_before = usage::rss_bytes();
    let cpu_before = usage::cpu_seconds();
    let mut rng = StdRng::seed_from_u64(args.seed);
    let arrivals: Vec<u64> = schedule(args.arrival, args.visitors, args.rate, &mut rng)
        .into_iter()
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .collect();
    let plans: Vec<u8> = (0..args.visitors)
        .map(|_| {
            let bot = rng.random_bool(args.bots.clamp(0.0, 1.0));
            let abandon = rng.random_bool(args.abandon.clamp(0.0, 1.0));
            (u8::from(bot) * visitor::BOT) | (u8::from(abandon) * visitor::ABANDON)
        })
        .collect();
    if args.visitors > u32::MAX as usize {
        bail!("at most {} visitors", u32::MAX);
    }
    let live = Arc::new(Live::default());
    let start = Instant::now();
    let (fleet, solved) = Fleet::new(cfg, start, live.clone(), &plans, arrivals, rng);
    drop(plans);
    let (stop_sampling, sampler) =
        spawn_sampler(live.clone(), start, origin.clone(), client.clone());
    // The scheduler gets a task of its own so it never waits behind the sampler.
    let mut finished = tokio::spawn(fleet.run(solved))
        .await
        .context("the crowd's scheduler panicked")?;
    let duration_s = start.elapsed().as_secs_f64();
    let cpu_s = match (cpu_before, usage::cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    let _ = stop_sampling.send(());
    let timeline = sampler.await.unwrap_or_default();
    let final_stats = origin.read(&client).await;
    let sampled_max = timeline.iter().filter_map(|s| s.origin_concurrency).max();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let rss_max = live.rss_max.load(std::sync::atomic::Ordering::Relaxed);
    let sim = SimFacts {
        cpu_s,
        cpu_share: cpu_s / duration_s.max(1e-9) / cores as f64,
        cores,
        scheduler_busy_share: finished.busy.as_secs_f64() / duration_s.max(1e-9),
        connections: args.connections.max(1),
        connects: finished.connects,
        stale_retries: finished.stale_retries,
        requests: finished.requests,
        rss_max_bytes: rss_max,
        bytes_per_visitor: rss_max.saturating_sub(rss_before) as f64 / args.visitors.max(1) as f64,
        load_start,
        load_end: usage::load_average(),
    };
    let server_peak_rss_bytes = args
        .server_pid
        .iter()
        .filter_map(|&pid| usage::peak_rss_bytes_of(pid))
        .max();
    let facts = RunFacts {
        warmup_us: args.warmup.saturating_mul(1_000_000),
        browse_us: args.browse.saturating_mul(1000),
        server_peak_rss_bytes,
        max_origin_concurrency: final_stats.map(|s| s.max_concurrency).or(sampled_max),
        max_active: args.max_active,
        max_active_observed: live.max_active.load(std::sync::atomic::Ordering::Relaxed),
        duration_s,
        sim,
        aligned: report::clock::align(&mut finished.records),
    };
    Ok(Outcome {
        report: report::build(&finished.records, &finished.tally, facts),
        timeline,
    })
}

/// Samples the live counters and the origin every 250 ms until told to stop.
fn spawn_sampler(
    live: Arc<Live>,
    start: Instant,
    origin: OriginSource,
    client: reqwest::Client,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<Sample>>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let (mut last_t, mut last_admitted) = (0.0, 0u64);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = &mut stopped => break,
            }
            let t_s = start.elapsed().as_secs_f64();
            live.rss_max.fetch_max(usage::rss_bytes(), Relaxed);
            let admitted = live.admitted.load(Relaxed);
            let dt = t_s - last_t;
            let admission_rate = if dt > 0.0 {
                (admitted - last_admitted) as f64 / dt
            } else {
                0.0
            };
            (last_t, last_admitted) = (t_s, admitted);
            samples.push(Sample {
                t_s,
                waiting: live.waiting.load(Relaxed),
                active: live.active.load(Relaxed),
                admission_rate,
                origin_concurrency: origin.read(&client).await.map(|s| s.concurrency),
            });
        }
        samples
    });
    (stop, task)
}
