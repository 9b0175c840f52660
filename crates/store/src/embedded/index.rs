//! The order-statistic index of one event's queue: rank in O(log n).
//!
//! Waiters are kept in score order in chunks of at most [`CHUNK`] entries
//! (`score`, `slot`), plus a Fenwick tree of chunk sizes. Rank = waiters in
//! earlier chunks (Fenwick prefix, O(log n/CHUNK)) + position in the chunk
//! (binary search). Post-open arrivals have rising scores, so they append to
//! the last chunk and chunks stay full; shuffled pre-window and "behind"
//! scores insert in the middle and split a chunk when it overflows.
//! Equal scores are ordered by member id, as Redis orders them.

use std::cmp::Ordering;

use super::table::MemberTable;

/// Largest chunk: a 12 KiB move per middle insert, ~1 cache line per
/// binary-search step once the chunk is found.
const CHUNK: usize = 1024;

#[derive(Default)]
struct Chunk {
    scores: Vec<i64>,
    slots: Vec<u32>,
}

#[derive(Default)]
pub(crate) struct Order {
    chunks: Vec<Chunk>,
    /// The last key of every chunk, for the chunk search without a pointer chase.
    lasts: Vec<(i64, u32)>,
    /// Fenwick tree (1-based) over chunk lengths.
    tree: Vec<u32>,
    len: usize,
}

pub(crate) fn cmp_key(t: &MemberTable, a: (i64, u32), b: (i64, u32)) -> Ordering {
    a.0.cmp(&b.0).then_with(|| {
        if a.1 == b.1 {
            Ordering::Equal
        } else {
            t.member(a.1).as_bytes().cmp(t.member(b.1).as_bytes())
        }
    })
}

impl Order {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Builds the index from keys already sorted by (score, member).
    pub(crate) fn from_sorted(keys: &[(i64, u32)]) -> Self {
        let mut o = Order {
            len: keys.len(),
            ..Order::default()
        };
        for part in keys.chunks(CHUNK) {
            let mut c = Chunk {
                scores: Vec::with_capacity(CHUNK),
                slots: Vec::with_capacity(CHUNK),
            };
            c.scores.extend(part.iter().map(|k| k.0));
            c.slots.extend(part.iter().map(|k| k.1));
            o.chunks.push(c);
        }
        o.rebuild();
        o
    }

    fn rebuild(&mut self) {
        let m = self.chunks.len();
        self.lasts.clear();
        self.tree.clear();
        self.tree.resize(m + 1, 0);
        for (i, c) in self.chunks.iter().enumerate() {
            let n = c.scores.len();
            self.lasts.push((c.scores[n - 1], c.slots[n - 1]));
            self.tree[i + 1] += n as u32;
            let j = (i + 1) + ((i + 1) & (i + 1).wrapping_neg());
            if j <= m {
                let v = self.tree[i + 1];
                self.tree[j] += v;
            }
        }
    }

    fn tree_add(&mut self, chunk: usize, delta: i32) {
        let mut i = chunk + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Waiters in chunks before `chunk`.
    fn before(&self, chunk: usize) -> u64 {
        let mut i = chunk;
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i]);
            i &= i - 1;
        }
        sum
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

    /// Rank of a key that is in the index.
    pub(crate) fn rank(&self, t: &MemberTable, key: (i64, u32)) -> u64 {
        let ci = self.chunk_for(t, key);
        if ci >= self.chunks.len() {
            return self.len as u64;
        }
        self.before(ci) + self.pos_in(t, ci, key) as u64
    }

    pub(crate) fn insert(&mut self, t: &MemberTable, key: (i64, u32)) {
        self.len += 1;
        if self.chunks.is_empty() {
            self.chunks.push(Chunk {
                scores: Vec::with_capacity(CHUNK),
                slots: Vec::with_capacity(CHUNK),
            });
            self.chunks[0].scores.push(key.0);
            self.chunks[0].slots.push(key.1);
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
            let n = c.scores.len();
            self.lasts[ci] = (c.scores[n - 1], c.slots[n - 1]);
            self.tree_add(ci, 1);
            return;
        }
        if ci == last && pos == CHUNK {
            // Tail append of a full chunk: start a fresh one, keeping chunks full.
            let mut n = Chunk {
                scores: Vec::with_capacity(CHUNK),
                slots: Vec::with_capacity(CHUNK),
            };
            n.scores.push(key.0);
            n.slots.push(key.1);
            self.chunks.push(n);
        } else {
            let mut right = Chunk {
                scores: Vec::with_capacity(CHUNK),
                slots: Vec::with_capacity(CHUNK),
            };
            right.scores.extend(c.scores.drain(CHUNK / 2..));
            right.slots.extend(c.slots.drain(CHUNK / 2..));
            let (target, p) = if pos <= CHUNK / 2 {
                (&mut *c, pos)
            } else {
                (&mut right, pos - CHUNK / 2)
            };
            target.scores.insert(p, key.0);
            target.slots.insert(p, key.1);
            self.chunks.insert(ci + 1, right);
        }
        self.rebuild();
    }

    /// Removes a key that is in the index.
    pub(crate) fn remove(&mut self, t: &MemberTable, key: (i64, u32)) -> bool {
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
            let n = c.scores.len();
            self.lasts[ci] = (c.scores[n - 1], c.slots[n - 1]);
            self.tree_add(ci, -1);
        }
        true
    }

    /// Takes the `n` best-ranked slots out of the index, best first.
    pub(crate) fn pop_front(&mut self, n: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(n.min(self.len));
        let mut structural = false;
        while out.len() < n && !self.chunks.is_empty() {
            let take = (n - out.len()).min(self.chunks[0].slots.len());
            let c = &mut self.chunks[0];
            out.extend(c.slots.drain(..take));
            c.scores.drain(..take);
            self.len -= take;
            if c.slots.is_empty() {
                self.chunks.remove(0);
                structural = true;
            } else if !structural {
                self.tree_add(0, -(take as i32));
            }
        }
        if structural {
            self.rebuild();
        }
        out
    }

    /// Every slot, best first.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks.iter().flat_map(|c| c.slots.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts, removes and pops in random order and checks every rank
    /// against a sorted vector.
    #[test]
    fn ranks_match_a_sorted_vector() {
        let mut t = MemberTable::new();
        let mut o = Order::default();
        let mut model: Vec<(i64, String)> = Vec::new();
        let mut x: u64 = 7;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..6000 {
            let r = next();
            let score = if r % 3 == 0 { i } else { (r % 500) as i64 };
            let m = format!("m{}", r % 100_000);
            if t.find(&m).is_some() {
                continue;
            }
            let s = t.insert(&m, score, 0).unwrap();
            o.insert(&t, (score, s));
            model.push((score, m));
            if r % 7 == 0 && !model.is_empty() {
                model.sort();
                let (sc, mm) = model.remove((r as usize / 7) % model.len());
                let s = t.find(&mm).unwrap();
                assert!(o.remove(&t, (sc, s)));
                t.remove(s);
            }
            if r % 97 == 0 {
                model.sort();
                let k = (r % 5) as usize;
                for s in o.pop_front(k) {
                    let (sc, mm) = model.remove(0);
                    assert_eq!(t.member(s), mm);
                    assert_eq!(t.score(s), sc);
                    t.remove(s);
                }
            }
        }
        model.sort();
        assert_eq!(o.len(), model.len());
        for (rank, (sc, m)) in model.iter().enumerate() {
            let s = t.find(m).unwrap();
            assert_eq!(o.rank(&t, (*sc, s)), rank as u64, "{m}");
        }
        let got: Vec<String> = o.iter().map(|s| t.member(s).to_owned()).collect();
        let want: Vec<String> = model.iter().map(|m| m.1.clone()).collect();
        assert_eq!(got, want);
    }
}
