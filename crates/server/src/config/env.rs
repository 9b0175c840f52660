//! Which `ANTEROOM_*` environment variables are configuration.
//!
//! Orchestrators inject variables that share our prefix without being meant
//! for us: Kubernetes gives every pod `ANTEROOM_PORT=tcp://10.0.0.7:8080`,
//! `ANTEROOM_SERVICE_HOST`, `ANTEROOM_PORT_8080_TCP_ADDR`, … for a service
//! named `anteroom`. Such a variable must never stop the start, so only a
//! variable whose name walks down the file's own shape (`SERVER__LISTEN` is
//! `server.listen`) is read; the rest are ignored and listed at debug level.
//! Below a key the file really has (an unset `server.tls` table, say), serde
//! still refuses unknown names, naming the key: that is a typo of a real
//! setting, not an orchestrator's variable.

use serde_json::Value;

use super::raw::RawConfig;

/// The prefix of every configuration variable.
pub const PREFIX: &str = "ANTEROOM_";

/// Shorthand variables for the two secrets, read apart from the tree.
pub const SHORTHANDS: [&str; 2] = ["secret", "admin_token"];

/// The file's shape as a tree of keys (every `Option` field serialises as
/// `null`, so an empty configuration lists every key it can hold).
fn shape() -> Value {
    serde_json::to_value(RawConfig::default()).unwrap_or(Value::Null)
}

/// Whether the dotted, lower-case key `path` names a configuration key.
pub fn recognised(path: &str) -> bool {
    recognised_in(&shape(), path)
}

fn recognised_in(tree: &Value, path: &str) -> bool {
    let mut node = tree;
    for segment in path.split('.') {
        match node {
            Value::Object(fields) => match fields.get(segment) {
                Some(next) => node = next,
                None => return false,
            },
            // A leaf or an unset table: serde checks whatever lies below.
            _ => return true,
        }
    }
    true
}

/// The names of the `ANTEROOM_*` variables in the environment that are not
/// configuration (for a debug line once logging is up).
pub fn ignored_vars() -> Vec<String> {
    let tree = shape();
    let mut ignored: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            name.get(..PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
        })
        .filter(|name| {
            let key = name[PREFIX.len()..].to_ascii_lowercase().replace("__", ".");
            !SHORTHANDS.contains(&key.as_str()) && !recognised_in(&tree, &key)
        })
        .collect();
    ignored.sort();
    ignored
}

#[cfg(test)]
mod tests {
    use super::recognised;

    #[test]
    fn keys_of_the_file_are_recognised_and_orchestrator_variables_are_not() {
        for key in [
            "server.listen",
            "server.admin_token",
            "store.urls",
            "keys.secrets",
            "limits.per_ip_per_second",
            "events",
        ] {
            assert!(recognised(key), "{key} should be configuration");
        }
        for key in [
            "port",
            "service_host",
            "service_port",
            "port_8080_tcp",
            "port_8080_tcp_addr",
            "server_port",
            "store.host",
        ] {
            assert!(!recognised(key), "{key} should be ignored");
        }
    }
}

#[cfg(test)]
mod example {
    use serde_json::Value;

    use crate::config::raw::{RawAdmission, RawBots, RawEvent, RawJwt};

    const EXAMPLE: &str = include_str!("../../../../anteroom.example.toml");

    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(fields) => {
                for (k, v) in fields {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&path, v, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }

    /// The example names every key the file can hold (set or commented
    /// out), so a new key cannot ship undocumented to operators.
    #[test]
    fn the_example_configuration_names_every_key() {
        let mut keys = Vec::new();
        leaves("", &super::shape(), &mut keys);
        for (section, shape) in [
            ("events", serde_json::to_value(RawEvent::default())),
            ("events.jwt", serde_json::to_value(RawJwt::default())),
            (
                "events.admission",
                serde_json::to_value(RawAdmission::default()),
            ),
            ("events.bots", serde_json::to_value(RawBots::default())),
        ] {
            leaves(section, &shape.unwrap(), &mut keys);
        }
        let missing: Vec<&String> = keys
            .iter()
            .filter(|k| {
                *k != "events"
                    && *k != "events.jwt"
                    && *k != "events.admission"
                    && *k != "events.bots"
            })
            .filter(|k| {
                let name = k.rsplit('.').next().unwrap_or(k);
                !EXAMPLE.lines().any(|line| {
                    let line = line.trim_start_matches(['#', ' ']);
                    line.starts_with(&format!("{name} ="))
                        || line.contains(&format!(" {name} ="))
                        || line.contains(&format!("{{ {name} ="))
                        || line.starts_with(&format!("[{k}]"))
                        || line.starts_with(&format!("[[{k}]]"))
                        || line.starts_with(&format!("[{name}]"))
                })
            })
            .collect();
        assert!(
            missing.is_empty(),
            "anteroom.example.toml lacks {missing:?}"
        );
    }
}
