//! Tokens a keyring verified lately, so a token presented again is not
//! verified again.
//!
//! A pass is presented with every request of its session: a page and its
//! assets, each a few seconds apart, most of them on one kept-alive
//! connection. Verifying it costs a base64 decode, an HMAC and the session
//! id's hash on every one of them, the largest single part of a gated
//! request. A token's verification depends only on its text, the keyring
//! and what is expected of it; so a token whose exact text verified before,
//! with the same keyring, for the same session, is known good without its
//! MAC being computed again. Its kind, event and expiry are judged again on
//! every use, as [`Keyring::verify`] judges them.
//!
//! What an attacker can do with it:
//! - A hit needs the whole text of a token that verified, so a forged or
//!   altered token always misses and goes through [`Keyring::verify`].
//! - The text and the session are compared in constant time, so a probe
//!   learns nothing about a remembered token from how long it is refused.
//! - A flood of distinct tokens only evicts entries (a fixed number of
//!   slots, chosen by the token's own text): memory stays bounded.
//! - A keyring that loses a key (or any other keyring) forgets every entry,
//!   so a token signed by a retired key is refused at once.

use subtle::ConstantTimeEq;

use super::{Claims, Expect, Keyring, TokenError};

/// The longest session a slot remembers (a session id is 32 bytes), so a
/// slot stays about 300 bytes whatever the identity.
const MAX_REMEMBERED_SESSION: usize = 128;

/// A memo of verified tokens for one keyring at a time: a fixed number of
/// slots, each holding the last token whose text chose it.
pub struct Recent {
    /// The keyring the entries were verified with (`Keyring::id`).
    ring: u64,
    slots: Vec<Option<Box<Seen>>>,
}

/// One verified token, with the session it was verified for.
struct Seen {
    token: String,
    session: String,
    claims: Claims,
}

impl Recent {
    /// A memo of `slots` entries (rounded up to a power of two, at least 1).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        Self {
            ring: 0,
            slots: (0..n).map(|_| None).collect(),
        }
    }

    /// The slot `token` goes to: its last eight bytes, which in a token
    /// are the MAC's (random to anyone without the key). A chosen text can
    /// only pick which entry it evicts.
    fn slot(&self, token: &str) -> usize {
        let b = token.as_bytes();
        let mut last = [0u8; 8];
        let n = b.len().min(8);
        last[..n].copy_from_slice(&b[b.len() - n..]);
        let h = u64::from_le_bytes(last).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The high bits are the best mixed; the mask keeps it in range.
        (h >> 32) as usize & (self.slots.len() - 1)
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only (a length is no secret: every token of an event has the same). Eight
/// bytes at a time: `subtle`'s slice comparison takes a byte at a time
/// behind an optimisation barrier each, which was most of what a
/// remembered pass cost.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |c: &[u8]| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    };
    let mut diff = 0u64;
    for (x, y) in a.chunks(8).zip(b.chunks(8)) {
        // The barrier keeps the compiler from ending the loop at the first
        // difference.
        diff = std::hint::black_box(diff | (word(x) ^ word(y)));
    }
    bool::from(diff.ct_eq(&0))
}

impl Keyring {
    /// [`Keyring::verify`], answered from `recent` when the same text
    /// verified before with this keyring for the same session; a token that
    /// verifies is remembered there. Every outcome is the one `verify` would
    /// give (`token::tests::a_remembered_token_is_judged_as_verify_judges_it`).
    pub fn verify_recent(
        &self,
        recent: &mut Recent,
        token: &str,
        expect: &Expect<'_>,
        now_ms: i64,
    ) -> Result<Claims, TokenError> {
        if recent.ring != self.id {
            recent.slots.iter_mut().for_each(|s| *s = None);
            recent.ring = self.id;
        }
        let slot = recent.slot(token);
        if let Some(seen) = &recent.slots[slot]
            && same(seen.token.as_bytes(), token.as_bytes())
            && same(seen.session.as_bytes(), expect.session.as_bytes())
        {
            // The signature and the session held for this text; what the
            // caller expects of it, and the time, are judged again.
            let claims = &seen.claims;
            if claims.kind != expect.kind {
                return Err(TokenError::WrongKind);
            }
            if claims.event != expect.event {
                return Err(TokenError::WrongEvent);
            }
            if now_ms >= claims.expires_at_ms {
                return Err(TokenError::Expired);
            }
            return Ok(claims.clone());
        }
        // Remembered only once verified as of the beginning of time: an
        // expired token is still a signed one, and `verify` judges expiry
        // after everything else.
        let claims = self.verify(token, expect, i64::MIN)?;
        if expect.session.len() > MAX_REMEMBERED_SESSION {
            // A JWT's subject can be long: such a session is verified every
            // time rather than let a slot grow with it.
            return judge_expiry(claims, now_ms);
        }
        let entry = &mut recent.slots[slot];
        match entry {
            // The slot's strings are reused: a crowd's passes replace one
            // another there without an allocation each.
            Some(seen) => {
                seen.token.clear();
                seen.token.push_str(token);
                seen.session.clear();
                seen.session.push_str(expect.session);
                seen.claims = claims.clone();
            }
            None => {
                *entry = Some(Box::new(Seen {
                    token: token.to_owned(),
                    session: expect.session.to_owned(),
                    claims: claims.clone(),
                }));
            }
        }
        judge_expiry(claims, now_ms)
    }
}

/// `claims` unless expired at `now_ms`, as [`Keyring::verify`] judges it
/// last.
fn judge_expiry(claims: Claims, now_ms: i64) -> Result<Claims, TokenError> {
    if now_ms >= claims.expires_at_ms {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}
