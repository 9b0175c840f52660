//! Presence of visitors whose polls were rate-limited: a refused poll still
//! says the visitor is there, so it must keep the place from the idle sweep.
//!
//! Refused polls never reach the store one by one (that is the point of the
//! limit); each refused visitor is remembered once and marked seen by one
//! `status` call per flush, so a flood of refused polls costs the store at
//! most one call per distinct visitor per flush. The idle timeout is
//! minutes; a flush every few seconds is far inside it.
//!
//! A session id is anyone's to make up, and made-up ones cannot be told
//! from real ones without that store call. So:
//!
//! - a visitor the store knew at an earlier flush (in the queue, admitted
//!   or active) is marked whenever it is refused, up to [`MAX_KNOWN`] per
//!   event: made-up ids, which the store never knows, cannot crowd it out;
//! - the others are a uniform sample of at most [`MAX_PER_FLUSH`] per event
//!   and flush, not the first ones to come: a flood of made-up ids from any
//!   number of addresses, the real visitors' own included, leaves each real
//!   visitor refused in a flush a chance of the sample's size over the
//!   flood's. Once in a sample it is known, and marked from then on.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use anteroom_store::{EventId, MemberState, QueueStore, Touch};

/// Refused visitors not known to the store that are marked per event and
/// flush; beyond it (a flood of made-up sessions) a uniform sample of them.
pub const MAX_PER_FLUSH: usize = 10_000;

/// Visitors the store knew at an earlier flush, remembered per event (a
/// queue's refused visitors, far more than any flood leaves room for).
pub const MAX_KNOWN: usize = 100_000;

/// Flushes a known visitor stays known without being found again (about
/// ten minutes at one flush a second, more when flushes are slow): one who
/// left, or whose polls go through again, makes room for others.
const KNOWN_FOR: u64 = 600;

/// Flushes between two passes over the known visitors for those not found
/// in time: the pass holds the lock every refused poll takes.
const AGE_EVERY: u64 = 60;

/// Store calls in flight at once while flushing.
const CONCURRENCY: usize = 16;

#[derive(Default)]
pub struct ThrottledSeen {
    events: Mutex<HashMap<EventId, EventSeen>>,
}

/// One event's refused visitors.
#[derive(Default)]
struct EventSeen {
    /// Found in the store at an earlier flush, with the last flush that
    /// found it.
    known: HashMap<String, u64>,
    /// Flushes so far.
    flushes: u64,
    /// Known ones refused since the last flush.
    known_noted: HashSet<String>,
    /// A uniform sample of the others refused since the last flush
    /// (reservoir sampling: each offer replaces a random member of a full
    /// sample with the chance of the sample's size over the offers made).
    sample: Vec<String>,
    in_sample: HashSet<String>,
    offered: u64,
}

/// What a flush marks, taken out of the table.
struct Marks {
    known: Vec<String>,
    sampled: Vec<String>,
}

impl ThrottledSeen {
    /// Remembers that `member` polled `event` and was refused.
    pub fn note(&self, event: &EventId, member: &str) {
        if member.is_empty() {
            return;
        }
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let seen = events.entry(event.clone()).or_default();
        if seen.known.contains_key(member) {
            seen.known_noted.insert(member.to_owned());
            return;
        }
        if seen.in_sample.contains(member) {
            return;
        }
        seen.offered += 1;
        if seen.sample.len() < MAX_PER_FLUSH {
            seen.sample.push(member.to_owned());
            seen.in_sample.insert(member.to_owned());
            return;
        }
        metrics::counter!("anteroom_throttled_seen_dropped_total").increment(1);
        let at = rand::random_range(0..seen.offered);
        if let Some(slot) = usize::try_from(at)
            .ok()
            .and_then(|at| seen.sample.get_mut(at))
        {
            let left = std::mem::replace(slot, member.to_owned());
            seen.in_sample.remove(&left);
            seen.in_sample.insert(member.to_owned());
        }
    }

    /// Marks every remembered visitor seen in the store (a `status` read
    /// with the seen mark) and forgets them; those the store knows are
    /// known from then on, those it does not are not. Returns how many
    /// were marked.
    pub async fn flush(&self, store: &dyn QueueStore) -> usize {
        use futures::StreamExt;
        let taken: Vec<(EventId, Marks)> = {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            events
                .iter_mut()
                .map(|(event, seen)| {
                    seen.flushes += 1;
                    seen.in_sample.clear();
                    seen.offered = 0;
                    let marks = Marks {
                        known: seen.known_noted.drain().collect(),
                        sampled: std::mem::take(&mut seen.sample),
                    };
                    (event.clone(), marks)
                })
                .collect()
        };
        let calls = taken.into_iter().flat_map(|(event, marks)| {
            let known = marks.known.into_iter().map(|m| (true, m));
            let sampled = marks.sampled.into_iter().map(|m| (false, m));
            let event = std::sync::Arc::new(event);
            known
                .chain(sampled)
                .map(move |(was_known, m)| (event.clone(), was_known, m))
        });
        let answers: Vec<_> = futures::stream::iter(calls)
            .map(|(event, was_known, member)| async move {
                let found = match store.status(&event, &member, Touch::Seen).await {
                    Ok(state) => Some(state != MemberState::None),
                    Err(e) => {
                        tracing::debug!(event = %event, error = e.kind(), "seen mark of a throttled poll failed");
                        None
                    }
                };
                (event, was_known, member, found)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut marked = 0;
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        for (event, was_known, member, found) in answers {
            let Some(found) = found else { continue };
            marked += 1;
            let Some(seen) = events.get_mut(&*event) else {
                continue;
            };
            match (found, was_known) {
                (true, true) => {
                    seen.known.insert(member, seen.flushes);
                }
                (true, false) if seen.known.len() < MAX_KNOWN => {
                    seen.known.insert(member, seen.flushes);
                }
                // Gone from the event (left, expired, never there).
                (false, true) => {
                    seen.known.remove(&member);
                }
                _ => {}
            }
        }
        // An event nobody is remembered for any more (one deleted, or whose
        // crowd left) is dropped.
        for seen in events.values_mut() {
            let now = seen.flushes;
            if now % AGE_EVERY == 0 {
                // One noted again while this flush read the store stays.
                let noted = &seen.known_noted;
                seen.known
                    .retain(|id, found| now - *found < KNOWN_FOR || noted.contains(id));
            }
        }
        events.retain(|_, seen| {
            !seen.known.is_empty() || !seen.known_noted.is_empty() || seen.offered > 0
        });
        marked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(seen: &ThrottledSeen, event: &EventId) -> Vec<String> {
        let events = seen.events.lock().unwrap();
        events.get(event).map_or(Vec::new(), |s| s.sample.clone())
    }

    /// A flood of made-up ids fills the sample, but not with the first ones
    /// to come: whoever is refused late in a flush keeps a chance.
    #[test]
    fn a_flood_is_sampled_not_taken_first_come() {
        let seen = ThrottledSeen::default();
        let event = EventId::new("e").unwrap();
        for i in 0..5 * MAX_PER_FLUSH {
            seen.note(&event, &format!("{i:032x}"));
        }
        let sample = sampled(&seen, &event);
        assert_eq!(sample.len(), MAX_PER_FLUSH);
        let late = sample
            .iter()
            .filter(|m| usize::from_str_radix(m, 16).unwrap() >= MAX_PER_FLUSH)
            .count();
        // Four fifths are from after the first MAX_PER_FLUSH offers, as a
        // uniform sample of five times as many has it (a standard
        // deviation of 40): neither the first to come nor the last.
        assert!((7_500..=8_500).contains(&late), "{late} of {MAX_PER_FLUSH}");
        let distinct: HashSet<String> = sample.iter().cloned().collect();
        assert_eq!(distinct.len(), sample.len());
        let events = seen.events.lock().unwrap();
        assert_eq!(events[&event].in_sample, distinct, "the sample's index");
    }

    const REAL: &str = "0123456789abcdef0123456789abcdef";

    /// A real embedded store in a new directory, with `member` waiting in
    /// event `e`.
    async fn store_with(
        member: &str,
    ) -> (
        tempfile::TempDir,
        anteroom_store::embedded::EmbeddedStore,
        EventId,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = anteroom_store::embedded::EmbeddedStore::open(
            dir.path(),
            anteroom_store::embedded::EmbeddedOptions::default(),
        )
        .await
        .unwrap();
        let event = EventId::new("e").unwrap();
        let now = store.now_us(&event).await.unwrap();
        let scoring = anteroom_core::score::JoinScoring {
            opens_at_us: now - 1_000_000,
            prewindow_score: -1,
            tiebreak: 0,
            behind: false,
        };
        store.join(&event, member, &scoring).await.unwrap();
        (dir, store, event)
    }

    /// A visitor the store knows is marked however many made-up ids come
    /// with it; a made-up id is never known, and a known visitor who left
    /// is forgotten.
    #[tokio::test]
    async fn a_visitor_the_store_knows_is_marked_through_any_flood() {
        let (_dir, store, event) = store_with(REAL).await;
        let real = REAL;
        let seen = ThrottledSeen::default();
        seen.note(&event, real);
        seen.note(&event, "made-up-0");
        assert_eq!(seen.flush(&store).await, 2);
        {
            let events = seen.events.lock().unwrap();
            let known = &events[&event].known;
            assert!(known.contains_key(real) && !known.contains_key("made-up-0"));
        }
        for i in 0..3 * MAX_PER_FLUSH {
            seen.note(&event, &format!("made-up-{i}"));
        }
        seen.note(&event, real);
        {
            let events = seen.events.lock().unwrap();
            assert!(events[&event].known_noted.contains(real));
        }
        seen.flush(&store).await;
        store.release(&event, real).await.unwrap();
        seen.note(&event, real);
        seen.flush(&store).await;
        // Nobody is known now (the flood made no one known, and the
        // visitor left), so the event itself is forgotten.
        assert!(!seen.events.lock().unwrap().contains_key(&event));
    }

    /// A known visitor not found again for [`KNOWN_FOR`] flushes (gone, or
    /// its polls go through) makes room: it is forgotten, one found since
    /// is kept, and one refused and found at every flush stays known.
    #[tokio::test]
    async fn a_known_visitor_not_found_again_is_forgotten_in_time() {
        let (_dir, store, event) = store_with(REAL).await;
        let refused = REAL;
        let seen = ThrottledSeen::default();
        {
            let mut events = seen.events.lock().unwrap();
            let e = events.entry(event.clone()).or_default();
            e.flushes = KNOWN_FOR - 1;
            e.known.insert("stale".into(), 0);
            e.known.insert("recent".into(), 1);
            // Known since the first flush, and refused ever since.
            e.known.insert(refused.into(), 0);
        }
        seen.note(&event, refused);
        seen.flush(&store).await;
        let events = seen.events.lock().unwrap();
        let known = &events[&event].known;
        assert!(!known.contains_key("stale") && known.contains_key("recent"));
        assert!(known.contains_key(refused), "found at this flush, known on");
    }
}
