//! The client's IP address: the TCP peer, or — only when the peer is one of
//! `limits.trusted_proxies` — the right-most `X-Forwarded-For` hop that is not
//! itself a trusted proxy.
//!
//! Why right-most: every proxy appends the address it saw, so the hops left
//! of the first untrusted one were written by the client and can be anything.
//! Reading from the right and stopping at the first address no trusted proxy
//! vouches for is the only reading a client cannot forge.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use ipnet::IpNet;

/// Whether `ip` lies in one of the `trusted` networks (IPv4-mapped IPv6
/// peers, as a dual-stack socket reports them, match IPv4 networks).
pub fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    let ip = canonical(ip);
    trusted.iter().any(|net| net.contains(&ip))
}

/// The client address of a request that arrived from `peer`.
///
/// Hops are read right to left across every `X-Forwarded-For` field (several
/// fields are one list, in order). A hop that is not an address (`unknown`,
/// garbage, non-UTF-8) stops the walk: the nearest address a trusted proxy
/// vouched for is the best answer left, so the last trusted hop is returned.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let mut client = canonical(peer);
    if !is_trusted(client, trusted) {
        return client;
    }
    let fields: Vec<&[u8]> = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    for field in fields.iter().rev() {
        let Ok(field) = std::str::from_utf8(field) else {
            return client;
        };
        for hop in field.rsplit(',') {
            let Some(ip) = parse_hop(hop) else {
                return client;
            };
            client = ip;
            if !is_trusted(ip, trusted) {
                return client;
            }
        }
    }
    // Every hop was a trusted proxy: the left-most is the closest to the client.
    client
}

/// One `X-Forwarded-For` entry: a bare address, or `ip:port` / `[v6]:port`
/// as some load balancers write it.
/// The key one client is counted under: IPv4 as its IPv4-mapped IPv6 form
/// (never a /64 prefix key, whose low 64 bits are zero), IPv6 as its /64
/// prefix, since one subscriber is handed a whole /64 and can take any
/// address in it.
pub fn address_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => u128::from(v6) & !u128::from(u64::MAX),
        },
    }
}

fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(canonical)
}

/// IPv4-mapped IPv6 as plain IPv4, so one client has one key and one answer.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(peer: &str, xff: &[&str], trusted: &[&str], expected: &str) {
        let mut headers = HeaderMap::new();
        for v in xff {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        let trusted: Vec<IpNet> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        let got = client_ip(peer.parse().unwrap(), &headers, &trusted);
        assert_eq!(
            got,
            expected.parse::<IpAddr>().unwrap(),
            "peer {peer} xff {xff:?}"
        );
    }

    #[test]
    fn hops() {
        let proxies = &["10.0.0.0/8"][..];
        check("203.0.113.9", &["1.2.3.4"], &[], "203.0.113.9");
        check("203.0.113.9", &["1.2.3.4"], proxies, "203.0.113.9");
        check("10.0.0.1", &["1.2.3.4"], proxies, "1.2.3.4");
        check(
            "10.0.0.1",
            &["6.6.6.6, 1.2.3.4, 10.0.0.2"],
            proxies,
            "1.2.3.4",
        );
        check("10.0.0.1", &["6.6.6.6", "1.2.3.4"], proxies, "1.2.3.4");
        check("10.0.0.1", &["10.0.0.3, 10.0.0.2"], proxies, "10.0.0.3");
        check("10.0.0.1", &[], proxies, "10.0.0.1");
        check("10.0.0.1", &["garbage, 1.2.3.4"], proxies, "1.2.3.4");
        check("10.0.0.1", &["1.2.3.4, unknown"], proxies, "10.0.0.1");
        check("10.0.0.1", &["1.2.3.4:5555"], proxies, "1.2.3.4");
        check("10.0.0.1", &["[2001:db8::1]:443"], proxies, "2001:db8::1");
        check("::ffff:10.0.0.1", &["::ffff:1.2.3.4"], proxies, "1.2.3.4");
    }

    #[test]
    fn non_utf8_hop_stops_at_the_trusted_peer() {
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"1.2.3.4\xff").unwrap(),
        );
        let trusted = ["10.0.0.0/8".parse().unwrap()];
        let got = client_ip("10.0.0.1".parse().unwrap(), &headers, &trusted);
        assert_eq!(got, "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
