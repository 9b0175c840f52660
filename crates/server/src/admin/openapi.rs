//! The OpenAPI document of the public queue API and the admin API, generated
//! from the handlers' annotations and served at `/openapi.json` (admin).

use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Anteroom",
        description = "Virtual waiting room: queue API (public listener) and admin API (admin listener)."
    ),
    paths(
        crate::api::enter::enter,
        crate::api::enter::position,
        crate::api::redeem::redeem_json,
        crate::api::redeem::redeem_browser,
        crate::api::redeem::release,
        crate::api::stream::stream,
        crate::admin::list,
        crate::admin::show,
        crate::admin::events::put,
        crate::admin::events::patch,
        crate::admin::events::delete,
        crate::admin::state::pause,
        crate::admin::state::resume,
        crate::admin::state::close,
        crate::admin::state::reopen,
        crate::admin::events::evict,
        crate::admin::audit::list,
        crate::admin::refusals::list,
        crate::admin::metrics,
        crate::admin::ready,
        crate::admin::auth::whoami,
    ),
    components(schemas(
        crate::api::QueuePosition,
        crate::api::Status,
        crate::api::enter::EnterBody,
        crate::api::redeem::RedeemBody,
        crate::api::redeem::Redeemed,
        crate::error::ErrorBody,
        crate::admin::EventView,
        crate::admin::StatsView,
        crate::admin::audit::AuditEntry,
        crate::admin::audit::AuditView,
        crate::admin::refusals::RefusalEntry,
        crate::admin::refusals::RefusalsView,
    ))
)]
struct Doc;

/// The document, with the admin bearer scheme.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = Doc::openapi();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}
