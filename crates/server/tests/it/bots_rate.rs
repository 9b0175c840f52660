//! Per-IP and per-session rate limits on enter and position: they trip,
//! report a retry-after, stay apart per kind and per key, and 0 disables.

use crate::support::bots::*;
use anteroom::bots::{BotDefence, BotsConfig, RateKind, RateLimited, RateLimits};
use anteroom::error::ApiError;

fn limited(per_ip: u32, per_session: u32) -> BotDefence {
    let limits = RateLimits {
        per_ip_per_second: per_ip,
        per_session_per_second: per_session,
        ..RateLimits::default()
    };
    BotDefence::new(&BotsConfig::default(), limits, keyring()).unwrap()
}

/// How many calls in a burst pass before the first refusal.
fn allowed(
    d: &BotDefence,
    kind: RateKind,
    addr: &str,
    session: &str,
) -> (usize, Option<RateLimited>) {
    for n in 0..1000 {
        if let Err(e) = d.check_rate(kind, ip(addr), session) {
            return (n, Some(e));
        }
    }
    (1000, None)
}

#[test]
fn per_ip_limit_trips_with_retry_after() {
    let d = limited(3, 0);
    let (n, refusal) = allowed(&d, RateKind::Enter, "192.0.2.1", "a");
    assert_eq!(n, 3);
    let refusal = refusal.unwrap();
    assert_eq!(refusal.retry_after_s, 1);
    let api = ApiError::from(refusal);
    assert_eq!((api.status().as_u16(), api.code()), (429, "rate_limited"));
    // Another address, and the same address's position polls, are unaffected.
    assert_eq!(allowed(&d, RateKind::Enter, "192.0.2.2", "b").0, 3);
    assert_eq!(allowed(&d, RateKind::Position, "192.0.2.1", "a").0, 3);
}

#[test]
fn per_session_limit_trips_across_addresses() {
    let d = limited(0, 2);
    assert!(
        d.check_rate(RateKind::Position, ip("192.0.2.1"), "s")
            .is_ok()
    );
    assert!(
        d.check_rate(RateKind::Position, ip("198.51.100.1"), "s")
            .is_ok()
    );
    let refusal = d
        .check_rate(RateKind::Position, ip("203.0.113.1"), "s")
        .unwrap_err();
    assert!(refusal.retry_after_s >= 1);
    assert_eq!(allowed(&d, RateKind::Position, "192.0.2.1", "t").0, 2);
}

#[test]
fn slow_refill_reports_whole_seconds_rounded_up() {
    let limits = RateLimits {
        per_ip_per_second: 1,
        per_session_per_second: 0,
        ..RateLimits::default()
    };
    let d = BotDefence::new(&BotsConfig::default(), limits, keyring()).unwrap();
    d.check_rate(RateKind::Enter, ip("192.0.2.1"), "").unwrap();
    let refusal = d
        .check_rate(RateKind::Enter, ip("192.0.2.1"), "")
        .unwrap_err();
    assert_eq!(refusal.retry_after_s, 1);
}

#[test]
fn ipv6_clients_share_their_slash_64() {
    let d = limited(2, 0);
    d.check_rate(RateKind::Enter, ip("2001:db8:1:2::1"), "a")
        .unwrap();
    d.check_rate(RateKind::Enter, ip("2001:db8:1:2:ffff::9"), "b")
        .unwrap();
    assert!(
        d.check_rate(RateKind::Enter, ip("2001:db8:1:2::77"), "c")
            .is_err()
    );
    assert!(
        d.check_rate(RateKind::Enter, ip("2001:db8:1:3::1"), "d")
            .is_ok()
    );
    // An IPv4-mapped peer is the IPv4 client.
    d.check_rate(RateKind::Enter, ip("192.0.2.9"), "e").unwrap();
    d.check_rate(RateKind::Enter, ip("::ffff:192.0.2.9"), "f")
        .unwrap();
    assert!(d.check_rate(RateKind::Enter, ip("192.0.2.9"), "g").is_err());
}

#[test]
fn zero_disables() {
    let d = limited(0, 0);
    assert_eq!(allowed(&d, RateKind::Enter, "192.0.2.1", "s").0, 1000);
}
