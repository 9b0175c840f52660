//! Who calls the admin API: the bearer token, matched in constant time
//! against every configured token, and what the token's role allows; and
//! how many wrong tokens an address may try.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{AdminRole, AdminToken};
use crate::error::ApiError;
use crate::identity::bearer;
use crate::state::AppState;

/// The caller of an admin request, as the audit trail names it.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The token's name (`admin` for `server.admin_token`).
    pub name: String,
    pub role: AdminRole,
}

/// The token `given` belongs to. Every configured token is compared, each
/// through its SHA-256 so the comparison has one length, with no early exit:
/// the time taken says nothing about which token, or how much of it, matched.
pub fn find(tokens: &[AdminToken], given: &str) -> Option<Caller> {
    let given = Sha256::digest(given.as_bytes());
    let mut found = None;
    for t in tokens {
        let hit = Sha256::digest(t.token.as_bytes()).ct_eq(&given);
        if bool::from(hit) {
            found = Some(Caller {
                name: t.name.clone(),
                role: t.role,
            });
        }
    }
    found
}

/// Wrong tokens an address may send within [`FAILURE_WINDOW`]; past them
/// its calls are answered `429` until the window ends, whatever token they
/// carry (a right one too: the answer must not tell a guess that hit).
pub const MAX_FAILURES: u32 = 20;
/// The window [`MAX_FAILURES`] counts over, from an address's first miss.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at once. Past it, after expired ones are forgotten, a
/// new address is not tracked: an attacker with that many addresses is
/// not slowed, but the operator is never locked out by someone else's
/// misses filling the table.
const MAX_TRACKED: usize = 16_384;

/// Failed admin authentications by client address (IPv6 by its /64), so
/// that a token cannot be guessed at the speed the listener answers.
#[derive(Debug, Default)]
pub struct Failures {
    by_address: Mutex<HashMap<u128, Strikes>>,
}

#[derive(Debug, Clone, Copy)]
struct Strikes {
    count: u32,
    since: Instant,
}

impl Failures {
    /// `Some(seconds)` to wait when `ip` has used up its misses.
    pub fn locked_out(&self, ip: IpAddr, now: Instant) -> Option<u64> {
        let key = crate::client_ip::address_key(ip);
        let map = crate::locks::lock(&self.by_address);
        let strikes = map.get(&key)?;
        let ends = strikes.since + FAILURE_WINDOW;
        (strikes.count >= MAX_FAILURES && now < ends)
            .then(|| ends.duration_since(now).as_secs().max(1))
    }

    /// Counts one wrong (or missing) token from `ip`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let key = crate::client_ip::address_key(ip);
        let mut map = crate::locks::lock(&self.by_address);
        if map.len() >= MAX_TRACKED && !map.contains_key(&key) {
            map.retain(|_, s| now < s.since + FAILURE_WINDOW);
            if map.len() >= MAX_TRACKED {
                return;
            }
        }
        let strikes = map.entry(key).or_insert(Strikes {
            count: 0,
            since: now,
        });
        if now >= strikes.since + FAILURE_WINDOW {
            *strikes = Strikes {
                count: 0,
                since: now,
            };
        }
        strikes.count = strikes.count.saturating_add(1);
    }
}

/// Middleware of every `/admin/*` route: `401` without a known token, `403`
/// for a write with a read-only one; the caller goes on as an extension.
/// An address that sent [`MAX_FAILURES`] wrong tokens within
/// [`FAILURE_WINDOW`] gets `429 rate_limited` until the window ends (by
/// the TCP peer: the admin listener is reached directly, not through the
/// public listener's trusted proxies).
pub async fn authorize(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let ip = crate::api::peer(req.extensions());
    let now = Instant::now();
    if let Some(retry_after_secs) = state.admin_failures.locked_out(ip, now) {
        return ApiError::RateLimited { retry_after_secs }.into_response();
    }
    let given = bearer(req.headers()).unwrap_or("");
    let Some(caller) = (!given.is_empty())
        .then(|| find(&state.server.admin_tokens, given))
        .flatten()
    else {
        state.admin_failures.failed(ip, now);
        return ApiError::Unauthorized.into_response();
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if caller.role == AdminRole::Read && !reads {
        return ApiError::Forbidden(format!("the admin token {:?} is read-only", caller.name))
            .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// `GET /admin/whoami`: the caller's token name and role, so the dashboard
/// hides the controls a read-only token cannot use.
pub async fn whoami(
    axum::extract::Extension(caller): axum::extract::Extension<Caller>,
) -> axum::Json<serde_json::Value> {
    let role = match caller.role {
        AdminRole::Admin => "admin",
        AdminRole::Read => "read-only",
    };
    axum::Json(serde_json::json!({ "name": caller.name, "role": role }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_misses_waits_out_the_window_and_others_do_not() {
        let failures = Failures::default();
        let t0 = Instant::now();
        let a: IpAddr = "198.51.100.7".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b_neighbour: IpAddr = "2001:db8:1:2::99".parse().unwrap();
        for _ in 0..MAX_FAILURES - 1 {
            failures.failed(a, t0);
        }
        assert_eq!(failures.locked_out(a, t0), None);
        failures.failed(a, t0);
        assert_eq!(failures.locked_out(a, t0), Some(60));
        assert_eq!(
            failures.locked_out(a, t0 + Duration::from_secs(59)),
            Some(1)
        );
        assert_eq!(failures.locked_out(a, t0 + FAILURE_WINDOW), None);
        // Another address is not held by a's misses; an IPv6 /64 counts
        // as one address.
        assert_eq!(failures.locked_out(b, t0), None);
        for _ in 0..MAX_FAILURES {
            failures.failed(b, t0);
        }
        assert!(failures.locked_out(b_neighbour, t0).is_some());
        // A new window starts from the next miss after one ends.
        failures.failed(a, t0 + FAILURE_WINDOW);
        assert_eq!(failures.locked_out(a, t0 + FAILURE_WINDOW), None);
    }

    #[test]
    fn finds_the_named_token_only() {
        let tokens = vec![
            AdminToken {
                name: "ops".into(),
                role: AdminRole::Admin,
                token: "ops-token-0123456789".into(),
            },
            AdminToken {
                name: "wall".into(),
                role: AdminRole::Read,
                token: "wall-token-0123456789".into(),
            },
        ];
        assert_eq!(find(&tokens, "wall-token-0123456789").unwrap().name, "wall");
        assert_eq!(
            find(&tokens, "ops-token-0123456789").unwrap().role,
            AdminRole::Admin
        );
        assert!(find(&tokens, "ops-token-012345678").is_none());
        assert!(find(&tokens, "").is_none());
    }
}
