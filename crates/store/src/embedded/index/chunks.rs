//! The chunked part of the rank index: every waiter the tail does not take
//! (shuffled pre-window scores, visitors placed behind, and any score that
//! does not rise: a clock step, an opening time moved later).
//!
//! Keys sorted in chunks of at most [`CHUNK`] entries plus a Fenwick tree
//! of chunk sizes: rank = waiters in earlier chunks + a binary search in the
//! chunk. Equal scores are ordered by member id, as Redis orders them.

use std::cmp::Ordering;

use super::cmp_key;
use super::fenwick::Fenwick;
use crate::embedded::table::MemberTable;

/// Largest chunk: a 12 KiB move per middle insert, ~1 cache line per
/// binary-search step once the chunk is found.
const CHUNK: usize = 1024;

#[derive(Default)]
struct Chunk {
    scores: Vec<i64>,
    slots: Vec<u32>,
}

impl Chunk {
    fn with(scores: impl IntoIterator<Item = i64>, slots: impl IntoIterator<Item = u32>) -> Self {
        let mut c = Chunk {
            scores: Vec::with_capacity(CHUNK),
            slots: Vec::with_capacity(CHUNK),
        };
        c.scores.extend(scores);
        c.slots.extend(slots);
        c
    }

    fn last(&self) -> (i64, u32) {
        let n = self.scores.len() - 1;
        (self.scores[n], self.slots[n])
    }
}

/// Out-of-order arrivals, sorted in chunks (see the module docs).
#[derive(Default)]
pub(super) struct Chunked {
    chunks: Vec<Chunk>,
    /// The last key of every chunk, for the chunk search without a pointer chase.
    lasts: Vec<(i64, u32)>,
    /// Chunk lengths.
    tree: Fenwick,
    pub(super) len: usize,
}

impl Chunked {
    fn rebuild(&mut self) {
        self.lasts = self.chunks.iter().map(Chunk::last).collect();
        self.tree = Fenwick::from_counts(self.chunks.iter().map(|c| c.scores.len() as u32));
    }

    /// First chunk whose last key is >= `key`.
    fn chunk_for(&self, t: &MemberTable, key: (i64, u32)) -> usize {
        self.lasts
            .partition_point(|l| cmp_key(t, *l, key) == Ordering::Less)
    }

    /// Entries of chunk `ci` that sort before `key`.
    fn pos_in(&self, t: &MemberTable, ci: usize, key: (i64, u32)) -> usize {
        let c = &self.chunks[ci];
        let mut p = c.scores.partition_point(|s| *s < key.0);
        while p < c.scores.len()
            && c.scores[p] == key.0
            && cmp_key(t, (c.scores[p], c.slots[p]), key) == Ordering::Less
        {
            p += 1;
        }
        p
    }

    /// Entries that sort before `key` (in the index or not).
    pub(super) fn count_less(&self, t: &MemberTable, key: (i64, u32)) -> u64 {
        if self.len == 0 {
            return 0;
        }
        let ci = self.chunk_for(t, key);
        if ci >= self.chunks.len() {
            return self.len as u64;
        }
        let before = self.tree.prefix(ci);
        if key.0 < self.chunks[ci].scores[0] {
            return before;
        }
        before + self.pos_in(t, ci, key) as u64
    }

    pub(super) fn insert(&mut self, t: &MemberTable, key: (i64, u32)) {
        self.len += 1;
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::with([key.0], [key.1]));
            self.rebuild();
            return;
        }
        let last = self.chunks.len() - 1;
        let ci = self.chunk_for(t, key).min(last);
        let pos = self.pos_in(t, ci, key);
        let c = &mut self.chunks[ci];
        if c.scores.len() < CHUNK {
            c.scores.insert(pos, key.0);
            c.slots.insert(pos, key.1);
            self.lasts[ci] = c.last();
            self.tree.add(ci, 1);
            return;
        }
        if ci == last && pos == CHUNK {
            // Tail append of a full chunk: start a fresh one, keeping chunks full.
            self.chunks.push(Chunk::with([key.0], [key.1]));
            self.lasts.push(key);
            self.tree.push(1);
            return;
        }
        let mut right = Chunk::with(c.scores.drain(CHUNK / 2..), c.slots.drain(CHUNK / 2..));
        let (target, p) = if pos <= CHUNK / 2 {
            (&mut *c, pos)
        } else {
            (&mut right, pos - CHUNK / 2)
        };
        target.scores.insert(p, key.0);
        target.slots.insert(p, key.1);
        self.chunks.insert(ci + 1, right);
        self.rebuild();
    }

    /// Removes a key that is in the index.
    pub(super) fn remove(&mut self, t: &MemberTable, key: (i64, u32)) -> bool {
        let ci = self.chunk_for(t, key);
        if ci >= self.chunks.len() {
            return false;
        }
        let pos = self.pos_in(t, ci, key);
        let c = &mut self.chunks[ci];
        if pos >= c.slots.len() || c.slots[pos] != key.1 {
            return false;
        }
        c.scores.remove(pos);
        c.slots.remove(pos);
        self.len -= 1;
        if c.scores.is_empty() {
            self.chunks.remove(ci);
            self.rebuild();
        } else {
            self.lasts[ci] = c.last();
            self.tree.add(ci, -1);
        }
        true
    }

    pub(super) fn front(&self) -> Option<u32> {
        self.chunks.first().map(|c| c.slots[0])
    }

    pub(super) fn pop_front(&mut self, n: usize, out: &mut Vec<u32>) {
        let mut left = n.min(self.len);
        let mut structural = false;
        while left > 0 {
            let c = &mut self.chunks[0];
            let take = left.min(c.slots.len());
            out.extend(c.slots.drain(..take));
            c.scores.drain(..take);
            self.len -= take;
            left -= take;
            if c.slots.is_empty() {
                self.chunks.remove(0);
                structural = true;
            } else if !structural {
                self.tree.add(0, -(take as i32));
            }
        }
        if structural {
            self.rebuild();
        }
    }

    /// Every slot, best first.
    #[cfg(test)]
    pub(super) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks.iter().flat_map(|c| c.slots.iter().copied())
    }
}

#[cfg(test)]
mod tests;
