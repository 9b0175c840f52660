//! Presence of visitors whose polls were rate-limited: a refused poll still
//! says the visitor is there, so it must keep the place from the idle sweep.
//!
//! Refused polls never reach the store one by one (that is the point of the
//! limit); each refused visitor is remembered once and marked seen by one
//! `status` call per flush, so a flood of refused polls costs the store at
//! most one call per distinct visitor per flush, and at most
//! [`MAX_PER_FLUSH`] per event. The idle timeout is minutes; a flush every
//! few seconds is far inside it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use anteroom_store::{EventId, QueueStore, Touch};

/// Distinct refused visitors remembered per event between two flushes;
/// beyond it (a flood of made-up sessions) the rest are dropped and counted.
pub const MAX_PER_FLUSH: usize = 10_000;

/// Store calls in flight at once while flushing.
const CONCURRENCY: usize = 16;

#[derive(Default)]
pub struct ThrottledSeen {
    pending: Mutex<HashMap<EventId, HashSet<String>>>,
}

impl ThrottledSeen {
    /// Remembers that `member` polled `event` and was refused.
    pub fn note(&self, event: &EventId, member: &str) {
        if member.is_empty() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let set = pending.entry(event.clone()).or_default();
        if set.len() >= MAX_PER_FLUSH && !set.contains(member) {
            metrics::counter!("anteroom_throttled_seen_dropped_total").increment(1);
            return;
        }
        set.insert(member.to_owned());
    }

    /// Marks every remembered visitor seen in the store (a `status` read
    /// with the seen mark) and forgets them. Returns how many were marked.
    pub async fn flush(&self, store: &dyn QueueStore) -> usize {
        use futures::StreamExt;
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let calls: Vec<(EventId, String)> = pending
            .into_iter()
            .flat_map(|(event, members)| members.into_iter().map(move |m| (event.clone(), m)))
            .collect();
        futures::stream::iter(calls)
            .map(|(event, member)| async move {
                match store.status(&event, &member, Touch::Seen).await {
                    Ok(_) => 1,
                    Err(e) => {
                        tracing::debug!(event = %event, error = e.kind(), "seen mark of a throttled poll failed");
                        0
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .fold(0, |n, ok| std::future::ready(n + ok))
            .await
    }
}
