//! A node's state as `app::run` builds it, for unit tests of the layers
//! that work on it (the admin API, the background tasks): the real
//! embedded store in a temporary directory, and no task running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use super::AppState;

/// A node with one event, `tickets` (two slots), on an embedded store in
/// `dir`.
pub async fn one_node(dir: &std::path::Path) -> Arc<AppState> {
    let toml = format!(
        r#"
[server]
admin_token = "admin-token-123"
[keys]
secrets = ["0123456789abcdef0123456789abcdef"]
[store]
path = "{}"
[[events]]
id = "tickets"
origin = "http://127.0.0.1:9"
paths = ["/tickets"]
max_active = 2
"#,
        dir.display()
    );
    let config = crate::config::Config::from_toml(&toml).unwrap();
    let store: Arc<dyn anteroom_store::QueueStore> = Arc::new(
        anteroom_store::embedded::EmbeddedStore::open(
            dir,
            anteroom_store::embedded::EmbeddedOptions::default(),
        )
        .await
        .unwrap(),
    );
    let events = crate::config::stored::resolve(&config.events, store.as_ref())
        .await
        .unwrap();
    Arc::new(AppState::new(&config, events, store, crate::clock::node_clock(0)).unwrap())
}
