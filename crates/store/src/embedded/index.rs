//! The order-statistic index of one event's queue: rank in O(log n).
//!
//! Two parts, because a queue has two kinds of arrivals:
//!
//! * [`Tail`]: post-open arrivals. Their scores rise with the canonical clock
//!   (strictly: the store's clock never repeats an instant), so arrival
//!   sequence *is* rank order. The tail is an array indexed by arrival
//!   sequence plus a bitmap of which entries still wait, counted by a Fenwick
//!   tree over 512-bit blocks: rank is a prefix sum in a tree small enough to
//!   stay in cache plus popcounts in one cache line, an arrival is an
//!   append, and about 4 bytes per waiter is all it costs.
//! * [`Chunked`]: everything else: shuffled pre-window scores, visitors
//!   placed behind, and any score that does not rise (a clock step, an
//!   opening time moved later). Keys sorted in chunks of at most [`CHUNK`]
//!   entries plus a Fenwick tree of chunk sizes: rank = waiters in earlier
//!   chunks + a binary search in the chunk.
//!
//! A member's rank is its rank in its own part plus the members of the other
//! part that sort before it; in the usual queue (pre-window members all
//! before the tail, "behind" members all after it) that count is found
//! without touching the other part's entries. Equal scores are ordered by
//! member id, as Redis orders them; the tail never holds equal scores.

use std::cmp::Ordering;

use anteroom_core::score::BEHIND_OFFSET;

use super::table::{MemberTable, NO_POS};

/// Largest chunk: a 12 KiB move per middle insert, ~1 cache line per
/// binary-search step once the chunk is found.
const CHUNK: usize = 1024;

/// Marks a tail entry that no longer waits.
const DEAD: u32 = u32::MAX;

/// Fewest popped tail entries worth compacting away.
const COMPACT_MIN: usize = if cfg!(test) { 1024 } else { 1 << 16 };

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

/// A Fenwick tree (1-based) of counts.
#[derive(Default)]
struct Fenwick(Vec<u32>);

impl Fenwick {
    fn from_counts(counts: impl Iterator<Item = u32>) -> Self {
        let mut tree = vec![0u32];
        tree.extend(counts);
        let n = tree.len() - 1;
        for i in 1..=n {
            let j = i + (i & i.wrapping_neg());
            if j <= n {
                let v = tree[i];
                tree[j] += v;
            }
        }
        Fenwick(tree)
    }

    /// Appends entry `len()` with count `v`.
    fn push(&mut self, v: u32) {
        if self.0.is_empty() {
            self.0.push(0);
        }
        let j = self.0.len();
        let low = j & j.wrapping_neg();
        let mut sum = v;
        let mut k = 1;
        while k < low {
            sum = sum.wrapping_add(self.0[j - k]);
            k <<= 1;
        }
        self.0.push(sum);
    }

    fn add(&mut self, i: usize, delta: i32) {
        let mut j = i + 1;
        while j < self.0.len() {
            self.0[j] = self.0[j].wrapping_add_signed(delta);
            j += j & j.wrapping_neg();
        }
    }

    /// Sum of the counts of entries `0..i`.
    fn prefix(&self, i: usize) -> u64 {
        let mut j = i;
        let mut sum = 0u64;
        while j > 0 {
            sum += u64::from(self.0[j]);
            j &= j - 1;
        }
        sum
    }

    /// The entry holding the `k`-th counted item (0-based), by descent.
    fn find(&self, mut k: u64) -> usize {
        let n = self.0.len().saturating_sub(1);
        let mut pos = 0;
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        while step > 0 {
            let next = pos + step;
            if next <= n && u64::from(self.0[next]) <= k {
                k -= u64::from(self.0[next]);
                pos = next;
            }
            step >>= 1;
        }
        pos
    }
}

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
/// the bitmap's 512-bit blocks. Rank is a prefix sum over blocks (80 KiB of
/// tree at 10M waiters: it stays in cache) plus popcounts in one cache line.
#[derive(Default)]
struct Tail {
    /// Arrival sequence of `slots[0]`; a member's position is base + index.
    base: u32,
    /// The member slot of each arrival, [`DEAD`] once it left.
    slots: Vec<u32>,
    bits: Vec<Block>,
    blocks: Fenwick,
    /// Entries before `head` and from `end` on are all dead.
    head: usize,
    end: usize,
    live: usize,
    /// Score of the last entry appended: the next one must be higher.
    last_score: Option<i64>,
}

impl Tail {
    fn accepts(&self, score: i64) -> bool {
        (0..BEHIND_OFFSET).contains(&score)
            && (self.live == 0 || self.last_score.is_none_or(|l| score > l))
            && (u64::from(self.base) + self.slots.len() as u64) < u64::from(NO_POS)
    }

    /// Appends `slot`, returning its position.
    fn push(&mut self, slot: u32, score: i64) -> u32 {
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

    fn rank(&self, pos: u32) -> u64 {
        self.rank_of_index(self.index(pos))
    }

    /// Clears entry `i` (which must be live) without touching the tree.
    fn clear(&mut self, i: usize) {
        self.slots[i] = DEAD;
        self.bits[i / BLOCK_BITS].0[(i % BLOCK_BITS) / 64] &= !(1 << (i % 64));
        self.live -= 1;
    }

    fn remove(&mut self, pos: u32) {
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

    fn front(&self) -> Option<u32> {
        (self.live > 0).then(|| self.slots[self.head])
    }

    fn back(&self) -> Option<u32> {
        (self.live > 0).then(|| self.slots[self.end - 1])
    }

    /// The live entry of rank `r`.
    fn nth(&self, r: u64) -> u32 {
        let b = self.blocks.find(r);
        let k = r - self.blocks.prefix(b);
        self.slots[b * BLOCK_BITS + self.bits[b].select(k)]
    }

    /// Live entries that sort before `k`, a key not in the tail.
    fn count_less(&self, t: &MemberTable, k: (i64, u32)) -> u64 {
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

    fn pop_front(&mut self, n: usize, out: &mut Vec<u32>) {
        self.take_front(n, out);
        if self.head >= COMPACT_MIN && self.head * 2 >= self.slots.len() {
            self.compact();
        }
    }

    /// [`Self::pop_front`] without the compaction (a tail being repacked
    /// away is dropped whole).
    fn take_front(&mut self, n: usize, out: &mut Vec<u32>) {
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
    fn holds(&self, pos: u32) -> bool {
        pos >= self.base && ((pos - self.base) as usize) < self.slots.len()
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
struct Chunked {
    chunks: Vec<Chunk>,
    /// The last key of every chunk, for the chunk search without a pointer chase.
    lasts: Vec<(i64, u32)>,
    /// Chunk lengths.
    tree: Fenwick,
    len: usize,
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
    fn count_less(&self, t: &MemberTable, key: (i64, u32)) -> u64 {
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

    fn insert(&mut self, t: &MemberTable, key: (i64, u32)) {
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
    fn remove(&mut self, t: &MemberTable, key: (i64, u32)) -> bool {
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

    fn front(&self) -> Option<u32> {
        self.chunks.first().map(|c| c.slots[0])
    }

    fn pop_front(&mut self, n: usize, out: &mut Vec<u32>) {
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
            self.moving = Some(Tail {
                base: end as u32,
                ..Tail::default()
            });
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
        let live: Vec<u32> = self
            .tail
            .slots
            .iter()
            .copied()
            .filter(|s| *s != DEAD)
            .collect();
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
            .chunks
            .iter()
            .flat_map(|c| c.slots.iter().copied())
            .chain(self.tail.slots.iter().copied().filter(|s| *s != DEAD))
            .chain(
                self.moving
                    .iter()
                    .flat_map(|m| m.slots.iter().copied().filter(|s| *s != DEAD)),
            )
            .collect();
        all.sort_by(|a, b| cmp_key(t, key(t, *a), key(t, *b)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts, removes and pops in random order (rising post-open scores,
    /// shuffled pre-window ones, "behind" ones, ties) and checks every rank
    /// against a sorted vector.
    #[test]
    fn ranks_match_a_sorted_vector() {
        for seed in [7u64, 11, 12345] {
            let mut t = MemberTable::new();
            let mut o = Order::default();
            let mut model: Vec<(i64, String)> = Vec::new();
            let mut x: u64 = seed;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for i in 0..8000i64 {
                let r = next();
                let score = match r % 6 {
                    0..=2 => i * 4,
                    3 => -((r % 500) as i64) - 1,
                    4 => (r % 500) as i64,
                    _ => BEHIND_OFFSET + (r % 50) as i64,
                };
                let m = if r % 2 == 0 {
                    format!("{:032x}", r % 100_000)
                } else {
                    format!("m{}", r % 100_000)
                };
                if t.find(&m).is_some() {
                    continue;
                }
                let s = t.insert(&m, score, 0).unwrap();
                o.insert(&mut t, s);
                model.push((score, m));
                if r % 7 == 0 && !model.is_empty() {
                    model.sort();
                    let (_, mm) = model.remove((r as usize / 7) % model.len());
                    let s = t.find(&mm).unwrap();
                    assert!(o.remove(&mut t, s));
                    t.remove(s);
                }
                if r % 29 == 0 {
                    model.sort();
                    let k = (r % 40) as usize;
                    for s in o.pop_front(&mut t, k) {
                        let (sc, mm) = model.remove(0);
                        assert_eq!(&*t.member(s), mm);
                        assert_eq!(t.score(s), sc);
                        t.remove(s);
                    }
                }
                if i % 500 == 0 {
                    check(&t, &o, &mut model);
                }
            }
            check(&t, &o, &mut model);
        }
    }

    fn check(t: &MemberTable, o: &Order, model: &mut [(i64, String)]) {
        model.sort();
        assert_eq!(o.len(), model.len());
        for (rank, (_, m)) in model.iter().enumerate() {
            let s = t.find(m).unwrap();
            assert_eq!(o.rank(t, s), rank as u64, "{m}");
        }
        let got: Vec<String> = o.iter(t).iter().map(|s| t.member(*s).to_owned()).collect();
        let want: Vec<String> = model.iter().map(|m| m.1.clone()).collect();
        assert_eq!(got, want);
    }

    /// A long tail: thousands of blocks' worth of pops force compactions;
    /// late out-of-order keys land inside the tail's range (the select path).
    #[test]
    fn tail_compacts_and_keeps_ranks() {
        let mut t = MemberTable::new();
        let mut o = Order::default();
        let mut model: Vec<(i64, String)> = Vec::new();
        fn add(
            t: &mut MemberTable,
            o: &mut Order,
            model: &mut Vec<(i64, String)>,
            score: i64,
            m: String,
        ) {
            let s = t.insert(&m, score, 0).unwrap();
            o.insert(t, s);
            model.push((score, m));
        }
        for i in 0..6000i64 {
            add(&mut t, &mut o, &mut model, i * 10, format!("{i:032x}"));
        }
        for i in (0..6000i64).step_by(3) {
            let s = t.find(&format!("{i:032x}")).unwrap();
            assert!(o.remove(&mut t, s));
            t.remove(s);
        }
        model.retain(|(sc, _)| (sc / 10) % 3 != 0);
        for round in 0..3 {
            model.sort();
            for s in o.pop_front(&mut t, 1100) {
                let (sc, m) = model.remove(0);
                assert_eq!(
                    (t.score(s), &*t.member(s)),
                    (sc, m.as_str()),
                    "round {round}"
                );
                t.remove(s);
            }
            for i in 0..50i64 {
                // Below the tail's last score: these go to the chunked part.
                add(
                    &mut t,
                    &mut o,
                    &mut model,
                    30_000 + round * 1000 + i * 7 + 5,
                    format!("late{round}-{i}"),
                );
            }
            check(&t, &o, &mut model);
        }
        for i in 6000..7000i64 {
            add(&mut t, &mut o, &mut model, i * 10, format!("{i:032x}"));
        }
        check(&t, &o, &mut model);
        // Most of the tail leaves from the middle (idle expiry): it repacks.
        model.sort();
        let before = o.tail.slots.len();
        let gone: Vec<String> = model
            .iter()
            .filter(|(sc, _)| *sc >= 40_000 && *sc % 7 != 0)
            .map(|(_, m)| m.clone())
            .collect();
        for m in &gone {
            let s = t.find(m).unwrap();
            assert!(o.remove(&mut t, s));
            t.remove(s);
        }
        model.retain(|(_, m)| !gone.contains(m));
        // In slices, with every rank right between two of them.
        let mut slices = 0;
        while o.repack_step(&mut t, 10) {
            slices += 1;
            if slices % 5 == 0 {
                check(&t, &o, &mut model);
            }
        }
        assert!(slices > 5, "the repack went in {slices} slices");
        assert!(o.tail.slots.len() < before / 2, "the tail repacked");
        check(&t, &o, &mut model);
        for i in 7000..7100i64 {
            add(&mut t, &mut o, &mut model, i * 10, format!("{i:032x}"));
        }
        check(&t, &o, &mut model);
    }

    #[test]
    fn fenwick_push_matches_from_counts() {
        let counts: Vec<u32> = (0..300).map(|i| (i * 7 % 5) as u32).collect();
        let mut pushed = Fenwick::default();
        for c in &counts {
            pushed.push(*c);
        }
        let built = Fenwick::from_counts(counts.iter().copied());
        assert_eq!(pushed.0, built.0);
        for i in 0..=counts.len() {
            let want: u64 = counts[..i].iter().map(|c| u64::from(*c)).sum();
            assert_eq!(built.prefix(i), want);
        }
        // find(k): the entry holding the k-th counted item.
        let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
        for k in 0..total {
            let e = built.find(k);
            assert!(built.prefix(e) <= k && k < built.prefix(e + 1), "{k}");
        }
    }
}
