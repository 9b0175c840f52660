//! Event configuration kept in the store: live changes made with
//! `PUT`/`PATCH`/`DELETE /admin/events/E` (which reach every node and
//! survive restarts), and each event's ordering anchor.
//!
//! The anchor is the canonical time arrival scores count from when an event
//! has no `opens_at` ("open now"). It is fixed once per event in the store so
//! every node, and every restart, orders joins against the same origin.
//!
//! The rule when the config file and a stored change differ at start: the
//! newer intent wins, key by key (top-level keys of the event table). Each
//! stored change keeps the file's version of the event it was made against
//! (`file_base`). A key whose file value still equals that base was not
//! touched in the file since the API change, so the stored value is kept; a
//! key the file changed since wins. A change stored without a base (made
//! before bases were kept, or for an event the file did not have then) wins
//! wholesale. Every difference is logged at start, naming the key, the
//! winner and who made the stored change; the merged result is stored back
//! with the current file as its new base, so every node converges on it.

use std::collections::{BTreeMap, HashMap};

use anteroom_store::{EventId, QueueStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ConfigError, EventConfig, RawEvent};

/// The JSON document stored per event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Canonical µs arrival scores count from when `opens_at` is absent.
    pub anchor_us: Option<i64>,
    /// The event as last put through the admin API.
    pub event: Option<RawEvent>,
    /// The config file's table of this event when `event` (or the deletion)
    /// was stored; `None` when the file had no such event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_base: Option<RawEvent>,
    /// Deleted through the admin API: a file table equal to `file_base` is
    /// not started again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Who stored the change (the admin token's name) and when (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at_ms: Option<i64>,
    /// The store's clock (µs) when this event was created through the
    /// admin API, or started again from a changed config file table after
    /// a deletion: sessions that started before it were the deleted
    /// event's, and their passes open nothing of this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_us: Option<i64>,
}

/// When an event's time starts: the anchor its arrival scores count from,
/// and when it was created as it now is ([`StoredEvent::created_us`];
/// `i64::MIN` when no creation is on record, as for an event that was
/// never deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventTimes {
    pub anchor_us: i64,
    pub created_us: i64,
}

impl StoredEvent {
    /// [`Self::created_us`], or `i64::MIN` when none is on record: the
    /// session start below which passes are refused.
    pub fn created_floor(&self) -> i64 {
        self.created_us.unwrap_or(i64::MIN)
    }
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
    Ok(read_set(store).await?.docs)
}

/// Every readable stored document, read with the set's generation: what a
/// [`replace`] is made against.
#[derive(Clone, Debug, Default)]
pub struct DocSet {
    pub generation: u64,
    pub docs: HashMap<EventId, StoredEvent>,
    /// The documents that did not parse (hand-written, or stored by a
    /// newer version with a key this one does not know), left out of
    /// `docs`: each one's text and why.
    pub unreadable: Vec<Unreadable>,
}

/// A stored document that did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub id: EventId,
    pub json: String,
    pub error: String,
}

impl DocSet {
    /// An event's document, the default when it has none (or an unreadable
    /// one, which a change then replaces).
    pub fn get(&self, id: &EventId) -> StoredEvent {
        self.docs.get(id).cloned().unwrap_or_default()
    }
}

/// Reads the set of documents; unreadable ones are logged and skipped.
pub async fn read_set(store: &dyn QueueStore) -> Result<DocSet, StoreError> {
    let set = read_docs(store).await?;
    for u in &set.unreadable {
        tracing::warn!(event = %u.id, error = %u.error, "stored event config ignored");
    }
    Ok(set)
}

/// Reads the set of documents, the unreadable ones set apart unlogged: for
/// the watch of the store, which logs each once, not at every look.
pub async fn read_docs(store: &dyn QueueStore) -> Result<DocSet, StoreError> {
    let set = store.event_config_set().await?;
    let mut docs = HashMap::new();
    let mut unreadable = Vec::new();
    for (id, json) in set.configs {
        match serde_json::from_str::<StoredEvent>(&json) {
            Ok(doc) => {
                docs.insert(id, doc);
            }
            Err(e) => unreadable.push(Unreadable {
                id,
                json,
                error: without_values(&e.to_string()),
            }),
        }
    }
    Ok(DocSet {
        generation: set.generation,
        docs,
        unreadable,
    })
}

/// A parse error of a stored document without the values it quotes: serde
/// writes a wrong-typed or invalid value into its message (`invalid type:
/// string "…", expected …`), and the message goes to the log and to
/// `GET /admin/refusals`. The admin API never stores a secret, but a
/// document written into the store by hand may hold one in the wrong place;
/// the kind of value and the key path (line and column) are enough to find
/// it.
pub fn without_values(error: &str) -> String {
    // `unknown variant `…`, expected one of …`: the variant is the value.
    if let Some(start) = error
        .find("unknown variant `")
        .map(|i| i + "unknown variant".len())
        && let Some(end) = error[start..].rfind("`, expected ").map(|i| start + i + 1)
    {
        return format!("{}{}", &error[..start], &error[end..]);
    }
    for lead in ["invalid type: ", "invalid value: "] {
        let Some(start) = error.find(lead).map(|i| i + lead.len()) else {
            continue;
        };
        // The value's description runs to the last `, expected `: a quoted
        // value may hold that text itself, the expectation does not.
        let Some(end) = error[start..].rfind(", expected ").map(|i| start + i) else {
            continue;
        };
        // `string "…"`, `integer `5``, `floating point `1.5``, `map`, …:
        // the words before the value are its kind.
        let described = &error[start..end];
        let kind_end = described.find(['"', '`', '\'']).unwrap_or(described.len());
        let kind = described[..kind_end].trim_end();
        return format!("{}{kind}{}", &error[..start], &error[end..]);
    }
    error.to_owned()
}

/// Stores `doc` only while no document changed since the set was read at
/// `generation`: `false` when another node changed one first, so a change
/// checked against the set it read (its own event's table, and every other
/// event's paths) never lands over a change it did not see. The caller
/// reads again and makes its change over that.
pub async fn replace(
    store: &dyn QueueStore,
    id: &EventId,
    generation: u64,
    doc: &StoredEvent,
) -> Result<bool, StoreError> {
    store
        .replace_event_config(id, generation, &to_json(doc))
        .await
}

/// One top-level key where the file and the stored change differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub key: String,
    /// `true` when the file's value is used.
    pub file_wins: bool,
}

/// Merges the file's table with a stored change by the rule in the module
/// docs; returns the event to run and the keys that differed.
pub fn merge(file: &RawEvent, doc: &StoredEvent) -> (RawEvent, Vec<Difference>) {
    let Some(stored) = &doc.event else {
        return (file.clone(), Vec::new());
    };
    let (f, s) = (to_map(file), to_map(stored));
    // Bases are kept redacted, so compare the file's table redacted too.
    let redacted = to_map(&file.redacted());
    let base = doc.file_base.as_ref().map(to_map);
    let mut keys: Vec<&String> = f.keys().chain(s.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut merged = serde_json::Map::new();
    let mut diffs = Vec::new();
    for key in keys {
        let (fv, sv) = (f.get(key), s.get(key));
        let file_wins = match &base {
            Some(b) => b.get(key) != redacted.get(key),
            None => false,
        };
        if fv != sv {
            diffs.push(Difference {
                key: key.clone(),
                file_wins,
            });
        }
        if let Some(v) = if file_wins { fv } else { sv } {
            merged.insert(key.clone(), v.clone());
        }
    }
    let event = serde_json::from_value(Value::Object(merged)).unwrap_or_else(|_| stored.clone());
    (event, diffs)
}

fn to_map(raw: &RawEvent) -> serde_json::Map<String, Value> {
    match serde_json::to_value(raw) {
        Ok(Value::Object(m)) => m.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        _ => serde_json::Map::new(),
    }
}

/// The events to run: the file's, merged with or extended by stored admin
/// changes (see the module docs), each with its times: its ordering anchor
/// (fixed in the store on first use) and its creation. Logs every
/// difference between file and store.
pub async fn resolve(
    file_events: &[EventConfig],
    store: &dyn QueueStore,
) -> Result<Vec<(EventConfig, EventTimes)>, StoredError> {
    let read = read_set(store).await?;
    let mut generation = read.generation;
    let mut stored = read.docs;
    let mut raws: Vec<(String, RawEvent)> = Vec::new();
    let mut rewrite: Vec<(EventId, StoredEvent)> = Vec::new();
    for e in file_events {
        let Some(doc) = stored.get(&e.id) else {
            raws.push((format!("event {}", e.id), e.raw.clone()));
            continue;
        };
        let by = doc.changed_by.as_deref().unwrap_or("an earlier version");
        let file_base = e.raw.redacted();
        if doc.deleted {
            if doc.file_base.as_ref() == Some(&file_base) {
                tracing::warn!(event = %e.id, by, "event deleted through the admin API; its unchanged table in the config file is not started (remove it from the file, or change it to start it again)");
                continue;
            }
            tracing::warn!(event = %e.id, by, "event deleted through the admin API, but its table in the config file changed since: the file wins and the event starts again");
            let created = StoredEvent {
                created_us: Some(store.now_us(&e.id).await?),
                ..StoredEvent::default()
            };
            rewrite.push((e.id.clone(), created));
            raws.push((format!("event {}", e.id), e.raw.clone()));
            continue;
        }
        if doc.event.is_none() {
            raws.push((format!("event {}", e.id), e.raw.clone()));
            continue;
        }
        let (merged, diffs) = merge(&e.raw, doc);
        for d in &diffs {
            if d.file_wins {
                tracing::warn!(event = %e.id, key = %d.key, by, "config file changed this key after it was changed through the admin API: the file's value is used");
            } else {
                tracing::warn!(event = %e.id, key = %d.key, by, "this key was changed through the admin API and differs from the config file: the stored value is used");
            }
        }
        if merged.jwt.as_ref().is_some_and(|j| j.secret.is_some()) {
            // The store never keeps an inline secret, so it cannot hold this merge.
            tracing::warn!(event = %e.id, by, "the config file's jwt table with an inline secret won over the stored change, which the store cannot keep: the stored change is dropped and the file's table runs (use jwt.secret_file or jwt.secret_env to combine both)");
            rewrite.push((e.id.clone(), StoredEvent::default()));
            raws.push((format!("event {}", e.id), e.raw.clone()));
            continue;
        }
        if doc.event.as_ref() != Some(&merged) || doc.file_base.as_ref() != Some(&file_base) {
            let mut doc = doc.clone();
            doc.event = Some(merged.clone());
            doc.file_base = Some(file_base);
            rewrite.push((e.id.clone(), doc));
        }
        raws.push((format!("stored event {}", e.id), merged));
    }
    let mut ids: Vec<&EventId> = stored.keys().collect();
    ids.sort();
    for id in ids {
        if file_events.iter().any(|e| e.id == *id) {
            continue;
        }
        let Some(doc) = stored.get(id).filter(|d| !d.deleted) else {
            continue;
        };
        let Some(raw) = &doc.event else { continue };
        tracing::info!(event = %id, by = doc.changed_by.as_deref().unwrap_or("an earlier version"), "event created through the admin API (not in the config file)");
        raws.push((format!("stored event {id}"), raw.clone()));
    }
    let events = start_set(&raws, file_events, &mut rewrite)?;
    for (id, doc) in rewrite {
        let read_then = stored.get(&id).cloned();
        // The anchor and the creation on record are kept (a deleted
        // event's document holds neither); a rewrite that starts the event
        // again after a deletion records its own creation.
        let doc = StoredEvent {
            anchor_us: read_then.as_ref().and_then(|d| d.anchor_us),
            created_us: doc
                .created_us
                .or_else(|| read_then.as_ref().and_then(|d| d.created_us)),
            ..doc
        };
        for _ in 0..REPLACE_TRIES {
            if replace(store, &id, generation, &doc).await? {
                generation += 1;
                stored.insert(id.clone(), doc.clone());
                break;
            }
            // Another node stored a change since this one read. A change of
            // another event leaves this rewrite as good as it was: made again
            // at the new generation. A change of this event is the newer
            // intent, which this node takes up at its next watch of the
            // store, rather than overwrite it with a merge made without it.
            let now = read_set(store).await?;
            if now.docs.get(&id) != read_then.as_ref() {
                tracing::info!(event = %id, "stored event changed by another node while this one started: its change is taken up within seconds");
                // Its creation holds here from the start: two nodes that
                // start an event again after a deletion together run it
                // with the creation the winner stored.
                if let Some(theirs) = now.docs.get(&id) {
                    stored.insert(id.clone(), theirs.clone());
                }
                break;
            }
            generation = now.generation;
        }
    }
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let doc = stored.remove(&e.id).unwrap_or_default();
        let created = doc.created_floor();
        let anchor_us = anchor(&e, doc, store).await?;
        out.push((
            e,
            EventTimes {
                anchor_us,
                created_us: created,
            },
        ));
    }
    Ok(out)
}

/// The events to start, in `raws`' order. The file's tables passed as a
/// set when the file was read. A stored table (an admin change of a file
/// table, or an event created through the API) is checked beside them, and
/// one that does not validate on this node (a key file missing here, a path
/// that a table of this node's file holds) does not keep the node from
/// starting: it is left out and logged, its document is kept as it is (the
/// watch lists it in `/admin/refusals` at its first look, and takes it up
/// once it validates), and the file's table runs instead where there is
/// one. A node that could not start had no admin API to fix it through.
fn start_set(
    raws: &[(String, RawEvent)],
    file_events: &[EventConfig],
    rewrite: &mut Vec<(EventId, StoredEvent)>,
) -> Result<Vec<EventConfig>, StoredError> {
    let file_table = |raw: &RawEvent| {
        file_events
            .iter()
            .find(|e| Some(e.id.as_str()) == raw.id.as_deref())
    };
    let stored = |key: &str| key.starts_with("stored event ");
    let beside = |taken: &HashMap<usize, EventConfig>, key: &str, raw: &RawEvent| {
        let others: Vec<(&EventId, &[String])> = taken
            .values()
            .filter(|e| Some(e.id.as_str()) != raw.id.as_deref())
            .map(|e| (&e.id, e.paths.as_slice()))
            .collect();
        super::event_beside(key, raw, others)
    };
    // The stored changes this node refuses, by position, with why: first
    // those that do not validate even alone (a key file missing here).
    let mut refused: BTreeMap<usize, ConfigError> = BTreeMap::new();
    for (i, (key, raw)) in raws.iter().enumerate().filter(|(_, (k, _))| stored(k)) {
        if let (Some(_), Err(why)) = (file_table(raw), super::event_from_raw(key, raw)) {
            refused.insert(i, why);
        }
    }
    // Then, until no more change is refused: the file's own tables and
    // those of the refused changes first (the file checked them all
    // together), so no change takes a path one of them holds here; then
    // the other changes of file tables; then the events only the store
    // holds. A change refused beside the others seats its file table in
    // the next round, from the start, so the outcome does not hang on the
    // order of the file.
    let (mut taken, left_out) = loop {
        let mut taken: HashMap<usize, EventConfig> = HashMap::new();
        let mut left_out: Vec<(usize, ConfigError)> = Vec::new();
        for (i, (_, raw)) in raws.iter().enumerate() {
            if (!stored(&raws[i].0) || refused.contains_key(&i))
                && let Some(e) = file_table(raw)
            {
                taken.insert(i, e.clone());
            }
        }
        let mut pending: Vec<usize> = (0..raws.len())
            .filter(|i| stored(&raws[*i].0) && !refused.contains_key(i))
            .collect();
        pending.sort_by_key(|&i| file_table(&raws[i].1).is_none());
        let mut more = false;
        for i in pending {
            let (key, raw) = &raws[i];
            match beside(&taken, key, raw) {
                Ok(e) => {
                    taken.insert(i, e);
                }
                Err(why) if file_table(raw).is_some() => {
                    refused.insert(i, why);
                    more = true;
                }
                Err(why) => left_out.push((i, why)),
            }
        }
        if !more {
            break (taken, left_out);
        }
    };
    // Each refused change has a file table, seated in the last round.
    for (i, why) in &refused {
        let id = raws[*i].1.id.as_deref().unwrap_or_default();
        rewrite.retain(|(r, _)| r.as_str() != id);
        tracing::warn!(event = %id, error = %why, "stored event change not applied: its table does not validate on this node; the config file's table runs");
    }
    for (i, why) in left_out {
        let id = raws[i].1.id.as_deref().unwrap_or_default();
        tracing::warn!(event = %id, error = %why, "stored event not started: its table does not validate on this node");
    }
    Ok((0..raws.len()).filter_map(|i| taken.remove(&i)).collect())
}

/// The event's anchor: its opening time, or the one in its document, or
/// the store's (set by the first node to ask, so nodes starting together
/// agree), then kept in the document too, where nodes look for it.
pub async fn anchor(
    event: &EventConfig,
    doc: StoredEvent,
    store: &dyn QueueStore,
) -> Result<i64, StoreError> {
    if let Some(ms) = event.opens_at_ms {
        return Ok(ms.saturating_mul(1000));
    }
    if let Some(a) = doc.anchor_us {
        return Ok(a);
    }
    let anchor = store.anchor_us(&event.id).await?;
    // Written into the document as it is now: the one given may be older
    // than a change another node stored meanwhile, which must be kept.
    for _ in 0..REPLACE_TRIES {
        let set = read_set(store).await?;
        let mut now = set.get(&event.id);
        if now.anchor_us.is_some() {
            break;
        }
        now.anchor_us = Some(anchor);
        if replace(store, &event.id, set.generation, &now).await? {
            break;
        }
    }
    Ok(anchor)
}

/// How many times a change is made again over a document another node
/// changed meanwhile before the caller gives up (an admin change is then
/// refused with `409 concurrent_change`, to be made again). Changes are
/// made by hand, a few at once at most: eight is far beyond it.
pub const REPLACE_TRIES: usize = 8;

/// Who made a stored change, and the file's table it was made against.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub by: String,
    pub at_ms: i64,
    pub file_base: Option<RawEvent>,
    /// The change creates the event: none runs under its id now (never
    /// made, or deleted).
    pub creates: bool,
}

/// `doc` (the event's document as read) with the admin change `event`
/// made, keeping the event's anchor (and its creation, unless the change
/// creates it); and its times. Store it with [`replace`].
pub async fn changed(
    store: &dyn QueueStore,
    mut doc: StoredEvent,
    event: &EventConfig,
    change: &Change,
) -> Result<(StoredEvent, EventTimes), StoreError> {
    doc.event = Some(event.raw.clone());
    doc.deleted = false;
    doc.file_base = change.file_base.clone();
    doc.changed_by = Some(change.by.clone());
    doc.changed_at_ms = Some(change.at_ms);
    if change.creates {
        doc.created_us = Some(store.now_us(&event.id).await?);
    }
    if doc.anchor_us.is_none() && event.opens_at_ms.is_none() {
        doc.anchor_us = Some(store.anchor_us(&event.id).await?);
    }
    let anchor = match event.opens_at_ms {
        Some(ms) => ms.saturating_mul(1000),
        None => doc.anchor_us.unwrap_or(0),
    };
    let times = EventTimes {
        anchor_us: anchor,
        created_us: doc.created_floor(),
    };
    Ok((doc, times))
}

/// Records a deletion (after the store forgot the event), so no node and
/// no restart brings the file's unchanged table back.
pub async fn put_deleted(
    store: &dyn QueueStore,
    id: &EventId,
    change: Change,
) -> Result<(), StoreError> {
    let doc = StoredEvent {
        deleted: true,
        file_base: change.file_base,
        changed_by: Some(change.by),
        changed_at_ms: Some(change.at_ms),
        ..StoredEvent::default()
    };
    store.put_event_config(id, &to_json(&doc)).await
}

fn to_json(doc: &StoredEvent) -> String {
    serde_json::to_string(doc).unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> RawEvent {
        serde_json::from_str(json).unwrap()
    }

    /// Two file events, W on `/w` and X on `/a`. Through the API, X gave
    /// `/a` up for `/x` with a key file this node lacks, and W took `/a`:
    /// whichever comes first in the file, the node starts, X's file table
    /// (on this node the one that holds `/a`) runs, and W's change, which
    /// would now share `/a` with it, gives way to W's file table.
    #[test]
    fn a_stored_change_that_fails_here_never_stops_the_start_nor_loses_a_path() {
        for file_order in [["w", "x"], ["x", "w"]] {
            let table = |id: &str| {
                let path = if id == "w" { "/w" } else { "/a" };
                format!(
                    "[[events]]\nid = \"{id}\"\norigin = \"http://127.0.0.1:9\"\npaths = [\"{path}\"]\n"
                )
            };
            let text = format!(
                "[server]\nadmin_token = \"admin-token-123\"\n[keys]\nsecrets = [\"0123456789abcdef0123456789abcdef\"]\n{}{}",
                table(file_order[0]),
                table(file_order[1])
            );
            let file = crate::config::Config::from_toml(&text).unwrap().events;
            let w = raw(r#"{"id":"w","origin":"http://127.0.0.1:9","paths":["/w","/a"]}"#);
            let x = raw(
                r#"{"id":"x","origin":"http://127.0.0.1:9","paths":["/x"],"identity":"jwt",
                    "jwt":{"algorithm":"HS256","secret_file":"/nonexistent/anteroom-test.key"}}"#,
            );
            let raws: Vec<(String, RawEvent)> = file_order
                .iter()
                .map(|id| {
                    let r = if *id == "w" { w.clone() } else { x.clone() };
                    (format!("stored event {id}"), r)
                })
                .collect();
            let mut rewrite = vec![
                (EventId::new("w").unwrap(), StoredEvent::default()),
                (EventId::new("x").unwrap(), StoredEvent::default()),
            ];
            let events = start_set(&raws, &file, &mut rewrite).unwrap();
            let paths: Vec<(&str, Vec<&str>)> = events
                .iter()
                .map(|e| (e.id.as_str(), e.paths.iter().map(String::as_str).collect()))
                .collect();
            let want = |id: &str| {
                if id == "w" {
                    ("w", vec!["/w"])
                } else {
                    ("x", vec!["/a"])
                }
            };
            assert_eq!(
                paths,
                [want(file_order[0]), want(file_order[1])],
                "{file_order:?}"
            );
            // Neither stored change is rewritten by this node.
            assert!(rewrite.is_empty(), "{file_order:?}");
        }
    }

    /// Three file events, W on `/w`, X on `/a`, Y on `/b`. Through the API
    /// Y gave `/b` up with a key file this node lacks, X took `/b` and gave
    /// `/a` up for `/x`, and W took `/a`. Here each change would share a
    /// path with a file table the refused one leaves in place, so all three
    /// run from the file, in every order of the file: nodes that list the
    /// events differently gate the same paths under the same events.
    #[test]
    fn refusals_that_chain_through_paths_come_out_the_same_in_any_order() {
        let orders = [
            ["w", "x", "y"],
            ["w", "y", "x"],
            ["x", "w", "y"],
            ["x", "y", "w"],
            ["y", "w", "x"],
            ["y", "x", "w"],
        ];
        let file_path = |id: &str| match id {
            "w" => "/w",
            "x" => "/a",
            _ => "/b",
        };
        for order in orders {
            let tables: String = order
                .iter()
                .map(|id| {
                    format!(
                        "[[events]]\nid = \"{id}\"\norigin = \"http://127.0.0.1:9\"\npaths = [\"{}\"]\n",
                        file_path(id)
                    )
                })
                .collect();
            let text = format!(
                "[server]\nadmin_token = \"admin-token-123\"\n[keys]\nsecrets = [\"0123456789abcdef0123456789abcdef\"]\n{tables}"
            );
            let file = crate::config::Config::from_toml(&text).unwrap().events;
            let change = |id: &str| match id {
                "w" => raw(r#"{"id":"w","origin":"http://127.0.0.1:9","paths":["/w","/a"]}"#),
                "x" => raw(r#"{"id":"x","origin":"http://127.0.0.1:9","paths":["/x","/b"]}"#),
                _ => raw(
                    r#"{"id":"y","origin":"http://127.0.0.1:9","paths":["/y"],"identity":"jwt",
                        "jwt":{"algorithm":"HS256","secret_file":"/nonexistent/anteroom-test.key"}}"#,
                ),
            };
            let raws: Vec<(String, RawEvent)> = order
                .iter()
                .map(|id| (format!("stored event {id}"), change(id)))
                .collect();
            let events = start_set(&raws, &file, &mut Vec::new()).unwrap();
            let got: Vec<(&str, Vec<&str>)> = events
                .iter()
                .map(|e| (e.id.as_str(), e.paths.iter().map(String::as_str).collect()))
                .collect();
            let want: Vec<(&str, Vec<&str>)> =
                order.iter().map(|id| (*id, vec![file_path(id)])).collect();
            assert_eq!(got, want, "{order:?}");
        }
    }

    #[test]
    fn the_newer_intent_wins_key_by_key() {
        let base = raw(r#"{"id":"e","origin":"http://a","max_active":10,"pre_window":"1m"}"#);
        // The API changed max_active; the file later changed origin.
        let stored = raw(r#"{"id":"e","origin":"http://a","max_active":99,"pre_window":"1m"}"#);
        let file = raw(r#"{"id":"e","origin":"http://b","max_active":10,"pre_window":"1m"}"#);
        let doc = StoredEvent {
            event: Some(stored),
            file_base: Some(base),
            ..StoredEvent::default()
        };
        let (merged, diffs) = merge(&file, &doc);
        assert_eq!(merged.origin.as_deref(), Some("http://b"));
        assert_eq!(merged.max_active, Some(99));
        assert_eq!(
            diffs,
            [
                Difference {
                    key: "max_active".into(),
                    file_wins: false
                },
                Difference {
                    key: "origin".into(),
                    file_wins: true
                },
            ]
        );
    }

    #[test]
    fn a_change_without_a_base_wins_wholesale() {
        let stored = raw(r#"{"id":"e","origin":"http://s","max_active":5}"#);
        let file = raw(r#"{"id":"e","origin":"http://f","pre_window":"1m"}"#);
        let doc = StoredEvent {
            event: Some(stored.clone()),
            ..StoredEvent::default()
        };
        let (merged, diffs) = merge(&file, &doc);
        assert_eq!(merged, stored);
        assert_eq!(diffs.len(), 3);
        assert!(diffs.iter().all(|d| !d.file_wins));
    }

    #[test]
    fn a_parse_error_names_the_kind_of_value_not_the_value() {
        let parse = |json: &str| {
            let e = serde_json::from_str::<StoredEvent>(json).unwrap_err();
            without_values(&e.to_string())
        };
        let wrong = parse(r#"{"event": {"jwt": "hunter2, expected nothing"}}"#);
        assert!(!wrong.contains("hunter2"), "{wrong}");
        assert!(
            wrong.starts_with("invalid type: string, expected"),
            "{wrong}"
        );
        assert!(wrong.contains("line 1 column"), "{wrong}");
        let number = parse(r#"{"event": {"jwt": {"secret": 918273645}}}"#);
        assert!(!number.contains("918273645"), "{number}");
        assert!(
            number.starts_with("invalid type: integer, expected"),
            "{number}"
        );
        // What names no value is kept whole.
        let unknown = parse(r#"{"event": {"later": 1}}"#);
        assert!(unknown.starts_with("unknown field `later`"), "{unknown}");
        assert_eq!(
            without_values("unknown variant `hunter2`, expected `a` or `b` at line 1 column 9"),
            "unknown variant, expected `a` or `b` at line 1 column 9"
        );
        assert_eq!(without_values("EOF while parsing"), "EOF while parsing");
    }
}
