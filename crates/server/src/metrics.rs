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
    metrics::describe_gauge!(
        "anteroom_stored_event_refused",
        "1 while this node refuses to run the event's table as stored through the admin API (another of its events protects that path, or the table does not validate here, e.g. a key file missing on this node); 0 once it runs it or the table is gone"
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
        "anteroom_admission_tick_seconds",
        "Admission ticks this node won, from the claim to the last store call, by event"
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
        "Push streams refused (past server.max_streams or the address's server.max_streams_per_address)"
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
    STORE_LATENCY.record(op, started.elapsed().as_secs_f64());
    out
}

/// A metric with one label, whose values on the request path are known: the
/// handle of each is looked up once. Building a labelled key and finding it
/// in the recorder's registry costs more than counting or recording the
/// sample, on every request. A value not in the list still counts, the slow
/// way.
pub struct Labelled<H: 'static, const N: usize> {
    name: &'static str,
    label: &'static str,
    values: [&'static str; N],
    handles: OnceLock<[H; N]>,
}

/// A metric handle that can be registered under one label.
pub trait Register: Sized + 'static {
    fn register(name: &'static str, label: &'static str, value: &'static str) -> Self;
}

impl Register for Counter {
    fn register(name: &'static str, label: &'static str, value: &'static str) -> Self {
        metrics::counter!(name, label => value)
    }
}

impl Register for Histogram {
    fn register(name: &'static str, label: &'static str, value: &'static str) -> Self {
        metrics::histogram!(name, label => value)
    }
}

impl<H: Register, const N: usize> Labelled<H, N> {
    pub const fn new(name: &'static str, label: &'static str, values: [&'static str; N]) -> Self {
        Self {
            name,
            label,
            values,
            handles: OnceLock::new(),
        }
    }

    /// Runs `f` on the handle of `value`: the one taken once for a listed
    /// value, or one registered now for any other.
    fn with(&self, value: &'static str, f: impl FnOnce(&H)) {
        let handles = self.handles.get_or_init(|| {
            // The recorder must exist before a handle is taken, or the
            // handle would count into nothing.
            install();
            self.values.map(|v| H::register(self.name, self.label, v))
        });
        match self.values.iter().position(|v| *v == value) {
            Some(i) => f(&handles[i]),
            None => f(&H::register(self.name, self.label, value)),
        }
    }
}

impl<const N: usize> Labelled<Counter, N> {
    pub fn increment(&self, value: &'static str, by: u64) {
        self.with(value, |c| c.increment(by));
    }
}

impl<const N: usize> Labelled<Histogram, N> {
    pub fn record(&self, value: &'static str, sample: f64) {
        self.with(value, |h| h.record(sample));
    }
}

/// Every store call [`timed_store`] times.
static STORE_LATENCY: Labelled<Histogram, 12> = Labelled::new(
    "anteroom_store_latency_seconds",
    "op",
    [
        "status",
        "join",
        "redeem",
        "release",
        "now",
        "admit",
        "claim_tick",
        "stream_tick",
        "stats",
        "hold_share",
        "admin_state",
        "batch_owed",
    ],
);

/// `anteroom_gate_requests_total{outcome}`: counted on every gated request.
static GATE_OUTCOMES: Labelled<Counter, 3> = Labelled::new(
    "anteroom_gate_requests_total",
    "outcome",
    ["forwarded", "queued", "unprotected"],
);

/// Counts one gated request under `outcome`.
pub fn count_gate(outcome: &'static str) {
    GATE_OUTCOMES.increment(outcome, 1);
}

/// `anteroom_rejections_total{reason}` counted by the gate and the proxy: a
/// waiting crowd is turned away at the gate on every page it asks for.
/// (`error`, below this module, counts the API's refusals itself.)
pub static REJECTIONS: Labelled<Counter, 2> = Labelled::new(
    "anteroom_rejections_total",
    "reason",
    ["queued", "upgrade_not_supported"],
);

/// `anteroom_pass_checks_total{result}`: passes the gate checked, found in
/// its event loop's memo (`remembered`) or decoded and MAC-checked
/// (`opened`), added in batches by each thread (`passes::check`).
pub static PASS_CHECKS: Labelled<Counter, 2> = Labelled::new(
    "anteroom_pass_checks_total",
    "result",
    ["remembered", "opened"],
);

/// `anteroom_bot_risk_total{level}`: one per join.
pub static BOT_RISK: Labelled<Counter, 3> = Labelled::new(
    "anteroom_bot_risk_total",
    "level",
    ["low", "medium", "high"],
);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labelled_counter_counts_listed_and_unlisted_values() {
        static COUNTS: Labelled<Counter, 2> =
            Labelled::new("anteroom_test_labelled_total", "kind", ["a", "b"]);
        COUNTS.increment("a", 2);
        COUNTS.increment("unlisted", 1);
        COUNTS.increment("a", 1);
        let text = render();
        assert!(
            text.contains("anteroom_test_labelled_total{kind=\"a\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("anteroom_test_labelled_total{kind=\"unlisted\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("anteroom_test_labelled_total{kind=\"b\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_timed_store_call_is_recorded_under_its_operation() {
        let value = timed_store("now", async { 7 }).await;
        assert_eq!(value, 7);
        timed_store("unlisted_op", async {}).await;
        let text = render();
        for op in ["now", "unlisted_op"] {
            let count = format!("anteroom_store_latency_seconds_count{{op=\"{op}\"}}");
            assert!(text.contains(&count), "{op} not recorded:\n{text}");
        }
    }
}
