//! The outside of the configuration: exactly the shape of the TOML file (and
//! of `PUT /admin/events/E` bodies), before anything is checked.
//!
//! Durations, addresses and URLs stay strings here so that validation can name
//! the key of a bad value (`events[0].token_ttl: ...`) instead of a serde path.

use serde::{Deserialize, Serialize};

/// The whole file: `[server]`, `[store]`, `[keys]`, `[limits]`, `[bots]`,
/// `[[events]]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    pub store: RawStore,
    pub keys: RawKeys,
    pub limits: RawLimits,
    /// Server-wide bot defence: reputation files, TLS fingerprint header,
    /// CAPTCHA hook, risk rules. Typed already (the bot defence owns its
    /// shape); the files are checked when the server starts.
    pub bots: crate::bots::BotsConfig,
    pub events: Vec<RawEvent>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    /// The single admin token, known as the token named `admin`.
    pub admin_token: Option<String>,
    /// `[[server.admin_tokens]]`: named tokens, each `admin` or `read`.
    pub admin_tokens: Option<Vec<RawAdminToken>>,
    /// Names a plain-HTTP admin listener answers to besides addresses and
    /// `localhost` (`"*"`: any).
    pub admin_hosts: Option<Vec<String>>,
    pub insecure_cookies: Option<bool>,
    /// `[server.cookies]`: `SameSite` per cookie and the upgrade reading.
    pub cookies: RawCookies,
    pub default_origin: Option<String>,
    /// `"text"` (default) or `"json"`.
    pub log_format: Option<String>,
    /// A client must send its whole request head within this time.
    pub header_read_timeout: Option<String>,
    /// The longest wait for the next piece of a request body.
    pub body_read_timeout: Option<String>,
    /// The longest a write waits for the client to take a byte.
    pub send_timeout: Option<String>,
    /// Open client connections per listener (capped by RLIMIT_NOFILE).
    pub max_connections: Option<u64>,
    /// Threads with their own event loop serving the public listener's
    /// connections; 0 serves them on the shared runtime.
    pub event_loops: Option<u64>,
    /// HTTP/2 PING interval and how long the answer may take.
    pub http2_keep_alive_interval: Option<String>,
    pub http2_keep_alive_timeout: Option<String>,
    /// A connection with no request in flight this long is closed.
    pub http2_idle_timeout: Option<String>,
    /// Largest JSON body the queue API reads, in bytes.
    pub max_body_bytes: Option<u64>,
    /// On SIGTERM / SIGINT, how long requests in flight may take to finish
    /// before the process stops anyway.
    pub shutdown_grace: Option<String>,
    /// One log line per public request (method, path without query, status, time).
    pub access_log: Option<bool>,
    /// Open push streams (`GET /api/queue/stream`) per node; `0` turns them off.
    pub max_streams: Option<u64>,
    /// Open push streams per client address (an IPv6 client by its /64) on a node.
    pub max_streams_per_address: Option<u64>,
    /// Drain mode: gateway nodes sharing the store; each drains within 1/n of the capacity left.
    pub gateway_nodes: Option<u64>,
    /// Drain mode: how long a store that times out must keep failing before its events drain.
    pub drain_after: Option<String>,
    /// Directory of this node's drain journal (admissions made while draining).
    pub drain_journal: Option<String>,
    /// TEST/DIAGNOSTIC ONLY: shifts this node's wall clock (clock-skew tests).
    pub test_clock_offset_ms: Option<i64>,
    /// `[server.tls]`; typed already (TLS owns its shape).
    pub tls: Option<crate::config::tls::RawTls>,
}

/// `[server.cookies]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawCookies {
    /// `"strict"`, `"lax"` (default) or `"none"`.
    pub session_same_site: Option<String>,
    /// `"strict"`, `"lax"` or `"none"` (default with `Secure` cookies).
    pub pass_same_site: Option<String>,
    /// Also read the unprefixed cookie names of older versions (default false).
    pub read_unprefixed: Option<bool>,
}

/// One `[[server.admin_tokens]]` table.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAdminToken {
    /// Who the token is in the audit trail and the logs.
    pub name: Option<String>,
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// Name of an environment variable holding the token.
    pub token_env: Option<String>,
    /// `"admin"` (default: everything) or `"read"` (GET only).
    pub role: Option<String>,
}

impl std::fmt::Debug for RawAdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAdminToken")
            .field("name", &self.name)
            .field("token_env", &self.token_env)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawStore {
    pub kind: Option<String>,
    pub path: Option<String>,
    pub urls: Option<Vec<String>>,
    pub cluster: Option<bool>,
    pub timeout: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawKeys {
    pub secrets: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLimits {
    pub per_ip_per_second: Option<u32>,
    pub per_session_per_second: Option<u32>,
    /// New queue entries per address per event and window before joining
    /// costs proof-of-work; 0 disables the cap.
    pub entries_per_ip: Option<u32>,
    /// The window of `entries_per_ip`, e.g. `"10m"`.
    pub entries_window: Option<String>,
    pub trusted_proxies: Option<Vec<String>>,
}

/// One `[[events]]` table, also the body of `PUT /admin/events/E`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawEvent {
    pub id: Option<String>,
    pub origin: Option<String>,
    pub paths: Option<Vec<String>>,
    pub opens_at: Option<String>,
    pub pre_window: Option<String>,
    pub max_active: Option<u64>,
    pub session_ttl: Option<String>,
    /// An active session with no request through the gate for this long ends
    /// (so an abandoned slot frees itself); `session_ttl` stays its absolute lifetime.
    pub session_idle_timeout: Option<String>,
    pub token_ttl: Option<String>,
    pub pass_ttl: Option<String>,
    pub queue_idle_timeout: Option<String>,
    pub identity: Option<String>,
    pub jwt: Option<RawJwt>,
    pub admission: Option<RawAdmission>,
    pub bots: Option<RawBots>,
}

impl RawEvent {
    /// The table with its secrets replaced by `"[redacted]"`: what the admin
    /// API shows and the audit trail records.
    pub fn redacted(&self) -> RawEvent {
        let mut out = self.clone();
        if let Some(j) = &mut out.jwt
            && j.secret.is_some()
        {
            j.secret = Some("[redacted]".to_owned());
        }
        out
    }
}

/// `[events.jwt]`: how a `Bearer` JWT is checked when `identity = "jwt"`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawJwt {
    /// `"HS256"`, `"RS256"` or `"EdDSA"`: pinned, nothing else is accepted.
    pub algorithm: Option<String>,
    /// HS256 shared secret, inline (the config file only: the admin API
    /// refuses it, so the store never holds a secret).
    pub secret: Option<String>,
    /// HS256: a file holding the shared secret (surrounding whitespace trimmed).
    pub secret_file: Option<String>,
    /// HS256: an environment variable holding the shared secret.
    pub secret_env: Option<String>,
    /// RS256 / EdDSA public key, PEM.
    pub public_key_pem: Option<String>,
    /// RS256 / EdDSA: a file holding the public key PEM.
    pub public_key_file: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

/// `admission = { mode = "...", ... }`; which keys apply depends on `mode`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawAdmission {
    pub mode: Option<String>,
    pub batch_size: Option<u64>,
    pub interval: Option<String>,
    pub max_per_minute: Option<u64>,
    pub health_url: Option<String>,
    pub field: Option<String>,
    pub target: Option<u64>,
    pub target_p95: Option<String>,
    pub max_error_rate: Option<f64>,
}

/// `bots = { challenge = "medium", difficulty = 18, high_risk = "back_of_queue" }`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawBots {
    pub challenge: Option<String>,
    pub difficulty: Option<u8>,
    pub high_risk: Option<String>,
    /// Raise the difficulty with the share of risky arrivals in the last minute.
    pub adaptive_difficulty: Option<bool>,
}
