//! Who the caller is: the session cookie (`anteroom_sid`, 128-bit random), or
//! the `sub` of a `Bearer` JWT for events configured with JWT identity.
//!
//! The session id is the queue member; it lives only in an `HttpOnly` cookie
//! and is never logged or shown to scripts.

pub mod cookies;
pub mod jwt;

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use rand::RngCore;

use crate::error::ApiError;
pub use cookies::{CookieName, CookieSettings, SameSite, ScannedCookies};
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
    /// `Set-Cookie` for the session cookie: a session created by this
    /// request, or on a call that may set cookies (enter, the waiting
    /// page) the session cookie set again for another day, under the
    /// `__Host-` name.
    pub new_cookie: Option<HeaderValue>,
    /// Whether this request created the session (it cannot be queued yet).
    pub created: bool,
}

/// Whether resolving a caller may set the session cookie: mint a session
/// for a caller without one, or move an old unprefixed cookie to its
/// current name. Only the calls that begin a visit (enter, the waiting
/// page) may; every other call reads the session it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mint {
    Allowed,
    Never,
}

/// Resolves the caller of a request for an event with identity `jwt`
/// (`Some`) or cookie identity (`None`). With [`Mint::Allowed`], a caller
/// without a session cookie gets a new one, unless the request may have been
/// stripped of it by `SameSite` ([`cookies::may_mint_session`]); otherwise
/// such a caller is `Ok(None)`.
pub fn resolve(
    headers: &HeaderMap,
    jwt: Option<&JwtVerifier>,
    mint: Mint,
    cookies: &CookieSettings,
) -> Result<Option<Visitor>, ApiError> {
    let create = mint == Mint::Allowed;
    if let Some(verifier) = jwt {
        let token = bearer(headers).ok_or(ApiError::InvalidIdentity)?;
        let member = verifier
            .subject(token)
            .map_err(|_| ApiError::InvalidIdentity)?;
        return Ok(Some(Visitor {
            member,
            new_cookie: None,
            created: false,
        }));
    }
    if let Some((sid, name)) = session_id(headers, cookies) {
        // Every call that may set cookies sets it again: its day counts
        // from the last enter or page load, not from the first visit, so a
        // visitor who opened a countdown page yesterday does not lose the
        // session (and its place) in the middle of today's queue. An old
        // unprefixed cookie is not set again, under either name: a sibling
        // subdomain can plant one with an id it knows, and set again under
        // the `__Host-` name that id would stay the visitor's for good,
        // past the upgrade, where no sibling could ever replace it (its
        // planter polls as the visitor and redeems the admission first).
        // Unrenewed, it ages out within the day of its last setting.
        let new_cookie = (create && name == CookieName::Current)
            .then(|| cookies.session_cookie(sid, Some(SESSION_MAX_AGE)))
            .flatten();
        return Ok(Some(Visitor {
            member: sid.to_owned(),
            new_cookie,
            created: false,
        }));
    }
    if !create || !cookies::may_mint_session(headers) {
        return Ok(None);
    }
    let sid = new_session_id();
    let cookie = cookies.session_cookie(&sid, Some(SESSION_MAX_AGE));
    Ok(Some(Visitor {
        member: sid,
        new_cookie: cookie,
        created: true,
    }))
}

/// The caller's well-formed session id, if any, and the name it came under.
pub fn session_id<'h>(
    headers: &'h HeaderMap,
    cookies: &CookieSettings,
) -> Option<(&'h str, CookieName)> {
    cookies.session(headers).filter(|(s, _)| is_session_id(s))
}

/// The caller of a request to a protected path, for the gate, from its
/// one scan of the cookies: as [`resolve`] without creating, or else the
/// session the pass cookie names (a cross-site form `POST` carries the pass
/// but not the `Lax` session cookie; see [`CookieSettings::pass_session`]).
pub fn gate_member(
    headers: &HeaderMap,
    jwt: Option<&JwtVerifier>,
    cookies: &ScannedCookies<'_>,
) -> Option<String> {
    if let Some(verifier) = jwt {
        // A bad or missing JWT is simply "no pass": the request is queued.
        return bearer(headers).and_then(|token| verifier.subject(token).ok());
    }
    let session = cookies
        .session
        .map(|(sid, _)| sid)
        .filter(|s| is_session_id(s));
    session
        .or_else(|| cookies.pass_session())
        .map(str::to_owned)
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
    // Every new visitor gets one: the digits from a table, where a `format!`
    // of the number went through the formatter's padding (about 750
    // instructions a join).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(32);
    for b in bytes {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    id
}

pub(crate) fn is_session_id(s: &str) -> bool {
    // Every poll and gated request checks one. Without an early exit and
    // on a fixed length, the compiler checks the 32 bytes in a few vector
    // instructions instead of a branch per byte.
    let Ok(bytes) = <&[u8; 32]>::try_from(s.as_bytes()) else {
        return false;
    };
    bytes.iter().fold(true, |hex, &b| {
        hex & ((b.wrapping_sub(b'0') < 10) | (b.wrapping_sub(b'a') < 6))
    })
}

/// The value of cookie `name` across every `Cookie` header.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    cookie_of(headers, name, None).map(|(v, _)| v)
}

/// The value of cookie `first` across every `Cookie` header or, when it is
/// absent, of cookie `second`; the flag says whether it was `first`.
///
/// Every poll and every gated request reads two or four names (a `__Host-`
/// name and the plain one, of the session and of the pass), so both names
/// are looked for in one scan of the bytes for `name=` at the start of a
/// pair. Only the value found is checked as text, not the rest of the
/// field: browsers send other sites' scripts' cookies with UTF-8 in them,
/// and such a cookie must not hide the visitor's session.
pub fn cookie_of<'h>(
    headers: &'h HeaderMap,
    first: &str,
    second: Option<&str>,
) -> Option<(&'h str, bool)> {
    let (first, second) = (first.as_bytes(), second.map(str::as_bytes));
    let mut fallback = None;
    for field in headers.get_all(header::COOKIE) {
        let mut rest = field.as_bytes();
        loop {
            let end = memchr::memchr(b';', rest).unwrap_or(rest.len());
            let pair = rest[..end].trim_ascii();
            if let Some(v) = value_of(pair, first) {
                return Some((v, true));
            }
            if fallback.is_none()
                && let Some(v) = second.and_then(|second| value_of(pair, second))
            {
                fallback = Some(v);
            }
            if end == rest.len() {
                break;
            }
            rest = &rest[end + 1..];
        }
    }
    fallback.map(|v| (v, false))
}

/// Prefix of Anteroom's cookie names (`anteroom_sid`, `anteroom_pass`, and
/// their `__Host-` / `__Secure-` forms): the origin never sees them.
const OWN_COOKIE_PREFIX: &[u8] = b"anteroom_";

/// Whether a cookie name is one of Anteroom's in any of its forms, any
/// case: the origin gets none of them, including look-alikes a script or a
/// sibling site may have planted (`Anteroom_SID`, `__Secure-anteroom_pass`).
pub fn is_own_cookie(name: &[u8]) -> bool {
    let name = strip_prefix_ignore_case(name, b"__host-")
        .or_else(|| strip_prefix_ignore_case(name, b"__secure-"))
        .unwrap_or(name);
    name.get(..OWN_COOKIE_PREFIX.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(OWN_COOKIE_PREFIX))
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// What one scan of the `Cookie` fields finds: the value of each of
/// [`COOKIE_NAMES`] (in that order) as [`cookie`] would read it, and whether
/// any cookie is not one of Anteroom's ([`is_own_cookie`]).
///
/// The gate reads the session and the pass cookies of every request and
/// forwards the rest: one scan instead of one per name and another for
/// what the origin keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieScan<'h> {
    pub values: [Option<&'h str>; 4],
    /// A non-empty pair that is not Anteroom's: the origin gets a `Cookie`
    /// field.
    pub foreign: bool,
    /// How many `Cookie` fields the request has (HTTP/2 may split them).
    pub fields: usize,
}

/// Scans every `Cookie` field once (see [`CookieScan`]).
pub fn scan_cookies(headers: &HeaderMap) -> CookieScan<'_> {
    let mut scan = CookieScan::default();
    for field in headers.get_all(header::COOKIE) {
        scan.fields += 1;
        let mut rest = field.as_bytes();
        loop {
            let end = memchr::memchr(b';', rest).unwrap_or(rest.len());
            let pair = rest[..end].trim_ascii();
            let eq = memchr::memchr(b'=', pair);
            let name = eq.map_or(pair, |eq| &pair[..eq]);
            // The four names differ in length, so one comparison says which
            // (a name holds no `=`, so it is the bytes before the first).
            let slot = match name.len() {
                19 => 0,
                20 => 1,
                12 => 2,
                13 => 3,
                _ => usize::MAX,
            };
            if let Some(own) = COOKIE_NAMES.get(slot)
                && name == own.as_bytes()
            {
                if scan.values[slot].is_none() {
                    scan.values[slot] = value_of(pair, name);
                }
            } else if !pair.is_empty() && !is_own_cookie(name.trim_ascii()) {
                scan.foreign = true;
            }
            if end == rest.len() {
                break;
            }
            rest = &rest[end + 1..];
        }
    }
    scan
}

/// The value of one trimmed `name=value` pair when it is named `name` and
/// its value is text (quotes around it dropped). Every caller then reads it
/// strictly (a session id is 32 hex digits, a pass is base64 and signed), so
/// the text check is UTF-8's, whose ASCII fast path reads a word at a time.
fn value_of<'v>(pair: &'v [u8], name: &[u8]) -> Option<&'v str> {
    let v = pair.strip_prefix(name)?.strip_prefix(b"=")?;
    let v = std::str::from_utf8(v).ok()?;
    Some(v.trim_matches('"'))
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
        let c = CookieSettings::insecure();
        assert_eq!(
            session_id(&h, &c),
            Some(("0123456789abcdef0123456789abcdef", CookieName::Current))
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("anteroom_sid=nothex"),
        );
        assert_eq!(session_id(&h, &c), None);
    }

    /// A session read under the old unprefixed name (which a sibling
    /// subdomain can plant) is used while upgrading but never set again,
    /// under the `__Host-` name least of all; one under the current name is
    /// set again on every call that may set cookies.
    #[test]
    fn an_old_unprefixed_session_is_read_but_never_set_anew() {
        const SID: &str = "0123456789abcdef0123456789abcdef";
        let mut c = CookieSettings::secure();
        c.read_unprefixed = true;
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("anteroom_sid={SID}")).unwrap(),
        );
        let v = resolve(&h, None, Mint::Allowed, &c).unwrap().unwrap();
        assert_eq!(v.member, SID);
        assert!(!v.created);
        assert_eq!(v.new_cookie, None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("__Host-anteroom_sid={SID}")).unwrap(),
        );
        let v = resolve(&h, None, Mint::Allowed, &c).unwrap().unwrap();
        assert_eq!(v.member, SID);
        let set = v.new_cookie.expect("the current cookie is set again");
        assert!(
            set.to_str()
                .unwrap()
                .starts_with(&format!("__Host-anteroom_sid={SID};"))
        );
        // By default the old name is not read at all: the planted id names
        // nobody, and a new session is made.
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("anteroom_sid={SID}")).unwrap(),
        );
        let v = resolve(&h, None, Mint::Allowed, &CookieSettings::secure())
            .unwrap()
            .unwrap();
        assert_ne!(v.member, SID);
        assert!(v.created);
    }

    #[test]
    fn a_session_id_is_32_lower_case_hex_digits() {
        assert!(is_session_id("0123456789abcdef0123456789abcdef"));
        assert!(is_session_id(&new_session_id()));
        for bad in [
            "",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcdeg",
            "/123456789abcdef0123456789abcdef",
            ":123456789abcdef0123456789abcdef",
            "`123456789abcdef0123456789abcdef",
        ] {
            assert!(!is_session_id(bad), "{bad}");
        }
    }

    proptest::proptest! {
        /// Any byte at any place decides as the digit ranges say.
        #[test]
        fn one_byte_off_a_session_id_is_judged_by_the_ranges(at in 0usize..32, b in 0u8..128) {
            let mut id = b"0123456789abcdef0123456789abcdef".to_vec();
            id[at] = b;
            let id = String::from_utf8(id).unwrap();
            proptest::prop_assert_eq!(is_session_id(&id), matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        }

        /// The byte scan finds what splitting the header into trimmed
        /// `name=value` strings finds.
        #[test]
        fn the_cookie_scan_reads_as_the_split_pairs_do(
            pairs in proptest::collection::vec("[ a-c=;\"]{0,6}", 0..6),
            name in "[a-c]{1,2}",
        ) {
            let header = pairs.join(";");
            let split = header
                .split(';')
                .filter_map(|pair| pair.trim().split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.trim_matches('"'));
            let mut h = HeaderMap::new();
            h.insert(header::COOKIE, HeaderValue::from_str(&header).unwrap());
            proptest::prop_assert_eq!(cookie(&h, &name), split);
        }

        /// Two names in one scan, over several `Cookie` fields: the first
        /// name's value wherever it is, else the second's, as two lookups
        /// one after the other find them.
        #[test]
        fn one_scan_for_two_names_reads_as_two_lookups(
            fields in proptest::collection::vec(
                proptest::collection::vec("[ a-c=;\"]{0,6}", 0..4), 1..3),
            first in "[a-c]{1,2}",
            second in "[a-c]{1,2}",
        ) {
            let mut h = HeaderMap::new();
            for pairs in &fields {
                h.append(header::COOKIE, HeaderValue::from_str(&pairs.join(";")).unwrap());
            }
            let two_lookups = cookie(&h, &first)
                .map(|v| (v, true))
                .or_else(|| cookie(&h, &second).map(|v| (v, false)));
            proptest::prop_assert_eq!(cookie_of(&h, &first, Some(&second)), two_lookups);
        }

        /// The gate's one scan reads each of Anteroom's names as a lookup
        /// of that name does, and calls a request's cookies foreign exactly
        /// when a pair that is not Anteroom's (in any form or case) is
        /// there: what the proxy would keep for the origin.
        #[test]
        fn the_gates_one_scan_reads_as_a_lookup_per_name(
            fields in proptest::collection::vec(
                proptest::collection::vec(
                    (
                        proptest::sample::select(vec![
                            "__Host-anteroom_sid", "__Host-anteroom_pass", "anteroom_sid",
                            "anteroom_pass", "Anteroom_SID", "__secure-anteroom_pass",
                            "anteroom_x", "anteroom", "theme", " anteroom_sid", "", "a=b",
                        ]),
                        "[ a-c=\"]{0,4}",
                    ),
                    0..5,
                ),
                0..3,
            ),
        ) {
            let mut h = HeaderMap::new();
            let mut foreign = false;
            for pairs in &fields {
                let text = pairs
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join(";");
                for pair in text.split(';').map(str::trim) {
                    let name = pair.split_once('=').map_or(pair, |(n, _)| n).trim();
                    foreign |= !pair.is_empty() && !is_own_cookie(name.as_bytes());
                }
                h.append(header::COOKIE, HeaderValue::from_str(&text).unwrap());
            }
            let scan = scan_cookies(&h);
            for (i, name) in COOKIE_NAMES.iter().enumerate() {
                proptest::prop_assert_eq!(scan.values[i], cookie(&h, name), "{}", name);
            }
            proptest::prop_assert_eq!(scan.foreign, foreign);
            proptest::prop_assert_eq!(scan.fields, fields.len());
        }
    }

    /// Another cookie with UTF-8 in it (a browser sends what a site's script
    /// set) does not hide the session; a session value that is not text is
    /// not read.
    #[test]
    fn a_non_ascii_cookie_does_not_hide_the_session() {
        let c = CookieSettings::insecure();
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_bytes(
                "pref=caf\u{e9}; anteroom_sid=0123456789abcdef0123456789abcdef".as_bytes(),
            )
            .unwrap(),
        );
        assert_eq!(
            session_id(&h, &c),
            Some(("0123456789abcdef0123456789abcdef", CookieName::Current))
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_bytes(b"anteroom_sid=0123\xe9").unwrap(),
        );
        assert_eq!(cookie(&h, "anteroom_sid"), None);
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
}
