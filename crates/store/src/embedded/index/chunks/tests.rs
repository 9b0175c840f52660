use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::embedded::index::key;

/// One change to the chunked part and to the sorted set beside it.
#[derive(Clone, Debug)]
enum Step {
    /// `n` arrivals with scores in `0..spread` (a small spread makes ties,
    /// ordered by member id).
    Insert { n: usize, spread: i64 },
    /// The waiter at this rank (modulo the length) leaves.
    Remove(usize),
    /// The `n` first waiters are admitted.
    Pop(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1usize..600, prop_oneof![Just(8i64), Just(1000), Just(1 << 40)])
            .prop_map(|(n, spread)| Step::Insert { n, spread }),
        3 => any::<usize>().prop_map(Step::Remove),
        1 => (0usize..1500).prop_map(Step::Pop),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Inserts anywhere (enough to split chunks), removals by rank and pops
    /// from the front: every member's rank (`count_less` of its own key),
    /// the rank a key not in the index would have, the front and the order
    /// all agree with a sorted set of (score, member).
    #[test]
    fn ranks_match_a_sorted_set(steps in prop::collection::vec(step(), 1..25), seed in any::<u64>()) {
        let mut t = MemberTable::new();
        let mut c = Chunked::default();
        let mut model: BTreeSet<(i64, String)> = BTreeSet::new();
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut n_members = 0u64;
        for s in steps {
            match s {
                Step::Insert { n, spread } => {
                    for _ in 0..n {
                        let r = next();
                        let score = (r % spread as u64) as i64 - spread / 2;
                        // Names whose byte order is not their arrival order.
                        let m = format!("{:x}-{n_members}", r >> 48);
                        n_members += 1;
                        let slot = t.insert(&m, score, 0).unwrap();
                        c.insert(&t, key(&t, slot));
                        model.insert((score, m));
                    }
                }
                Step::Remove(i) if !model.is_empty() => {
                    let e = model.iter().nth(i % model.len()).cloned().unwrap();
                    model.remove(&e);
                    let slot = t.find(&e.1).unwrap();
                    prop_assert!(c.remove(&t, key(&t, slot)));
                    // A second removal finds nothing.
                    prop_assert!(!c.remove(&t, key(&t, slot)));
                    t.remove(slot);
                }
                Step::Remove(_) => {}
                Step::Pop(n) => {
                    let mut out = Vec::new();
                    c.pop_front(n, &mut out);
                    let got: Vec<String> = out.iter().map(|s| t.member(*s).to_owned()).collect();
                    let want: Vec<String> = (0..n.min(model.len()))
                        .map(|_| model.pop_first().unwrap().1)
                        .collect();
                    prop_assert_eq!(got, want);
                    for s in out {
                        t.remove(s);
                    }
                }
            }
            prop_assert_eq!(c.len, model.len());
            for (rank, (_, m)) in model.iter().enumerate() {
                let slot = t.find(m).unwrap();
                prop_assert_eq!(c.count_less(&t, key(&t, slot)), rank as u64, "{}", m);
            }
            let front = c.front().map(|s| t.member(s).to_owned());
            prop_assert_eq!(front, model.first().map(|e| e.1.clone()));
            let order: Vec<String> = c.slots().map(|s| t.member(s).to_owned()).collect();
            let want: Vec<String> = model.iter().map(|e| e.1.clone()).collect();
            prop_assert_eq!(order, want);
            // A key not in the index ranks after every key below it.
            let probe_score = (next() % 2000) as i64 - 1000;
            let probe = format!("probe-{n_members}");
            let slot = t.insert(&probe, probe_score, 0).unwrap();
            let below = model.range(..(probe_score, probe.clone())).count() as u64;
            prop_assert_eq!(c.count_less(&t, key(&t, slot)), below);
            t.remove(slot);
        }
    }
}
