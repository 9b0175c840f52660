//! The bounded cache of last known ranks one node keeps per event, so that
//! while the store is unreachable it can still admit the visitors it knows to
//! be at the front.
//!
//! Bounded because every position answer feeds it: when full, the visitor
//! furthest back is forgotten first, since drain admissions start at the
//! front and would reach that visitor last anyway.

use std::collections::{BTreeSet, HashMap};

/// Most visitors remembered per event and node (about 100 bytes each).
pub const MAX_REMEMBERED: usize = 100_000;

/// Last known rank per waiting visitor, ordered by rank.
#[derive(Debug)]
pub struct RankCache {
    by_member: HashMap<String, u64>,
    by_rank: BTreeSet<(u64, String)>,
    limit: usize,
}

impl Default for RankCache {
    fn default() -> Self {
        Self::with_limit(MAX_REMEMBERED)
    }
}

impl RankCache {
    pub fn with_limit(limit: usize) -> Self {
        Self {
            by_member: HashMap::new(),
            by_rank: BTreeSet::new(),
            limit: limit.max(1),
        }
    }

    /// Remembers `member` at `rank` (its latest answer replaces older ones).
    pub fn note(&mut self, member: &str, rank: u64) {
        if let Some(old) = self.by_member.get(member).copied() {
            if old == rank {
                return;
            }
            self.by_rank.remove(&(old, member.to_owned()));
        } else if self.by_member.len() >= self.limit {
            // Full: keep the front of the queue, which drain admits first.
            match self.by_rank.last() {
                Some((back, _)) if *back > rank => {
                    if let Some((_, evicted)) = self.by_rank.pop_last() {
                        self.by_member.remove(&evicted);
                    }
                }
                _ => return,
            }
        }
        self.by_member.insert(member.to_owned(), rank);
        self.by_rank.insert((rank, member.to_owned()));
    }

    /// Forgets `member` (admitted, active, gone).
    pub fn forget(&mut self, member: &str) {
        if let Some(rank) = self.by_member.remove(member) {
            self.by_rank.remove(&(rank, member.to_owned()));
        }
    }

    /// Takes the `n` front-most remembered visitors out of the cache.
    pub fn take_front(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::with_capacity(n.min(self.by_member.len()));
        while out.len() < n {
            let Some((_, member)) = self.by_rank.pop_first() else {
                break;
            };
            self.by_member.remove(&member);
            out.push(member);
        }
        out
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_first_and_bounded() {
        let mut c = RankCache::with_limit(3);
        c.note("c", 2);
        c.note("a", 0);
        c.note("b", 1);
        // Full: a visitor further back than everyone is not remembered...
        c.note("z", 9);
        assert_eq!(c.len(), 3);
        // ...one further forward evicts the back.
        c.note("a2", 0);
        assert_eq!(c.len(), 3);
        // A newer answer moves a visitor.
        c.note("b", 0);
        c.forget("a2");
        assert_eq!(c.take_front(5), vec!["a".to_owned(), "b".to_owned()]);
        assert!(c.is_empty());
    }
}
