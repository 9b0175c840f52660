//! Passes: issuing them at redeem, checking them locally at the gate, and the
//! revocation cache that makes a released, evicted or expired session's pass
//! stop working on every node within about a second.
//!
//! Architecture invariant: checking a pass never waits on the store. The
//! revocation cache is refreshed in the background and kept as it is while
//! the store is unreachable, so admitted visitors are never locked out by an
//! outage.
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

/// Revoked members of one event, by canonical time of revocation.
#[derive(Debug, Default)]
pub struct Revocations {
    by_member: HashMap<String, i64>,
    /// The next refresh asks for revocations at or after this time.
    pub since_us: Option<i64>,
}

impl Revocations {
    /// Whether a pass of `member` issued at `issued_at_ms` was revoked since.
    pub fn revokes(&self, member: &str, issued_at_ms: i64) -> bool {
        self.by_member
            .get(member)
            .is_some_and(|at_us| *at_us >= issued_at_ms.saturating_mul(1000))
    }

    /// Records fetched revocations and forgets those older than `keep_after_us`.
    pub fn apply(&mut self, list: &[Revocation], keep_after_us: i64) {
        for r in list {
            let at = self.by_member.entry(r.member.clone()).or_insert(r.at_us);
            *at = (*at).max(r.at_us);
            self.since_us = Some(self.since_us.map_or(r.at_us, |s| s.max(r.at_us)));
        }
        self.by_member.retain(|_, at| *at >= keep_after_us);
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
    Valid { claims: Claims, renew: bool },
    /// A genuine pass of this session that has expired (the session may still
    /// be active: the gate asks the store before queueing the visitor).
    Expired { claims: Claims },
    /// No usable pass (absent, forged, another session's, or revoked).
    Missing,
}

/// Signs a new pass for `member` of the event, valid for `pass_ttl`, for a
/// session that starts now (the redeem).
pub fn issue(keyring: &Keyring, rt: &EventRuntime, member: &str, now_ms: i64) -> (String, i64) {
    issue_for_session(keyring, rt, member, now_ms, now_ms)
}

/// Signs a pass for a session that started at `session_start_ms` (renewals).
///
/// A pass's nonce is not consumed anywhere, so its first 8 bytes carry the
/// session start (big-endian ms) and the rest stays random: the signature
/// makes the start unforgeable, and every node can cap the session at
/// `start + session_ttl` without a store read (issue 6, session lifecycle).
pub fn issue_for_session(
    keyring: &Keyring,
    rt: &EventRuntime,
    member: &str,
    now_ms: i64,
    session_start_ms: i64,
) -> (String, i64) {
    let ttl = i64::try_from(rt.config.pass_ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_at_ms = now_ms.saturating_add(ttl);
    let mut nonce = [0u8; 16];
    rand::rng().fill_bytes(&mut nonce[8..]);
    nonce[..8].copy_from_slice(&session_start_ms.to_be_bytes());
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

/// The session start carried by a pass. A pass from before the start was
/// carried (a random nonce) gives a value outside the possible range; its
/// session is then treated as starting at its issue time.
pub fn session_start_ms(claims: &Claims, rt: &EventRuntime, now_ms: i64) -> i64 {
    let mut start = [0u8; 8];
    start.copy_from_slice(&claims.nonce[..8]);
    let start = i64::from_be_bytes(start);
    let ttl = i64::try_from(rt.config.session_ttl.as_millis()).unwrap_or(i64::MAX);
    // A start older than one lifetime plus a pass would have ended already.
    let pass = i64::try_from(rt.config.pass_ttl.as_millis()).unwrap_or(i64::MAX);
    let oldest = now_ms.saturating_sub(ttl.saturating_add(pass));
    if start <= now_ms && start >= oldest && start <= claims.issued_at_ms {
        start
    } else {
        claims.issued_at_ms
    }
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
    if read(&rt.live.revocations).revokes(member, claims.issued_at_ms) {
        return PassCheck::Missing;
    }
    if now_ms >= claims.expires_at_ms {
        return PassCheck::Expired { claims };
    }
    let half_life = (claims.expires_at_ms - claims.issued_at_ms) / 2;
    let renew = now_ms - claims.issued_at_ms > half_life;
    PassCheck::Valid { claims, renew }
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
    fn revocation_applies_to_passes_issued_before_it() {
        let mut r = Revocations::default();
        r.apply(
            &[Revocation {
                member: "m".into(),
                at_us: 5_000_000,
            }],
            0,
        );
        assert!(r.revokes("m", 4_000));
        assert!(r.revokes("m", 5_000));
        assert!(!r.revokes("m", 5_001));
        assert!(!r.revokes("other", 0));
        assert_eq!(r.since_us, Some(5_000_000));
        r.apply(&[], 6_000_000);
        assert!(r.is_empty());
    }
}
