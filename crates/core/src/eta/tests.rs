use super::*;
use proptest::prelude::*;

/// An estimate shown as `seconds`, its expected wait that without the buffer.
fn est(seconds: u64) -> Option<Estimate> {
    Some(shown(seconds))
}

fn shown(seconds: u64) -> Estimate {
    Estimate {
        seconds,
        almost_there: seconds < ALMOST_THERE_S,
        wait_ms: (seconds as f64 * 1000.0 / BUFFER) as u64,
    }
}

/// An estimate whose expected wait is `wait_ms`.
fn waiting_ms(wait_ms: u64) -> Option<Estimate> {
    Some(Estimate {
        wait_ms,
        ..shown(wait_ms.div_ceil(1000))
    })
}

#[test]
fn estimate_table() {
    fn check(rank: u64, rate: Option<f64>, churn: f64, expected: Option<u64>) {
        let got = estimate(rank, rate, churn).map(|e| e.seconds);
        assert_eq!(got, expected, "rank={rank} rate={rate:?} churn={churn}");
    }
    // (rank + 1) / rate * 1.2, rounded up.
    check(0, Some(1.0), 0.0, Some(2));
    check(9, Some(1.0), 0.0, Some(12));
    check(99, Some(10.0), 0.0, Some(12));
    check(1233, Some(4.0), 0.0, Some(371)); // 1234 / 4 * 1.2 = 370.2
    // Churn helps, but never more than 25 % of the rate.
    check(99, Some(10.0), 1.0, Some(11)); // 100 / 11 * 1.2 = 10.9
    check(99, Some(10.0), 2.5, Some(10)); // 100 / 12.5 * 1.2 = 9.6
    check(99, Some(10.0), 1000.0, Some(10));
    check(99, Some(10.0), -5.0, Some(12));
    check(99, Some(10.0), f64::NAN, Some(12));
    // No positive rate yet: no estimate.
    check(0, None, 0.0, None);
    check(0, Some(0.0), 5.0, None);
    check(0, Some(-1.0), 0.0, None);
    check(0, Some(f64::NAN), 0.0, None);
    check(0, Some(f64::INFINITY), 0.0, None);
    // Absurd waits saturate rather than wrap.
    check(u64::MAX, Some(f64::MIN_POSITIVE), 0.0, Some(u64::MAX));
}

#[test]
fn almost_there_under_a_minute() {
    assert!(estimate(48, Some(1.0), 0.0).unwrap().almost_there); // 58.8 -> 59
    assert!(!estimate(49, Some(1.0), 0.0).unwrap().almost_there); // 60
}

#[test]
fn blended_rate_table() {
    fn check(r1: Option<f64>, r5: Option<f64>, expected: Option<f64>) {
        let got = blended_rate(r1, r5);
        match (got, expected) {
            (Some(g), Some(e)) => assert!((g - e).abs() < 1e-9, "{r1:?} {r5:?}: {g} != {e}"),
            _ => assert_eq!(got, expected, "{r1:?} {r5:?}"),
        }
    }
    check(Some(10.0), Some(20.0), Some(13.0));
    check(Some(10.0), None, Some(10.0));
    check(None, Some(20.0), Some(20.0));
    check(None, None, None);
    check(Some(f64::NAN), Some(20.0), Some(20.0));
    check(Some(-1.0), None, None);
}

#[test]
fn iso8601_table() {
    fn check(seconds: u64, expected: &str) {
        assert_eq!(iso8601(seconds), expected, "{seconds}");
    }
    check(0, "PT0S");
    check(5, "PT5S");
    check(60, "PT1M");
    check(372, "PT6M12S");
    check(3600, "PT1H");
    check(3723, "PT1H2M3S");
    check(3603, "PT1H3S");
    check(90_000, "PT25H");
}

#[test]
fn display_table() {
    fn check(e: Option<Estimate>, lang: Lang, expected: &str) {
        assert_eq!(display(e, lang), expected, "{e:?} {lang:?}");
    }
    use Lang::*;
    check(None, En, "calculating…");
    check(None, Fr, "calcul en cours…");
    check(est(0), En, "almost there");
    check(est(59), En, "almost there");
    check(est(59), Fr, "presque à vous");
    check(est(60), En, "about 1 minute");
    check(est(60), Fr, "environ 1 minute");
    check(est(61), En, "about 2 minutes");
    check(est(372), En, "about 7 minutes");
    check(est(372), Fr, "environ 7 minutes");
    check(est(90 * 60), En, "about 90 minutes");
    check(est(90 * 60 + 1), En, "about 2 hours");
    check(est(90 * 60 + 1), Fr, "environ 2 heures");
    check(est(149 * 60), En, "about 2 hours");
    check(est(150 * 60), En, "about 3 hours");
}

#[test]
fn accept_language_table() {
    fn check(header: &str, expected: Lang) {
        assert_eq!(Lang::from_accept_language(header), expected, "{header:?}");
    }
    check("", Lang::En);
    check("fr", Lang::Fr);
    check("fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7, *;q=0.5", Lang::Fr);
    check("en-US,en;q=0.9,fr;q=0.8", Lang::En);
    check("en;q=0.5, fr;q=0.8", Lang::Fr);
    check("de-DE, fr;q=0.3", Lang::Fr);
    check("de-DE", Lang::En);
    check("fr;q=0, en;q=0.1", Lang::En);
    check("FR-be", Lang::Fr);
    check("fr;q=abc", Lang::Fr);
    check("fr;q=2", Lang::En);
    check(";;;,,,q=", Lang::En);
    check("en, fr", Lang::En);
    check("*, fr;q=0.9", Lang::En);
}

#[test]
fn poll_interval_table() {
    fn check(rank: u64, eta: Option<Estimate>, jitter: f64, expected: u64) {
        assert_eq!(
            poll_after_ms(rank, eta, jitter),
            expected,
            "rank={rank} eta={eta:?} jitter={jitter}"
        );
    }
    // Jitter 0.5 is the unjittered interval.
    check(0, None, 0.5, 2_000);
    check(5, est(600), 0.5, 2_000);
    check(100, None, 0.5, 5_000);
    // A quarter of the unbuffered wait (the estimate / 1.2), 2 s within
    // ~10 s of the turn.
    check(100, est(11), 0.5, 2_000);
    // In the last ~4 s, half the expected wait, at least 0.5 s: a poller
    // learns of the admission within about half a second of it.
    check(100, waiting_ms(4_000), 0.5, 2_000);
    check(100, waiting_ms(3_000), 0.5, 1_500);
    check(100, waiting_ms(1_500), 0.5, 750);
    check(100, waiting_ms(900), 0.5, 500);
    check(5, waiting_ms(0), 0.5, 500);
    check(5, waiting_ms(0), 0.0, 400);
    check(100, est(12), 0.5, 2_500);
    check(100, est(30), 0.5, 6_250);
    check(100, est(60), 0.5, 12_500);
    check(1_000, est(120), 0.5, 25_000);
    check(1_000, est(150), 0.5, 30_000);
    check(50_000, est(3_600), 0.5, 30_000);
    // ±20 %.
    check(50_000, est(3_600), 0.0, 24_000);
    check(50_000, est(3_600), 0.999_999, 36_000);
    check(0, None, 0.0, 1_600);
    // Out-of-range jitter is clamped, NaN is neutral.
    check(0, None, -3.0, 1_600);
    check(0, None, f64::NAN, 2_000);
    check(0, None, 7.0, 2_400);
}

#[test]
fn first_poll_spread() {
    assert_eq!(first_poll_ms(0.0, 2_000), 0);
    assert_eq!(first_poll_ms(0.5, 2_000), 1_500);
    assert_eq!(first_poll_ms(0.999_999_9, 30_000), 2_999);
    assert_eq!(first_poll_ms(1.0, 1_600), 2_999);
    assert_eq!(first_poll_ms(f64::NAN, 5_000), 1_500);
    // A turn due sooner than any near poll: that interval, not the spread.
    assert_eq!(first_poll_ms(0.9, 600), 600);
    assert_eq!(first_poll_ms(0.9, 1_599), 1_599);
}

/// A burst's first wave, told to wait for its first figure, never polls at
/// the front's pace: the soonest turn is a lower bound, not a forecast.
#[test]
fn the_soonest_turn_keeps_the_near_poll() {
    for rank in [0, 10, 5_000, 11_999] {
        let basis = earliest_turn(rank, Some(1_000.0), 0);
        assert_eq!(poll_after_ms(rank, basis, 0.5), NEAR_POLL_MS, "rank {rank}");
        assert!(first_poll_ms(0.99, poll_after_ms(rank, basis, 0.0)) > 2_900);
    }
}

#[test]
fn history_rates() {
    let mut h = AdmissionHistory::new();
    assert_eq!(h.rate_per_s(0, RATE_1M_MS), None);
    assert_eq!(h.blended_rate(0), None);
    // 10 per second for ten minutes, one record per second.
    for t in 0..600 {
        h.record(t * 1000, 10, 2);
    }
    let now = 599_000;
    let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
    assert!(close(h.rate_per_s(now, RATE_1M_MS), 10.0));
    assert!(close(h.rate_per_s(now, RATE_5M_MS), 10.0));
    assert!(close(h.release_rate_per_s(now, RATE_1M_MS), 2.0));
    assert!(close(h.churn_per_s(now, RATE_1M_MS), 0.0));
    assert!(close(h.blended_rate(now), 10.0));
    // The ring stays bounded.
    assert!(h.samples.len() <= MAX_SAMPLES);
    // Admissions stop: the one-minute rate falls to zero first.
    for t in 600..660 {
        h.record(t * 1000, 0, 0);
    }
    assert!(close(h.rate_per_s(659_000, RATE_1M_MS), 0.0));
    assert!(close(h.rate_per_s(659_000, RATE_5M_MS), 8.0));
    assert!(close(h.blended_rate(659_000), 2.4));
}

#[test]
fn first_burst_is_not_taken_for_a_steady_rate() {
    // A batch of 50 every 5 s is 10/s. Right after the first batch the rate
    // must not read 50/s (an estimate five times too short).
    let mut h = AdmissionHistory::new();
    h.record(0, 50, 0);
    let r = h.rate_per_s(0, RATE_1M_MS).unwrap();
    assert!(r <= 10.0, "{r}");
    for t in (5_000..=30_000).step_by(5_000) {
        h.record(t, 50, 0);
    }
    let r = h.rate_per_s(30_000, RATE_1M_MS).unwrap();
    assert!((10.0..=10.0 * BUFFER).contains(&r), "{r}");
}

#[test]
fn history_survives_a_clock_step_back() {
    let mut h = AdmissionHistory::new();
    h.record(10_000, 5, 0);
    h.record(9_000, 5, 0);
    h.record_abandoned(8_000, 3);
    assert_eq!(h.samples.len(), 1);
    assert_eq!(h.samples[0].admitted, 10);
    assert_eq!(h.samples[0].abandoned, 3);
    h.record(i64::MIN, u64::MAX, u64::MAX);
    h.record(i64::MAX, u64::MAX, u64::MAX);
    let _ = h.rate_per_s(i64::MAX, i64::MAX);
    let _ = h.rate_per_s(i64::MIN, i64::MIN);
}

proptest! {
    /// With a steady rate, an estimate never goes up as the visitor moves forward.
    #[test]
    fn estimate_never_rises_as_rank_falls(rate in 0.001f64..10_000.0, churn in 0.0f64..100.0, a in 0u64..10_000_000, b in 0u64..10_000_000) {
        let (front, back) = (a.min(b), a.max(b));
        let e_back = estimate(back, Some(rate), churn).unwrap();
        let e_front = estimate(front, Some(rate), churn).unwrap();
        prop_assert!(e_front.seconds <= e_back.seconds);
    }

    /// The buffer makes the estimate at least the unbuffered wait.
    #[test]
    fn estimate_is_buffered(rate in 0.001f64..10_000.0, rank in 0u64..10_000_000) {
        let e = estimate(rank, Some(rate), 0.0).unwrap();
        prop_assert!(e.seconds as f64 >= (rank + 1) as f64 / rate * BUFFER - 1e-6);
    }

    #[test]
    fn poll_interval_bounds(rank in any::<u64>(), seconds in proptest::option::of(any::<u64>()), jitter in any::<f64>()) {
        let eta = seconds.map(shown);
        let p = poll_after_ms(rank, eta, jitter);
        prop_assert!((FRONT_POLL_MS * 8 / 10..=FAR_POLL_MS * 12 / 10).contains(&p), "{}", p);
        prop_assert!(first_poll_ms(jitter, p) < FIRST_POLL_SPREAD_MS.max(p + 1));
    }

    /// Polling gets rarer (before jitter) the further back a visitor is.
    #[test]
    fn poll_interval_grows_with_the_wait(a in 0u64..100_000, b in 0u64..100_000) {
        let (short, long) = (a.min(b), a.max(b));
        let p = |s: u64| poll_after_ms(1_000, est(s), 0.5);
        prop_assert!(p(short) <= p(long));
        let q = |ms: u64| poll_after_ms(1_000, waiting_ms(ms), 0.5);
        prop_assert!(q(short) <= q(long));
    }

    #[test]
    fn accept_language_never_panics(header in ".*") {
        let _ = Lang::from_accept_language(&header);
    }

    #[test]
    fn iso8601_round_trips(seconds in any::<u64>()) {
        let text = iso8601(seconds);
        let mut total = 0u128;
        let mut digits = String::new();
        for c in text.trim_start_matches("PT").chars() {
            if c.is_ascii_digit() { digits.push(c); continue; }
            let n: u128 = digits.parse().unwrap();
            digits.clear();
            total += n * match c { 'H' => 3600, 'M' => 60, _ => 1 };
        }
        prop_assert_eq!(total, u128::from(seconds));
    }
}

proptest! {
    /// The windowed rates read from the newest sample back give what
    /// reading every sample in the window gives, whatever order the
    /// records came in (a clock that steps back) and wherever the window
    /// ends (a reader whose clock is behind the newest sample).
    #[test]
    fn a_windowed_rate_read_from_the_newest_back_counts_every_sample_in_it(
        records in proptest::collection::vec((0i64..400_000, 0u64..5, 0u64..3), 0..60),
        now_ms in 0i64..500_000,
        window_ms in prop_oneof![Just(RATE_1M_MS), Just(RATE_5M_MS), 0i64..400_000],
    ) {
        let mut h = AdmissionHistory::new();
        for &(t, admitted, abandoned) in &records {
            h.record(t, admitted, 0);
            h.record_abandoned(t, abandoned);
        }
        let every = |count: fn(&Sample) -> u64| {
            let started = h.started_ms?;
            let window_ms = window_ms.clamp(BUCKET_MS, RATE_5M_MS);
            let from = now_ms.saturating_sub(window_ms);
            let total: u64 = h
                .samples
                .iter()
                .filter(|s| s.t_ms > from && s.t_ms <= now_ms)
                .map(count)
                .fold(0, u64::saturating_add);
            let seen = now_ms.saturating_sub(started).saturating_add(BUCKET_MS);
            let span = seen.clamp(MIN_SPAN_MS.min(window_ms), window_ms);
            Some(total as f64 * 1000.0 / span as f64)
        };
        prop_assert_eq!(h.rate_per_s(now_ms, window_ms), every(|s| s.admitted));
        prop_assert_eq!(h.churn_per_s(now_ms, window_ms), every(|s| s.abandoned));
    }
}
