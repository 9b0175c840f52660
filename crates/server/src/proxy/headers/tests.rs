#![allow(clippy::unwrap_used, clippy::expect_used)]

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
