//! The outside form of the bot defence's settings: the server-wide `[bots]`
//! table ([`BotsConfig`]) and each event's `bots = { .. }` table ([`EventBots`]),
//! with defaults and `deny_unknown_fields`, for the server config to embed.

use std::path::PathBuf;
use std::time::Duration;

use anteroom_core::risk::Rules;
use serde::{Deserialize, Serialize};

/// Server-wide bot defence settings (`[bots]`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BotsConfig {
    /// CIDR files for IP reputation; an absent file means an empty list.
    pub reputation: ReputationFiles,
    /// Request header in which the edge forwards the client's TLS fingerprint
    /// (e.g. `X-JA4`); `None` ignores TLS fingerprints. Only set it when the
    /// edge overwrites the header, or a client can forge it.
    pub tls_fingerprint_header: Option<String>,
    /// The CAPTCHA provider hook, used by events with `high_risk = "captcha"`.
    pub captcha: Option<CaptchaConfig>,
    /// Risk weights and thresholds (anteroom-core's [`Rules`]).
    pub rules: Rules,
    /// How long a proof-of-work challenge stays answerable.
    #[serde(with = "humantime_serde")]
    pub challenge_ttl: Duration,
}

/// `bots.reputation = { datacenter = "path", vpn = "path", known_bot = "path" }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReputationFiles {
    pub datacenter: Option<PathBuf>,
    pub vpn: Option<PathBuf>,
    pub known_bot: Option<PathBuf>,
}

/// A Turnstile / hCaptcha `siteverify`-compatible provider.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CaptchaConfig {
    /// Where the client's token is POSTed (`secret` + `response` form fields).
    /// Plain `http://` only: the server carries no TLS client, so a public
    /// provider is reached through a local egress proxy or sidecar.
    pub verify_url: String,
    /// Sent to the provider; never logged.
    pub secret: String,
    /// Public key for the page's widget, returned with `captcha_required`.
    #[serde(default)]
    pub site_key: Option<String>,
    /// Longest wait for the provider; past it the visitor is not verified.
    #[serde(default = "default_captcha_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

impl std::fmt::Debug for CaptchaConfig {
    // By hand so the secret never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptchaConfig")
            .field("verify_url", &self.verify_url)
            .field("site_key", &self.site_key)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn default_captcha_timeout() -> Duration {
    Duration::from_secs(3)
}

/// Which risk levels must solve a proof-of-work challenge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeLevel {
    #[default]
    Off,
    High,
    /// Medium and high.
    Medium,
    All,
}

/// What happens to a high-risk visitor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HighRiskPolicy {
    /// Joins behind every verified visitor.
    #[default]
    BackOfQueue,
    /// Must pass the CAPTCHA hook (instead of proof-of-work), then joins normally.
    Captcha,
    /// `403 blocked`.
    Reject,
    /// Treated like everybody else.
    Allow,
}

/// One event's `bots = { challenge, difficulty, high_risk, adaptive_difficulty }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventBots {
    pub challenge: ChallengeLevel,
    /// Leading zero bits of a proof-of-work answer (1..=32).
    pub difficulty: u8,
    pub high_risk: HighRiskPolicy,
    /// Raise the difficulty by one bit per 10 % of medium/high-risk arrivals
    /// over the last minute, up to `difficulty + 4`.
    pub adaptive_difficulty: bool,
}

/// The proof-of-work difficulty of an event that does not set one, in bits.
/// At 16 bits the page's solver takes less than the page takes to load
/// (solve times per difficulty in docs/benchmarks.md), a cost
/// a person does not notice, yet each of a script's joins costs 65 536
/// hashes on average (while the server checks one).
pub const DEFAULT_DIFFICULTY: u8 = 16;

impl Default for EventBots {
    fn default() -> Self {
        Self {
            challenge: ChallengeLevel::Off,
            difficulty: DEFAULT_DIFFICULTY,
            high_risk: HighRiskPolicy::BackOfQueue,
            adaptive_difficulty: false,
        }
    }
}

impl Default for BotsConfig {
    fn default() -> Self {
        Self {
            reputation: ReputationFiles::default(),
            tls_fingerprint_header: None,
            captcha: None,
            rules: Rules::default(),
            // Long enough for a slow phone at the highest adaptive difficulty.
            challenge_ttl: Duration::from_secs(120),
        }
    }
}
