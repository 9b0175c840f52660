//! Header rewriting on the way to the origin and back: hop-by-hop headers
//! stay on their hop, forwarding headers say who asked, and only the gate
//! may speak for Anteroom (`X-Anteroom-*`).

use std::net::IpAddr;

use http::header::{CONNECTION, EXPECT, HOST, UPGRADE};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};

#[cfg(test)]
mod tests;

/// RFC 9110 7.6.1 connection-specific headers, plus the de-facto ones.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers the gate sets for the origin; a visitor must not forge them.
const ANTEROOM_PREFIX: &str = "x-anteroom-";

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What the origin is told about the request it receives.
pub(super) struct Forwarding<'a> {
    pub client_ip: IpAddr,
    pub proto: &'a str,
    pub host: Option<HeaderValue>,
    pub origin_authority: Option<&'a Authority>,
    pub upgrade: Option<HeaderValue>,
}

/// The host the visitor asked for: `Host`, or the authority of an
/// absolute-form or HTTP/2 request.
pub(super) fn request_host(headers: &HeaderMap, uri: &Uri) -> Option<HeaderValue> {
    headers.get(HOST).cloned().or_else(|| {
        uri.authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    })
}

/// The protocol a request asks to upgrade to (`Upgrade`), when its
/// `Connection` header says `upgrade`.
pub(super) fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let asked = connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"));
    if asked {
        headers.get(UPGRADE).cloned()
    } else {
        None
    }
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Removes the hop-by-hop headers and those the `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// Rewrites a visitor's request headers for the origin.
pub(super) fn rewrite_request(
    headers: &mut HeaderMap,
    fwd: Forwarding<'_>,
    extra: Vec<(HeaderName, HeaderValue)>,
) {
    strip_hop_by_hop(headers);
    let forged: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with(ANTEROOM_PREFIX))
        .cloned()
        .collect();
    for name in forged {
        headers.remove(name);
    }
    // The visitor's `100-continue` was answered by our server already.
    headers.remove(EXPECT);

    let forwarded_for = forwarded_for(headers, fwd.client_ip);
    headers.insert(X_FORWARDED_FOR, forwarded_for);
    if let Ok(proto) = HeaderValue::from_str(fwd.proto) {
        headers.insert(X_FORWARDED_PROTO, proto);
    }
    match fwd.host {
        Some(host) => headers.insert(X_FORWARDED_HOST, host),
        None => headers.remove(X_FORWARDED_HOST),
    };
    // Name-based virtual hosting on the origin must see its own name.
    if let Some(authority) = fwd
        .origin_authority
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(HOST, authority);
    }
    if let Some(protocol) = fwd.upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
    for (name, _) in &extra {
        headers.remove(name);
    }
    for (name, value) in extra {
        headers.append(name, value);
    }
}

/// Earlier hops' `X-Forwarded-For` (all of its fields, in order) with the
/// visitor's address appended: the origin trusts the hops it chooses to.
fn forwarded_for(headers: &HeaderMap, client_ip: IpAddr) -> HeaderValue {
    let mut list = String::new();
    for prior in headers.get_all(X_FORWARDED_FOR) {
        if let Ok(prior) = prior.to_str() {
            list.push_str(prior);
            list.push_str(", ");
        }
    }
    list.push_str(&client_ip.to_string());
    HeaderValue::from_str(&list).unwrap_or_else(|_| {
        // An address always is a valid header value; the earlier hops,
        // which are visible ASCII, cannot make it invalid either.
        HeaderValue::from_static("unknown")
    })
}

/// Rewrites an origin's response headers for the visitor; a `101` keeps
/// what the visitor needs to finish the upgrade.
pub(super) fn rewrite_response(headers: &mut HeaderMap, status: StatusCode) {
    let upgrade = if status == StatusCode::SWITCHING_PROTOCOLS {
        headers.get(UPGRADE).cloned()
    } else {
        None
    };
    strip_hop_by_hop(headers);
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
}
