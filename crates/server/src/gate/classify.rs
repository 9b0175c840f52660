//! Phase 1 of the gate: from a request head to the event protecting it, to
//! "unprotected", or to an answer the gate gives itself.
//!
//! Only the method and the request target decide (they are all [`classify`]
//! is given). Headers play no part: the headers an origin might route by
//! instead (`X-Original-URL`, `X-Rewrite-URL`, `X-Forwarded-Prefix`, ...)
//! never reach it (see `proxy/headers.rs`), so no header can move a request
//! into another class. The property test in `classify/tests.rs` checks that
//! a target an origin could route to a protected prefix is never
//! unprotected, whatever headers come with it.

use anteroom_store::EventId;
use http::{Method, Uri};

use crate::routes::RouteTable;
use crate::routes::normalize::{NormalizeError, normalized};

#[cfg(test)]
mod tests;

/// Where a request head goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class<'t> {
    /// The event whose prefix covers the normalised path.
    Protected(&'t EventId),
    /// No event protects the path.
    Unprotected,
    /// `OPTIONS *`: a question about the server, answered by Anteroom and
    /// never forwarded.
    ServerOptions,
}

/// Why the gate refuses a request head outright (a `4xx` JSON answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("request path refused: {0}")]
    Path(NormalizeError),
    /// `CONNECT`: Anteroom is not a forward proxy.
    #[error("CONNECT is not supported")]
    Connect,
    /// Neither origin-form (`/path`) nor absolute-form (`http://host/path`),
    /// e.g. `GET *`.
    #[error("the request target must be a path")]
    Target,
    /// A path that begins `//`, whose readings (see [`classify`]) two
    /// events protect.
    #[error("the request path begins with // and reads as two protected paths")]
    HostLike,
    /// A path with a character outside ASCII that folds to an ASCII
    /// letter (see [`folded`]), read as two protected paths.
    #[error("the request path reads as two protected paths once its case is folded")]
    Folded,
}

/// Classifies a request, by its method and target, against `routes`.
pub fn classify<'t>(
    routes: &'t RouteTable,
    method: &Method,
    uri: &Uri,
) -> Result<Class<'t>, Refusal> {
    if method == Method::CONNECT {
        return Err(Refusal::Connect);
    }
    // An absolute-form target (`GET http://host/tickets`) carries its path
    // like an origin-form one; `uri.path()` is that path either way.
    let path = uri.path();
    if path == "*" {
        return if method == Method::OPTIONS {
            Ok(Class::ServerOptions)
        } else {
            Err(Refusal::Target)
        };
    }
    if !path.starts_with('/') {
        return Err(Refusal::Target);
    }
    let mut found = readings(routes, path)?;
    // The same with the escapes of the few characters outside ASCII that
    // fold to an ASCII letter replaced by it: one that an event protects
    // protects the request, and two events' are refused, as above.
    if let Some(folded) = folded(path)
        && let Some(event) = readings(routes, &folded)?
    {
        match found {
            Some(other) if other != event => return Err(Refusal::Folded),
            _ => found = Some(event),
        }
    }
    Ok(match found {
        Some(event) => Class::Protected(event),
        None => Class::Unprotected,
    })
}

/// The event protecting `path` (which begins `/`) in any of its readings,
/// or none.
fn readings<'t>(routes: &'t RouteTable, path: &str) -> Result<Option<&'t EventId>, Refusal> {
    let collapsed = normalized(path).map_err(Refusal::Path)?;
    let mut found = routes.lookup(&collapsed);
    // A path that begins `//` is a host and then a path to a URL parser
    // (WHATWG's `new URL(target, base)`, Python's `urlsplit`), the way some
    // origins route: `//x/tickets` is `/tickets` there, though collapsed
    // it is `/x/tickets`. Each reading is looked up: one that an event
    // protects protects the request, and one that two events protect is
    // refused (a pass for the one must not open the other).
    if path.starts_with("//") {
        for reading in host_readings(path) {
            let Some(event) = routes.lookup(&normalized(reading).map_err(Refusal::Path)?) else {
                continue;
            };
            match found {
                Some(other) if other != event => return Err(Refusal::HostLike),
                _ => found = Some(event),
            }
        }
    }
    Ok(found)
}

/// The escapes of the characters outside ASCII whose simple case mapping
/// is an ASCII letter, and that letter: `İ` and `ı` (`i`), `ſ` (`s`) and the
/// Kelvin sign (`k`). Java's `Character.toLowerCase` and `toUpperCase`, and
/// so `equalsIgnoreCase`, fold them onto the letter, so an origin that
/// routes ignoring case (Spring's `PathPatternParser` made case-insensitive,
/// a servlet filter comparing with `equalsIgnoreCase`) routes
/// `/t%C4%B0ckets` to `/tickets`; the ASCII-only comparison of the prefix
/// rule would not. Each comes escaped and raw: hyper takes UTF-8 in a
/// request target as it is, and servlet containers decode it.
const FOLDS: [(&[u8], u8); 8] = [
    (b"%C4%B0", b'i'),
    (b"%C4%B1", b'i'),
    (b"%C5%BF", b's'),
    (b"%E2%84%AA", b'k'),
    ("\u{130}".as_bytes(), b'i'),
    ("\u{131}".as_bytes(), b'i'),
    ("\u{17f}".as_bytes(), b's'),
    ("\u{212a}".as_bytes(), b'k'),
];

/// `path` with every character of [`FOLDS`] (escaped in either case of
/// hex, or raw) replaced by its letter, or `None` when it has none (nearly
/// every path: one without `%` or a byte outside ASCII is passed by one
/// look at each byte).
fn folded(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let first = bytes.iter().position(|&b| b == b'%' || !b.is_ascii())?;
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..first]);
    let mut changed = false;
    let mut i = first;
    while i < bytes.len() {
        if (bytes[i] == b'%' || !bytes[i].is_ascii())
            && let Some((escape, letter)) = FOLDS.iter().find(|(escape, _)| {
                bytes
                    .get(i..i + escape.len())
                    .is_some_and(|s| s.eq_ignore_ascii_case(escape))
            })
        {
            out.push(*letter);
            i += escape.len();
            changed = true;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    if !changed {
        return None;
    }
    String::from_utf8(out).ok()
}

/// The paths a URL parser may read in `path` (which begins `//`) once it
/// takes what follows the slashes for a host: after exactly two slashes
/// (RFC 3986, `urlsplit`), and after every leading slash (WHATWG, for
/// `http` and `https`). The host ends at the next `/`; a path without one
/// is the root.
fn host_readings(path: &str) -> [&str; 2] {
    fn after_host(rest: &str) -> &str {
        rest.find('/').map_or("/", |i| &rest[i..])
    }
    [
        after_host(&path[2..]),
        after_host(path.trim_start_matches('/')),
    ]
}
