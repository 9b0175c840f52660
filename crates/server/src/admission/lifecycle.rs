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
//! ends it on this node at once. Passes are renewed past half their life,
//! so idling is detected to within `pass_ttl / 2`.
//!
//! The store's expire sweep, run at every scheduler tick, ends sessions whose
//! time is up and records a revocation, which frees the slot at that tick.

use axum::http::{HeaderMap, HeaderValue};

use crate::app::{AppState, EventRuntime};
use crate::passes;

/// The end, in canonical µs, of a session that started at `start_ms` and was
/// last active at `now_ms`.
pub fn session_end_us(rt: &EventRuntime, start_ms: i64, now_ms: i64) -> i64 {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let idle_end = now_ms.saturating_add(ms(rt.config.session_idle_timeout));
    let life_end = start_ms.saturating_add(ms(rt.config.session_ttl));
    idle_end.min(life_end).saturating_mul(1000)
}

/// The gate's renewal of an active session's pass: a new pass carrying the
/// same session start, and the session's end moved forward in the background
/// (the request never waits for the store). Returns the `Set-Cookie` value.
pub fn renew(
    state: &AppState,
    rt: &EventRuntime,
    member: &str,
    session_start_us: i64,
    headers: &HeaderMap,
) -> HeaderValue {
    let now = state.now_ms();
    let start_ms = session_start_us.div_euclid(1000);
    let (pass, _) = passes::issue(&state.keyring, rt, member, now, session_start_us);
    let store = state.store.clone();
    let event = rt.id().clone();
    let owned = member.to_owned();
    let until_us = session_end_us(rt, start_ms, now);
    let state_ref = state.events();
    let cookie = crate::api::redeem::pass_cookie(state, rt, headers, member, Some(&pass));
    tokio::spawn(async move {
        match store.extend(&event, &owned, until_us).await {
            Ok(true) => {}
            // Released, evicted or expired between the pass check and now:
            // the pass just issued must not work here either.
            Ok(false) => {
                if let Some(rt) = state_ref.get(&event) {
                    passes::store_says_gone_at(rt, &owned, session_start_us, now);
                }
            }
            Err(e) => {
                tracing::debug!(event = %event, error = e.kind(), "session extend failed");
            }
        }
    });
    cookie
}
