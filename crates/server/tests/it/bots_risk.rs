//! Each risk rule, fed from real header maps and reputation files, through
//! `signals_from_headers` and `BotDefence::assess`.

use crate::support::bots::*;
use anteroom::bots::{BotsConfig, ReputationFiles, signals_from_headers};
use anteroom_core::risk::RiskLevel;
use http::HeaderMap;

fn config_with_lists(dir: &std::path::Path) -> BotsConfig {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        Some(p)
    };
    let mut cfg = BotsConfig {
        reputation: ReputationFiles {
            datacenter: write("dc.txt", "# cloud\n198.51.100.0/24\n"),
            vpn: write("vpn.txt", "192.0.2.7\n2001:db8:1::/48\n"),
            known_bot: write("bots.txt", "203.0.113.0/25\n"),
        },
        tls_fingerprint_header: Some("X-JA4".into()),
        ..BotsConfig::default()
    };
    cfg.rules.bad_tls_fingerprints = vec!["t13d1516h2_8daaf6152771_02713d6af862".into()];
    cfg
}

fn check(h: HeaderMap, addr: &str, reasons: &[&str], level: RiskLevel) {
    let dir = tempfile::tempdir().unwrap();
    let d = defence(&config_with_lists(dir.path()));
    let a = d.assess(&signals(&d, &h, addr));
    assert_eq!(a.reasons, reasons, "{h:?} from {addr}");
    assert_eq!(a.level, level, "{h:?} from {addr}: score {}", a.score);
}

fn without(mut h: HeaderMap, name: &str) -> HeaderMap {
    h.remove(name);
    h
}

fn with(mut h: HeaderMap, name: &'static str, value: &[u8]) -> HeaderMap {
    h.insert(name, http::HeaderValue::from_bytes(value).unwrap());
    h
}

#[test]
fn a_browser_is_low_risk() {
    check(chrome(), "100.64.0.1", &[], RiskLevel::Low);
}

#[test]
fn missing_user_agent() {
    // Without it the tracked header order is no browser's either.
    check(
        without(chrome(), "user-agent"),
        "100.64.0.1",
        &["missing_user_agent", "unexpected_header_order"],
        RiskLevel::Medium,
    );
}

#[test]
fn non_utf8_user_agent_counts_as_missing() {
    let h = with(chrome(), "user-agent", b"Mozilla/5.0 \xff\xfe");
    check(h, "100.64.0.1", &["missing_user_agent"], RiskLevel::Medium);
}

#[test]
fn bot_user_agent() {
    let h = with(chrome(), "user-agent", b"python-requests/2.32");
    check(h, "100.64.0.1", &["bot_user_agent"], RiskLevel::High);
}

#[test]
fn curl_as_it_really_is() {
    check(
        curl(),
        "100.64.0.1",
        &[
            "bot_user_agent",
            "missing_accept_language",
            "unexpected_header_order",
        ],
        RiskLevel::High,
    );
}

#[test]
fn missing_accept_language() {
    check(
        without(chrome(), "accept-language"),
        "100.64.0.1",
        &["missing_accept_language", "unexpected_header_order"],
        RiskLevel::Medium,
    );
}

#[test]
fn firefox_order_is_a_browser_order() {
    let h = headers(&[
        ("host", b"shop.example"),
        (
            "user-agent",
            b"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
        ),
        ("accept", b"*/*"),
        ("accept-language", b"de-DE,de;q=0.8"),
        ("accept-encoding", b"gzip, deflate, br"),
    ]);
    check(h, "100.64.0.1", &[], RiskLevel::Low);
}

#[test]
fn unexpected_header_order() {
    let h = headers(&[
        ("accept-language", b"en"),
        ("accept-encoding", b"gzip"),
        ("user-agent", CHROME_UA),
        ("accept", b"*/*"),
    ]);
    check(
        h,
        "100.64.0.1",
        &["unexpected_header_order"],
        RiskLevel::Low,
    );
}

#[test]
fn bad_tls_fingerprint_from_the_configured_header() {
    let h = with(chrome(), "x-ja4", b"T13D1516H2_8daaf6152771_02713d6af862");
    check(h, "100.64.0.1", &["bad_tls_fingerprint"], RiskLevel::High);
    let h = with(chrome(), "x-ja4", b"t13d1517h2_8daaf6152771_b0da82dd1658");
    check(h, "100.64.0.1", &[], RiskLevel::Low);
}

#[test]
fn tls_header_is_ignored_unless_configured() {
    let h = with(chrome(), "x-ja4", b"t13d1516h2_8daaf6152771_02713d6af862");
    assert_eq!(signals_from_headers(&h, None).tls_fingerprint, None);
    let s = signals_from_headers(&h, Some("X-JA4"));
    assert_eq!(
        s.tls_fingerprint,
        Some("t13d1516h2_8daaf6152771_02713d6af862")
    );
}

#[test]
fn reputation_lists() {
    check(
        chrome(),
        "198.51.100.20",
        &["datacenter_ip"],
        RiskLevel::Low,
    );
    check(chrome(), "192.0.2.7", &["vpn_ip"], RiskLevel::Low);
    check(chrome(), "2001:db8:1:2::9", &["vpn_ip"], RiskLevel::Low);
    check(
        chrome(),
        "203.0.113.100",
        &["known_bot_ip"],
        RiskLevel::High,
    );
    check(chrome(), "203.0.113.200", &[], RiskLevel::Low);
    // A dual-stack socket's view of an IPv4 client.
    check(
        chrome(),
        "::ffff:198.51.100.20",
        &["datacenter_ip"],
        RiskLevel::Low,
    );
}

#[test]
fn signals_are_combined() {
    check(
        without(chrome(), "accept-language"),
        "198.51.100.20",
        &[
            "missing_accept_language",
            "unexpected_header_order",
            "datacenter_ip",
        ],
        RiskLevel::High,
    );
}

#[test]
fn header_order_is_names_in_arrival_order_once_each() {
    let h = headers(&[
        ("user-agent", b"x"),
        ("cookie", b"a=1"),
        ("accept", b"*/*"),
        ("cookie", b"b=2"),
    ]);
    let s = signals_from_headers(&h, None);
    assert_eq!(s.header_order, ["user-agent", "cookie", "accept"]);
}
