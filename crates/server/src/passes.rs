//! Passes: issuing them at redeem, checking them locally at the gate, and the
//! revocation cache that makes a released, evicted or expired session's pass
//! stop working on every node within about a second.
//!
//! Architecture invariant: checking a pass never waits on the store. The
//! revocation cache is refreshed in the background and kept as it is while
//! the store is unreachable, so admitted visitors are never locked out by an
//! outage (`fault_redis::redis_killed_mid_event_drains_then_resumes`).
//!
//! The `anteroom_pass` cookie holds one pass per event, joined by `~` (a
//! character the base64url token alphabet never uses).

use std::time::Duration;

use std::cell::RefCell;

use anteroom_core::token::{Claims, Expect, Keyring, Recent, TokenError, TokenKind};
use anteroom_store::EventId;
use rand::RngCore;

use axum::http::{HeaderMap, HeaderValue};

use crate::locks::{lock, read, write};
use crate::proxy::{SessionEnd, SessionWatch};
use crate::state::{AppState, EventRuntime};

/// At most this many passes are kept in one cookie (one per event).
const MAX_PASSES: usize = 8;

/// Passes each thread verified lately (see [`Recent`]): a session's
/// requests present the same pass, mostly on one kept-alive connection and
/// so on one event loop, and its HMAC and session hash are the largest part
/// of a gated request. Slots, not a map, so a crowd's passes replace one
/// another in bounded memory: about 300 bytes a slot once used, 1.2 MiB a
/// thread when all are. Enough that most of a few thousand sessions active
/// on one event loop keep theirs between two pages.
const RECENT_PASSES: usize = 4096;

thread_local! {
    static RECENT: RefCell<Memo> = RefCell::new(Memo {
        recent: Recent::new(RECENT_PASSES),
        counted: (0, 0),
    });
}

/// A thread's memo, and how much of its counts the shared metric holds.
struct Memo {
    recent: Recent,
    counted: (u64, u64),
}

/// A thread adds its memo's counts to `anteroom_pass_checks_total` after
/// this many checks: a shared counter written on every gated request would
/// be a cache line the event loops hand back and forth.
const COUNT_EVERY: u64 = 64;

impl Memo {
    fn count(&mut self) {
        let (hits, misses) = self.recent.counts();
        let (counted_hits, counted_misses) = self.counted;
        if hits + misses >= counted_hits + counted_misses + COUNT_EVERY {
            crate::metrics::PASS_CHECKS.increment("remembered", hits - counted_hits);
            crate::metrics::PASS_CHECKS.increment("opened", misses - counted_misses);
            self.counted = (hits, misses);
        }
    }
}

use crate::config::REVOCATION_MARGIN;

/// How long this node remembers a revocation: past the life of any pass
/// issued before it. That is `pass_ttl`, or longer: while the store cannot
/// say whether a session goes on (it failed, or the event drains), the
/// gate honours a pass that ran out until `session_idle_timeout` after its
/// issue, and never past `session_ttl` from the session's start. Kept only
/// a pass life, a released session's old pass worked again in an outage
/// once its revocation was forgotten, and was renewed on every request
/// until the store came back.
fn revocation_keep(config: &crate::config::EventConfig) -> Duration {
    config
        .pass_ttl
        .max(outage_honour(config))
        .saturating_add(REVOCATION_MARGIN)
}

/// How long after its issue a pass that ran out is honoured while the
/// store cannot say whether its session goes on: `session_idle_timeout`
/// (the issue moved the session's end that far), never past
/// `session_ttl`, and never longer than the store keeps revocations (less
/// [`REVOCATION_MARGIN`]): a node started meanwhile reads back only that
/// much, and would honour a released session's old pass again.
pub(crate) fn outage_honour(config: &crate::config::EventConfig) -> Duration {
    let retention =
        Duration::from_micros(u64::try_from(anteroom_store::REVOCATION_RETENTION_US).unwrap_or(0));
    config
        .session_idle_timeout
        .min(config.session_ttl)
        .min(retention.saturating_sub(REVOCATION_MARGIN))
}

/// A session start further ahead of a node's clock than this is not
/// believed (nodes' clocks and the store's disagree by far less).
const MAX_START_AHEAD_US: i64 = 60_000_000;

/// What the gate found in the pass cookie for one event.
#[derive(Debug)]
pub enum PassCheck {
    /// A valid pass; `renew` once more than half its life is used.
    Valid {
        claims: Claims,
        session_start_us: i64,
        renew: bool,
    },
    /// A genuine pass of this session that has expired (the session may still
    /// be active: the gate asks the store before queueing the visitor).
    Expired {
        claims: Claims,
        session_start_us: i64,
    },
    /// No usable pass (absent, forged, another session's, revoked, or its
    /// session is past `session_ttl`).
    Missing,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Signs a pass for the session whose [`session_tag`] is `tag` (the
/// member's: a caller that verified a token for the member passes the tag
/// it carries, not hashed again) that started at `session_start_us`
/// (canonical), valid for `pass_ttl` but never past the session's end: its
/// absolute lifetime, or its idle end if nothing renews it.
///
/// A pass's nonce is not consumed anywhere, so its first 8 bytes carry the
/// session start (big-endian µs) and the rest stays random: the signature
/// makes the start unforgeable, so every node can tell sessions of one
/// member apart and cap a session at `start + session_ttl` without a store
/// read.
pub fn issue(
    keyring: &Keyring,
    rt: &EventRuntime,
    tag: [u8; 16],
    now_ms: i64,
    session_start_us: i64,
) -> (String, i64) {
    let session_end_ms =
        crate::admission::lifecycle::session_end_us(rt, session_start_us.div_euclid(1000), now_ms)
            .div_euclid(1000);
    let expires_at_ms = now_ms
        .saturating_add(ms(rt.config.pass_ttl))
        .min(session_end_ms);
    let mut nonce = [0u8; 16];
    rand::rng().fill_bytes(&mut nonce[8..]);
    nonce[..8].copy_from_slice(&session_start_us.to_be_bytes());
    let claims = Claims {
        kind: TokenKind::Pass,
        event: rt.id().as_str().to_owned(),
        session_tag: tag,
        issued_at_ms: now_ms,
        expires_at_ms,
        nonce,
        difficulty: 0,
    };
    (keyring.sign(&claims), expires_at_ms)
}

/// The session start (canonical µs) carried by a pass. A start further
/// ahead of this node's clock than any skew (a pass from an older format)
/// counts as the pass's issue time, the latest a session can have started.
/// A start however far back is kept as it is: its session has ended, and
/// [`check`] says so by its end. Taken for the issue time instead, a pass
/// renewed just before its session's end began a second lifetime, which an
/// outage (that honours an expired pass) let it live in full.
pub fn session_start_us(claims: &Claims, now_ms: i64) -> i64 {
    let mut start = [0u8; 8];
    start.copy_from_slice(&claims.nonce[..8]);
    let start = i64::from_be_bytes(start);
    if start
        <= now_ms
            .saturating_mul(1000)
            .saturating_add(MAX_START_AHEAD_US)
    {
        start
    } else {
        claims.issued_at_ms.saturating_mul(1000)
    }
}

/// When a session that started at `session_start_us` ends at the latest
/// (`session_ttl` after its start), in node ms.
pub fn session_hard_end_ms(rt: &EventRuntime, session_start_us: i64) -> i64 {
    hard_end_ms(&rt.config, session_start_us)
}

fn hard_end_ms(config: &crate::config::EventConfig, session_start_us: i64) -> i64 {
    session_start_us
        .div_euclid(1000)
        .saturating_add(ms(config.session_ttl))
}

/// Checks the passes in `cookie` for the event and session; local only.
pub fn check(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    cookie: Option<&str>,
    now_ms: i64,
) -> PassCheck {
    let Some(cookie) = cookie else {
        return PassCheck::Missing;
    };
    let expect = Expect {
        kind: TokenKind::Pass,
        event: rt.id().as_str(),
        session: member,
    };
    // Verified as of the beginning of time so that an expired pass still
    // yields its claims; expiry is judged just below.
    let claims = RECENT.with_borrow_mut(|memo| {
        let claims = cookie.split('~').take(MAX_PASSES).find_map(|part| {
            state
                .keyring
                .verify_recent(&mut memo.recent, part, &expect, i64::MIN)
                .ok()
        });
        memo.count();
        claims
    });
    let Some(claims) = claims else {
        return PassCheck::Missing;
    };
    let session_start_us = session_start_us(&claims, now_ms);
    // A session that started before the event was created as it now runs
    // was a deleted event's: the store forgot it and its revocations, but
    // its pass still bears the same event id and signature.
    if session_start_us < rt.created_us
        || read(&rt.live.revocations).revokes(member, session_start_us)
        || now_ms >= session_hard_end_ms(rt, session_start_us)
    {
        return PassCheck::Missing;
    }
    if now_ms >= claims.expires_at_ms {
        return PassCheck::Expired {
            claims,
            session_start_us,
        };
    }
    let half_life = (claims.expires_at_ms - claims.issued_at_ms) / 2;
    let renew = now_ms - claims.issued_at_ms > half_life;
    PassCheck::Valid {
        claims,
        session_start_us,
        renew,
    }
}

/// The store said the session is gone: refuse its passes on this node now.
/// Not while the event drains: the store may not know yet of sessions this
/// node admitted on its own, which reconcile records later.
pub fn store_says_gone(state: &AppState, rt: &EventRuntime, member: &str, session_start_us: i64) {
    store_says_gone_at(rt, member, session_start_us, state.now_ms());
}

/// [`store_says_gone`] as of node time `now_ms` (for background tasks).
pub fn store_says_gone_at(rt: &EventRuntime, member: &str, session_start_us: i64, now_ms: i64) {
    if rt.live.drain.is_draining() {
        return;
    }
    end_locally(rt, member, session_start_us, now_ms);
}

/// The session was asked to end (a release, the origin's command): refuse
/// its passes on this node now, whether or not the event drains.
pub fn end_here(state: &AppState, rt: &EventRuntime, member: &str, session_start_us: i64) {
    end_locally(rt, member, session_start_us, state.now_ms());
}

fn end_locally(rt: &EventRuntime, member: &str, session_start_us: i64, now_ms: i64) {
    let now_us = now_ms.saturating_mul(1000);
    write(&rt.live.revocations).end_locally(member, session_start_us, now_us);
    metrics::counter!("anteroom_sessions_ended_locally_total", "event" => rt.id().to_string())
        .increment(1);
}

/// One admitted session as an upgraded connection watches it: over once
/// revoked on this node, past its lifetime, or its event gone from this
/// node (see [`crate::proxy::SessionWatch`]).
struct SessionLife {
    live: std::sync::Arc<crate::state::Live>,
    clock: std::sync::Arc<dyn crate::clock::Clock>,
    member: String,
    session_start_us: i64,
    hard_end_ms: i64,
}

impl SessionEnd for SessionLife {
    fn is_over(&self) -> bool {
        self.clock.now_ms() >= self.hard_end_ms
            || self.live.is_gone()
            || read(&self.live.revocations).revokes(&self.member, self.session_start_us)
    }
}

/// The watch an upgraded connection of `member`'s session (started at
/// `session_start_us`) closes by.
pub fn session_watch(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    session_start_us: i64,
) -> SessionWatch {
    SessionWatch::new(SessionLife {
        live: rt.live.clone(),
        clock: state.clock.clone(),
        member: member.to_owned(),
        session_start_us,
        hard_end_ms: session_hard_end_ms(rt, session_start_us),
    })
}

/// The cookie value with the event's pass replaced by `pass` (or removed,
/// with `None`), keeping the passes of other events.
pub fn merge(
    keyring: &Keyring,
    cookie: Option<&str>,
    event: &EventId,
    pass: Option<&str>,
) -> String {
    let others = cookie
        .into_iter()
        .flat_map(|c| c.split('~'))
        .filter(|part| {
            // Only genuine passes of other events are kept; the session is not
            // known here, so a wrong-session answer also means "for this event".
            let expect = Expect {
                kind: TokenKind::Pass,
                event: event.as_str(),
                session: "",
            };
            matches!(
                keyring.verify(part, &expect, i64::MIN),
                Err(TokenError::WrongEvent)
            )
        });
    let mut parts: Vec<&str> = pass.into_iter().chain(others).take(MAX_PASSES).collect();
    parts.dedup();
    parts.join("~")
}

/// `Set-Cookie` for the pass cookie with this event's pass set (or removed).
pub fn cookie(
    state: &AppState,
    rt: &EventRuntime,
    headers: &HeaderMap,
    member: &str,
    pass: Option<&str>,
) -> HeaderValue {
    cookie_over(state, rt, state.server.cookies.pass(headers), member, pass)
}

/// [`cookie`] over the passes' text the request's pass cookie carried
/// (`current`), read before the request went on.
pub fn cookie_over(
    state: &AppState,
    rt: &EventRuntime,
    current: Option<&str>,
    member: &str,
    pass: Option<&str>,
) -> HeaderValue {
    let cookies = &state.server.cookies;
    let passes = merge(&state.keyring, current, rt.id(), pass);
    let value = crate::identity::CookieSettings::pass_value_for(member, &passes);
    // The cookie outlives one pass so an expired pass of a still-active
    // session reaches the gate, which then renews it. It holds the passes
    // of every event the visitor is active in, so it lives as long as the
    // longest session any of them allows: this event's own `session_ttl`
    // dropped another event's longer-lived pass while its session went
    // on, and the visitor was sent to that event's waiting room, told they
    // had access, and sent back, round and round.
    let max_age = if value.is_empty() {
        std::time::Duration::ZERO
    } else {
        state
            .events()
            .iter()
            .map(|e| e.config.session_ttl)
            .fold(rt.config.session_ttl, std::cmp::max)
    };
    cookies
        .pass_cookie(&value, Some(max_age))
        .or_else(|| cookies.pass_cookie("", Some(std::time::Duration::ZERO)))
        .unwrap_or(HeaderValue::from_static(
            "anteroom_pass=; Max-Age=0; Path=/",
        ))
}

/// One refresh of an event's revocation cache from the store.
pub async fn refresh_revocations(
    state: &AppState,
    rt: &EventRuntime,
) -> Result<(), anteroom_store::StoreError> {
    let keep_us = i64::try_from(revocation_keep(&rt.config).as_micros()).unwrap_or(i64::MAX);
    let since = read(&rt.live.revocations).since_us;
    let since = match since {
        Some(s) => s,
        None => state.store.now_us(rt.id()).await?.saturating_sub(keep_us),
    };
    let list = state.store.revocations_since(rt.id(), since).await?;
    let now_us = state.now_ms().saturating_mul(1000);
    let store_ahead_us = lock(&rt.live.policy).store_offset_ms.saturating_mul(1000);
    let mut cache = write(&rt.live.revocations);
    cache.apply(&list, store_ahead_us, now_us.saturating_sub(keep_us));
    if cache.since_us.is_none() {
        cache.since_us = Some(since);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(more: &str) -> crate::config::EventConfig {
        let raw: crate::config::RawEvent = serde_json::from_str(&format!(
            r#"{{"id": "e", "origin": "http://127.0.0.1:9", "paths": ["/e"]{more}}}"#
        ))
        .unwrap();
        crate::config::event_from_raw("test event", &raw).unwrap()
    }

    /// A pass renewed just before its session's end, met again once the
    /// session is a pass's life past it (in an outage, which honours an
    /// expired pass), keeps its session's start and so its end: it was
    /// once taken for a pass of an older format and given its issue time
    /// as a new start, a second lifetime. Only a start ahead of the clock
    /// past any skew, which no pass of this version carries, is replaced.
    #[test]
    fn a_pass_of_a_session_long_over_keeps_its_start_and_its_end() {
        let e = event(r#", "session_ttl": "10m", "pass_ttl": "60s""#);
        let start_ms: i64 = 1_800_000_000_000;
        let issued_ms = start_ms + 600_000 - 30_000;
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&(start_ms * 1000).to_be_bytes());
        let claims = Claims {
            kind: TokenKind::Pass,
            event: "e".into(),
            session_tag: [0; 16],
            issued_at_ms: issued_ms,
            expires_at_ms: issued_ms + 60_000,
            nonce,
            difficulty: 0,
        };
        for now_ms in [
            issued_ms + 1,
            start_ms + 600_000 + 61_000,
            start_ms + 86_400_000,
        ] {
            let start = session_start_us(&claims, now_ms);
            assert_eq!(start, start_ms * 1000, "at {now_ms}");
            assert_eq!(hard_end_ms(&e, start), start_ms + 600_000);
        }
        let mut ahead = claims.clone();
        ahead.nonce[..8].copy_from_slice(&((issued_ms + 3_600_000) * 1000).to_be_bytes());
        assert_eq!(session_start_us(&ahead, issued_ms), issued_ms * 1000);
    }

    /// Sessions idle longer than the store keeps revocations: an outage
    /// honours an old pass no longer than the store keeps what could
    /// refuse it, and a node remembers a revocation no longer than the
    /// store does, so a node started later knows every one that counts.
    /// Shorter sessions keep their own times.
    #[test]
    fn an_outage_honours_no_pass_longer_than_the_store_keeps_revocations() {
        let retention = Duration::from_micros(anteroom_store::REVOCATION_RETENTION_US as u64);
        let long = event(r#", "session_ttl": "5h", "session_idle_timeout": "2h""#);
        assert_eq!(outage_honour(&long), retention - REVOCATION_MARGIN);
        assert!(revocation_keep(&long) <= retention);
        let usual = event(r#", "session_ttl": "10m", "session_idle_timeout": "5m""#);
        assert_eq!(outage_honour(&usual), Duration::from_secs(300));
        assert_eq!(revocation_keep(&usual), Duration::from_secs(330));
    }
}
