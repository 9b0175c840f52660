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

use std::collections::HashMap;
use std::time::Duration;

use anteroom_core::token::{Claims, Expect, Keyring, TokenError, TokenKind, session_tag};
use anteroom_store::{EventId, Revocation};
use rand::RngCore;

use crate::app::{AppState, EventRuntime, read, write};

/// At most this many passes are kept in one cookie (one per event).
const MAX_PASSES: usize = 8;

/// Revocations are kept this long after the pass lifetime: any pass issued
/// before a revocation has expired by then anyway.
const REVOCATION_MARGIN: Duration = Duration::from_secs(30);

/// A session start further ahead of a node's clock than this is not
/// believed (nodes' clocks and the store's disagree by far less).
const MAX_START_AHEAD_US: i64 = 60_000_000;

/// How often an upgraded connection checks that its session still holds.
pub const SESSION_WATCH_EVERY: Duration = Duration::from_millis(200);

/// Ended sessions of one event. A session is identified by its member and
/// its start (the store's canonical time just before its redeem, carried in
/// the signed pass): a revocation of a member at canonical time `t` ends
/// every session of that member that started at or before `t`, whatever its
/// passes' issue times, while a later session of the same member (after
/// queueing again, which can only start after `t`) is untouched.
#[derive(Debug, Default)]
pub struct Revocations {
    by_member: HashMap<String, Revoked>,
    /// The next refresh asks for revocations at or after this time.
    pub since_us: Option<i64>,
}

#[derive(Clone, Copy, Debug)]
struct Revoked {
    /// Sessions that started at or before this canonical µs are over.
    started_until_us: i64,
    /// When this entry was last raised (it is forgotten a pass life later).
    recorded_us: i64,
}

impl Revocations {
    /// Whether the session of `member` that started at `session_start_us` is over.
    pub fn revokes(&self, member: &str, session_start_us: i64) -> bool {
        self.by_member
            .get(member)
            .is_some_and(|r| session_start_us <= r.started_until_us)
    }

    /// Records fetched revocations and forgets those older than `keep_after_us`.
    pub fn apply(&mut self, list: &[Revocation], keep_after_us: i64) {
        for r in list {
            self.raise(&r.member, r.at_us, r.at_us);
            self.since_us = Some(self.since_us.map_or(r.at_us, |s| s.max(r.at_us)));
        }
        self.by_member.retain(|_, r| r.recorded_us >= keep_after_us);
    }

    /// The store said this session is gone (a renewal found it not active):
    /// its passes stop here at once, before the revocation arrives.
    pub fn end_locally(&mut self, member: &str, session_start_us: i64, now_us: i64) {
        self.raise(member, session_start_us, now_us);
    }

    fn raise(&mut self, member: &str, started_until_us: i64, recorded_us: i64) {
        let entry = self.by_member.entry(member.to_owned()).or_insert(Revoked {
            started_until_us,
            recorded_us,
        });
        entry.started_until_us = entry.started_until_us.max(started_until_us);
        entry.recorded_us = entry.recorded_us.max(recorded_us);
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }
}

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

/// Signs a pass for `member`'s session that started at `session_start_us`
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
    member: &str,
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
        session_tag: session_tag(member),
        issued_at_ms: now_ms,
        expires_at_ms,
        nonce,
        difficulty: 0,
    };
    (keyring.sign(&claims), expires_at_ms)
}

/// The session start (canonical µs) carried by a pass. A start outside the
/// possible range (a pass from an older format) counts as the pass's issue
/// time.
pub fn session_start_us(claims: &Claims, rt: &EventRuntime, now_ms: i64) -> i64 {
    let mut start = [0u8; 8];
    start.copy_from_slice(&claims.nonce[..8]);
    let start = i64::from_be_bytes(start);
    // A start older than one lifetime plus a pass would have ended already.
    let oldest_ms =
        now_ms.saturating_sub(ms(rt.config.session_ttl).saturating_add(ms(rt.config.pass_ttl)));
    let now_us = now_ms.saturating_mul(1000);
    if start >= oldest_ms.saturating_mul(1000) && start <= now_us.saturating_add(MAX_START_AHEAD_US)
    {
        start
    } else {
        claims.issued_at_ms.saturating_mul(1000)
    }
}

/// When a session that started at `session_start_us` ends at the latest
/// (`session_ttl` after its start), in node ms.
pub fn session_hard_end_ms(rt: &EventRuntime, session_start_us: i64) -> i64 {
    session_start_us
        .div_euclid(1000)
        .saturating_add(ms(rt.config.session_ttl))
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
    let Some(claims) = cookie
        .split('~')
        .take(MAX_PASSES)
        .find_map(|part| state.keyring.verify(part, &expect, i64::MIN).ok())
    else {
        return PassCheck::Missing;
    };
    let session_start_us = session_start_us(&claims, rt, now_ms);
    if read(&rt.live.revocations).revokes(member, session_start_us)
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
    if crate::drain::of(rt).is_draining() {
        return;
    }
    let now_us = now_ms.saturating_mul(1000);
    write(&rt.live.revocations).end_locally(member, session_start_us, now_us);
    metrics::counter!("anteroom_sessions_ended_locally_total", "event" => rt.id().to_string())
        .increment(1);
}

/// One admitted session, watched by an upgraded connection (WebSocket) that
/// must close when the session ends.
#[derive(Clone)]
pub struct SessionWatch {
    live: std::sync::Arc<crate::app::Live>,
    clock: std::sync::Arc<dyn crate::app::Clock>,
    member: String,
    session_start_us: i64,
    hard_end_ms: i64,
}

impl std::fmt::Debug for SessionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWatch")
            .field("session_start_us", &self.session_start_us)
            .finish_non_exhaustive()
    }
}

impl SessionWatch {
    pub fn new(state: &AppState, rt: &EventRuntime, member: &str, session_start_us: i64) -> Self {
        Self {
            live: rt.live.clone(),
            clock: state.clock.clone(),
            member: member.to_owned(),
            session_start_us,
            hard_end_ms: session_hard_end_ms(rt, session_start_us),
        }
    }

    /// Whether the session is over (revoked here, or past its lifetime).
    pub fn is_over(&self) -> bool {
        self.clock.now_ms() >= self.hard_end_ms
            || read(&self.live.revocations).revokes(&self.member, self.session_start_us)
    }

    /// Resolves once the session is over; checked every
    /// [`SESSION_WATCH_EVERY`], so within that of the revocation reaching
    /// this node.
    pub async fn ended(self) {
        let mut every = tokio::time::interval(SESSION_WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if self.is_over() {
                return;
            }
        }
    }
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

/// One refresh of an event's revocation cache from the store.
pub async fn refresh_revocations(
    state: &AppState,
    rt: &EventRuntime,
) -> Result<(), anteroom_store::StoreError> {
    let keep_us =
        i64::try_from((rt.config.pass_ttl + REVOCATION_MARGIN).as_micros()).unwrap_or(i64::MAX);
    let since = read(&rt.live.revocations).since_us;
    let since = match since {
        Some(s) => s,
        None => state.store.now_us(rt.id()).await?.saturating_sub(keep_us),
    };
    let list = state.store.revocations_since(rt.id(), since).await?;
    let now_us = state.now_ms().saturating_mul(1000);
    let mut cache = write(&rt.live.revocations);
    cache.apply(&list, now_us.saturating_sub(keep_us));
    if cache.since_us.is_none() {
        cache.since_us = Some(since);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_ends_the_sessions_started_before_it_not_later_ones() {
        let mut r = Revocations::default();
        r.apply(
            &[Revocation {
                member: "m".into(),
                at_us: 5_000_000,
            }],
            0,
        );
        assert!(r.revokes("m", 4_000_000));
        assert!(r.revokes("m", 5_000_000));
        assert!(!r.revokes("m", 5_000_001), "a later session of the member");
        assert!(!r.revokes("other", 0));
        assert_eq!(r.since_us, Some(5_000_000));
        r.apply(&[], 6_000_000);
        assert!(r.is_empty());
    }

    #[test]
    fn a_session_ended_locally_is_kept_a_pass_life_from_now_not_from_its_start() {
        let mut r = Revocations::default();
        r.end_locally("m", 1_000_000, 9_000_000);
        assert!(r.revokes("m", 1_000_000));
        assert!(!r.revokes("m", 1_000_001));
        r.apply(&[], 8_000_000);
        assert!(r.revokes("m", 1_000_000), "recorded at 9 s, kept");
        r.apply(&[], 9_000_001);
        assert!(r.is_empty());
    }
}
