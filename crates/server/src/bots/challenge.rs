//! The proof-of-work step of enter: issue a signed challenge (nothing stored),
//! verify an answer with one MAC and one hash, consume it once in the store;
//! and the per-event window of risky arrivals that adaptive difficulty reads.

use std::collections::HashMap;
use std::sync::Mutex;

use anteroom_core::pow;
use anteroom_core::token::Keyring;
use anteroom_store::{EventId, QueueStore};
use serde::Deserialize;

use super::BotRejection;
use super::config::EventBots;

/// The optional JSON body of enter: a proof-of-work answer
/// (`{"challenge": "...", "nonce": N}`) or a CAPTCHA token
/// (`{"captchaToken": "..."}`).
///
/// `challenge` and `nonce` take any JSON value so that a garbage answer (a
/// float, a negative or 30-digit nonce, an object) earns a fresh challenge,
/// as API.md asks, instead of a `400` the page would not know how to handle.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnterAnswer {
    pub challenge: Option<serde_json::Value>,
    pub nonce: Option<serde_json::Value>,
    #[serde(rename = "captchaToken")]
    pub captcha_token: Option<String>,
}

/// What an [`EnterAnswer`] offers as proof-of-work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowAnswer<'a> {
    None,
    /// Present but not a string challenge and a `u64` nonce.
    Garbage,
    Answer {
        challenge: &'a str,
        nonce: u64,
    },
}

impl EnterAnswer {
    /// A proof-of-work answer from a challenge string and a nonce.
    pub fn pow(challenge: &str, nonce: u64) -> Self {
        Self {
            challenge: Some(challenge.into()),
            nonce: Some(nonce.into()),
            captcha_token: None,
        }
    }

    /// A CAPTCHA provider's token.
    pub fn captcha(token: &str) -> Self {
        Self {
            captcha_token: Some(token.to_owned()),
            ..Self::default()
        }
    }

    /// The proof-of-work part. A nonce may also come as a decimal string,
    /// for clients whose numbers lose precision past 2^53.
    pub fn pow_answer(&self) -> PowAnswer<'_> {
        match (&self.challenge, &self.nonce) {
            (None, None) => PowAnswer::None,
            (Some(serde_json::Value::String(challenge)), Some(nonce)) => {
                let nonce = match nonce {
                    serde_json::Value::Number(n) => n.as_u64(),
                    serde_json::Value::String(s) if s.bytes().all(|b| b.is_ascii_digit()) => {
                        s.parse().ok()
                    }
                    _ => None,
                };
                nonce.map_or(PowAnswer::Garbage, |nonce| PowAnswer::Answer {
                    challenge,
                    nonce,
                })
            }
            _ => PowAnswer::Garbage,
        }
    }
}

/// Why a fresh challenge is handed out; the `reason` of `ChallengeRequired`.
pub mod reason {
    pub const CHALLENGE_REQUIRED: &str = "challenge_required";
    pub const ANSWER_MALFORMED: &str = "answer_malformed";
    pub const CHALLENGE_USED: &str = "challenge_used";
    /// The challenge was issued below the event's current base difficulty.
    pub const DIFFICULTY_TOO_LOW: &str = "pow_difficulty_too_low";
}

/// Makes a fresh challenge as a rejection.
pub fn fresh(
    keyring: &Keyring,
    event: &EventId,
    session: &str,
    difficulty: u8,
    now_ms: i64,
    ttl_ms: i64,
    reason: &'static str,
) -> BotRejection {
    let challenge = pow::issue(
        keyring,
        event.as_str(),
        session,
        difficulty,
        now_ms,
        ttl_ms,
        rand::random(),
    );
    BotRejection::ChallengeRequired {
        challenge,
        difficulty,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
        reason,
    }
}

/// Checks an answer: `Ok(())` once it is valid, bound to this caller, at
/// least `min_difficulty`, and never seen before; otherwise the reason.
pub async fn check(
    keyring: &Keyring,
    event: &EventId,
    session: &str,
    answer: PowAnswer<'_>,
    min_difficulty: u8,
    store: &dyn QueueStore,
    now_ms: i64,
) -> Result<Result<(), &'static str>, anteroom_store::StoreError> {
    let (challenge, nonce) = match answer {
        PowAnswer::None => return Ok(Err(reason::CHALLENGE_REQUIRED)),
        PowAnswer::Garbage => return Ok(Err(reason::ANSWER_MALFORMED)),
        PowAnswer::Answer { challenge, nonce } => (challenge, nonce),
    };
    let claims = match pow::verify(keyring, challenge, nonce, event.as_str(), session, now_ms) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.code())),
    };
    // A challenge from before the operator raised the difficulty is too cheap.
    if claims.difficulty < min_difficulty {
        return Ok(Err(reason::DIFFICULTY_TOO_LOW));
    }
    let expires_at_us = claims.expires_at_ms.saturating_mul(1000);
    if store
        .consume_once(event, &claims.nonce, expires_at_us)
        .await?
    {
        Ok(Ok(()))
    } else {
        Ok(Err(reason::CHALLENGE_USED))
    }
}

/// Arrivals per second over the last minute, per event.
#[derive(Default)]
pub struct RiskWindow {
    events: Mutex<HashMap<EventId, [Bucket; 60]>>,
}

#[derive(Clone, Copy, Default)]
struct Bucket {
    second: i64,
    total: u32,
    risky: u32,
    /// First contacts that were handed a proof-of-work challenge.
    challenged: u32,
}

/// Fewer arrivals than this in the window say nothing about the crowd: one
/// risky visitor on a quiet event must not raise everyone's difficulty by 4.
const MIN_SAMPLE: u32 = 20;

impl RiskWindow {
    pub fn record(&self, event: &EventId, risky: bool, now_ms: i64) {
        self.bucket(event, now_ms, |b| {
            b.total = b.total.saturating_add(1);
            b.risky = b.risky.saturating_add(u32::from(risky));
        });
    }

    /// Counts a first contact that was asked for proof-of-work (the
    /// dashboard's proof-of-work share).
    pub fn record_challenged(&self, event: &EventId, now_ms: i64) {
        self.bucket(event, now_ms, |b| {
            b.challenged = b.challenged.saturating_add(1);
        });
    }

    fn bucket(&self, event: &EventId, now_ms: i64, update: impl FnOnce(&mut Bucket)) {
        let second = now_ms.div_euclid(1000);
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let touch = |buckets: &mut [Bucket; 60]| {
            let b = &mut buckets[slot(second)];
            if b.second != second {
                *b = Bucket {
                    second,
                    ..Bucket::default()
                };
            }
            update(b);
        };
        // The event is nearly always known: its id is copied once, not per
        // first contact.
        if let Some(buckets) = events.get_mut(event) {
            return touch(buckets);
        }
        touch(
            events
                .entry(event.clone())
                .or_insert([Bucket::default(); 60]),
        );
    }

    /// `(total, risky, challenged)` first contacts in the 60 s up to `now_ms`.
    pub fn shares(&self, event: &EventId, now_ms: i64) -> (u32, u32, u32) {
        let second = now_ms.div_euclid(1000);
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let Some(buckets) = events.get(event) else {
            return (0, 0, 0);
        };
        buckets
            .iter()
            .filter(|b| b.second > second - 60 && b.second <= second)
            .fold((0, 0, 0), |(t, r, c), b| {
                (
                    t.saturating_add(b.total),
                    r.saturating_add(b.risky),
                    c.saturating_add(b.challenged),
                )
            })
    }

    /// `(total, risky)` arrivals in the 60 s up to `now_ms`.
    pub fn counts(&self, event: &EventId, now_ms: i64) -> (u32, u32) {
        let second = now_ms.div_euclid(1000);
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let Some(buckets) = events.get(event) else {
            return (0, 0);
        };
        buckets
            .iter()
            .filter(|b| b.second > second - 60 && b.second <= second)
            .fold((0, 0), |(t, r), b| {
                (t.saturating_add(b.total), r.saturating_add(b.risky))
            })
    }

    /// The event's difficulty now: the base, plus one bit per full 10 % of
    /// risky arrivals when adaptive, capped at base + 4.
    pub fn difficulty(&self, ev: &EventBots, event: &EventId, now_ms: i64) -> u8 {
        if !ev.adaptive_difficulty {
            return ev.difficulty;
        }
        let (total, risky) = self.counts(event, now_ms);
        if total < MIN_SAMPLE {
            return ev.difficulty;
        }
        let tenths = u64::from(risky) * 10 / u64::from(total);
        let extra = u8::try_from(tenths.min(4)).unwrap_or(4);
        ev.difficulty.saturating_add(extra)
    }
}

fn slot(second: i64) -> usize {
    // rem_euclid(60) is in 0..60.
    usize::try_from(second.rem_euclid(60)).unwrap_or(0)
}
