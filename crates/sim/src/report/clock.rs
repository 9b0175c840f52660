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
//! wherever a token time lies after its visitor saw the admission, the
//! server's clock was ahead by at least that much. [`align`] measures that
//! excess per second of the run and moves the token times back by it,
//! interpolated between seconds so that their order is kept. On a run whose
//! clocks agree there is no excess and nothing moves.

use super::VisitorRecord;

/// Width of the windows the excess is measured over.
const WINDOW_US: u64 = 1_000_000;

/// Moves every token time back by how far the server's clock was ahead
/// around it; returns the largest such correction in µs (0 when the clocks
/// agreed).
pub fn align(records: &mut [VisitorRecord]) -> u64 {
    // Per window: `None` while no admission lay in it, else the largest
    // excess of a token time over its visitor's sight of it (0: none).
    let mut ahead: Vec<Option<u64>> = Vec::new();
    for r in records.iter() {
        if let (Some(at), Some(seen)) = (r.admitted_at, r.admitted_seen) {
            let w = (at / WINDOW_US) as usize;
            if ahead.len() <= w {
                ahead.resize(w + 1, None);
            }
            let excess = at.saturating_sub(seen);
            ahead[w] = Some(ahead[w].map_or(excess, |a| a.max(excess)));
        }
    }
    let largest = ahead.iter().flatten().copied().max().unwrap_or(0);
    if largest == 0 {
        return 0;
    }
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
    for r in records.iter_mut() {
        if let Some(at) = r.admitted_at.as_mut() {
            let moved = at.saturating_sub(correction(&ahead, *at));
            // What interpolation leaves over: never after the visitor saw it.
            *at = r.admitted_seen.map_or(moved, |seen| moved.min(seen));
        }
    }
    largest
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
        assert_eq!(align(&mut rs), 0);
        assert_eq!(rs, before);
    }

    /// The server's clock gains 500 µs a second on the run's (a slew), from
    /// 20 ms ahead: once aligned, no token time is after its visitor saw
    /// it, their order is kept, and they lie within a few ms of the truth.
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
        let largest = align(&mut rs);
        assert!((20_000..=80_000).contains(&largest), "{largest}");
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
