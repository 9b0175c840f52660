//! The idle sweep in bounded steps: each step removes at most its budget,
//! the repack it triggers goes in slices, and between any two of them every
//! waiter left has its exact rank. And a poll's seen mark: memory only.

use anteroom_core::score::JoinScoring;

use super::{EventState, Sweep};
use crate::Touch;

/// Scoring for joins after the event opened: each ranks by its arrival.
fn after_opening() -> JoinScoring {
    JoinScoring {
        opens_at_us: 0,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

fn check(st: &EventState, waiting: &[String]) {
    assert_eq!(st.order.len(), waiting.len());
    for (i, m) in waiting.iter().enumerate() {
        assert_eq!(st.rank(m), Some(i as u64), "{m}");
    }
}

#[test]
fn the_idle_sweep_goes_in_bounded_steps_and_ranks_stay_exact_between_them() {
    let mut st = EventState::new();
    let s = after_opening();
    let mut members = Vec::new();
    // Seen at 1..=6000 µs after opening; every fifth one polls later.
    for i in 0..6000i64 {
        let m = format!("{i:032x}");
        st.join(&m, &s, 1 + i).unwrap();
        if i % 5 == 0 {
            st.status(&m, Touch::Seen, 100_000).unwrap();
        }
        members.push(m);
    }
    let kept: Vec<String> = members.iter().step_by(5).cloned().collect();
    let mut sweep = Sweep::default();
    let (mut steps, mut slices) = (0, 0);
    loop {
        let before = st.order.len();
        let more = st.sweep_idle_step(50_000, &mut sweep, 500, 100);
        assert!(before - st.order.len() <= 100, "one step removed too many");
        steps += 1;
        while st.order.repack_step(&mut st.table, 64) {
            slices += 1;
            if slices % 7 == 0 {
                let waiting: Vec<String> = members
                    .iter()
                    .filter(|m| st.table.find(m).is_some())
                    .cloned()
                    .collect();
                check(&st, &waiting);
            }
        }
        if !more {
            break;
        }
    }
    assert_eq!(sweep.idle, 4800);
    assert!(steps >= 40, "the sweep went in {steps} steps");
    assert!(slices > 0, "the tail never repacked");
    check(&st, &kept);
    let expired = st.expire(sweep.idle, 200_000);
    assert_eq!(expired.idle_waiters, 4800);
    // Joins after the sweep still rank after everyone.
    st.join("late", &s, 300_000).unwrap();
    assert_eq!(st.rank("late"), Some(kept.len() as u64));
}

#[test]
fn a_poll_moves_the_seen_mark_in_memory_and_writes_nothing() {
    let mut st = EventState::new();
    let s = after_opening();
    let a = format!("{:032x}", 1);
    st.join(&a, &s, 10).unwrap();
    let _ = std::mem::take(&mut st.writes);
    for t in 100..200 {
        st.status(&a, Touch::Seen, t).unwrap();
    }
    assert_eq!(st.table.seen(st.table.find(&a).unwrap()), 199);
    assert!(st.writes.is_empty(), "a poll is not a write");
    st.status(&a, Touch::Peek, 500).unwrap();
    assert_eq!(
        st.table.seen(st.table.find(&a).unwrap()),
        199,
        "a look is not a visit"
    );
}
