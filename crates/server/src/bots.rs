//! Bot defence at enter and position: risk from the request, proof-of-work
//! challenges, the high-risk policy (back of the queue, CAPTCHA hook, reject)
//! and per-IP / per-session rate limits.
//!
//! The handlers call [`BotDefence::check_rate`] first (enter and position),
//! then, on enter only, [`BotDefence::gate_enter`], which answers either
//! "join" (possibly behind every verified visitor) or a [`BotRejection`] to
//! turn into the API.md JSON with `From<BotRejection> for ApiError`.
//!
//! Order of the enter decision, and why:
//! 1. high risk + `reject` → `403`: no point making a refused client work;
//! 2. high risk + `captcha` → the CAPTCHA hook *instead of* proof-of-work, so
//!    one round trip settles it (a token and a PoW answer cannot share a body
//!    without the answer being consumed before the token is checked);
//! 3. proof-of-work when `challenge` covers the risk level;
//! 4. high risk + `back_of_queue` → join behind every verified visitor.
//!
//! A visitor the store knows already is let through any challenge of
//! steps 2 and 3: their join changes nothing (see [`BotDefence::gate_enter`]).

pub mod captcha;
pub mod challenge;
pub mod config;
pub mod entries;
pub mod rate;
pub mod reputation;
pub mod seen;
pub mod signals;

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use anteroom_core::risk::{Assessment, RiskLevel, Rules, assess};
use anteroom_core::score::Placement;
use anteroom_core::token::Keyring;
use anteroom_store::{EventId, QueueStore, StoreError, Touch};

pub use challenge::{EnterAnswer, PowAnswer};
pub use config::{
    BotsConfig, CaptchaConfig, ChallengeLevel, EventBots, HighRiskPolicy, ReputationFiles,
};
pub use entries::{EntryCap, Pending};
pub use rate::{RateKind, RateLimited, RateLimits};
pub use signals::{EnterSignals, HeaderSignals, signals_from_headers};

use crate::error::ApiError;

/// Why the bot defence could not start.
#[derive(Debug, thiserror::Error)]
pub enum BotsError {
    #[error("reputation file {}: {message}", file.display())]
    ReputationRead { file: PathBuf, message: String },
    #[error("reputation file {}: line {line}: {message}", file.display())]
    ReputationParse {
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{0}")]
    Captcha(String),
}

/// One enter call as the bot defence judges it: the event's bot settings,
/// the event and the caller's session, what the request shows, and the
/// answer it carries (a proof-of-work nonce or a CAPTCHA token), if any.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub ev: &'a EventBots,
    pub event: &'a EventId,
    pub session: &'a str,
    pub req: &'a EnterSignals<'a>,
    pub answer: Option<&'a EnterAnswer>,
}

/// The visitor may join.
#[derive(Debug)]
pub enum EnterVerdict {
    /// Where in the queue: by arrival, or behind every verified visitor;
    /// and the entry the join makes, counted against its address until the
    /// join ends ([`entries::Pending::joined`] if it made a new one).
    Join {
        placement: Placement,
        entry: Option<entries::Pending>,
    },
}

impl EnterVerdict {
    /// Where the visitor joins.
    pub fn placement(&self) -> Placement {
        match self {
            Self::Join { placement, .. } => *placement,
        }
    }
}

/// The visitor may not join yet.
#[derive(Debug)]
pub enum BotRejection {
    /// `401 challenge_required` with a fresh challenge; `reason` says why the
    /// last answer (if any) failed, e.g. `pow_insufficient_work`.
    ChallengeRequired {
        challenge: String,
        difficulty: u8,
        expires_at_ms: i64,
        reason: &'static str,
    },
    /// `401`: solve the CAPTCHA and answer `{"captchaToken": "..."}`.
    CaptchaRequired {
        site_key: Option<String>,
        reason: &'static str,
    },
    /// `403 blocked`.
    Blocked,
    /// The store could not record the answer as used.
    Unavailable(StoreError),
}

/// The bot defence of one server; cheap to clone.
#[derive(Clone)]
pub struct BotDefence {
    inner: Arc<Inner>,
}

struct Inner {
    reputation: reputation::Reputation,
    rules: Rules,
    tls_header: Option<String>,
    captcha: Option<captcha::Captcha>,
    limiters: rate::Limiters,
    window: challenge::RiskWindow,
    keyring: Arc<Keyring>,
    challenge_ttl_ms: i64,
    entries: entries::EntryCounter,
    entry_cap: EntryCap,
    throttled: seen::ThrottledSeen,
    /// Whether the missing CAPTCHA provider was logged: every high-risk
    /// arrival meets it, and a visitor decides what looks high-risk.
    told_no_captcha: std::sync::atomic::AtomicBool,
}

impl BotDefence {
    /// Loads the reputation files (a malformed one fails, naming file and
    /// line) and builds the limiters and the CAPTCHA client.
    pub fn new(
        cfg: &BotsConfig,
        limits: RateLimits,
        keyring: Arc<Keyring>,
    ) -> Result<Self, BotsError> {
        let captcha = cfg
            .captcha
            .as_ref()
            .map(captcha::Captcha::new)
            .transpose()?;
        Ok(Self {
            inner: Arc::new(Inner {
                reputation: reputation::Reputation::load(&cfg.reputation)?,
                rules: cfg.rules.clone(),
                tls_header: cfg.tls_fingerprint_header.clone(),
                captcha,
                limiters: rate::Limiters::new(limits),
                window: challenge::RiskWindow::default(),
                keyring,
                challenge_ttl_ms: i64::try_from(cfg.challenge_ttl.as_millis()).unwrap_or(i64::MAX),
                entries: entries::EntryCounter::default(),
                entry_cap: EntryCap {
                    per_window: limits.entries_per_ip,
                    window_ms: limits.entries_window_ms,
                },
                throttled: seen::ThrottledSeen::default(),
                told_no_captcha: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Every `every`: re-reads the reputation files whose stamp changed
    /// (keeping the old lists and logging file and line when one is
    /// malformed) and forgets idle rate-limit keys. Ends when the last
    /// handle to this `BotDefence` is dropped.
    pub fn spawn_reload(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.limiters.retain_recent();
                inner.entries.retain_recent(unix_ms());
                // File reads are small and rare; a blocking thread keeps
                // them off the runtime's workers all the same.
                let result =
                    tokio::task::spawn_blocking(move || inner.reputation.reload_if_changed()).await;
                match result {
                    Ok(Ok(true)) => tracing::info!("reputation lists reloaded"),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "reputation reload failed; keeping the old lists")
                    }
                    Err(e) => tracing::error!(error = %e, "reputation reload task failed"),
                }
            }
        })
    }

    /// Every `every`: marks the visitors whose polls were rate-limited as
    /// seen in `store` ([`seen`]). Ends when the last handle to this
    /// `BotDefence` is dropped.
    pub fn spawn_seen_flush(
        &self,
        store: Arc<dyn QueueStore>,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let marked = inner.throttled.flush(store.as_ref()).await;
                if marked > 0 {
                    metrics::counter!("anteroom_throttled_seen_total").increment(marked as u64);
                }
            }
        })
    }

    /// Notes that `member` polled `event` and was rate-limited: it is still
    /// there, and is marked seen on the next flush.
    pub fn note_throttled_poll(&self, event: &EventId, member: &str) {
        self.inner.throttled.note(event, member);
    }

    /// Marks the throttled visitors seen now (tests, and shutdown paths).
    pub async fn flush_throttled(&self, store: &dyn QueueStore) -> usize {
        self.inner.throttled.flush(store).await
    }

    /// Re-reads the reputation files now; on error the old lists stay.
    pub fn reload(&self) -> Result<(), BotsError> {
        self.inner.reputation.reload().map(|_| ())
    }

    /// The configured TLS fingerprint header, for [`signals_from_headers`].
    pub fn tls_fingerprint_header(&self) -> Option<&str> {
        self.inner.tls_header.as_deref()
    }

    /// Reads a request's signals with this server's TLS header.
    pub fn signals<'h>(
        &self,
        headers: &'h http::HeaderMap,
        ip: std::net::IpAddr,
    ) -> EnterSignals<'h> {
        EnterSignals {
            ip,
            headers: signals_from_headers(headers, self.tls_fingerprint_header()),
        }
    }

    /// Counts one enter or position call against the IP and session limits.
    pub fn check_rate(
        &self,
        kind: RateKind,
        ip: std::net::IpAddr,
        session: &str,
    ) -> Result<(), RateLimited> {
        self.inner.limiters.check(kind, ip, session)
    }

    /// Counts one call against the IP limit only (the page load, a
    /// proof-of-work answer): see [`rate::Limiters::check_ip`].
    pub fn check_rate_ip(&self, kind: RateKind, ip: std::net::IpAddr) -> Result<(), RateLimited> {
        self.inner.limiters.check_ip(kind, ip)
    }

    /// Whether `answer` answers what enter could have asked this caller:
    /// a proof-of-work answer to a challenge issued for this event and
    /// session (its signature, binding, expiry and work checked, nothing
    /// spent), or a CAPTCHA token on an event that asks for one. Such an
    /// answer follows the call that asked for it within the second, so it
    /// is counted against the address alone; a made-up one (any string and
    /// a number) must not buy its way past the session limit.
    pub fn answers_what_enter_asks(
        &self,
        ev: &EventBots,
        event: &EventId,
        session: &str,
        answer: &EnterAnswer,
        now_ms: i64,
    ) -> bool {
        let pow = match answer.pow_answer() {
            PowAnswer::Answer { challenge, nonce } => anteroom_core::pow::verify(
                &self.inner.keyring,
                challenge,
                nonce,
                event.as_str(),
                session,
                now_ms,
            )
            .is_ok(),
            PowAnswer::None | PowAnswer::Garbage => false,
        };
        let captcha = answer.captcha_token.is_some()
            && ev.high_risk == HighRiskPolicy::Captcha
            && self.inner.captcha.is_some();
        pow || captcha
    }

    /// Scores a request: header signals plus the IP's reputation.
    pub fn assess(&self, req: &EnterSignals<'_>) -> Assessment {
        let lists = self.inner.reputation.current();
        let signals = req.headers.with_reputation(lists.lookup(req.ip));
        assess(&signals, &self.inner.rules)
    }

    /// `(total, risky, challenged)` first contacts of `event` in the last
    /// minute on this node: the dashboard's bot and proof-of-work shares.
    pub fn arrival_shares(&self, event: &EventId, now_ms: i64) -> (u32, u32, u32) {
        self.inner.window.shares(event, now_ms)
    }

    /// The proof-of-work difficulty `event` hands out now.
    pub fn difficulty(&self, ev: &EventBots, event: &EventId, now_ms: i64) -> u8 {
        self.inner.window.difficulty(ev, event, now_ms)
    }

    /// Decides whether the caller of enter may join; see the module for the
    /// order of the steps.
    ///
    /// A visitor the store knows already (waiting, admitted or active: a
    /// reload of the waiting page, a second tab) is never asked to prove
    /// anything again: their join changes nothing, so a challenge would
    /// only make a reloading visitor solve again for the place they hold.
    /// The store is read for that only on the way to a challenge, so a
    /// visitor who may join costs no read, and a refused one just one.
    pub async fn gate_enter(
        &self,
        entry: &Entry<'_>,
        store: &dyn QueueStore,
        now_ms: i64,
    ) -> Result<EnterVerdict, BotRejection> {
        match self.first_verdict(entry, store, now_ms).await {
            Err(
                asked @ (BotRejection::ChallengeRequired { .. }
                | BotRejection::CaptchaRequired { .. }),
            ) => match store.status(entry.event, entry.session, Touch::Peek).await {
                Ok(anteroom_store::MemberState::None) | Err(_) => Err(asked),
                Ok(_) => Ok(EnterVerdict::Join {
                    // The join finds them in place: placement is not used.
                    placement: Placement::ByArrival,
                    entry: None,
                }),
            },
            verdict => verdict,
        }
    }

    async fn first_verdict(
        &self,
        entry: &Entry<'_>,
        store: &dyn QueueStore,
        now_ms: i64,
    ) -> Result<EnterVerdict, BotRejection> {
        let Entry {
            ev,
            event,
            session,
            req,
            answer,
        } = *entry;
        let risk = self.assess(req);
        let high = risk.level == RiskLevel::High;
        let label = match risk.level {
            RiskLevel::Low => "low",
            RiskLevel::Medium => "medium",
            RiskLevel::High => "high",
        };
        crate::metrics::BOT_RISK.increment(label, 1);
        if risk.level > RiskLevel::Low {
            tracing::debug!(event = %event, ip = %req.ip, score = risk.score, reasons = ?risk.reasons, "risky arrival");
        }
        let pow = answer.map_or(PowAnswer::None, EnterAnswer::pow_answer);
        let token = answer.and_then(|a| a.captcha_token.as_deref());
        if matches!(pow, PowAnswer::None) && token.is_none() {
            // Only first contacts count, so a solver is not counted twice.
            let risky = risk.level >= RiskLevel::Medium;
            self.inner.window.record(event, risky, now_ms);
        }

        if high && ev.high_risk == HighRiskPolicy::Reject {
            return Err(BotRejection::Blocked);
        }
        let (over_cap, entry_pending) = self
            .entry_price(event, session, req.ip, store, now_ms)
            .await;
        if high && ev.high_risk == HighRiskPolicy::Captcha {
            if let Some(captcha) = &self.inner.captcha {
                self.captcha_step(captcha, token, req).await?;
                // Past the address's entry cap a CAPTCHA does not buy an
                // arrival place: one farmed CAPTCHA per entry would
                // undercut the rising proof-of-work price (and a bot can
                // look high-risk on purpose). Such an entry goes behind
                // every verified visitor.
                let placement = if over_cap.is_some() {
                    Placement::Behind
                } else {
                    Placement::ByArrival
                };
                return Ok(EnterVerdict::Join {
                    placement,
                    entry: entry_pending,
                });
            }
            // Without a provider the safest open door is the back of the
            // queue. Said once: any visitor can look high-risk.
            if !self
                .inner
                .told_no_captcha
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(event = %event, "high_risk = captcha but no bots.captcha configured; placing high-risk visitors at the back (said once)");
            }
        }
        let needs_pow = match ev.challenge {
            ChallengeLevel::Off => false,
            ChallengeLevel::High => high,
            ChallengeLevel::Medium => risk.level >= RiskLevel::Medium,
            ChallengeLevel::All => true,
        };
        if needs_pow || over_cap.is_some() {
            self.pow_step(entry, pow, over_cap.unwrap_or(0), store, now_ms)
                .await?;
        }
        let behind = high
            && matches!(
                ev.high_risk,
                HighRiskPolicy::BackOfQueue | HighRiskPolicy::Captcha
            );
        let placement = if behind {
            Placement::Behind
        } else {
            Placement::ByArrival
        };
        Ok(EnterVerdict::Join {
            placement,
            entry: entry_pending,
        })
    }

    /// The extra proof-of-work bits the entry cap asks of this join, if the
    /// address is over it, and the join's entry, counted against the
    /// address while the join is in flight. A visitor already in the queue
    /// (a reload, a second tab) makes no new entry and pays nothing; that
    /// costs one store read, only for addresses over the cap.
    async fn entry_price(
        &self,
        event: &EventId,
        session: &str,
        ip: std::net::IpAddr,
        store: &dyn QueueStore,
        now_ms: i64,
    ) -> (Option<u8>, Option<entries::Pending>) {
        let inner = &self.inner;
        let (extra, pending) = inner.entries.price(inner.entry_cap, event, ip, now_ms);
        let Some(extra) = extra else {
            return (None, pending);
        };
        match store.status(event, session, Touch::Peek).await {
            Ok(anteroom_store::MemberState::None) | Err(_) => {
                metrics::counter!("anteroom_entry_cap_priced_total").increment(1);
                (Some(extra), pending)
            }
            // Queued already: no new entry, nothing to count.
            Ok(_) => (None, None),
        }
    }

    async fn pow_step(
        &self,
        entry: &Entry<'_>,
        pow: PowAnswer<'_>,
        extra_bits: u8,
        store: &dyn QueueStore,
        now_ms: i64,
    ) -> Result<(), BotRejection> {
        let Entry {
            ev, event, session, ..
        } = *entry;
        let inner = &self.inner;
        let first_contact = matches!(pow, PowAnswer::None);
        // The address's price may rise by a bit while its visitor solves
        // (others behind it join meanwhile): an answer one bit short of the
        // price now still pays for the entry, or a busy NAT would solve twice.
        let min_difficulty = ev
            .difficulty
            .saturating_add(extra_bits.saturating_sub(1))
            .min(MAX_DIFFICULTY);
        let checked = challenge::check(
            &inner.keyring,
            event,
            session,
            pow,
            min_difficulty,
            store,
            now_ms,
        )
        .await
        .map_err(BotRejection::Unavailable)?;
        let label = match checked {
            Ok(()) => "valid",
            Err(challenge::reason::CHALLENGE_REQUIRED) => "issued",
            Err(_) => "invalid",
        };
        metrics::counter!("anteroom_pow_answers_total", "result" => label).increment(1);
        if first_contact && label == "issued" {
            inner.window.record_challenged(event, now_ms);
        }
        checked.map_err(|reason| {
            let difficulty = self
                .difficulty(ev, event, now_ms)
                .saturating_add(extra_bits)
                .min(MAX_DIFFICULTY);
            challenge::fresh(
                &inner.keyring,
                event,
                session,
                difficulty,
                now_ms,
                inner.challenge_ttl_ms,
                reason,
            )
        })
    }

    async fn captcha_step(
        &self,
        captcha: &captcha::Captcha,
        token: Option<&str>,
        req: &EnterSignals<'_>,
    ) -> Result<(), BotRejection> {
        let reason = match token {
            None => "captcha_required",
            Some(token) if captcha.verify(token, req.ip).await => return Ok(()),
            Some(_) => "captcha_failed",
        };
        Err(BotRejection::CaptchaRequired {
            site_key: captcha.site_key.clone(),
            reason,
        })
    }
}

/// API.md's answers. A CAPTCHA demand is a `401 challenge_required` whose
/// `challenge` object carries `captcha.siteKey` instead of a PoW string, so
/// existing clients see a known code; a dedicated `captcha_required` code
/// needs an `ApiError` variant.
impl From<BotRejection> for ApiError {
    fn from(r: BotRejection) -> Self {
        match r {
            BotRejection::ChallengeRequired {
                challenge,
                difficulty,
                expires_at_ms,
                reason,
            } => ApiError::ChallengeRequired {
                challenge: serde_json::json!({
                    "challenge": challenge,
                    "difficulty": difficulty,
                    "expiresAt": crate::clock::rfc3339_ms(expires_at_ms),
                    "reason": reason,
                }),
            },
            BotRejection::CaptchaRequired { site_key, reason } => ApiError::ChallengeRequired {
                challenge: serde_json::json!({
                    "captcha": { "siteKey": site_key },
                    "reason": reason,
                }),
            },
            BotRejection::Blocked => ApiError::Blocked,
            BotRejection::Unavailable(e) => ApiError::from(e),
        }
    }
}

impl From<RateLimited> for ApiError {
    fn from(r: RateLimited) -> Self {
        ApiError::RateLimited {
            retry_after_secs: r.retry_after_s,
        }
    }
}

/// The hardest challenge ever handed out, in bits: past it a phone would
/// take hours.
const MAX_DIFFICULTY: u8 = 32;

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
