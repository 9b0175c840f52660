//! Signed tokens: admission tokens, passes and proof-of-work challenges.
//!
//! Wire format, compact and URL-safe (at most [`MAX_TOKEN_LEN`] bytes):
//! `base64url_nopad(payload) "." base64url_nopad(HMAC-SHA256(mac_key, payload))`.
//!
//! | offset | size | field                                           |
//! | ------ | ---- | ----------------------------------------------- |
//! | 0      | 1    | version (1)                                     |
//! | 1      | 1    | kind ([`TokenKind`])                            |
//! | 2      | 4    | key id: `SHA-256("anteroom/key-id/v1" ‖ secret)[..4]` |
//! | 6      | 8    | issued at, ms since the Unix epoch, i64 BE      |
//! | 14     | 8    | expires at, ms, i64 BE                          |
//! | 22     | 16   | nonce                                           |
//! | 38     | 16   | session tag ([`session_tag`])                   |
//! | 54     | 1    | difficulty (challenges only, else 0)            |
//! | 55     | 1    | event length `n`                                |
//! | 56     | n    | event id, UTF-8                                 |
//!
//! `mac_key = HMAC-SHA256(secret, "anteroom/token-mac/v1")`, so the configured
//! secret itself never keys two different uses.
//!
//! Tokens carry a hash of the session id, never the id itself, because tokens
//! reach page scripts while the session cookie is `HttpOnly`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::score::ScoreKey;

mod recent;
pub use recent::Recent;

type HmacSha256 = Hmac<Sha256>;

/// Longest token string [`Keyring::verify`] looks at; longer input is malformed.
/// A token with a 255-byte event id is 459 bytes.
pub const MAX_TOKEN_LEN: usize = 512;

/// Longest event id a token can carry, in bytes.
pub const MAX_EVENT_LEN: usize = 255;

/// Shortest accepted secret: 256 bits, the HMAC-SHA256 security level.
pub const MIN_SECRET_LEN: usize = 32;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 56;
const MAC_LEN: usize = 32;
/// Largest payload a [`MAX_TOKEN_LEN`] string can decode to.
const MAX_PAYLOAD_LEN: usize = MAX_TOKEN_LEN * 3 / 4;
const KEY_ID_LABEL: &[u8] = b"anteroom/key-id/v1";
const MAC_KEY_LABEL: &[u8] = b"anteroom/token-mac/v1";

/// What a token is for; each kind is only accepted where that kind is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenKind {
    /// Single-use ticket out of the queue, exchanged for a pass.
    Admission = 1,
    /// Proof of an active session, checked by the gate on every request.
    Pass = 2,
    /// A proof-of-work challenge (see [`crate::pow`]).
    Challenge = 3,
}

impl TokenKind {
    /// Lower-case name, as used in test vectors and logs.
    pub fn name(self) -> &'static str {
        match self {
            TokenKind::Admission => "admission",
            TokenKind::Pass => "pass",
            TokenKind::Challenge => "challenge",
        }
    }

    /// The inverse of [`TokenKind::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "admission" => Some(TokenKind::Admission),
            "pass" => Some(TokenKind::Pass),
            "challenge" => Some(TokenKind::Challenge),
            _ => None,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(TokenKind::Admission),
            2 => Some(TokenKind::Pass),
            3 => Some(TokenKind::Challenge),
            _ => None,
        }
    }
}

/// The signed content of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub kind: TokenKind,
    /// Event id; at most [`MAX_EVENT_LEN`] bytes.
    pub event: String,
    /// [`session_tag`] of the session the token is bound to.
    pub session_tag: [u8; 16],
    pub issued_at_ms: i64,
    /// First millisecond at which the token is no longer valid.
    pub expires_at_ms: i64,
    /// Random, from the caller; the store consumes it to make admission tokens
    /// and challenges single-use.
    pub nonce: [u8; 16],
    /// Leading zero bits a proof-of-work answer needs; 0 for other kinds.
    pub difficulty: u8,
}

/// What the verifier requires of a token besides a valid signature.
#[derive(Clone, Copy, Debug)]
pub struct Expect<'a> {
    pub kind: TokenKind,
    pub event: &'a str,
    /// The caller's session id (from the cookie), compared through its tag.
    pub session: &'a str,
}

/// Why a token was rejected, in the order verification checks.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    #[error("token is malformed")]
    Malformed,
    #[error("token was signed by an unknown key")]
    UnknownKey,
    #[error("token signature is invalid")]
    BadSignature,
    #[error("token has expired")]
    Expired,
    #[error("token is of the wrong kind")]
    WrongKind,
    #[error("token is for another event")]
    WrongEvent,
    #[error("token is for another session")]
    WrongSession,
}

impl TokenError {
    /// Stable machine code for logs, metrics and JSON errors.
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::Malformed => "token_malformed",
            TokenError::UnknownKey => "token_unknown_key",
            TokenError::BadSignature => "token_bad_signature",
            TokenError::Expired => "token_expired",
            TokenError::WrongKind => "token_wrong_kind",
            TokenError::WrongEvent => "token_wrong_event",
            TokenError::WrongSession => "token_wrong_session",
        }
    }
}

/// Why a [`Keyring`] could not be built.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    #[error("no token secret configured")]
    NoKeys,
    #[error("token secret #{index} is shorter than 32 bytes")]
    TooShort { index: usize },
}

/// `SHA-256(session)[..16]`: binds a token to a session without revealing it.
pub fn session_tag(session: &str) -> [u8; 16] {
    let digest = Sha256::digest(session.as_bytes());
    let mut tag = [0u8; 16];
    tag.copy_from_slice(&digest[..16]);
    tag
}

struct Key {
    id: [u8; 4],
    /// Keyed once at start: cloning the state saves hashing the key per token.
    mac: HmacSha256,
}

/// Token secrets, newest first: sign with the first, verify with any, so a new
/// secret can be rolled out before the old one is retired.
pub struct Keyring {
    keys: Vec<Key>,
    score_key: ScoreKey,
    /// Tells this keyring from every other one in the process, so a
    /// [`Recent`] never answers for a keyring its tokens were not verified
    /// with.
    id: u64,
}

/// The next [`Keyring::id`]; 0 is no keyring's (a new [`Recent`]'s).
static NEXT_RING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Keyring {
    /// Builds the keyring from secrets listed newest first; each must be at
    /// least [`MIN_SECRET_LEN`] bytes.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> Result<Self, KeyError> {
        let oldest = secrets.last().ok_or(KeyError::NoKeys)?;
        let mut keys = Vec::with_capacity(secrets.len());
        for (index, secret) in secrets.iter().enumerate() {
            let secret = secret.as_ref();
            if secret.len() < MIN_SECRET_LEN {
                return Err(KeyError::TooShort { index });
            }
            let mut mac_key = new_mac(secret);
            mac_key.update(MAC_KEY_LABEL);
            keys.push(Key {
                id: key_id(secret),
                mac: new_mac(&mac_key.finalize().into_bytes()),
            });
        }
        Ok(Self {
            keys,
            // The oldest secret, so prepending a new one does not reshuffle a
            // pre-window that is already filling.
            score_key: ScoreKey::new(oldest.as_ref()),
            id: NEXT_RING.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Signs `claims` with the newest key. An event id longer than
    /// [`MAX_EVENT_LEN`] bytes is cut to fit, so such a token never verifies
    /// (fails closed); configuration rejects such ids before they get here.
    pub fn sign(&self, claims: &Claims) -> String {
        let mut event_len = claims.event.len().min(MAX_EVENT_LEN);
        while !claims.event.is_char_boundary(event_len) {
            event_len -= 1;
        }
        let mut payload = Vec::with_capacity(HEADER_LEN + event_len);
        payload.push(VERSION);
        payload.push(claims.kind as u8);
        payload.extend_from_slice(&self.keys[0].id);
        payload.extend_from_slice(&claims.issued_at_ms.to_be_bytes());
        payload.extend_from_slice(&claims.expires_at_ms.to_be_bytes());
        payload.extend_from_slice(&claims.nonce);
        payload.extend_from_slice(&claims.session_tag);
        payload.push(claims.difficulty);
        // event_len <= 255 by construction.
        payload.push(event_len as u8);
        payload.extend_from_slice(&claims.event.as_bytes()[..event_len]);
        let mut mac = self.keys[0].mac.clone();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        // Sized once for both parts: growing the payload's text for the
        // tag reallocated it twice per token.
        let mut token = String::with_capacity(b64_len(payload.len()) + 1 + b64_len(MAC_LEN));
        URL_SAFE_NO_PAD.encode_string(&payload, &mut token);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(tag, &mut token);
        token
    }

    /// Checks, in order: length, encoding, key id, signature (constant time),
    /// kind, event, session (constant time), expiry (`now_ms >= expires_at_ms`
    /// is expired).
    pub fn verify(
        &self,
        token: &str,
        expect: &Expect<'_>,
        now_ms: i64,
    ) -> Result<Claims, TokenError> {
        let signed = self.open(token)?;
        signed.judge(expect, now_ms, |tag| {
            bool::from(tag.ct_eq(&session_tag(expect.session)))
        })?;
        Ok(signed.claims)
    }

    /// The claims of a token whose signature holds under one of this
    /// keyring's keys, not yet judged against what is expected of them.
    pub(crate) fn open(&self, token: &str) -> Result<Signed, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Malformed);
        }
        let (payload_b64, tag_b64) = token.split_once('.').ok_or(TokenError::Malformed)?;
        let mut payload_buf = [0u8; MAX_PAYLOAD_LEN];
        let payload_len = URL_SAFE_NO_PAD
            .decode_slice(payload_b64, &mut payload_buf)
            .map_err(|_| TokenError::Malformed)?;
        let payload = &payload_buf[..payload_len];
        let mut tag = [0u8; MAC_LEN + 3];
        let tag_len = URL_SAFE_NO_PAD
            .decode_slice(tag_b64, &mut tag)
            .map_err(|_| TokenError::Malformed)?;
        if tag_len != MAC_LEN {
            return Err(TokenError::Malformed);
        }
        let parsed = Parsed::decode(payload)?;

        let key = self
            .keys
            .iter()
            .find(|k| k.id == parsed.key_id)
            .ok_or(TokenError::UnknownKey)?;
        let mut mac = key.mac.clone();
        mac.update(payload);
        // verify_slice compares in constant time.
        mac.verify_slice(&tag[..MAC_LEN])
            .map_err(|_| TokenError::BadSignature)?;

        // An event that is not text matches no expected event (a `&str`).
        let (event, event_is_text) = match std::str::from_utf8(parsed.event) {
            Ok(event) => (event.to_owned(), true),
            Err(_) => (String::new(), false),
        };
        Ok(Signed {
            claims: Claims {
                kind: parsed.kind,
                event,
                session_tag: parsed.session_tag,
                issued_at_ms: parsed.issued_at_ms,
                expires_at_ms: parsed.expires_at_ms,
                nonce: parsed.nonce,
                difficulty: parsed.difficulty,
            },
            event_is_text,
        })
    }

    /// The salt of pre-window scores, derived from the oldest secret.
    pub fn score_key(&self) -> ScoreKey {
        self.score_key.clone()
    }
}

impl std::fmt::Debug for Keyring {
    // Key ids are public (they are in every token); secrets never print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        for key in &self.keys {
            list.entry(&format_args!("key {:02x?}", key.id));
        }
        list.finish()
    }
}

/// A payload split into fields, borrowing the event bytes.
struct Parsed<'p> {
    kind: TokenKind,
    key_id: [u8; 4],
    issued_at_ms: i64,
    expires_at_ms: i64,
    nonce: [u8; 16],
    session_tag: [u8; 16],
    difficulty: u8,
    event: &'p [u8],
}

impl<'p> Parsed<'p> {
    fn decode(p: &'p [u8]) -> Result<Self, TokenError> {
        if p.len() < HEADER_LEN || p[0] != VERSION || p.len() != HEADER_LEN + usize::from(p[55]) {
            return Err(TokenError::Malformed);
        }
        Ok(Self {
            kind: TokenKind::from_byte(p[1]).ok_or(TokenError::Malformed)?,
            key_id: array(&p[2..6]),
            issued_at_ms: i64::from_be_bytes(array(&p[6..14])),
            expires_at_ms: i64::from_be_bytes(array(&p[14..22])),
            nonce: array(&p[22..38]),
            session_tag: array(&p[38..54]),
            difficulty: p[54],
            event: &p[HEADER_LEN..],
        })
    }
}

/// A token whose signature held: its claims, not yet judged.
pub(crate) struct Signed {
    claims: Claims,
    /// Whether the token's event was text (else it matches no event).
    event_is_text: bool,
}

impl Signed {
    /// Judges the claims against `expect` at `now_ms`, in the order
    /// [`Keyring::verify`] reports them: kind, event, session, expiry.
    /// `session_holds` says whether the claims' session tag is the expected
    /// session's.
    pub(crate) fn judge(
        &self,
        expect: &Expect<'_>,
        now_ms: i64,
        session_holds: impl FnOnce(&[u8; 16]) -> bool,
    ) -> Result<(), TokenError> {
        let claims = &self.claims;
        if claims.kind != expect.kind {
            return Err(TokenError::WrongKind);
        }
        if !self.event_is_text || claims.event != expect.event {
            return Err(TokenError::WrongEvent);
        }
        if !session_holds(&claims.session_tag) {
            return Err(TokenError::WrongSession);
        }
        if now_ms >= claims.expires_at_ms {
            return Err(TokenError::Expired);
        }
        Ok(())
    }

    pub(crate) fn claims(&self) -> &Claims {
        &self.claims
    }
}

/// The length of `n` bytes in unpadded base64.
fn b64_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

/// Copies a slice whose length the caller has checked into an array.
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

fn key_id(secret: &[u8]) -> [u8; 4] {
    let digest = Sha256::new()
        .chain_update(KEY_ID_LABEL)
        .chain_update(secret)
        .finalize();
    array(&digest[..4])
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so the fallback is never taken; it keeps
    // the function total without a panic.
    HmacSha256::new_from_slice(key)
        .unwrap_or_else(|_| <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default()))
}

#[cfg(test)]
mod tests;
