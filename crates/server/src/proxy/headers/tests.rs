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

fn request(pairs: &[(&str, &str)]) -> Request<()> {
    let mut req = Request::new(());
    *req.uri_mut() = "/x".parse().unwrap();
    *req.headers_mut() = map(pairs);
    req
}

const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));

fn rewritten_with(req: &Request<()>, hop: &ClientHop, extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = req.headers().clone();
    let origin: Authority = "origin:9000".parse().unwrap();
    let fwd = Forwarding {
        client: hop,
        origin_authority: Some(&origin),
        upgrade: HopFields::read(&h).upgrade_protocol(&h),
        connection: true,
    };
    let extra: Vec<(HeaderName, HeaderValue)> = map(extra)
        .into_iter()
        .map(|(n, v)| (n.unwrap(), v))
        .collect();
    rewrite_request(&mut h, fwd, &extra);
    h
}

/// Rewritten for a client that connected straight from [`PEER`].
fn rewritten(pairs: &[(&str, &str)], extra: &[(&str, &str)]) -> HeaderMap {
    let req = request(pairs);
    rewritten_with(&req, &ClientHop::read(&req, PEER, &[]), extra)
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
    assert_eq!(h["x-forwarded-for"], "203.0.113.7");
    assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
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
fn forgeable_headers_are_dropped_in_every_spelling() {
    let forged = [
        "x-original-url",
        "x-rewrite-url",
        "x_original_url",
        "X_Rewrite_URL",
        "forwarded",
        "x-real-ip",
        "x_real_ip",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-forwarded-server",
        "x_forwarded_for",
        "x_forwarded_proto",
        "x-forwarded_host",
        "x_anteroom_session",
        "x-anteroom_event",
        "true-client-ip",
        "x-client-ip",
        "client_ip",
    ];
    let pairs: Vec<(&str, &str)> = forged.iter().map(|n| (*n, "/tickets")).collect();
    let h = rewritten(&pairs, &[]);
    for name in forged {
        assert!(
            !h.contains_key(name.to_ascii_lowercase().as_str()),
            "{name} kept"
        );
    }
    // The rebuilt set is all that is left of them.
    let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn a_trusted_proxys_chain_proto_and_host_are_believed() {
    let trusted: Vec<IpNet> = vec!["203.0.113.0/24".parse().unwrap()];
    let pairs = [
        ("host", "internal:8080"),
        ("x-forwarded-for", "6.6.6.6, 198.51.100.4"),
        ("x-forwarded-proto", "HTTPS"),
        ("x-forwarded-host", "shop.example"),
        ("forwarded", "for=6.6.6.6"),
    ];
    let req = request(&pairs);
    let hop = ClientHop::read(&req, PEER, &trusted);
    let h = rewritten_with(&req, &hop, &[]);
    assert_eq!(h["x-forwarded-for"], "198.51.100.4");
    assert_eq!(h["x-forwarded-proto"], "https");
    assert_eq!(h["x-forwarded-host"], "shop.example");
    assert!(!h.contains_key("forwarded"));
    // Not believed from anyone else, nor when it is not one clear value.
    let hop = ClientHop::read(&req, "192.0.2.1".parse().unwrap(), &trusted);
    assert_eq!(hop.proto, "http");
    assert_eq!(hop.host.unwrap(), "internal:8080");
    let req = request(&[
        ("x-forwarded-proto", "https"),
        ("x-forwarded-proto", "http"),
    ]);
    assert_eq!(ClientHop::read(&req, PEER, &trusted).proto, "http");
    let req = request(&[("x-forwarded-proto", "gopher")]);
    assert_eq!(ClientHop::read(&req, PEER, &trusted).proto, "http");
    // A TLS listener says https itself.
    let mut req = request(&[]);
    req.extensions_mut().insert(ClientScheme::Https);
    assert_eq!(ClientHop::read(&req, PEER, &[]).proto, "https");
}

#[test]
fn anteroom_cookies_never_reach_the_origin() {
    let check = |cookies: &[&str], expected: Option<&str>| {
        let pairs: Vec<(&str, &str)> = cookies.iter().map(|c| ("cookie", *c)).collect();
        let h = rewritten(&pairs, &[]);
        assert_eq!(
            h.get("cookie").map(|v| v.to_str().unwrap()),
            expected,
            "{cookies:?}"
        );
        assert!(h.get_all("cookie").iter().count() <= 1);
    };
    check(&["anteroom_sid=a; theme=dark"], Some("theme=dark"));
    check(&["anteroom_pass=p"], None);
    check(
        &["__Host-anteroom_sid=a;__Host-anteroom_pass=p; x=1"],
        Some("x=1"),
    );
    check(
        &["__Secure-anteroom_pass=p; Anteroom_SID=b", "lang=fr"],
        Some("lang=fr"),
    );
    check(&["a=1", "b=2; anteroom_sid=s"], Some("a=1; b=2"));
    check(
        &["anteroom_sidx=1; anteroom=2; my_anteroom_sid=3"],
        Some("anteroom=2; my_anteroom_sid=3"),
    );
    check(&["theme=dark"], Some("theme=dark"));
    for name in crate::identity::COOKIE_NAMES {
        assert!(crate::identity::is_own_cookie(name.as_bytes()), "{name}");
    }
    check(&[], None);
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

#[test]
fn a_wire_name_is_hop_by_hop_as_its_header_name_is() {
    for hop in &HOP_BY_HOP {
        let lower = hop.as_str();
        let upper = lower.to_ascii_uppercase();
        let mixed: String = lower
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for spelling in [lower, upper.as_str(), mixed.as_str()] {
            assert!(is_hop_by_hop_name(spelling.as_bytes()), "{spelling}");
        }
    }
    for other in [
        "set-cookie",
        "content-length",
        "tee",
        "t",
        "trailers",
        "upgrade-insecure-requests",
        "connectio",
        "keep_alive",
        "proxy-connectiom",
        "",
    ] {
        assert!(!is_hop_by_hop_name(other.as_bytes()), "{other}");
        let name = HeaderName::from_bytes(other.as_bytes());
        assert!(name.is_err() || !is_hop_by_hop(&name.unwrap()), "{other}");
    }
}

proptest::proptest! {
    /// Any name, in any case, is hop-by-hop off the wire exactly when it
    /// is as a header name.
    #[test]
    fn the_two_hop_by_hop_readings_agree(name in "[a-zA-Z-]{1,20}") {
        let parsed = HeaderName::from_bytes(name.as_bytes()).unwrap();
        proptest::prop_assert_eq!(is_hop_by_hop_name(name.as_bytes()), is_hop_by_hop(&parsed));
    }

    /// The address written directly reads as `Display` writes it.
    #[test]
    fn an_address_value_is_its_display(bits in proptest::num::u32::ANY, six in proptest::num::u128::ANY) {
        for ip in [IpAddr::from(bits.to_be_bytes()), IpAddr::from(six.to_be_bytes())] {
            let value = ip_value(ip).unwrap();
            proptest::prop_assert_eq!(value.to_str().unwrap(), ip.to_string());
        }
    }
}

/// The vocabulary the property below draws visitors' fields from: the ones
/// each rule is about, in their spellings, and ordinary ones.
const NAMES: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "transfer-encoding",
    "expect",
    "cookie",
    "x-forwarded-for",
    "x_forwarded_host",
    "forwarded",
    "x-anteroom-session",
    "x-hop",
    "accept",
    "user-agent",
];

fn field_lines(head: &[u8]) -> Vec<(String, String)> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut fields);
    assert!(req.parse(head).unwrap().is_complete());
    req.headers
        .iter()
        .map(|h| {
            (
                h.name.to_owned(),
                String::from_utf8(h.value.to_vec()).unwrap(),
            )
        })
        .collect()
}

proptest::proptest! {
    /// The lean client's head, written straight from the visitor's fields,
    /// carries exactly the fields of the rewritten map hyper's client sends,
    /// in the same order.
    #[test]
    fn the_head_written_directly_is_the_rewritten_map(
        fields in proptest::collection::vec(
            (0..NAMES.len(), proptest::sample::select(vec![
                "1", "keep-alive, x-hop", "Upgrade", "websocket", "a=1; anteroom_sid=s; b=2",
                "anteroom_pass=p", "100-continue", "shop.example", "x-hop, cookie",
            ])),
            0..12,
        ),
        extra in proptest::bool::ANY,
    ) {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (NAMES[*n], *v)).collect();
        let req = request(&pairs);
        let hop = ClientHop::read(&req, PEER, &[]);
        let origin: Authority = "origin:9000".parse().unwrap();
        let extra: Vec<(HeaderName, HeaderValue)> = if extra {
            vec![(HeaderName::from_static("x-anteroom-session"), HeaderValue::from_static("s1"))]
        } else {
            Vec::new()
        };
        let connection = HopFields::read(req.headers()).connection;
        let fwd = || Forwarding { client: &hop, origin_authority: Some(&origin), upgrade: None, connection };
        let mut map = req.headers().clone();
        rewrite_request(&mut map, fwd(), &extra);
        let from_map: Vec<(String, String)> = map
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect();
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        for_origin(req.headers(), fwd(), &extra, &mut HeadSink(&mut head));
        head.extend_from_slice(b"\r\n");
        proptest::prop_assert_eq!(field_lines(&head), from_map);
    }
}

/// The questions [`HopFields`] answers, each asked of the map by name, as
/// the proxy asked them before it read the fields in one pass.
mod by_name {
    use super::*;

    pub fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
        let asked = connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"));
        if asked {
            headers.get(UPGRADE).cloned()
        } else {
            None
        }
    }

    pub fn upgrade_refused(headers: &HeaderMap) -> bool {
        let asked: Vec<_> = headers.get_all(UPGRADE).iter().collect();
        let websocket = |v: &HeaderValue| {
            v.to_str()
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
        };
        match asked.as_slice() {
            [] => false,
            [one] => !websocket(one),
            _ => true,
        }
    }

    pub fn framed(headers: &HeaderMap) -> bool {
        headers.contains_key(TRANSFER_ENCODING)
            || !headers
                .get_all(CONTENT_LENGTH)
                .iter()
                .all(|v| v.as_bytes() == b"0")
    }
}

proptest::proptest! {
    /// One pass over the fields answers as the lookups by name did: the
    /// upgrade asked for, an upgrade refused, a body framed, and whether
    /// the `Connection` field is there to be read.
    #[test]
    fn one_pass_over_the_fields_answers_as_lookups_by_name(
        fields in proptest::collection::vec(
            (proptest::sample::select(vec![
                "upgrade", "Upgrade", "connection", "Connection", "transfer-encoding",
                "content-length", "Content-Length", "host", "cookie", "x-upgrade",
            ]),
            proptest::sample::select(vec![
                "websocket", " WebSocket ", "h2c", "upgrade", "keep-alive, Upgrade",
                "close", "0", "00", "12", "chunked", "", "x",
            ])),
            0..8,
        ),
    ) {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, *v)).collect();
        let h = map(&pairs);
        let hop = HopFields::read(&h);
        proptest::prop_assert_eq!(hop.upgrade_protocol(&h), by_name::upgrade_protocol(&h));
        proptest::prop_assert_eq!(
            crate::proxy::upgrade::check_asked(&hop).is_err(),
            by_name::upgrade_refused(&h)
        );
        proptest::prop_assert_eq!(hop.transfer_encoding || hop.length, by_name::framed(&h));
        proptest::prop_assert_eq!(hop.connection, h.contains_key(CONNECTION));
    }
}
