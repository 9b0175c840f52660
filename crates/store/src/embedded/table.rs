//! The waiting members of one event: member id → slot, packed for memory.
//!
//! A waiting room holds millions of short ids, so the usual
//! `HashMap<String, _>` (a 24-byte `String`, a separate heap block of the id,
//! a padded bucket) costs more than the whole budget per waiter. Here each
//! member costs a 32-byte slot, an 8-byte last-seen time, and the hash table is an open-addressing array of
//! `(tag, slot)` pairs in a `u64` (linear probing, backward-shift deletion,
//! so no tombstones pile up under churn). The tag in the bucket lets a probe
//! skip other members without reading their slot: a lookup is one bucket
//! miss and one slot miss.
//!
//! Anteroom's own session ids are 32 lower-case hex digits: those are kept
//! inline in the slot as their 16 bytes. Any other id (a JWT `sub`, a test's
//! "alice") lives in a byte arena and the slot holds its offset. Lower-case
//! hex sorts like the bytes it encodes, so both forms compare as their text.

use std::hash::BuildHasher;
use std::ops::Deref;

/// No slot in this bucket.
const EMPTY: u64 = u64::MAX;
/// A bucket of the old table already moved to the new one during growth
/// (probes go past it, as past any occupied bucket).
const MOVED: u64 = u64::MAX - 1;
/// Old buckets moved per insert while the table grows: the old table is
/// empty long before the new one needs to grow again.
const MOVE_STEP: usize = 32;
/// No such slot.
const NO_SLOT: u32 = u32::MAX;

/// `meta` bits: the low 30 are the hash tag.
const TAG_MASK: u32 = (1 << 30) - 1;
/// The id lives in the arena; `key[..4]` is its offset.
const ARENA: u32 = 1 << 30;
/// The slot is free (its arena bytes, if any, are garbage).
const FREE: u32 = 1 << 31;

/// No position in the order index's arrival sequence.
pub(crate) const NO_POS: u32 = u32::MAX;

/// One waiting member: what a lookup and a rank read, in 32 aligned bytes,
/// so one cache line holds it. The last-seen time, which only joins, polls
/// and sweeps touch, lives in a parallel array.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Slot {
    score: i64,
    /// The id's 16 bytes (session ids), or its arena offset in `key[..4]`.
    key: [u8; 16],
    /// Hash tag and the [`ARENA`] / [`FREE`] flags.
    meta: u32,
    /// The order index's position of this member ([`NO_POS`] if none).
    pos: u32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 32);

/// Slots per segment: 8 MiB, so at least three of its 2 MiB pages are whole.
const SEGMENT: usize = if cfg!(test) { 1 << 10 } else { 1 << 18 };

/// The slots, in segments that never move. A growing `Vec` would move (or,
/// through `mremap`, split the huge pages of) hundreds of megabytes at each
/// doubling; a new segment costs nothing to the old ones. The first segment
/// grows like a `Vec` and stays in small pages, so a small event never takes
/// a huge page; later segments are allocated whole and in huge pages.
#[derive(Default)]
struct Slots {
    segments: Vec<Vec<Slot>>,
    len: usize,
}

impl Slots {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, s: Slot) {
        if self.len.is_multiple_of(SEGMENT) && self.len > 0 {
            let seg = Vec::with_capacity(SEGMENT);
            super::huge::advise(&seg);
            self.segments.push(seg);
        }
        if self.segments.is_empty() {
            self.segments.push(Vec::new());
        }
        if let Some(last) = self.segments.last_mut() {
            last.push(s);
        }
        self.len += 1;
    }

    fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.segments.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.segments.iter_mut().flatten()
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Slot;
    fn index(&self, i: usize) -> &Slot {
        &self.segments[i / SEGMENT][i % SEGMENT]
    }
}

impl std::ops::IndexMut<usize> for Slots {
    fn index_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.segments[i / SEGMENT][i % SEGMENT]
    }
}

/// A member id read back from the table.
pub(crate) enum Name<'a> {
    Hex([u8; 32]),
    Text(&'a str),
}

impl Deref for Name<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            // Only hex digits are ever written here.
            Name::Hex(b) => std::str::from_utf8(b).unwrap_or(""),
            Name::Text(s) => s,
        }
    }
}

/// A session id's 16 bytes, if `member` is exactly 32 lower-case hex digits.
fn session_bytes(member: &str) -> Option<[u8; 16]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let b = member.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nibble(b[2 * i])? << 4) | nibble(b[2 * i + 1])?;
    }
    Some(out)
}

fn hex(bytes: &[u8; 16]) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 15)];
    }
    out
}

/// A member id prepared for lookups: its hash tag and inline form.
#[derive(Clone, Copy)]
pub(crate) struct Probe<'a> {
    member: &'a str,
    inline: Option<[u8; 16]>,
    tag: u32,
}

/// Member id → slot, plus each slot's score, last-seen time and index position.
pub(crate) struct MemberTable {
    /// SipHash, not the faster foldhash: a visitor chooses its own session
    /// id (any 32 hex digits), the table holds every waiting member, and
    /// its linear probing degrades with every collision an attacker could
    /// make, where foldhash only promises to resist those who cannot study
    /// the process's behaviour.
    hasher: std::collections::hash_map::RandomState,
    buckets: Vec<u64>,
    /// While growing: the previous buckets, moved over [`MOVE_STEP`] at a
    /// time by inserts (`old[..moved]` are done), so no insert pays for a
    /// whole rehash (tens of milliseconds at millions of members).
    old: Vec<u64>,
    moved: usize,
    slots: Slots,
    seen: Vec<i64>,
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
            old: Vec::new(),
            moved: 0,
            slots: Slots::default(),
            seen: Vec::new(),
            free: Vec::new(),
            arena: Vec::new(),
            dead_bytes: 0,
            len: 0,
        }
    }

    /// Reserves room for `n` members so a bulk load never reallocates the
    /// slots (the hash index is sized by [`Self::build_index`]).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.seen.reserve_exact(n);
        super::huge::advise(&self.seen);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn home(&self, tag: u32) -> usize {
        home(tag, self.buckets.len())
    }

    fn next(&self, i: usize) -> usize {
        next(i, self.buckets.len())
    }

    /// Hashes `member` once, for a lookup and a possible insert.
    pub(crate) fn probe<'a>(&self, member: &'a str) -> Probe<'a> {
        let inline = session_bytes(member);
        // Truncation is the point: the low bits pick the bucket.
        let tag = match &inline {
            Some(b) => self.hasher.hash_one(b) as u32,
            None => self.hasher.hash_one(member) as u32,
        } & TAG_MASK;
        Probe {
            member,
            inline,
            tag,
        }
    }

    /// The member id stored in `slot`.
    pub(crate) fn member(&self, slot: u32) -> Name<'_> {
        let s = &self.slots[slot as usize];
        if s.meta & ARENA == 0 {
            return Name::Hex(hex(&s.key));
        }
        let off = arena_offset(s);
        let len = usize::from(self.arena[off]) + 1;
        // Only valid UTF-8 (`&str`) is ever copied in, at char boundaries.
        Name::Text(std::str::from_utf8(&self.arena[off + 1..off + 1 + len]).unwrap_or(""))
    }

    pub(crate) fn score(&self, slot: u32) -> i64 {
        self.slots[slot as usize].score
    }

    pub(crate) fn seen(&self, slot: u32) -> i64 {
        self.seen[slot as usize]
    }

    pub(crate) fn set_seen(&mut self, slot: u32, at: i64) {
        self.seen[slot as usize] = at;
    }

    pub(crate) fn pos(&self, slot: u32) -> u32 {
        self.slots[slot as usize].pos
    }

    pub(crate) fn set_pos(&mut self, slot: u32, pos: u32) {
        self.slots[slot as usize].pos = pos;
    }

    pub(crate) fn find(&self, member: &str) -> Option<u32> {
        self.find_probe(&self.probe(member))
    }

    fn is(&self, slot: u32, p: &Probe<'_>) -> bool {
        let s = &self.slots[slot as usize];
        if s.meta & TAG_MASK != p.tag {
            return false;
        }
        match (&p.inline, s.meta & ARENA == 0) {
            (Some(b), true) => s.key == *b,
            (None, false) => {
                let off = arena_offset(s);
                let len = usize::from(self.arena[off]) + 1;
                &self.arena[off + 1..off + 1 + len] == p.member.as_bytes()
            }
            _ => false,
        }
    }

    /// [`Self::find`] with the member's [`Probe`].
    pub(crate) fn find_probe(&self, p: &Probe<'_>) -> Option<u32> {
        let found = self.find_in(&self.buckets, p);
        if found.is_some() || self.old.is_empty() {
            return found;
        }
        self.find_in(&self.old, p)
    }

    fn find_in(&self, buckets: &[u64], p: &Probe<'_>) -> Option<u32> {
        let size = buckets.len();
        let mut i = home(p.tag, size);
        loop {
            let b = buckets[i];
            if b == EMPTY {
                return None;
            }
            if b != MOVED && (b >> 32) as u32 == p.tag && self.is(b as u32, p) {
                return Some(b as u32);
            }
            i = next(i, size);
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
        let p = self.probe(member);
        self.insert_probe(&p, score, seen)
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
        let p = self.probe(member);
        self.push(&p, score, seen)
    }

    /// Inserts the member of `p`, known to be absent, and returns its slot.
    pub(crate) fn insert_probe(
        &mut self,
        p: &Probe<'_>,
        score: i64,
        seen: i64,
    ) -> Result<u32, &'static str> {
        if !self.old.is_empty() {
            self.move_old(MOVE_STEP);
        }
        if (self.len + 1) * 5 > self.buckets.len() * 4 {
            self.grow();
        }
        let slot = self.push(p, score, seen)?;
        self.place(bucket(p.tag, slot));
        Ok(slot)
    }

    /// Puts a bucket value in the first free bucket of its probe run.
    fn place(&mut self, b: u64) {
        let mut i = self.home((b >> 32) as u32);
        while self.buckets[i] != EMPTY {
            i = self.next(i);
        }
        self.buckets[i] = b;
    }

    /// Starts growing by half: a fresh table, the old one moved over by
    /// later inserts.
    fn grow(&mut self) {
        self.move_old(usize::MAX);
        let size = self.buckets.len() * 3 / 2;
        self.old = std::mem::replace(&mut self.buckets, empty_buckets(size));
        self.moved = 0;
    }

    /// Moves up to `n` old buckets to the new table.
    fn move_old(&mut self, n: usize) {
        let end = self.old.len().min(self.moved.saturating_add(n));
        for i in self.moved..end {
            let b = self.old[i];
            if b != EMPTY && b != MOVED {
                self.place(b);
                self.old[i] = MOVED;
            }
        }
        self.moved = end;
        if self.moved == self.old.len() {
            self.old = Vec::new();
            self.moved = 0;
        }
    }

    fn push(&mut self, p: &Probe<'_>, score: i64, seen: i64) -> Result<u32, &'static str> {
        let member = p.member;
        if member.is_empty() || member.len() > 256 {
            return Err("member id must be 1..=256 bytes");
        }
        let mut entry = Slot {
            score,
            key: [0; 16],
            meta: p.tag,
            pos: NO_POS,
        };
        match p.inline {
            Some(b) => entry.key = b,
            None => {
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
                entry.key[..4].copy_from_slice(&off.to_le_bytes());
                entry.meta |= ARENA;
            }
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = entry;
                self.seen[s as usize] = seen;
                s
            }
            None => {
                let s =
                    u32::try_from(self.slots.len()).map_err(|_| "too many members in one event")?;
                if s == NO_SLOT {
                    return Err("too many members in one event");
                }
                let cap = self.seen.capacity();
                self.slots.push(entry);
                self.seen.push(seen);
                if self.seen.capacity() != cap {
                    super::huge::advise(&self.seen);
                }
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
        let size = (self.len + self.len / 3 + 1).max(self.buckets.len());
        let mut order: Vec<u64> = self
            .live_slots()
            .map(|s| {
                let home = home(self.slots[s as usize].meta & TAG_MASK, size);
                ((home as u64) << 32) | u64::from(s)
            })
            .collect();
        order.sort_unstable();
        self.old = Vec::new();
        self.moved = 0;
        let mut buckets = empty_buckets(size);
        let mut next = 0usize;
        let mut wrapped = Vec::new();
        for e in order {
            let (home, slot) = ((e >> 32) as usize, e as u32);
            let i = home.max(next);
            if i >= size {
                wrapped.push(slot);
                continue;
            }
            buckets[i] = bucket(self.tag(slot), slot);
            next = i + 1;
        }
        // Runs that reach the end continue at the start, as a probe would.
        let mut i = 0;
        for slot in wrapped {
            while buckets[i] != EMPTY {
                i += 1;
            }
            buckets[i] = bucket(self.tag(slot), slot);
        }
        self.buckets = buckets;
    }

    fn tag(&self, slot: u32) -> u32 {
        self.slots[slot as usize].meta & TAG_MASK
    }

    /// Removes `slot` (which must be live) from the table.
    pub(crate) fn remove(&mut self, slot: u32) {
        let want = bucket(self.tag(slot), slot);
        if !self.unindex(want) {
            return;
        }
        let s = &mut self.slots[slot as usize];
        if s.meta & ARENA != 0 {
            let off = arena_offset(s);
            self.dead_bytes += usize::from(self.arena[off]) + 2;
        }
        s.meta = FREE;
        s.pos = NO_POS;
        self.free.push(slot);
        self.len -= 1;
        if self.dead_bytes > 1 << 20 && self.dead_bytes > self.arena.len() / 2 {
            self.compact();
        }
    }

    /// Takes bucket value `want` out of whichever table holds it.
    fn unindex(&mut self, want: u64) -> bool {
        let mut i = self.home((want >> 32) as u32);
        while self.buckets[i] != want {
            if self.buckets[i] == EMPTY {
                return self.unindex_old(want);
            }
            i = self.next(i);
        }
        // Backward-shift deletion: pull later entries of the probe run into
        // the hole when their home bucket allows it.
        let mut j = i;
        loop {
            j = self.next(j);
            let b = self.buckets[j];
            if b == EMPTY {
                break;
            }
            let home = self.home((b >> 32) as u32);
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
        true
    }

    /// In the old table a removal leaves [`MOVED`]: shifting entries back
    /// could carry one behind the move cursor, where it would be lost.
    fn unindex_old(&mut self, want: u64) -> bool {
        let size = self.old.len();
        if size == 0 {
            return false;
        }
        let mut i = home((want >> 32) as u32, size);
        loop {
            match self.old[i] {
                EMPTY => return false,
                b if b == want => {
                    self.old[i] = MOVED;
                    return true;
                }
                _ => i = next(i, size),
            }
        }
    }

    /// Slot indexes in use so far, live or free: a sweep in steps walks
    /// `0..slot_count()` (slots never move, so a cursor stays valid while
    /// nothing is inserted).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Whether `slot` holds a member.
    pub(crate) fn is_live(&self, slot: u32) -> bool {
        self.slots[slot as usize].meta & FREE == 0
    }

    /// Every live slot (for sweeps and snapshots).
    pub(crate) fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.meta & FREE == 0)
            .map(|(i, _)| i as u32)
    }

    /// Rewrites the arena without the ids of removed members.
    fn compact(&mut self) {
        let mut arena =
            Vec::with_capacity(self.arena.len() - self.dead_bytes.min(self.arena.len()));
        for s in self
            .slots
            .iter_mut()
            .filter(|s| s.meta & FREE == 0 && s.meta & ARENA != 0)
        {
            let off = arena_offset(s);
            let len = usize::from(self.arena[off]) + 2;
            s.key[..4].copy_from_slice(&(arena.len() as u32).to_le_bytes());
            arena.extend_from_slice(&self.arena[off..off + len]);
        }
        self.arena = arena;
        self.dead_bytes = 0;
    }
}

/// `size` empty buckets, in huge pages where the kernel gives them: the
/// advice must come before the first write, or the pages are already small.
fn empty_buckets(size: usize) -> Vec<u64> {
    let mut b = Vec::with_capacity(size);
    super::huge::advise(&b);
    b.resize(size, EMPTY);
    b
}

/// The bucket after `i` in a table of `size`, wrapping as a probe does.
fn next(i: usize, size: usize) -> usize {
    if i + 1 == size { 0 } else { i + 1 }
}

/// A tag's home bucket in a table of `size`: the tag scaled to the size
/// (multiply-shift), so the table need not be a power of two and can grow
/// by half instead of doubling.
fn home(tag: u32, size: usize) -> usize {
    ((u64::from(tag) * size as u64) >> 30) as usize
}

fn bucket(tag: u32, slot: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(slot)
}

fn arena_offset(s: &Slot) -> usize {
    u32::from_le_bytes([s.key[0], s.key[1], s.key[2], s.key[3]]) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_under_churn() {
        let mut t = MemberTable::new();
        let mut live = std::collections::HashMap::new();
        for i in 0..20_000u32 {
            // Half session ids (stored inline), half other ids (arena).
            let m = if i % 2 == 0 {
                format!("{:032x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15)
            } else {
                format!("m{i}")
            };
            let s = t.insert(&m, i64::from(i), 0).unwrap();
            live.insert(m, s);
            if i % 97 == 0 {
                // Also while the table grows (members split over two tables).
                for (m, s) in &live {
                    assert_eq!(t.find(m), Some(*s), "{m} at {i}");
                }
            }
            if i % 3 == 0 {
                let victim = format!("m{}", i / 2);
                if let Some(s) = live.remove(&victim) {
                    t.remove(s);
                }
                let victim = format!("{:032x}", u128::from(i / 2) * 0x9e37_79b9_7f4a_7c15);
                if let Some(s) = live.remove(&victim) {
                    t.remove(s);
                }
            }
        }
        assert_eq!(t.len(), live.len());
        for (m, s) in &live {
            assert_eq!(t.find(m), Some(*s));
            assert_eq!(&*t.member(*s), m);
        }
        assert_eq!(t.find("m1"), None);
        // Upper-case hex is a different id, stored in the arena.
        let upper = "ABCDEF0123456789ABCDEF0123456789";
        assert_eq!(t.find(upper), None);
        let s = t.insert(upper, 0, 0).unwrap();
        assert_eq!(&*t.member(s), upper);
        assert_eq!(t.find(&upper.to_lowercase()), None);
        t.remove(s);
        let mut bulk = MemberTable::new();
        for m in live.keys() {
            bulk.push_unindexed(m, 0, 0).unwrap();
        }
        bulk.build_index();
        for m in live.keys() {
            assert_eq!(&*bulk.member(bulk.find(m).unwrap()), m);
        }
        assert_eq!(bulk.find("m1"), None);
        t.compact();
        for (m, s) in &live {
            assert_eq!(&*t.member(*s), m);
        }
    }

    #[test]
    fn hex_sorts_like_its_bytes() {
        let a = session_bytes("00ff000000000000000000000000000a").unwrap();
        let b = session_bytes("0a00000000000000000000000000000f").unwrap();
        assert!(a < b);
        assert_eq!(&hex(&a), b"00ff000000000000000000000000000a");
        assert_eq!(session_bytes("00ff00000000000000000000000000G0"), None);
        assert_eq!(session_bytes("00ff"), None);
    }
}
