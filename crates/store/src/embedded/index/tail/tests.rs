use proptest::prelude::*;

use super::*;

/// One change to a tail and to the plain model beside it.
#[derive(Clone, Debug)]
enum Step {
    /// `n` arrivals.
    Push(usize),
    /// The waiter at this index of the model (modulo its length) leaves.
    Remove(usize),
    /// Every waiter at an index that is a multiple of this leaves (idle expiry).
    Thin(usize),
    /// The `n` first waiters are admitted.
    Pop(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1usize..700).prop_map(Step::Push),
        3 => any::<usize>().prop_map(Step::Remove),
        1 => (2usize..6).prop_map(Step::Thin),
        2 => (0usize..900).prop_map(Step::Pop),
    ]
}

/// Checks every operation of the tail against the model: the live waiters
/// as (position, slot) in arrival order.
fn check(tail: &Tail, model: &[(u32, u32)]) -> Result<(), TestCaseError> {
    prop_assert_eq!(tail.live, model.len());
    prop_assert_eq!(tail.front(), model.first().map(|e| e.1));
    prop_assert_eq!(tail.back(), model.last().map(|e| e.1));
    for (rank, &(pos, slot)) in model.iter().enumerate() {
        prop_assert!(tail.holds(pos));
        prop_assert_eq!(tail.rank(pos), rank as u64);
        prop_assert_eq!(tail.nth(rank as u64), slot);
    }
    let live: Vec<u32> = tail.live_slots().collect();
    let want: Vec<u32> = model.iter().map(|e| e.1).collect();
    prop_assert_eq!(live, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arrivals, departures from anywhere, thinning and admissions from the
    /// front (enough of them to compact the dead prefix away): rank, select
    /// (`nth`), front, back and the live entries always agree with a vector
    /// of the live waiters, and positions never change while a waiter waits.
    #[test]
    fn rank_and_select_match_a_vector_of_live_waiters(steps in prop::collection::vec(step(), 1..40)) {
        let mut tail = Tail::default();
        let mut model: Vec<(u32, u32)> = Vec::new();
        let mut next_slot = 0u32;
        let mut score = 0i64;
        for s in steps {
            match s {
                Step::Push(n) => {
                    for _ in 0..n {
                        score += 3;
                        prop_assert!(tail.accepts(score));
                        let pos = tail.push(next_slot, score);
                        model.push((pos, next_slot));
                        next_slot += 1;
                    }
                    // A score that does not rise is never taken.
                    prop_assert!(!tail.accepts(score));
                }
                Step::Remove(i) if !model.is_empty() => {
                    let (pos, _) = model.remove(i % model.len());
                    tail.remove(pos);
                }
                Step::Remove(_) => {}
                Step::Thin(k) => {
                    let mut kept = Vec::with_capacity(model.len());
                    for (i, e) in model.drain(..).enumerate() {
                        if i % k == 0 {
                            tail.remove(e.0);
                        } else {
                            kept.push(e);
                        }
                    }
                    model = kept;
                }
                Step::Pop(n) => {
                    let mut out = Vec::new();
                    tail.pop_front(n, &mut out);
                    let k = n.min(model.len());
                    let want: Vec<u32> = model.drain(..k).map(|e| e.1).collect();
                    prop_assert_eq!(out, want);
                }
            }
            check(&tail, &model)?;
        }
    }
}
