//! Session lifecycle: when an active session ends.
//!
//! A session ends by release, by its absolute lifetime `session_ttl` counted
//! from the redeem, or by idling: no request through the gate for
//! `session_idle_timeout`. The store holds one end time per session; the
//! redeem sets it to `min(start + idle, start + ttl)` and every pass renewal
//! by the gate moves it to `min(now + idle, start + ttl)`. The session start
//! travels inside the signed pass (see `passes::session_start_ms`), so any
//! node renews without a store read. Passes are renewed past half their life,
//! so idling is detected to within `pass_ttl / 2`.
//!
//! The store's expire sweep, run at every scheduler tick, ends sessions whose
//! time is up and records a revocation, which frees the slot at that tick.

use axum::http::{HeaderMap, HeaderValue};

use crate::app::{AppState, EventRuntime};
use crate::passes::{self, PassCheck};

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
    headers: &HeaderMap,
) -> HeaderValue {
    let now = state.now_ms();
    let cookie = state.server.cookies.pass(headers);
    let start = match passes::check(state, rt, member, cookie, now) {
        PassCheck::Valid { claims, .. } | PassCheck::Expired { claims } => {
            passes::session_start_ms(&claims, rt, now)
        }
        PassCheck::Missing => now,
    };
    let (pass, _) = passes::issue_for_session(&state.keyring, rt, member, now, start);
    let store = state.store.clone();
    let event = rt.id().clone();
    let cookie = crate::api::redeem::pass_cookie(state, rt, headers, member, Some(&pass));
    let member = member.to_owned();
    let until_us = session_end_us(rt, start, now);
    tokio::spawn(async move {
        if let Err(e) = store.extend(&event, &member, until_us).await {
            tracing::debug!(event = %event, error = e.kind(), "session extend failed");
        }
    });
    cookie
}
