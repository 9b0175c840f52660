//! The one way the tests write a configuration file: a builder with named
//! options, so a test says what it changes (`.max_active(3)`,
//! `.store_timeout("1s")`) instead of filling positional holes in a copy of
//! the whole file. What a test does not name keeps the defaults below.
//!
//! A config for a node run as a process ([`ConfigBuilder::process`]) keeps
//! the `{public}`, `{admin}` and `{journal}` placeholders that
//! `process::Node` fills in with the ports and files it picked.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

/// The admin token of every test config.
pub const ADMIN_TOKEN: &str = "test-admin-token";
/// The key secret of every test config.
pub const SECRET: &str = "test-secret-test-secret-test-secret-0123";

/// One admission per hour: the first visitor gets in, the rest wait.
pub const HOURLY: &str = r#"{ mode = "batch", batch_size = 1, interval = "1h" }"#;
/// One admission every 100 ms: a queue that moves as fast as a test polls.
pub const FAST_BATCH: &str = r#"{ mode = "batch", batch_size = 1, interval = "100ms" }"#;

/// A whole config file.
#[derive(Debug, Clone)]
#[must_use]
pub struct ConfigBuilder {
    server: Vec<String>,
    tls: Vec<String>,
    store: Vec<String>,
    limits: Vec<String>,
    sections: Vec<String>,
    events: Vec<Event>,
}

impl ConfigBuilder {
    /// `[server]` with the admin token, `[keys]` with the secret, the
    /// default store, default limits and no event.
    pub fn new() -> Self {
        Self {
            server: vec![format!("admin_token = \"{ADMIN_TOKEN}\"")],
            tls: Vec::new(),
            store: Vec::new(),
            limits: Vec::new(),
            sections: Vec::new(),
            events: Vec::new(),
        }
    }

    /// For `process::Node`: listeners at the ports it fills in, cookies
    /// without `Secure` (the tests speak plain HTTP).
    pub fn process(self) -> Self {
        self.server_line("listen = \"{public}\"")
            .server_line("admin_listen = \"{admin}\"")
            .server_line("insecure_cookies = true")
    }

    /// The node's drain journal at the file `process::Node` names.
    pub fn drain_journal(self) -> Self {
        self.server_line("drain_journal = \"{journal}\"")
    }

    /// `server.gateway_nodes`.
    pub fn gateway_nodes(self, n: u64) -> Self {
        self.server_line(&format!("gateway_nodes = {n}"))
    }

    /// Any other `[server]` key, as a TOML line.
    pub fn server_line(mut self, line: &str) -> Self {
        self.server.push(line.to_owned());
        self
    }

    /// `[server.tls]` lines.
    pub fn tls(mut self, lines: &str) -> Self {
        self.tls.push(lines.to_owned());
        self
    }

    /// The embedded store in `dir`.
    pub fn embedded(mut self, dir: &Path) -> Self {
        self.store = vec![format!("path = \"{}\"", dir.display())];
        self
    }

    /// The standalone Redis store at `urls`, store calls bounded to 300 ms
    /// unless [`Self::store_timeout`] says otherwise.
    pub fn redis(mut self, urls: &[String]) -> Self {
        let urls = urls
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ");
        self.store = vec![
            "kind = \"redis\"".to_owned(),
            format!("urls = [{urls}]"),
            "cluster = false".to_owned(),
            "timeout = \"300ms\"".to_owned(),
        ];
        self
    }

    /// [`Self::redis`] on a Redis Cluster reached through `urls`.
    pub fn redis_cluster(self, urls: &[String]) -> Self {
        let mut c = self.redis(urls);
        c.store.retain(|l| !l.starts_with("cluster = "));
        c.store.push("cluster = true".to_owned());
        c
    }

    /// `store.timeout` of a Redis store.
    pub fn store_timeout(mut self, timeout: &str) -> Self {
        self.store.retain(|l| !l.starts_with("timeout = "));
        self.store.push(format!("timeout = \"{timeout}\""));
        self
    }

    /// No per-address or per-session rate limit and no cap on entries per
    /// address: tests poll and re-enter as fast as they can; the limits
    /// have their own tests (wired_limits).
    pub fn no_limits(self) -> Self {
        self.no_rate_limits().limit("entries_per_ip = 0")
    }

    /// No per-address or per-session rate limit.
    pub fn no_rate_limits(self) -> Self {
        self.limit("per_ip_per_second = 0")
            .limit("per_session_per_second = 0")
    }

    /// One `[limits]` key, as a TOML line.
    pub fn limit(mut self, line: &str) -> Self {
        self.limits.push(line.to_owned());
        self
    }

    /// Other tables (`[bots]`, `[[server.trusted_proxies]]`, ...) before the
    /// events, as TOML text.
    pub fn section(mut self, text: &str) -> Self {
        self.sections.push(text.to_owned());
        self
    }

    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// The TOML text.
    pub fn toml(&self) -> String {
        let mut s = String::from("[server]\n");
        for l in &self.server {
            writeln!(s, "{l}").unwrap();
        }
        if !self.tls.is_empty() {
            s.push_str("[server.tls]\n");
            for l in &self.tls {
                writeln!(s, "{l}").unwrap();
            }
        }
        s.push_str("[store]\n");
        for l in &self.store {
            writeln!(s, "{l}").unwrap();
        }
        writeln!(s, "[keys]\nsecrets = [\"{SECRET}\"]").unwrap();
        if !self.limits.is_empty() {
            s.push_str("[limits]\n");
            for l in &self.limits {
                writeln!(s, "{l}").unwrap();
            }
        }
        for section in &self.sections {
            writeln!(s, "{section}").unwrap();
        }
        for e in &self.events {
            e.write(&mut s);
        }
        s
    }

    /// The validated config (for `anteroom::run`).
    pub fn build(&self) -> anteroom::Config {
        anteroom::Config::from_toml(&self.toml()).unwrap()
    }
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// One `[[events]]` entry.
#[derive(Debug, Clone)]
#[must_use]
pub struct Event {
    id: String,
    origin: String,
    paths: Vec<String>,
    lines: Vec<String>,
}

impl Event {
    /// Event `id` in front of `origin` (a URL), protecting `/{id}`.
    pub fn new(id: &str, origin: &str) -> Self {
        Self {
            id: id.to_owned(),
            origin: origin.to_owned(),
            paths: vec![format!("/{id}")],
            lines: Vec::new(),
        }
    }

    /// [`Event::new`] in front of the origin at `addr`.
    pub fn at(id: &str, addr: SocketAddr) -> Self {
        Self::new(id, &format!("http://{addr}"))
    }

    /// The protected path prefixes, instead of `/{id}`.
    pub fn paths(mut self, paths: &[&str]) -> Self {
        self.paths = paths.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    pub fn max_active(self, n: u64) -> Self {
        self.line(&format!("max_active = {n}"))
    }

    /// `admission`, an inline table (e.g. [`HOURLY`]).
    pub fn admission(self, table: &str) -> Self {
        self.line(&format!("admission = {table}"))
    }

    /// `admission = { mode = "continuous", max_per_minute = n }`.
    pub fn continuous(self, max_per_minute: u64) -> Self {
        self.admission(&format!(
            "{{ mode = \"continuous\", max_per_minute = {max_per_minute} }}"
        ))
    }

    pub fn token_ttl(self, ttl: &str) -> Self {
        self.line(&format!("token_ttl = \"{ttl}\""))
    }

    /// No bot challenge: these tests are not about bots.
    pub fn challenge_off(self) -> Self {
        self.line("bots = { challenge = \"off\" }")
    }

    /// Any other key of the event, as TOML lines.
    pub fn line(mut self, line: &str) -> Self {
        self.lines.push(line.to_owned());
        self
    }

    fn write(&self, s: &mut String) {
        let paths = self
            .paths
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            s,
            "[[events]]\nid = \"{}\"\norigin = \"{}\"\npaths = [{paths}]",
            self.id, self.origin
        )
        .unwrap();
        for l in &self.lines {
            writeln!(s, "{l}").unwrap();
        }
    }
}
