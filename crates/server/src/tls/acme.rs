//! Certificates from an ACME CA (RFC 8555, through instant-acme) proved by
//! HTTP-01 on the redirect listener: the account key and the certificate
//! are kept in the storage directory, reused across restarts, and renewed
//! `renew_before` their expiry.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::crypto::CryptoProvider;
use sha2::{Digest as _, Sha256};

use super::certs::{self, CertStore, Loaded};
use super::redirect::Challenges;
use crate::config::tls::AcmeConfig;

/// The metric label and log name of the ACME certificate.
const NAME: &str = "server.tls.acme";
/// After a failed order, wait this long first, doubling up to an hour.
const FIRST_RETRY: Duration = Duration::from_secs(5);
const LAST_RETRY: Duration = Duration::from_secs(3600);
/// A valid certificate is looked at again at least this often (the clock
/// may jump; the files may be renewed by another node), and its expiry
/// gauge set again.
const RECHECK: Duration = Duration::from_secs(3600);

pub struct Acme {
    cfg: AcmeConfig,
    store: Arc<CertStore>,
    challenges: Challenges,
    provider: Arc<CryptoProvider>,
}

impl Acme {
    pub fn new(
        cfg: AcmeConfig,
        store: Arc<CertStore>,
        challenges: Challenges,
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&cfg.storage).with_context(|| {
            format!(
                "server.tls.acme.storage: cannot create {}",
                cfg.storage.display()
            )
        })?;
        restrict(&cfg.storage, 0o700);
        if let Some(root) = &cfg.ca_root {
            std::fs::metadata(root).with_context(|| {
                format!("server.tls.acme.ca_root: cannot read {}", root.display())
            })?;
        }
        Ok(Self {
            cfg,
            store,
            challenges,
            provider,
        })
    }

    fn cert_path(&self) -> PathBuf {
        self.cfg
            .storage
            .join(format!("{}.cert.pem", self.cfg.domains[0]))
    }

    fn key_path(&self) -> PathBuf {
        self.cfg
            .storage
            .join(format!("{}.key.pem", self.cfg.domains[0]))
    }

    /// One account per directory URL, so that moving from a staging CA to
    /// the real one never sends the staging key.
    fn account_path(&self) -> PathBuf {
        let digest = Sha256::digest(self.cfg.directory.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        self.cfg.storage.join(format!("account-{hex}.json"))
    }

    /// Serves the stored certificate, if there is one for these domains
    /// ([`Self::run`]'s first pass reports its expiry).
    pub fn load_stored(&self) {
        let (Ok(cert), Ok(key)) = (
            certs::read(&self.cert_path()),
            certs::read(&self.key_path()),
        ) else {
            return;
        };
        match certs::load_pem(&cert, &key, &self.provider) {
            Ok(loaded) if self.covers(&loaded) => {
                tracing::info!(names = ?loaded.names, "ACME certificate loaded from storage");
                self.store.set(0, loaded);
            }
            Ok(_) => {
                tracing::info!("stored ACME certificate lacks a configured domain; ordering anew")
            }
            Err(e) => {
                tracing::warn!(error = %e, file = %self.cert_path().display(), "stored ACME certificate unusable; ordering anew")
            }
        }
    }

    fn covers(&self, cert: &Loaded) -> bool {
        self.cfg
            .domains
            .iter()
            .all(|d| cert.names.iter().any(|n| n.eq_ignore_ascii_case(d)))
    }

    /// Orders when there is no certificate or it is due, forever.
    pub async fn run(self) {
        let mut retry = FIRST_RETRY;
        let mut warned = false;
        loop {
            let now = super::unix_now();
            // The certificate served keeps its expiry gauge moving on every
            // pass, a failed order's included: set only when one was loaded
            // or issued, a certificate the CA would not renew read 90 days
            // left for good, and the expiry alerts never fired.
            if let Some(served) = self.store.get(0) {
                super::keep_expiry(NAME, &served, now, &mut warned);
            }
            let renew_before = i64::try_from(self.cfg.renew_before.as_secs()).unwrap_or(i64::MAX);
            let wait = match self.store.get(0) {
                Some(c) => c.not_after.saturating_sub(renew_before).saturating_sub(now),
                None => 0,
            };
            if wait > 0 {
                let wait = Duration::from_secs(u64::try_from(wait).unwrap_or(0)).min(RECHECK);
                tokio::time::sleep(wait).await;
                continue;
            }
            match self.order().await {
                Ok(loaded) => {
                    tracing::info!(names = ?loaded.names, not_after = loaded.not_after, "ACME certificate issued");
                    let now = super::unix_now();
                    warned = super::report_expiry(NAME, &loaded, now);
                    let due_at_once = loaded.not_after.saturating_sub(renew_before) <= now;
                    self.store.set(0, loaded);
                    metrics::counter!("anteroom_tls_acme_orders_total", "result" => "ok")
                        .increment(1);
                    retry = FIRST_RETRY;
                    if due_at_once {
                        // Never a tight loop of orders against the CA.
                        tracing::warn!(
                            renew_before = ?self.cfg.renew_before,
                            "server.tls.acme.renew_before is longer than the CA's certificate lifetime; next order in an hour"
                        );
                        tokio::time::sleep(LAST_RETRY).await;
                    }
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), directory = %self.cfg.directory, retry_in = ?retry, "ACME order failed");
                    metrics::counter!("anteroom_tls_acme_orders_total", "result" => "error")
                        .increment(1);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(LAST_RETRY);
                }
            }
        }
    }

    fn builder(&self) -> anyhow::Result<instant_acme::AccountBuilder> {
        Ok(match &self.cfg.ca_root {
            Some(root) => Account::builder_with_root(root)
                .with_context(|| format!("server.tls.acme.ca_root: {}", root.display()))?,
            None => Account::builder()?,
        })
    }

    async fn account(&self) -> anyhow::Result<Account> {
        let path = self.account_path();
        if let Ok(bytes) = std::fs::read(&path) {
            let creds: AccountCredentials = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not an ACME account", path.display()))?;
            return Ok(self.builder()?.from_credentials(creds).await?);
        }
        let contact: Vec<&str> = self.cfg.contact.iter().map(String::as_str).collect();
        let (account, creds) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.cfg.directory.clone(),
                None,
            )
            .await
            .context("creating the ACME account")?;
        write_private(&path, serde_json::to_string(&creds)?.as_bytes())?;
        tracing::info!(file = %path.display(), "ACME account created");
        Ok(account)
    }

    async fn order(&self) -> anyhow::Result<Loaded> {
        let account = self.account().await?;
        let identifiers: Vec<Identifier> = self
            .cfg
            .domains
            .iter()
            .map(|d| Identifier::Dns(d.clone()))
            .collect();
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .context("new order")?;
        let mut tokens = Vec::new();
        let proved = self.prove(&mut order, &mut tokens).await;
        let result = match proved {
            Ok(()) => self.finish(&mut order).await,
            Err(e) => Err(e),
        };
        for t in &tokens {
            self.challenges.remove(t);
        }
        result
    }

    /// Answers every pending authorization's HTTP-01 challenge.
    async fn prove(
        &self,
        order: &mut instant_acme::Order,
        tokens: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.context("authorization")?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => bail!("authorization is {other:?}"),
            }
            let mut challenge = authz
                .challenge(ChallengeType::Http01)
                .ok_or_else(|| anyhow!("the CA offers no http-01 challenge"))?;
            let key_authorization = challenge.key_authorization().as_str().to_owned();
            self.challenges
                .insert(challenge.token.clone(), key_authorization);
            tokens.push(challenge.token.clone());
            challenge.set_ready().await.context("challenge ready")?;
        }
        Ok(())
    }

    async fn finish(&self, order: &mut instant_acme::Order) -> anyhow::Result<Loaded> {
        let patience = RetryPolicy::new().timeout(Duration::from_secs(120));
        let status = order.poll_ready(&patience).await.context("order")?;
        if status != OrderStatus::Ready {
            bail!("order is {status:?}, not ready: {:?}", order.state().error);
        }
        let key_pem = order.finalize().await.context("finalize")?;
        let chain_pem = order
            .poll_certificate(&patience)
            .await
            .context("certificate")?;
        let loaded = certs::load_pem(chain_pem.as_bytes(), key_pem.as_bytes(), &self.provider)
            .map_err(|e| anyhow!("issued certificate unusable: {e}"))?;
        // Key first: a crash between the two leaves a pair that does not
        // match, which the next start refuses and orders again.
        write_private(&self.key_path(), key_pem.as_bytes())?;
        write_private(&self.cert_path(), chain_pem.as_bytes())?;
        Ok(loaded)
    }
}

/// Writes through a temporary file and a rename, readable by the owner only.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(unix)]
fn restrict(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}
#[cfg(not(unix))]
fn restrict(_: &Path, _: u32) {}
