//! One virtual visitor's life: enter (solving proof-of-work when asked), wait
//! polling as told, redeem the token, browse the origin through the gate with
//! the pass, then release or abandon. Everything seen goes into its record.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use reqwest::{Client, RequestBuilder, StatusCode, header::HeaderMap};
use tokio::{sync::Semaphore, time::Instant};

use super::wire::{ChallengeAnswer, Cookies, ErrorBody, QueuePosition, retry_after};
use crate::report::VisitorRecord;

/// What all visitors share: the client, the target, and the live counters.
pub struct Shared {
    pub client: Client,
    /// Base URL of Anteroom's public listener, without a trailing `/`.
    pub base: String,
    pub event: String,
    /// Bounds requests in flight, hence open connections.
    pub permits: Semaphore,
    pub start: Instant,
    pub fixed_poll: Option<Duration>,
    pub browse: Duration,
    pub browse_path: String,
    pub live: Live,
}

/// Counters the timeline sampler reads while the crowd runs.
#[derive(Default)]
pub struct Live {
    pub waiting: AtomicU64,
    pub active: AtomicU64,
    pub max_active: AtomicU64,
    pub admitted: AtomicU64,
}

/// Who this visitor is.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub id: u64,
    pub bot: bool,
    /// Leaves without releasing, so the slot is freed only by idling out.
    pub abandon: bool,
}

/// An answered request.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
    sent: u64,
    received: u64,
}

/// Gives up after this many failed requests in a row.
const MAX_FAILURES: u32 = 10;

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}?eventId={}", self.base, self.event)
    }

    fn request(&self, req: RequestBuilder, plan: Plan, cookies: &Cookies) -> RequestBuilder {
        // A benchmarking-range address (RFC 2544) per visitor: only a header,
        // so per-IP limits see distinct clients when loopback is a trusted proxy.
        let ip = format!("198.18.{}.{}", (plan.id >> 8) & 0xff, plan.id & 0xff);
        let mut req = req
            .header("x-forwarded-for", ip)
            .header("accept", "application/json");
        req = if plan.bot {
            req.header("user-agent", "python-requests/2.31.0")
        } else {
            req.header(
                "user-agent",
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
            )
            .header("accept-language", "en-US,en;q=0.9")
        };
        match cookies.header() {
            Some(c) => req.header("cookie", c),
            None => req,
        }
    }

    async fn send(&self, req: RequestBuilder) -> Result<Answer, String> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| "closed".to_owned())?;
        let sent = self.now();
        let resp = req.send().await.map_err(|e| transport_kind(&e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.map_err(|e| transport_kind(&e))?;
        Ok(Answer {
            status,
            headers,
            body,
            sent,
            received: self.now(),
        })
    }
}

fn transport_kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        "transport".into()
    }
}

/// `op_status_code`, e.g. `enter_403_blocked`, for the errors table.
fn error_kind(op: &str, a: &Answer) -> String {
    match serde_json::from_slice::<ErrorBody>(&a.body) {
        Ok(e) => format!("{op}_{}_{}", a.status.as_u16(), e.error),
        Err(_) => format!("{op}_{}", a.status.as_u16()),
    }
}

/// Decrements a live counter when dropped, so a visitor cut off by the run's
/// deadline does not stay counted as waiting or active.
struct Gauge<'a>(&'a AtomicU64);

impl<'a> Gauge<'a> {
    fn up(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Gauge(counter)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Lives one visitor's life, recording into `rec` as it goes (so a visitor
/// cut off by the deadline still leaves what it saw).
pub async fn visit(shared: &Shared, plan: Plan, rec: &mut VisitorRecord) {
    rec.bot = plan.bot;
    let mut cookies = Cookies::default();
    let Some(first) = enter(shared, plan, &mut cookies, rec).await else {
        return;
    };
    rec.pre_open = first.status == "NOT_OPEN";
    let Some(token) = wait(shared, plan, &mut cookies, rec, first).await else {
        return;
    };
    if let Some(token) = token
        && !redeem(shared, plan, &mut cookies, rec, &token).await
    {
        return;
    }
    browse(shared, plan, &mut cookies, rec).await;
    if !plan.abandon {
        let req = shared.request(
            shared.client.post(shared.url("/api/queue/release")),
            plan,
            &cookies,
        );
        match shared.send(req).await {
            Ok(a) if a.status.is_success() => rec.released = true,
            Ok(a) => rec.errors.push(error_kind("release", &a)),
            Err(e) => rec.errors.push(format!("release_{e}")),
        }
    }
}

/// Joins the queue, answering proof-of-work challenges; `None` when refused.
async fn enter(
    shared: &Shared,
    plan: Plan,
    cookies: &mut Cookies,
    rec: &mut VisitorRecord,
) -> Option<QueuePosition> {
    let mut answer: Option<serde_json::Value> = None;
    let mut failures = 0;
    while failures < MAX_FAILURES {
        let mut req = shared.request(
            shared.client.post(shared.url("/api/queue/enter")),
            plan,
            cookies,
        );
        if let Some(a) = &answer {
            req = req.json(a);
        }
        let a = match shared.send(req).await {
            Ok(a) => a,
            Err(e) => {
                rec.errors.push(format!("enter_{e}"));
                failures += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        rec.enter_us.push(a.received - a.sent);
        cookies.absorb(&a.headers);
        match a.status.as_u16() {
            200 => match serde_json::from_slice::<QueuePosition>(&a.body) {
                Ok(pos) => {
                    rec.arrival = Some((a.sent, a.received));
                    return Some(pos);
                }
                Err(_) => {
                    rec.errors.push("enter_bad_body".into());
                    return None;
                }
            },
            401 => {
                let Ok(c) = serde_json::from_slice::<ChallengeAnswer>(&a.body) else {
                    rec.errors.push(error_kind("enter", &a));
                    return None;
                };
                let (challenge, difficulty) = (c.challenge.challenge, c.challenge.difficulty);
                let solving = challenge.clone();
                // Hashing is CPU work: keep it off the reactor threads.
                let nonce = tokio::task::spawn_blocking(move || {
                    anteroom_core::pow::solve(&solving, difficulty)
                })
                .await
                .ok()?;
                rec.challenges += 1;
                answer = Some(serde_json::json!({ "challenge": challenge, "nonce": nonce }));
                failures += 1;
            }
            429 | 503 => {
                rec.errors.push(error_kind("enter", &a));
                failures += 1;
                tokio::time::sleep(Duration::from_secs(retry_after(&a.headers).unwrap_or(1))).await;
            }
            _ => {
                rec.errors.push(error_kind("enter", &a));
                return None;
            }
        }
    }
    None
}

/// Polls until admitted. `Some(Some(token))` to redeem, `Some(None)` when
/// already active, `None` when the visitor got no place.
async fn wait(
    shared: &Shared,
    plan: Plan,
    cookies: &mut Cookies,
    rec: &mut VisitorRecord,
    mut pos: QueuePosition,
) -> Option<Option<String>> {
    let _waiting = Gauge::up(&shared.live.waiting);
    let (mut sent, mut received) = rec.arrival.unwrap_or_default();
    let mut failures = 0;
    loop {
        match pos.status.as_str() {
            "ADMITTED" | "ACTIVE" => {
                rec.admitted_seen = Some(received);
                shared.live.admitted.fetch_add(1, Ordering::Relaxed);
                return Some(pos.token);
            }
            "WAITING" | "PAUSED" | "NOT_OPEN" | "DRAINING" => {
                rec.last_waiting_sent = Some(sent);
                if rec.first_eta.is_none() {
                    rec.first_eta = pos.estimated_wait_seconds.map(|eta| (received, eta));
                }
            }
            other => {
                rec.errors.push(format!("status_{}", other.to_lowercase()));
                return None;
            }
        }
        let told = Duration::from_millis(pos.poll_after_ms.unwrap_or(1000));
        // Up to 10% jitter, as API.md asks of clients.
        let jittered = told.mul_f64(1.0 + rand::random::<f64>() * 0.1);
        tokio::time::sleep(shared.fixed_poll.unwrap_or(jittered)).await;
        let req = shared.request(
            shared.client.get(shared.url("/api/queue/position")),
            plan,
            cookies,
        );
        rec.polls += 1;
        let a = match shared.send(req).await {
            Ok(a) => a,
            Err(e) => {
                rec.errors.push(format!("position_{e}"));
                failures += 1;
                if failures >= MAX_FAILURES {
                    return None;
                }
                continue;
            }
        };
        rec.position_us.push(a.received - a.sent);
        cookies.absorb(&a.headers);
        match (
            a.status.as_u16(),
            serde_json::from_slice::<QueuePosition>(&a.body),
        ) {
            (200, Ok(next)) => {
                (pos, sent, received, failures) = (next, a.sent, a.received, 0);
            }
            (status, _) => {
                rec.errors.push(error_kind("position", &a));
                failures += 1;
                if failures >= MAX_FAILURES || !(status == 429 || status >= 500) {
                    return None;
                }
                let back_off = retry_after(&a.headers).unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(back_off)).await;
            }
        }
    }
}

/// Exchanges the admission token for a pass; false when refused.
async fn redeem(
    shared: &Shared,
    plan: Plan,
    cookies: &mut Cookies,
    rec: &mut VisitorRecord,
    token: &str,
) -> bool {
    let req = shared.client.post(shared.url("/api/queue/redeem"));
    let req = shared
        .request(req, plan, cookies)
        .json(&serde_json::json!({ "token": token }));
    match shared.send(req).await {
        Ok(a) if a.status == StatusCode::OK => {
            rec.redeem_us.push(a.received - a.sent);
            cookies.absorb(&a.headers);
            if cookies.pass.is_none() {
                // Fall back to the body's pass when no cookie was set.
                cookies.pass = serde_json::from_slice::<serde_json::Value>(&a.body)
                    .ok()
                    .and_then(|v| v.get("pass")?.as_str().map(str::to_owned));
            }
            rec.redeemed = true;
            true
        }
        Ok(a) => {
            rec.redeem_us.push(a.received - a.sent);
            rec.errors.push(error_kind("redeem", &a));
            false
        }
        Err(e) => {
            rec.errors.push(format!("redeem_{e}"));
            false
        }
    }
}

/// A few requests to the origin through the gate, spread over `--browse`.
async fn browse(shared: &Shared, plan: Plan, cookies: &mut Cookies, rec: &mut VisitorRecord) {
    let _active = Gauge::up(&shared.live.active);
    let now_active = shared.live.active.load(Ordering::Relaxed);
    shared
        .live
        .max_active
        .fetch_max(now_active, Ordering::Relaxed);
    const PAGES: u32 = 4;
    let pause = shared.browse / PAGES;
    for _ in 0..PAGES {
        let url = format!("{}{}", shared.base, shared.browse_path);
        let req = shared.request(shared.client.get(url), plan, cookies);
        match shared.send(req).await {
            Ok(a) if a.status.is_success() => cookies.absorb(&a.headers),
            Ok(a) => rec.errors.push(error_kind("browse", &a)),
            Err(e) => rec.errors.push(format!("browse_{e}")),
        }
        tokio::time::sleep(pause).await;
    }
}
