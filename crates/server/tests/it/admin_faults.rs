//! The admin API's answers when the store fails one write of several, or
//! another node's change lands between a read and a write: a store that
//! fails the calls a test names (`support::faulty`) over the real embedded
//! store.

use std::sync::Arc;

use anteroom_core::phase::AdminState;
use http::{Method, StatusCode};
use serde_json::Value;

use crate::support::config::ADMIN_TOKEN;
use crate::support::faulty::Faulty;
use crate::support::origin::Origin;
use crate::support::server::{self, TestServer};
use crate::support::visitor::Visitor;

/// The usual test server (`tickets` and `other`) on a [`Faulty`] store.
async fn start() -> (TestServer, Arc<Faulty>) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = server::config(dir.path(), origin.addr, server::tickets(origin.addr)).toml();
    let config = anteroom::Config::from_toml(&toml).unwrap();
    let faulty = Faulty::new(anteroom::open_store(&config).await.unwrap());
    let s = TestServer::start_on(config, faulty.clone(), origin, dir).await;
    (s, faulty)
}

async fn call(s: &TestServer, method: Method, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = s.admin_call(method, path, Some(ADMIN_TOKEN), None).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A resume decided on `paused`, when another node closes the event before
/// the store takes it, is decided again on `closed`: `409 event_closed`, and
/// the close stands.
#[tokio::test]
async fn a_resume_that_meets_another_nodes_close_is_decided_again() {
    let (s, faulty) = start().await;
    s.pause("tickets", "pause").await;
    faulty.race_admin_state([AdminState::Closed]);
    let (status, body) = call(&s, Method::POST, "/admin/events/tickets/resume").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "event_closed", "{body}");
    let (_, event) = call(&s, Method::GET, "/admin/events/tickets").await;
    assert_eq!(event["state"], "closed", "{event}");
    s.stop().await;
}

/// A change that meets another node's at every try gives up after five:
/// `409 concurrent_change`, and the state is the other nodes' last.
#[tokio::test]
async fn a_state_that_keeps_changing_elsewhere_is_a_concurrent_change() {
    let (s, faulty) = start().await;
    faulty.race_admin_state([
        AdminState::Paused,
        AdminState::Running,
        AdminState::Paused,
        AdminState::Running,
        AdminState::Paused,
    ]);
    let (status, body) = call(&s, Method::POST, "/admin/events/tickets/close").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "concurrent_change", "{body}");
    let (_, event) = call(&s, Method::GET, "/admin/events/tickets").await;
    assert_eq!(event["state"], "paused", "{event}");
    // With nobody else changing it, the same call goes through.
    let (status, _) = call(&s, Method::POST, "/admin/events/tickets/close").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    s.stop().await;
}

/// A `DELETE` whose deletion marker the store does not take after the wipe
/// answers the store's error, and leaves the event running here (its paths
/// still gated), so the same `DELETE` made again finishes the deletion.
#[tokio::test]
async fn a_delete_whose_marker_the_store_refuses_is_finished_by_repeating_it() {
    let (s, faulty) = start().await;
    faulty.fail("put_event_config", 3);
    let (status, body) = call(&s, Method::DELETE, "/admin/events/tickets?force=true").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, event) = call(&s, Method::GET, "/admin/events/tickets").await;
    assert_eq!(status, StatusCode::OK, "the event left this node: {event}");
    let (status, _, _) = server::send(Method::GET, &s.url("/tickets/x"), &[], None).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "its paths are still gated"
    );
    // Its tasks were not retired with it: a visitor joining now is admitted.
    let mut v = Visitor::default();
    let (status, _, body) = v.enter(&s, "tickets").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server::poll_until(
        &v,
        &s.url("/api/queue/position?eventId=tickets"),
        "ADMITTED",
    )
    .await;
    let (status, body) = call(&s, Method::DELETE, "/admin/events/tickets?force=true").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(&s, Method::GET, "/admin/events/tickets").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, audit) = call(&s, Method::GET, "/admin/audit?event=tickets&action=delete").await;
    assert_eq!(
        audit["entries"].as_array().map(Vec::len),
        Some(1),
        "{audit}"
    );
    s.stop().await;
}
