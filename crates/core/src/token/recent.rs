//! Tokens a keyring opened lately, so a token presented again is not
//! verified again.
//!
//! A pass is presented with every request of its session: a page and its
//! assets, each a few seconds apart, most of them on one kept-alive
//! connection. Verifying it costs a base64 decode, an HMAC and the session
//! id's hash on every one of them, the largest single part of a gated
//! request. Whether a token's signature holds depends only on its text and
//! the keyring; so a token whose exact text was opened before with the same
//! keyring keeps its claims here, and is not decoded or MACed again. What
//! is expected of it (kind, event, session, expiry) is judged on every use,
//! in the order [`Keyring::verify`] judges it; the session's hash is
//! skipped only when the session is the one the token last held for.
//!
//! What an attacker can do with it:
//! - A hit needs the whole text of a token whose signature held, so a
//!   forged or altered token always misses and is opened in full.
//! - The text and the session are compared in constant time, so a probe
//!   learns nothing about a remembered token from how long it is refused.
//! - A flood of distinct tokens only evicts entries (a fixed number of
//!   slots, chosen by the token's own text): memory stays bounded.
//! - A keyring that loses a key (or any other keyring) forgets every entry,
//!   so a token signed by a retired key is refused at once.

use subtle::ConstantTimeEq;

use super::{Claims, Expect, Keyring, Signed, TokenError};

/// The longest session a slot remembers (a session id is 32 bytes), so a
/// slot stays about 300 bytes whatever the identity.
const MAX_REMEMBERED_SESSION: usize = 128;

/// A memo of verified tokens for one keyring at a time: a fixed number of
/// slots, each holding the last token whose text chose it.
pub struct Recent {
    /// The keyring the entries were verified with (`Keyring::id`).
    ring: u64,
    slots: Vec<Option<Box<Seen>>>,
    /// Tokens found in a slot, and tokens opened (and their MAC computed).
    hits: u64,
    misses: u64,
}

/// One token whose signature held, with the session it held for last.
struct Seen {
    token: String,
    signed: Signed,
    /// The last session whose hash matched the token's tag, when
    /// `session_known`.
    session: String,
    session_known: bool,
}

impl Recent {
    /// A memo of `slots` entries (rounded up to a power of two, at least 1).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        Self {
            ring: 0,
            slots: (0..n).map(|_| None).collect(),
            hits: 0,
            misses: 0,
        }
    }

    /// How many tokens were found here, and how many had to be opened,
    /// since the memo was made.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.misses)
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
    // Whole words read as words: a copy of a slice of unknown length into
    // a word is a call to `memcpy`, two for every eight bytes.
    let word = |c: &[u8]| c.try_into().map_or(0, u64::from_le_bytes);
    let (xs, ys) = (a.chunks_exact(8), b.chunks_exact(8));
    let (x_tail, y_tail) = (xs.remainder(), ys.remainder());
    let mut diff = 0u64;
    for (x, y) in xs.zip(ys) {
        // The barrier keeps the compiler from ending the loop at the first
        // difference.
        diff = std::hint::black_box(diff | (word(x) ^ word(y)));
    }
    for (x, y) in x_tail.iter().zip(y_tail) {
        diff = std::hint::black_box(diff | u64::from(x ^ y));
    }
    bool::from(diff.ct_eq(&0))
}

impl Keyring {
    /// [`Keyring::verify`], answered from `recent` when the same text was
    /// opened before with this keyring: the MAC is not computed again, and
    /// neither is the session's hash when the session is the one the token
    /// held for last. Every signed token is remembered, whatever it is
    /// judged against, so a cookie holding passes for several events finds
    /// each of them there. Every outcome is the one `verify` would give
    /// (`token::tests::a_remembered_token_is_judged_as_verify_judges_it`).
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
        let entry = &mut recent.slots[slot];
        let seen = match entry {
            Some(seen) if same(seen.token.as_bytes(), token.as_bytes()) => {
                recent.hits += 1;
                seen
            }
            _ => {
                recent.misses += 1;
                // Only a token whose signature holds is remembered: a forged
                // or altered one is refused here, each time, in full.
                let signed = self.open(token)?;
                remember(entry, token, signed)
            }
        };
        let Seen {
            signed,
            session,
            session_known,
            ..
        } = seen;
        signed.judge(expect, now_ms, |tag| {
            if *session_known && same(session.as_bytes(), expect.session.as_bytes()) {
                return true;
            }
            if !bool::from(tag.ct_eq(&super::session_tag(expect.session))) {
                return false;
            }
            // A JWT's subject can be long: such a session is hashed every
            // time rather than let a slot grow with it.
            if expect.session.len() <= MAX_REMEMBERED_SESSION {
                session.clear();
                session.push_str(expect.session);
                *session_known = true;
            }
            true
        })?;
        Ok(signed.claims().clone())
    }
}

/// Puts `token`, just opened, in `entry` (reusing the slot's strings: a
/// crowd's passes replace one another there without an allocation each).
fn remember<'s>(entry: &'s mut Option<Box<Seen>>, token: &str, signed: Signed) -> &'s mut Seen {
    match entry {
        Some(seen) => {
            seen.token.clear();
            seen.token.push_str(token);
            seen.signed = signed;
            seen.session.clear();
            seen.session_known = false;
            seen
        }
        None => entry.insert(Box::new(Seen {
            token: token.to_owned(),
            signed,
            session: String::new(),
            session_known: false,
        })),
    }
}
