//! Event configuration kept in the store: live changes made with
//! `PUT /admin/events/E` (which reach every node and survive restarts), and
//! each event's ordering anchor.
//!
//! The anchor is the canonical time arrival scores count from when an event
//! has no `opens_at` ("open now"). It is fixed once per event in the store so
//! every node, and every restart, orders joins against the same origin.

use std::collections::HashMap;

use anteroom_store::{EventId, QueueStore, StoreError};
use serde::{Deserialize, Serialize};

use super::{ConfigError, EventConfig, RawEvent, event_from_raw};

/// The JSON document stored per event.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Canonical µs arrival scores count from when `opens_at` is absent.
    pub anchor_us: Option<i64>,
    /// The event as last put through the admin API; it wins over the file.
    pub event: Option<RawEvent>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// Reads every stored document; unreadable ones are logged and skipped.
pub async fn read_all(store: &dyn QueueStore) -> Result<HashMap<EventId, StoredEvent>, StoreError> {
    let mut out = HashMap::new();
    for (id, json) in store.event_configs().await? {
        match serde_json::from_str::<StoredEvent>(&json) {
            Ok(doc) => {
                out.insert(id, doc);
            }
            Err(e) => tracing::warn!(event = %id, error = %e, "stored event config ignored"),
        }
    }
    Ok(out)
}

/// The events to run: the file's, overridden or extended by stored admin
/// changes, each with its ordering anchor (fixed in the store on first use).
pub async fn resolve(
    file_events: &[EventConfig],
    store: &dyn QueueStore,
) -> Result<Vec<(EventConfig, i64)>, StoredError> {
    let mut stored = read_all(store).await?;
    let mut events: Vec<EventConfig> = file_events.to_vec();
    let mut ids: Vec<&EventId> = stored.keys().collect();
    ids.sort();
    for id in ids {
        let Some(raw) = stored.get(id).and_then(|d| d.event.as_ref()) else {
            continue;
        };
        let config = event_from_raw(&format!("stored event {id}"), raw)?;
        match events.iter_mut().find(|e| e.id == *id) {
            Some(slot) => *slot = config,
            None => events.push(config),
        }
    }
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let doc = stored.remove(&e.id).unwrap_or_default();
        let anchor = anchor(&e, doc, store).await?;
        out.push((e, anchor));
    }
    Ok(out)
}

/// The event's anchor: its opening time, or the stored anchor, or now (stored).
pub async fn anchor(
    event: &EventConfig,
    mut doc: StoredEvent,
    store: &dyn QueueStore,
) -> Result<i64, StoreError> {
    if let Some(ms) = event.opens_at_ms {
        return Ok(ms.saturating_mul(1000));
    }
    if let Some(a) = doc.anchor_us {
        return Ok(a);
    }
    let now = store.now_us(&event.id).await?;
    doc.anchor_us = Some(now);
    store.put_event_config(&event.id, &to_json(&doc)).await?;
    Ok(now)
}

/// Stores an admin change, keeping the event's anchor.
pub async fn put(store: &dyn QueueStore, event: &EventConfig) -> Result<i64, StoreError> {
    let mut doc = read_all(store).await?.remove(&event.id).unwrap_or_default();
    doc.event = Some(event.raw.clone());
    if doc.anchor_us.is_none() && event.opens_at_ms.is_none() {
        doc.anchor_us = Some(store.now_us(&event.id).await?);
    }
    store.put_event_config(&event.id, &to_json(&doc)).await?;
    Ok(match event.opens_at_ms {
        Some(ms) => ms.saturating_mul(1000),
        None => doc.anchor_us.unwrap_or(0),
    })
}

fn to_json(doc: &StoredEvent) -> String {
    serde_json::to_string(doc).unwrap_or_else(|_| "{}".to_owned())
}
