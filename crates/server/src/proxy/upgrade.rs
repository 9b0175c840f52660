//! Upgraded connections: only WebSocket. Once both sides agree, the gate
//! copies bytes between them until either side closes or the visitor's
//! session ends (within [`SESSION_WATCH_EVERY`] of its
//! revocation reaching this node, or at its `session_ttl`). A WebSocket
//! alone does not keep a session alive: only requests through the gate
//! renew it, so a visitor who only talks over the socket idles out.
//!
//! Any other `Upgrade` (`h2c` above all: a proxy that tunnels it lets the
//! client speak HTTP/2 straight to the origin, past every later check) is
//! refused with `400 upgrade_not_supported` before the origin is asked, as is
//! a WebSocket handshake on HTTP/1.0 (see `Proxy::outgoing`).

use std::sync::Arc;
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::ProxyError;
use super::headers::HopFields;
use crate::serve::ConnectionSlot;

/// How often an upgraded connection checks that its session still holds.
pub const SESSION_WATCH_EVERY: Duration = Duration::from_millis(200);

/// Whether the session an upgraded connection belongs to is over; the
/// gate, which knows sessions, gives the proxy one with the request.
pub trait SessionEnd: Send + Sync + 'static {
    fn is_over(&self) -> bool;
}

/// One admitted session, watched by an upgraded connection (WebSocket)
/// that must close when the session ends.
#[derive(Clone)]
pub struct SessionWatch(Arc<dyn SessionEnd>);

impl std::fmt::Debug for SessionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWatch").finish_non_exhaustive()
    }
}

impl SessionWatch {
    pub fn new(end: impl SessionEnd) -> Self {
        Self(Arc::new(end))
    }

    /// Resolves once the session is over; checked every
    /// [`SESSION_WATCH_EVERY`], so within that of the revocation reaching
    /// this node.
    pub async fn ended(self) {
        let mut every = tokio::time::interval(SESSION_WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if self.0.is_over() {
                return;
            }
        }
    }
}

/// Refuses a request asking for any upgrade but WebSocket (one token,
/// any case); requests without `Upgrade` pass.
pub(super) fn check_asked(hop: &HopFields<'_>) -> Result<(), ProxyError> {
    let websocket = |v: &http::HeaderValue| {
        v.to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
    };
    match (hop.upgrades, hop.upgrade) {
        (0, _) => Ok(()),
        (1, Some(one)) if websocket(one) => Ok(()),
        _ => {
            crate::metrics::REJECTIONS.increment("upgrade_not_supported", 1);
            Err(ProxyError::UpgradeRefused)
        }
    }
}

/// The visitor's half of an upgrade: the connection to take over, its slot
/// under `server.max_connections`, and the session it belongs to (none on
/// unprotected paths).
pub(super) struct ClientSide {
    pub upgrade: OnUpgrade,
    pub slot: Option<ConnectionSlot>,
    pub session: Option<SessionWatch>,
}

/// Joins the visitor's and the origin's upgraded connections in a task of
/// its own, which ends when either side closes or the session ends.
///
/// The visitor's side resolves only after the `101` has been written back,
/// so this must be spawned, not awaited, by the handler that returns it.
pub(super) fn tunnel(client_side: ClientSide, origin_side: OnUpgrade) {
    let ClientSide {
        upgrade,
        slot,
        session,
    } = client_side;
    tokio::spawn(async move {
        // Held until both sockets are closed.
        let _slot = slot;
        let (client, origin) = match tokio::try_join!(upgrade, origin_side) {
            Ok(both) => both,
            Err(err) => {
                tracing::debug!(error = %err, "proxy: upgrade not completed");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut origin = TokioIo::new(origin);
        let ended = async {
            match session {
                Some(watch) => watch.ended().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            copied = tokio::io::copy_bidirectional(&mut client, &mut origin) => {
                if let Err(err) = copied {
                    tracing::debug!(error = %err, "proxy: upgraded connection ended");
                }
            }
            () = ended => {
                metrics::counter!("anteroom_upgrades_closed_total", "reason" => "session_ended")
                    .increment(1);
                tracing::debug!("proxy: upgraded connection closed, its session ended");
            }
        }
    });
}
