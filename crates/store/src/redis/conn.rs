//! The one connection type the backend talks through (standalone or
//! cluster), with every call bounded by the configured timeout and every
//! failure mapped to a [`StoreError`].

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind};

use crate::StoreError;

/// A connection to standalone Redis or to a Redis Cluster. Both halves are
/// cheap clones of a multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Runs one command, bounded by `timeout`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, StoreError> {
        let mut conn = self.clone();
        bounded(timeout, async move { conn.raw(cmd).await }).await
    }

    /// Runs `script` with `keys` and `args` as one atomic step, bounded by
    /// `timeout` (the reload included).
    ///
    /// EVALSHA first; on NOSCRIPT (after `SCRIPT FLUSH`, a restart or a
    /// failover to a node that never saw it) EVAL sends the body, which also
    /// caches it again. Unlike `SCRIPT LOAD`, which a cluster client sends to
    /// every node, EVAL goes only to the slot's node, so a dead master
    /// elsewhere cannot stop the reload.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        script: &Lua,
        keys: &[String],
        args: &[Vec<u8>],
        timeout: Duration,
    ) -> Result<T, StoreError> {
        let mut conn = self.clone();
        bounded(timeout, async move {
            let by_hash = script.cmd("EVALSHA", script.script.get_hash(), keys, args);
            match conn.raw(&by_hash).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    let by_body = script.cmd("EVAL", script.body, keys, args);
                    conn.raw(&by_body).await
                }
                other => other,
            }
        })
        .await
    }

    async fn raw<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// One Lua script: its body (for EVAL) and its SHA1 (for EVALSHA).
pub(crate) struct Lua {
    body: &'static str,
    script: Script,
}

impl Lua {
    pub(crate) fn new(body: &'static str) -> Self {
        Self {
            body,
            script: Script::new(body),
        }
    }

    fn cmd(&self, verb: &str, first: &str, keys: &[String], args: &[Vec<u8>]) -> Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(first).arg(keys.len()).arg(keys);
        for a in args {
            cmd.arg(a.as_slice());
        }
        cmd
    }
}

/// Awaits `fut` for at most `timeout`: a stopped or unreachable server makes
/// the call fail as `Unavailable`, never hang.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(map_error(&e)),
        Err(_) => Err(StoreError::Unavailable(format!(
            "redis did not answer within {timeout:?}"
        ))),
    }
}

/// Answers that are not ours (a wrong type under our key, an unparsable reply)
/// are `Corrupt`; everything else (I/O, refused, cluster down, loading, a dead
/// master, out of memory) means the data cannot be reached now: `Unavailable`,
/// so the server drains rather than failing open or closed.
pub(crate) fn map_error(e: &RedisError) -> StoreError {
    let corrupt = matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType)
        || e.code() == Some("WRONGTYPE");
    if corrupt {
        StoreError::Corrupt(format!("redis: {e}"))
    } else {
        StoreError::Unavailable(format!("redis: {e}"))
    }
}
