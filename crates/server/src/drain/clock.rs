//! Drain and diagnostic settings of a node, and the node clock built from
//! them: the system clock, shifted by a test-only offset so a test can run
//! gateway nodes whose clocks disagree and show that the queue order does
//! not depend on them (it comes from the store's canonical clock).

use std::sync::Arc;
use std::time::Duration;

use crate::app::{Clock, SystemClock};

/// `[server]` keys used by drain mode and the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainSettings {
    /// How many gateway nodes share the store (`server.gateway_nodes`, default
    /// 1): while draining, each node admits at most this fraction of the
    /// capacity left, so the nodes together stay within `max_active`.
    pub gateway_nodes: u64,
    /// How long a store that times out (rather than refusing) must keep
    /// failing every probe before its events drain (`server.drain_after`,
    /// default 1 s): a busy store must not flip events into drain.
    pub drain_after: Duration,
    /// `store.timeout` (1 s for the embedded store), which bounds the probe.
    pub store_timeout: Duration,
    /// TEST/DIAGNOSTIC ONLY (`server.test_clock_offset_ms`, default 0): shifts
    /// this node's wall clock to simulate clock skew between nodes.
    pub test_clock_offset_ms: i64,
}

impl Default for DrainSettings {
    fn default() -> Self {
        Self {
            gateway_nodes: 1,
            drain_after: DEFAULT_DRAIN_AFTER,
            store_timeout: Duration::from_secs(1),
            test_clock_offset_ms: 0,
        }
    }
}

/// Default of `server.drain_after`: a real outage drains within about a second.
pub const DEFAULT_DRAIN_AFTER: Duration = Duration::from_secs(1);

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

/// The node clock for `settings`: the plain system clock unless a test
/// offset is configured.
pub fn node_clock(settings: &DrainSettings) -> Arc<dyn Clock> {
    if settings.test_clock_offset_ms == 0 {
        Arc::new(SystemClock)
    } else {
        Arc::new(OffsetClock {
            offset_ms: settings.test_clock_offset_ms,
        })
    }
}
