//! The one connection type the backend talks through (standalone or
//! cluster), with every call bounded by the configured timeout and every
//! failure mapped to a [`StoreError`].

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    Arg, Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo, RedisError, Script, ServerErrorKind,
};

use crate::{StoreError, Unavailable, UnavailableKind};

/// A connection to standalone Redis or to a Redis Cluster. Both halves are
/// cheap clones of a multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The TCP settings of every connection to Redis: `TCP_NODELAY` on, which
/// redis-rs leaves off. Each connection is multiplexed (the join and poll
/// batchers, a tick's reads, every task of the node share one), so a
/// request is often written while an earlier one is unanswered; Nagle's
/// algorithm would hold it until that answer brings the acknowledgement,
/// a whole round trip, and requests meant to travel together would go one
/// round trip apart.
pub(crate) fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// A client for the standalone server (or one node) at `url`, on [`tcp`].
pub(crate) fn client(url: &str) -> Result<redis::Client, RedisError> {
    let info = url.into_connection_info()?.set_tcp_settings(tcp());
    redis::Client::open(info)
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

    /// Runs one script call built by [`Lua::call`] as one atomic step,
    /// bounded by `timeout` (the reload included).
    ///
    /// EVALSHA first; on NOSCRIPT (after `SCRIPT FLUSH`, a restart or a
    /// failover to a node that never saw it) EVAL sends the body, which also
    /// caches it again. Unlike `SCRIPT LOAD`, which a cluster client sends to
    /// every node, EVAL goes only to the slot's node, so a dead master
    /// elsewhere cannot stop the reload.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        script: &Lua,
        call: &Cmd,
        timeout: Duration,
    ) -> Result<T, StoreError> {
        let mut conn = self.clone();
        bounded(timeout, async move {
            match conn.raw(call).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    conn.raw(&script.by_body(call)).await
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

    /// `EVALSHA <sha> <#keys> <keys...>`; the caller appends the arguments.
    /// Arguments go straight into the command buffer (integers through
    /// redis-rs's formatting), with no intermediate allocation per argument.
    pub(crate) fn call(&self, keys: &[String]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(keys.len()).arg(keys);
        cmd
    }

    /// The same call as `EVAL <body> ...`, for when the server lost the script.
    fn by_body(&self, call: &Cmd) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.body);
        // Skip the verb and the SHA; everything after is the same.
        for arg in call.args_iter().skip(2) {
            if let Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
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
        Err(_) => Err(timed_out(timeout)),
    }
}

/// A call that got no answer within `timeout`.
pub(crate) fn timed_out(timeout: Duration) -> StoreError {
    StoreError::unavailable(
        UnavailableKind::TimedOut,
        format!("redis did not answer within {timeout:?}"),
    )
}

/// Answers that are not ours (a wrong type under our key, an unparsable reply)
/// are `Corrupt`; everything else (I/O, refused, cluster down, loading, a dead
/// master, out of memory) means the data cannot be reached now: `Unavailable`,
/// so the server drains rather than failing open or closed. The kind says
/// which (see [`unavailable_kind`]); the redis error is kept as the source.
pub(crate) fn map_error(e: &RedisError) -> StoreError {
    let corrupt = matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType)
        || e.code() == Some("WRONGTYPE");
    if corrupt {
        StoreError::Corrupt(format!("redis: {e}"))
    } else {
        Unavailable::new(unavailable_kind(e), format!("redis: {e}"))
            .with_source(e.clone())
            .into()
    }
}

/// Why a redis error kept the call from the data.
fn unavailable_kind(e: &RedisError) -> UnavailableKind {
    if e.is_timeout() {
        return UnavailableKind::TimedOut;
    }
    if e.is_connection_refusal() || e.is_connection_dropped() {
        return UnavailableKind::Refused;
    }
    match e.kind() {
        ErrorKind::ClusterConnectionNotFound
        | ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::CrossSlot
            | ServerErrorKind::ReadOnly,
        ) => UnavailableKind::Cluster,
        ErrorKind::Server(ServerErrorKind::BusyLoading) => UnavailableKind::Busy,
        _ if matches!(e.code(), Some("BUSY" | "OOM")) => UnavailableKind::Busy,
        _ => UnavailableKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::*;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::new(kind, "x"))
    }

    fn server(kind: ErrorKind, detail: &str) -> RedisError {
        RedisError::from((kind, "server", detail.to_owned()))
    }

    /// Each redis failure maps to the kind the drain decides by, and keeps
    /// the redis error as its source.
    #[test]
    fn redis_errors_map_to_their_kinds() {
        use std::io::ErrorKind as Io;
        let cases = [
            (io(Io::ConnectionRefused), UnavailableKind::Refused),
            (io(Io::ConnectionReset), UnavailableKind::Refused),
            (io(Io::BrokenPipe), UnavailableKind::Refused),
            (io(Io::UnexpectedEof), UnavailableKind::Refused),
            (io(Io::TimedOut), UnavailableKind::TimedOut),
            (
                server(
                    ErrorKind::Server(ServerErrorKind::ClusterDown),
                    "the cluster is down",
                ),
                UnavailableKind::Cluster,
            ),
            (
                server(
                    ErrorKind::Server(ServerErrorKind::Moved),
                    "3999 127.0.0.1:6381",
                ),
                UnavailableKind::Cluster,
            ),
            (
                server(ErrorKind::Server(ServerErrorKind::TryAgain), "resharding"),
                UnavailableKind::Cluster,
            ),
            (
                server(ErrorKind::Server(ServerErrorKind::MasterDown), "link down"),
                UnavailableKind::Cluster,
            ),
            (
                server(ErrorKind::ClusterConnectionNotFound, "no node"),
                UnavailableKind::Cluster,
            ),
            (
                server(ErrorKind::Server(ServerErrorKind::BusyLoading), "loading"),
                UnavailableKind::Busy,
            ),
            (
                server(ErrorKind::AuthenticationFailed, "bad password"),
                UnavailableKind::Other,
            ),
        ];
        for (e, want) in cases {
            let mapped = map_error(&e);
            assert_eq!(mapped.unavailable_kind(), Some(want), "{e}");
            let source = std::error::Error::source(&mapped).map(|s| s.to_string());
            assert_eq!(source, Some(e.to_string()), "{e}");
        }
        let wrong = server(ErrorKind::UnexpectedReturnType, "not a number");
        assert!(matches!(map_error(&wrong), StoreError::Corrupt(_)));
        let late = timed_out(Duration::from_millis(5));
        assert_eq!(late.unavailable_kind(), Some(UnavailableKind::TimedOut));
    }
}
