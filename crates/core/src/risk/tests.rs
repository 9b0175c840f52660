use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const CHROME_UA: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
const CHROME_ORDER: &[&str] = &[
    "host",
    "connection",
    "sec-ch-ua",
    "upgrade-insecure-requests",
    "user-agent",
    "accept",
    "sec-fetch-site",
    "accept-encoding",
    "accept-language",
    "cookie",
];
const FIREFOX_ORDER: &[&str] = &[
    "host",
    "user-agent",
    "accept",
    "accept-language",
    "accept-encoding",
    "connection",
];
const REQUESTS_ORDER: &[&str] = &[
    "host",
    "user-agent",
    "accept-encoding",
    "accept",
    "connection",
];

fn browser() -> Signals<'static> {
    Signals {
        user_agent: Some(CHROME_UA),
        accept_language: Some("en-US,en;q=0.9"),
        header_order: CHROME_ORDER,
        tls_fingerprint: Some("t13d1516h2_8daaf6152771_02713d6af862"),
        reputation: Reputation::default(),
    }
}

fn rules() -> Rules {
    Rules {
        bad_tls_fingerprints: vec!["t13d1812h1_85036bcba153_b26ce05bbdd6".to_owned()],
        ..Rules::default()
    }
}

fn check(s: Signals<'_>, level: RiskLevel, reasons: &[&str]) {
    let a = assess(&s, &rules());
    assert_eq!(
        (a.level, a.reasons.as_slice()),
        (level, reasons),
        "{s:?} scored {}",
        a.score
    );
}

#[test]
fn each_rule() {
    use RiskLevel::*;
    use reason::*;
    check(browser(), Low, &[]);
    check(
        Signals {
            header_order: FIREFOX_ORDER,
            ..browser()
        },
        Low,
        &[],
    );
    check(
        Signals {
            header_order: &[],
            ..browser()
        },
        Low,
        &[],
    );
    // User agent.
    check(
        Signals {
            user_agent: None,
            ..browser()
        },
        Medium,
        &[MISSING_USER_AGENT],
    );
    check(
        Signals {
            user_agent: Some("  "),
            ..browser()
        },
        Medium,
        &[MISSING_USER_AGENT],
    );
    check(
        Signals {
            user_agent: Some("curl/8.5.0"),
            ..browser()
        },
        High,
        &[BOT_USER_AGENT],
    );
    check(
        Signals {
            user_agent: Some("python-requests/2.32.3"),
            ..browser()
        },
        High,
        &[BOT_USER_AGENT],
    );
    check(
        Signals {
            user_agent: Some(
                "Mozilla/5.0 (X11; Linux x86_64) HeadlessChrome/120.0.0.0 Safari/537.36",
            ),
            ..browser()
        },
        High,
        &[BOT_USER_AGENT],
    );
    check(
        Signals {
            user_agent: Some("Mozilla/5.0 (compatible; Googlebot/2.1)"),
            ..browser()
        },
        High,
        &[BOT_USER_AGENT],
    );
    // A phone brand with "bot" in its name is not a bot.
    check(
        Signals {
            user_agent: Some("Mozilla/5.0 (Linux; Android 12; CUBOT KingKong 7)"),
            ..browser()
        },
        Low,
        &[],
    );
    // Accept-Language.
    check(
        Signals {
            accept_language: None,
            ..browser()
        },
        Low,
        &[MISSING_ACCEPT_LANGUAGE],
    );
    check(
        Signals {
            accept_language: Some(""),
            ..browser()
        },
        Low,
        &[MISSING_ACCEPT_LANGUAGE],
    );
    // Header order: python-requests' order is no browser's.
    check(
        Signals {
            header_order: REQUESTS_ORDER,
            ..browser()
        },
        Low,
        &[UNEXPECTED_HEADER_ORDER],
    );
    // TLS fingerprint, compared case-insensitively.
    check(
        Signals {
            tls_fingerprint: Some("T13D1812H1_85036BCBA153_B26CE05BBDD6"),
            ..browser()
        },
        High,
        &[BAD_TLS_FINGERPRINT],
    );
    // Reputation.
    let rep = |datacenter, vpn, known_bot| Reputation {
        datacenter,
        vpn,
        known_bot,
    };
    check(
        Signals {
            reputation: rep(true, false, false),
            ..browser()
        },
        Low,
        &[DATACENTER_IP],
    );
    check(
        Signals {
            reputation: rep(false, true, false),
            ..browser()
        },
        Low,
        &[VPN_IP],
    );
    check(
        Signals {
            reputation: rep(false, false, true),
            ..browser()
        },
        High,
        &[KNOWN_BOT_IP],
    );
    // Weak signals add up.
    check(
        Signals {
            reputation: rep(true, false, false),
            accept_language: None,
            ..browser()
        },
        Medium,
        &[MISSING_ACCEPT_LANGUAGE, DATACENTER_IP],
    );
    // A bare script: everything at once.
    let script = Signals {
        user_agent: Some("python-requests/2.32.3"),
        accept_language: None,
        header_order: REQUESTS_ORDER,
        tls_fingerprint: Some("t13d1812h1_85036bcba153_b26ce05bbdd6"),
        reputation: rep(true, true, true),
    };
    let a = assess(&script, &rules());
    assert_eq!((a.level, a.score), (High, 60 + 20 + 15 + 60 + 25 + 10 + 70));
}

#[test]
fn weights_and_thresholds_come_from_config() {
    let mut rules = rules();
    rules.weights.missing_user_agent = 0;
    let a = assess(
        &Signals {
            user_agent: None,
            ..browser()
        },
        &rules,
    );
    assert_eq!((a.level, a.score, a.reasons.len()), (RiskLevel::Low, 0, 0));
    rules.medium = 10;
    rules.high = 20;
    let a = assess(
        &Signals {
            accept_language: None,
            ..browser()
        },
        &rules,
    );
    assert_eq!(a.level, RiskLevel::High);
    rules.browser_header_orders.clear();
    let a = assess(
        &Signals {
            header_order: REQUESTS_ORDER,
            ..browser()
        },
        &rules,
    );
    assert_eq!(a.level, RiskLevel::Low);
    // An empty pattern does not flag everybody.
    rules.bot_user_agents.push(String::new());
    assert_eq!(assess(&browser(), &rules).level, RiskLevel::Low);
}

#[test]
fn rules_deserialize_with_defaults() {
    let rules: Rules = serde_json::from_str(
        r#"{"high": 80, "weights": {"vpn_ip": 30}, "browser_header_orders": ["00000000000000ff"]}"#,
    )
    .unwrap();
    assert_eq!(rules.high, 80);
    assert_eq!(rules.medium, 30);
    assert_eq!(rules.weights.vpn_ip, 30);
    assert_eq!(rules.weights.known_bot_ip, 70);
    assert_eq!(rules.browser_header_orders, vec![Fingerprint(0xff)]);
    assert!(serde_json::from_str::<Rules>(r#"{"browser_header_orders": ["xyz"]}"#).is_err());
    assert!(serde_json::from_str::<Rules>(r#"{"hihg": 80}"#).is_err());
    // Round trip through the hex form.
    let json = serde_json::to_string(&Rules::default()).unwrap();
    assert_eq!(
        serde_json::from_str::<Rules>(&json).unwrap(),
        Rules::default()
    );
    assert!(RiskLevel::Low < RiskLevel::Medium && RiskLevel::Medium < RiskLevel::High);
    assert_eq!(
        serde_json::to_string(&RiskLevel::Medium).unwrap(),
        "\"medium\""
    );
}

#[test]
fn header_order_fingerprint_is_stable() {
    // FNV-1a values pinned: config files hold these numbers.
    assert_eq!(header_order_fingerprint(&[]), 0xcbf2_9ce4_8422_2325);
    assert_eq!(header_order_fingerprint(&["a"]), 0x089b_dc07_b544_e7b2);
    assert_ne!(
        header_order_fingerprint(&["ab", "c"]),
        header_order_fingerprint(&["a", "bc"])
    );
    assert_ne!(
        header_order_fingerprint(&["a", "b"]),
        header_order_fingerprint(&["b", "a"])
    );
    assert_eq!(
        header_order_fingerprint(&["User-Agent"]),
        header_order_fingerprint(&["user-agent"])
    );
    let r = Rules::default();
    assert_eq!(
        r.header_order_key(CHROME_ORDER),
        header_order_fingerprint(&["user-agent", "accept", "accept-encoding", "accept-language"])
    );
}

#[test]
fn cidr_lookups_v4_and_v6() {
    let list = CidrList::parse(
        "# cloud ranges\n\
         10.0.0.0/8\n\
         \n\
         192.0.2.7          # one host\n\
         198.51.100.0/24\n\
         198.51.100.128/25  # overlaps the line above\n\
         2001:db8::/32\n\
         2001:db8:1::/48\n\
         ::1\n\
         203.0.113.9/24     # host bits set: the network counts\n",
    )
    .unwrap();
    assert_eq!(list.len(), 8);
    assert!(!list.is_empty());
    fn check(list: &CidrList, ip: &str, expected: bool) {
        assert_eq!(list.contains(ip.parse().unwrap()), expected, "{ip}");
    }
    check(&list, "10.0.0.0", true);
    check(&list, "10.255.255.255", true);
    check(&list, "11.0.0.0", false);
    check(&list, "9.255.255.255", false);
    check(&list, "192.0.2.7", true);
    check(&list, "192.0.2.6", false);
    check(&list, "192.0.2.8", false);
    check(&list, "198.51.100.1", true);
    check(&list, "198.51.100.200", true);
    check(&list, "198.51.101.0", false);
    check(&list, "203.0.113.200", true);
    check(&list, "2001:db8::1", true);
    check(&list, "2001:db8:ffff::1", true);
    check(&list, "2001:db9::", false);
    check(&list, "::1", true);
    check(&list, "::2", false);
    // IPv4 clients seen through a dual-stack socket.
    check(&list, "::ffff:10.1.2.3", true);
    check(&list, "::ffff:11.1.2.3", false);
    assert!(!CidrList::default().contains(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    assert!(
        CidrList::parse("0.0.0.0/0\n::/0")
            .unwrap()
            .contains(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    );
}

#[test]
fn malformed_cidr_file_names_the_line() {
    fn check(text: &str, line: usize) {
        let err = CidrList::parse(text).unwrap_err();
        assert_eq!(err.line, line, "{err}");
        assert!(
            err.to_string().starts_with(&format!("line {line}: ")),
            "{err}"
        );
    }
    check("10.0.0.0/8\n# fine\n10.0.0.0/33\n", 3);
    check("not an ip", 1);
    check("10.0.0.0/8\n\n1.2.3", 3);
    check("2001:db8::/129", 1);
    check("::1\n10.0.0.0/8 10.0.0.1", 2);
    check("10.0.0.0/", 1);
    assert_eq!(
        CidrList::parse("\n# only comments\n   \n").unwrap().len(),
        0
    );
}

#[test]
fn reputation_lookup() {
    let lists = ReputationLists {
        datacenter: CidrList::parse("203.0.113.0/24").unwrap(),
        vpn: CidrList::parse("203.0.113.0/28\n2001:db8::/32").unwrap(),
        known_bot: CidrList::parse("203.0.113.5").unwrap(),
    };
    let rep = |ip: &str| lists.lookup(ip.parse().unwrap());
    assert_eq!(
        rep("203.0.113.5"),
        Reputation {
            datacenter: true,
            vpn: true,
            known_bot: true
        }
    );
    assert_eq!(
        rep("203.0.113.100"),
        Reputation {
            datacenter: true,
            vpn: false,
            known_bot: false
        }
    );
    assert_eq!(
        rep("2001:db8::5"),
        Reputation {
            datacenter: false,
            vpn: true,
            known_bot: false
        }
    );
    assert_eq!(rep("8.8.8.8"), Reputation::default());
}

proptest! {
    /// Binary search over merged ranges agrees with checking every network.
    #[test]
    fn cidr_lookup_matches_a_linear_scan(
        nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..50),
        probes in proptest::collection::vec(any::<u32>(), 0..50),
    ) {
        let text: String = nets.iter().map(|(a, len)| format!("{}/{len}\n", Ipv4Addr::from(*a))).collect();
        let list = CidrList::parse(&text).unwrap();
        let parsed: Vec<ipnet::Ipv4Net> = text.lines().map(|l| l.parse().unwrap()).collect();
        let near: Vec<u32> = nets.iter().flat_map(|(a, _)| [a.wrapping_sub(1), *a, a.wrapping_add(1)]).collect();
        for p in probes.iter().chain(&near) {
            let ip = Ipv4Addr::from(*p);
            prop_assert_eq!(list.contains(IpAddr::V4(ip)), parsed.iter().any(|n| n.contains(&ip)), "{}", ip);
        }
    }

    #[test]
    fn parse_never_panics(text in ".*") {
        let _ = CidrList::parse(&text);
    }

    #[test]
    fn assess_never_panics(ua in proptest::option::of(".*"), lang in proptest::option::of(".*"), names in proptest::collection::vec(".*", 0..10)) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let s = Signals { user_agent: ua.as_deref(), accept_language: lang.as_deref(), header_order: &names, ..Signals::default() };
        let a = assess(&s, &Rules::default());
        // The level always follows the score, and only fired rules score.
        let r = Rules::default();
        let expected = if a.score >= r.high { RiskLevel::High } else if a.score >= r.medium { RiskLevel::Medium } else { RiskLevel::Low };
        prop_assert_eq!(a.level, expected);
        prop_assert_eq!(a.score == 0, a.reasons.is_empty());
    }
}
