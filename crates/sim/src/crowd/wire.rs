//! The bits of the API.md wire format a visitor needs: the QueuePosition
//! body, the challenge, and the two cookies, kept by hand so thousands of
//! visitors can share one connection pool yet each keep their own identity.

use reqwest::header::{HeaderMap, SET_COOKIE};
use serde::Deserialize;

/// The QueuePosition answer (only the fields the simulator reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuePosition {
    pub status: String,
    #[serde(default)]
    pub estimated_wait_seconds: Option<f64>,
    #[serde(default)]
    pub poll_after_ms: Option<u64>,
    #[serde(default)]
    pub token: Option<String>,
}

/// The `401 challenge_required` answer to enter.
#[derive(Debug, Deserialize)]
pub struct ChallengeAnswer {
    pub challenge: Challenge,
}

/// A proof-of-work challenge.
#[derive(Debug, Deserialize)]
pub struct Challenge {
    pub challenge: String,
    pub difficulty: u8,
}

/// Any JSON error body from Anteroom.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// One visitor's cookies: the session and, once redeemed, the pass.
#[derive(Debug, Default, Clone)]
pub struct Cookies {
    pub sid: Option<String>,
    pub pass: Option<String>,
    /// The server set the `__Host-` names (its cookies are `Secure`).
    pub host_prefix: bool,
}

impl Cookies {
    /// Keeps every `anteroom_*` cookie the answer sets (and forgets cleared ones).
    pub fn absorb(&mut self, headers: &HeaderMap) {
        for (name, host, val) in set_cookies(headers) {
            self.host_prefix |= host;
            let val = val.map(str::to_owned);
            match name {
                "anteroom_sid" => self.sid = val,
                "anteroom_pass" => self.pass = val,
                _ => {}
            }
        }
    }

    /// The `Cookie` header to send, if any cookie is held.
    pub fn header(&self) -> Option<String> {
        let mut parts = Vec::with_capacity(2);
        let prefix = if self.host_prefix { "__Host-" } else { "" };
        if let Some(sid) = &self.sid {
            parts.push(format!("{prefix}anteroom_sid={sid}"));
        }
        if let Some(pass) = &self.pass {
            parts.push(format!("{prefix}anteroom_pass={pass}"));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// The cookies an answer sets: (name without `__Host-`, whether it had the
/// prefix, value or `None` when cleared).
pub fn set_cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, bool, Option<&str>)> {
    headers.get_all(SET_COOKIE).into_iter().filter_map(|value| {
        let pair = value.to_str().ok()?.split(';').next().unwrap_or_default();
        let (name, val) = pair.split_once('=')?;
        let val = val.trim();
        let val = (!val.is_empty()).then_some(val);
        let name = name.trim();
        Some(match name.strip_prefix("__Host-") {
            Some(bare) => (bare, true, val),
            None => (name, false, val),
        })
    })
}

/// Seconds from a `Retry-After` header, when present and numeric.
pub fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn keeps_session_and_pass_cookies() {
        let mut h = HeaderMap::new();
        h.append(
            SET_COOKIE,
            HeaderValue::from_static("anteroom_sid=abc; HttpOnly; Path=/"),
        );
        h.append(
            SET_COOKIE,
            HeaderValue::from_static("anteroom_pass=p.q; Max-Age=60"),
        );
        h.append(SET_COOKIE, HeaderValue::from_static("other=1"));
        let mut c = Cookies::default();
        c.absorb(&h);
        assert_eq!(
            c.header().as_deref(),
            Some("anteroom_sid=abc; anteroom_pass=p.q")
        );
        let mut cleared = HeaderMap::new();
        cleared.append(
            SET_COOKIE,
            HeaderValue::from_static("anteroom_pass=; Max-Age=0"),
        );
        c.absorb(&cleared);
        assert_eq!(c.header().as_deref(), Some("anteroom_sid=abc"));
        let mut secure = Cookies::default();
        let mut h = HeaderMap::new();
        h.append(
            SET_COOKIE,
            HeaderValue::from_static("__Host-anteroom_sid=abc; Secure; Path=/"),
        );
        secure.absorb(&h);
        assert_eq!(secure.header().as_deref(), Some("__Host-anteroom_sid=abc"));
    }
}
