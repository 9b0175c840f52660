//! Order statistics the report is built from: inversions, Kendall τ, medians
//! and percentiles. Pure functions over slices, so they are tested as tables.

/// Number of pairs `i < j` with `seq[i] > seq[j]`, by merge sort in O(n log n).
///
/// `seq` is the admission order indexed by arrival order (or any other pair of
/// total orders): 0 means the order was kept exactly.
pub fn count_inversions(seq: &[u64]) -> u64 {
    let mut work = seq.to_vec();
    let mut buf = vec![0; seq.len()];
    sort_counting(&mut work, &mut buf)
}

fn sort_counting(v: &mut [u64], buf: &mut [u64]) -> u64 {
    let n = v.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut count = sort_counting(&mut v[..mid], &mut buf[..mid]);
    count += sort_counting(&mut v[mid..], &mut buf[mid..]);
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        if v[i] <= v[j] {
            buf[k] = v[i];
            i += 1;
        } else {
            // Every element still left in the left half is greater than v[j].
            buf[k] = v[j];
            count += (mid - i) as u64;
            j += 1;
        }
        k += 1;
    }
    buf[k..k + mid - i].copy_from_slice(&v[i..mid]);
    k += mid - i;
    buf[k..k + n - j].copy_from_slice(&v[j..n]);
    v.copy_from_slice(&buf[..n]);
    count
}

/// Kendall's τ-a between arrival order and `seq` (admission keys in arrival
/// order): 1 is the same order, -1 the reverse. `None` under two items.
pub fn kendall_tau(seq: &[u64]) -> Option<f64> {
    let n = seq.len() as f64;
    if seq.len() < 2 {
        return None;
    }
    let pairs = n * (n - 1.0) / 2.0;
    Some(1.0 - 2.0 * count_inversions(seq) as f64 / pairs)
}

/// One visitor's arrival and admission, each known only as an interval:
/// the arrival from client-side times, the admission from the server's
/// admission instant when its token carried it, else client-side times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// When the enter request was sent.
    pub arrival_from: u64,
    /// When the enter answer was received.
    pub arrival_to: u64,
    /// When the admission may first have happened (the token's issue time,
    /// or the last poll that still answered `WAITING` was sent).
    pub admitted_from: u64,
    /// When it had certainly happened (shortly after the issue time, or the
    /// first answer saying `ADMITTED` was received).
    pub admitted_to: u64,
}

/// Pairs that were certainly admitted in the opposite order of their arrival:
/// `a` arrived before `b` began to arrive, and `b` was seen admitted before `a`
/// was last seen waiting. Overlapping intervals prove nothing and are not
/// counted, so a fair server scores 0 whatever the network jitter.
///
/// A 2-D dominance count with a Fenwick tree: O(n log n).
pub fn certain_inversions(visitors: &[Observed]) -> u64 {
    let mut by_arrived: Vec<&Observed> = visitors.iter().collect();
    by_arrived.sort_by_key(|v| v.arrival_to);
    let mut by_started: Vec<&Observed> = visitors.iter().collect();
    by_started.sort_by_key(|v| v.arrival_from);
    let mut keys: Vec<u64> = visitors.iter().map(|v| v.admitted_from).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut tree = Fenwick::new(keys.len());
    let mut inserted = 0u64;
    let mut next = 0;
    let mut count = 0;
    for b in by_started {
        // Insert every `a` whose arrival ended strictly before `b`'s began.
        while next < by_arrived.len() && by_arrived[next].arrival_to < b.arrival_from {
            let at = keys.partition_point(|&k| k < by_arrived[next].admitted_from);
            tree.add(at);
            inserted += 1;
            next += 1;
        }
        // Of those, count the ones last seen waiting after `b` was seen admitted.
        let at_or_below = keys.partition_point(|&k| k <= b.admitted_to);
        count += inserted - tree.prefix(at_or_below);
    }
    count
}

/// Counts per position; `prefix(k)` sums positions `0..k`.
struct Fenwick(Vec<u64>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, at: usize) {
        let mut i = at + 1;
        while i < self.0.len() {
            self.0[i] += 1;
            i += i & i.wrapping_neg();
        }
    }

    fn prefix(&self, k: usize) -> u64 {
        let mut i = k;
        let mut sum = 0;
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

/// Median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// Nearest-rank percentile `p` in `0.0..=100.0` of `values`; `None` when empty.
pub fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}
