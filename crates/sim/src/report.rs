//! The judge: turns what every visitor saw into the crowd report (fairness,
//! origin safety, ETA honesty, polling cost, latency, errors), as text or JSON.

pub mod capacity;
pub mod clock;
pub mod hist;
pub mod stats;

use std::collections::BTreeMap;

use serde::Serialize;

pub use hist::Hist;
use stats::{Observed, certain_inversions, kendall_tau, median};

/// Everything the judge needs of one visitor. Times are microseconds since
/// the run started; latencies and errors are tallied for the whole crowd
/// ([`Tally`]), so a million visitors do not keep one list each.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
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
    /// When the server made the admission (the token's issue time, on the
    /// run's clock).
    pub admitted_at: Option<u64>,
    /// Where `admitted_at` lay before [`clock::align`] clamped it to the
    /// visitor's sight of the admission: the admission lies somewhere
    /// between the two, and its order among the others' is judged over
    /// that whole span. `None` when it was not clamped.
    pub admitted_clamped_from: Option<u64>,
    /// When the visitor gave its slot back (release answered, or its last
    /// page when it abandons).
    pub ended_at: Option<u64>,
    pub redeemed: bool,
    pub released: bool,
    /// Which of the target nodes answered the enter that joined.
    pub node: u8,
    pub polls: u32,
    /// Proof-of-work challenges solved.
    pub challenges: u32,
}

/// What the crowd as a whole met: request latencies per kind, how late the
/// simulator sent its requests against their schedule, and errors.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub enter_us: Hist,
    pub position_us: Hist,
    pub redeem_us: Hist,
    /// Every request: how long after its scheduled time it was sent.
    pub lag_us: Hist,
    /// Position polls only (a burst schedules every arrival at 0, so the
    /// arrivals' lateness is the burst's backlog, not pacing).
    pub poll_lag_us: Hist,
    /// Push streams opened, and those that ended (refused, closed, broken)
    /// before their visitor's wait was over, sending it back to polling.
    pub streams_opened: u64,
    pub stream_fallbacks: BTreeMap<&'static str, u64>,
    /// Error occurrences by kind, e.g. `position_429_rate_limited`.
    pub errors: BTreeMap<String, u64>,
    /// Requests answered by each node of `--target`, in its order (push
    /// streams aside).
    pub requests_by_node: Vec<u64>,
    /// Visitors that gave up, by the error that ended them (`deadline`:
    /// still under way when the run stopped). Every visitor that does not
    /// live its whole plan is here exactly once.
    pub gave_up: BTreeMap<String, u64>,
    /// Consecutive estimates shown to one visitor, and how many of those
    /// pairs rose by more than the server's buffer (see [`Tally::eta_step`]).
    pub eta_pairs: u64,
    pub eta_rises_over_buffer: u64,
    /// The largest later / earlier ratio of such a pair, earlier ≥ 10 s.
    pub eta_max_rise: Option<f64>,
}

/// The server's ETA buffer: an estimate may rise by this factor (and a
/// second of rounding) without breaking its promise.
pub const ETA_BUFFER: f64 = 1.2;

impl Tally {
    /// One estimate shown after `prev` (NaN: the visitor's first).
    pub fn eta_step(&mut self, prev: f64, eta: f64) {
        if prev.is_nan() {
            return;
        }
        self.eta_pairs += 1;
        if eta > prev * ETA_BUFFER + 1.0 {
            self.eta_rises_over_buffer += 1;
        }
        // Under 10 s a one-second rounding step is already a large ratio.
        if prev >= 10.0 {
            let r = eta / prev;
            self.eta_max_rise = Some(self.eta_max_rise.map_or(r, |m| m.max(r)));
        }
    }
}

/// The simulator's own cost and pacing, so a run says which side was the bottleneck.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SimFacts {
    /// CPU seconds the simulator used (user + system, all threads).
    pub cpu_s: f64,
    /// `cpu_s / duration_s / cores`: 1.0 is every core of the box busy with the simulator.
    pub cpu_share: f64,
    pub cores: usize,
    /// Share of the run the scheduler (one task: every visitor's state) was busy.
    pub scheduler_busy_share: f64,
    /// Keep-alive connections (sockets) the visitors share.
    pub connections: usize,
    /// Connections opened over the run (reconnects after the server closed one).
    pub connects: u64,
    /// Requests sent again, once, on a new connection after the kept one
    /// they went out on closed unanswered (the server's idle timeout ran
    /// out as they left), as a browser does; not errors, but counted.
    pub stale_retries: u64,
    pub requests: u64,
    /// Highest resident set size sampled while the crowd ran, and that
    /// above the process's size before the visitors existed, per visitor.
    pub rss_max_bytes: u64,
    pub bytes_per_visitor: f64,
    /// `/proc/loadavg` (1 minute) at the start and at the end of the run.
    pub load_start: Option<f64>,
    pub load_end: Option<f64>,
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
    fn of(us: &Hist) -> Self {
        let ms = |p| us.percentile(p).map(|v| v as f64 / 1000.0);
        Latency {
            count: us.count() as usize,
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
    /// Of [`Report::inversions`], the pairs that joined through different
    /// nodes (`None` with one node): all of them when the nodes disagree on
    /// the order they put their arrivals in.
    pub inversions_across_nodes: Option<u64>,
    /// Kendall τ between send order of the joins and admission order (the
    /// server's admission instants where tokens carry them, else first-seen
    /// times, which poll timing scrambles a little even when fair).
    pub kendall_tau: Option<f64>,
    pub max_origin_concurrency: Option<u64>,
    /// The event's configured cap, when given with `--max-active`.
    pub max_active: Option<u64>,
    /// The most visitors seen browsing with a pass at once, client-side.
    pub max_active_observed: u64,
    /// Mean of (active sessions + outstanding tokens) / `max_active` while
    /// anyone waited, from the first admission on ([`capacity::capacity_use`]).
    pub capacity_use: Option<f64>,
    /// Admissions a second from the first to the last (server-side times).
    pub drain_rate_per_s: Option<f64>,
    /// What the origin allows: `max_active` / the session length (`--browse`).
    pub capacity_per_s: Option<f64>,
    /// `drain_rate_per_s / capacity_per_s`.
    pub drain_share: Option<f64>,
    /// The largest peak RSS (`VmHWM`) of the `--server-pid` processes.
    pub server_peak_rss_bytes: Option<u64>,
    /// From an admission (its token's issue time) to the first answer that
    /// told its visitor.
    pub admission_to_visitor_p50_ms: Option<f64>,
    pub admission_to_visitor_p99_ms: Option<f64>,
    /// How long a slot was held, on average, by the visitors who gave it
    /// back: from the admission to the release (or the last page), split
    /// into the wait until the visitor heard of it and the session after.
    /// `max_active` over the whole is the turnover the slots allow, so this
    /// says where a drain short of the capacity went.
    pub slot_hold: Option<capacity::SlotHold>,
    /// How far the server's wall clock ran ahead of the run's clock, at
    /// most (0 when they agreed): token times were moved back by it
    /// ([`clock::align`]) before fairness and lags were judged.
    pub server_clock_ahead_ms: f64,
    /// Token times that were still after their visitor's sight of the
    /// admission once aligned (by over 1 ms), each clamped to it.
    pub token_times_clamped: u64,
    pub eta_honest_share: Option<f64>,
    pub first_eta_to_wait_median: Option<f64>,
    /// Pairs of consecutive estimates shown to one visitor where the later
    /// rose by more than the buffer (× 1.2, plus a second of rounding).
    pub eta_rises_over_buffer: u64,
    /// Share of such pairs among all consecutive pairs.
    pub eta_rise_share: Option<f64>,
    /// The largest rise of a visitor's estimate (later / earlier, earlier ≥ 10 s).
    pub eta_max_rise: Option<f64>,
    pub polls_per_visitor: f64,
    pub streams_opened: u64,
    /// Streams that ended before their visitor's wait was over, by why.
    pub stream_fallbacks: BTreeMap<&'static str, u64>,
    pub challenges_solved: u64,
    pub errors: BTreeMap<String, u64>,
    /// Requests answered by each node of `--target` (push streams aside).
    pub requests_by_node: Vec<u64>,
    pub bot_admitted_share: Option<f64>,
    pub human_admitted_share: Option<f64>,
    pub enter_latency: Latency,
    pub position_latency: Latency,
    pub redeem_latency: Latency,
    pub duration_s: f64,
    /// Visitors that lived their whole plan (admitted, browsed, released or
    /// abandoned on purpose); `visitors = completed + gave_up`.
    pub completed: usize,
    /// Visitors that gave up (also in `errors` as `gave_up_<kind>`).
    pub gave_up: u64,
    /// The simulator's CPU time / wall time / cores.
    pub sim_cpu_share: f64,
    /// How late requests left against their schedule (p50/p99/max, ms), all
    /// requests and position polls alone.
    pub sim_lag_p50_ms: Option<f64>,
    pub sim_lag_p99_ms: Option<f64>,
    pub sim_lag_max_ms: Option<f64>,
    pub sim_poll_lag_p99_ms: Option<f64>,
    /// `simulator` (its CPU or scheduler was saturated), `server` (requests
    /// left late because every connection was waiting for an answer) or `none`.
    pub bottleneck: &'static str,
    pub sim: SimFacts,
}

/// Inputs to the report that do not come from visitors.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFacts {
    /// Left out of `capacity_use` after the first admission (`--warmup`).
    pub warmup_us: u64,
    /// How long an admitted visitor browses (`--browse`): the session
    /// length that, with `max_active`, bounds how fast the queue can drain.
    pub browse_us: u64,
    /// The largest peak RSS of the server processes named with `--server-pid`.
    pub server_peak_rss_bytes: Option<u64>,
    pub max_origin_concurrency: Option<u64>,
    pub max_active: Option<u64>,
    pub max_active_observed: u64,
    pub duration_s: f64,
    pub sim: SimFacts,
    /// What [`clock::align`] found: how far the server's wall clock ran
    /// ahead of the run's (taken out of the token times), and the token
    /// times clamped alone.
    pub aligned: clock::Aligned,
}

/// Lateness of sends (p99) from which the crowd did not keep its schedule.
const LATE_US: u64 = 100_000;
/// Busy share from which the simulator is taken to be saturated.
const SATURATED: f64 = 0.85;

/// Which side held the run back: the simulator when its threads or its
/// scheduler were (nearly) saturated, the server when the simulator had time
/// to spare yet requests still left late (they waited for a connection whose
/// answer had not come), else neither.
pub fn bottleneck(sim: &SimFacts, lag_p99_us: Option<u64>) -> &'static str {
    if sim.cpu_share >= SATURATED || sim.scheduler_busy_share >= SATURATED {
        "simulator"
    } else if lag_p99_us.is_some_and(|l| l >= LATE_US) {
        "server"
    } else {
        "none"
    }
}

/// Judges a finished run.
pub fn build(records: &[VisitorRecord], tally: &Tally, facts: RunFacts) -> Report {
    let admitted: Vec<&VisitorRecord> = records
        .iter()
        .filter(|r| r.admitted_seen.is_some())
        .collect();
    let fair: Vec<(bool, u8, Observed)> = admitted
        .iter()
        .filter(|r| !r.pre_open)
        .filter_map(|r| Some((r.bot, r.node, observed(r)?)))
        .collect();
    let class = |bot: bool, node: Option<u8>| -> Vec<Observed> {
        fair.iter()
            .filter(|(b, n, _)| *b == bot && node.is_none_or(|node| node == *n))
            .map(|(_, _, o)| *o)
            .collect()
    };
    let all: Vec<Observed> = fair.iter().map(|(_, _, o)| *o).collect();
    let within = certain_inversions(&class(false, None)) + certain_inversions(&class(true, None));
    let nodes = tally.requests_by_node.len();
    let inversions_across_nodes = (nodes > 1).then(|| {
        let within_nodes: u64 = (0..=u8::try_from(nodes - 1).unwrap_or(u8::MAX))
            .map(|n| {
                certain_inversions(&class(false, Some(n)))
                    + certain_inversions(&class(true, Some(n)))
            })
            .sum();
        within.saturating_sub(within_nodes)
    });

    let mut errors = tally.errors.clone();
    for (kind, n) in &tally.gave_up {
        *errors.entry(format!("gave_up_{kind}")).or_insert(0) += n;
    }
    let gave_up: u64 = tally.gave_up.values().sum();
    let ms = |v: Option<u64>| v.map(|v| v as f64 / 1000.0);
    let (eta_honest_share, first_eta_to_wait_median) = eta_honesty(&admitted);
    let share = |bot: bool| {
        let of: Vec<_> = records.iter().filter(|r| r.bot == bot).collect();
        let n = of.iter().filter(|r| r.admitted_seen.is_some()).count();
        (!of.is_empty()).then(|| n as f64 / of.len() as f64)
    };
    let polls: u64 = records.iter().map(|r| u64::from(r.polls)).sum();
    let run_end_us = (facts.duration_s * 1e6) as u64;
    let capacity_use = facts
        .max_active
        .and_then(|max| capacity::capacity_use(records, max, run_end_us, facts.warmup_us));
    let lag = capacity::admission_to_visitor(records);
    let drain_rate_per_s = capacity::drain_rate_per_s(records, facts.max_active);
    let capacity_per_s = facts
        .max_active
        .filter(|_| facts.browse_us > 0)
        .map(|max| max as f64 * 1e6 / facts.browse_us as f64);
    Report {
        visitors: records.len(),
        admitted: admitted.len(),
        redeemed: records.iter().filter(|r| r.redeemed).count(),
        inversions: within,
        inversions_cross_class: certain_inversions(&all).saturating_sub(within),
        inversions_across_nodes,
        kendall_tau: send_order_tau(&all),
        max_origin_concurrency: facts.max_origin_concurrency,
        max_active: facts.max_active,
        max_active_observed: facts.max_active_observed,
        capacity_use,
        drain_rate_per_s,
        capacity_per_s,
        drain_share: drain_rate_per_s.zip(capacity_per_s).map(|(d, c)| d / c),
        server_peak_rss_bytes: facts.server_peak_rss_bytes,
        admission_to_visitor_p50_ms: ms(lag.percentile(50.0)),
        admission_to_visitor_p99_ms: ms(lag.percentile(99.0)),
        slot_hold: capacity::slot_hold(records),
        server_clock_ahead_ms: facts.aligned.ahead_us as f64 / 1000.0,
        token_times_clamped: facts.aligned.clamped,
        eta_honest_share,
        first_eta_to_wait_median,
        eta_rises_over_buffer: tally.eta_rises_over_buffer,
        eta_rise_share: (tally.eta_pairs > 0)
            .then(|| tally.eta_rises_over_buffer as f64 / tally.eta_pairs as f64),
        eta_max_rise: tally.eta_max_rise,
        polls_per_visitor: if records.is_empty() {
            0.0
        } else {
            polls as f64 / records.len() as f64
        },
        streams_opened: tally.streams_opened,
        stream_fallbacks: tally.stream_fallbacks.clone(),
        challenges_solved: records.iter().map(|r| u64::from(r.challenges)).sum(),
        errors,
        requests_by_node: tally.requests_by_node.clone(),
        bot_admitted_share: share(true),
        human_admitted_share: share(false),
        enter_latency: Latency::of(&tally.enter_us),
        position_latency: Latency::of(&tally.position_us),
        redeem_latency: Latency::of(&tally.redeem_us),
        duration_s: facts.duration_s,
        completed: records.len().saturating_sub(gave_up as usize),
        gave_up,
        sim_cpu_share: facts.sim.cpu_share,
        sim_lag_p50_ms: ms(tally.lag_us.percentile(50.0)),
        sim_lag_p99_ms: ms(tally.lag_us.percentile(99.0)),
        sim_lag_max_ms: ms(tally.lag_us.max()),
        sim_poll_lag_p99_ms: ms(tally.poll_lag_us.percentile(99.0)),
        bottleneck: bottleneck(&facts.sim, tally.lag_us.percentile(99.0)),
        sim: facts.sim,
    }
}

fn observed(r: &VisitorRecord) -> Option<Observed> {
    let (sent, answered) = r.arrival?;
    let seen = r.admitted_seen?;
    // The server's own admission instant when its token carried it (issue
    // time in whole milliseconds, so within the 2 ms after it): fairness is
    // the order the server admitted in, not the order visitors learnt of
    // it, and a push stream may still tell a visitor it waits for up to a
    // tick after it was admitted (on another node, all the more). Without a
    // token time, what the client saw: from its last WAITING (never seen
    // waiting: admitted by the enter itself) to its first ADMITTED.
    let (admitted_from, admitted_to) = match r.admitted_at {
        // A clamped time is the earliest the admission can have been, not
        // where it lay among its peers (moved back by the same correction
        // as it): judged over the span to where it lay, the clamp alone
        // cannot make an inversion.
        Some(at) => (
            at,
            r.admitted_clamped_from.unwrap_or(at).max(at) + ADMITTED_AT_SLACK_US,
        ),
        None => (r.last_waiting_sent.unwrap_or(sent), seen),
    };
    Some(Observed {
        arrival_from: sent,
        arrival_to: answered,
        admitted_from,
        admitted_to,
    })
}

/// How far after a token's issue time (whole ms, then the visitor record's
/// tick) the admission may have happened.
const ADMITTED_AT_SLACK_US: u64 = 2_000;

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
    if let Some(across) = r.inversions_across_nodes {
        s += &format!("  across nodes        {across} (joined through different nodes)\n");
    }
    s += &format!("kendall tau           {}\n", opt(r.kendall_tau, 4));
    s += &format!(
        "origin concurrency    max {} (max_active {}, observed active {})\n",
        int(r.max_origin_concurrency),
        int(r.max_active),
        r.max_active_observed
    );
    s += &format!("capacity use          {}\n", pct(r.capacity_use));
    s += &format!(
        "drain rate            {}/s of {}/s allowed ({})\n",
        opt(r.drain_rate_per_s, 0),
        opt(r.capacity_per_s, 0),
        pct(r.drain_share)
    );
    if let Some(b) = r.server_peak_rss_bytes {
        s += &format!("server peak RSS       {:.1} MiB\n", b as f64 / 1048576.0);
    }
    s += &format!(
        "admission to visitor  p50 {} ms, p99 {} ms\n",
        opt(r.admission_to_visitor_p50_ms, 0),
        opt(r.admission_to_visitor_p99_ms, 0)
    );
    if let Some(h) = &r.slot_hold {
        s += &format!(
            "slot held             mean {:.0} ms: {:.0} ms until the visitor heard, {:.0} ms of session\n",
            h.mean_ms, h.notice_mean_ms, h.session_mean_ms
        );
    }
    if r.server_clock_ahead_ms > 0.0 || r.token_times_clamped > 0 {
        s += &format!(
            "server clock ahead    up to {:.1} ms (token times moved back by it); {} more clamped\n",
            r.server_clock_ahead_ms, r.token_times_clamped
        );
    }
    s += &format!("eta honest share      {}\n", pct(r.eta_honest_share));
    s += &format!(
        "first eta / wait      median {}\n",
        opt(r.first_eta_to_wait_median, 2)
    );
    s += &format!(
        "eta rises over buffer {} ({}), largest rise {}\n",
        r.eta_rises_over_buffer,
        pct(r.eta_rise_share),
        opt(r.eta_max_rise, 2)
    );
    s += &format!("polls per visitor     {:.2}\n", r.polls_per_visitor);
    s += &format!(
        "push streams          {} opened, back to polling {:?}\n",
        r.streams_opened, r.stream_fallbacks
    );
    s += &format!("challenges solved     {}\n", r.challenges_solved);
    s += &format!(
        "admitted share        humans {}, bots {}\n",
        pct(r.human_admitted_share),
        pct(r.bot_admitted_share)
    );
    s += &format!("enter latency         {}\n", lat(&r.enter_latency));
    s += &format!("position latency      {}\n", lat(&r.position_latency));
    s += &format!("redeem latency        {}\n", lat(&r.redeem_latency));
    if r.requests_by_node.len() > 1 {
        s += &format!("requests by node      {:?}\n", r.requests_by_node);
    }
    s += &format!("duration              {:.1} s\n", r.duration_s);
    s += &format!(
        "visitors completed    {} (gave up {})\n",
        r.completed, r.gave_up
    );
    s += &format!(
        "simulator             cpu {:.1}% of {} cores, scheduler busy {:.1}%, {} connections ({} opened), {} requests ({} sent again after a kept connection closed unanswered)\n",
        r.sim_cpu_share * 100.0,
        r.sim.cores,
        r.sim.scheduler_busy_share * 100.0,
        r.sim.connections,
        r.sim.connects,
        r.sim.requests,
        r.sim.stale_retries
    );
    s += &format!(
        "send lag              p50 {} ms, p99 {} ms, max {} ms (polls p99 {} ms)\n",
        opt(r.sim_lag_p50_ms, 1),
        opt(r.sim_lag_p99_ms, 1),
        opt(r.sim_lag_max_ms, 1),
        opt(r.sim_poll_lag_p99_ms, 1)
    );
    s += &format!(
        "simulator memory      max rss {:.1} MiB, {:.0} bytes per visitor\n",
        r.sim.rss_max_bytes as f64 / (1 << 20) as f64,
        r.sim.bytes_per_visitor
    );
    s += &format!(
        "load average          {} at start, {} at end\n",
        opt(r.sim.load_start, 2),
        opt(r.sim.load_end, 2)
    );
    s += &format!("bottleneck            {}\n", r.bottleneck);
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

#[cfg(test)]
mod eta_rise_tests {
    use super::*;

    #[test]
    fn rises_count_beyond_the_buffer_and_a_second() {
        let mut t = Tally::default();
        t.eta_step(f64::NAN, 100.0);
        assert_eq!(t.eta_pairs, 0, "a first estimate is no pair");
        t.eta_step(100.0, 121.0); // within 100 × 1.2 + 1
        t.eta_step(100.0, 90.0);
        assert_eq!((t.eta_pairs, t.eta_rises_over_buffer), (2, 0));
        t.eta_step(100.0, 122.0);
        t.eta_step(3.0, 6.0); // 3 × 1.2 + 1 = 4.6: a rise, but too small for the ratio
        assert_eq!((t.eta_pairs, t.eta_rises_over_buffer), (4, 2));
        assert_eq!(t.eta_max_rise, Some(1.22));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(arrived: u64, last_waiting: u64, at: u64, seen: u64) -> VisitorRecord {
        VisitorRecord {
            arrival: Some((arrived, arrived + 1_000)),
            last_waiting_sent: Some(last_waiting),
            admitted_at: Some(at),
            admitted_seen: Some(seen),
            ..VisitorRecord::default()
        }
    }

    /// The report tells inversions between visitors who joined through
    /// different nodes from those within one node: nodes that disagree on
    /// how they order arrivals show up as the first kind only.
    #[test]
    fn inversions_across_nodes_are_told_apart() {
        let on = |node: u8, r: VisitorRecord| VisitorRecord { node, ..r };
        // A (node 0) joins first but is admitted after B (node 1), who
        // joined later; C and D, both on node 0, are inverted too.
        let records = [
            on(0, admitted(0, 50_000, 300_000, 310_000)),
            on(1, admitted(10_000, 50_000, 100_000, 110_000)),
            on(0, admitted(400_000, 450_000, 700_000, 710_000)),
            on(0, admitted(410_000, 450_000, 500_000, 510_000)),
        ];
        let tally = |nodes: usize| Tally {
            requests_by_node: vec![1; nodes],
            ..Tally::default()
        };
        let r = build(&records, &tally(2), RunFacts::default());
        assert_eq!(r.inversions, 2);
        assert_eq!(r.inversions_across_nodes, Some(1));
        assert!(
            render_text(&r).contains("across nodes        1 "),
            "{}",
            render_text(&r)
        );
        // With one node there is nothing to tell apart.
        let r = build(&records, &tally(1), RunFacts::default());
        assert_eq!((r.inversions, r.inversions_across_nodes), (2, None));
        assert!(!render_text(&r).contains("across nodes"));
    }

    #[test]
    fn fairness_is_the_order_the_server_admitted_in() {
        // A joined first and was admitted first (token at 100 ms), but a
        // late stream still told it WAITING at 300 ms, after B (admitted at
        // 200 ms) had been seen admitted at 250 ms: no inversion.
        let a = admitted(0, 300_000, 100_000, 400_000);
        let b = admitted(10_000, 150_000, 200_000, 250_000);
        assert_eq!(
            certain_inversions(&[observed(&a).unwrap(), observed(&b).unwrap()]),
            0
        );
        // B admitted before A by the server's own times: one inversion,
        // whatever the visitors saw.
        let a = admitted(0, 50_000, 300_000, 310_000);
        let b = admitted(10_000, 50_000, 200_000, 320_000);
        assert_eq!(
            certain_inversions(&[observed(&a).unwrap(), observed(&b).unwrap()]),
            1
        );
        // Admitted within the same millisecond (one batch): no proof either way.
        let a = admitted(0, 50_000, 200_500, 310_000);
        let b = admitted(10_000, 50_000, 200_000, 320_000);
        assert_eq!(
            certain_inversions(&[observed(&a).unwrap(), observed(&b).unwrap()]),
            0
        );
    }

    /// One batch admitted at 200 ms by a server whose clock the report
    /// put back 5 ms short of its lead: A's time lies at 205 ms, and B, who
    /// saw the admission 1 ms after it was made, is clamped to 201 ms. B
    /// was clamped below A only by the correction's shortfall: no
    /// inversion, where the clamped point alone made one.
    #[test]
    fn a_time_clamped_to_its_sight_proves_no_inversion_against_its_batch() {
        let a = admitted(0, 50_000, 205_000, 260_000);
        let mut b = admitted(10_000, 50_000, 201_000, 201_000);
        let point = certain_inversions(&[observed(&a).unwrap(), observed(&b).unwrap()]);
        assert_eq!(point, 1, "the clamped point alone");
        b.admitted_clamped_from = Some(205_000);
        assert_eq!(
            certain_inversions(&[observed(&a).unwrap(), observed(&b).unwrap()]),
            0
        );
        // A clamped time still proves what its whole span proves: admitted
        // after a visitor who came later and was admitted before it.
        let c = admitted(20_000, 50_000, 150_000, 160_000);
        assert_eq!(
            certain_inversions(&[observed(&b).unwrap(), observed(&c).unwrap()]),
            1
        );
    }

    /// A FIFO server admits batches of twenty in one instant each, its
    /// clock 300 ms ahead of the run's; two visitors learn of their
    /// admission in 0.3 ms, quicker than the lead's estimate (the 99th
    /// percentile of a second's excesses) allows for. Once aligned, those
    /// two are clamped below their batches, and judged fair: with the
    /// clamped point alone, each made inversions with the visitors of its
    /// batch who arrived before it.
    #[test]
    fn visitors_quicker_than_the_leads_estimate_are_judged_fair() {
        let lead = 300_000;
        let mut rs: Vec<VisitorRecord> = (0..200u64)
            .map(|i| {
                let issued = 1_000_000 + (i / 20) * 100_000;
                let lag = if i % 100 == 7 {
                    300
                } else {
                    5_000 + (i * 7_919) % 40_000
                };
                admitted(i * 1_000, i * 1_000 + 500, issued + lead, issued + lag)
            })
            .collect();
        let aligned = clock::align(&mut rs);
        assert!(aligned.ahead_us >= 250_000, "{aligned:?}");
        assert!(
            aligned.clamped > 0,
            "the quick ones are clamped: {aligned:?}"
        );
        let observed: Vec<_> = rs.iter().filter_map(observed).collect();
        assert_eq!(certain_inversions(&observed), 0);
    }
}
