//! The server's admission instants put back on the run's own clock.
//!
//! A token carries its issue time on the server's wall clock; the crowd
//! places it on the run's monotonic clock by the one offset read when the
//! run started. If the wall clock is corrected during the run (a time
//! daemon slewing it, a virtual machine restored from a snapshot), token
//! times drift away from the visitors' own instants, and fairness judged on
//! the two mixed is judged on that drift: with the server's clock some tens
//! of milliseconds ahead, every token time lands after its visitor saw the
//! admission.
//!
//! A token is issued before the answer that carries it is received, so
//! where token times lie after their visitors saw the admission, the
//! server's clock was ahead by at least that much. [`align`] measures that
//! excess per second of the run and moves the token times back by it,
//! interpolated between seconds so that their order is kept. It is read
//! from the window's visitors as a whole, not from its worst one: a clock
//! ahead puts many of a second's token times after their sight (all of
//! them, once it is ahead by more than the visitors' lag), while a few
//! visitors whose token came after their sight for a reason of their own
//! (a late answer, a token issued again) must not move everyone else.
//! Those are clamped to their sight alone, and counted, and so is a
//! visitor who learnt of its admission sooner than the lead's estimate
//! allows for; a clamped time keeps where it lay, and the judge takes the
//! admission to lie anywhere between the two, so that a clamp does not put
//! a visitor before the others of its batch. On a run whose clocks agree
//! nothing moves.

use super::VisitorRecord;

/// Width of the windows the excess is measured over.
const WINDOW_US: u64 = 1_000_000;

/// Fewer admissions than this in a window tell nothing of the clock.
const MIN_WINDOW: usize = 5;

/// The share of a window's token times that must lie after their sight
/// for the window's clock to count as ahead: more than a few outliers.
const AHEAD_SHARE: f64 = 0.1;

/// The quantile of a window's excesses taken as its lead: each excess is
/// the lead less that visitor's lag, so the largest tells it best (the
/// visitor who learnt soonest), short of the top hundredth, where a
/// visitor's own late token would be.
const LEAD_QUANTILE: f64 = 0.99;

/// What [`align`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Aligned {
    /// The largest correction, in µs (0 when the clocks agreed).
    pub ahead_us: u64,
    /// Token times still after their visitor's sight once corrected, by
    /// more than a millisecond: each clamped to that sight.
    pub clamped: u64,
}

/// Moves every token time back by how far the server's clock was ahead
/// around it, and clamps what is left after its visitor's sight.
pub fn align(records: &mut [VisitorRecord]) -> Aligned {
    let mut excesses: Vec<(usize, u64)> = records
        .iter()
        .filter_map(|r| {
            let (at, seen) = (r.admitted_at?, r.admitted_seen?);
            Some(((at / WINDOW_US) as usize, at.saturating_sub(seen)))
        })
        .collect();
    excesses.sort_unstable();
    // Per window: `None` while no admission lay in it, else its excess.
    let windows = excesses.last().map_or(0, |&(w, _)| w + 1);
    let mut ahead: Vec<Option<u64>> = vec![None; windows];
    for run in excesses.chunk_by(|a, b| a.0 == b.0) {
        if run.len() < MIN_WINDOW {
            // Too few to tell a clock from a visitor: its neighbours' say.
            continue;
        }
        let positive = run.iter().filter(|&&(_, e)| e > 0).count();
        let excess = if (positive as f64) < AHEAD_SHARE * run.len() as f64 {
            0
        } else {
            // Sorted within the window, as the pairs were sorted whole.
            let i = ((run.len() - 1) as f64 * LEAD_QUANTILE).floor() as usize;
            run[i].1
        };
        ahead[run[0].0] = Some(excess);
    }
    drop(excesses);
    let ahead_us = ahead.iter().flatten().copied().max().unwrap_or(0);
    // A window without admissions takes its neighbours' excess (the one
    // before it, else the first after), so none pulls the line to 0.
    let mut last = ahead.iter().flatten().copied().next().unwrap_or(0);
    let ahead: Vec<u64> = ahead
        .iter()
        .map(|a| {
            last = a.unwrap_or(last);
            last
        })
        .collect();
    let mut clamped = 0;
    for r in records.iter_mut() {
        if let Some(at) = r.admitted_at.as_mut() {
            let moved = if ahead_us == 0 {
                *at
            } else {
                at.saturating_sub(correction(&ahead, *at))
            };
            // Never after the visitor saw it. Where it lay is kept: a
            // visitor who saw its admission sooner than the lead's
            // estimate allows has its time clamped below its peers', who
            // were admitted in the same instant (`report::observed`).
            let seen = r.admitted_seen.unwrap_or(u64::MAX);
            if moved > seen.saturating_add(1_000) {
                clamped += 1;
            }
            r.admitted_clamped_from = (moved > seen).then_some(moved);
            *at = moved.min(seen);
        }
    }
    Aligned { ahead_us, clamped }
}

/// The excess at `at`, linear between the middles of the windows around
/// it (the first and last windows' own excess beyond them). It moves by at
/// most the excess's own change per window (milliseconds per second), far
/// slower than the time it corrects, so later token times stay later.
fn correction(ahead: &[u64], at: u64) -> u64 {
    let last = ahead.len().saturating_sub(1) as f64;
    let get = |w: f64| ahead.get(w.clamp(0.0, last) as usize).copied().unwrap_or(0) as f64;
    // Position in windows, measured from the middle of window 0.
    let x = at as f64 / WINDOW_US as f64 - 0.5;
    let left = x.floor();
    let share = x - left;
    (get(left) * (1.0 - share) + get(left + 1.0) * share).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at: u64, seen: u64) -> VisitorRecord {
        VisitorRecord {
            admitted_at: Some(at),
            admitted_seen: Some(seen),
            ..VisitorRecord::default()
        }
    }

    #[test]
    fn agreeing_clocks_move_nothing() {
        let mut rs: Vec<_> = (0..1_000u64)
            .map(|i| record(i * 10_000, i * 10_000 + 3_000))
            .collect();
        let before = rs.clone();
        assert_eq!(align(&mut rs), Aligned::default());
        assert_eq!(rs, before);
    }

    /// A few visitors whose token came long after their sight of it (a
    /// token issued again, say) move nobody else: they are clamped alone,
    /// and counted.
    #[test]
    fn a_few_late_tokens_move_nobody_else() {
        let mut rs: Vec<_> = (0..1_000u64)
            .map(|i| record(i * 10_000, i * 10_000 + 3_000))
            .collect();
        // One lands among the others' admissions, two past the last one.
        for (i, late) in [(5, 4_000_000), (250, 11_000_000), (700, 11_000_000)] {
            rs[i].admitted_at = Some(rs[i].admitted_seen.unwrap() + late);
        }
        let mut expected = rs.clone();
        for i in [5, 250, 700] {
            expected[i].admitted_clamped_from = expected[i].admitted_at;
            expected[i].admitted_at = expected[i].admitted_seen;
        }
        assert_eq!(
            align(&mut rs),
            Aligned {
                ahead_us: 0,
                clamped: 3
            }
        );
        assert_eq!(rs, expected);
    }

    /// The server's clock gains 500 µs a second on the run's (a slew), from
    /// 20 ms ahead, and three visitors' tokens came 11 s after their sight
    /// of them: once aligned, no token time is after its visitor saw it,
    /// the others' order is kept, and they lie within a few ms of the truth.
    #[test]
    fn a_drifting_server_clock_is_put_back_in_order() {
        let truth: Vec<u64> = (0..20_000u64).map(|i| i * 5_000).collect();
        let ahead = |t: u64| 20_000 + t / 2_000;
        let lag = |i: u64| 200 + (i * 7_919) % 9_000;
        let mut rs: Vec<_> = truth
            .iter()
            .enumerate()
            .map(|(i, &t)| record(t + ahead(t), t + lag(i as u64)))
            .collect();
        let late = [100, 9_000, 15_000];
        for i in late {
            rs[i].admitted_at = Some(rs[i].admitted_seen.unwrap() + 11_000_000);
        }
        let aligned = align(&mut rs);
        assert!((20_000..=80_000).contains(&aligned.ahead_us), "{aligned:?}");
        assert_eq!(aligned.clamped, 3, "{aligned:?}");
        let (rs, truth): (Vec<_>, Vec<_>) = rs
            .into_iter()
            .zip(truth)
            .enumerate()
            .filter(|(i, _)| !late.contains(i))
            .map(|(_, pair)| pair)
            .unzip();
        let ats: Vec<u64> = rs.iter().map(|r| r.admitted_at.unwrap()).collect();
        assert!(ats.windows(2).all(|w| w[0] <= w[1]), "order lost");
        for (r, &t) in rs.iter().zip(&truth) {
            let at = r.admitted_at.unwrap();
            assert!(
                at <= r.admitted_seen.unwrap(),
                "{at} after {:?}",
                r.admitted_seen
            );
            assert!(at.abs_diff(t) <= 2_000, "{at} vs the truth {t}");
        }
    }
}
