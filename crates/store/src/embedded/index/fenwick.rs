//! A Fenwick tree (binary indexed tree) of `u32` counts: prefix sums and
//! "which entry holds the k-th item" in O(log n), appends in O(log n).
//! Both parts of the rank index count with it: the tail its 512-bit blocks,
//! the chunked part its chunk lengths.

/// A Fenwick tree (1-based inside: `0.[0]` is unused) of counts.
#[derive(Default)]
pub(super) struct Fenwick(Vec<u32>);

impl Fenwick {
    pub(super) fn from_counts(counts: impl Iterator<Item = u32>) -> Self {
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
    pub(super) fn push(&mut self, v: u32) {
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

    pub(super) fn add(&mut self, i: usize, delta: i32) {
        let mut j = i + 1;
        while j < self.0.len() {
            self.0[j] = self.0[j].wrapping_add_signed(delta);
            j += j & j.wrapping_neg();
        }
    }

    /// Sum of the counts of entries `0..i`.
    pub(super) fn prefix(&self, i: usize) -> u64 {
        let mut j = i;
        let mut sum = 0u64;
        while j > 0 {
            sum += u64::from(self.0[j]);
            j &= j - 1;
        }
        sum
    }

    /// The entry holding the `k`-th counted item (0-based), by descent.
    pub(super) fn find(&self, mut k: u64) -> usize {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

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

    /// One change to the tree and to the plain vector of counts beside it.
    #[derive(Clone, Debug)]
    enum Step {
        Push(u32),
        Add(usize, i32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u32..20).prop_map(Step::Push),
            (any::<usize>(), -5i32..20).prop_map(|(i, d)| Step::Add(i, d)),
        ]
    }

    proptest! {
        /// Pushes and adds in any order: every prefix sum and every `find`
        /// agrees with a plain vector of counts.
        #[test]
        fn prefix_and_find_match_a_vector_of_counts(steps in prop::collection::vec(step(), 1..200)) {
            let mut tree = Fenwick::default();
            let mut model: Vec<u32> = Vec::new();
            for s in steps {
                match s {
                    Step::Push(v) => {
                        tree.push(v);
                        model.push(v);
                    }
                    Step::Add(i, d) if !model.is_empty() => {
                        let i = i % model.len();
                        // Counts never go below zero in the index.
                        let d = d.max(-(model[i] as i32));
                        tree.add(i, d);
                        model[i] = model[i].wrapping_add_signed(d);
                    }
                    Step::Add(..) => {}
                }
            }
            let mut sum = 0u64;
            for (i, c) in model.iter().enumerate() {
                prop_assert_eq!(tree.prefix(i), sum);
                for k in sum..sum + u64::from(*c) {
                    prop_assert_eq!(tree.find(k), i);
                }
                sum += u64::from(*c);
            }
            prop_assert_eq!(tree.prefix(model.len()), sum);
            if !model.is_empty() {
                let rebuilt = Fenwick::from_counts(model.iter().copied());
                prop_assert_eq!(&rebuilt.0, &tree.0);
            }
        }
    }
}
