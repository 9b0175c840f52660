//! `server.admin_hosts`: the names a plain-HTTP admin listener answers to
//! besides addresses and `localhost` (see `admin::hosts`, which checks
//! each request's against them, for why).

use std::net::Ipv4Addr;

/// `server.admin_hosts`: the names besides addresses and `localhost`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminHosts {
    /// `server.admin_hosts` was set (an empty list included).
    configured: bool,
    /// `"*"` was listed: any name.
    any: bool,
    /// Lower case, without a trailing dot.
    names: Vec<String>,
}

impl AdminHosts {
    /// The list as configured; `Err` gives the first wrong entry's place
    /// and what is wrong with it.
    pub fn new(list: Option<&[String]>) -> Result<Self, (usize, String)> {
        let mut hosts = Self {
            configured: list.is_some(),
            ..Self::default()
        };
        for (i, entry) in list.unwrap_or_default().iter().enumerate() {
            if entry == "*" {
                hosts.any = true;
                continue;
            }
            let name = canonical(entry);
            let valid = !name.is_empty()
                && name.len() <= 253
                && name
                    .split('.')
                    .all(|label| !label.is_empty() && label.len() <= 63)
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
            if !valid {
                return Err((
                    i,
                    format!(
                        "{entry:?} is not a host name (a name such as \"admin.example.com\", without scheme or port, or \"*\" for any)"
                    ),
                ));
            }
            hosts.names.push(name);
        }
        Ok(hosts)
    }

    /// Whether a plain-HTTP admin listener on `listen` checks the names it
    /// is reached by: always once `server.admin_hosts` is set, and by
    /// default only on a loopback address. A loopback listener is reached
    /// by `localhost` or an address, and is what a page in the operator's
    /// own browser rebinds to; one on another address is commonly reached
    /// by a service's DNS name (a scraper's target, a container's health
    /// check), which a default check would refuse with no word in the
    /// config. Those operators list their names to have the check.
    pub fn checked_on(&self, listen: std::net::SocketAddr) -> bool {
        self.configured || listen.ip().is_loopback()
    }

    /// Whether a request naming `host` (a `Host` field's value or an
    /// `:authority`, port and all) is answered.
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
            return false;
        };
        // The userinfo part is no part of a Host field; a value with one
        // is not a browser's.
        if authority.as_str().contains('@') {
            return false;
        }
        let name = authority.host();
        // An address cannot be rebound: `[…]` is IPv6, and a browser
        // writes every IPv4 address in dotted decimal.
        if name.starts_with('[') || name.parse::<Ipv4Addr>().is_ok() {
            return true;
        }
        let name = canonical(name);
        name == "localhost" || name.ends_with(".localhost") || self.names.contains(&name)
    }
}

/// Lower case, one trailing dot (the root) dropped.
fn canonical(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> AdminHosts {
        AdminHosts::new(Some(
            &list.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        ))
        .unwrap()
    }

    #[test]
    fn addresses_and_localhost_are_answered_other_names_only_when_listed() {
        let none = hosts(&[]);
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "10.1.2.3:9090",
            "[::1]:9090",
            "[::1]",
            "localhost:9090",
            "LOCALHOST.",
            "dashboard.localhost:9090",
        ] {
            assert!(none.allows(ok), "{ok}");
        }
        for refused in [
            "rebind.attacker.example:9090",
            "attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "user@127.0.0.1:9090",
            "",
            "127.0.0.1:9090/x",
        ] {
            assert!(!none.allows(refused), "{refused}");
        }
        let listed = hosts(&["Ops.Example.", "admin.internal"]);
        assert!(listed.allows("ops.example:9090"));
        assert!(listed.allows("OPS.EXAMPLE."));
        assert!(listed.allows("admin.internal"));
        assert!(!listed.allows("example:9090"));
        assert!(!listed.allows("x.ops.example"));
        assert!(hosts(&["*"]).allows("anything.example:1"));
    }

    /// Unset, the names are checked on a loopback listener only (where a
    /// rebound page in the operator's browser lands); set, everywhere.
    #[test]
    fn the_check_is_on_by_default_on_loopback_and_everywhere_once_set() {
        let unset = AdminHosts::new(None).unwrap();
        assert!(unset.checked_on("127.0.0.1:9090".parse().unwrap()));
        assert!(unset.checked_on("[::1]:9090".parse().unwrap()));
        assert!(!unset.checked_on("0.0.0.0:9090".parse().unwrap()));
        assert!(!unset.checked_on("10.0.0.5:9090".parse().unwrap()));
        let set = hosts(&["admin.internal"]);
        assert!(set.checked_on("0.0.0.0:9090".parse().unwrap()));
        assert!(hosts(&[]).checked_on("10.0.0.5:9090".parse().unwrap()));
    }

    #[test]
    fn an_entry_that_is_not_a_name_is_refused_with_its_place() {
        for bad in [
            "ops.example:9090",
            "http://ops.example",
            "",
            "a..b",
            "*.example",
        ] {
            let (at, err) = AdminHosts::new(Some(&[bad.to_string()])).unwrap_err();
            assert_eq!(at, 0);
            assert!(
                err.starts_with(&format!("{bad:?} is not a host name")),
                "{err}"
            );
        }
        let (at, _) = AdminHosts::new(Some(&["ok.example".into(), "no pe".into()])).unwrap_err();
        assert_eq!(at, 1);
    }
}
