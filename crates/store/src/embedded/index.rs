//! The order-statistic index of one event's queue: rank in O(log n).
//!
//! Two parts, because a queue has two kinds of arrivals, each in a module
//! of its own:
//!
//! * [`tail`]: post-open arrivals, whose scores rise with the canonical
//!   clock, in arrival order (bitmap + Fenwick tree over 512-bit blocks).
//! * [`chunks`]: everything else (shuffled pre-window scores, visitors
//!   placed behind, scores that do not rise), sorted in chunks.
//!
//! [`Order`], here, joins them. A member's rank is its rank in its own part
//! plus the members of the other part that sort before it; in the usual
//! queue (pre-window members all before the tail, "behind" members all
//! after it) that count is found without touching the other part's entries.
//! Equal scores are ordered by member id, as Redis orders them; the tail
//! never holds equal scores.

mod chunks;
mod fenwick;
mod tail;

use std::cmp::Ordering;

use self::chunks::Chunked;
use self::tail::{COMPACT_MIN, Tail};
use super::table::{MemberTable, NO_POS};

/// Orders two index keys (score, member slot): by score, then by member id.
pub(crate) fn cmp_key(t: &MemberTable, a: (i64, u32), b: (i64, u32)) -> Ordering {
    a.0.cmp(&b.0).then_with(|| {
        if a.1 == b.1 {
            Ordering::Equal
        } else {
            t.member(a.1).as_bytes().cmp(t.member(b.1).as_bytes())
        }
    })
}

fn key(t: &MemberTable, slot: u32) -> (i64, u32) {
    (t.score(slot), slot)
}

/// The queue's order: [`Tail`] and [`Chunked`] together.
///
/// A tail mostly emptied from the middle (releases, idle expiry) is
/// repacked, so dead entries do not pile up: its live entries move, front
/// first, into a fresh tail whose positions follow the old ones, a bounded
/// slice per [`Order::repack_step`], so the actor never holds the event for
/// O(waiters). Between slices only reads (rank, length) run: a member of the
/// fresh tail ranks by it, one still in the old tail after all of the fresh
/// one. Any change first finishes the repack.
#[derive(Default)]
pub(crate) struct Order {
    tail: Tail,
    rest: Chunked,
    /// The fresh tail of a repack under way: every member in it arrived
    /// before every member left in `tail`.
    moving: Option<Tail>,
    /// The tail is sparse enough to be repacked.
    repack_due: bool,
}

impl Order {
    pub(crate) fn len(&self) -> usize {
        self.tail.live + self.rest.len + self.moving.as_ref().map_or(0, |m| m.live)
    }

    /// Adds a waiting member's slot (its score is already in the table).
    pub(crate) fn insert(&mut self, t: &mut MemberTable, slot: u32) {
        self.finish_repack(t);
        let score = t.score(slot);
        if self.tail.accepts(score) {
            let pos = self.tail.push(slot, score);
            t.set_pos(slot, pos);
        } else {
            self.rest.insert(t, (score, slot));
            t.set_pos(slot, NO_POS);
        }
    }

    /// Rank of a slot that is in the index.
    pub(crate) fn rank(&self, t: &MemberTable, slot: u32) -> u64 {
        let k = key(t, slot);
        let moved = self.moving.as_ref();
        match t.pos(slot) {
            NO_POS => {
                let own = self.rest.count_less(t, k);
                own + self.tail.count_less(t, k) + moved.map_or(0, |m| m.count_less(t, k))
            }
            pos => {
                let in_tails = match moved {
                    Some(m) if m.holds(pos) => m.rank(pos),
                    Some(m) => m.live as u64 + self.tail.rank(pos),
                    None => self.tail.rank(pos),
                };
                in_tails + self.rest.count_less(t, k)
            }
        }
    }

    /// Removes a slot that is in the index.
    pub(crate) fn remove(&mut self, t: &mut MemberTable, slot: u32) -> bool {
        self.finish_repack(t);
        match t.pos(slot) {
            NO_POS => self.rest.remove(t, key(t, slot)),
            pos => {
                self.tail.remove(pos);
                t.set_pos(slot, NO_POS);
                if self.tail.slots.len() >= COMPACT_MIN
                    && self.tail.live * 4 < self.tail.slots.len()
                {
                    self.repack_due = true;
                }
                true
            }
        }
    }

    /// Is a repack due or under way?
    pub(crate) fn repack_pending(&self) -> bool {
        self.repack_due || self.moving.is_some()
    }

    /// Moves up to `budget` members of a due repack; `true` while more is
    /// left. The caller may let reads in between two steps.
    pub(crate) fn repack_step(&mut self, t: &mut MemberTable, budget: usize) -> bool {
        if self.moving.is_none() {
            if !self.repack_due {
                return false;
            }
            self.repack_due = false;
            let end = u64::from(self.tail.base) + self.tail.slots.len() as u64;
            if end + self.tail.live as u64 >= u64::from(NO_POS) {
                // No room for positions after the old ones: start from 0 in
                // one go (once per four billion arrivals).
                self.repack_whole(t);
                return false;
            }
            self.moving = Some(Tail::starting_at(end as u32));
        }
        let Some(fresh) = self.moving.as_mut() else {
            return false;
        };
        let mut out = Vec::with_capacity(budget.min(self.tail.live));
        self.tail.take_front(budget.max(1), &mut out);
        for slot in out {
            let pos = fresh.push(slot, t.score(slot));
            t.set_pos(slot, pos);
        }
        if self.tail.live > 0 {
            return true;
        }
        let last_score = self.tail.last_score;
        if let Some(mut fresh) = self.moving.take() {
            fresh.last_score = last_score;
            self.tail = fresh;
        }
        false
    }

    /// Completes a repack under way (or due) at once.
    fn finish_repack(&mut self, t: &mut MemberTable) {
        if self.moving.is_some() {
            while self.repack_step(t, usize::MAX) {}
        }
    }

    /// Rewrites the tail with only its live entries from position 0.
    fn repack_whole(&mut self, t: &mut MemberTable) {
        let live: Vec<u32> = self.tail.live_slots().collect();
        let last_score = self.tail.last_score;
        self.tail = Tail::default();
        for slot in live {
            let pos = self.tail.push(slot, t.score(slot));
            t.set_pos(slot, pos);
        }
        self.tail.last_score = last_score;
    }

    /// Takes the `n` best-ranked slots out of the index, best first.
    pub(crate) fn pop_front(&mut self, t: &mut MemberTable, n: usize) -> Vec<u32> {
        self.finish_repack(t);
        let t = &*t;
        let n = n.min(self.len());
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let left = n - out.len();
            match (self.rest.front(), self.tail.front()) {
                (Some(r), Some(tl)) => {
                    // Whichever part is ahead gives up every member that
                    // sorts before the other part's best, in one go.
                    let from_rest = self.rest.count_less(t, key(t, tl)) as usize;
                    if from_rest > 0 {
                        self.rest.pop_front(from_rest.min(left), &mut out);
                    } else {
                        let from_tail = self.tail.count_less(t, key(t, r)).max(1) as usize;
                        self.tail.pop_front(from_tail.min(left), &mut out);
                    }
                }
                (Some(_), None) => self.rest.pop_front(left, &mut out),
                (None, Some(_)) => self.tail.pop_front(left, &mut out),
                (None, None) => break,
            }
        }
        out
    }

    /// Every slot, best first.
    #[cfg(test)]
    pub(crate) fn iter(&self, t: &MemberTable) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .rest
            .slots()
            .chain(self.tail.live_slots())
            .chain(self.moving.iter().flat_map(Tail::live_slots))
            .collect();
        all.sort_by(|a, b| cmp_key(t, key(t, *a), key(t, *b)));
        all
    }
}

#[cfg(test)]
mod tests;
