//! Session lifecycle: when an active session ends.
//!
//! A session ends by release, by its absolute lifetime `session_ttl` counted
//! from the redeem, or by idling: no request through the gate for
//! `session_idle_timeout`. The store holds one end time per session; the
//! redeem sets it to `min(start + idle, start + ttl)` and every pass renewal
//! by the gate moves it to `min(now + idle, start + ttl)`. The session start
//! travels inside the signed pass (see `passes::session_start_us`), so any
//! node renews without a store read; a renewal never carries a pass past the
//! session's end, and a renewal that finds the session gone in the store
//! ends it on this node at once (the renewal is the gate's, `gate::renew`).
//! Passes are renewed past half their life, so idling is detected to within
//! `pass_ttl / 2`.
//!
//! The store's expire sweep, run at every scheduler tick, ends sessions whose
//! time is up and records a revocation, which frees the slot at that tick.

use crate::state::EventRuntime;

/// The end, in canonical µs, of a session that started at `start_ms` and was
/// last active at `now_ms`.
pub fn session_end_us(rt: &EventRuntime, start_ms: i64, now_ms: i64) -> i64 {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let idle_end = now_ms.saturating_add(ms(rt.config.session_idle_timeout));
    let life_end = start_ms.saturating_add(ms(rt.config.session_ttl));
    idle_end.min(life_end).saturating_mul(1000)
}
