//! The bounded cache of last known ranks one node keeps per event, so that
//! while the store is unreachable it can still admit the visitors it knows to
//! be at the front.
//!
//! Every position answer feeds it, so noting a visitor is one hash lookup
//! and a store of the new rank, in place: the order by rank is only made
//! when a drain takes the front, which is rare and can afford a pass over
//! the cache. (A set kept ordered by rank cost every poll a removal and an
//! insertion, with two copies of the member id.) Bounded: past twice its
//! limit, the visitors furthest back are forgotten down to the limit, since
//! drain admissions start at the front and would reach them last anyway;
//! while it holds its limit, a new visitor behind the last such cut is not
//! taken in at all.
//!
//! Kept in shards by member, each behind its own lock ([`Ranks`]): every
//! poll and join of every event loop notes its visitor, and one lock shared
//! by the loops moved its cache line from core to core on nearly every
//! request (the unlock alone was about 1 % of a join's CPU in `perf`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::locks::lock;

/// Most visitors remembered per event and node (about 100 bytes each; up
/// to twice as many between two prunings).
pub const MAX_REMEMBERED: usize = 100_000;

/// Last known rank per waiting visitor.
#[derive(Debug)]
pub struct RankCache {
    /// The standard SipHash: its keys are visitors' session ids, which a
    /// visitor chooses, up to 200,000 of them.
    /// Rank and when it was noted (node ms; 0 when not known).
    by_member: HashMap<Box<str>, (u64, i64)>,
    limit: usize,
    /// The rank of the furthest back visitor the last pruning kept
    /// (`u64::MAX` before any).
    cut: u64,
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
            limit: limit.max(1),
            cut: u64::MAX,
        }
    }

    /// Remembers `member` at `rank` (its latest answer replaces older ones).
    pub fn note(&mut self, member: &str, rank: u64) {
        self.note_at(member, rank, 0);
    }

    /// [`Self::note`], noted at `at_ms` (see [`Self::front_since`]).
    pub fn note_at(&mut self, member: &str, rank: u64, at_ms: i64) {
        if let Some(known) = self.by_member.get_mut(member) {
            *known = (rank, at_ms);
            return;
        }
        // A new visitor behind everyone the last pruning kept, while the
        // cache still holds its limit, would be among the first the next
        // pruning forgets: not remembered, which spares a burst's joins
        // (each one new, nearly all of them far back) a key's allocation
        // and a place in a map they would grow. Its poll answers note it
        // again, and one within the cut (the queue moved, or the shard fell
        // below its limit) remembers it.
        if rank > self.cut && self.by_member.len() >= self.limit {
            return;
        }
        self.by_member.insert(member.into(), (rank, at_ms));
        if self.by_member.len() > 2 * self.limit {
            self.prune();
        }
    }

    /// Keeps the `limit` front-most visitors.
    fn prune(&mut self) {
        let mut ranks: Vec<u64> = self.by_member.values().map(|&(rank, _)| rank).collect();
        let (_, &mut cut, _) = ranks.select_nth_unstable(self.limit - 1);
        // Ties at the cut may keep a few more than the limit: harmless.
        self.by_member.retain(|_, (rank, _)| *rank <= cut);
        self.cut = cut;
    }

    /// Forgets `member` (admitted, active, gone).
    pub fn forget(&mut self, member: &str) {
        self.by_member.remove(member);
    }

    /// The `n` front-most remembered visitors with their ranks, front first
    /// (ties in member order, so the answer is the same every time).
    pub fn front(&self, n: usize) -> Vec<(u64, String)> {
        self.front_since(n, i64::MIN)
    }

    /// [`Self::front`] among the visitors noted at `since_ms` or later (or
    /// at an unknown time). A visitor not heard of for a while has left
    /// (the store sweeps them), or moved on through another node; a drain
    /// admission handed to them would hold a slot nobody uses.
    pub fn front_since(&self, n: usize, since_ms: i64) -> Vec<(u64, String)> {
        if n == 0 || self.by_member.is_empty() {
            return Vec::new();
        }
        let mut all: Vec<(u64, &str)> = self
            .by_member
            .iter()
            .filter(|(_, (_, at))| *at == 0 || *at >= since_ms)
            .map(|(m, (r, _))| (*r, &**m))
            .collect();
        if n < all.len() {
            all.select_nth_unstable(n - 1);
            all.truncate(n);
        }
        all.sort_unstable();
        all.into_iter().map(|(r, m)| (r, m.to_owned())).collect()
    }

    /// Takes the `n` front-most remembered visitors out of the cache, front
    /// first (see [`RankCache::front`]).
    pub fn take_front(&mut self, n: usize) -> Vec<String> {
        let front = self.front(n);
        for (_, m) in &front {
            self.by_member.remove(m.as_str());
        }
        front.into_iter().map(|(_, m)| m).collect()
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }
}

/// Shards of the rank cache; a visitor always lives in the same one.
const SHARDS: usize = 16;

/// The rank cache of one event on this node, in shards by member.
#[derive(Debug)]
pub struct Ranks {
    shards: Box<[Mutex<RankCache>]>,
}

impl Default for Ranks {
    fn default() -> Self {
        Self::with_limit(MAX_REMEMBERED)
    }
}

impl Ranks {
    /// About `limit` visitors in all: each shard keeps its own front-most
    /// share of them.
    pub fn with_limit(limit: usize) -> Self {
        let each = limit.div_ceil(SHARDS);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(RankCache::with_limit(each)))
                .collect(),
        }
    }

    fn shard(&self, member: &str) -> &Mutex<RankCache> {
        // Only spreads the visitors: each shard is a keyed hash map of its
        // own, so a chosen id can crowd a shard but not slow its lookups.
        let h = member.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        });
        &self.shards[h % SHARDS]
    }

    /// Remembers `member` at `rank` (its latest answer replaces older ones).
    pub fn note(&self, member: &str, rank: u64) {
        lock(self.shard(member)).note(member, rank);
    }

    /// [`Self::note`], noted at `at_ms` (see [`RankCache::front_since`]).
    pub fn note_at(&self, member: &str, rank: u64, at_ms: i64) {
        lock(self.shard(member)).note_at(member, rank, at_ms);
    }

    /// Forgets `member` (admitted, active, gone).
    pub fn forget(&self, member: &str) {
        lock(self.shard(member)).forget(member);
    }

    /// Takes the `n` front-most remembered visitors out of the cache, front
    /// first (ties in member order). The front of all is among the fronts
    /// of the shards; a visitor noted anew between the look and the taking
    /// is taken all the same (it was at the front a moment before).
    pub fn take_front(&self, n: usize) -> Vec<String> {
        self.take_front_since(n, i64::MIN)
    }

    /// [`Self::take_front`] among the visitors noted at `since_ms` or later
    /// (see [`RankCache::front_since`]).
    pub fn take_front_since(&self, n: usize, since_ms: i64) -> Vec<String> {
        let mut all: Vec<(u64, String)> = Vec::new();
        for shard in self.shards.iter() {
            all.extend(lock(shard).front_since(n, since_ms));
        }
        all.sort_unstable();
        all.truncate(n);
        all.into_iter()
            .map(|(_, m)| {
                self.forget(&m);
                m
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        // Room up to twice the limit; past it, the back is forgotten down
        // to the limit.
        c.note("y", 8);
        c.note("x", 7);
        c.note("w", 6);
        assert_eq!(c.len(), 6);
        c.note("z", 9);
        assert_eq!(c.len(), 3);
        // A newer answer moves a visitor.
        c.note("a2", 0);
        c.note("b", 0);
        c.forget("a2");
        assert_eq!(c.take_front(2), vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(c.take_front(5), vec!["c".to_owned()]);
        assert!(c.is_empty());
    }

    #[test]
    fn a_new_visitor_behind_the_last_cut_waits_until_there_is_room_or_it_is_within() {
        let mut c = RankCache::with_limit(3);
        for (i, m) in ["a", "b", "c", "d", "e", "f", "g"].iter().enumerate() {
            c.note(m, i as u64);
        }
        // Pruned at the seventh down to a, b, c: the cut is rank 2.
        assert_eq!(c.len(), 3);
        c.note("far", 9);
        assert_eq!(c.len(), 3, "behind the cut with the cache at its limit");
        // Within the cut, or a later answer that puts it there: remembered.
        c.note("near", 1);
        c.note("far", 2);
        assert_eq!(c.len(), 5);
        // Below its limit the cache takes anyone again.
        for m in ["a", "b", "c", "near", "far"] {
            c.forget(m);
        }
        c.note("back", 50);
        assert_eq!(c.take_front(5), vec!["back".to_owned()]);
    }

    /// A visitor not heard of for a while (gone, swept by the store, or
    /// moved on through another node) is passed over by a drain.
    #[test]
    fn visitors_not_heard_of_since_are_passed_over() {
        let ranks = Ranks::with_limit(100);
        ranks.note_at("gone", 0, 1_000);
        ranks.note_at("here", 1, 5_000);
        ranks.note("unknown", 2);
        assert_eq!(
            ranks.take_front_since(3, 2_000),
            vec!["here".to_owned(), "unknown".to_owned()]
        );
        // Noted again since: taken.
        ranks.note_at("gone", 0, 6_000);
        assert_eq!(ranks.take_front_since(3, 2_000), vec!["gone".to_owned()]);
    }

    #[test]
    fn a_burst_noted_front_to_back_keeps_its_front_in_the_limit() {
        let ranks = Ranks::with_limit(1600);
        // The order a burst joins in: each new visitor behind all before.
        for i in 0..6400u64 {
            ranks.note(&format!("m{i}"), i);
        }
        // Each shard pruned once at twice its share, and took nobody behind
        // its cut after: about the limit, not twice it.
        assert!(ranks.len() <= 1600 + 16, "{} remembered", ranks.len());
        let expected: Vec<String> = (0..400).map(|i| format!("m{i}")).collect();
        assert_eq!(ranks.take_front(400), expected);
    }

    #[test]
    fn the_shards_together_keep_the_front_past_their_limit() {
        let ranks = Ranks::with_limit(1600);
        // Four times the limit, back to front: each shard prunes its back
        // several times on the way.
        for i in (0..6400u64).rev() {
            ranks.note(&format!("m{i}"), i);
        }
        assert!(ranks.len() <= 2 * 1600, "{} remembered", ranks.len());
        let expected: Vec<String> = (0..400).map(|i| format!("m{i}")).collect();
        assert_eq!(ranks.take_front(400), expected);
        // Taken out: the next front follows on.
        assert_eq!(ranks.take_front(1), vec!["m400".to_owned()]);
    }

    #[test]
    fn notes_from_many_threads_are_all_kept() {
        let ranks = Ranks::with_limit(100_000);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let ranks = &ranks;
                s.spawn(move || {
                    for i in 0..1000u64 {
                        ranks.note(&format!("t{t}-{i}"), t * 1000 + i);
                    }
                });
            }
        });
        assert_eq!(ranks.len(), 4000);
        assert_eq!(
            ranks.take_front(2),
            vec!["t0-0".to_owned(), "t0-1".to_owned()]
        );
    }

    proptest::proptest! {
        /// Whatever is noted and forgotten, the front taken is the visitors
        /// with the lowest latest ranks, in rank order.
        #[test]
        fn the_front_is_the_lowest_latest_ranks(
            steps in proptest::collection::vec((0u8..40, 0u64..100, proptest::bool::weighted(0.1)), 0..300),
            n in 0usize..50,
        ) {
            let c = Ranks::with_limit(16_000);
            let mut model: std::collections::BTreeMap<String, u64> = Default::default();
            for (m, rank, forget) in steps {
                let m = format!("m{m}");
                if forget {
                    c.forget(&m);
                    model.remove(&m);
                } else {
                    c.note(&m, rank);
                    model.insert(m, rank);
                }
            }
            let mut expected: Vec<(u64, String)> = model.into_iter().map(|(m, r)| (r, m)).collect();
            expected.sort();
            expected.truncate(n);
            let expected: Vec<String> = expected.into_iter().map(|(_, m)| m).collect();
            proptest::prop_assert_eq!(c.take_front(n), expected);
        }
    }
}
