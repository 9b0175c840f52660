//! Upgraded connections (WebSocket and other `101 Switching Protocols`):
//! once both sides agree, the gate only copies bytes between them.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

/// Joins the visitor's and the origin's upgraded connections in a task of
/// its own, which ends when either side closes.
///
/// The visitor's side resolves only after the `101` has been written back,
/// so this must be spawned, not awaited, by the handler that returns it.
pub(super) fn tunnel(client_side: OnUpgrade, origin_side: OnUpgrade) {
    tokio::spawn(async move {
        let (client, origin) = match tokio::try_join!(client_side, origin_side) {
            Ok(both) => both,
            Err(err) => {
                tracing::debug!(error = %err, "proxy: upgrade not completed");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut origin = TokioIo::new(origin);
        if let Err(err) = tokio::io::copy_bidirectional(&mut client, &mut origin).await {
            tracing::debug!(error = %err, "proxy: upgraded connection ended");
        }
    });
}
