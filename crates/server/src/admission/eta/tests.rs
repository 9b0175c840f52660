use super::*;

fn stats(admitted_total: u64) -> EventStats {
    EventStats {
        admitted_total,
        ..EventStats::default()
    }
}

/// Batch admission (50 every 5 s, observed every 500 ms): once the rate is
/// learnt, the estimate of a visitor who keeps their rank never goes up.
#[test]
fn steady_batches_never_raise_a_visitors_estimate() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    let mut t = 0;
    let mut last: Option<u64> = None;
    while t < 600_000 {
        if t % 5_000 == 0 {
            total += 50;
        }
        feed.observe(t, &stats(total));
        if t >= 120_000 {
            // A visitor at a fixed rank between two batches.
            let e = feed.estimate(t, 500).unwrap().seconds;
            if t % 5_000 != 0
                && let Some(prev) = last
            {
                assert!(e <= prev, "estimate rose from {prev} to {e} at {t} ms");
            }
            last = Some(e);
        }
        t += 500;
    }
    // 10 visitors per second: 501 ahead-or-self take ~50 s, buffered ~60 s.
    let rate = feed.rate().unwrap();
    assert!((9.0..=10.5).contains(&rate), "rate {rate}");
}

#[test]
fn falling_rate_is_followed_slowly_and_rising_fast() {
    let mut feed = EtaFeed::default();
    let mut total = 0;
    for s in 0..300 {
        total += 10;
        feed.observe(s * 1000, &stats(total));
    }
    let before = feed.rate().unwrap();
    // Admissions stop for a minute: the raw blended rate falls to 2.4/s;
    // the published one follows, but over tens of seconds, not at once.
    for s in 300..310 {
        feed.observe(s * 1000, &stats(total));
    }
    let early = feed.rate().unwrap();
    assert!(early > before * 0.9, "{before} -> {early} after 10 s");
    for s in 310..360 {
        feed.observe(s * 1000, &stats(total));
    }
    let after = feed.rate().unwrap();
    assert!(
        after < before * 0.7 && after > 3.0,
        "{before} -> {after} after 60 s"
    );
    // Admissions resume at 10/s: the rate is back up within seconds.
    for s in 360..420 {
        total += 10;
        feed.observe(s * 1000, &stats(total));
    }
    assert!(feed.rate().unwrap() > 8.0, "{}", feed.rate().unwrap());
}

#[test]
fn no_rate_before_admissions_and_reset_total_is_safe() {
    let mut feed = EtaFeed::default();
    feed.observe(0, &stats(100));
    assert_eq!(feed.estimate(0, 10), None);
    feed.observe(1000, &stats(5));
    assert_eq!(feed.estimate(1000, 10), None);
}
