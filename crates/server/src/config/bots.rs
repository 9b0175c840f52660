//! The validated bot tables as the bot defence's own types: the bot module
//! knows nothing of the configuration, which maps onto it here.

use crate::bots::{ChallengeLevel, EventBots, HighRiskPolicy, RateLimits};

use super::{Bots, Limits};

/// The integrator's validated per-event `Bots` maps one to one.
impl From<&Bots> for EventBots {
    fn from(b: &Bots) -> Self {
        use super::{ChallengeLevel as C, HighRisk as H};
        Self {
            challenge: match b.challenge {
                C::Off => ChallengeLevel::Off,
                C::High => ChallengeLevel::High,
                C::Medium => ChallengeLevel::Medium,
                C::All => ChallengeLevel::All,
            },
            difficulty: b.difficulty,
            high_risk: match b.high_risk {
                H::BackOfQueue => HighRiskPolicy::BackOfQueue,
                H::Captcha => HighRiskPolicy::Captcha,
                H::Reject => HighRiskPolicy::Reject,
                H::Allow => HighRiskPolicy::Allow,
            },
            adaptive_difficulty: b.adaptive_difficulty,
        }
    }
}

impl From<&Limits> for RateLimits {
    fn from(l: &Limits) -> Self {
        Self {
            per_ip_per_second: l.per_ip_per_second,
            per_session_per_second: l.per_session_per_second,
            entries_per_ip: l.entries_per_ip,
            entries_window_ms: i64::try_from(l.entries_window.as_millis()).unwrap_or(i64::MAX),
        }
    }
}
