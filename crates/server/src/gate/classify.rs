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
    Ok(match found {
        Some(event) => Class::Protected(event),
        None => Class::Unprotected,
    })
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
