//! The judge: turns what every visitor saw into the crowd report (fairness,
//! origin safety, ETA honesty, polling cost, latency, errors), as text or JSON.

pub mod stats;

use std::collections::BTreeMap;

use serde::Serialize;

use stats::{Observed, certain_inversions, kendall_tau, median, percentile};

/// Everything one visitor saw. Times are microseconds since the run started.
#[derive(Debug, Clone, Default)]
pub struct VisitorRecord {
    pub bot: bool,
    /// Whether the visitor arrived before the event opened (`NOT_OPEN`): such
    /// arrivals are shuffled on purpose, so fairness ignores them.
    pub pre_open: bool,
    /// When the enter that joined the queue was sent, and when its answer came.
    pub arrival: Option<(u64, u64)>,
    /// First non-null `estimatedWaitSeconds` and when it was received.
    pub first_eta: Option<(u64, f64)>,
    /// When the last request answered `WAITING` was sent.
    pub last_waiting_sent: Option<u64>,
    /// When the first answer saying `ADMITTED` (or `ACTIVE`) was received.
    pub admitted_seen: Option<u64>,
    pub redeemed: bool,
    pub released: bool,
    pub polls: u32,
    /// Proof-of-work challenges solved.
    pub challenges: u32,
    /// Request latencies in microseconds, per kind.
    pub enter_us: Vec<u64>,
    pub position_us: Vec<u64>,
    pub redeem_us: Vec<u64>,
    /// Error kinds met, e.g. `position_429` or `enter_timeout`.
    pub errors: Vec<String>,
}

/// One point of the timeline, sampled about every 250 ms.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// Visitors waiting in the queue (client-side count).
    pub waiting: u64,
    /// Visitors holding a pass and browsing.
    pub active: u64,
    /// Admissions per second since the previous sample.
    pub admission_rate: f64,
    /// Requests in flight at the origin, when known.
    pub origin_concurrency: Option<u64>,
}

/// p50 and p99 of one kind of request, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub count: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Latency {
    fn of(us: &[u64]) -> Self {
        let ms = |p| percentile(us, p).map(|v| v as f64 / 1000.0);
        Latency {
            count: us.len(),
            p50_ms: ms(50.0),
            p99_ms: ms(99.0),
        }
    }
}

/// The crowd report; its JSON form is the `--json` output.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub visitors: usize,
    pub admitted: usize,
    pub redeemed: usize,
    /// Pairs certainly admitted in the opposite order of their arrival after
    /// opening, counted within each class (humans, bots): placing high-risk
    /// visitors behind verified ones is policy, not unfairness.
    pub inversions: u64,
    /// Human/bot pairs admitted out of arrival order (policy, for information).
    pub inversions_cross_class: u64,
    /// Kendall τ between send order of the joins and first-seen admission order
    /// (client-side times, so poll timing lowers it a little even when fair).
    pub kendall_tau: Option<f64>,
    pub max_origin_concurrency: Option<u64>,
    /// The event's configured cap, when given with `--max-active`.
    pub max_active: Option<u64>,
    /// The most visitors seen browsing with a pass at once, client-side.
    pub max_active_observed: u64,
    pub eta_honest_share: Option<f64>,
    pub first_eta_to_wait_median: Option<f64>,
    pub polls_per_visitor: f64,
    pub challenges_solved: u64,
    pub errors: BTreeMap<String, u64>,
    pub bot_admitted_share: Option<f64>,
    pub human_admitted_share: Option<f64>,
    pub enter_latency: Latency,
    pub position_latency: Latency,
    pub redeem_latency: Latency,
    pub duration_s: f64,
}

/// Inputs to the report that do not come from visitors.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFacts {
    pub max_origin_concurrency: Option<u64>,
    pub max_active: Option<u64>,
    pub max_active_observed: u64,
    pub duration_s: f64,
}

/// Judges a finished run.
pub fn build(records: &[VisitorRecord], facts: RunFacts) -> Report {
    let admitted: Vec<&VisitorRecord> = records
        .iter()
        .filter(|r| r.admitted_seen.is_some())
        .collect();
    let fair: Vec<(bool, Observed)> = admitted
        .iter()
        .filter(|r| !r.pre_open)
        .filter_map(|r| Some((r.bot, observed(r)?)))
        .collect();
    let class = |bot: bool| -> Vec<Observed> {
        fair.iter()
            .filter(|(b, _)| *b == bot)
            .map(|(_, o)| *o)
            .collect()
    };
    let all: Vec<Observed> = fair.iter().map(|(_, o)| *o).collect();
    let within = certain_inversions(&class(false)) + certain_inversions(&class(true));

    let mut errors = BTreeMap::new();
    for e in records.iter().flat_map(|r| &r.errors) {
        *errors.entry(e.clone()).or_insert(0) += 1;
    }
    let (eta_honest_share, first_eta_to_wait_median) = eta_honesty(&admitted);
    let share = |bot: bool| {
        let of: Vec<_> = records.iter().filter(|r| r.bot == bot).collect();
        let n = of.iter().filter(|r| r.admitted_seen.is_some()).count();
        (!of.is_empty()).then(|| n as f64 / of.len() as f64)
    };
    let gather = |f: fn(&VisitorRecord) -> &Vec<u64>| -> Vec<u64> {
        records.iter().flat_map(|r| f(r).iter().copied()).collect()
    };
    let polls: u64 = records.iter().map(|r| u64::from(r.polls)).sum();
    Report {
        visitors: records.len(),
        admitted: admitted.len(),
        redeemed: records.iter().filter(|r| r.redeemed).count(),
        inversions: within,
        inversions_cross_class: certain_inversions(&all).saturating_sub(within),
        kendall_tau: send_order_tau(&all),
        max_origin_concurrency: facts.max_origin_concurrency,
        max_active: facts.max_active,
        max_active_observed: facts.max_active_observed,
        eta_honest_share,
        first_eta_to_wait_median,
        polls_per_visitor: if records.is_empty() {
            0.0
        } else {
            polls as f64 / records.len() as f64
        },
        challenges_solved: records.iter().map(|r| u64::from(r.challenges)).sum(),
        errors,
        bot_admitted_share: share(true),
        human_admitted_share: share(false),
        enter_latency: Latency::of(&gather(|r| &r.enter_us)),
        position_latency: Latency::of(&gather(|r| &r.position_us)),
        redeem_latency: Latency::of(&gather(|r| &r.redeem_us)),
        duration_s: facts.duration_s,
    }
}

fn observed(r: &VisitorRecord) -> Option<Observed> {
    let (sent, answered) = r.arrival?;
    let seen = r.admitted_seen?;
    Some(Observed {
        arrival_from: sent,
        arrival_to: answered,
        // Never seen waiting: admitted by the enter itself.
        admitted_from: r.last_waiting_sent.unwrap_or(sent),
        admitted_to: seen,
    })
}

/// Kendall τ of admission order against join order, by client-side point times.
fn send_order_tau(all: &[Observed]) -> Option<f64> {
    let mut by_arrival: Vec<&Observed> = all.iter().collect();
    by_arrival.sort_by_key(|o| (o.arrival_from, o.arrival_to));
    let seq: Vec<u64> = by_arrival.iter().map(|o| o.admitted_to).collect();
    kendall_tau(&seq)
}

/// Share of visitors admitted no later than their first displayed ETA, and
/// the median ratio of that ETA to the wait they really had (> 1: conservative).
/// Visitors never shown an ETA (admitted at once) promise nothing and are left out.
fn eta_honesty(admitted: &[&VisitorRecord]) -> (Option<f64>, Option<f64>) {
    let mut honest = 0usize;
    let mut ratios = Vec::new();
    for r in admitted {
        let (Some((shown_at, eta)), Some(seen)) = (r.first_eta, r.admitted_seen) else {
            continue;
        };
        let waited = seen.saturating_sub(shown_at) as f64 / 1e6;
        if waited <= eta {
            honest += 1;
        }
        if waited > 0.0 {
            ratios.push(eta / waited);
        }
    }
    let shown = admitted.iter().filter(|r| r.first_eta.is_some()).count();
    (
        (shown > 0).then(|| honest as f64 / shown as f64),
        median(&ratios),
    )
}

/// The human-readable report.
pub fn render_text(r: &Report) -> String {
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "n/a".to_owned(),
    };
    let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{:.1}%", v * 100.0));
    let int = |v: Option<u64>| v.map_or("n/a".to_owned(), |v| v.to_string());
    let lat = |l: &Latency| {
        format!(
            "p50 {} ms, p99 {} ms ({} requests)",
            opt(l.p50_ms, 1),
            opt(l.p99_ms, 1),
            l.count
        )
    };
    let mut s = String::new();
    s += &format!("visitors              {}\n", r.visitors);
    s += &format!(
        "admitted              {} (redeemed {})\n",
        r.admitted, r.redeemed
    );
    s += &format!(
        "inversions            {} (cross-class, by policy: {})\n",
        r.inversions, r.inversions_cross_class
    );
    s += &format!("kendall tau           {}\n", opt(r.kendall_tau, 4));
    s += &format!(
        "origin concurrency    max {} (max_active {}, observed active {})\n",
        int(r.max_origin_concurrency),
        int(r.max_active),
        r.max_active_observed
    );
    s += &format!("eta honest share      {}\n", pct(r.eta_honest_share));
    s += &format!(
        "first eta / wait      median {}\n",
        opt(r.first_eta_to_wait_median, 2)
    );
    s += &format!("polls per visitor     {:.2}\n", r.polls_per_visitor);
    s += &format!("challenges solved     {}\n", r.challenges_solved);
    s += &format!(
        "admitted share        humans {}, bots {}\n",
        pct(r.human_admitted_share),
        pct(r.bot_admitted_share)
    );
    s += &format!("enter latency         {}\n", lat(&r.enter_latency));
    s += &format!("position latency      {}\n", lat(&r.position_latency));
    s += &format!("redeem latency        {}\n", lat(&r.redeem_latency));
    s += &format!("duration              {:.1} s\n", r.duration_s);
    if r.errors.is_empty() {
        s += "errors                none\n";
    } else {
        s += "errors\n";
        for (kind, n) in &r.errors {
            s += &format!("  {kind:<20} {n}\n");
        }
    }
    s
}
