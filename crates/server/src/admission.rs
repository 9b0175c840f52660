//! Admission control at run time: what the scheduler reads of each event
//! beyond the store (the origin's health endpoint in capacity mode, the
//! origin's latency and errors as the gate saw them in adaptive mode), and
//! when a session ends ([`lifecycle`]). The observations themselves live in
//! the event's state (`state::admission`); the decisions are
//! `anteroom_core::policy`'s; this module only feeds them.

pub mod lifecycle;

use crate::locks::lock;

/// What the policy sees of the origin at one tick, beyond the store's counts:
/// capacity mode's reading of the health endpoint, adaptive mode's window of
/// gate observations. Only the active mode's signal is gathered.
pub async fn observe_origin(
    rt: &crate::state::EventRuntime,
    now_ms: i64,
    observed: &mut anteroom_core::policy::Observed,
) {
    match &rt.config.admission {
        crate::config::Admission::Capacity {
            health_url, field, ..
        } => {
            let probe = &rt.live.admission.capacity;
            match probe.read(health_url, field).await {
                Ok(n) => observed.downstream_concurrency = Some(n),
                Err(e) => {
                    // Unknown means admit nothing new; say so once per outage
                    // in the log, every time in the metric.
                    observed.downstream_concurrency = None;
                    metrics::counter!("anteroom_capacity_signal_errors_total",
                        "event" => rt.id().to_string(), "reason" => e.label())
                    .increment(1);
                    if probe.failures() == 1 {
                        tracing::warn!(event = %rt.id(), url = %health_url, error = %e,
                            "capacity signal lost; admitting nobody new until it returns");
                    }
                }
            }
        }
        crate::config::Admission::Adaptive { .. } => {
            let s = lock(&rt.live.admission.origin).summary(now_ms);
            observed.origin_p95_ms = s.p95_ms;
            observed.origin_error_rate = s.error_rate;
            observed.origin_samples = s.samples;
        }
        _ => {}
    }
}
