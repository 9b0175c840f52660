//! `GET /api/queue/stream`: the caller's QueuePosition as Server-Sent Events.
//!
//! One `event: position` message at once, then one on every status change
//! and on rank changes (at most once a second near the front, less often
//! further back), and a comment line as heartbeat. The stream ends after
//! `ADMITTED`, `ACTIVE`, `NONE` or `CLOSED`, after a lifetime of its own, or
//! when the server stops; the page then polls `GET /api/queue/position`
//! (authoritative) or opens a new stream.
//!
//! What a stream costs the store is set out in [`crate::push`]: the event's
//! hub reads the event's progress once per tick for every stream; a stream
//! reads its own status when it opens, when an admission may have reached
//! it, every second near the front, and otherwise within a third of
//! `queue_idle_timeout` (which also counts as the visitor being present,
//! like a poll).

mod hub;

pub use hub::listen_to_other_nodes;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::eta::{Lang, NEAR_RANK};
use anteroom_core::phase::Phase;
use anteroom_store::{EventId, MemberState};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{QueuePosition, Status, lang, query_param, resolve_event, safe_return};
use crate::error::{ApiError, ErrorBody};
use crate::position::Answer;
use crate::push::{StreamPermit, Subscription};
use crate::queue::{Queue, Read};
use crate::state::AppState;

/// A heartbeat comment follows this much silence (the contract: at least
/// every 15 s), so proxies and browsers keep an idle stream open.
const HEARTBEAT: Duration = Duration::from_secs(12);

/// How long one stream lasts before the server ends it (plus up to
/// [`LIFETIME_SPREAD`]): the visitor's page reconnects, so no connection
/// lives for ever and streams spread over nodes as they come and go.
const LIFETIME: Duration = Duration::from_secs(600);
const LIFETIME_SPREAD: Duration = Duration::from_secs(120);

/// Near the front (rank below [`NEAR_RANK`]) a stream reads its own status
/// this often: there are few such visitors per event, and they must see
/// departures ahead of them (not only admissions) at once.
const FRONT_READ: Duration = Duration::from_secs(1);

/// While the store does not answer, how often a stream asks again.
const DRAINING_READ: Duration = Duration::from_secs(5);

/// The reconnect delay the browser's EventSource is told to use.
const RETRY_MS: u64 = 2000;

/// `Retry-After` of the refusal past `server.max_streams`.
const REFUSED_RETRY_SECS: u64 = 5;

/// Opens the caller's push stream.
#[utoipa::path(get, path = "/api/queue/stream", tag = "queue",
    params(("eventId" = Option<String>, Query, description = "event id; optional with one event")),
    responses((status = 200, content_type = "text/event-stream",
            description = "Server-Sent Events: `event: position` with one QueuePosition JSON line each"),
        (status = 404, body = crate::error::ErrorBody, description = "unknown_event"),
        (status = 429, body = crate::error::ErrorBody, description = "rate_limited"),
        (status = 503, body = crate::error::ErrorBody,
            description = "too_many_streams: past `server.max_streams`; poll instead",
            headers(("Retry-After" = u64, description = "seconds before trying a stream again")))))]
pub async fn stream(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    let rt = resolve_event(&state, &parts.uri)?;
    // Opening a stream reads the store like a poll, so it counts as one:
    // a reconnect loop is limited like a poll loop.
    let ip = super::client_ip(&state, &parts.extensions, &parts.headers);
    let visitor = super::enter::polling_visitor(&state, &rt, &parts.headers, ip)?;
    let Some(permit) = state.push.try_open(ip) else {
        metrics::counter!("anteroom_streams_refused_total").increment(1);
        return Ok(refused());
    };
    let return_path = safe_return(query_param(&parts.uri, "return").as_deref());
    let lang = lang(&parts.headers);
    let Some(visitor) = visitor else {
        // Nobody to follow: the one answer a poll would give, then the end.
        let answer = Answer {
            lang,
            return_path: &return_path,
        };
        let none = QueuePosition::build(&state, &rt, "", &MemberState::None, answer);
        return Ok(event_stream(Body::from(first_message(&none))));
    };
    let stream = Stream::open(&state, rt.id(), visitor.member, lang, return_path, permit).await;
    metrics::counter!("anteroom_streams_opened_total").increment(1);
    Ok(event_stream(Body::from_stream(futures::stream::unfold(
        stream,
        Stream::next,
    ))))
}

fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx and similar proxies would otherwise buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// `503 too_many_streams` + `Retry-After`: the page polls instead.
fn refused() -> Response {
    let body = ErrorBody {
        error: "too_many_streams",
        message: "this node holds as many push streams as it may, for all or for this address; poll /api/queue/position instead"
            .into(),
        challenge: None,
    };
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(REFUSED_RETRY_SECS));
    response
}

fn message(p: &QueuePosition) -> Bytes {
    let json = serde_json::to_string(p).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("event: position\ndata: {json}\n\n"))
}

fn first_message(p: &QueuePosition) -> Bytes {
    let json = serde_json::to_string(p).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!(
        "retry: {RETRY_MS}\nevent: position\ndata: {json}\n\n"
    ))
}

/// When a derived rank is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tell {
    /// Only when lower than the rank last told.
    IfLower,
    /// Now, whatever changed.
    Now,
}

/// Whether the stream ends once this status is told.
fn ends(status: Status) -> bool {
    matches!(
        status,
        Status::Admitted | Status::Active | Status::None | Status::Closed
    )
}

fn has_rank(status: Status) -> bool {
    matches!(status, Status::Waiting | Status::Paused)
}

/// How often a rank change may be told, by rank: at most once a second
/// near the front, less often further back, where a rank moves slowly
/// compared with the wait.
fn rank_cadence(rank: u64) -> Duration {
    match rank {
        r if r < NEAR_RANK => Duration::from_secs(1),
        r if r < 1_000 => Duration::from_secs(5),
        r if r < 10_000 => Duration::from_secs(10),
        _ => Duration::from_secs(20),
    }
}

/// `d` scaled by a random factor in [0.9, 1.1): streams opened together
/// (a redirect wave) do not read together ever after.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.9 + rand::random::<f64>() * 0.2)
}

/// What the visitor was last told.
struct Told {
    status: Option<Status>,
    rank: Option<u64>,
    at: Instant,
}

/// The stream's last read of its own status.
struct LastRead {
    status: Status,
    rank: Option<u64>,
    /// The hub's tick just before the read: admissions are counted from
    /// the first tick after it.
    seq: u64,
    /// `admitted_total` at that first tick after the read, once known.
    base: Option<u64>,
}

/// Why the stream woke.
enum Wake {
    Closing,
    Admission,
    Tick,
    Timer,
}

struct Stream {
    state: Arc<AppState>,
    event: EventId,
    member: String,
    lang: Lang,
    return_path: String,
    sub: Subscription,
    closing: watch::Receiver<bool>,
    _permit: StreamPermit,
    told: Told,
    read: LastRead,
    phase: Option<Phase>,
    /// Within a third of the idle timeout: the stream's reads keep the
    /// place alive, as polls would.
    presence_every: Duration,
    next_read: Instant,
    next_estimate: Instant,
    next_beat: Instant,
    ends_at: Instant,
    /// A message ready to go (the first one).
    out: Option<Bytes>,
    finished: bool,
}

impl Stream {
    /// How this stream's positions are told.
    fn answer(&self) -> Answer<'_> {
        Answer {
            lang: self.lang,
            return_path: &self.return_path,
        }
    }

    async fn open(
        state: &Arc<AppState>,
        event: &EventId,
        member: String,
        lang: Lang,
        return_path: String,
        permit: StreamPermit,
    ) -> Self {
        let sub = hub::subscribe(state, event);
        let now = Instant::now();
        let (presence_every, phase) = match state.event(event) {
            Some(rt) => (
                (rt.config.queue_idle_timeout / 3)
                    .clamp(Duration::from_secs(2), Duration::from_secs(60)),
                Some(state.phase_of(&rt)),
            ),
            None => (Duration::from_secs(60), None),
        };
        let mut stream = Self {
            state: state.clone(),
            event: event.clone(),
            member,
            lang,
            return_path,
            sub,
            closing: state.push.closing(),
            _permit: permit,
            told: Told {
                status: None,
                rank: None,
                at: now,
            },
            read: LastRead {
                status: Status::None,
                rank: None,
                seq: 0,
                base: None,
            },
            phase,
            presence_every,
            next_read: now,
            next_estimate: now + Duration::from_secs(3600),
            next_beat: now + HEARTBEAT,
            ends_at: now + LIFETIME + LIFETIME_SPREAD.mul_f64(rand::random::<f64>()),
            out: None,
            finished: false,
        };
        // The first message: the current position, read now.
        let first = stream.read_now().await;
        stream.out = Some(match first {
            Some(m) => {
                let mut b = format!("retry: {RETRY_MS}\n").into_bytes();
                b.extend_from_slice(&m);
                Bytes::from(b)
            }
            None => Bytes::from(format!("retry: {RETRY_MS}\n\n")),
        });
        stream
    }

    /// The next piece of the body, or `None` to end the stream.
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        if let Some(b) = self.out.take() {
            return Some((Ok(b), self));
        }
        loop {
            if self.finished {
                return None;
            }
            let wake_at = self
                .next_read
                .min(self.next_estimate)
                .min(self.next_beat)
                .min(self.ends_at);
            let wake = {
                let admission = self.sub.wake.clone();
                tokio::select! {
                    biased;
                    _ = self.closing.wait_for(|c| *c) => Wake::Closing,
                    () = admission.notified() => Wake::Admission,
                    changed = self.sub.tick.changed() => match changed {
                        Ok(()) => Wake::Tick,
                        Err(_) => Wake::Closing,
                    },
                    () = tokio::time::sleep_until(wake_at) => Wake::Timer,
                }
            };
            let out = match wake {
                Wake::Closing => return None,
                Wake::Admission => self.read_now().await,
                Wake::Tick => self.on_tick(),
                Wake::Timer => self.on_timer().await,
            };
            if let Some(b) = out {
                return Some((Ok(b), self));
            }
        }
    }

    async fn on_timer(&mut self) -> Option<Bytes> {
        let now = Instant::now();
        if now >= self.ends_at {
            self.finished = true;
            return None;
        }
        if now >= self.next_read
            && let Some(m) = self.read_now().await
        {
            return Some(m);
        }
        if now >= self.next_estimate
            && let Some(m) = self.estimate(Tell::IfLower)
        {
            return Some(m);
        }
        if now >= self.next_beat {
            self.next_beat = now + HEARTBEAT;
            metrics::counter!("anteroom_stream_messages_total", "kind" => "heartbeat").increment(1);
            return Some(Bytes::from_static(b":\n\n"));
        }
        None
    }

    /// The visitor's status from the store (or the drain records), as a
    /// poll reads it (and marks the visitor present).
    async fn read_now(&mut self) -> Option<Bytes> {
        let Some(rt) = self.state.event(&self.event) else {
            self.finished = true;
            return None;
        };
        let before = self.sub.latest();
        let (p, _) = Queue::new(&self.state, &rt)
            .position(&self.member, Read::Poll, self.answer())
            .await;
        metrics::counter!("anteroom_stream_reads_total").increment(1);
        self.read = LastRead {
            status: p.status,
            rank: p.rank,
            seq: before.seq,
            base: None,
        };
        // Admissions take the best-ranked first: past `r + 1` more the
        // visitor has been reached, sooner if visitors ahead leave (a
        // release, an idle-out, an eviction), which the hub does not count.
        // So the stream reads again a quarter of the way short of that, and
        // no later than when it would come within `NEAR_RANK` of the front,
        // where it reads every second anyway: a few reads over a long wait
        // (each one short by a quarter of what is left), the admission told
        // at once unless more than a quarter of those ahead left between
        // two reads. Counted from before the read, so the mark is never
        // late by the read itself.
        let mark = match (has_rank(p.status), p.rank) {
            (true, Some(r)) => {
                let short = r.saturating_sub(r / 4);
                let reach = if r >= NEAR_RANK {
                    short.min(r - NEAR_RANK)
                } else {
                    short
                };
                Some(
                    before
                        .admitted_total
                        .saturating_add(reach)
                        .saturating_add(1),
                )
            }
            _ => None,
        };
        self.sub.wake_at(mark);
        let every = match (p.status, p.rank) {
            (Status::Waiting | Status::Paused, Some(r)) if r < NEAR_RANK => FRONT_READ,
            (Status::Draining, _) => DRAINING_READ,
            _ => jittered(self.presence_every),
        };
        self.next_read = Instant::now() + every;
        self.offer(p)
    }

    /// The rank now, derived from the last read and the admissions since
    /// (never below the truth's floor: admissions are the only departures
    /// counted, so the rank told can only be too high, never too low).
    fn derived_rank(&mut self) -> Option<u64> {
        let read_rank = self.read.rank?;
        let tick = self.sub.latest();
        if self.read.base.is_none() {
            self.read.base = tick.admitted_after(self.read.seq);
        }
        let admitted = self
            .read
            .base
            .map_or(0, |b| tick.admitted_total.saturating_sub(b));
        Some(read_rank.saturating_sub(admitted))
    }

    /// Tells the derived rank, at the rank's cadence: only a lower one, or
    /// with [`Tell::Now`] the position whatever changed (a phase change).
    fn estimate(&mut self, tell: Tell) -> Option<Bytes> {
        let now = Instant::now();
        let Some(rank) = self.derived_rank().filter(|_| has_rank(self.read.status)) else {
            self.next_estimate = now + Duration::from_secs(3600);
            return None;
        };
        self.next_estimate = now + rank_cadence(rank);
        let lower = self.told.rank.is_none_or(|told| rank < told);
        if tell == Tell::IfLower && !lower {
            return None;
        }
        let rt = self.state.event(&self.event)?;
        let rank = self.told.rank.map_or(rank, |told| rank.min(told));
        let waiting = MemberState::Waiting {
            rank,
            queue_length: self.sub.latest().waiting.max(rank.saturating_add(1)),
        };
        let p = QueuePosition::build(&self.state, &rt, &self.member, &waiting, self.answer());
        self.offer(p)
    }

    /// The hub's tick changed phase (pause, resume, close, opening) or
    /// the event went away.
    fn on_tick(&mut self) -> Option<Bytes> {
        let tick = *self.sub.tick.borrow_and_update();
        if tick.gone {
            self.finished = true;
            return None;
        }
        if tick.phase.is_none() || tick.phase == self.phase {
            return None;
        }
        let opening = matches!(self.phase, Some(Phase::Scheduled | Phase::PreQueue));
        self.phase = tick.phase;
        if has_rank(self.read.status) && !opening {
            // Paused, resumed or closed: the place is known, only the
            // status changes; told at once from what the stream knows.
            return self.estimate(Tell::Now);
        }
        // The queue opens (pre-window ranks are shuffled: they must be
        // read), or the visitor's state is not one a phase can change:
        // read soon, spread so that every stream does not read at once.
        let soon = Instant::now() + Duration::from_secs(1).mul_f64(rand::random::<f64>());
        self.next_read = self.next_read.min(soon);
        None
    }

    /// `p` as the next message, if it tells the visitor something new and
    /// a rank change is within its cadence (else it is told at the
    /// estimate's next turn).
    fn offer(&mut self, p: QueuePosition) -> Option<Bytes> {
        let now = Instant::now();
        let same_status = self.told.status == Some(p.status);
        if same_status {
            if p.rank == self.told.rank || !has_rank(p.status) {
                return None;
            }
            // Rank moves only down; a higher one (a read after a too-kind
            // derivation, which the marks rule out) is not told.
            if let (Some(new), Some(told)) = (p.rank, self.told.rank)
                && new > told
            {
                return None;
            }
            let due = self.told.at + rank_cadence(p.rank.unwrap_or(0));
            if now < due {
                self.next_estimate = self.next_estimate.min(due);
                return None;
            }
        }
        if ends(p.status) {
            self.finished = true;
        }
        self.told = Told {
            status: Some(p.status),
            rank: p.rank,
            at: now,
        };
        self.next_beat = now + HEARTBEAT;
        self.next_estimate = now + p.rank.map_or(Duration::from_secs(3600), rank_cadence);
        metrics::counter!("anteroom_stream_messages_total", "kind" => "position").increment(1);
        Some(message(&p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_changes_are_told_less_often_further_back() {
        assert_eq!(rank_cadence(0), Duration::from_secs(1));
        assert_eq!(rank_cadence(NEAR_RANK - 1), Duration::from_secs(1));
        assert!(rank_cadence(NEAR_RANK) > rank_cadence(0));
        assert!(rank_cadence(50_000) >= rank_cadence(5_000));
    }

    #[test]
    fn a_message_is_one_event_with_one_data_line() {
        let json = r#"{"status":"WAITING"}"#;
        let text = format!("event: position\ndata: {json}\n\n");
        assert_eq!(text.matches('\n').count(), 3);
        // serde_json never writes a raw newline inside a string.
        let s = serde_json::to_string("a\nb").unwrap();
        assert!(!s.contains('\n'));
    }
}
