//! Hashcash proof-of-work over SHA-256, in the wire form of API.md.
//!
//! The client finds a decimal `nonce` such that `SHA-256("<challenge>:<nonce>")`
//! starts with at least `difficulty` zero bits. The challenge string is a
//! [`TokenKind::Challenge`] token: it carries the event, a tag of the session,
//! the expiry and the difficulty under the server's MAC, so the server stores
//! nothing until an answer arrives, the client cannot lower the difficulty, and
//! the session id never reaches page scripts. Checking an answer costs one MAC
//! and one hash; single use is the caller's job, by consuming `claims.nonce`.

use sha2::{Digest, Sha256};

use crate::token::{Claims, Expect, Keyring, TokenError, TokenKind, session_tag};

/// Why an answer to a challenge was refused.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum PowError {
    /// The challenge itself is not valid for this caller now.
    #[error("challenge: {0}")]
    Token(#[from] TokenError),
    /// The hash of the answer has fewer leading zero bits than required.
    #[error("proof-of-work answer has too few leading zero bits")]
    InsufficientWork,
}

impl PowError {
    /// Stable machine code for logs, metrics and JSON errors.
    pub fn code(&self) -> &'static str {
        match self {
            PowError::Token(e) => e.code(),
            PowError::InsufficientWork => "pow_insufficient_work",
        }
    }
}

/// `SHA-256` of the UTF-8 string `"<challenge>:<nonce>"`, nonce in decimal.
pub fn hash(challenge: &str, nonce: u64) -> [u8; 32] {
    // Formatting the nonce on the stack keeps verification allocation-free.
    let mut buf = [0u8; crate::decimal::U64_DIGITS];
    Sha256::new()
        .chain_update(challenge.as_bytes())
        .chain_update(b":")
        .chain_update(crate::decimal::digits(nonce, &mut buf))
        .finalize()
        .into()
}

/// Number of leading zero bits of `h`, from 0 to 256.
pub fn leading_zero_bits(h: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for &b in h {
        bits += b.leading_zeros();
        if b != 0 {
            break;
        }
    }
    bits
}

/// Makes a challenge for `session` at `event`, valid for `ttl_ms` from `now_ms`.
/// `nonce` must be random: it makes each challenge distinct and single-use.
pub fn issue(
    keyring: &Keyring,
    event: &str,
    session: &str,
    difficulty: u8,
    now_ms: i64,
    ttl_ms: i64,
    nonce: [u8; 16],
) -> String {
    keyring.sign(&Claims {
        kind: TokenKind::Challenge,
        event: event.to_owned(),
        session_tag: session_tag(session),
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
        nonce,
        difficulty,
    })
}

/// Checks an `answer` to `challenge` for `session` at `event`: the challenge's
/// MAC, binding and expiry, then the work. Returns the challenge's claims so the
/// caller can consume `claims.nonce` once.
pub fn verify(
    keyring: &Keyring,
    challenge: &str,
    answer: u64,
    event: &str,
    session: &str,
    now_ms: i64,
) -> Result<Claims, PowError> {
    let expect = Expect {
        kind: TokenKind::Challenge,
        event,
        session,
    };
    let claims = keyring.verify(challenge, &expect, now_ms)?;
    if leading_zero_bits(&hash(challenge, answer)) < u32::from(claims.difficulty) {
        return Err(PowError::InsufficientWork);
    }
    Ok(claims)
}

/// The smallest nonce that meets `difficulty`, by brute force from 0. For tests
/// and the simulator: it takes about `2^difficulty` hashes.
pub fn solve(challenge: &str, difficulty: u8) -> u64 {
    let need = u32::from(difficulty);
    (0..u64::MAX)
        .find(|&n| leading_zero_bits(&hash(challenge, n)) >= need)
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
