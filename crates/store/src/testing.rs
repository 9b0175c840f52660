//! Test helpers that start real `redis-server` processes on free loopback
//! ports and stop them by PID: a standalone [`RedisServer`] and a
//! [`RedisCluster`] of masters. Shared by this crate's tests, the server's and
//! the sim's, behind the `conformance` feature.
//!
//! A missing `redis-server` / `redis-cli` is an error naming the package to
//! install, so a test never passes silently without Redis.

mod cluster;
mod server;

pub use self::cluster::RedisCluster;
pub use self::server::RedisServer;

/// What every helper answers when the Redis binaries are not installed.
pub const MISSING_REDIS: &str = "redis-server not found: install it with `apt-get install redis-server` (scripts/test does this)";
