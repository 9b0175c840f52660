//! Who calls the admin API: the bearer token, matched in constant time
//! against every configured token, and what the token's role allows; and
//! how many wrong tokens an address may try (`state::guesses`).

use std::sync::Arc;
use std::time::Instant;

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

/// Middleware of every `/admin/*` route: `401` without a known token, `403`
/// for a write with a read-only one; the caller goes on as an extension.
/// An address that sent `state::guesses::MAX_FAILURES` wrong tokens within
/// its window (requests without one do not count) gets `429 rate_limited`
/// until the window ends (by the TCP
/// peer: the admin listener is reached directly, not through the public
/// listener's trusted proxies).
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
    // Only a token given and wrong counts as a guess. A request with none
    // is what any page open in the operator's browser can send cross-site
    // (an image, a form, a no-cors fetch: none can carry the header
    // without a CORS preflight, never granted here): counted, twenty a
    // minute from such a page kept the operator's own address, and everyone
    // behind its NAT, locked out for as long as it stayed open.
    let given = bearer(req.headers()).unwrap_or("");
    if given.is_empty() {
        return ApiError::Unauthorized.into_response();
    }
    let Some(caller) = find(&state.server.admin_tokens, given) else {
        state.admin_failures.failed(ip, now);
        return ApiError::Unauthorized.into_response();
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if caller.role == AdminRole::Read && !reads {
        return ApiError::Forbidden(format!("the admin token {:?} is read-only", caller.name))
            .into_response();
    }
    req.extensions_mut().insert(caller);
    if reads {
        return next.run(req).await;
    }
    // A change runs to its end once it has begun, in a task of its own:
    // were it run in the connection's, a client that went away mid-way
    // (a closed tab, a timed-out script) would cancel it between its store
    // write and its audit entry and its taking effect on this node, which
    // would then run the old state until a restart put the stored one in
    // force, unrecorded.
    match state.admin_changes.spawn(next.run(req)).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "admin change failed");
            ApiError::Internal.into_response()
        }
    }
}

/// `GET /admin/whoami`: the caller's token name and role, so the dashboard
/// hides the controls a read-only token cannot use.
#[utoipa::path(get, path = "/admin/whoami", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "`{\"name\": \"...\", \"role\": \"admin\" | \"read-only\"}`"),
        (status = 401, body = crate::error::ErrorBody)))]
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
