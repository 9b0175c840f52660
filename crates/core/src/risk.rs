//! Bot risk: request signals (user agent, accept-language, header order, TLS fingerprint, IP reputation) scored into low / medium / high by configurable rules.
//!
//! Each signal that looks automated adds its weight to a score; the score is
//! compared with two thresholds. No single weak signal (a datacenter IP, an
//! unusual header order) is enough on its own to reach medium with the
//! defaults: real visitors use VPNs and odd browsers, and a false positive
//! costs a real person a place in the queue.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// How likely a visitor is to be a bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RiskLevel {
    Low,
    Medium,
    High,
}

/// What the IP reputation lists say about the client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reputation {
    pub datacenter: bool,
    pub vpn: bool,
    pub known_bot: bool,
}

/// What the gate saw of one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals<'a> {
    pub user_agent: Option<&'a str>,
    pub accept_language: Option<&'a str>,
    /// Lowercased header names in arrival order.
    pub header_order: &'a [&'a str],
    /// An edge-forwarded TLS fingerprint (JA3 hash, JA4 string, ...).
    pub tls_fingerprint: Option<&'a str>,
    pub reputation: Reputation,
}

/// Why a score rose; stable strings for logs and metric labels.
pub mod reason {
    pub const MISSING_USER_AGENT: &str = "missing_user_agent";
    pub const BOT_USER_AGENT: &str = "bot_user_agent";
    pub const MISSING_ACCEPT_LANGUAGE: &str = "missing_accept_language";
    pub const UNEXPECTED_HEADER_ORDER: &str = "unexpected_header_order";
    pub const BAD_TLS_FINGERPRINT: &str = "bad_tls_fingerprint";
    pub const DATACENTER_IP: &str = "datacenter_ip";
    pub const VPN_IP: &str = "vpn_ip";
    pub const KNOWN_BOT_IP: &str = "known_bot_ip";
}

/// Points each signal adds to the score; 0 turns a signal off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    pub missing_user_agent: u32,
    pub bot_user_agent: u32,
    pub missing_accept_language: u32,
    pub unexpected_header_order: u32,
    pub bad_tls_fingerprint: u32,
    pub datacenter_ip: u32,
    pub vpn_ip: u32,
    pub known_bot_ip: u32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            missing_user_agent: 40,
            bot_user_agent: 60,
            missing_accept_language: 20,
            unexpected_header_order: 15,
            bad_tls_fingerprint: 60,
            datacenter_ip: 25,
            vpn_ip: 10,
            known_bot_ip: 70,
        }
    }
}

/// A header-order fingerprint, written in config as 16 hex digits (a TOML
/// integer cannot hold every `u64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Fingerprint(pub u64);

impl TryFrom<String> for Fingerprint {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        u64::from_str_radix(s.trim(), 16)
            .map(Fingerprint)
            .map_err(|_| format!("header-order fingerprint {s:?} is not a hex u64"))
    }
}

impl From<Fingerprint> for String {
    fn from(f: Fingerprint) -> String {
        format!("{:016x}", f.0)
    }
}

/// The risk rules of one deployment; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rules {
    pub weights: Weights,
    /// A score at or above this is medium risk.
    pub medium: u32,
    /// A score at or above this is high risk.
    pub high: u32,
    /// Case-insensitive substrings of automated clients' user agents.
    pub bot_user_agents: Vec<String>,
    /// TLS fingerprints of known automation stacks, compared case-insensitively.
    /// Empty by default: fingerprints depend on the edge's format (JA3 or
    /// JA4) and go stale with every client release, so the operator supplies
    /// them from their own edge's data.
    pub bad_tls_fingerprints: Vec<String>,
    /// The headers whose relative order is fingerprinted. Only well-known
    /// headers count, so optional ones (cookie, cache-control, referer) do not
    /// make every visit of one browser look different.
    pub ordered_headers: Vec<String>,
    /// [`header_order_fingerprint`] of `ordered_headers` as real browsers
    /// order them. Empty turns the rule off.
    pub browser_header_orders: Vec<Fingerprint>,
}

impl Default for Rules {
    fn default() -> Self {
        let strings = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Rules {
            weights: Weights::default(),
            medium: 30,
            high: 60,
            bot_user_agents: strings(&[
                "curl/",
                "wget/",
                "python-requests",
                "python-urllib",
                "aiohttp",
                "httpx",
                "go-http-client",
                "okhttp",
                "java/",
                "apache-httpclient",
                "libwww-perl",
                "node-fetch",
                "axios/",
                "undici",
                "scrapy",
                "headlesschrome",
                "phantomjs",
                "selenium",
                "puppeteer",
                "playwright",
                "bot/",
                "crawler",
                "spider",
            ]),
            bad_tls_fingerprints: Vec::new(),
            ordered_headers: strings(&[
                "user-agent",
                "accept",
                "accept-encoding",
                "accept-language",
            ]),
            browser_header_orders: [
                // Chromium (Chrome, Edge, Opera, Brave).
                &["user-agent", "accept", "accept-encoding", "accept-language"][..],
                // Firefox.
                &["user-agent", "accept", "accept-language", "accept-encoding"][..],
            ]
            .iter()
            .map(|order| Fingerprint(header_order_fingerprint(order)))
            .collect(),
        }
    }
}

impl Rules {
    /// [`header_order_fingerprint`] of the request's `ordered_headers`, in
    /// arrival order; what `browser_header_orders` is compared with, and what
    /// an operator logs to learn a new browser's order.
    pub fn header_order_key(&self, names: &[&str]) -> u64 {
        let tracked = names.iter().filter(|n| {
            self.ordered_headers
                .iter()
                .any(|h| h.eq_ignore_ascii_case(n))
        });
        fnv1a(tracked.copied())
    }
}

/// The outcome of [`assess`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub level: RiskLevel,
    pub score: u32,
    /// The rules that fired, in a fixed order.
    pub reasons: Vec<&'static str>,
}

/// Scores one request's signals against `rules`.
pub fn assess(s: &Signals<'_>, rules: &Rules) -> Assessment {
    let w = &rules.weights;
    let ua = s.user_agent.map(str::trim).filter(|ua| !ua.is_empty());
    let lang = s.accept_language.map(str::trim).filter(|l| !l.is_empty());
    let fired = [
        (
            ua.is_none(),
            w.missing_user_agent,
            reason::MISSING_USER_AGENT,
        ),
        (
            ua.is_some_and(|ua| {
                rules
                    .bot_user_agents
                    .iter()
                    .any(|p| contains_ignore_case(ua, p))
            }),
            w.bot_user_agent,
            reason::BOT_USER_AGENT,
        ),
        (
            lang.is_none(),
            w.missing_accept_language,
            reason::MISSING_ACCEPT_LANGUAGE,
        ),
        (
            unexpected_order(s.header_order, rules),
            w.unexpected_header_order,
            reason::UNEXPECTED_HEADER_ORDER,
        ),
        (
            s.tls_fingerprint.is_some_and(|f| {
                rules
                    .bad_tls_fingerprints
                    .iter()
                    .any(|b| b.trim().eq_ignore_ascii_case(f.trim()))
            }),
            w.bad_tls_fingerprint,
            reason::BAD_TLS_FINGERPRINT,
        ),
        (
            s.reputation.datacenter,
            w.datacenter_ip,
            reason::DATACENTER_IP,
        ),
        (s.reputation.vpn, w.vpn_ip, reason::VPN_IP),
        (s.reputation.known_bot, w.known_bot_ip, reason::KNOWN_BOT_IP),
    ];
    let mut score = 0u32;
    let mut reasons = Vec::new();
    for (hit, weight, why) in fired {
        if hit && weight > 0 {
            score = score.saturating_add(weight);
            reasons.push(why);
        }
    }
    let level = if score >= rules.high {
        RiskLevel::High
    } else if score >= rules.medium {
        RiskLevel::Medium
    } else {
        RiskLevel::Low
    };
    Assessment {
        level,
        score,
        reasons,
    }
}

/// A stable 64-bit FNV-1a hash of header names in order (ASCII-lowercased,
/// separated so `["ab", "c"]` and `["a", "bc"]` differ). Stable across
/// builds and platforms, so fingerprints can live in config.
pub fn header_order_fingerprint(names: &[&str]) -> u64 {
    fnv1a(names.iter().copied())
}

fn fnv1a<'a>(names: impl Iterator<Item = &'a str>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for name in names {
        for b in name.bytes() {
            h = (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(PRIME);
        }
        // A byte no header name contains.
        h = (h ^ u64::from(b'\n')).wrapping_mul(PRIME);
    }
    h
}

/// Whether the request's header order matches none of the browsers' orders.
/// Without a recorded order (or with the rule off) nothing is suspicious.
fn unexpected_order(names: &[&str], rules: &Rules) -> bool {
    if names.is_empty() || rules.browser_header_orders.is_empty() {
        return false;
    }
    let key = rules.header_order_key(names);
    !rules.browser_header_orders.contains(&Fingerprint(key))
}

/// ASCII case-insensitive substring search, without allocating.
fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() {
        // An empty pattern in config must not flag every visitor.
        return false;
    }
    h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// A line of a CIDR file that is not an address or a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CidrParseError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// A set of IP networks, from a text file with one network (`10.0.0.0/8`,
/// `2001:db8::/32`) or bare address per line, `#` comments and blank lines.
///
/// Networks are kept as sorted, merged address ranges, so a lookup is a binary
/// search: lists of a cloud provider's ranges run to tens of thousands of lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrList {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
    entries: usize,
}

impl CidrList {
    pub fn parse(text: &str) -> Result<Self, CidrParseError> {
        let mut list = CidrList::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let net = if line.contains('/') {
                line.parse::<IpNet>().map_err(|e| e.to_string())
            } else {
                line.parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|e| e.to_string())
            }
            .map_err(|e| CidrParseError {
                line: i + 1,
                message: format!("{line:?} is not an IP network: {e}"),
            })?;
            match net {
                IpNet::V4(n) => list.v4.push((n.network().into(), n.broadcast().into())),
                IpNet::V6(n) => list.v6.push((n.network().into(), n.broadcast().into())),
            }
            list.entries += 1;
        }
        merge(&mut list.v4);
        merge(&mut list.v6);
        Ok(list)
    }

    /// Whether `ip` is in one of the networks. An IPv4-mapped IPv6 address
    /// (`::ffff:192.0.2.1`, as a dual-stack socket reports IPv4 clients) also
    /// matches the IPv4 networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => covers(&self.v4, u32::from(a)),
            IpAddr::V6(a) => {
                a.to_ipv4_mapped()
                    .is_some_and(|v4| covers(&self.v4, u32::from(v4)))
                    || covers(&self.v6, u128::from(a))
            }
        }
    }

    /// How many networks the file listed.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

/// Sorts ranges and merges overlapping ones, so at most one range can hold
/// an address and [`covers`] can binary-search.
fn merge<T: Ord + Copy>(ranges: &mut Vec<(T, T)>) {
    ranges.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *ranges = merged;
}

fn covers<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    let after = ranges.partition_point(|r| r.0 <= x);
    after
        .checked_sub(1)
        .and_then(|i| ranges.get(i))
        .is_some_and(|r| x <= r.1)
}

/// The IP reputation lists of a deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReputationLists {
    pub datacenter: CidrList,
    pub vpn: CidrList,
    pub known_bot: CidrList,
}

impl ReputationLists {
    pub fn lookup(&self, ip: IpAddr) -> Reputation {
        Reputation {
            datacenter: self.datacenter.contains(ip),
            vpn: self.vpn.contains(ip),
            known_bot: self.known_bot.contains(ip),
        }
    }
}

#[cfg(test)]
mod tests;
