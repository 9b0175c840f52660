//! Presence of visitors whose polls were rate-limited: a refused poll still
//! says the visitor is there, so it must keep the place from the idle sweep.
//!
//! Refused polls never reach the store one by one (that is the point of the
//! limit); each refused visitor is remembered once and marked seen by one
//! `status` call per flush, so a flood of refused polls costs the store at
//! most one call per distinct visitor per flush, and at most
//! [`MAX_PER_FLUSH`] per event. The idle timeout is minutes; a flush every
//! few seconds is far inside it.
//!
//! A session id is anyone's to make up, so one address could fill the
//! event's share with made-up ones at every flush and crowd out the real
//! visitors behind a busy shared address, whose places would then idle
//! out. Each address (an IPv6 client by its /64) is remembered for at most
//! [`MAX_PER_ADDRESS`] visitors a flush: a visitor needs one mark per idle
//! timeout, and a crowd behind one address gets that many marks every
//! flush, hundreds over an idle timeout for each.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

use anteroom_store::{EventId, QueueStore, Touch};

use crate::client_ip::address_key;

/// Distinct refused visitors remembered per event between two flushes;
/// beyond it (a flood of made-up sessions) the rest are dropped and counted.
pub const MAX_PER_FLUSH: usize = 10_000;

/// Distinct refused visitors remembered per event and address between two
/// flushes.
pub const MAX_PER_ADDRESS: u32 = 100;

/// Store calls in flight at once while flushing.
const CONCURRENCY: usize = 16;

#[derive(Default)]
pub struct ThrottledSeen {
    pending: Mutex<HashMap<EventId, Pending>>,
}

/// One event's refused visitors until the next flush.
#[derive(Default)]
struct Pending {
    members: HashSet<String>,
    /// How many of them each address brought.
    by_address: HashMap<u128, u32>,
}

impl ThrottledSeen {
    /// Remembers that `member` polled `event` from `ip` and was refused.
    pub fn note(&self, event: &EventId, member: &str, ip: IpAddr) {
        if member.is_empty() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let set = pending.entry(event.clone()).or_default();
        if set.members.contains(member) {
            return;
        }
        let from_address = set.by_address.entry(address_key(ip)).or_default();
        if set.members.len() >= MAX_PER_FLUSH || *from_address >= MAX_PER_ADDRESS {
            metrics::counter!("anteroom_throttled_seen_dropped_total").increment(1);
            return;
        }
        *from_address += 1;
        set.members.insert(member.to_owned());
    }

    /// Marks every remembered visitor seen in the store (a `status` read
    /// with the seen mark) and forgets them. Returns how many were marked.
    pub async fn flush(&self, store: &dyn QueueStore) -> usize {
        use futures::StreamExt;
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let calls: Vec<(EventId, String)> = pending
            .into_iter()
            .flat_map(|(event, pending)| {
                pending.members.into_iter().map(move |m| (event.clone(), m))
            })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn remembered(seen: &ThrottledSeen, event: &EventId) -> usize {
        seen.pending
            .lock()
            .unwrap()
            .get(event)
            .map_or(0, |p| p.members.len())
    }

    /// Made-up session ids from one address (an IPv6 client by its /64)
    /// take at most their address's share of a flush, and leave room for
    /// the visitors of every other address.
    #[test]
    fn one_address_cannot_crowd_the_others_out_of_a_flush() {
        let seen = ThrottledSeen::default();
        let event = EventId::new("e").unwrap();
        let flooder: IpAddr = "2001:db8::1".parse().unwrap();
        for i in 0..1_000 {
            // Another address of the same /64 is the same client.
            let ip = if i % 2 == 0 {
                flooder
            } else {
                "2001:db8::ffff".parse().unwrap()
            };
            seen.note(&event, &format!("{i:032x}"), ip);
        }
        assert_eq!(remembered(&seen, &event), MAX_PER_ADDRESS as usize);
        // One already remembered is not counted twice.
        seen.note(&event, &format!("{:032x}", 0), flooder);
        assert_eq!(remembered(&seen, &event), MAX_PER_ADDRESS as usize);
        let neighbour: IpAddr = "198.51.100.7".parse().unwrap();
        seen.note(&event, "real-visitor", neighbour);
        assert_eq!(remembered(&seen, &event), MAX_PER_ADDRESS as usize + 1);
    }
}
