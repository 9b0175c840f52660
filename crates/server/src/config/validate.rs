//! From the outside to the inside: every check, each error naming its key.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use anteroom_store::EventId;

use super::raw::{RawAdmission, RawBots, RawConfig, RawEvent, RawJwt};
use super::{
    AdminRole, AdminToken, Admission, Bots, ChallengeLevel, Config, ConfigError, EventConfig,
    HighRisk, Identity, JwtConfig, Limits, LogFormat, ServerConfig, StoreConfig,
};

type Result<T> = std::result::Result<T, ConfigError>;

pub(super) fn config(raw: &RawConfig) -> Result<Config> {
    let mut server = server(raw)?;
    let store = store(raw)?;
    // The drain probe is bounded by the store's own timeout (so a dead store drains instead of hanging requests).
    match &store {
        StoreConfig::Redis { timeout, .. } | StoreConfig::Embedded { timeout, .. } => {
            server.drain.store_timeout = *timeout;
        }
    }
    server.drain_journal = drain_journal(raw.server.drain_journal.as_deref(), &store)?;
    let secrets = secrets(raw)?;
    let limits = limits(raw)?;
    server.trusted_proxies = trusted_proxies(raw)?;
    let data_dir = match &store {
        StoreConfig::Embedded { path, .. } => Some(path.as_path()),
        StoreConfig::Redis { .. } => None,
    };
    server.tls = raw
        .server
        .tls
        .as_ref()
        .map(|t| crate::config::tls::validate(t, server.insecure_cookies, data_dir))
        .transpose()?;
    let keyed: Vec<(String, &RawEvent)> = raw
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("events[{i}]"), e))
        .collect();
    let events = event_set(&keyed)?;
    Ok(Config {
        server,
        store,
        secrets,
        limits,
        bots: server_bots(&raw.bots)?,
        events,
    })
}

/// `[bots]`, its times held to the rules of every other time of the file:
/// a challenge that expires as it is issued (`challenge_ttl = "0s"`) shut
/// out every visitor it was asked of, and a CAPTCHA timeout of 0 failed
/// every CAPTCHA.
fn server_bots(raw: &crate::bots::config::BotsConfig) -> Result<crate::bots::config::BotsConfig> {
    let time = |key: &str, d: Duration| at_least_a_millisecond(key, at_most_a_year(key, d)?);
    time("bots.challenge_ttl", raw.challenge_ttl)?;
    if let Some(c) = &raw.captcha {
        time("bots.captcha.timeout", c.timeout)?;
    }
    Ok(raw.clone())
}

/// Validates a whole set of events, each under its own key (`events[0]` in
/// the file, `event` for the admin API's change): every event on its own,
/// then the rules across events (unique ids, a path prefix owned by one
/// event only). The config file and `PUT`/`PATCH /admin/events/E` both go
/// through here, so the API accepts exactly what the file would.
pub fn event_set(events: &[(String, &RawEvent)]) -> Result<Vec<EventConfig>> {
    let mut out: Vec<EventConfig> = Vec::with_capacity(events.len());
    let mut ids = HashSet::new();
    let mut prefixes: HashMap<String, EventId> = HashMap::new();
    for (key, e) in events {
        let event = event_named(key, e)?;
        unused_keys(key, e, |_| true).map_err(|err| err.in_event(Some(event.id.as_str())))?;
        if !ids.insert(event.id.clone()) {
            return Err(duplicate_id(key, &event.id));
        }
        claim_paths(key, &event, &mut prefixes)?;
        out.push(event);
    }
    Ok(out)
}

/// Refuses a key of `raw` that its own choices leave unused, among those
/// `written` says were written now (the config file: all of them; an
/// admin `PUT`: all of them; a `PATCH`: the ones it names, as `admission`
/// fields merge with the table's): such a key does nothing, so it is a
/// mistake, and a silent one (`admission = { max_per_minute = 600 }`
/// without a mode ran as batch admission, 50 every 5 s). A table stored by
/// an earlier version is not held to it: it runs as it ran. Keys are
/// named from the table, `admission.batch_size` or `jwt`.
pub fn unused_keys(key: &str, raw: &RawEvent, written: impl Fn(&str) -> bool) -> Result<()> {
    if let Some(a) = &raw.admission {
        let mode = a.mode.as_deref().unwrap_or("batch");
        let set = [
            ("batch_size", a.batch_size.is_some(), "batch"),
            ("interval", a.interval.is_some(), "batch"),
            ("max_per_minute", a.max_per_minute.is_some(), "continuous"),
            ("health_url", a.health_url.is_some(), "capacity"),
            ("field", a.field.is_some(), "capacity"),
            ("target", a.target.is_some(), "capacity"),
            ("target_p95", a.target_p95.is_some(), "adaptive"),
            ("max_error_rate", a.max_error_rate.is_some(), "adaptive"),
        ];
        let unused = set
            .iter()
            .find(|(field, set, of)| *set && *of != mode && written(&format!("admission.{field}")));
        if let Some((field, _, of)) = unused {
            return Err(ConfigError::new(
                format!("{key}.admission.{field}"),
                format!("is a key of mode {of:?}, not used by mode {mode:?}"),
            ));
        }
    }
    if raw.jwt.is_some() && raw.identity.as_deref().unwrap_or("cookie") != "jwt" && written("jwt") {
        return Err(ConfigError::new(
            format!("{key}.jwt"),
            "is used only with identity = \"jwt\"",
        ));
    }
    Ok(())
}

/// One event checked in full beside others given by what they hold, their
/// ids and path prefixes: the same rules across events as [`event_set`],
/// without checking the others again. The admin API's change is checked
/// this way against the events a node runs: checking them again would read
/// their key files anew, and one removed since start would refuse every
/// change of every other event.
pub fn event_beside<'a>(
    key: &str,
    raw: &RawEvent,
    others: impl IntoIterator<Item = (&'a EventId, &'a [String])>,
) -> Result<EventConfig> {
    let event = event_named(key, raw)?;
    let mut prefixes: HashMap<String, EventId> = HashMap::new();
    for (id, paths) in others {
        if *id == event.id {
            return Err(duplicate_id(key, id));
        }
        // The others were checked when they were taken up: a prefix that
        // no longer passes (none should) holds nothing.
        for p in paths {
            if let Ok(canonical) = path_key(p) {
                prefixes.insert(canonical, id.clone());
            }
        }
    }
    claim_paths(key, &event, &mut prefixes)?;
    Ok(event)
}

fn duplicate_id(key: &str, id: &EventId) -> ConfigError {
    ConfigError::new(
        format!("{key}.id"),
        format!("duplicate event id {:?}", id.as_str()),
    )
}

/// [`event_from_raw`], its errors naming the event too, unless its id is
/// what is wrong.
fn event_named(key: &str, e: &RawEvent) -> Result<EventConfig> {
    let named = e.id.as_deref().filter(|id| EventId::new(id).is_ok());
    event_from_raw(key, e).map_err(|err| err.in_event(named))
}

/// Takes `event`'s path prefixes into `prefixes`, refusing one another
/// event holds already.
fn claim_paths(
    key: &str,
    event: &EventConfig,
    prefixes: &mut HashMap<String, EventId>,
) -> Result<()> {
    for (j, p) in event.paths.iter().enumerate() {
        let canonical = path_key(p)
            .map_err(|e| ConfigError::new(format!("{key}.paths[{j}]"), e.to_string()))?;
        if let Some(owner) = prefixes.get(&canonical) {
            return Err(ConfigError::new(
                format!("{key}.paths[{j}]"),
                format!(
                    "{p:?} is already protected by another event ({:?})",
                    owner.as_str()
                ),
            ));
        }
        prefixes.insert(canonical, event.id.clone());
    }
    Ok(())
}

/// A path prefix as the gate matches it: two prefixes with one key are one
/// path to the gate (`/Tickets/`, `/tickets.` and `/tickets;x` are
/// `/tickets` there), so no two events may hold them.
pub(crate) fn path_key(prefix: &str) -> std::result::Result<String, impl std::fmt::Display> {
    crate::routes::check_prefix(prefix).map(|p| crate::routes::prefix_name(&p))
}

/// An admin token as a client can send it: `Authorization: Bearer <token>`
/// carries visible ASCII, spaces and tabs, and the server trims what
/// follows `Bearer`. The whitespace around a token (the newline a secret
/// file or variable often ends with) is taken off; a token with any other
/// byte could never be sent, so every call would be refused (and the
/// address locked out): refused at start instead, naming the key.
fn bearer_text(key: &str, token: &str) -> Result<String> {
    let token = token.trim();
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
    {
        return Err(ConfigError::new(
            key,
            "must be visible ASCII (it is sent in an Authorization header)",
        ));
    }
    Ok(token.to_owned())
}

fn admin_tokens(s: &super::raw::RawServer) -> Result<Vec<AdminToken>> {
    let mut tokens = Vec::new();
    if let Some(t) = &s.admin_token {
        let t = bearer_text("server.admin_token", t)?;
        if t.len() < 8 {
            return Err(ConfigError::new(
                "server.admin_token",
                "must be set (at least 8 characters; ANTEROOM_ADMIN_TOKEN)",
            ));
        }
        tokens.push(AdminToken {
            name: "admin".to_owned(),
            role: AdminRole::Admin,
            token: t,
        });
    }
    for (i, t) in s.admin_tokens.iter().flatten().enumerate() {
        let k = |field: &str| format!("server.admin_tokens[{i}].{field}");
        let name = t.name.clone().unwrap_or_default();
        let name_ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b));
        if !name_ok {
            return Err(ConfigError::new(
                k("name"),
                "must match ^[A-Za-z0-9_.@-]{1,64}$",
            ));
        }
        let token = match (&t.token, &t.token_env) {
            (Some(v), None) => v.clone(),
            (None, Some(var)) => std::env::var(var).map_err(|_| {
                ConfigError::new(
                    k("token_env"),
                    format!("environment variable {var:?} is not set"),
                )
            })?,
            _ => {
                return Err(ConfigError::new(
                    k("token"),
                    "set exactly one of token and token_env",
                ));
            }
        };
        let token = bearer_text(&k("token"), &token)?;
        if token.len() < 16 {
            return Err(ConfigError::new(
                k("token"),
                "must be at least 16 characters",
            ));
        }
        let role = match t.role.as_deref().unwrap_or("admin") {
            "admin" => AdminRole::Admin,
            "read" => AdminRole::Read,
            other => {
                return Err(ConfigError::new(
                    k("role"),
                    format!("{other:?} is not \"admin\" or \"read\""),
                ));
            }
        };
        if tokens.iter().any(|o: &AdminToken| o.name == name) {
            return Err(ConfigError::new(
                k("name"),
                format!("{name:?} is already the name of another admin token"),
            ));
        }
        if tokens.iter().any(|o| o.token == token) {
            return Err(ConfigError::new(
                k("token"),
                "is the same as another admin token",
            ));
        }
        tokens.push(AdminToken { name, role, token });
    }
    if tokens.is_empty() {
        return Err(ConfigError::new(
            "server.admin_token",
            "must be set (at least 8 characters; ANTEROOM_ADMIN_TOKEN), or [[server.admin_tokens]] given",
        ));
    }
    Ok(tokens)
}

fn server(raw: &RawConfig) -> Result<ServerConfig> {
    let s = &raw.server;
    let admin_tokens = admin_tokens(s)?;
    let log_format = match s.log_format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(ConfigError::new(
                "server.log_format",
                format!("{other:?} is not \"text\" or \"json\""),
            ));
        }
    };
    let default_origin = s
        .default_origin
        .as_deref()
        .map(|o| origin("server.default_origin", o))
        .transpose()?;
    let max_body_bytes = s.max_body_bytes.unwrap_or(16 * 1024);
    if !(64..=1024 * 1024).contains(&max_body_bytes) {
        return Err(ConfigError::new(
            "server.max_body_bytes",
            "must be between 64 and 1048576",
        ));
    }
    let max_streams = s.max_streams.unwrap_or(20_000);
    if max_streams > 10_000_000 {
        return Err(ConfigError::new(
            "server.max_streams",
            "must be between 0 and 10000000",
        ));
    }
    let per_address = s.max_streams_per_address.unwrap_or(100);
    if !(1..=10_000_000).contains(&per_address) {
        return Err(ConfigError::new(
            "server.max_streams_per_address",
            "must be between 1 and 10000000",
        ));
    }
    Ok(ServerConfig {
        listen: addr(
            "server.listen",
            s.listen.as_deref().unwrap_or("127.0.0.1:8080"),
        )?,
        admin_listen: addr(
            "server.admin_listen",
            s.admin_listen.as_deref().unwrap_or("127.0.0.1:9090"),
        )?,
        admin_tokens,
        admin_hosts: crate::config::hosts::AdminHosts::new(s.admin_hosts.as_deref())
            .map_err(|(i, e)| ConfigError::new(format!("server.admin_hosts[{i}]"), e))?,
        insecure_cookies: s.insecure_cookies.unwrap_or(false),
        cookies: cookie_settings(s)?,
        default_origin,
        log_format,
        header_read_timeout: positive(
            "server.header_read_timeout",
            s.header_read_timeout.as_deref(),
            "10s",
        )?,
        connections: connection_settings(s)?,
        max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(16 * 1024),
        shutdown_grace: duration("server.shutdown_grace", s.shutdown_grace.as_deref(), "10s")?,
        access_log: s.access_log.unwrap_or(false),
        max_streams: usize::try_from(max_streams).unwrap_or(usize::MAX),
        max_streams_per_address: usize::try_from(per_address).unwrap_or(usize::MAX),
        drain: drain_settings(s)?,
        drain_journal: PathBuf::new(),
        trusted_proxies: Vec::new(),
        tls: None,
    })
}

/// `[server.cookies]`: see [`crate::identity::cookies`] for the defaults.
fn cookie_settings(s: &super::raw::RawServer) -> Result<crate::identity::CookieSettings> {
    use crate::identity::{CookieSettings, SameSite};
    let mut c = if s.insecure_cookies.unwrap_or(false) {
        CookieSettings::insecure()
    } else {
        CookieSettings::secure()
    };
    let parse = |key: &str, v: &str| {
        SameSite::parse(v)
            .ok_or_else(|| ConfigError::new(key, "must be \"strict\", \"lax\" or \"none\""))
    };
    if let Some(v) = s.cookies.session_same_site.as_deref() {
        c.session_same_site = parse("server.cookies.session_same_site", v)?;
    }
    if c.session_same_site == SameSite::None {
        // The session cookie names the queue place; sent with other sites'
        // form posts it would let any page join or release its visitors.
        return Err(ConfigError::new(
            "server.cookies.session_same_site",
            "\"none\" would let any site make queue calls as the visitor; use \"lax\" or \"strict\"",
        ));
    }
    if let Some(v) = s.cookies.pass_same_site.as_deref() {
        c.pass_same_site = parse("server.cookies.pass_same_site", v)?;
        if c.pass_same_site == SameSite::None && !c.secure {
            return Err(ConfigError::new(
                "server.cookies.pass_same_site",
                "\"none\" needs Secure cookies, which server.insecure_cookies = true turns off (browsers drop SameSite=None without Secure); use \"lax\"",
            ));
        }
    }
    if let Some(v) = s.cookies.read_unprefixed {
        c.read_unprefixed = v;
    }
    Ok(c)
}

/// Body timeout, connection cap and HTTP/2 keep-alive and idle timeouts.
fn connection_settings(s: &super::raw::RawServer) -> Result<crate::config::ConnectionSettings> {
    let max_connections = s.max_connections.unwrap_or(50_000);
    if !(16..=10_000_000).contains(&max_connections) {
        return Err(ConfigError::new(
            "server.max_connections",
            "must be between 16 and 10000000",
        ));
    }
    // One loop per core by default: each owns its connections (see
    // serve::workers); more loops than cores only add context switches.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let event_loops = match s.event_loops {
        None => cores,
        Some(n) if n <= 1024 => usize::try_from(n).unwrap_or(cores),
        Some(_) => {
            return Err(ConfigError::new(
                "server.event_loops",
                "must be between 0 (the shared runtime) and 1024",
            ));
        }
    };
    Ok(crate::config::ConnectionSettings {
        event_loops,
        body_read_timeout: positive(
            "server.body_read_timeout",
            s.body_read_timeout.as_deref(),
            "30s",
        )?,
        send_timeout: positive("server.send_timeout", s.send_timeout.as_deref(), "30s")?,
        max_connections,
        http2_keep_alive_interval: positive(
            "server.http2_keep_alive_interval",
            s.http2_keep_alive_interval.as_deref(),
            "20s",
        )?,
        http2_keep_alive_timeout: positive(
            "server.http2_keep_alive_timeout",
            s.http2_keep_alive_timeout.as_deref(),
            "10s",
        )?,
        http2_idle_timeout: positive(
            "server.http2_idle_timeout",
            s.http2_idle_timeout.as_deref(),
            "60s",
        )?,
    })
}

/// Drain mode: drain share, drain window and the test-only clock offset.
fn drain_settings(s: &super::raw::RawServer) -> Result<crate::config::drain::DrainSettings> {
    let gateway_nodes = s.gateway_nodes.unwrap_or(1);
    if !(1..=10_000).contains(&gateway_nodes) {
        return Err(ConfigError::new(
            "server.gateway_nodes",
            "must be between 1 and 10000",
        ));
    }
    let test_clock_offset_ms = s.test_clock_offset_ms.unwrap_or(0);
    if test_clock_offset_ms.abs() > 3_600_000 {
        return Err(ConfigError::new(
            "server.test_clock_offset_ms",
            "test-only; must be within one hour",
        ));
    }
    // At least two probes (100 ms apart) fit in the window; beyond a minute
    // an outage would go unnoticed for too long.
    let drain_after = positive("server.drain_after", s.drain_after.as_deref(), "1s")?;
    if !(Duration::from_millis(200)..=Duration::from_secs(60)).contains(&drain_after) {
        return Err(ConfigError::new(
            "server.drain_after",
            "must be between 200ms and 60s",
        ));
    }
    Ok(crate::config::drain::DrainSettings {
        gateway_nodes,
        drain_after,
        test_clock_offset_ms,
        ..Default::default()
    })
}

/// `server.drain_journal`: next to the embedded store's data by default (the
/// node's own disk), a directory of its own with Redis.
fn drain_journal(raw: Option<&str>, store: &StoreConfig) -> Result<PathBuf> {
    match raw {
        Some("") => Err(ConfigError::new(
            "server.drain_journal",
            "must be a directory path",
        )),
        Some(p) => Ok(PathBuf::from(p)),
        None => Ok(match store {
            StoreConfig::Embedded { path, .. } => path.join("drain-journal"),
            StoreConfig::Redis { .. } => PathBuf::from("./anteroom-drain"),
        }),
    }
}

fn store(raw: &RawConfig) -> Result<StoreConfig> {
    let s = &raw.store;
    match s.kind.as_deref().unwrap_or("embedded") {
        "embedded" => Ok(StoreConfig::Embedded {
            path: PathBuf::from(s.path.as_deref().unwrap_or("./anteroom-data")),
            timeout: positive("store.timeout", s.timeout.as_deref(), "1s")?,
        }),
        "redis" => {
            let urls = s.urls.clone().unwrap_or_default();
            if urls.is_empty() {
                return Err(ConfigError::new(
                    "store.urls",
                    "must list at least one redis:// URL",
                ));
            }
            for (i, u) in urls.iter().enumerate() {
                if !(u.starts_with("redis://") || u.starts_with("rediss://")) {
                    return Err(ConfigError::new(
                        format!("store.urls[{i}]"),
                        "must start with redis:// or rediss://",
                    ));
                }
            }
            Ok(StoreConfig::Redis {
                urls,
                cluster: s.cluster.unwrap_or(false),
                timeout: positive("store.timeout", s.timeout.as_deref(), "1s")?,
            })
        }
        other => Err(ConfigError::new(
            "store.kind",
            format!("{other:?} is not \"embedded\" or \"redis\""),
        )),
    }
}

fn secrets(raw: &RawConfig) -> Result<Vec<String>> {
    let secrets = raw.keys.secrets.clone().unwrap_or_default();
    if secrets.is_empty() {
        return Err(ConfigError::new(
            "keys.secrets",
            "must hold at least one secret (ANTEROOM_SECRET)",
        ));
    }
    for (i, s) in secrets.iter().enumerate() {
        if s.len() < anteroom_core::token::MIN_SECRET_LEN {
            return Err(ConfigError::new(
                format!("keys.secrets[{i}]"),
                "must be at least 32 bytes",
            ));
        }
    }
    Ok(secrets)
}

fn limits(raw: &RawConfig) -> Result<Limits> {
    let l = &raw.limits;
    Ok(Limits {
        per_ip_per_second: l.per_ip_per_second.unwrap_or(20),
        per_session_per_second: l.per_session_per_second.unwrap_or(2),
        entries_per_ip: l
            .entries_per_ip
            .unwrap_or(crate::bots::entries::DEFAULT_ENTRIES_PER_IP),
        entries_window: positive("limits.entries_window", l.entries_window.as_deref(), "10m")?,
    })
}

fn trusted_proxies(raw: &RawConfig) -> Result<Vec<ipnet::IpNet>> {
    let mut trusted_proxies = Vec::new();
    for (i, c) in raw.limits.trusted_proxies.iter().flatten().enumerate() {
        let net = c
            .parse::<ipnet::IpNet>()
            .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map_err(|_| {
                ConfigError::new(
                    format!("limits.trusted_proxies[{i}]"),
                    format!("{c:?} is not a CIDR"),
                )
            })?;
        trusted_proxies.push(net);
    }
    Ok(trusted_proxies)
}

/// Validates one event; `key` prefixes every error (`events[0]`, or the
/// admin API's `event`).
pub fn event_from_raw(key: &str, e: &RawEvent) -> Result<EventConfig> {
    let k = |field: &str| format!("{key}.{field}");
    let id = EventId::new(e.id.as_deref().unwrap_or(""))
        .map_err(|_| ConfigError::new(k("id"), "must match ^[A-Za-z0-9_-]{1,64}$"))?;
    let origin = origin(&k("origin"), e.origin.as_deref().unwrap_or(""))?;
    let paths = e.paths.clone().unwrap_or_else(|| vec!["/".to_owned()]);
    if paths.is_empty() {
        return Err(ConfigError::new(
            k("paths"),
            "must list at least one path prefix",
        ));
    }
    for (i, p) in paths.iter().enumerate() {
        if !p.starts_with('/') {
            return Err(ConfigError::new(
                format!("{key}.paths[{i}]"),
                "must start with /",
            ));
        }
    }
    let opens_at_ms = e
        .opens_at
        .as_deref()
        .map(|t| timestamp(&k("opens_at"), t))
        .transpose()?;
    let max_active = e.max_active.unwrap_or(500);
    if max_active == 0 {
        return Err(ConfigError::new(k("max_active"), "must be > 0"));
    }
    let identity = match e.identity.as_deref().unwrap_or("cookie") {
        "cookie" => Identity::Cookie,
        "jwt" => Identity::Jwt(jwt(&k("jwt"), e.jwt.as_ref())?),
        other => {
            return Err(ConfigError::new(
                k("identity"),
                format!("{other:?} is not \"cookie\" or \"jwt\""),
            ));
        }
    };
    Ok(EventConfig {
        id,
        origin,
        paths,
        opens_at_ms,
        pre_window: duration(&k("pre_window"), e.pre_window.as_deref(), "60s")?,
        max_active,
        session_ttl: positive(&k("session_ttl"), e.session_ttl.as_deref(), "10m")?,
        session_idle_timeout: positive(
            &k("session_idle_timeout"),
            e.session_idle_timeout.as_deref(),
            "2m",
        )?,
        token_ttl: positive(&k("token_ttl"), e.token_ttl.as_deref(), "2m")?,
        pass_ttl: pass_ttl(&k("pass_ttl"), e.pass_ttl.as_deref())?,
        queue_idle_timeout: positive(
            &k("queue_idle_timeout"),
            e.queue_idle_timeout.as_deref(),
            "5m",
        )?,
        identity,
        admission: admission(&k("admission"), e.admission.as_ref())?,
        bots: bots(&k("bots"), e.bots.as_ref())?,
        raw: e.clone(),
    })
}

fn jwt(key: &str, j: Option<&RawJwt>) -> Result<JwtConfig> {
    let default = RawJwt::default();
    let j = j.unwrap_or(&default);
    let algorithm = match j.algorithm.as_deref().unwrap_or("") {
        "HS256" => jsonwebtoken::Algorithm::HS256,
        "RS256" => jsonwebtoken::Algorithm::RS256,
        "EdDSA" => jsonwebtoken::Algorithm::EdDSA,
        other => {
            return Err(ConfigError::new(
                format!("{key}.algorithm"),
                format!("{other:?} is not HS256, RS256 or EdDSA"),
            ));
        }
    };
    let key_value = match algorithm {
        jsonwebtoken::Algorithm::HS256 => {
            let secret = one_source(
                key,
                &[
                    ("secret", j.secret.as_deref(), Source::Inline),
                    ("secret_file", j.secret_file.as_deref(), Source::File),
                    ("secret_env", j.secret_env.as_deref(), Source::Env),
                ],
                "HS256 needs a secret of at least 32 bytes (secret_file, secret_env or secret)",
            )?;
            if secret.len() < 32 {
                return Err(ConfigError::new(
                    format!("{key}.secret"),
                    "HS256 needs a secret of at least 32 bytes",
                ));
            }
            secret
        }
        _ => one_source(
            key,
            &[
                (
                    "public_key_pem",
                    j.public_key_pem.as_deref(),
                    Source::Inline,
                ),
                (
                    "public_key_file",
                    j.public_key_file.as_deref(),
                    Source::File,
                ),
            ],
            "needs a PEM public key (public_key_pem or public_key_file)",
        )
        .and_then(|pem| {
            if pem.contains("-----BEGIN") {
                Ok(pem)
            } else {
                Err(ConfigError::new(
                    format!("{key}.public_key_pem"),
                    "needs a PEM public key",
                ))
            }
        })?,
    };
    // Parse the key now, so a bad key fails at start rather than per request.
    crate::identity::jwt::decoding_key(algorithm, &key_value)
        .map_err(|e| ConfigError::new(format!("{key}.public_key_pem"), e.to_string()))?;
    Ok(JwtConfig {
        algorithm,
        key: key_value,
        issuer: j.issuer.clone(),
        audience: j.audience.clone(),
    })
}

#[derive(Clone, Copy)]
enum Source {
    Inline,
    File,
    Env,
}

/// The one value given among `sources` (inline, a file to read, or an
/// environment variable), read now; none or several is an error.
fn one_source(
    key: &str,
    sources: &[(&str, Option<&str>, Source)],
    missing: &str,
) -> Result<String> {
    let mut given = sources.iter().filter(|(_, v, _)| v.is_some());
    let Some((name, Some(value), source)) = given.next() else {
        let first = sources.first().map_or("key", |s| s.0);
        return Err(ConfigError::new(format!("{key}.{first}"), missing));
    };
    if let Some((other, _, _)) = given.next() {
        return Err(ConfigError::new(
            format!("{key}.{other}"),
            format!("set only one of {name} and {other}"),
        ));
    }
    let k = format!("{key}.{name}");
    match source {
        Source::Inline => Ok((*value).to_owned()),
        Source::File => read_key_file(value)
            .map(|t| t.trim().to_owned())
            .map_err(|e| ConfigError::new(k, format!("cannot read {value:?}: {e}"))),
        Source::Env => std::env::var(value)
            .map(|t| t.trim().to_owned())
            .map_err(|_| ConfigError::new(k, format!("environment variable {value:?} is not set"))),
    }
}

/// The most of a key file read: a secret or a PEM public key is a few
/// hundred bytes.
const KEY_FILE_LIMIT: u64 = 64 * 1024;

/// A key file's text, read as [`crate::config::read_regular_file`] reads:
/// the path may come through the admin API, and validation runs on the
/// event loop.
fn read_key_file(path: &str) -> std::io::Result<String> {
    let bytes = super::read_regular_file(std::path::Path::new(path), KEY_FILE_LIMIT)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

fn admission(key: &str, a: Option<&RawAdmission>) -> Result<Admission> {
    let default = RawAdmission::default();
    let a = a.unwrap_or(&default);
    let k = |field: &str| format!("{key}.{field}");
    match a.mode.as_deref().unwrap_or("batch") {
        "batch" => {
            let size = a.batch_size.unwrap_or(50);
            if size == 0 {
                return Err(ConfigError::new(k("batch_size"), "must be > 0"));
            }
            Ok(Admission::Batch {
                size,
                interval: positive(&k("interval"), a.interval.as_deref(), "5s")?,
            })
        }
        "continuous" => match a.max_per_minute {
            Some(n) if n > 0 => Ok(Admission::Continuous { max_per_minute: n }),
            _ => Err(ConfigError::new(k("max_per_minute"), "must be > 0")),
        },
        "capacity" => {
            let url = a.health_url.as_deref().unwrap_or("");
            Ok(Admission::Capacity {
                health_url: http_url(&k("health_url"), url)?,
                field: a.field.clone().unwrap_or_else(|| "concurrency".to_owned()),
                target: a
                    .target
                    .filter(|t| *t > 0)
                    .ok_or_else(|| ConfigError::new(k("target"), "must be > 0"))?,
            })
        }
        "adaptive" => {
            let rate = a.max_error_rate.unwrap_or(0.02);
            if !(0.0..=1.0).contains(&rate) {
                return Err(ConfigError::new(
                    k("max_error_rate"),
                    "must be between 0 and 1",
                ));
            }
            Ok(Admission::Adaptive {
                target_p95: positive(&k("target_p95"), a.target_p95.as_deref(), "300ms")?,
                max_error_rate: rate,
            })
        }
        other => Err(ConfigError::new(
            k("mode"),
            format!("{other:?} is not batch, continuous, capacity or adaptive"),
        )),
    }
}

fn bots(key: &str, b: Option<&RawBots>) -> Result<Bots> {
    let default = RawBots::default();
    let b = b.unwrap_or(&default);
    let challenge = match b.challenge.as_deref().unwrap_or("off") {
        "off" => ChallengeLevel::Off,
        "high" => ChallengeLevel::High,
        "medium" => ChallengeLevel::Medium,
        "all" => ChallengeLevel::All,
        other => {
            return Err(ConfigError::new(
                format!("{key}.challenge"),
                format!("{other:?} is not off, high, medium or all"),
            ));
        }
    };
    let high_risk = match b.high_risk.as_deref().unwrap_or("back_of_queue") {
        "back_of_queue" => HighRisk::BackOfQueue,
        "captcha" => HighRisk::Captcha,
        "reject" => HighRisk::Reject,
        "allow" => HighRisk::Allow,
        other => {
            return Err(ConfigError::new(
                format!("{key}.high_risk"),
                format!("{other:?} is not back_of_queue, captcha, reject or allow"),
            ));
        }
    };
    // Shared with the bot defence's own default; see there for why 16 bits.
    let difficulty = b
        .difficulty
        .unwrap_or(crate::bots::config::DEFAULT_DIFFICULTY);
    if !(1..=32).contains(&difficulty) {
        return Err(ConfigError::new(
            format!("{key}.difficulty"),
            "must be between 1 and 32",
        ));
    }
    Ok(Bots {
        challenge,
        difficulty,
        high_risk,
        adaptive_difficulty: b.adaptive_difficulty.unwrap_or(false),
    })
}

fn addr(key: &str, value: &str) -> Result<SocketAddr> {
    value.parse().map_err(|_| {
        ConfigError::new(
            key,
            format!("{value:?} is not an address like 127.0.0.1:8080"),
        )
    })
}

/// An origin: a plain `http://` URL (see [`http_url`]) whose path, if any,
/// goes in front of every request's.
fn origin(key: &str, value: &str) -> Result<http::Uri> {
    let uri = http_url(key, value)?;
    // A request's target replaces everything after the origin's path.
    if uri.query().is_some() {
        return Err(ConfigError::new(
            key,
            format!(
                "{:?} must not carry a query: each request keeps its own",
                without_credentials(value)
            ),
        ));
    }
    Ok(uri)
}

/// A plain `http://` URL with a host and no credentials: an origin or its
/// health URL. The proxy and the health probe speak plain HTTP/1.1 to the
/// origin, so an `https://` origin would start and then fail every admitted
/// visitor's request with a 502; it is refused here instead, by its key.
/// `user:password@` would be sent to the origin as part of its `Host` and
/// written into this node's logs with every origin failure, so it is
/// refused too, and never quoted back.
fn http_url(key: &str, value: &str) -> Result<http::Uri> {
    let shown = without_credentials(value);
    let uri: http::Uri = value
        .parse()
        .map_err(|_| ConfigError::new(key, format!("{shown:?} is not a URL")))?;
    let Some(authority) = uri.authority().filter(|_| uri.scheme_str() == Some("http")) else {
        let why = if uri.scheme_str() == Some("https") {
            "must be an http:// URL: Anteroom speaks plain HTTP/1.1 to its origin (keep the origin on a private network, or give an https-only origin a local TLS proxy)"
        } else {
            "must be an http:// URL with a host"
        };
        return Err(ConfigError::new(key, format!("{shown:?} {why}")));
    };
    if authority.as_str().contains('@') {
        return Err(ConfigError::new(
            key,
            format!("{shown:?} must not carry credentials (user:password@)"),
        ));
    }
    // `:99999`, `:0`, `:-1`, `:+80` and an empty port parse as a URI but
    // name no TCP port the origin client can use: every admitted visitor
    // would get a 502.
    let port = authority
        .as_str()
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.contains(']'));
    let usable = |p: &str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok_and(|p| p != 0)
    };
    if port.is_some_and(|p| !usable(p)) {
        return Err(ConfigError::new(
            key,
            format!("{shown:?} has no usable port (1 to 65535)"),
        ));
    }
    Ok(uri)
}

/// `value` with whatever stands before an `@` in its authority replaced by
/// `…`, for quoting a URL in an error.
fn without_credentials(value: &str) -> String {
    let start = value.find("://").map_or(0, |i| i + 3);
    let rest = &value[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{}…{}", &value[..start], &rest[at..]),
        None => value.to_owned(),
    }
}

fn timestamp(key: &str, value: &str) -> Result<i64> {
    let t = humantime::parse_rfc3339_weak(value).map_err(|_| {
        ConfigError::new(
            key,
            format!("{value:?} is not an RFC 3339 time like 2026-12-01T10:00:00Z"),
        )
    })?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    Ok(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// The longest duration any key takes. Every duration is added to clock
/// readings and to other durations, and converted to microseconds in an
/// `i64`: a value near `u64::MAX` seconds, which `humantime` parses, would
/// overflow there (a `pass_ttl` of that size, stored through the admin API,
/// made every node panic at start). A year is far beyond any sensible
/// setting and far inside every sum.
pub(crate) const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// `d` if it is at most [`LONGEST`], else the error naming `key`.
pub(crate) fn at_most_a_year(key: &str, d: Duration) -> Result<Duration> {
    if d > LONGEST {
        return Err(ConfigError::new(key, "must be at most 365d"));
    }
    Ok(d)
}

fn duration(key: &str, value: Option<&str>, default: &str) -> Result<Duration> {
    let value = value.unwrap_or(default);
    let d = humantime::parse_duration(value).map_err(|_| {
        ConfigError::new(
            key,
            format!("{value:?} is not a duration like \"90s\" or \"10m\""),
        )
    })?;
    at_most_a_year(key, d)
}

/// `pass_ttl`: positive; a longer one than [`super::PASS_TTL_MAX`] is
/// used as that. Not refused: an event stored through the admin API before
/// the bound would then be left out by every node started since, and its
/// paths go unprotected; the gate renews the shorter pass while the session
/// is active, so the visitor sees no difference.
fn pass_ttl(key: &str, value: Option<&str>) -> Result<Duration> {
    Ok(positive(key, value, "60s")?.min(super::PASS_TTL_MAX))
}

fn positive(key: &str, value: Option<&str>, default: &str) -> Result<Duration> {
    let d = duration(key, value, default)?;
    if d.is_zero() {
        return Err(ConfigError::new(key, "must be > 0"));
    }
    at_least_a_millisecond(key, d)
}

/// Times are kept in whole milliseconds: less would be 0 where it is used
/// (a token that expires as it is made, waiters swept at once).
fn at_least_a_millisecond(key: &str, d: Duration) -> Result<Duration> {
    if d < Duration::from_millis(1) {
        return Err(ConfigError::new(key, "must be at least 1ms"));
    }
    Ok(d)
}
