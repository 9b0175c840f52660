//! What the test modules share: servers (in process and as the real
//! binary), origins, visitors, configs, and the browser, TLS and raw-socket
//! clients.

pub mod admission;
pub mod bots;
pub mod browser;
pub mod config;
pub mod cut;
pub mod faulty;
pub mod logs;
pub mod origin;
pub mod process;
pub mod proxy;
pub mod raw;
pub mod server;
pub mod tls;
pub mod visitor;
pub mod wired;

use std::time::{Duration, Instant};

/// A loopback port free now (bind port 0, read it, release it), for a
/// process that must be told its port before it starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it holds; fails the test after `limit`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
