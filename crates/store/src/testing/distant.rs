//! A TCP proxy that puts Redis a fixed delay away from its clients: every
//! byte a client sends arrives `delay` later, in order, so each round trip
//! costs `delay` more, as a store across a network would.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio::time::Instant;

pub struct DistantProxy {
    pub port: u16,
    accept: AbortHandle,
}

impl DistantProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub async fn start(target: u16, delay: Duration) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let accept = tokio::spawn(serve(listener, target, delay)).abort_handle();
        Ok(Self { port, accept })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Forwards each connection `listener` accepts to `127.0.0.1:target`, its
/// requests `delay` late (also the simulator's `distant`, for rehearsals
/// with the store across a network).
pub async fn serve(listener: TcpListener, target: u16, delay: Duration) {
    while let Ok((client, _)) = listener.accept().await {
        tokio::spawn(forward(client, target, delay));
    }
}

/// Answers come back at once; requests are held `delay` each, never
/// reordered, and a pipelined burst still travels together.
async fn forward(client: TcpStream, target: u16, delay: Duration) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    // Nagle's algorithm would hold a request behind the last one's
    // acknowledgement (up to 40 ms on loopback): the only delay added is
    // to be `delay`.
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to_server.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = from_client.read(&mut buf).await {
        if n == 0
            || tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
    back.abort();
}

impl Drop for DistantProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
