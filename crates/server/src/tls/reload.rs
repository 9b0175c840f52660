//! Certificate files re-read without a restart: every `reload_interval` and
//! on `SIGHUP`, a pair whose bytes changed is loaded again; a bad new pair
//! keeps the old certificate serving, logs an error naming the file and
//! sets `anteroom_tls_reload_failed{cert}` to 1 until a good pair is read.

use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use sha2::{Digest as _, Sha256};

use super::certs::{self, CertStore};
use crate::config::tls::CertFiles;

/// What a pair's files held when last looked at.
#[derive(Default)]
struct Seen {
    digest: Option<[u8; 32]>,
    warned_expiry: bool,
}

pub(super) async fn run(
    files: Vec<CertFiles>,
    store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
    every: Duration,
    mut hangup: Hangup,
) {
    let mut seen: Vec<Seen> = files
        .iter()
        .map(|f| Seen {
            digest: digest(f),
            warned_expiry: false,
        })
        .collect();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            _ = recv_hangup(&mut hangup) => true,
        };
        let now = super::unix_now();
        for (i, f) in files.iter().enumerate() {
            check_pair(i, f, &mut seen[i], &store, &provider, forced, now);
        }
    }
}

fn check_pair(
    i: usize,
    f: &CertFiles,
    seen: &mut Seen,
    store: &CertStore,
    provider: &CryptoProvider,
    forced: bool,
    now: i64,
) {
    let d = digest(f);
    if forced || d != seen.digest {
        seen.digest = d;
        match certs::load_files(f, provider) {
            Ok(loaded) => {
                tracing::info!(cert = %f.key_name, names = ?loaded.names, file = %f.cert.display(), "TLS certificate loaded");
                seen.warned_expiry = super::report_expiry(&f.key_name, &loaded, now);
                store.set(i, loaded);
                metrics::gauge!("anteroom_tls_reload_failed", "cert" => f.key_name.clone())
                    .set(0.0);
            }
            Err(e) => {
                tracing::error!(error = %e, file = %e.file, "TLS certificate reload failed; the previous certificate stays in use");
                metrics::gauge!("anteroom_tls_reload_failed", "cert" => f.key_name.clone())
                    .set(1.0);
                metrics::counter!("anteroom_tls_reload_failures_total", "cert" => f.key_name.clone())
                    .increment(1);
            }
        }
        return;
    }
    // Unchanged: keep the expiry gauge moving, and warn once as it crosses.
    if let Some(current) = store.get(i) {
        super::keep_expiry(&f.key_name, &current, now, &mut seen.warned_expiry);
    }
}

/// Both files' bytes, hashed: a rewrite in place, a rename over the file or
/// a symlink switch all show, whatever the file times say.
fn digest(f: &CertFiles) -> Option<[u8; 32]> {
    let cert = super::certs::read(&f.cert).ok()?;
    let key = super::certs::read(&f.key).ok()?;
    let mut h = Sha256::new();
    h.update((cert.len() as u64).to_le_bytes());
    h.update(&cert);
    h.update(&key);
    Some(h.finalize().into())
}

#[cfg(unix)]
pub(super) type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
pub(super) type Hangup = Option<()>;

/// Listens for `SIGHUP` from now on: called before the reload task is
/// spawned, since until a handler is in place the signal ends the process.
#[cfg(unix)]
pub(super) fn hangup_signal() -> Hangup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}
#[cfg(not(unix))]
pub(super) fn hangup_signal() -> Hangup {
    None
}

async fn recv_hangup(h: &mut Hangup) {
    #[cfg(unix)]
    if let Some(s) = h {
        s.recv().await;
        return;
    }
    let _ = h;
    std::future::pending::<()>().await
}
