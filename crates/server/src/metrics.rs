//! Prometheus metrics: one global recorder per process (tests start many
//! servers in one process, so it is installed once behind a `OnceLock`).
//!
//! Every name starts with `anteroom_`. Labels are event ids, operation names
//! and error codes: never a session id, token or IP address.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Latency buckets in seconds, from 100 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often the recorder's upkeep runs when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the recorder on first call; later calls return the same handle.
/// `None` if another recorder was installed by someone else first.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            spawn_upkeep(handle.clone());
            Some(handle)
        })
        .clone()
}

/// The exporter keeps every histogram sample until a scrape or an upkeep
/// folds it into the buckets: without a scraper memory would grow by a few
/// bytes per request, forever. A plain thread, not a task, because the
/// recorder is process-wide and outlives any one runtime (tests start many).
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                handle.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics upkeep thread not started; histograms grow until scraped");
    }
}

fn describe() {
    metrics::describe_gauge!(
        "anteroom_waiting",
        "Visitors waiting in the queue, per event"
    );
    metrics::describe_gauge!("anteroom_active", "Active sessions, per event");
    metrics::describe_gauge!(
        "anteroom_admitted_total",
        "Visitors admitted since the event started, per event"
    );
    metrics::describe_counter!("anteroom_joins_total", "Enter calls, per event");
    metrics::describe_counter!(
        "anteroom_store_unavailable_total",
        "Drain probes that found the event's store unavailable, per event and kind (refused, timed_out, cluster, busy, disk, stopped, other)"
    );
    // Drain mode.
    metrics::describe_gauge!(
        "anteroom_draining",
        "1 while the event drains on this node (queue store unreachable), else 0"
    );
    metrics::describe_counter!(
        "anteroom_drain_admissions_total",
        "Visitors this node admitted on its own while draining, per event"
    );
    metrics::describe_gauge!(
        "anteroom_drain_share",
        "Visitors this node may admit on its own should it lose the store (its reserve held in the store), per event"
    );
    metrics::describe_counter!("anteroom_polls_total", "Position polls, per event");
    metrics::describe_counter!(
        "anteroom_redeems_total",
        "Admission tokens redeemed, per event"
    );
    metrics::describe_counter!(
        "anteroom_rejections_total",
        "Requests answered with an error, by reason"
    );
    metrics::describe_counter!("anteroom_gate_requests_total", "Gate decisions, by outcome");
    metrics::describe_histogram!(
        "anteroom_proxy_latency_seconds",
        "Time to the origin's response head"
    );
    metrics::describe_histogram!(
        "anteroom_store_latency_seconds",
        "Queue store call latency, by operation"
    );
    metrics::describe_counter!(
        "anteroom_origin_commands_total",
        "Anteroom-Command values seen on origin responses, by command and outcome"
    );
    metrics::describe_gauge!("anteroom_streams_open", "Open push streams on this node");
    metrics::describe_counter!("anteroom_streams_opened_total", "Push streams opened");
    metrics::describe_counter!(
        "anteroom_streams_refused_total",
        "Push streams refused (past server.max_streams)"
    );
    metrics::describe_counter!(
        "anteroom_stream_messages_total",
        "Positions sent on push streams"
    );
    metrics::describe_counter!(
        "anteroom_stream_reads_total",
        "Store reads made by single push streams"
    );
    metrics::describe_counter!(
        "anteroom_stream_fanout_reads_total",
        "Store reads made by the per-event push fan-out (one per event per tick)"
    );
    metrics::describe_counter!(
        "anteroom_admission_news_total",
        "Admissions by other nodes heard through the shared store (each wakes the event's push fan-out)"
    );
}

/// Renders the current metrics in Prometheus text format.
pub fn render() -> String {
    install().map(|h| h.render()).unwrap_or_default()
}

/// Awaits a store call and records its latency under `op`.
pub async fn timed_store<T, F: Future<Output = T>>(op: &'static str, call: F) -> T {
    let started = Instant::now();
    let out = call.await;
    let seconds = started.elapsed().as_secs_f64();
    match hot_store_latency(op) {
        Some(h) => h.record(seconds),
        None => metrics::histogram!("anteroom_store_latency_seconds", "op" => op).record(seconds),
    }
    out
}

/// The store calls a request makes, whose histogram handles are looked up
/// once: building a labelled key and finding it in the registry on every
/// request costs more than recording the sample.
const HOT_STORE_OPS: [&str; 4] = ["status", "join", "redeem", "release"];

fn hot_store_latency(op: &str) -> Option<&'static Histogram> {
    static HOT: OnceLock<[Histogram; HOT_STORE_OPS.len()]> = OnceLock::new();
    let i = HOT_STORE_OPS.iter().position(|o| *o == op)?;
    let hot = HOT.get_or_init(|| {
        // The recorder must exist before a handle is taken, or the handle
        // would record into nothing.
        install();
        HOT_STORE_OPS.map(|o| metrics::histogram!("anteroom_store_latency_seconds", "op" => o))
    });
    hot.get(i)
}

/// The gate's outcomes counted on every gated request
/// (`anteroom_gate_requests_total{outcome}`), their handles looked up once.
const GATE_OUTCOMES: [&str; 3] = ["forwarded", "queued", "unprotected"];

/// Counts one gated request under `outcome`.
pub fn count_gate(outcome: &'static str) {
    static HOT: OnceLock<[Counter; GATE_OUTCOMES.len()]> = OnceLock::new();
    let hot = HOT.get_or_init(|| {
        install();
        GATE_OUTCOMES.map(|o| metrics::counter!("anteroom_gate_requests_total", "outcome" => o))
    });
    match GATE_OUTCOMES.iter().position(|o| *o == outcome) {
        Some(i) => hot[i].increment(1),
        None => {
            metrics::counter!("anteroom_gate_requests_total", "outcome" => outcome).increment(1)
        }
    }
}

/// The proxy's latency to the origin's answer head, its handle looked up once.
pub fn proxy_latency() -> &'static Histogram {
    static HOT: OnceLock<Histogram> = OnceLock::new();
    HOT.get_or_init(|| {
        install();
        metrics::histogram!("anteroom_proxy_latency_seconds")
    })
}

/// One event's request counters, registered when the event is built so the
/// request path only increments them.
#[derive(Clone)]
pub struct EventCounters {
    pub polls: Counter,
    pub joins: Counter,
    pub redeems: Counter,
}

impl EventCounters {
    pub fn new(event: &str) -> Self {
        // The recorder must exist before a handle is taken, or the handle
        // would count into nothing (tests build states without `run`).
        install();
        let label = event.to_owned();
        Self {
            polls: metrics::counter!("anteroom_polls_total", "event" => label.clone()),
            joins: metrics::counter!("anteroom_joins_total", "event" => label.clone()),
            redeems: metrics::counter!("anteroom_redeems_total", "event" => label),
        }
    }
}

impl std::fmt::Debug for EventCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCounters").finish_non_exhaustive()
    }
}
