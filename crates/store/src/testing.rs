//! Test helpers that start real `redis-server` processes on free loopback
//! ports and stop them by PID: a standalone [`RedisServer`] and a
//! [`RedisCluster`] of masters, and a [`DistantProxy`] that puts a server a
//! network's delay away. Shared by this crate's tests, the server's and the
//! sim's, behind the `conformance` feature.
//!
//! A missing `redis-server` / `redis-cli` is an error naming the package to
//! install, so a test never passes silently without Redis. The same holds
//! for [`HungDisk`], a directory whose disk hangs on command (`bindfs`).

mod cluster;
mod distant;
mod hung_disk;
mod server;

pub use self::cluster::RedisCluster;
pub use self::distant::{DistantProxy, serve as serve_distant};
pub use self::hung_disk::{Frozen, HungDisk};
pub use self::server::RedisServer;

/// Waits (10 s at most) until `n` connections to the Redis at `url`
/// listen for the admission news between nodes: news published before a
/// node subscribes is not replayed, so a test publishes only after this.
pub async fn wait_for_news_listeners(url: &str, n: i64) -> anyhow::Result<()> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(crate::redis::NEWS_CHANNEL)
            .query_async(&mut conn)
            .await?;
        if counts.first().map(|c| c.1) == Some(n) {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{n} admission-news listeners never subscribed at {url}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What every helper answers when the Redis binaries are not installed.
pub const MISSING_REDIS: &str = "redis-server not found: install it with `apt-get install redis-server` (scripts/test does this)";
