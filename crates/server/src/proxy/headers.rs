//! Header rewriting on the way to the origin and back: hop-by-hop headers
//! stay on their hop, forwarding headers say who asked, and only the gate
//! may speak for Anteroom (`X-Anteroom-*`).

use std::net::IpAddr;

use http::header::{CONNECTION, EXPECT, HOST, UPGRADE};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};

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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn rewritten(pairs: &[(&str, &str)], extra: &[(&str, &str)]) -> HeaderMap {
        let mut h = map(pairs);
        let uri: Uri = "/x".parse().unwrap();
        let origin: Authority = "origin:9000".parse().unwrap();
        let fwd = Forwarding {
            client_ip: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
            proto: "http",
            host: request_host(&h, &uri),
            origin_authority: Some(&origin),
            upgrade: upgrade_protocol(&h),
        };
        let extra = map(extra)
            .into_iter()
            .map(|(n, v)| (n.unwrap(), v))
            .collect();
        rewrite_request(&mut h, fwd, extra);
        h
    }

    #[test]
    fn request_headers_are_rewritten() {
        let h = rewritten(
            &[
                ("host", "shop.example"),
                ("connection", "keep-alive, x-secret"),
                ("keep-alive", "timeout=5"),
                ("x-secret", "1"),
                ("te", "trailers"),
                ("x-forwarded-for", "198.51.100.1"),
                ("x-forwarded-for", "198.51.100.2"),
                ("x-forwarded-proto", "https"),
                ("x-anteroom-session", "forged"),
                ("X-Anteroom-Whatever", "forged"),
                ("accept", "text/html"),
            ],
            &[("x-anteroom-event", "drop"), ("x-anteroom-session", "s1")],
        );
        assert_eq!(h["host"], "origin:9000");
        assert_eq!(h["x-forwarded-host"], "shop.example");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(
            h["x-forwarded-for"],
            "198.51.100.1, 198.51.100.2, 203.0.113.7"
        );
        assert_eq!(h["x-anteroom-session"], "s1");
        assert_eq!(h.get_all("x-anteroom-session").iter().count(), 1);
        assert_eq!(h["x-anteroom-event"], "drop");
        assert_eq!(h["accept"], "text/html");
        for gone in [
            "connection",
            "keep-alive",
            "x-secret",
            "te",
            "x-anteroom-whatever",
        ] {
            assert!(!h.contains_key(gone), "{gone} kept");
        }
    }

    #[test]
    fn upgrade_headers_survive_for_an_upgrade() {
        let h = rewritten(&[("connection", "Upgrade"), ("upgrade", "websocket")], &[]);
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["upgrade"], "websocket");
        let h = rewritten(&[("upgrade", "websocket")], &[]);
        assert!(!h.contains_key("upgrade"));
    }

    #[test]
    fn response_hop_by_hop_headers_are_dropped() {
        let mut h = map(&[("connection", "close"), ("upgrade", "h2c"), ("x-a", "1")]);
        rewrite_response(&mut h, StatusCode::OK);
        assert!(!h.contains_key("connection") && !h.contains_key("upgrade"));
        let mut h = map(&[("connection", "upgrade"), ("upgrade", "websocket")]);
        rewrite_response(&mut h, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(h["upgrade"], "websocket");
    }
}
