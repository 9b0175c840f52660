#![allow(clippy::unwrap_used, clippy::expect_used)]

use anteroom_store::EventId;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use percent_encoding::percent_decode;
use proptest::prelude::*;

use super::{Class, Refusal, classify};
use crate::routes::RouteTable;
use crate::routes::normalize::NormalizeError;

/// Two events, one prefix inside the other's: a pass for `drop` must not
/// open `vip`'s paths, whatever their spelling.
const PREFIXES: &[(&str, &str)] = &[("/tickets", "drop"), ("/tickets/vip", "vip")];

fn table() -> RouteTable {
    RouteTable::new(
        PREFIXES
            .iter()
            .map(|(prefix, event)| ((*prefix).to_owned(), EventId::new(event).unwrap()))
            .collect(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Protected by this event.
    P(&'static str),
    /// Unprotected.
    U,
    /// Refused with this reason.
    R(Refusal),
    /// `OPTIONS *`, answered by the gate.
    Options,
}
use Want::{Options, P, R, U};

fn head(method: &Method, uri: Uri, headers: &HeaderMap) -> http::request::Parts {
    let (mut parts, ()) = Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .unwrap()
        .into_parts();
    parts.headers = headers.clone();
    parts
}

fn class_of(routes: &RouteTable, method: &Method, uri: Uri, headers: &HeaderMap) -> Want {
    let head = head(method, uri, headers);
    match classify(routes, &head.method, &head.uri) {
        Ok(Class::Protected(id)) => {
            let name = PREFIXES
                .iter()
                .find(|(_, e)| *e == id.as_str())
                .map(|(_, e)| *e)
                .unwrap();
            P(name)
        }
        Ok(Class::Unprotected) => U,
        Ok(Class::ServerOptions) => Options,
        Err(refusal) => R(refusal),
    }
}

/// `request` is `"METHOD target"` or just a target (then `GET`), parsed the
/// way hyper parses a request line.
#[track_caller]
fn check(request: &str, expected: Want) {
    let (method, target) = request
        .split_once(' ')
        .map_or((Method::GET, request), |(m, t)| {
            (Method::from_bytes(m.as_bytes()).unwrap(), t)
        });
    let uri: Uri = target.parse().unwrap();
    let got = class_of(&table(), &method, uri, &HeaderMap::new());
    assert_eq!(got, expected, "request {request:?}");
}

#[test]
fn spellings_of_a_protected_prefix() {
    // The prefix itself, below it, and its last segment with a format
    // suffix or path parameters, in any case and encoding.
    check("/tickets", P("drop"));
    check("/tickets/", P("drop"));
    check("/tickets/2026/row/1", P("drop"));
    check("/Tickets", P("drop"));
    check("/tickets.json", P("drop"));
    // Characters outside ASCII that Java's case mapping folds onto the
    // prefix's letters.
    check("/t%C4%B0ckets", P("drop"));
    check("/T%c4%b1CKETS.json", P("drop"));
    check("/tic%E2%84%AAets/2026", P("drop"));
    check("/tickets/vip/x%C5%BF", P("vip"));
    check("/tickets/v%C4%B0p", R(Refusal::Folded));
    check("/t%C4%B0ckets/vip", P("vip"));
    check("/t%C4%B2ckets", U);
    // The same characters raw: hyper takes UTF-8 in a target as it is.
    check("/t\u{130}ckets", P("drop"));
    check("/tic\u{212a}ets.json", P("drop"));
    check("/tickets/v\u{131}p", R(Refusal::Folded));
    check("/\u{17f}tickets", U);
    check("/tickets.html", P("drop"));
    check("/TICKETS.JSON", P("drop"));
    check("/tickets.json/extra", P("drop"));
    check("/tickets.", P("drop"));
    check("/tickets...", P("drop"));
    // Encoded spaces an origin trims from a segment.
    check("/tickets%20", P("drop"));
    check("/%20tickets/2026", P("drop"));
    check("/tickets%20.%20", P("drop"));
    check("/tickets;jsessionid=x", P("drop"));
    check("/tickets;jsessionid=x/2026", P("drop"));
    check("/tickets%2ejson", P("drop"));
    check("/tickets%2Ejson", P("drop"));
    check("/tickets%3Bjsessionid=x", P("drop"));
    check("/tickets%3bx", P("drop"));
    check("/%74ickets.json", P("drop"));
    check("/%54ICKETS%2EHTML", P("drop"));
    check("//tickets", P("drop"));
    check("/./tickets", P("drop"));
    check("/a/../tickets.json", P("drop"));
    check("/a/%2e%2e/tickets", P("drop"));
    check("/;jsessionid=x/tickets", P("drop"));
    check("/%3B/tickets.", P("drop"));
    check("/tickets?format=json", P("drop"));
    check("/tickets.json?x=/../", P("drop"));
    check("/tickets/vipx", P("drop"));
    check("/tickets/vip/../other", P("drop"));
    check("/tickets/%20/vip", P("vip"));
    check("/%20%20/tickets/.%20/vip", P("vip"));
    // Absolute-form targets route by their path.
    check("http://shop.example/tickets", P("drop"));
    check("http://shop.example/TICKETS.json?x", P("drop"));
    check("POST /tickets.json", P("drop"));
    check("OPTIONS /tickets", P("drop"));
    // A path that begins `//` read as a host and a path, as a URL parser
    // in the origin may: `/tickets` on host `x`.
    check("//x/tickets", P("drop"));
    check("//evil.example/TICKETS/2026", P("drop"));
    check("///x/tickets.json", P("drop"));
    check("//user@x:1/tickets?y", P("drop"));
}

#[test]
fn the_longest_prefix_wins_with_the_suffix_rule() {
    check("/tickets/vip", P("vip"));
    check("/tickets/vip.json", P("vip"));
    check("/tickets/VIP.HTML", P("vip"));
    check("/tickets/vip;jsessionid=1", P("vip"));
    check("/tickets/vip%2ejson", P("vip"));
    check("/tickets;x=1/vip", P("vip"));
    check("/tickets%3Bx=1/vip.json", P("vip"));
    check("/tickets./vip", P("vip"));
    check("/tickets/./vip/", P("vip"));
    check("//tickets//vip//row", P("vip"));
}

#[test]
fn other_paths_stay_unprotected() {
    check("/ticketsale", U);
    check("/ticket", U);
    check("/ticketsjson", U);
    check("/tickets-old", U);
    check("/tickets_json", U);
    check("/tick%65tsale", U);
    check("/other/tickets", U);
    check("/tickets/..", U);
    check("/", U);
    check("/x?/tickets", U);
    check("http://tickets/", U);
}

#[test]
fn ambiguous_spellings_are_refused() {
    check(
        "/tickets%2fvip",
        R(Refusal::Path(NormalizeError::EncodedSlash)),
    );
    check(
        "/tickets%252ejson",
        R(Refusal::Path(NormalizeError::DoubleEncoded)),
    );
    check(
        "/%2574ickets",
        R(Refusal::Path(NormalizeError::DoubleEncoded)),
    );
    check(
        "/a\\..\\tickets",
        R(Refusal::Path(NormalizeError::Backslash)),
    );
    check(
        "/a%5C..%5Ctickets",
        R(Refusal::Path(NormalizeError::Backslash)),
    );
    check("/tickets%00.json", R(Refusal::Path(NormalizeError::Nul)));
    for control in [
        "/tickets%09",
        "/tickets%0a/x",
        "/tickets%0D",
        "/tickets%7F",
        "/%1Ftickets",
    ] {
        check(control, R(Refusal::Path(NormalizeError::ControlChar)));
    }
    check(
        "/public/..;/tickets",
        R(Refusal::Path(NormalizeError::DotSegmentParam)),
    );
    check(
        "/public/..%3B/tickets",
        R(Refusal::Path(NormalizeError::DotSegmentParam)),
    );
    check(
        "/%C0%AE%C0%AE/tickets",
        R(Refusal::Path(NormalizeError::BadEscape)),
    );
    check("/tickets%", R(Refusal::Path(NormalizeError::BadEscape)));
    // Collapsed `drop`'s, read after a host `vip`'s: neither pass may open it.
    check("//tickets/tickets/vip", R(Refusal::HostLike));
    check("GET *", R(Refusal::Target));
    check("CONNECT shop.example:443", R(Refusal::Connect));
    check("CONNECT /tickets", R(Refusal::Connect));
    check("OPTIONS *", Options);
}

/// Where a lenient origin routes `path`: it decodes every escape (up to
/// three times, for stacks that decode again), reads `\` as `/`, drops
/// `;params` from every segment, resolves dot segments, ignores case,
/// trailing dots and spaces at either end of a segment, and routes
/// `name.format` to `name`. The event whose
/// prefix it lands under, longest first.
fn origin_route(path: &str) -> Option<&'static str> {
    let mut bytes = path.as_bytes().to_vec();
    for _ in 0..3 {
        bytes = percent_decode(&bytes).collect();
    }
    let decoded = String::from_utf8_lossy(&bytes).replace('\\', "/");
    let mut segments: Vec<String> = Vec::new();
    for segment in decoded.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => {
                let mut s = s.trim_start_matches(' ');
                while s.ends_with(['.', ' ']) {
                    s = s.trim_end_matches('.').trim_end_matches(' ');
                }
                // Empty once trimmed: dropped, as Spring's tokenizer does.
                if !s.is_empty() {
                    segments.push(s.to_ascii_lowercase());
                }
            }
        }
    }
    let mut prefixes = PREFIXES.to_vec();
    prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    prefixes.into_iter().find_map(|(prefix, event)| {
        let wanted: Vec<&str> = prefix.trim_start_matches('/').split('/').collect();
        let last = wanted.len() - 1;
        let covered = segments.len() >= wanted.len()
            && wanted.iter().enumerate().all(|(i, want)| {
                let have = segments[i].as_str();
                have == *want
                    || (i == last
                        && have
                            .strip_prefix(want)
                            .is_some_and(|rest| rest.starts_with('.')))
            });
        covered.then_some(event)
    })
}

/// Request-target text built from the pieces that matter to routing.
fn target() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => Just("/".to_owned()),
        2 => Just("tickets".to_owned()),
        1 => Just("TICKETS".to_owned()),
        1 => Just("vip".to_owned()),
        1 => Just("ticketsale".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just("..".to_owned()),
        1 => Just(".json".to_owned()),
        1 => Just(";".to_owned()),
        1 => Just("jsessionid=x".to_owned()),
        1 => Just("\\".to_owned()),
        1 => Just("?".to_owned()),
        1 => Just("#".to_owned()),
        2 => "%(2[eEfF5]|3[bB]|5[cC]|00|74|54|20|09|[0-9a-fA-F]{2})",
        1 => "[a-z]{1,3}",
        1 => any::<char>().prop_map(String::from),
    ];
    let path = prop::collection::vec(piece, 0..16).prop_map(|parts| parts.concat());
    (prop::bool::weighted(0.1), path).prop_map(|(absolute, path)| {
        if absolute {
            format!("http://shop.example{path}")
        } else {
            path
        }
    })
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::HEAD),
        Just(Method::POST),
        Just(Method::OPTIONS),
        Just(Method::CONNECT),
        Just(Method::from_bytes(b"PROPFIND").unwrap()),
    ]
}

/// Header sets, weighted to the names a framework might route by.
fn headers() -> impl Strategy<Value = HeaderMap> {
    let name = prop_oneof![
        Just("host".to_owned()),
        Just("x-original-url".to_owned()),
        Just("x-rewrite-url".to_owned()),
        Just("x_original_url".to_owned()),
        Just("x-forwarded-prefix".to_owned()),
        Just("x-forwarded-host".to_owned()),
        Just("forwarded".to_owned()),
        Just("x-anteroom-event".to_owned()),
        Just("cookie".to_owned()),
        "[a-z][a-z0-9_-]{0,12}",
    ];
    let value = prop_oneof![
        Just("/tickets".to_owned()),
        Just("/ticketsale".to_owned()),
        Just("anteroom_pass=x".to_owned()),
        "[ -~]{0,24}",
    ];
    prop::collection::vec((name, value), 0..8).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
                map.append(n, v);
            }
        }
        map
    })
}

/// What the gate concludes, and whether an origin would serve a protected
/// handler for it.
fn assert_never_unprotected(method: &Method, uri: Uri, headers: &HeaderMap) {
    let routes = table();
    let got = class_of(&routes, method, uri.clone(), headers);
    // Headers never move a request into another class.
    assert_eq!(
        got,
        class_of(&routes, method, uri.clone(), &HeaderMap::new())
    );
    if let Some(event) = origin_route(uri.path()) {
        assert!(
            matches!(got, P(_) | R(_)),
            "{method} {uri} is routed to {event} by a lenient origin but classified {got:?}"
        );
    }
    // An origin that parses the target as a URL reads a host in a path
    // that begins `//`, and routes what follows it; its event is the
    // gate's, or the gate refuses.
    if let Some(rest) = uri.path().strip_prefix("//") {
        let after_host = |r: &str| r.find('/').map_or("/".to_owned(), |i| r[i..].to_owned());
        for reading in [after_host(rest), after_host(rest.trim_start_matches('/'))] {
            if let Some(event) = origin_route(&reading) {
                assert!(
                    got == P(event) || matches!(got, R(_)),
                    "{method} {uri} is routed to {event} by an origin that reads a host in it, but classified {got:?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn a_target_an_origin_routes_to_a_prefix_is_never_unprotected(
        raw in target(),
        method in method(),
        headers in headers(),
    ) {
        // A target hyper would not parse never reaches the gate.
        if let Ok(uri) = raw.parse::<Uri>() {
            assert_never_unprotected(&method, uri, &headers);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        raw in prop::collection::vec(any::<u8>(), 0..64),
        method in method(),
        headers in headers(),
    ) {
        if let Ok(uri) = Uri::try_from(raw.as_slice()) {
            assert_never_unprotected(&method, uri, &headers);
        }
    }

    /// Protected paths spelled the ways frameworks accept: each letter maybe
    /// escaped or in another case, dot segments and doubled slashes before
    /// segments, parameters on segments, a format suffix at the end.
    #[test]
    fn disguised_protected_paths_keep_their_event(
        which in 0..PREFIXES.len(),
        tail in prop_oneof![
            Just(""), Just("/"), Just(".json"), Just(".HTML"), Just(";jsessionid=1"),
            Just("%3Bx=1"), Just("/row/1"), Just("."), Just("?q=/x"),
        ],
        noise in prop::collection::vec((0u8..6, any::<bool>(), any::<bool>()), 32),
        absolute in any::<bool>(),
    ) {
        let (prefix, event) = PREFIXES[which];
        let mut out = String::new();
        let mut noise = noise.into_iter().cycle();
        for segment in prefix.trim_start_matches('/').split('/') {
            let (before, upper, params) = noise.next().unwrap();
            out.push_str(match before {
                0 => "/./",
                1 => "//",
                2 => "/zz/../",
                _ => "/",
            });
            for c in segment.chars() {
                let (how, up, _) = noise.next().unwrap();
                let c = if up { c.to_ascii_uppercase() } else { c };
                if how == 0 {
                    out.push_str(&format!("%{:02x}", u32::from(c)));
                } else if how == 1 {
                    out.push_str(&format!("%{:02X}", u32::from(c)));
                } else {
                    out.push(c);
                }
            }
            if params && !upper {
                out.push_str(";p=1");
            }
        }
        out.push_str(tail);
        let raw = if absolute { format!("http://shop.example{out}") } else { out };
        let uri: Uri = raw.parse().unwrap();
        let got = class_of(&table(), &Method::GET, uri, &HeaderMap::new());
        prop_assert_eq!(got, P(event), "{}", raw);
    }
}
