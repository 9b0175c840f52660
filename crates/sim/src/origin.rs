//! The instrumented origin: a stand-in backend that records how many requests
//! it serves at once, so the crowd can check that the gate never lets more
//! visitors through than the event's `max_active`.
//!
//! Every path answers `200` after the latency model's delay, except
//! `/health` (`{"concurrency": N}`, the capacity signal Anteroom can poll),
//! `GET /__sim/stats` (an [`OriginStats`] snapshot) and `POST /__sim/reset`.
//! Those three are not counted, so polling them does not disturb the figures.

mod latency;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{
    Json, Router,
    extract::{Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

pub use latency::LatencyModel;

/// `anteroom-sim origin`: serve the instrumented origin until Ctrl-C.
#[derive(Debug, clap::Args)]
pub struct OriginArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// `fixed:20ms` or `knee:20ms,200,5ms` (base, knee, extra per request
    /// above the knee), optionally ending in `,fail=N` (503 above N in flight).
    #[arg(long, default_value = "fixed:20ms")]
    pub latency: LatencyModel,
}

/// Runs `anteroom-sim origin`.
pub async fn run(args: OriginArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    let handle = serve_origin(listener, args.latency).await?;
    println!(
        "origin listening on http://{} (stats: http://{}/__sim/stats)",
        handle.addr, handle.addr
    );
    tokio::signal::ctrl_c().await?;
    let stats = handle.stats();
    handle.shutdown().await;
    println!("{}", serde_json::to_string(&stats)?);
    Ok(())
}

/// What the origin saw. Serialised as the body of `GET /__sim/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginStats {
    /// Requests in flight now.
    pub concurrency: u64,
    /// The most requests ever in flight at once.
    pub max_concurrency: u64,
    /// Requests served (health and stats excluded).
    pub requests: u64,
    /// Of those, requests that came through Anteroom (carrying `X-Anteroom-Event`).
    pub gated_requests: u64,
    /// Requests answered `503` by the failure model.
    pub failed_requests: u64,
}

#[derive(Default)]
struct Counters {
    concurrency: AtomicU64,
    max_concurrency: AtomicU64,
    requests: AtomicU64,
    gated_requests: AtomicU64,
    failed_requests: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> OriginStats {
        OriginStats {
            concurrency: self.concurrency.load(Ordering::Relaxed),
            max_concurrency: self.max_concurrency.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            gated_requests: self.gated_requests.load(Ordering::Relaxed),
            failed_requests: self.failed_requests.load(Ordering::Relaxed),
        }
    }

    fn reset(&self) {
        // Concurrency is live state, not history: keep it.
        let now = self.concurrency.load(Ordering::Relaxed);
        self.max_concurrency.store(now, Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        self.gated_requests.store(0, Ordering::Relaxed);
        self.failed_requests.store(0, Ordering::Relaxed);
    }
}

/// A running origin: its address, live statistics, and a way to stop it.
pub struct OriginHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    counters: Arc<Counters>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl OriginHandle {
    /// A snapshot of what the origin saw so far.
    pub fn stats(&self) -> OriginStats {
        self.counters.snapshot()
    }

    /// A cheap clonable reader of the statistics, for samplers.
    pub fn stats_reader(&self) -> StatsReader {
        StatsReader(self.counters.clone())
    }

    /// Forgets the maximum and the counts (not the requests in flight).
    pub fn reset(&self) {
        self.counters.reset();
    }

    /// Stops accepting, lets requests in flight finish, and waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Reads an embedded origin's statistics from another task.
#[derive(Clone)]
pub struct StatsReader(Arc<Counters>);

impl StatsReader {
    /// A snapshot of what the origin saw so far.
    pub fn stats(&self) -> OriginStats {
        self.0.snapshot()
    }
}

#[derive(Clone)]
struct AppState {
    counters: Arc<Counters>,
    model: LatencyModel,
}

/// Serves the instrumented origin on `listener` until the handle is shut down.
pub async fn serve_origin(
    listener: TcpListener,
    model: LatencyModel,
) -> std::io::Result<OriginHandle> {
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let state = AppState {
        counters: counters.clone(),
        model,
    };
    let app = Router::new()
        .route("/health", get(health))
        .route("/__sim/stats", get(stats))
        .route("/__sim/reset", post(reset))
        .fallback(serve)
        .with_state(state);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = served.await {
            tracing::warn!(error = %e, "origin stopped with an error");
        }
    });
    Ok(OriginHandle {
        addr,
        counters,
        stop,
        task,
    })
}

async fn health(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "concurrency": s.counters.concurrency.load(Ordering::Relaxed) }))
}

async fn stats(State(s): State<AppState>) -> Json<OriginStats> {
    Json(s.counters.snapshot())
}

async fn reset(State(s): State<AppState>) -> StatusCode {
    s.counters.reset();
    StatusCode::NO_CONTENT
}

/// Decrements the in-flight count however the request ends, including when
/// the client hangs up and the handler future is dropped mid-sleep.
struct InFlight<'a>(&'a Counters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.concurrency.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(State(s): State<AppState>, req: Request) -> Response {
    let c = &s.counters;
    let now = c.concurrency.fetch_add(1, Ordering::Relaxed) + 1;
    let _in_flight = InFlight(c);
    c.max_concurrency.fetch_max(now, Ordering::Relaxed);
    c.requests.fetch_add(1, Ordering::Relaxed);
    if req.headers().contains_key("x-anteroom-event") {
        c.gated_requests.fetch_add(1, Ordering::Relaxed);
    }
    if s.model.fails(now) {
        c.failed_requests.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::SERVICE_UNAVAILABLE, "origin overloaded\n").into_response();
    }
    let delay = s.model.latency(now);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    (StatusCode::OK, "ok\n").into_response()
}
