//! Shared by the TLS tests: a test CA and certificates made with rcgen,
//! a server started through `run_listeners` on port 0 with `[server.tls]`,
//! and TLS clients (raw rustls for ALPN and certificates, reqwest for HTTP/1.1
//! and HTTP/2) that trust only the test CA.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

use crate::support::config::{ADMIN_TOKEN, ConfigBuilder, Event};

/// A certificate authority the test trusts.
pub struct Ca {
    pub pem: String,
    /// The CA key's SubjectPublicKeyInfo, DER (Chromium's SPKI pin).
    pub spki_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its key, as PEM.
#[derive(Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            spki_der: rcgen::PublicKeyData::subject_public_key_info(&key),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names` (DNS names or IP addresses), valid from a day ago
    /// for `days` days.
    pub fn leaf(&self, names: &[&str], days: i64) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(days);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::pem::PemObject::pem_slice_iter(self.pem.as_bytes()) {
            let c: CertificateDer<'static> = c.unwrap();
            roots.add(c).unwrap();
        }
        roots
    }
}

impl Leaf {
    /// Writes the pair as `<stem>.crt` / `<stem>.key` in `dir`, each through
    /// a rename so a reader never sees half a file.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        write_atomic(&cert, &self.cert_pem);
        write_atomic(&key, &self.key_pem);
        (cert, key)
    }
}

pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A running server with TLS on its public listener.
pub struct TlsServer {
    pub public: SocketAddr,
    pub admin: SocketAddr,
    pub redirect: SocketAddr,
    pub dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// The config: a `tickets` event in front of `origin`, the store under
/// `dir`; the test adds `[server.tls]` with [`ConfigBuilder::tls`].
pub fn config(dir: &Path, origin: SocketAddr) -> ConfigBuilder {
    ConfigBuilder::new()
        .embedded(&dir.join("data"))
        .no_rate_limits()
        .event(
            Event::at("tickets", origin)
                .max_active(5)
                .admission(r#"{ mode = "batch", batch_size = 5, interval = "100ms" }"#)
                .challenge_off(),
        )
}

/// Binds the three listeners on port 0 and starts the server; `Err` if it
/// refused to start.
pub async fn try_start(dir: tempfile::TempDir, toml: &str) -> anyhow::Result<TlsServer> {
    let config = anteroom::Config::from_toml(toml)?;
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let redirect = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addrs = (
        public.local_addr()?,
        admin.local_addr()?,
        redirect.local_addr()?,
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = anteroom::Listeners {
        public,
        admin,
        redirect: Some(redirect),
    };
    let mut task = tokio::spawn(anteroom::run_listeners(listeners, config, async move {
        let _ = stopped.await;
    }));
    // Ready once the admin listener answers anything over plain HTTP (a
    // TLS admin listener answers `400 https_required`), or failed start.
    let deadline = Instant::now() + Duration::from_secs(20);
    let probe = reqwest::Client::new();
    loop {
        if task.is_finished() {
            (&mut task).await??;
            anyhow::bail!("server stopped at once");
        }
        let url = format!("http://{}/healthz", addrs.1);
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(2), probe.get(&url).send()).await
        {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "server not ready in 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(TlsServer {
        public: addrs.0,
        admin: addrs.1,
        redirect: addrs.2,
        dir,
        stop: Some(stop),
        task: Some(task),
    })
}

impl TlsServer {
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }

    /// The admin `/metrics` text (plain HTTP admin listener).
    pub async fn metrics(&self) -> String {
        let client = reqwest::Client::new();
        client
            .get(format!("http://{}/metrics", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// An admin `GET` answered `200` (plain HTTP admin listener), as JSON.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        let res = reqwest::Client::new()
            .get(format!("http://{}{path}", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), http::StatusCode::OK, "{path}");
        res.json().await.unwrap()
    }
}

/// A rustls client config trusting `roots`, offering `alpn`.
pub fn client_config(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    c
}

/// A finished handshake: what was negotiated and the certificate shown.
pub struct Handshake {
    pub alpn: Option<Vec<u8>>,
    pub version: Option<rustls::ProtocolVersion>,
    pub leaf: Vec<u8>,
    pub stream: tokio_rustls::client::TlsStream<TcpStream>,
}

/// Connects to `addr` with SNI `name`, verifying against `config`'s roots.
pub async fn handshake(
    addr: SocketAddr,
    name: &str,
    config: rustls::ClientConfig,
) -> std::io::Result<Handshake> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(10), connector.connect(server_name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))??;
    let (_, conn) = stream.get_ref();
    Ok(Handshake {
        alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        version: conn.protocol_version(),
        leaf: conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default(),
        stream,
    })
}

/// A reqwest client trusting only `ca`, resolving `host` to `addr`, with a
/// cookie store; `http2` chooses HTTP/2 by ALPN, else HTTP/1.1 only.
pub fn https_client(ca: &Ca, host: &str, addr: SocketAddr, http2: bool) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .resolve(host, addr)
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20));
    if !http2 {
        b = b.http1_only();
    }
    b.build().unwrap()
}

/// Polls `check` until it holds, failing after 20 s.
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait_for(what, Duration::from_secs(20), check).await;
}
