//! The tail of the rank index: post-open arrivals in arrival order.
//!
//! Their scores rise with the canonical clock (strictly: the store's clock
//! never repeats an instant), so arrival sequence *is* rank order. The tail
//! is an array indexed by arrival sequence plus a bitmap of which entries
//! still wait, counted by a Fenwick tree over 512-bit blocks: rank is a
//! prefix sum in a tree small enough to stay in cache (80 KiB at 10M
//! waiters) plus popcounts in one cache line, an arrival is an append, and
//! about 4 bytes per waiter is all it costs.

use std::cmp::Ordering;

use anteroom_core::score::BEHIND_OFFSET;

use super::fenwick::Fenwick;
use super::{cmp_key, key};
use crate::embedded::table::{MemberTable, NO_POS};

/// Marks a tail entry that no longer waits.
pub(super) const DEAD: u32 = u32::MAX;

/// Fewest popped tail entries worth compacting away.
pub(super) const COMPACT_MIN: usize = if cfg!(test) { 1024 } else { 1 << 16 };

/// Bits of one liveness block: one cache line.
const BLOCK_BITS: usize = 512;

/// 512 liveness bits, cache-line aligned so a block is one miss.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Block([u64; 8]);

impl Block {
    fn count_before(&self, bit: usize) -> u64 {
        let (w, b) = (bit / 64, bit % 64);
        let full: u32 = self.0[..w].iter().map(|x| x.count_ones()).sum();
        u64::from(full + (self.0[w] & ((1u64 << b) - 1)).count_ones())
    }

    /// The index of the `k`-th set bit.
    fn select(&self, mut k: u64) -> usize {
        for (w, word) in self.0.iter().enumerate() {
            let ones = u64::from(word.count_ones());
            if k < ones {
                let mut x = *word;
                for _ in 0..k {
                    x &= x - 1;
                }
                return w * 64 + x.trailing_zeros() as usize;
            }
            k -= ones;
        }
        BLOCK_BITS
    }
}

/// Post-open arrivals in arrival order (see the module docs): the member
/// slot of each arrival, a bitmap of who still waits, and a Fenwick tree of
/// the bitmap's 512-bit blocks.
#[derive(Default)]
pub(super) struct Tail {
    /// Arrival sequence of `slots[0]`; a member's position is base + index.
    pub(super) base: u32,
    /// The member slot of each arrival, [`DEAD`] once it left.
    pub(super) slots: Vec<u32>,
    bits: Vec<Block>,
    blocks: Fenwick,
    /// Entries before `head` and from `end` on are all dead.
    head: usize,
    end: usize,
    pub(super) live: usize,
    /// Score of the last entry appended: the next one must be higher.
    pub(super) last_score: Option<i64>,
}

impl Tail {
    /// An empty tail whose first position is `base`.
    pub(super) fn starting_at(base: u32) -> Self {
        Tail {
            base,
            ..Tail::default()
        }
    }

    pub(super) fn accepts(&self, score: i64) -> bool {
        (0..BEHIND_OFFSET).contains(&score)
            && (self.live == 0 || self.last_score.is_none_or(|l| score > l))
            && (u64::from(self.base) + self.slots.len() as u64) < u64::from(NO_POS)
    }

    /// Appends `slot`, returning its position.
    pub(super) fn push(&mut self, slot: u32, score: i64) -> u32 {
        if self.live == 0 && !self.slots.is_empty() {
            // Nobody waits: start over rather than carry dead entries.
            *self = Tail::default();
        }
        let i = self.slots.len();
        let pos = self.base + i as u32;
        self.slots.push(slot);
        if i.is_multiple_of(BLOCK_BITS) {
            self.bits.push(Block::default());
            self.blocks.push(0);
        }
        self.bits[i / BLOCK_BITS].0[(i % BLOCK_BITS) / 64] |= 1 << (i % 64);
        self.blocks.add(i / BLOCK_BITS, 1);
        self.live += 1;
        self.end = self.slots.len();
        self.last_score = Some(score);
        pos
    }

    fn index(&self, pos: u32) -> usize {
        (pos - self.base) as usize
    }

    fn rank_of_index(&self, i: usize) -> u64 {
        self.blocks.prefix(i / BLOCK_BITS) + self.bits[i / BLOCK_BITS].count_before(i % BLOCK_BITS)
    }

    /// Live entries before position `pos` (one of this tail's positions).
    pub(super) fn rank(&self, pos: u32) -> u64 {
        self.rank_of_index(self.index(pos))
    }

    /// Clears entry `i` (which must be live) without touching the tree.
    fn clear(&mut self, i: usize) {
        self.slots[i] = DEAD;
        self.bits[i / BLOCK_BITS].0[(i % BLOCK_BITS) / 64] &= !(1 << (i % 64));
        self.live -= 1;
    }

    pub(super) fn remove(&mut self, pos: u32) {
        let i = self.index(pos);
        if self.slots[i] == DEAD {
            return;
        }
        self.clear(i);
        self.blocks.add(i / BLOCK_BITS, -1);
        while self.head < self.end && self.slots[self.head] == DEAD {
            self.head += 1;
        }
        while self.end > self.head && self.slots[self.end - 1] == DEAD {
            self.end -= 1;
        }
    }

    pub(super) fn front(&self) -> Option<u32> {
        (self.live > 0).then(|| self.slots[self.head])
    }

    pub(super) fn back(&self) -> Option<u32> {
        (self.live > 0).then(|| self.slots[self.end - 1])
    }

    /// The live entry of rank `r`.
    pub(super) fn nth(&self, r: u64) -> u32 {
        let b = self.blocks.find(r);
        let k = r - self.blocks.prefix(b);
        self.slots[b * BLOCK_BITS + self.bits[b].select(k)]
    }

    /// Live entries that sort before `k`, a key not in the tail.
    pub(super) fn count_less(&self, t: &MemberTable, k: (i64, u32)) -> u64 {
        let (Some(first), Some(last)) = (self.front(), self.back()) else {
            return 0;
        };
        if cmp_key(t, k, key(t, first)) == Ordering::Less {
            return 0;
        }
        if cmp_key(t, key(t, last), k) == Ordering::Less {
            return self.live as u64;
        }
        // A key inside the tail's range: binary search over ranks.
        let (mut lo, mut hi) = (0u64, self.live as u64);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cmp_key(t, key(t, self.nth(mid)), k) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    pub(super) fn pop_front(&mut self, n: usize, out: &mut Vec<u32>) {
        self.take_front(n, out);
        if self.head >= COMPACT_MIN && self.head * 2 >= self.slots.len() {
            self.compact();
        }
    }

    /// [`Self::pop_front`] without the compaction (a tail being repacked
    /// away is dropped whole).
    pub(super) fn take_front(&mut self, n: usize, out: &mut Vec<u32>) {
        let mut left = n.min(self.live);
        // Tree updates are summed per block: one walk per 512 entries.
        let mut block = self.head / BLOCK_BITS;
        let mut taken = 0i32;
        while left > 0 {
            let i = self.head;
            if i / BLOCK_BITS != block {
                self.blocks.add(block, -taken);
                (block, taken) = (i / BLOCK_BITS, 0);
            }
            let s = self.slots[i];
            if s != DEAD {
                out.push(s);
                self.clear(i);
                taken += 1;
                left -= 1;
            }
            self.head += 1;
        }
        self.blocks.add(block, -taken);
        while self.head < self.end && self.slots[self.head] == DEAD {
            self.head += 1;
        }
        if self.live == 0 {
            self.head = self.end;
        }
    }

    /// Whether `pos` is one of this tail's positions.
    pub(super) fn holds(&self, pos: u32) -> bool {
        pos >= self.base && ((pos - self.base) as usize) < self.slots.len()
    }

    /// The live entries, in arrival order.
    pub(super) fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|s| *s != DEAD)
    }

    /// Drops the dead prefix (whole blocks); positions do not change.
    fn compact(&mut self) {
        let h = self.head / BLOCK_BITS * BLOCK_BITS;
        self.slots.drain(..h);
        self.bits.drain(..h / BLOCK_BITS);
        self.base += h as u32;
        self.head -= h;
        self.end -= h;
        self.blocks = Fenwick::from_counts(
            self.bits
                .iter()
                .map(|b| b.0.iter().map(|w| w.count_ones()).sum()),
        );
    }
}

#[cfg(test)]
mod tests;
