//! `anteroom-sim crowd`: a flash crowd of virtual visitors against a real
//! Anteroom, judged by [`crate::report`].
//!
//! Each visitor is a tokio task with its own cookies; all share one connection
//! pool whose requests in flight are bounded by `--connections`, so a 100k
//! crowd does not need 100k sockets. A sampler records the timeline for
//! `--plot` every 250 ms.

mod arrival;
mod visitor;
mod wire;

pub use wire::{Cookies, QueuePosition};

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{sync::Semaphore, time::Instant};

pub use arrival::{Arrival, schedule};
use visitor::{Live, Plan, Shared};

use crate::{
    origin::{LatencyModel, OriginStats, StatsReader, serve_origin},
    report::{self, Report, RunFacts, Sample, VisitorRecord},
};

/// `anteroom-sim crowd`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrowdArgs {
    /// Anteroom's public listener, e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    pub target: String,
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
    /// How long an admitted visitor browses the origin, in milliseconds.
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
    /// Most requests in flight at once (bounds open connections).
    #[arg(long, default_value_t = 512)]
    pub connections: usize,
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

/// Runs the crowd to completion (or `--timeout`) and judges it.
pub async fn simulate(args: &CrowdArgs, origin: OriginSource) -> anyhow::Result<Outcome> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(args.connections)
        .timeout(Duration::from_secs(30))
        .build()?;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        client: client.clone(),
        base: args.target.trim_end_matches('/').to_owned(),
        event: args.event.clone(),
        permits: Semaphore::new(args.connections.max(1)),
        start,
        fixed_poll: args.fixed_poll.map(Duration::from_millis),
        browse: Duration::from_millis(args.browse),
        browse_path: args.browse_path.clone(),
        live: Live::default(),
    });
    let mut rng = StdRng::seed_from_u64(args.seed);
    let arrivals = schedule(args.arrival, args.visitors, args.rate, &mut rng);
    let deadline = start + Duration::from_secs(args.timeout);

    let (stop_sampling, sampler) = spawn_sampler(shared.clone(), origin.clone(), client.clone());
    let mut tasks = Vec::with_capacity(args.visitors);
    for (i, at) in arrivals.into_iter().enumerate() {
        let plan = Plan {
            id: i as u64,
            bot: rng.random_bool(args.bots.clamp(0.0, 1.0)),
            abandon: rng.random_bool(args.abandon.clamp(0.0, 1.0)),
        };
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut rec = VisitorRecord::default();
            tokio::time::sleep_until(start + at).await;
            let lived =
                tokio::time::timeout_at(deadline, visitor::visit(&shared, plan, &mut rec)).await;
            if lived.is_err() {
                rec.errors.push("deadline".into());
            }
            rec
        }));
    }
    let mut records = Vec::with_capacity(tasks.len());
    for t in tasks {
        records.push(t.await.context("a visitor task panicked")?);
    }
    let duration_s = start.elapsed().as_secs_f64();
    let _ = stop_sampling.send(());
    let timeline = sampler.await.unwrap_or_default();
    let final_stats = origin.read(&client).await;
    let sampled_max = timeline.iter().filter_map(|s| s.origin_concurrency).max();
    let facts = RunFacts {
        max_origin_concurrency: final_stats.map(|s| s.max_concurrency).or(sampled_max),
        max_active: args.max_active,
        max_active_observed: shared
            .live
            .max_active
            .load(std::sync::atomic::Ordering::Relaxed),
        duration_s,
    };
    Ok(Outcome {
        report: report::build(&records, facts),
        timeline,
    })
}

/// Samples the live counters and the origin every 250 ms until told to stop.
fn spawn_sampler(
    shared: Arc<Shared>,
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
            let t_s = shared.start.elapsed().as_secs_f64();
            let admitted = shared.live.admitted.load(Relaxed);
            let dt = t_s - last_t;
            let admission_rate = if dt > 0.0 {
                (admitted - last_admitted) as f64 / dt
            } else {
                0.0
            };
            (last_t, last_admitted) = (t_s, admitted);
            samples.push(Sample {
                t_s,
                waiting: shared.live.waiting.load(Relaxed),
                active: shared.live.active.load(Relaxed),
                admission_rate,
                origin_concurrency: origin.read(&client).await.map(|s| s.concurrency),
            });
        }
        samples
    });
    (stop, task)
}
