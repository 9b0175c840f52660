//! The waiting members of one event: member id → slot, packed for memory.
//!
//! A waiting room holds millions of short ids, so the usual
//! `HashMap<String, _>` (a 24-byte `String`, a separate heap block of the id,
//! a padded bucket) costs more than the whole budget per waiter. Here the ids
//! live back to back in one byte arena, each slot is 24 bytes, and the hash
//! table is an open-addressing array of `u32` slot numbers (linear probing,
//! backward-shift deletion, so no tombstones pile up under churn).

use std::hash::BuildHasher;

/// No slot in this bucket.
const EMPTY: u32 = u32::MAX;

/// Slot marker for a freed slot (its arena bytes are garbage).
const FREE: u32 = u32::MAX;

/// One waiting member.
#[derive(Clone, Copy, Debug)]
struct Slot {
    score: i64,
    seen: i64,
    /// Offset of `[len - 1][bytes]` in the arena, or [`FREE`].
    off: u32,
    /// Low 32 bits of the member's hash: home bucket and a cheap pre-compare.
    tag: u32,
}

/// Member id → slot, plus each slot's score and last-seen time.
pub(crate) struct MemberTable {
    hasher: std::collections::hash_map::RandomState,
    buckets: Vec<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    arena: Vec<u8>,
    dead_bytes: usize,
    len: usize,
}

/// The arena is addressed by `u32`; past this it is compacted or refused.
const ARENA_LIMIT: usize = u32::MAX as usize - 512;

impl MemberTable {
    pub(crate) fn new() -> Self {
        Self {
            hasher: std::collections::hash_map::RandomState::new(),
            buckets: vec![EMPTY; 1024],
            slots: Vec::new(),
            free: Vec::new(),
            arena: Vec::new(),
            dead_bytes: 0,
            len: 0,
        }
    }

    /// Reserves room for `n` members so a bulk load never reallocates the
    /// slots (the hash index is sized by [`Self::build_index`]).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.slots.reserve_exact(n);
        self.arena.reserve(n * 24);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The member's hash, to look it up and insert it with one hashing.
    pub(crate) fn tag_of(&self, member: &str) -> u32 {
        // Truncation is the point: the low bits pick the bucket.
        self.hasher.hash_one(member) as u32
    }

    /// The member id stored in `slot`.
    pub(crate) fn member(&self, slot: u32) -> &str {
        let off = self.slots[slot as usize].off as usize;
        let len = usize::from(self.arena[off]) + 1;
        // Only valid UTF-8 (`&str`) is ever copied in, at char boundaries.
        std::str::from_utf8(&self.arena[off + 1..off + 1 + len]).unwrap_or("")
    }

    pub(crate) fn score(&self, slot: u32) -> i64 {
        self.slots[slot as usize].score
    }

    pub(crate) fn seen(&self, slot: u32) -> i64 {
        self.slots[slot as usize].seen
    }

    pub(crate) fn set_seen(&mut self, slot: u32, at: i64) {
        self.slots[slot as usize].seen = at;
    }

    pub(crate) fn find(&self, member: &str) -> Option<u32> {
        self.find_tagged(member, self.tag_of(member))
    }

    /// [`Self::find`] with the member's hash from [`Self::tag_of`].
    pub(crate) fn find_tagged(&self, member: &str, tag: u32) -> Option<u32> {
        let mask = self.mask();
        let mut i = tag as usize & mask;
        loop {
            let b = self.buckets[i];
            if b == EMPTY {
                return None;
            }
            if self.slots[b as usize].tag == tag && self.member(b) == member {
                return Some(b);
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts a member known to be absent and returns its slot.
    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        member: &str,
        score: i64,
        seen: i64,
    ) -> Result<u32, &'static str> {
        self.insert_tagged(member, self.tag_of(member), score, seen)
    }

    /// Stores a member without putting it in the hash index, which
    /// [`Self::build_index`] must then do before any lookup. For start-up,
    /// where every id on disk is known to be distinct.
    pub(crate) fn push_unindexed(
        &mut self,
        member: &str,
        score: i64,
        seen: i64,
    ) -> Result<u32, &'static str> {
        self.push_tagged(member, self.tag_of(member), score, seen)
    }

    /// [`Self::insert`] with the member's hash from [`Self::tag_of`].
    pub(crate) fn insert_tagged(
        &mut self,
        member: &str,
        tag: u32,
        score: i64,
        seen: i64,
    ) -> Result<u32, &'static str> {
        if (self.len + 1) * 8 > self.buckets.len() * 7 {
            self.rehash(self.buckets.len() * 2);
        }
        let slot = self.push_tagged(member, tag, score, seen)?;
        let mask = self.mask();
        let mut i = tag as usize & mask;
        while self.buckets[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.buckets[i] = slot;
        Ok(slot)
    }

    fn push_tagged(
        &mut self,
        member: &str,
        tag: u32,
        score: i64,
        seen: i64,
    ) -> Result<u32, &'static str> {
        if member.is_empty() || member.len() > 256 {
            return Err("member id must be 1..=256 bytes");
        }
        if self.arena.len() + member.len() + 1 > ARENA_LIMIT {
            self.compact();
            if self.arena.len() + member.len() + 1 > ARENA_LIMIT {
                return Err("member arena full (4 GiB of ids in one event)");
            }
        }
        // The bound was checked just above, so the offset fits in u32.
        let off = u32::try_from(self.arena.len()).map_err(|_| "member arena full")?;
        self.arena.push((member.len() - 1) as u8);
        self.arena.extend_from_slice(member.as_bytes());
        let entry = Slot {
            score,
            seen,
            off,
            tag,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = entry;
                s
            }
            None => {
                let s =
                    u32::try_from(self.slots.len()).map_err(|_| "too many members in one event")?;
                self.slots.push(entry);
                s
            }
        };
        self.len += 1;
        Ok(slot)
    }

    /// Indexes every live slot at once. Sorted by home bucket, the members
    /// are placed in one sequential sweep instead of one random probe each,
    /// which at start-up is most of the cost of the table.
    pub(crate) fn build_index(&mut self) {
        let size = (self.len + self.len / 4 + 1)
            .next_power_of_two()
            .max(1024)
            .max(self.buckets.len());
        let mask = size - 1;
        let mut order: Vec<u64> = self
            .live_slots()
            .map(|s| (((self.slots[s as usize].tag as usize & mask) as u64) << 32) | u64::from(s))
            .collect();
        order.sort_unstable();
        let mut buckets = vec![EMPTY; size];
        let mut next = 0usize;
        let mut wrapped = Vec::new();
        for e in order {
            let (home, slot) = ((e >> 32) as usize, e as u32);
            let i = home.max(next);
            if i >= size {
                wrapped.push(slot);
                continue;
            }
            buckets[i] = slot;
            next = i + 1;
        }
        // Runs that reach the end continue at the start, as a probe would.
        let mut i = 0;
        for slot in wrapped {
            while buckets[i] != EMPTY {
                i += 1;
            }
            buckets[i] = slot;
        }
        self.buckets = buckets;
    }

    /// Removes `slot` (which must be live) from the table.
    pub(crate) fn remove(&mut self, slot: u32) {
        let mask = self.mask();
        let tag = self.slots[slot as usize].tag;
        let mut i = tag as usize & mask;
        while self.buckets[i] != slot {
            if self.buckets[i] == EMPTY {
                return;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: pull later entries of the probe run into
        // the hole when their home bucket allows it.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let b = self.buckets[j];
            if b == EMPTY {
                break;
            }
            let home = self.slots[b as usize].tag as usize & mask;
            let between = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !between {
                self.buckets[i] = b;
                i = j;
            }
        }
        self.buckets[i] = EMPTY;
        let s = &mut self.slots[slot as usize];
        let off = s.off as usize;
        self.dead_bytes += usize::from(self.arena[off]) + 2;
        s.off = FREE;
        self.free.push(slot);
        self.len -= 1;
        if self.dead_bytes > 1 << 20 && self.dead_bytes > self.arena.len() / 2 {
            self.compact();
        }
    }

    /// Every live slot (for sweeps and snapshots).
    pub(crate) fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.off != FREE)
            .map(|(i, _)| i as u32)
    }

    fn rehash(&mut self, size: usize) {
        let mut buckets = vec![EMPTY; size];
        let mask = size - 1;
        for (n, s) in self.slots.iter().enumerate() {
            if s.off == FREE {
                continue;
            }
            let mut i = s.tag as usize & mask;
            while buckets[i] != EMPTY {
                i = (i + 1) & mask;
            }
            buckets[i] = n as u32;
        }
        self.buckets = buckets;
    }

    /// Rewrites the arena without the ids of removed members.
    fn compact(&mut self) {
        let mut arena =
            Vec::with_capacity(self.arena.len() - self.dead_bytes.min(self.arena.len()));
        for s in self.slots.iter_mut().filter(|s| s.off != FREE) {
            let off = s.off as usize;
            let len = usize::from(self.arena[off]) + 2;
            s.off = arena.len() as u32;
            arena.extend_from_slice(&self.arena[off..off + len]);
        }
        self.arena = arena;
        self.dead_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_under_churn() {
        let mut t = MemberTable::new();
        let mut live = std::collections::HashMap::new();
        for i in 0..20_000u32 {
            let m = format!("m{i}");
            let s = t.insert(&m, i64::from(i), 0).unwrap();
            live.insert(m, s);
            if i % 3 == 0 {
                let victim = format!("m{}", i / 2);
                if let Some(s) = live.remove(&victim) {
                    t.remove(s);
                }
            }
        }
        assert_eq!(t.len(), live.len());
        for (m, s) in &live {
            assert_eq!(t.find(m), Some(*s));
            assert_eq!(t.member(*s), m);
        }
        assert_eq!(t.find("m1"), None);
        let mut bulk = MemberTable::new();
        for m in live.keys() {
            bulk.push_unindexed(m, 0, 0).unwrap();
        }
        bulk.build_index();
        for m in live.keys() {
            assert_eq!(bulk.member(bulk.find(m).unwrap()), m);
        }
        assert_eq!(bulk.find("m1"), None);
        t.compact();
        for (m, s) in &live {
            assert_eq!(t.member(*s), m);
        }
    }
}
