//! Fair arrival order: the sorted-set score each visitor gets when joining a queue.
//!
//! A score is an `i64` with `|score| < 2^53`, so it survives the trip through an
//! `f64` (a Redis sorted-set score) exactly and therefore keeps its order there.
//! Lower scores are served first.
//!
//! The formula, which the Redis backend mirrors in Lua with the same arithmetic:
//!
//! ```text
//! base  = prewindow_score                                   if now_us <  opens_at_us
//!       = min((now_us - opens_at_us) * 1024 + tiebreak,
//!             MAX_OPEN_SCORE)                               otherwise
//! score = base + (behind ? BEHIND_OFFSET : 0)
//! ```
//!
//! `* 1024 + tiebreak` is the same as `<< TIEBREAK_BITS | tiebreak` because the
//! low bits of the shifted value are zero; the multiplication form is exact with
//! Lua's doubles, which have no 64-bit shift.
//!
//! * Before opening, racing to the microsecond buys nothing: the score is a keyed
//!   hash of the member spread uniformly over `[-(pre_window_us << 10), 0)`,
//!   stable across refreshes and unpredictable without the key, and every such
//!   score sorts before every post-opening score (which are `>= 0`).
//! * After opening, the canonical clock orders visitors to the microsecond; the
//!   10-bit tie-break (other bits of the same keyed hash) only decides between
//!   joins in the same microsecond.
//! * Post-opening scores saturate at [`MAX_OPEN_SCORE`], reached `2^42` µs
//!   (about 50.9 days) after opening; later joins all tie there and Redis orders
//!   ties by member. No event is expected to queue that long.
//! * "Behind" visitors (high risk, by policy) get [`BEHIND_OFFSET`] added, which
//!   puts them after every non-behind visitor who joins less than
//!   `50.9 days - pre-window` after opening, and keeps their own relative order.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Low bits of a post-opening score that hold the tie-break.
pub const TIEBREAK_BITS: u32 = 10;

/// Added to the score of high-risk visitors placed behind every verified visitor.
pub const BEHIND_OFFSET: i64 = 1 << 52;

/// Post-opening scores saturate here: `2^42` µs, about 50.9 days after opening.
/// Keeping every non-behind score below [`BEHIND_OFFSET`] is what makes the
/// behind placement work, and `BEHIND_OFFSET + MAX_OPEN_SCORE < 2^53` keeps
/// every score exact in an `f64`.
pub const MAX_OPEN_SCORE: i64 = BEHIND_OFFSET - 1;

// The largest score, a saturated behind score, must stay exact in an f64.
const _: () = assert!(MAX_OPEN_SCORE + BEHIND_OFFSET < 1 << 53);

/// The pre-window used when the configured one is zero or negative.
const DEFAULT_PRE_WINDOW_US: i64 = 1_000_000;

/// The longest pre-window whose scores stay within `(-2^52, 0)`.
const MAX_PRE_WINDOW_US: i64 = MAX_OPEN_SCORE >> TIEBREAK_BITS;

/// Domain-separation label: the score key must differ from every other key
/// derived from the same configured secret (token MAC keys, key ids).
const SCORE_KEY_LABEL: &[u8] = b"anteroom/score-key/v1";

/// Separator byte between event and member in the hashed text.
const SEP: u8 = 0;

/// Secret salt of the member's hash, which gives both the pre-window score
/// and the tie-break.
///
/// It holds the HMAC already keyed with the salt (the hashes of its inner and
/// outer key blocks), cloned for each hash: keying it anew cost two of the
/// four SHA-256 blocks of every hash.
#[derive(Clone)]
pub struct ScoreKey(HmacSha256);

impl ScoreKey {
    /// Derives the salt from a configured secret, as `HMAC-SHA256(secret, label)`.
    pub fn new(secret: &[u8]) -> Self {
        let mut mac = new_mac(secret);
        mac.update(SCORE_KEY_LABEL);
        let salt: [u8; 32] = mac.finalize().into_bytes().into();
        Self(new_mac(&salt))
    }

    fn hash(&self, event: &str, member: &str) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(event.as_bytes());
        mac.update(&[SEP]);
        mac.update(member.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

impl std::fmt::Debug for ScoreKey {
    // The salt is what keeps pre-window order unpredictable: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScoreKey(..)")
    }
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this arm is never taken; an empty key
    // keeps the function total without a panic.
    HmacSha256::new_from_slice(key)
        .unwrap_or_else(|_| <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default()))
}

/// Everything about one join that does not depend on the clock, computed once
/// so the store (or its Lua script) only does the arithmetic of [`arrival_score`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinScoring {
    /// When the event opens, in µs since the Unix epoch.
    pub opens_at_us: i64,
    /// The score of any arrival before `opens_at_us`, in `[-(pre_window << 10), 0)`.
    pub prewindow_score: i64,
    /// Tie-break for joins in the same microsecond, in `[0, 1024)`.
    pub tiebreak: i64,
    /// Place this visitor behind every verified visitor ([`Placement::Behind`]);
    /// one bit, as the stores' scripts take it.
    pub behind: bool,
}

/// Where a joining visitor goes in the queue: the bot defence's decision,
/// carried to the score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In arrival order (the shuffled pre-window, then the canonical clock).
    ByArrival,
    /// Behind every visitor placed by arrival: a high-risk visitor the
    /// policy lets in at the back of the queue (see [`BEHIND_OFFSET`]).
    Behind,
}

impl JoinScoring {
    /// Hashes `member` of `event` under `key`. A `pre_window_us` of zero or less
    /// means one second; one beyond `2^42` µs is clamped there.
    pub fn new(
        key: &ScoreKey,
        event: &str,
        member: &str,
        opens_at_us: i64,
        pre_window_us: i64,
        placement: Placement,
    ) -> Self {
        let window = if pre_window_us <= 0 {
            DEFAULT_PRE_WINDOW_US
        } else {
            pre_window_us.min(MAX_PRE_WINDOW_US)
        };
        let span = window << TIEBREAK_BITS;
        // One keyed hash, two disjoint parts of it: the output of a keyed
        // hash is uniform and its bits independent of each other, so its
        // first eight bytes and the next two are as unrelated as two hashes
        // would be, at half the hashing (every join makes this).
        let h = key.hash(event, member);
        let prewindow_score = uniform_below(first_u64(&h), span) - span;
        let tiebreak = i64::from(u16::from_be_bytes([h[8], h[9]])) & ((1 << TIEBREAK_BITS) - 1);
        Self {
            opens_at_us,
            prewindow_score,
            tiebreak,
            behind: placement == Placement::Behind,
        }
    }
}

fn first_u64(h: &[u8; 32]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    u64::from_be_bytes(b)
}

/// Maps a uniform `u64` onto `[0, span)` by multiply-and-shift; the bias is below
/// `span / 2^64`, far too small to measure for any pre-window.
fn uniform_below(x: u64, span: i64) -> i64 {
    let span = u128::from(span.unsigned_abs());
    // The product's top 64 bits are < span <= 2^52, so the conversion never fails.
    i64::try_from((u128::from(x) * span) >> 64).unwrap_or(0)
}

/// The score of a join at canonical time `now_us` (µs since the Unix epoch).
/// See the module documentation for the formula.
pub fn arrival_score(now_us: i64, s: &JoinScoring) -> i64 {
    let base = if now_us < s.opens_at_us {
        s.prewindow_score
    } else {
        let since_open = now_us.saturating_sub(s.opens_at_us);
        if since_open > MAX_OPEN_SCORE >> TIEBREAK_BITS {
            MAX_OPEN_SCORE
        } else {
            ((since_open << TIEBREAK_BITS) | s.tiebreak).min(MAX_OPEN_SCORE)
        }
    };
    if s.behind {
        base.saturating_add(BEHIND_OFFSET)
    } else {
        base
    }
}

/// Most joins one batch can order by [`batch_tiebreak`]: one per tie-break value.
pub const MAX_BATCH_ORDER: usize = 1 << TIEBREAK_BITS;

/// The tie-break of the `index`-th of `len` joins scored at one canonical
/// instant as one batch (the Redis backend's `join.lua` mirrors it).
///
/// The joins of one batch share their microsecond, so their hash tie-breaks
/// alone would shuffle them. Here the batch index takes the high bits of the
/// 10-bit tie-break (as many as `len` needs, rounded up to a power of two)
/// and the hash keeps the rest: the batch keeps its arrival order, a lone
/// join keeps its whole hash, and equal microseconds across batches (other
/// nodes) still fall back to a tie-break. The result stays in
/// `[0, 1024)`, so [`arrival_score`] is unchanged and exact.
pub fn batch_tiebreak(tiebreak: i64, index: usize, len: usize) -> i64 {
    let len = len.clamp(1, MAX_BATCH_ORDER);
    let index = index.min(len - 1) as i64;
    let span = (MAX_BATCH_ORDER / len.next_power_of_two()) as i64;
    index * span + tiebreak.rem_euclid(span)
}

/// A score as a Redis sorted-set score; exact for every score this module makes.
pub fn to_f64(score: i64) -> f64 {
    // |score| < 2^53 is representable exactly in the 53-bit mantissa.
    score as f64
}

/// A Redis sorted-set score back to a score; exact for every score this module
/// makes (non-finite input saturates rather than panicking).
pub fn from_f64(f: f64) -> i64 {
    f as i64
}

#[cfg(test)]
mod tests;
