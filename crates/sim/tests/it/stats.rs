//! Table tests of the report's order statistics: inversions (merge sort and
//! the interval-aware count), Kendall τ, medians and percentiles.

use anteroom_sim::report::stats::{
    Observed, certain_inversions, count_inversions, kendall_tau, median, percentile,
};

/// Brute force over all pairs, the definition the fast counts must match.
fn brute_inversions(seq: &[u64]) -> u64 {
    let mut n = 0;
    for i in 0..seq.len() {
        for j in i + 1..seq.len() {
            n += u64::from(seq[i] > seq[j]);
        }
    }
    n
}

#[test]
fn inversions() {
    let check = |seq: &[u64], expected: u64| {
        assert_eq!(count_inversions(seq), expected, "{seq:?}");
        assert_eq!(brute_inversions(seq), expected, "{seq:?}");
    };
    check(&[], 0);
    check(&[7], 0);
    check(&[1, 2, 3, 4, 5], 0);
    check(&[5, 4, 3, 2, 1], 10);
    check(&[2, 1, 3], 1);
    check(&[1, 3, 2, 4], 1);
    check(&[3, 1, 2], 2);
    check(&[1, 1, 1], 0);
    check(&[2, 2, 1], 2);
}

#[test]
fn inversions_match_brute_force_on_pseudo_random_permutations() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for len in [2usize, 3, 10, 33, 200] {
        let seq: Vec<u64> = (0..len)
            .map(|_| {
                // xorshift: deterministic, no dependency.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % 50
            })
            .collect();
        assert_eq!(count_inversions(&seq), brute_inversions(&seq), "{seq:?}");
    }
}

#[test]
fn kendall() {
    let check = |seq: &[u64], expected: Option<f64>| {
        let got = kendall_tau(seq);
        match (got, expected) {
            (Some(g), Some(e)) => assert!((g - e).abs() < 1e-12, "{seq:?}: {g} != {e}"),
            _ => assert_eq!(got, expected, "{seq:?}"),
        }
    };
    check(&[], None);
    check(&[1], None);
    check(&[1, 2, 3, 4], Some(1.0));
    check(&[4, 3, 2, 1], Some(-1.0));
    // One inversion of six pairs: 1 - 2/6.
    check(&[1, 3, 2, 4], Some(1.0 - 2.0 / 6.0));
}

/// A visitor whose arrival and admission are exact instants.
fn point(arrived: u64, admitted: u64) -> Observed {
    Observed {
        arrival_from: arrived,
        arrival_to: arrived,
        admitted_from: admitted,
        admitted_to: admitted,
    }
}

#[test]
fn certain_inversions_of_points_equal_plain_inversions() {
    let check = |admitted: &[u64]| {
        let v: Vec<Observed> = admitted
            .iter()
            .enumerate()
            .map(|(i, &a)| point(i as u64 * 10, a))
            .collect();
        assert_eq!(
            certain_inversions(&v),
            count_inversions(admitted),
            "{admitted:?}"
        );
    };
    check(&[10, 20, 30]);
    check(&[30, 20, 10]);
    check(&[15, 5, 25, 35, 0]);
}

#[test]
fn overlapping_intervals_prove_nothing() {
    let obs = |a: (u64, u64), w: (u64, u64)| Observed {
        arrival_from: a.0,
        arrival_to: a.1,
        admitted_from: w.0,
        admitted_to: w.1,
    };
    let check =
        |v: &[Observed], expected: u64| assert_eq!(certain_inversions(v), expected, "{v:?}");
    // Joins overlap in time: either order is fair.
    check(&[obs((0, 10), (100, 110)), obs((5, 15), (50, 60))], 0);
    // Admissions overlap: the poll timing cannot tell who went first.
    check(&[obs((0, 1), (50, 120)), obs((5, 6), (40, 60))], 0);
    // Certain: first arrived strictly earlier, second seen admitted before the
    // first was last seen waiting.
    check(&[obs((0, 1), (70, 120)), obs((5, 6), (40, 60))], 1);
    // Kept order.
    check(&[obs((0, 1), (40, 60)), obs((5, 6), (70, 120))], 0);
}

#[test]
fn medians_and_percentiles() {
    let m = |v: &[f64], e: Option<f64>| assert_eq!(median(v), e, "{v:?}");
    m(&[], None);
    m(&[3.0], Some(3.0));
    m(&[3.0, 1.0, 2.0], Some(2.0));
    m(&[4.0, 1.0, 2.0, 3.0], Some(2.5));
    m(&[f64::NAN, 1.0], Some(1.0));
    let p = |v: &[u64], q: f64, e: Option<u64>| assert_eq!(percentile(v, q), e, "{v:?} p{q}");
    p(&[], 50.0, None);
    p(&[5], 99.0, Some(5));
    let hundred: Vec<u64> = (1..=100).collect();
    p(&hundred, 50.0, Some(50));
    p(&hundred, 99.0, Some(99));
    p(&hundred, 100.0, Some(100));
    p(&hundred, 0.0, Some(1));
}
