//! Configuration: the outside (file < env < CLI, serde, in [`raw`]) and the
//! inside (validated, typed, in this file), so the rest of the server never
//! sees an unchecked value.
//!
//! Precedence: the TOML file, then `ANTEROOM_*` environment variables (`__`
//! separates nesting levels: `ANTEROOM_SERVER__LISTEN`; `ANTEROOM_SECRET` and
//! `ANTEROOM_ADMIN_TOKEN` are shorthands for the two secrets), then the
//! command line. Any invalid value fails at start with a message naming it.

pub mod bots;
pub mod drain;
pub mod env;
pub mod hosts;
mod parse;
pub mod raw;
pub mod stored;
pub mod tls;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anteroom_store::EventId;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};

pub use raw::{RawConfig, RawEvent};
pub(crate) use validate::path_key;
pub use validate::{event_beside, event_from_raw, event_set, unused_keys};

/// Largest total size of a request's headers the gate accepts (API.md: 431 above).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// How long past the longest a pass issued before a revocation could be
/// honoured a node keeps the revocation (`passes::revocation_keep`).
pub const REVOCATION_MARGIN: Duration = Duration::from_secs(30);

/// The longest `pass_ttl` (a longer one is used as this). A released
/// session's pass is refused by its
/// revocation, which the store keeps for
/// [`anteroom_store::REVOCATION_RETENTION_US`] (a node that starts later
/// reads back no more), less [`REVOCATION_MARGIN`]: a pass living longer
/// would work again once its revocation was gone.
pub const PASS_TTL_MAX: Duration =
    Duration::from_micros(anteroom_store::REVOCATION_RETENTION_US as u64)
        .saturating_sub(REVOCATION_MARGIN);
/// Most header fields a request may have: what hyper's HTTP/1 parser holds
/// (a head with more gets its bare `431`). HTTP/2 has no such count, only
/// a size, so the gate counts there too.
pub const MAX_HEADER_FIELDS: usize = 100;

/// A configuration value that failed validation; the message names the key
/// (and, for a key inside `[[events]]`, the event's id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}{}: {message}", event_note(.event.as_deref()))]
pub struct ConfigError {
    pub key: String,
    pub message: String,
    /// The id of the `[[events]]` entry the key belongs to, when it has one.
    pub event: Option<String>,
}

fn event_note(event: Option<&str>) -> String {
    event.map_or_else(String::new, |id| format!(" (event {id:?})"))
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
            event: None,
        }
    }

    /// The same error, saying which event it is about.
    pub(crate) fn in_event(mut self, id: Option<&str>) -> Self {
        self.event = id.filter(|id| !id.is_empty()).map(str::to_owned);
        self
    }
}

/// Why loading failed: unreadable or malformed input, or an invalid value.
/// Each says what is wrong once, with the key (`events[0].max_active`), the
/// event's id and where the value came from (file or variable).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("configuration could not be read: {0}")]
    Parse(String),
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    /// Token secrets, newest first (each at least 32 bytes).
    pub secrets: Vec<String>,
    pub limits: Limits,
    /// `[bots]`, for [`crate::bots::BotDefence::new`].
    pub bots: crate::bots::BotsConfig,
    pub events: Vec<EventConfig>,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// Every admin token: `server.admin_token` (named `admin`) and
    /// `[[server.admin_tokens]]`; never empty.
    pub admin_tokens: Vec<AdminToken>,
    /// `server.admin_hosts`: the names a plain-HTTP admin listener answers
    /// to besides addresses and `localhost` (DNS rebinding).
    pub admin_hosts: crate::config::hosts::AdminHosts,
    pub insecure_cookies: bool,
    /// `[server.cookies]` with `insecure_cookies`: names, flags, `SameSite`.
    pub cookies: crate::identity::CookieSettings,
    pub default_origin: Option<http::Uri>,
    pub log_format: LogFormat,
    pub header_read_timeout: Duration,
    /// Connection limits besides the header timeout (`server.body_read_timeout`,
    /// `server.max_connections`, `server.http2_*`).
    pub connections: ConnectionSettings,
    pub max_body_bytes: usize,
    /// `server.shutdown_grace`: how long a graceful stop waits for requests
    /// in flight (then the process stops anyway).
    pub shutdown_grace: Duration,
    /// `server.access_log`: one log line per public request.
    pub access_log: bool,
    /// `server.max_streams`: open push streams this node holds at once;
    /// past it a stream is refused (`503` + `Retry-After`) and the page polls.
    pub max_streams: usize,
    /// `server.max_streams_per_address`: open push streams one client
    /// address (an IPv6 client by its /64) holds on this node, so that a
    /// few addresses cannot take every stream.
    pub max_streams_per_address: usize,
    /// Drain mode: `server.gateway_nodes`, `server.drain_after` (with `store.timeout`)
    /// and the test-only `server.test_clock_offset_ms`.
    pub drain: crate::config::drain::DrainSettings,
    /// `server.drain_journal`: this node's own directory for the admissions
    /// it makes while draining (default: `drain-journal` in the embedded
    /// store's directory, `./anteroom-drain` with Redis).
    pub drain_journal: std::path::PathBuf,
    /// `limits.trusted_proxies` in the file: peers whose `X-Forwarded-For`
    /// is believed. Kept with the server settings because every handler
    /// that needs a client address (enter, position, page, gate) has these
    /// at hand.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// `[server.tls]`: HTTPS on the public listener; `None` = plain HTTP.
    pub tls: Option<crate::config::tls::TlsConfig>,
}

/// How long client connections may stay silent or idle, and how many a
/// listener holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionSettings {
    pub body_read_timeout: Duration,
    pub send_timeout: Duration,
    pub max_connections: u64,
    /// Event loops of the public listener (`server.event_loops`).
    pub event_loops: usize,
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
    pub http2_idle_timeout: Duration,
}

/// What an admin token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminRole {
    /// Every admin call.
    Admin,
    /// `GET` only (dashboards); any write is `403`.
    Read,
}

/// One admin token with its name; the value never appears in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub name: String,
    pub role: AdminRole,
    pub token: String,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    Embedded {
        path: PathBuf,
        /// The longest a call waits for an event's disk (`store.timeout`).
        timeout: Duration,
    },
    Redis {
        urls: Vec<String>,
        cluster: bool,
        timeout: Duration,
    },
}

/// Per-client rate limits on enter and position (`[limits]`).
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// 0 disables the limit.
    pub per_ip_per_second: u32,
    pub per_session_per_second: u32,
    /// New queue entries per address per event per `entries_window` before
    /// joining costs proof-of-work; 0 disables the cap.
    pub entries_per_ip: u32,
    pub entries_window: Duration,
}

/// One event, validated.
#[derive(Clone, Debug)]
pub struct EventConfig {
    pub id: EventId,
    pub origin: http::Uri,
    /// Protected path prefixes, as written (the route table normalises them).
    pub paths: Vec<String>,
    /// Opening time in ms since the Unix epoch; `None` = open now.
    pub opens_at_ms: Option<i64>,
    pub pre_window: Duration,
    pub max_active: u64,
    /// Absolute lifetime of an active session, counted from its redeem
    /// (not renewed by activity; idling is `session_idle_timeout`).
    pub session_ttl: Duration,
    /// An active session ends after this long without a request through the
    /// gate: each pass renewal moves its end to
    /// `min(now + session_idle_timeout, start + session_ttl)`.
    pub session_idle_timeout: Duration,
    pub token_ttl: Duration,
    /// At most [`PASS_TTL_MAX`].
    pub pass_ttl: Duration,
    pub queue_idle_timeout: Duration,
    pub identity: Identity,
    pub admission: Admission,
    pub bots: Bots,
    /// The outside form, kept for `GET /admin/events/E` and the store.
    pub raw: RawEvent,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    Cookie,
    Jwt(JwtConfig),
}

/// The JWT identity settings are the identity module's own type.
pub use crate::identity::jwt::JwtConfig;

/// How the scheduler releases visitors (the policy's parameters).
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    Batch {
        size: u64,
        interval: Duration,
    },
    Continuous {
        max_per_minute: u64,
    },
    Capacity {
        health_url: http::Uri,
        field: String,
        target: u64,
    },
    Adaptive {
        target_p95: Duration,
        max_error_rate: f64,
    },
}

impl Admission {
    /// Time between two scheduler ticks.
    pub fn tick(&self) -> Duration {
        match self {
            Admission::Batch { interval, .. } => *interval,
            _ => Duration::from_secs(1),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeLevel {
    Off,
    High,
    Medium,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HighRisk {
    BackOfQueue,
    Captcha,
    Reject,
    Allow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bots {
    pub challenge: ChallengeLevel,
    pub difficulty: u8,
    pub high_risk: HighRisk,
    pub adaptive_difficulty: bool,
}

/// Command-line values that override file and environment.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
}

impl Config {
    /// Loads file < env < CLI and validates.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, LoadError> {
        let mut figment = Figment::new();
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only variables that name a key of the file are read: see `env`.
        figment = figment.merge(Env::prefixed(env::PREFIX).split("__").filter(|k| {
            let key = k.as_str().to_ascii_lowercase().replace("__", ".");
            !env::SHORTHANDS.contains(&key.as_str()) && env::recognised(&key)
        }));
        if let Ok(secret) = std::env::var("ANTEROOM_SECRET") {
            figment = figment.merge(Serialized::default("keys.secrets", vec![secret]));
        }
        if let Ok(token) = std::env::var("ANTEROOM_ADMIN_TOKEN") {
            figment = figment.merge(Serialized::default("server.admin_token", token));
        }
        if let Some(listen) = &overrides.listen {
            figment = figment.merge(Serialized::default("server.listen", listen));
        }
        if let Some(listen) = &overrides.admin_listen {
            figment = figment.merge(Serialized::default("server.admin_listen", listen));
        }
        let raw: RawConfig = figment
            .extract()
            .map_err(|e| LoadError::Parse(parse::describe(e, &figment)))?;
        Ok(validate::config(&raw)?)
    }

    /// Parses and validates a TOML document (tests, `demo`).
    pub fn from_toml(text: &str) -> Result<Self, LoadError> {
        let figment = Figment::from(Toml::string(text));
        let raw: RawConfig = figment
            .extract()
            .map_err(|e| LoadError::Parse(parse::describe(e, &figment)))?;
        Ok(validate::config(&raw)?)
    }

    /// Validates an already assembled outside form.
    pub fn from_raw(raw: &RawConfig) -> Result<Self, ConfigError> {
        validate::config(raw)
    }
}

/// A file's bytes, only if it is a regular file of at most `limit` bytes.
/// Paths of key and certificate files come from operators and, for JWT
/// keys, through the admin API, and they are read on the event loop: a
/// FIFO there would block `open` until something writes to it (every
/// connection of the node waits with it, and a stop signal too), and
/// `/dev/zero` would be read until memory ran out. So the file is opened
/// without blocking, must be a regular file (checked on the opened file,
/// so it cannot be swapped in between) and is read up to `limit`.
pub fn read_regular_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("larger than {} KiB", limit / 1024),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
