//! The wall clock, injected so tests and the core see one source of time,
//! and the node clock: the system clock, shifted by a test-only offset so a
//! test can run gateway nodes whose clocks disagree and show that the queue
//! order does not depend on them (it comes from the store's canonical clock).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock, injected so tests and the core see one source of time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        i64::try_from(ms).unwrap_or(i64::MAX)
    }
}

/// The system clock shifted by a fixed offset.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms().saturating_add(self.offset_ms)
    }
}

/// The node clock: the plain system clock unless a test offset
/// (`server.test_clock_offset_ms`) is configured.
pub fn node_clock(test_offset_ms: i64) -> Arc<dyn Clock> {
    if test_offset_ms == 0 {
        Arc::new(SystemClock)
    } else {
        Arc::new(OffsetClock {
            offset_ms: test_offset_ms,
        })
    }
}

/// RFC 3339 with milliseconds, UTC: `2026-12-01T10:03:12.412Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}
