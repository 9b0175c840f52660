//! The store's errors: where each came from, and for a store that cannot be
//! reached, why ([`UnavailableKind`]), so the server can decide by the kind
//! (drain at once when nothing listens, wait out slowness) rather than only
//! by how long the failure took.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// Where a store error came from, so the server maps it once to a status,
/// a stable JSON code and a metric label.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot be reached or did not answer in time: the server
    /// drains the affected event(s). Says why, and keeps the error beneath.
    #[error(transparent)]
    Unavailable(Unavailable),
    /// The caller passed something the store refuses (bad id, oversized member).
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    /// The data on disk or in Redis is not ours or is damaged.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    /// The disk is full or not writable; nothing unacknowledged was claimed durable.
    #[error("store storage failure: {0}")]
    Storage(String),
}

impl StoreError {
    /// Stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::InvalidInput(_) => "invalid_input",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Storage(_) => "storage",
        }
    }

    /// An unavailable store, for `why` of `kind`, with no error beneath.
    pub fn unavailable(kind: UnavailableKind, why: impl Into<String>) -> Self {
        StoreError::Unavailable(Unavailable::new(kind, why))
    }

    /// Why the store is unavailable, if that is the error.
    pub fn unavailable_kind(&self) -> Option<UnavailableKind> {
        match self {
            StoreError::Unavailable(u) => Some(u.kind()),
            _ => None,
        }
    }

    /// The same error again, for each caller of one failed batch.
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            StoreError::Unavailable(u) => StoreError::Unavailable(u.clone()),
            StoreError::InvalidInput(s) => StoreError::InvalidInput(s),
            StoreError::Corrupt(s) => StoreError::Corrupt(s.clone()),
            StoreError::Storage(s) => StoreError::Storage(s.clone()),
        }
    }
}

impl From<Unavailable> for StoreError {
    fn from(u: Unavailable) -> Self {
        StoreError::Unavailable(u)
    }
}

/// Why a store could not be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnavailableKind {
    /// The connection was refused, reset or dropped: nothing serves there now.
    Refused,
    /// No answer within the timeout: the store may be gone, or only busy.
    TimedOut,
    /// Redis Cluster could not route the call: the slot moved (MOVED/ASK not
    /// followed), the cluster or the slot's master is down, TRYAGAIN while
    /// resharding, a write reached a demoted master (READONLY).
    Cluster,
    /// The server is there but will not serve now: loading its data set, a
    /// script running too long (BUSY), out of memory.
    Busy,
    /// The embedded store's disk failed: a write, fsync or open of its file.
    Disk,
    /// The store's own machinery stopped (an event's actor, a batch driver,
    /// a blocking task), or this store cannot do what was asked.
    Stopped,
    /// Anything else that kept the call from the data (authentication,
    /// another I/O error).
    Other,
}

impl UnavailableKind {
    /// Stable label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            UnavailableKind::Refused => "refused",
            UnavailableKind::TimedOut => "timed_out",
            UnavailableKind::Cluster => "cluster",
            UnavailableKind::Busy => "busy",
            UnavailableKind::Disk => "disk",
            UnavailableKind::Stopped => "stopped",
            UnavailableKind::Other => "other",
        }
    }
}

impl fmt::Display for UnavailableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The store cannot be reached: of which kind, what was being done, and
/// the error beneath (kept as [`Error::source`]). Cheap to clone, so one
/// failure can answer every caller of a batch.
#[derive(Clone, Debug)]
pub struct Unavailable {
    kind: UnavailableKind,
    why: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl Unavailable {
    pub fn new(kind: UnavailableKind, why: impl Into<String>) -> Self {
        Self {
            kind,
            why: why.into(),
            source: None,
        }
    }

    /// Keeps `e` as the error beneath this one.
    pub fn with_source(mut self, e: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(e));
        self
    }

    pub fn kind(&self) -> UnavailableKind {
        self.kind
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue store unavailable: {}", self.why)
    }
}

impl Error for Unavailable {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_unchanged_and_the_source_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e: StoreError = Unavailable::new(UnavailableKind::Refused, "redis: refused")
            .with_source(io)
            .into();
        assert_eq!(e.to_string(), "queue store unavailable: redis: refused");
        assert_eq!(e.kind(), "unavailable");
        assert_eq!(e.unavailable_kind(), Some(UnavailableKind::Refused));
        let source = e.source().map(|s| s.to_string());
        assert_eq!(source.as_deref(), Some("refused"));
        let again = e.duplicate();
        assert_eq!(again.unavailable_kind(), Some(UnavailableKind::Refused));
        assert!(again.source().is_some());
        assert_eq!(StoreError::InvalidInput("x").unavailable_kind(), None);
    }
}
