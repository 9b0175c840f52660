//! The crowd's scheduler: every visitor's state in one array, one timer heap
//! of who acts next and when, and a fixed pool of HTTP/1.1 keep-alive
//! connections. A visitor whose turn is due takes the next free connection,
//! sends the one request its [`Step`] calls for, and its answer moves it on
//! and sets its next turn (`pollAfterMs` with jitter, the next page at its
//! step of the session, a back-off). There is no task per visitor, so a
//! million visitors cost their array (about 52 bytes each) plus a timer entry, not a million stacks.
//!
//! How late each request left against its scheduled turn is recorded: with
//! the simulator's own CPU share, that tells a slow server (every connection
//! waiting for an answer) from a saturated simulator.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures::{FutureExt, StreamExt, stream::FuturesUnordered};
use http_body_util::Full;
use hyper::{
    Method, Request, StatusCode, Uri,
    header::{self, HeaderMap, HeaderValue},
};
use rand::{Rng, rngs::StdRng};
use tokio::{sync::mpsc, time::Instant};

use super::{
    conn::{Answer, Conn, Exchange},
    stream::News,
    visitor::{
        ABANDON, BOT, HAS_SID, HOST_PREFIX, NEVER, PRE_OPEN, REDEEMED, RELEASED, Step, Visitor,
        WAITING, tick_down, tick_up,
    },
    wire::{ChallengeAnswer, ErrorBody, QueuePosition, retry_after, set_cookies},
};
use crate::report::{Tally, VisitorRecord};

/// Gives up after this many failed requests in a row (or challenges answered).
const MAX_FAILURES: u8 = 10;
/// Pages an admitted visitor reads through the gate while browsing.
const PAGES: u8 = 4;
/// Wait before resending a request that got no answer.
const RETRY_US: u64 = 500_000;
/// A visitor told to poll again this soon is near the front: it follows the
/// push stream (while `--streams` allows), where an admission reaches it
/// within a second instead of at its next poll. On the enter's answer every
/// visitor does, as the page does, while streams are to spare.
const STREAM_FROM_US: u64 = 2_400_000;

/// Counters the timeline sampler reads while the crowd runs.
#[derive(Default)]
pub struct Live {
    pub waiting: AtomicU64,
    pub active: AtomicU64,
    pub max_active: AtomicU64,
    pub admitted: AtomicU64,
    pub rss_max: AtomicU64,
}

/// What the scheduler needs to know of the run.
pub struct Config {
    /// The server nodes; the pool's connections are spread over them in
    /// turn, as a round-robin load balancer would, so one visitor's requests
    /// reach any node.
    pub addrs: Vec<SocketAddr>,
    pub host: HeaderValue,
    pub enter: Uri,
    pub position: Uri,
    pub stream: Uri,
    /// Most visitors following the push stream at once.
    pub streams: usize,
    pub redeem: Uri,
    pub release: Uri,
    pub browse: Uri,
    pub fixed_poll_us: Option<u64>,
    pub browse_pause_us: u64,
    pub connections: usize,
    /// The run stops this long after its start, whatever is left.
    pub deadline_us: u64,
}

/// A finished crowd: what the judge reads, and the scheduler's own figures.
pub struct Finished {
    pub records: Vec<VisitorRecord>,
    pub tally: Tally,
    pub connects: u64,
    /// Requests sent again after the kept connection they went out on
    /// closed unanswered (see `conn`).
    pub stale_retries: u64,
    pub requests: u64,
    /// Time the scheduler spent working (not waiting for an answer or a turn).
    pub busy: Duration,
}

/// A proof-of-work answer, ready to send with the visitor's next enter.
pub struct Solved {
    id: u32,
    body: Bytes,
}

pub struct Fleet {
    cfg: Config,
    start: Instant,
    /// `start` on the wall clock (µs since the Unix epoch), to place the
    /// server's admission times (token issue times) on the run's clock.
    start_unix_us: i64,
    live: Arc<Live>,
    visitors: Vec<Visitor>,
    /// Arrival times (µs from the start, non-decreasing), visitor i's at i.
    arrivals: Vec<u64>,
    next_arrival: usize,
    /// The next overdue pick goes to a timer rather than an arrival.
    prefer_timer: bool,
    /// Every later turn: (due µs, visitor).
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// Turns of admitted visitors (redeem, browse, release), taken before
    /// any other due turn: in a real crowd each browser has its own
    /// connection, so an admitted visitor never waits behind other
    /// visitors' polls; in the shared pool it would, and under a backlog its
    /// slot would sit idle while the polls ahead of it went out.
    urgent: BinaryHeap<Reverse<(u64, u32)>>,
    /// The few long values only some visitors hold at a time.
    tokens: HashMap<u32, Box<str>>,
    passes: HashMap<u32, Box<str>>,
    /// When each browsing visitor's session began (its redeem answered, µs):
    /// its pages and its release are due at fixed offsets from it, so a
    /// session lasts `--browse` however long the origin takes to answer.
    browsing_since: HashMap<u32, u64>,
    answers: HashMap<u32, Bytes>,
    /// Session ids that are not 32 hex digits (kept whole).
    odd_sids: HashMap<u32, Box<str>>,
    tally: Tally,
    rng: StdRng,
    settled: usize,
    connects: u64,
    stale_retries: u64,
    requests: u64,
    solved_tx: mpsc::UnboundedSender<Solved>,
    /// Visitors following the push stream, and their tasks (aborted when
    /// the visitor's life or the run ends).
    streaming: HashMap<u32, tokio::task::AbortHandle>,
    /// Visitors whose stream was refused or broke: they poll from then on,
    /// as the page does once its stream fails.
    no_stream: std::collections::HashSet<u32>,
    news_tx: mpsc::UnboundedSender<(u32, News)>,
    news_rx: Option<mpsc::UnboundedReceiver<(u32, News)>>,
}

/// The issue time (ms since the Unix epoch) an admission token carries:
/// bytes 6..14 of its payload (see `anteroom_core::token`). Read without
/// checking the MAC: the simulator only times its own admissions.
fn token_issued_at_ms(token: &str) -> Option<i64> {
    use base64::Engine as _;
    let payload = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    Some(i64::from_be_bytes(bytes.get(6..14)?.try_into().ok()?))
}

/// `op_status_error`, e.g. `enter_403_blocked`, for the errors table.
fn error_kind(op: &str, a: &Answer) -> String {
    match serde_json::from_slice::<ErrorBody>(&a.body) {
        Ok(e) => format!("{op}_{}_{}", a.status.as_u16(), e.error),
        Err(_) => format!("{op}_{}", a.status.as_u16()),
    }
}

const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36";

impl Fleet {
    /// A crowd of `plans.len()` visitors (their `BOT`/`ABANDON` flags)
    /// arriving at `arrivals` (µs from `start`).
    pub fn new(
        cfg: Config,
        start: Instant,
        live: Arc<Live>,
        plans: &[u8],
        arrivals: Vec<u64>,
        rng: StdRng,
    ) -> (Self, mpsc::UnboundedReceiver<Solved>) {
        let (solved_tx, solved_rx) = mpsc::unbounded_channel();
        let (news_tx, news_rx) = mpsc::unbounded_channel();
        let since_start = i64::try_from(start.elapsed().as_micros()).unwrap_or(0);
        let start_unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            - since_start;
        let nodes = cfg.addrs.len();
        let fleet = Fleet {
            cfg,
            start,
            start_unix_us,
            live,
            visitors: plans.iter().map(|&f| Visitor::new(f)).collect(),
            arrivals,
            next_arrival: 0,
            prefer_timer: false,
            timers: BinaryHeap::with_capacity(plans.len()),
            urgent: BinaryHeap::new(),
            tokens: HashMap::new(),
            passes: HashMap::new(),
            browsing_since: HashMap::new(),
            answers: HashMap::new(),
            odd_sids: HashMap::new(),
            tally: Tally {
                requests_by_node: vec![0; nodes],
                ..Tally::default()
            },
            rng,
            settled: 0,
            connects: 0,
            stale_retries: 0,
            requests: 0,
            solved_tx,
            streaming: HashMap::new(),
            no_stream: std::collections::HashSet::new(),
            news_tx,
            news_rx: Some(news_rx),
        };
        (fleet, solved_rx)
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The next turn, arrivals and timers merged: (due µs, visitor, is an arrival).
    fn peek(&self) -> Option<(u64, u32, bool)> {
        let arrival = self
            .arrivals
            .get(self.next_arrival)
            .map(|&at| (at, self.next_arrival as u32, true));
        let timer = self
            .timers
            .peek()
            .map(|Reverse((at, id))| (*at, *id, false));
        let urgent = self
            .urgent
            .peek()
            .map(|Reverse((at, id))| (*at, *id, false));
        [arrival, timer, urgent]
            .into_iter()
            .flatten()
            .min_by_key(|t| t.0)
    }

    fn pop_due(&mut self, now: u64) -> Option<(u64, u32)> {
        if let Some(&Reverse((due, id))) = self.urgent.peek().filter(|t| t.0.0 <= now) {
            self.urgent.pop();
            return Some((due, id));
        }
        let (mut due, mut id, mut arrival) = self.peek().filter(|t| t.0 <= now)?;
        // When arrivals and later turns are both overdue (a burst larger
        // than the pool can send at once), take them in turn: earliest-due
        // first would hold every poll of those already queued behind the
        // whole burst's enters, which real visitors, each on their own
        // connection, never wait for.
        if arrival
            && self.prefer_timer
            && let Some(&Reverse((at, t))) = self.timers.peek().filter(|t| t.0.0 <= now)
        {
            (due, id, arrival) = (at, t, false);
        }
        self.prefer_timer = arrival;
        if arrival {
            self.next_arrival += 1;
        } else {
            self.timers.pop();
        }
        Some((due, id))
    }

    fn schedule(&mut self, id: u32, at_us: u64) {
        let admitted = matches!(
            self.visitors[id as usize].step,
            Step::Redeem | Step::Browse | Step::Release
        );
        if admitted {
            self.urgent.push(Reverse((at_us, id)));
        } else {
            self.timers.push(Reverse((at_us, id)));
        }
    }

    fn error(&mut self, kind: &str) {
        match self.tally.errors.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.tally.errors.insert(kind.to_owned(), 1);
            }
        }
    }

    /// Ends a visitor's life early: counted once under `gave_up`, by `why`.
    fn give_up(&mut self, id: u32, why: &str) {
        *self.tally.gave_up.entry(why.to_owned()).or_insert(0) += 1;
        self.settle(id, Step::Failed);
    }

    fn settle(&mut self, id: u32, step: Step) {
        let v = &mut self.visitors[id as usize];
        if v.has(WAITING) {
            v.set(WAITING, false);
            self.live.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        if matches!(v.step, Step::Browse) {
            self.live.active.fetch_sub(1, Ordering::Relaxed);
        }
        v.step = step;
        self.settled += 1;
        if let Some(task) = self.streaming.remove(&id) {
            task.abort();
        }
        self.tokens.remove(&id);
        self.passes.remove(&id);
        self.browsing_since.remove(&id);
        self.answers.remove(&id);
        self.odd_sids.remove(&id);
    }

    fn cookie(&self, id: u32) -> Option<HeaderValue> {
        let v = &self.visitors[id as usize];
        let prefix = if v.has(HOST_PREFIX) { "__Host-" } else { "" };
        let mut c = String::with_capacity(160);
        if v.has(HAS_SID) {
            c.push_str(prefix);
            c.push_str("anteroom_sid=");
            v.sid_hex(&mut c);
        } else if let Some(sid) = self.odd_sids.get(&id) {
            c.push_str(prefix);
            c.push_str("anteroom_sid=");
            c.push_str(sid);
        }
        if let Some(pass) = self.passes.get(&id) {
            if !c.is_empty() {
                c.push_str("; ");
            }
            c.push_str(prefix);
            c.push_str("anteroom_pass=");
            c.push_str(pass);
        }
        if c.is_empty() {
            return None;
        }
        HeaderValue::from_str(&c).ok()
    }

    /// Keeps every `anteroom_*` cookie the answer sets (and forgets cleared ones).
    fn absorb(&mut self, id: u32, headers: &HeaderMap) {
        for (name, host, val) in set_cookies(headers) {
            let v = &mut self.visitors[id as usize];
            if host {
                v.set(HOST_PREFIX, true);
            }
            match (name, val) {
                ("anteroom_sid", Some(sid)) => {
                    if v.set_sid(sid) {
                        self.odd_sids.remove(&id);
                    } else {
                        v.set(HAS_SID, false);
                        self.odd_sids.insert(id, sid.into());
                    }
                }
                ("anteroom_sid", None) => {
                    v.set(HAS_SID, false);
                    self.odd_sids.remove(&id);
                }
                ("anteroom_pass", Some(pass)) => {
                    self.passes.insert(id, pass.into());
                }
                ("anteroom_pass", None) => {
                    self.passes.remove(&id);
                }
                _ => {}
            }
        }
    }

    /// The request of visitor `id`'s turn, with its identity: cookies, user
    /// agent, and a benchmarking-range address (RFC 2544, 198.18.0.0/15) in
    /// `X-Forwarded-For`, so per-IP limits see distinct clients when the
    /// server trusts loopback as a proxy.
    fn request(&mut self, id: u32) -> Option<Request<Full<Bytes>>> {
        let v = self.visitors[id as usize];
        let (method, uri, body) = match v.step {
            Step::Enter => (
                Method::POST,
                &self.cfg.enter,
                self.answers.remove(&id).map(|b| (b, true)),
            ),
            Step::Poll => (Method::GET, &self.cfg.position, None),
            Step::Stream => (Method::GET, &self.cfg.stream, None),
            Step::Redeem => {
                let token = self.tokens.get(&id)?;
                let body = serde_json::to_vec(&serde_json::json!({ "token": token })).ok()?;
                (Method::POST, &self.cfg.redeem, Some((body.into(), true)))
            }
            Step::Browse => (Method::GET, &self.cfg.browse, None),
            Step::Release => (Method::POST, &self.cfg.release, None),
            Step::Solving | Step::Done | Step::Failed => return None,
        };
        let accept = if v.step == Step::Stream {
            HeaderValue::from_static("text/event-stream")
        } else {
            HeaderValue::from_static("application/json")
        };
        let ip = format!(
            "198.{}.{}.{}",
            18 + ((id >> 16) & 1),
            (id >> 8) & 0xff,
            id & 0xff
        );
        let mut req = Request::builder()
            .method(method)
            .uri(uri.clone())
            .header(header::HOST, self.cfg.host.clone())
            .header("x-forwarded-for", ip)
            .header(header::ACCEPT, accept);
        req = if v.has(BOT) {
            req.header(
                header::USER_AGENT,
                HeaderValue::from_static("python-requests/2.31.0"),
            )
        } else {
            req.header(header::USER_AGENT, HeaderValue::from_static(CHROME))
                .header(
                    header::ACCEPT_LANGUAGE,
                    HeaderValue::from_static("en-US,en;q=0.9"),
                )
        };
        if let Some(c) = self.cookie(id) {
            req = req.header(header::COOKIE, c);
        }
        let body = match body {
            Some((b, json)) => {
                if json {
                    req = req.header(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                b
            }
            None => Bytes::new(),
        };
        if v.step == Step::Poll {
            self.visitors[id as usize].polls += 1;
        }
        req.body(Full::new(body)).ok()
    }

    /// Runs the crowd until every visitor's life is over or the deadline.
    pub async fn run(mut self, mut solved: mpsc::UnboundedReceiver<Solved>) -> Finished {
        let Some(mut news) = self.news_rx.take() else {
            unreachable!("a fleet runs once");
        };
        let addrs = self.cfg.addrs.clone();
        let mut idle: Vec<Conn> = (0..self.cfg.connections.max(1))
            .map(|i| Conn::to(i % addrs.len(), addrs[i % addrs.len()]))
            .collect();
        let mut inflight = FuturesUnordered::new();
        let deadline =
            tokio::time::sleep_until(self.start + Duration::from_micros(self.cfg.deadline_us));
        tokio::pin!(deadline);
        let mut busy = Duration::ZERO;
        let mut woke = std::time::Instant::now();
        let mut timed_out = false;
        loop {
            let now = self.now_us();
            while !idle.is_empty() {
                let Some((due, id)) = self.pop_due(now) else {
                    break;
                };
                let step = self.visitors[id as usize].step;
                let Some(req) = self.request(id) else {
                    continue;
                };
                let Some(conn) = idle.pop() else { break };
                let lag = now.saturating_sub(due);
                self.tally.lag_us.record(lag);
                if step == Step::Poll {
                    self.tally.poll_lag_us.record(lag);
                }
                inflight.push(
                    conn.exchange(req)
                        .map(move |x: Exchange| (x, id, step, now)),
                );
            }
            if self.settled == self.visitors.len() {
                break;
            }
            let next = self.peek().map(|t| self.start + Duration::from_micros(t.0));
            busy += woke.elapsed();
            tokio::select! {
                biased;
                () = &mut deadline => {
                    timed_out = true;
                }
                Some((x, id, step, sent)) = inflight.next(), if !inflight.is_empty() => {
                    woke = std::time::Instant::now();
                    self.requests += 1;
                    let node = x.conn.node;
                    if let Some(n) = self.tally.requests_by_node.get_mut(node) {
                        *n += 1;
                    }
                    self.connects += u64::from(x.connected);
                    self.stale_retries += u64::from(x.retried);
                    idle.push(x.conn);
                    self.answered(id, step, sent, node, x.result);
                }
                Some(s) = solved.recv() => {
                    woke = std::time::Instant::now();
                    let now = self.now_us();
                    if self.visitors[s.id as usize].step == Step::Solving {
                        self.visitors[s.id as usize].step = Step::Enter;
                        self.answers.insert(s.id, s.body);
                        self.schedule(s.id, now);
                    }
                }
                Some((id, n)) = news.recv() => {
                    woke = std::time::Instant::now();
                    self.news(id, n);
                }
                () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() && !idle.is_empty() => {
                    woke = std::time::Instant::now();
                }
            }
            if timed_out {
                break;
            }
        }
        busy += woke.elapsed().min(Duration::from_millis(1));
        for (_, task) in self.streaming.drain() {
            task.abort();
        }
        for id in 0..self.visitors.len() as u32 {
            if !self.visitors[id as usize].settled() {
                self.error("deadline");
                self.give_up(id, "deadline");
            }
        }
        // Before the judge's copy of the records exists: this is what
        // holding the crowd cost.
        self.live
            .rss_max
            .fetch_max(super::usage::rss_bytes(), Ordering::Relaxed);
        Finished {
            records: self.visitors.iter().map(Visitor::record).collect(),
            tally: self.tally,
            connects: self.connects,
            stale_retries: self.stale_retries,
            requests: self.requests,
            busy,
        }
    }

    /// The answer to visitor `id`'s request for `step`, sent at `sent`
    /// through a connection to target node `node`.
    fn answered(
        &mut self,
        id: u32,
        step: Step,
        sent: u64,
        node: usize,
        result: Result<Answer, &'static str>,
    ) {
        let received = self.now_us();
        match step {
            Step::Enter => self.on_enter(id, sent, received, node, result),
            Step::Poll => self.on_poll(id, sent, received, result),
            Step::Redeem => self.on_redeem(id, received, sent, result),
            Step::Browse => self.on_browse(id, received, result),
            Step::Release => self.on_release(id, received, result),
            Step::Stream | Step::Solving | Step::Done | Step::Failed => {}
        }
    }

    /// What a push stream said of visitor `id`: a position (handled as a
    /// poll's answer would be, except that no poll is scheduled while the
    /// stream lasts), or its end, after which the visitor polls again.
    fn news(&mut self, id: u32, news: News) {
        if self.visitors[id as usize].step != Step::Stream {
            // The visitor moved on (admitted, gave up): nothing to follow.
            return;
        }
        let now = self.now_us();
        match news {
            // Dated by its arrival on the stream: the server wrote it no
            // later, and at most a socket's delay earlier.
            News::Position(pos, arrived) => {
                self.position(id, &pos, arrived.min(now), arrived.min(now))
            }
            News::Ended(why) => {
                self.streaming.remove(&id);
                self.no_stream.insert(id);
                *self.tally.stream_fallbacks.entry(why).or_insert(0) += 1;
                self.visitors[id as usize].step = Step::Poll;
                self.schedule(id, now + RETRY_US);
            }
        }
    }

    /// Starts following the push stream, on a socket of its own.
    fn start_stream(&mut self, id: u32) {
        self.visitors[id as usize].step = Step::Stream;
        let Some(req) = self.request(id) else {
            self.visitors[id as usize].step = Step::Poll;
            return;
        };
        self.tally.streams_opened += 1;
        let task = tokio::spawn(super::stream::follow(
            self.cfg.addrs[id as usize % self.cfg.addrs.len()],
            req,
            id,
            self.start,
            self.news_tx.clone(),
        ));
        self.streaming.insert(id, task.abort_handle());
    }

    /// A failed request: retried after `retry_us` unless `MAX_FAILURES` in a row.
    fn failed(&mut self, id: u32, kind: &str, retry_at_us: Option<u64>) {
        self.error(kind);
        let v = &mut self.visitors[id as usize];
        v.failures = v.failures.saturating_add(1);
        match retry_at_us {
            Some(at) if v.failures < MAX_FAILURES => self.schedule(id, at),
            _ => self.give_up(id, kind),
        }
    }

    fn on_enter(
        &mut self,
        id: u32,
        sent: u64,
        received: u64,
        node: usize,
        result: Result<Answer, &str>,
    ) {
        let a = match result {
            Ok(a) => a,
            Err(e) => return self.failed(id, &format!("enter_{e}"), Some(received + RETRY_US)),
        };
        self.tally.enter_us.record(received - sent);
        self.absorb(id, &a.headers);
        match a.status.as_u16() {
            200 => match serde_json::from_slice::<QueuePosition>(&a.body) {
                Ok(pos) => {
                    let v = &mut self.visitors[id as usize];
                    v.arrival_sent = tick_down(sent);
                    v.arrival_received = tick_up(received);
                    v.node = u8::try_from(node).unwrap_or(u8::MAX);
                    v.failures = 0;
                    v.set(PRE_OPEN, pos.status == "NOT_OPEN");
                    v.set(WAITING, true);
                    v.step = Step::Poll;
                    self.live.waiting.fetch_add(1, Ordering::Relaxed);
                    self.position(id, &pos, sent, received);
                }
                Err(_) => {
                    self.error("enter_bad_body");
                    self.give_up(id, "enter_bad_body");
                }
            },
            401 => {
                let Ok(c) = serde_json::from_slice::<ChallengeAnswer>(&a.body) else {
                    let kind = error_kind("enter", &a);
                    return self.failed(id, &kind, None);
                };
                let v = &mut self.visitors[id as usize];
                v.failures = v.failures.saturating_add(1);
                if v.failures >= MAX_FAILURES {
                    // Challenged again and again: the answers are not accepted.
                    let kind = error_kind("enter", &a);
                    self.error(&kind);
                    return self.give_up(id, &kind);
                }
                v.challenges = v.challenges.saturating_add(1);
                v.step = Step::Solving;
                let (challenge, difficulty) = (c.challenge.challenge, c.challenge.difficulty);
                let tx = self.solved_tx.clone();
                // Hashing is CPU work: keep it off the scheduler.
                tokio::task::spawn_blocking(move || {
                    let nonce = anteroom_core::pow::solve(&challenge, difficulty);
                    let body = serde_json::to_vec(
                        &serde_json::json!({ "challenge": challenge, "nonce": nonce }),
                    )
                    .unwrap_or_default();
                    let _ = tx.send(Solved {
                        id,
                        body: body.into(),
                    });
                });
            }
            429 | 503 => {
                let kind = error_kind("enter", &a);
                let back_off = retry_after(&a.headers).unwrap_or(1) * 1_000_000;
                self.failed(id, &kind, Some(received + back_off));
            }
            _ => {
                let kind = error_kind("enter", &a);
                self.failed(id, &kind, None);
            }
        }
    }

    /// A QueuePosition answer (to enter or to a poll) sent at `sent`.
    fn position(&mut self, id: u32, pos: &QueuePosition, sent: u64, received: u64) {
        match pos.status.as_str() {
            "ADMITTED" | "ACTIVE" => {
                // A stream ends by itself after this message.
                self.streaming.remove(&id);
                let v = &mut self.visitors[id as usize];
                v.admitted_seen = tick_up(received);
                if v.has(WAITING) {
                    v.set(WAITING, false);
                    self.live.waiting.fetch_sub(1, Ordering::Relaxed);
                }
                self.live.admitted.fetch_add(1, Ordering::Relaxed);
                match &pos.token {
                    Some(token) => {
                        if let Some(issued_ms) = token_issued_at_ms(token) {
                            let rel = issued_ms.saturating_mul(1000) - self.start_unix_us;
                            // Possibly after `received` if the server's wall
                            // clock moved: `report::clock` puts it back.
                            let at = u64::try_from(rel.max(0)).unwrap_or(0);
                            self.visitors[id as usize].admitted_at = tick_down(at);
                        }
                        self.visitors[id as usize].step = Step::Redeem;
                        self.tokens.insert(id, token.as_str().into());
                        self.schedule(id, received);
                    }
                    None => self.start_browsing(id, received),
                }
            }
            "WAITING" | "PAUSED" | "NOT_OPEN" | "DRAINING" => {
                let v = &mut self.visitors[id as usize];
                v.last_waiting_sent = tick_down(sent);
                if let Some(eta) = pos.estimated_wait_seconds {
                    if v.eta_at == NEVER {
                        v.eta_at = tick_up(received);
                        v.eta_s = eta as f32;
                    }
                    let prev = f64::from(v.last_eta_s);
                    v.last_eta_s = eta as f32;
                    self.tally.eta_step(prev, eta);
                }
                if v.step == Step::Stream {
                    // The stream brings the next news itself.
                    return;
                }
                let told = pos.poll_after_ms.unwrap_or(1000) * 1000;
                // The page opens the stream on the enter's answer; with
                // streams to spare the simulator does too, and otherwise
                // gives them to visitors near the front.
                let entered = v.polls == 0;
                if (entered || told <= STREAM_FROM_US)
                    && self.streaming.len() < self.cfg.streams
                    && !self.no_stream.contains(&id)
                {
                    return self.start_stream(id);
                }
                // Up to 10% jitter, as API.md asks of clients.
                let jittered = told + (told as f64 * self.rng.random::<f64>() * 0.1) as u64;
                let wait = self.cfg.fixed_poll_us.unwrap_or(jittered);
                self.schedule(id, received + wait);
            }
            other => {
                let kind = format!("status_{}", other.to_lowercase());
                self.error(&kind);
                self.give_up(id, &kind);
            }
        }
    }

    fn on_poll(&mut self, id: u32, sent: u64, received: u64, result: Result<Answer, &str>) {
        let a = match result {
            Ok(a) => a,
            Err(e) => return self.failed(id, &format!("position_{e}"), Some(received + RETRY_US)),
        };
        self.tally.position_us.record(received - sent);
        self.absorb(id, &a.headers);
        let parsed = serde_json::from_slice::<QueuePosition>(&a.body);
        match (a.status, parsed) {
            (StatusCode::OK, Ok(pos)) => {
                self.visitors[id as usize].failures = 0;
                self.position(id, &pos, sent, received);
            }
            (status, _) => {
                let kind = error_kind("position", &a);
                let retry = (status.as_u16() == 429 || status.is_server_error())
                    .then(|| received + retry_after(&a.headers).unwrap_or(1) * 1_000_000);
                self.failed(id, &kind, retry);
            }
        }
    }

    fn on_redeem(&mut self, id: u32, received: u64, sent: u64, result: Result<Answer, &str>) {
        let a = match result {
            Ok(a) => a,
            Err(e) => {
                let kind = format!("redeem_{e}");
                self.error(&kind);
                return self.give_up(id, &kind);
            }
        };
        self.tally.redeem_us.record(received - sent);
        if a.status != StatusCode::OK {
            let kind = error_kind("redeem", &a);
            self.error(&kind);
            return self.give_up(id, &kind);
        }
        self.tokens.remove(&id);
        self.absorb(id, &a.headers);
        if !self.passes.contains_key(&id)
            && let Some(pass) = serde_json::from_slice::<serde_json::Value>(&a.body)
                .ok()
                .and_then(|v| v.get("pass")?.as_str().map(Box::<str>::from))
        {
            // Fall back to the body's pass when no cookie was set.
            self.passes.insert(id, pass);
        }
        self.visitors[id as usize].set(REDEEMED, true);
        self.start_browsing(id, received);
    }

    fn start_browsing(&mut self, id: u32, now: u64) {
        let v = &mut self.visitors[id as usize];
        v.step = Step::Browse;
        v.pages_left = PAGES;
        self.browsing_since.insert(id, now);
        let active = self.live.active.fetch_add(1, Ordering::Relaxed) + 1;
        self.live.max_active.fetch_max(active, Ordering::Relaxed);
        self.schedule(id, now);
    }

    fn on_browse(&mut self, id: u32, received: u64, result: Result<Answer, &str>) {
        match result {
            Ok(a) if a.status.is_success() => self.absorb(id, &a.headers),
            Ok(a) => {
                let kind = error_kind("browse", &a);
                self.error(&kind);
            }
            Err(e) => self.error(&format!("browse_{e}")),
        }
        let v = &mut self.visitors[id as usize];
        v.pages_left = v.pages_left.saturating_sub(1);
        // The next page (or the release) is due a whole number of pauses
        // after the session began, not a pause after this answer: the
        // visitor browses `--browse` in all, and a page the origin is slow
        // to answer is read in the time that is left, as the target's
        // capacity (`max_active` / session length) assumes.
        let read = u64::from(PAGES - v.pages_left);
        let since = self.browsing_since.get(&id).copied().unwrap_or(received);
        let due = (since + read * self.cfg.browse_pause_us).max(received);
        if v.pages_left > 0 {
            return self.schedule(id, due);
        }
        self.live.active.fetch_sub(1, Ordering::Relaxed);
        self.browsing_since.remove(&id);
        if v.has(ABANDON) {
            v.ended_at = tick_up(received);
            v.step = Step::Done;
            self.settled += 1;
            self.passes.remove(&id);
            self.odd_sids.remove(&id);
        } else {
            v.step = Step::Release;
            self.schedule(id, due);
        }
    }

    fn on_release(&mut self, id: u32, received: u64, result: Result<Answer, &str>) {
        self.visitors[id as usize].ended_at = tick_up(received);
        match result {
            Ok(a) if a.status.is_success() => self.visitors[id as usize].set(RELEASED, true),
            Ok(a) => {
                let kind = error_kind("release", &a);
                self.error(&kind);
            }
            Err(e) => self.error(&format!("release_{e}")),
        }
        self.settle(id, Step::Done);
    }
}
