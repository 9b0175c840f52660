//! `GET /queue/E` (the waiting page) and `GET /_anteroom/<asset>`, rendered by
//! [`crate::page`].

use std::sync::Arc;

use anteroom_store::EventId;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use rand::RngCore;

use super::{lang, query_param, safe_return};
use crate::app::AppState;
use crate::error::ApiError;
use crate::page::{PageContext, content_security_policy, static_asset};

/// The waiting page; it joins the visitor itself when it loads.
pub async fn waiting_page(
    State(state): State<Arc<AppState>>,
    Path(event): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let id = EventId::new(&event).map_err(|_| ApiError::UnknownEvent)?;
    state.event(&id).ok_or(ApiError::UnknownEvent)?;
    let mut nonce = [0u8; 16];
    rand::rng().fill_bytes(&mut nonce);
    let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let ctx = PageContext {
        event_id: id.as_str().to_owned(),
        event_name: None,
        return_path: safe_return(query_param(req.uri(), "return").as_deref()),
        lang: lang(req.headers()),
        position: None,
        nonce: nonce.clone(),
    };
    let html = state.pages.render(&ctx).map_err(|e| {
        tracing::error!(error = %e, "waiting page render failed");
        ApiError::Internal
    })?;
    let mut response = Html(html).into_response();
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&nonce)) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The page's own static files; nothing third-party.
pub async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (content_type, bytes) = static_asset(&file).ok_or(ApiError::NotFound)?;
    let mut response = (StatusCode::OK, bytes).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    Ok(response)
}
