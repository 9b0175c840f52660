//! QueuePosition: what a visitor is told about their place, built from the
//! store's answer, the event's phase and the last stats snapshot.

use anteroom_core::decimal;
use anteroom_core::eta::{self, Estimate, Lang};
use anteroom_core::phase::{Phase, phase};
use anteroom_core::token::{Claims, TokenKind, session_tag};
use anteroom_store::MemberState;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;

use crate::clock::rfc3339_ms;
use crate::state::{AppState, EventRuntime};

/// Where the visitor stands (API.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    NotOpen,
    Waiting,
    Admitted,
    Active,
    None,
    Paused,
    Closed,
    Draining,
}

/// The QueuePosition JSON: every field always present, `null` when unknown.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePosition {
    pub event_id: String,
    pub status: Status,
    /// Visitors ahead (0 = next); only for WAITING and PAUSED.
    pub rank: Option<u64>,
    /// `rank + 1`; only for WAITING and PAUSED.
    pub position: Option<u64>,
    pub queue_length: u64,
    pub estimated_wait_seconds: Option<u64>,
    /// ISO 8601 duration, e.g. `PT6M12S`.
    pub estimated_wait: Option<String>,
    pub display: Option<String>,
    pub poll_after_ms: u64,
    /// The admission token, for ADMITTED.
    pub token: Option<String>,
    /// Where a browser redeems the token, for ADMITTED.
    pub redirect: Option<String>,
    pub timestamp: String,
    /// RFC 3339 time the event opens, for NOT_OPEN when the event has
    /// `opens_at`: the page counts down to it against `timestamp`, the
    /// server's clock, so a wrong client clock does not skew the countdown.
    pub opens_at: Option<String>,
    /// RFC 3339 time the pre-window opens (`opens_at - pre_window`), for
    /// NOT_OPEN when the event has `opens_at`: every join from then until
    /// `opensAt` gets a shuffled place. Before it, enter does not join, so a
    /// client that called enter earlier calls it again once this time comes
    /// (the waiting page does, spread over the pre-window's first seconds).
    pub pre_window_starts_at: Option<String>,
}

/// How one request wants its QueuePosition told: the visitor's language
/// (display strings) and the same-site path the redeem link returns to.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'r> {
    pub lang: Lang,
    pub return_path: &'r str,
}

/// Poll cadence outside the WAITING status, in ms.
const IDLE_POLL_MS: u64 = 5_000;

impl QueuePosition {
    /// `now` is the request's one reading of the node's clock (each read
    /// is a call into the vDSO, and a poll read it five times).
    fn bare(rt: &EventRuntime, now: i64, status: Status, poll_after_ms: u64) -> Self {
        Self {
            event_id: rt.id().as_str().to_owned(),
            status,
            rank: None,
            position: None,
            queue_length: rt.live.stats_and_admin().0.waiting,
            estimated_wait_seconds: None,
            estimated_wait: None,
            display: None,
            poll_after_ms,
            token: None,
            redirect: None,
            timestamp: rfc3339_ms(now),
            opens_at: None,
            pre_window_starts_at: None,
        }
    }

    /// The answer while the store cannot be reached for this event.
    pub fn draining(state: &AppState, rt: &EventRuntime) -> Self {
        Self::bare(rt, state.now_ms(), Status::Draining, IDLE_POLL_MS)
    }

    /// The position of `member` whose store state is `member_state`.
    pub fn build(
        state: &AppState,
        rt: &EventRuntime,
        member: &str,
        member_state: &MemberState,
        answer: Answer<'_>,
    ) -> Self {
        let Answer { lang, return_path } = answer;
        let now = state.now_ms();
        let (_, admin) = rt.live.stats_and_admin();
        let pre_window = i64::try_from(rt.config.pre_window.as_millis()).unwrap_or(i64::MAX);
        let phase = phase(now, rt.config.opens_at_ms, pre_window, admin);
        match (phase, member_state) {
            (Phase::Closed, _) => Self::bare(rt, now, Status::Closed, IDLE_POLL_MS * 6),
            (
                _,
                MemberState::Admitted {
                    nonce,
                    expires_at_us,
                },
            ) => {
                let mut p = Self::bare(rt, now, Status::Admitted, 1_000);
                let token = admission_token(state, rt, member, *nonce, *expires_at_us, now);
                p.redirect = Some(format!(
                    "/api/queue/redeem?eventId={}&token={}&return={}",
                    rt.id(),
                    token,
                    utf8_percent_encode(return_path, NON_ALPHANUMERIC)
                ));
                p.token = Some(token);
                p
            }
            (_, MemberState::Active { .. }) => Self::bare(rt, now, Status::Active, IDLE_POLL_MS),
            (Phase::Scheduled | Phase::PreQueue, _) => {
                let mut p = Self::bare(rt, now, Status::NotOpen, IDLE_POLL_MS);
                p.opens_at = rt.config.opens_at_ms.map(rfc3339_ms);
                p.pre_window_starts_at = rt
                    .config
                    .opens_at_ms
                    .map(|opens| rfc3339_ms(opens.saturating_sub(pre_window)));
                p
            }
            (_, MemberState::Waiting { rank, queue_length }) => {
                let status = if phase == Phase::Paused {
                    Status::Paused
                } else {
                    Status::Waiting
                };
                waiting(rt, now, status, *rank, *queue_length, lang)
            }
            (_, MemberState::None) => Self::bare(rt, now, Status::None, IDLE_POLL_MS),
        }
    }

    /// The answer to the enter call that inserted the visitor: a flash
    /// crowd joins within the same second, so its first polls are spread
    /// over `eta::first_poll_ms` instead of following in lockstep (but a
    /// visitor the free slots cover polls as soon as its turn is due).
    pub fn first_poll(mut self, new_join: bool) -> Self {
        if new_join && self.status == Status::Waiting {
            self.poll_after_ms = eta::first_poll_ms(rand::random::<f64>(), self.poll_after_ms);
        }
        self
    }

    /// `Retry-After` in whole seconds, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        self.poll_after_ms.div_ceil(1000).max(1)
    }

    /// [`Self::retry_after_secs`] as a header value: one of a table for
    /// the first minute (every poll's answer carries one, and a number
    /// made into a header value is an allocation), made otherwise.
    pub fn retry_after_value(&self) -> HeaderValue {
        const SECONDS: [&str; 61] = [
            "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
            "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29",
            "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43",
            "44", "45", "46", "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57",
            "58", "59", "60",
        ];
        let secs = self.retry_after_secs();
        match usize::try_from(secs).ok().and_then(|i| SECONDS.get(i)) {
            Some(text) => HeaderValue::from_static(text),
            None => HeaderValue::from(secs),
        }
    }

    /// The answer with `status` and a `Retry-After` header.
    pub fn respond(self, status: StatusCode) -> Response {
        let retry = self.retry_after_value();
        let mut r = json_response(self.to_json());
        *r.status_mut() = status;
        r.headers_mut().insert(header::RETRY_AFTER, retry);
        r
    }

    /// The JSON of [`Serialize`], written by hand: a crowd's every poll is
    /// one, and the derived serializer's generic walk cost several times
    /// this. The unit tests hold the two to the same bytes.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(400);
        let mut json = JsonObject::new(&mut out);
        json.string("eventId", Some(&self.event_id));
        json.raw("status", status_json(self.status));
        json.number("rank", self.rank);
        json.number("position", self.position);
        json.number("queueLength", Some(self.queue_length));
        json.number("estimatedWaitSeconds", self.estimated_wait_seconds);
        json.string("estimatedWait", self.estimated_wait.as_deref());
        json.string("display", self.display.as_deref());
        json.number("pollAfterMs", Some(self.poll_after_ms));
        json.string("token", self.token.as_deref());
        json.string("redirect", self.redirect.as_deref());
        json.string("timestamp", Some(&self.timestamp));
        json.string("opensAt", self.opens_at.as_deref());
        json.string("preWindowStartsAt", self.pre_window_starts_at.as_deref());
        json.end();
        out
    }
}

/// The JSON string of a [`Status`], as its `Serialize` writes it.
fn status_json(status: Status) -> &'static str {
    match status {
        Status::NotOpen => "\"NOT_OPEN\"",
        Status::Waiting => "\"WAITING\"",
        Status::Admitted => "\"ADMITTED\"",
        Status::Active => "\"ACTIVE\"",
        Status::None => "\"NONE\"",
        Status::Paused => "\"PAUSED\"",
        Status::Closed => "\"CLOSED\"",
        Status::Draining => "\"DRAINING\"",
    }
}

/// A `200` with a JSON body written by hand (see [`JsonObject`]).
pub(crate) fn json_response(body: Vec<u8>) -> Response {
    let mut r = Response::new(axum::body::Body::from(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // One visitor's place, or their admission token: never for a cache in
    // front of Anteroom to keep and hand to the next visitor.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A JSON object written field by field, as serde_json writes one
/// (no spaces; `None` as `null`).
pub(crate) struct JsonObject<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> JsonObject<'o> {
    pub(crate) fn new(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn raw(&mut self, key: &str, json: &str) {
        self.key(key);
        self.out.extend_from_slice(json.as_bytes());
    }

    fn number(&mut self, key: &str, n: Option<u64>) {
        self.key(key);
        match n {
            None => self.out.extend_from_slice(b"null"),
            Some(n) => {
                let mut buf = [0u8; decimal::U64_DIGITS];
                self.out.extend_from_slice(decimal::digits(n, &mut buf));
            }
        }
    }

    pub(crate) fn string(&mut self, key: &str, s: Option<&str>) {
        self.key(key);
        match s {
            None => self.out.extend_from_slice(b"null"),
            // Most strings here need no escaping (ids, times, digits);
            // anything else gets serde_json's own (writing to a Vec cannot
            // fail). serde_json escapes exactly `"`, `\\` and controls.
            Some(s) if !needs_escape(s.as_bytes()) => {
                self.out.push(b'"');
                self.out.extend_from_slice(s.as_bytes());
                self.out.push(b'"');
            }
            Some(s) => {
                let _ = serde_json::to_writer(&mut *self.out, s);
            }
        }
    }

    pub(crate) fn end(self) {
        self.out.push(b'}');
    }
}

/// Whether serde_json would escape any byte of `s`. Every byte is looked
/// at, without an early exit, so the compiler checks many at once: the
/// strings are short and almost never need it.
fn needs_escape(s: &[u8]) -> bool {
    s.iter().fold(false, |any, &b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

fn waiting(
    rt: &EventRuntime,
    now: i64,
    status: Status,
    rank: u64,
    len: u64,
    lang: Lang,
) -> QueuePosition {
    // The rate is learnt from the refreshed snapshots and smoothed so that a
    // steady rate never raises an estimate (state::admission::eta); a poll costs
    // the store's rank lookup plus this cached read.
    // No estimate yet (the slots' turnover is not known): the next poll is
    // timed on the soonest the turn could come, not every 5 s for the crowd.
    let (estimate, poll_basis): (Option<Estimate>, Option<Estimate>) = if status == Status::Waiting
    {
        let feed = crate::locks::lock(&rt.live.admission.eta);
        let e = feed.estimate(now, rank);
        (e, e.or_else(|| feed.poll_basis(rank)))
    } else {
        (None, None)
    };
    let jitter = rand::random::<f64>();
    let mut p = QueuePosition::bare(
        rt,
        now,
        status,
        eta::poll_after_ms(rank, poll_basis, jitter),
    );
    p.rank = Some(rank);
    p.position = Some(rank.saturating_add(1));
    p.queue_length = len;
    p.estimated_wait_seconds = estimate.map(|e| e.seconds);
    p.estimated_wait = estimate.map(|e| eta::iso8601(e.seconds));
    p.display = Some(if status == Status::Paused {
        eta::display_paused(lang)
    } else {
        eta::display(estimate, lang)
    });
    p
}

/// Signs the admission token for an outstanding admission: same nonce and
/// expiry as the store holds, so redeeming it consumes exactly that nonce.
///
/// "Issued at" is the admission itself (the expiry less `token_ttl`), not
/// this poll: the token is then the same on every poll, and a client can
/// tell how long its admission waited before it learnt of it. A `token_ttl`
/// changed since the admission can only move that instant, never past now.
fn admission_token(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    nonce: [u8; 16],
    expires_at_us: i64,
    now_ms: i64,
) -> String {
    state.keyring.sign(&Claims {
        kind: TokenKind::Admission,
        event: rt.id().as_str().to_owned(),
        session_tag: session_tag(member),
        issued_at_ms: expires_at_us
            .saturating_sub(i64::try_from(rt.config.token_ttl.as_micros()).unwrap_or(i64::MAX))
            .div_euclid(1000)
            .min(now_ms),
        expires_at_ms: expires_at_us.div_euclid(1000),
        nonce,
        difficulty: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STATUSES: [Status; 8] = [
        Status::NotOpen,
        Status::Waiting,
        Status::Admitted,
        Status::Active,
        Status::None,
        Status::Paused,
        Status::Closed,
        Status::Draining,
    ];

    fn position(
        status: Status,
        numbers: [Option<u64>; 5],
        strings: [Option<String>; 6],
    ) -> QueuePosition {
        let [rank, position, queue_length, wait, poll] = numbers;
        let [
            estimated_wait,
            display,
            token,
            redirect,
            opens_at,
            pre_window,
        ] = strings;
        QueuePosition {
            event_id: display.clone().unwrap_or_default(),
            status,
            rank,
            position,
            queue_length: queue_length.unwrap_or(0),
            estimated_wait_seconds: wait,
            estimated_wait,
            display,
            poll_after_ms: poll.unwrap_or(u64::MAX),
            token,
            redirect,
            timestamp: rfc3339_ms(1_800_000_000_123),
            opens_at,
            pre_window_starts_at: pre_window,
        }
    }

    proptest! {
        /// The table's `Retry-After` is the number's own text, at every
        /// poll interval, in the table's range and past it.
        #[test]
        fn retry_after_is_the_seconds_text(poll in prop_oneof![0u64..70_000, any::<u64>()]) {
            let p = position(Status::Waiting, [None, None, None, None, Some(poll)], Default::default());
            let value = p.retry_after_value();
            prop_assert_eq!(value.to_str().unwrap(), p.retry_after_secs().to_string());
        }
    }

    #[test]
    fn the_hand_written_json_is_the_derived_serializers_byte_for_byte() {
        for status in STATUSES {
            let all_null = position(status, [None; 5], Default::default());
            assert_eq!(
                String::from_utf8(all_null.to_json()).unwrap(),
                serde_json::to_string(&all_null).unwrap()
            );
        }
    }

    proptest! {
        #[test]
        fn any_position_writes_the_same_json_both_ways(
            status in 0..STATUSES.len(),
            numbers in proptest::array::uniform5(proptest::option::of(any::<u64>())),
            strings in proptest::array::uniform6(proptest::option::of(
                // Quotes, backslashes, control characters and non-ASCII.
                "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é…\u{2028}\u{1f600}]{0,40}"
            )),
        ) {
            let p = position(STATUSES[status], numbers, strings);
            prop_assert_eq!(
                String::from_utf8(p.to_json()).unwrap(),
                serde_json::to_string(&p).unwrap()
            );
        }
    }
}
