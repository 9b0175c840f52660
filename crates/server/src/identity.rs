//! Who the caller is: the session cookie (`anteroom_sid`, 128-bit random), or
//! the `sub` of a `Bearer` JWT for events configured with JWT identity.
//!
//! The session id is the queue member; it lives only in an `HttpOnly` cookie
//! and is never logged or shown to scripts.

pub mod jwt;

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use rand::RngCore;

use crate::error::ApiError;
pub use jwt::JwtVerifier;

/// The session cookie's name when cookies are not `Secure` (plain-http
/// development), and its name before the `__Host-` prefix was introduced:
/// still read so a visitor mid-queue keeps the place across an upgrade.
pub const SESSION_COOKIE: &str = "anteroom_sid";
/// The pass cookie's unprefixed name (see [`SESSION_COOKIE`]).
pub const PASS_COOKIE: &str = "anteroom_pass";
/// The session cookie's name when cookies are `Secure`: the `__Host-` prefix
/// makes the browser refuse it unless it is `Secure`, host-only and `Path=/`,
/// so a sibling subdomain cannot plant a session (fixation) or a pass.
pub const HOST_SESSION_COOKIE: &str = "__Host-anteroom_sid";
/// The pass cookie's name when cookies are `Secure` (see [`HOST_SESSION_COOKIE`]).
pub const HOST_PASS_COOKIE: &str = "__Host-anteroom_pass";
/// Every cookie name Anteroom sets or reads. None of them is the origin's
/// business: the gate removes them from the `Cookie` header it forwards.
pub const COOKIE_NAMES: [&str; 4] = [
    HOST_SESSION_COOKIE,
    HOST_PASS_COOKIE,
    SESSION_COOKIE,
    PASS_COOKIE,
];

/// Whether `name` (exactly as sent in a `Cookie` header; cookie names are
/// case-sensitive) is one of Anteroom's own cookies.
pub fn is_anteroom_cookie(name: &str) -> bool {
    COOKIE_NAMES.contains(&name)
}

/// A session cookie lives a day: long enough to outlast any queue.
const SESSION_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The caller, resolved.
#[derive(Clone, Debug)]
pub struct Visitor {
    /// The queue member: the session id or the JWT `sub`.
    pub member: String,
    /// `Set-Cookie` for a session that was created by this request.
    pub new_cookie: Option<HeaderValue>,
}

/// Resolves the caller of a request for an event with identity `jwt`
/// (`Some`) or cookie identity (`None`). With `create`, a caller without a
/// session cookie gets a new one; without, such a caller is `Ok(None)`.
pub fn resolve(
    headers: &HeaderMap,
    jwt: Option<&JwtVerifier>,
    create: bool,
    insecure_cookies: bool,
) -> Result<Option<Visitor>, ApiError> {
    if let Some(verifier) = jwt {
        let token = bearer(headers).ok_or(ApiError::InvalidIdentity)?;
        let member = verifier
            .subject(token)
            .map_err(|_| ApiError::InvalidIdentity)?;
        return Ok(Some(Visitor {
            member,
            new_cookie: None,
        }));
    }
    if let Some(sid) = session_id(headers) {
        return Ok(Some(Visitor {
            member: sid.to_owned(),
            new_cookie: None,
        }));
    }
    if !create {
        return Ok(None);
    }
    let sid = new_session_id();
    let cookie = set_cookie(
        SESSION_COOKIE,
        &sid,
        Some(SESSION_MAX_AGE),
        insecure_cookies,
    );
    Ok(Some(Visitor {
        member: sid,
        new_cookie: cookie,
    }))
}

/// The caller's well-formed session id, if any.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, SESSION_COOKIE).filter(|s| is_session_id(s))
}

/// `Authorization: Bearer <token>`.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// 128 random bits as 32 lower-case hex digits.
pub fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_session_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The value of cookie `name` across every `Cookie` header.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// A `Set-Cookie` value: `HttpOnly; Secure; SameSite=Strict; Path=/`, with
/// `Secure` dropped only for plain-http development. `max_age` of zero deletes.
pub fn set_cookie(
    name: &str,
    value: &str,
    max_age: Option<Duration>,
    insecure: bool,
) -> Option<HeaderValue> {
    let mut s = format!("{name}={value}; HttpOnly; SameSite=Strict; Path=/");
    if !insecure {
        s.push_str("; Secure");
    }
    if let Some(age) = max_age {
        s.push_str(&format!("; Max-Age={}", age.as_secs()));
    }
    HeaderValue::from_str(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; anteroom_sid=0123456789abcdef0123456789abcdef; b=2"),
        );
        assert_eq!(session_id(&h), Some("0123456789abcdef0123456789abcdef"));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("anteroom_sid=nothex"),
        );
        assert_eq!(session_id(&h), None);
    }

    #[test]
    fn anteroom_cookie_names() {
        for name in COOKIE_NAMES {
            assert!(is_anteroom_cookie(name));
        }
        assert!(!is_anteroom_cookie("session"));
        assert!(!is_anteroom_cookie("ANTEROOM_SID"));
    }

    #[test]
    fn new_ids_are_128_bit_hex() {
        let a = new_session_id();
        assert!(is_session_id(&a));
        assert_ne!(a, new_session_id());
    }

    #[test]
    fn cookie_flags() {
        let c = set_cookie("x", "v", None, false).unwrap();
        assert_eq!(c, "x=v; HttpOnly; SameSite=Strict; Path=/; Secure");
        let c = set_cookie("x", "v", Some(Duration::from_secs(5)), true).unwrap();
        assert_eq!(c, "x=v; HttpOnly; SameSite=Strict; Path=/; Max-Age=5");
    }
}
