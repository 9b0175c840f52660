use std::collections::BTreeSet;

use anteroom_core::score::BEHIND_OFFSET;
use proptest::prelude::*;

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

/// One change to the whole index and to the sorted set beside it.
#[derive(Clone, Debug)]
enum Step {
    /// `n` post-open arrivals (rising scores: the tail).
    Arrive(usize),
    /// `n` pre-window arrivals (shuffled scores below the opening).
    Early(usize),
    /// `n` visitors placed behind.
    Behind(usize),
    /// A score below the tail's last one (a clock step back).
    Late,
    /// The waiter at this rank (modulo the length) leaves.
    Leave(usize),
    /// Every waiter whose rank is not a multiple of this leaves (idle
    /// expiry from the middle, which makes the tail due for a repack).
    Thin(usize),
    /// The `n` best-ranked waiters are admitted.
    Admit(usize),
    /// One repack slice of at most this many members.
    Repack(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1usize..800).prop_map(Step::Arrive),
        1 => (1usize..200).prop_map(Step::Early),
        1 => (1usize..50).prop_map(Step::Behind),
        1 => Just(Step::Late),
        2 => any::<usize>().prop_map(Step::Leave),
        1 => (2usize..8).prop_map(Step::Thin),
        2 => (0usize..600).prop_map(Step::Admit),
        2 => (1usize..400).prop_map(Step::Repack),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Joins of every kind, leaves from anywhere, admissions from the
    /// front and repacks in slices, in any order: the length, every
    /// member's rank and the admitted order agree with a sorted set of
    /// (score, member), between repack slices too.
    #[test]
    fn the_index_matches_a_sorted_set(steps in prop::collection::vec(step(), 1..30), seed in any::<u64>()) {
        let mut t = MemberTable::new();
        let mut o = Order::default();
        let mut model: BTreeSet<(i64, String)> = BTreeSet::new();
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut clock, mut n) = (1_000_000i64, 0u64);
        let mut join = |t: &mut MemberTable, o: &mut Order, model: &mut BTreeSet<(i64, String)>, score: i64, r: u64| {
            let m = format!("{:x}-{n}", r >> 52);
            n += 1;
            let slot = t.insert(&m, score, 0).unwrap();
            o.insert(t, slot);
            model.insert((score, m));
        };
        for s in steps {
            match s {
                Step::Arrive(k) => for _ in 0..k {
                    clock += 1 + (next() % 5) as i64;
                    join(&mut t, &mut o, &mut model, clock, next());
                },
                Step::Early(k) => for _ in 0..k {
                    let r = next();
                    join(&mut t, &mut o, &mut model, -((r % 300) as i64) - 1, r);
                },
                Step::Behind(k) => for _ in 0..k {
                    let r = next();
                    join(&mut t, &mut o, &mut model, BEHIND_OFFSET + (r % 20) as i64, r);
                },
                Step::Late => {
                    let r = next();
                    join(&mut t, &mut o, &mut model, clock - (r % 1000) as i64, r);
                }
                Step::Leave(i) if !model.is_empty() => {
                    let e = model.iter().nth(i % model.len()).cloned().unwrap();
                    model.remove(&e);
                    let slot = t.find(&e.1).unwrap();
                    prop_assert!(o.remove(&mut t, slot));
                    t.remove(slot);
                }
                Step::Leave(_) => {}
                Step::Thin(k) => {
                    let gone: Vec<(i64, String)> = model
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % k != 0)
                        .map(|(_, e)| e.clone())
                        .collect();
                    for e in gone {
                        model.remove(&e);
                        let slot = t.find(&e.1).unwrap();
                        prop_assert!(o.remove(&mut t, slot));
                        t.remove(slot);
                    }
                }
                Step::Admit(k) => {
                    let got: Vec<String> = o
                        .pop_front(&mut t, k)
                        .into_iter()
                        .map(|s| {
                            let m = t.member(s).to_owned();
                            t.remove(s);
                            m
                        })
                        .collect();
                    let want: Vec<String> = (0..k.min(model.len()))
                        .map(|_| model.pop_first().unwrap().1)
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Step::Repack(budget) => {
                    o.repack_step(&mut t, budget);
                }
            }
            prop_assert_eq!(o.len(), model.len());
            for (rank, (_, m)) in model.iter().enumerate() {
                let slot = t.find(m).unwrap();
                prop_assert_eq!(o.rank(&t, slot), rank as u64, "{}", m);
            }
        }
    }
}
