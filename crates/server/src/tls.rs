//! HTTPS on the listeners: the rustls server config (TLS 1.2 and 1.3, ALPN
//! `h2` and `http/1.1`), the handshake step that wraps an accepted TCP
//! stream, and the tasks that keep certificates fresh (file reload, ACME).
//!
//! The handshake is a separate step before hyper sees the connection, so the
//! serving code (limits, timeouts, HTTP/2) is the same for TCP and TLS.

pub mod acme;
pub mod certs;
pub mod redirect;
mod reload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rustls::crypto::CryptoProvider;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::tls::TlsConfig;
pub use certs::CertStore;
pub use redirect::Challenges;

/// A warning and a metric below this much validity left.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// The running TLS side: what the listeners need to accept connections.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    pub store: Arc<CertStore>,
    pub hsts: Option<http::HeaderValue>,
    /// Also on the admin listener.
    pub admin: bool,
}

/// The one crypto provider: ring, chosen explicitly so that no other crate's
/// feature choice can change it.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Builds the server config around `store` (which may still be empty
    /// while ACME fetches a first certificate).
    pub fn new(store: Arc<CertStore>, config: &TlsConfig) -> anyhow::Result<Self> {
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("server.tls: protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(store.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Stateless resumption for returning browsers (TLS 1.3 tickets and
        // 1.2 session tickets); keys rotate every few hours.
        server.ticketer = rustls::crypto::ring::Ticketer::new().context("server.tls: ticketer")?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            store,
            hsts: config.hsts.clone(),
            admin: config.admin,
        })
    }

    /// The handshake on an accepted stream, done by `deadline` (when the
    /// connection's first request head is due: the head's wait and the
    /// handshake's are one). `None` when it failed; the stream
    /// is closed then. Plain HTTP gets a short `400` first, saying to use
    /// HTTPS, instead of a TLS alert it cannot read.
    pub async fn accept<S>(
        &self,
        mut tcp: S,
        deadline: tokio::time::Instant,
    ) -> Option<TlsStream<S>>
    where
        S: Peek + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await {
            Ok(Ok(1)) => {}
            // A socket that never speaks is counted as a plain one is
            // (`header_timeout`): uncounted, a flood of them on the TLS
            // port left no trace in the metrics.
            Err(_) => {
                metrics::counter!("anteroom_tls_handshake_failures_total", "reason" => "timeout")
                    .increment(1);
                return None;
            }
            // Closed before a byte: nothing to count.
            _ => return None,
        }
        // 0x16 is a TLS handshake record; a letter is an HTTP method.
        if first[0].is_ascii_uppercase() {
            metrics::counter!("anteroom_tls_handshake_failures_total", "reason" => "plain_http")
                .increment(1);
            let _ = tokio::time::timeout_at(deadline, tcp.write_all(PLAIN_HTTP_ANSWER)).await;
            let _ = tcp.shutdown().await;
            return None;
        }
        match tokio::time::timeout_at(deadline, self.acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => Some(tls),
            // A client that takes nothing the handshake sends runs out of
            // time too, by the stream's send deadline.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                metrics::counter!("anteroom_tls_handshake_failures_total", "reason" => "timeout")
                    .increment(1);
                None
            }
            Ok(Err(e)) => {
                metrics::counter!("anteroom_tls_handshake_failures_total", "reason" => "handshake")
                    .increment(1);
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                metrics::counter!("anteroom_tls_handshake_failures_total", "reason" => "timeout")
                    .increment(1);
                None
            }
        }
    }
}

/// A stream whose next bytes can be read without taking them: the
/// listener's TCP stream, or the server's wrapping of it.
pub trait Peek {
    fn peek(
        &self,
        buf: &mut [u8],
    ) -> impl std::future::Future<Output = std::io::Result<usize>> + Send;
}

impl Peek for TcpStream {
    fn peek(
        &self,
        buf: &mut [u8],
    ) -> impl std::future::Future<Output = std::io::Result<usize>> + Send {
        TcpStream::peek(self, buf)
    }
}

const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 77\r\n\r\n{\"error\":\"https_required\",\"message\":\"this port speaks HTTPS, not plain HTTP\"}";

/// Loads the configured files (refusing to start on a bad pair, naming the
/// key and file) or the stored ACME certificate, and starts the tasks that
/// renew them. The tasks end when the returned handles are aborted.
pub async fn start(
    config: &TlsConfig,
    challenges: Challenges,
) -> anyhow::Result<(Tls, Vec<tokio::task::JoinHandle<()>>)> {
    let provider = provider();
    let now = unix_now();
    let mut tasks = Vec::new();
    let store = if let Some(acme) = &config.acme {
        let store = Arc::new(CertStore::with_slots(1));
        let runner = acme::Acme::new(acme.clone(), store.clone(), challenges, provider)?;
        runner.load_stored();
        tasks.push(tokio::spawn(runner.run()));
        store
    } else {
        let store = Arc::new(CertStore::with_slots(config.files.len()));
        for (i, files) in config.files.iter().enumerate() {
            let loaded = certs::load_files(files, &provider)?;
            report_expiry(&files.key_name, &loaded, now);
            store.set(i, loaded);
        }
        tasks.push(tokio::spawn(reload::run(
            config.files.clone(),
            store.clone(),
            provider,
            config.reload_interval,
            reload::hangup_signal(),
        )));
        store
    };
    Ok((Tls::new(store, config)?, tasks))
}

/// What `anteroom check` verifies without serving: every pair loads, and
/// the ACME CA root (if any) is readable.
pub fn check(config: &TlsConfig) -> anyhow::Result<()> {
    let provider = provider();
    for files in &config.files {
        certs::load_files(files, &provider)?;
    }
    if let Some(root) = config.acme.as_ref().and_then(|a| a.ca_root.as_ref()) {
        std::fs::metadata(root)
            .with_context(|| format!("server.tls.acme.ca_root: cannot read {}", root.display()))?;
    }
    Ok(())
}

/// Sets `anteroom_tls_cert_expiry_seconds{cert}` and warns when less than
/// [`EXPIRY_WARNING`] is left; `true` if it warned.
pub fn report_expiry(name: &str, cert: &certs::Loaded, now: i64) -> bool {
    let left = cert.not_after - now;
    metrics::gauge!("anteroom_tls_cert_expiry_seconds", "cert" => name.to_owned()).set(left as f64);
    let soon = left < i64::try_from(EXPIRY_WARNING.as_secs()).unwrap_or(i64::MAX);
    if soon {
        tracing::warn!(
            cert = name,
            names = ?cert.names,
            seconds_left = left,
            "TLS certificate expires in less than 7 days"
        );
    }
    soon
}

/// Keeps a certificate still served reporting: its expiry gauge set to
/// now, and the warning logged once as it crosses (`warned` remembers).
pub fn keep_expiry(name: &str, cert: &certs::Loaded, now: i64, warned: &mut bool) {
    let left = cert.not_after - now;
    metrics::gauge!("anteroom_tls_cert_expiry_seconds", "cert" => name.to_owned()).set(left as f64);
    if !*warned && left < i64::try_from(EXPIRY_WARNING.as_secs()).unwrap_or(i64::MAX) {
        *warned = report_expiry(name, cert, now);
    }
}

/// Wall-clock seconds, read at the edge (certificate validity is wall time).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Adds `Strict-Transport-Security` to every answer of an HTTPS router.
pub fn with_hsts(router: axum::Router, hsts: Option<http::HeaderValue>) -> axum::Router {
    match hsts {
        None => router,
        Some(value) => router.layer(axum::middleware::map_response(
            move |mut res: axum::response::Response| {
                let value = value.clone();
                async move {
                    res.headers_mut()
                        .insert(http::header::STRICT_TRANSPORT_SECURITY, value);
                    res
                }
            },
        )),
    }
}
