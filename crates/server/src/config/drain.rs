//! Drain and diagnostic settings of a node (`[server]` keys): owned by the
//! configuration, read by drain mode and by the node clock.

use std::time::Duration;

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
