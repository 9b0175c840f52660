//! Certificates in memory: a PEM pair loaded and checked (chain parses, key
//! matches the leaf), the DNS names and expiry of each, and the SNI choice
//! between them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::tls::CertFiles;

/// Why a certificate pair was refused: the config key, the file and what
/// is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {file}: {reason}")]
pub struct CertError {
    pub key: String,
    pub file: String,
    pub reason: String,
}

impl CertError {
    fn new(key: impl Into<String>, file: &Path, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            file: file.display().to_string(),
            reason: reason.into(),
        }
    }
}

/// One usable certificate.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// Lower-case DNS names from the leaf's subjectAltName (`*.x` kept as is).
    pub names: Vec<String>,
    /// The leaf's notAfter, Unix seconds.
    pub not_after: i64,
}

/// The most of a certificate or key file read: a chain is a few KiB.
const FILE_LIMIT: u64 = 1024 * 1024;

/// A certificate or key file's bytes, read only from a regular file (a
/// FIFO at the path hung the start, and a reload froze the listeners).
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    crate::config::read_regular_file(path, FILE_LIMIT)
}

/// Reads and checks the pair named by `files`.
pub fn load_files(files: &CertFiles, provider: &CryptoProvider) -> Result<Loaded, CertError> {
    let cert_key = format!("{}.cert", files.key_name);
    let key_key = format!("{}.key", files.key_name);
    let cert_pem = read(&files.cert)
        .map_err(|e| CertError::new(&cert_key, &files.cert, format!("cannot read: {e}")))?;
    let key_pem = read(&files.key)
        .map_err(|e| CertError::new(&key_key, &files.key, format!("cannot read: {e}")))?;
    let chain = parse_chain(&cert_pem).map_err(|r| CertError::new(&cert_key, &files.cert, r))?;
    let key = parse_key(&key_pem, provider).map_err(|r| CertError::new(&key_key, &files.key, r))?;
    pair(chain, key).map_err(|(blame, r)| match blame {
        Blame::Key => CertError::new(
            &key_key,
            &files.key,
            format!("{r} (certificate: {})", files.cert.display()),
        ),
        Blame::Certificate => CertError::new(&cert_key, &files.cert, r),
    })
}

/// A pair already in memory (ACME), `what` naming it in errors.
pub fn load_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<Loaded, String> {
    let chain = parse_chain(cert_pem)?;
    let key = parse_key(key_pem, provider)?;
    pair(chain, key).map_err(|(_, r)| r)
}

fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate chain: {e}"))?;
    if chain.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(chain)
}

fn parse_key(
    pem: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<dyn rustls::sign::SigningKey>, String> {
    let der =
        PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("not a PEM private key: {e}"))?;
    provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("unusable private key: {e}"))
}

/// Which file of a pair an error names: the operator fixes that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blame {
    Key,
    Certificate,
}

fn pair(
    chain: Vec<CertificateDer<'static>>,
    key: Arc<dyn rustls::sign::SigningKey>,
) -> Result<Loaded, (Blame, String)> {
    let (names, not_after) = leaf_facts(&chain[0]).map_err(|r| (Blame::Certificate, r))?;
    let certified = CertifiedKey::new(chain, key);
    certified
        .keys_match()
        .map_err(|_| (Blame::Key, "does not match the certificate".to_owned()))?;
    Ok(Loaded {
        key: Arc::new(certified),
        names,
        not_after,
    })
}

fn leaf_facts(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("leaf certificate does not parse: {e}"))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(n) = name {
                names.push(n.to_ascii_lowercase());
            }
        }
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

/// The certificates served, chosen per handshake by SNI: an exact name
/// first, then a `*.parent` wildcard, else the default (the first
/// configured), so a client without SNI or with an unknown name still gets
/// an answer it can check and refuse itself.
#[derive(Debug, Default)]
pub struct CertStore {
    slots: RwLock<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    loaded: Vec<Option<Loaded>>,
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl CertStore {
    pub fn with_slots(n: usize) -> Self {
        let store = Self::default();
        store.write().loaded = vec![None; n];
        store
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Slots> {
        self.slots.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `cert` in slot `i` (replacing what was there) for the next
    /// handshakes; open connections keep the one they started with.
    pub fn set(&self, i: usize, cert: Loaded) {
        let mut slots = self.write();
        if let Some(slot) = slots.loaded.get_mut(i) {
            *slot = Some(cert);
        }
        let mut by_name = HashMap::new();
        // Reverse order: when two certificates hold a name, the one listed
        // first wins, like the default.
        for loaded in slots.loaded.iter().rev().flatten() {
            for n in &loaded.names {
                by_name.insert(n.clone(), loaded.key.clone());
            }
        }
        slots.default = slots.loaded.iter().flatten().next().map(|l| l.key.clone());
        slots.by_name = by_name;
    }

    /// What slot `i` holds now.
    pub fn get(&self, i: usize) -> Option<Loaded> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots.loaded.get(i).cloned().flatten()
    }

    fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = sni {
            let name = name.to_ascii_lowercase();
            if let Some(k) = slots.by_name.get(&name) {
                return Some(k.clone());
            }
            if let Some((_, parent)) = name.split_once('.')
                && let Some(k) = slots.by_name.get(&format!("*.{parent}"))
            {
                return Some(k.clone());
            }
        }
        slots.default.clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}
