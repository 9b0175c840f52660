//! `[server.tls]`: the file shape (typed here, since TLS owns it) and its
//! checks, each error naming its key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[server.tls]` as written in the file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawTls {
    /// PEM certificate chain, leaf first (the simple form: one certificate).
    pub cert: Option<String>,
    /// PEM private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<String>,
    /// More certificates, chosen by SNI from the DNS names each one holds.
    pub certs: Option<Vec<RawCertPair>>,
    /// A plain-HTTP listener answering `308` to HTTPS (and ACME HTTP-01).
    pub redirect_listen: Option<String>,
    /// Certificates from an ACME CA instead of files.
    pub acme: Option<RawAcme>,
    /// `Strict-Transport-Security` value sent on every HTTPS answer.
    pub hsts: Option<String>,
    /// Also serve the admin listener over TLS, with the same certificates.
    pub admin: Option<bool>,
    /// How often the certificate files are checked for a change.
    pub reload_interval: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawCertPair {
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// `acme = { directory, domains, contact, ... }`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAcme {
    pub directory: Option<String>,
    pub domains: Option<Vec<String>>,
    pub contact: Option<String>,
    /// Where the account key and certificates are kept.
    pub storage: Option<String>,
    /// Renew this long before the certificate expires.
    pub renew_before: Option<String>,
    /// A PEM root trusted for the ACME directory's own HTTPS (a private or
    /// test CA); the system roots otherwise.
    pub ca_root: Option<String>,
}

/// One certificate and key, by file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// The config key of the pair (`server.tls` or `server.tls.certs[1]`),
    /// for messages.
    pub key_name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Clone, Debug)]
pub struct AcmeConfig {
    pub directory: String,
    pub domains: Vec<String>,
    pub contact: Option<String>,
    pub storage: PathBuf,
    pub renew_before: Duration,
    pub ca_root: Option<PathBuf>,
}

/// The checked `[server.tls]`.
#[derive(Clone, Debug)]
pub struct TlsConfig {
    /// The first pair is the default certificate (no SNI, or a name no
    /// certificate holds).
    pub files: Vec<CertFiles>,
    pub acme: Option<AcmeConfig>,
    pub redirect_listen: Option<SocketAddr>,
    pub hsts: Option<http::HeaderValue>,
    pub admin: bool,
    pub reload_interval: Duration,
}

type Result<T> = std::result::Result<T, ConfigError>;

/// Checks `[server.tls]`; `data_dir` is the embedded store's directory, the
/// default home of ACME state.
pub fn validate(
    raw: &RawTls,
    insecure_cookies: bool,
    data_dir: Option<&std::path::Path>,
) -> Result<TlsConfig> {
    if insecure_cookies {
        return Err(ConfigError::new(
            "server.insecure_cookies",
            "must be false while [server.tls] is on (cookies over HTTPS are Secure)",
        ));
    }
    let mut files = Vec::new();
    match (&raw.cert, &raw.key) {
        (Some(cert), Some(key)) => files.push(pair("server.tls", cert, key)?),
        (None, None) => {}
        (Some(_), None) => return Err(ConfigError::new("server.tls.key", "must be set with cert")),
        (None, Some(_)) => return Err(ConfigError::new("server.tls.cert", "must be set with key")),
    }
    for (i, p) in raw.certs.iter().flatten().enumerate() {
        let name = format!("server.tls.certs[{i}]");
        let cert = p
            .cert
            .as_deref()
            .ok_or_else(|| ConfigError::new(format!("{name}.cert"), "must be set"))?;
        let key = p
            .key
            .as_deref()
            .ok_or_else(|| ConfigError::new(format!("{name}.key"), "must be set"))?;
        files.push(pair(&name, cert, key)?);
    }
    let acme = raw.acme.as_ref().map(|a| acme(a, data_dir)).transpose()?;
    if files.is_empty() && acme.is_none() {
        return Err(ConfigError::new(
            "server.tls.cert",
            "must be set (with key), or certs, or acme",
        ));
    }
    if !files.is_empty() && acme.is_some() {
        return Err(ConfigError::new(
            "server.tls.acme",
            "cannot be combined with cert/key files",
        ));
    }
    let redirect_listen = raw
        .redirect_listen
        .as_deref()
        .map(|a| {
            a.parse().map_err(|_| {
                ConfigError::new(
                    "server.tls.redirect_listen",
                    format!("{a:?} is not an address like 0.0.0.0:80"),
                )
            })
        })
        .transpose()?;
    if acme.is_some() && redirect_listen.is_none() {
        return Err(ConfigError::new(
            "server.tls.redirect_listen",
            "must be set with acme: it answers the CA's HTTP-01 challenges",
        ));
    }
    let hsts = raw.hsts.as_deref().map(hsts).transpose()?;
    Ok(TlsConfig {
        files,
        acme,
        redirect_listen,
        hsts,
        admin: raw.admin.unwrap_or(false),
        reload_interval: duration(
            "server.tls.reload_interval",
            raw.reload_interval.as_deref().unwrap_or("10s"),
        )?,
    })
}

fn pair(name: &str, cert: &str, key: &str) -> Result<CertFiles> {
    if cert.is_empty() {
        return Err(ConfigError::new(
            format!("{name}.cert"),
            "must not be empty",
        ));
    }
    if key.is_empty() {
        return Err(ConfigError::new(format!("{name}.key"), "must not be empty"));
    }
    Ok(CertFiles {
        key_name: name.to_owned(),
        cert: PathBuf::from(cert),
        key: PathBuf::from(key),
    })
}

fn acme(a: &RawAcme, data_dir: Option<&std::path::Path>) -> Result<AcmeConfig> {
    let directory = a.directory.clone().unwrap_or_default();
    if !directory.starts_with("https://") {
        return Err(ConfigError::new(
            "server.tls.acme.directory",
            "must be the CA's https:// directory URL",
        ));
    }
    let domains = a.domains.clone().unwrap_or_default();
    if domains.is_empty() {
        return Err(ConfigError::new(
            "server.tls.acme.domains",
            "must list at least one domain",
        ));
    }
    for (i, d) in domains.iter().enumerate() {
        let ok = !d.is_empty()
            && d.len() <= 253
            && d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok {
            return Err(ConfigError::new(
                format!("server.tls.acme.domains[{i}]"),
                format!("{d:?} is not a DNS name (HTTP-01 cannot prove wildcards)"),
            ));
        }
    }
    let storage = match (a.storage.as_deref(), data_dir) {
        (Some(s), _) => PathBuf::from(s),
        (None, Some(d)) => d.join("acme"),
        (None, None) => {
            return Err(ConfigError::new(
                "server.tls.acme.storage",
                "must be set when the store is not embedded",
            ));
        }
    };
    Ok(AcmeConfig {
        directory,
        domains,
        contact: a.contact.clone().filter(|c| !c.is_empty()),
        storage,
        renew_before: duration(
            "server.tls.acme.renew_before",
            a.renew_before.as_deref().unwrap_or("30d"),
        )?,
        ca_root: a.ca_root.as_deref().map(PathBuf::from),
    })
}

fn hsts(v: &str) -> Result<http::HeaderValue> {
    let ok = v.trim_start().to_ascii_lowercase().starts_with("max-age=");
    match http::HeaderValue::from_str(v) {
        Ok(h) if ok => Ok(h),
        _ => Err(ConfigError::new(
            "server.tls.hsts",
            "must be a Strict-Transport-Security value like \"max-age=31536000\"",
        )),
    }
}

fn duration(key: &str, v: &str) -> Result<Duration> {
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() => super::validate::at_most_a_year(key, d),
        _ => Err(ConfigError::new(
            key,
            format!("{v:?} is not a positive duration like \"10s\""),
        )),
    }
}
