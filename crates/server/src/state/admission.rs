//! What this node observes for admission control, per event: the origin as
//! the gate saw it (adaptive mode), the capacity health poller (capacity
//! mode), and the admission history behind every visitor's ETA.

pub mod capacity;
pub mod eta;
pub mod origin;

use std::sync::Mutex;

use crate::locks::lock;

/// Per-event admission state that outlives config changes (it lives in
/// [`super::Live`]).
#[derive(Debug, Default)]
pub struct AdmissionLive {
    /// What the gate measured of the origin over the last seconds.
    pub origin: Mutex<origin::OriginWindow>,
    /// Admission history and the smoothed rate the ETA uses.
    pub eta: Mutex<eta::EtaFeed>,
    /// The capacity health poller's client and failure streak.
    pub capacity: capacity::Probe,
}

impl AdmissionLive {
    /// Records one proxied response for adaptive mode (called by the gate).
    pub fn record_origin(&self, now_ms: i64, latency_ms: i64, status: u16) {
        lock(&self.origin).record(now_ms, latency_ms, status);
    }
}
