use super::*;
use proptest::prelude::*;

const SEC: i64 = 1_000_000;
const DAY: i64 = 86_400 * SEC;
/// 2026-01-01T00:00:00Z and 2030-01-01T00:00:00Z in µs.
const Y2026: i64 = 1_767_225_600 * SEC;
const Y2030: i64 = 1_893_456_000 * SEC;

fn key() -> ScoreKey {
    ScoreKey::new(b"a score secret of at least thirty-two bytes")
}

fn scoring(member: &str, opens_at_us: i64, placement: Placement) -> JoinScoring {
    JoinScoring::new(
        &key(),
        "drop-2026",
        member,
        opens_at_us,
        60 * SEC,
        placement,
    )
}

fn placement() -> impl Strategy<Value = Placement> {
    prop_oneof![Just(Placement::ByArrival), Just(Placement::Behind)]
}

#[test]
fn joins_one_microsecond_apart_keep_their_order() {
    let opens = Y2026;
    // Members chosen so the later one's tie-break is smaller, if any pair is.
    for (i, (a, b)) in [("s1", "s2"), ("s2", "s1"), ("x", "y"), ("y", "x")]
        .into_iter()
        .enumerate()
    {
        let now = opens + 3 * SEC + i as i64;
        let first = arrival_score(now, &scoring(a, opens, Placement::ByArrival));
        let second = arrival_score(now + 1, &scoring(b, opens, Placement::ByArrival));
        assert!(first < second, "{a} at {now} vs {b} one µs later");
    }
}

#[test]
fn equal_microseconds_fall_back_to_the_tiebreak() {
    let opens = Y2026;
    let now = opens + 5 * SEC;
    let a = scoring("alice", opens, Placement::ByArrival);
    let b = scoring("bob", opens, Placement::ByArrival);
    assert_eq!(arrival_score(now, &a) >> TIEBREAK_BITS, 5 * SEC);
    assert_eq!(arrival_score(now, &a) & 1023, a.tiebreak);
    assert_eq!(arrival_score(now, &b) & 1023, b.tiebreak);
    assert!((0..1024).contains(&a.tiebreak));
}

#[test]
fn prewindow_scores_are_stable_and_keyed() {
    let opens = Y2026;
    let a = scoring("alice", opens, Placement::ByArrival);
    // A refresh recomputes the scoring: same key, same member, same score,
    // whatever the arrival time inside the pre-window.
    assert_eq!(a, scoring("alice", opens, Placement::ByArrival));
    assert_eq!(
        arrival_score(opens - 50 * SEC, &a),
        arrival_score(opens - 1, &a)
    );
    let other_key = ScoreKey::new(b"another secret of at least thirty-two bytes!");
    let b = JoinScoring::new(
        &other_key,
        "drop-2026",
        "alice",
        opens,
        60 * SEC,
        Placement::ByArrival,
    );
    assert_ne!(a.prewindow_score, b.prewindow_score);
    assert_ne!(
        a.prewindow_score,
        scoring("bob", opens, Placement::ByArrival).prewindow_score
    );
    let other_event = JoinScoring::new(
        &key(),
        "drop-2027",
        "alice",
        opens,
        60 * SEC,
        Placement::ByArrival,
    );
    assert_ne!(a.prewindow_score, other_event.prewindow_score);
}

#[test]
fn prewindow_scores_lie_in_the_window_and_before_any_opening_score() {
    let opens = Y2026;
    for (window, expected_span) in [
        (60 * SEC, (60 * SEC) << 10),
        (0, SEC << 10),
        (-5, SEC << 10),
    ] {
        for i in 0..500 {
            let s = JoinScoring::new(
                &key(),
                "e",
                &format!("m{i}"),
                opens,
                window,
                Placement::ByArrival,
            );
            assert!(
                (-expected_span..0).contains(&s.prewindow_score),
                "{}",
                s.prewindow_score
            );
            assert!(
                arrival_score(opens - 1, &s)
                    < arrival_score(opens, &scoring("z", opens, Placement::ByArrival))
            );
        }
    }
    let huge = JoinScoring::new(&key(), "e", "m", opens, i64::MAX, Placement::ByArrival);
    assert!(huge.prewindow_score > -BEHIND_OFFSET);
}

#[test]
fn prewindow_scores_are_uniform_chi_square() {
    const BUCKETS: usize = 20;
    const MEMBERS: usize = 20_000;
    let span = (60 * SEC) << TIEBREAK_BITS;
    let mut counts = [0u32; BUCKETS];
    for i in 0..MEMBERS {
        let s = JoinScoring::new(
            &key(),
            "e",
            &format!("session-{i}"),
            Y2026,
            60 * SEC,
            Placement::ByArrival,
        );
        let offset = s.prewindow_score + span; // in [0, span)
        let bucket = (offset as i128 * BUCKETS as i128 / span as i128) as usize;
        counts[bucket] += 1;
    }
    let expected = (MEMBERS / BUCKETS) as f64;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (f64::from(c) - expected).powi(2) / expected)
        .sum();
    // Critical value of chi-square with 19 degrees of freedom at p = 0.001. The
    // key is fixed, so the test is deterministic: no flakes.
    assert!(chi2 < 43.82, "chi2 = {chi2}, counts = {counts:?}");
}

#[test]
fn tiebreaks_spread_over_all_ten_bits() {
    let seen: std::collections::HashSet<i64> = (0..20_000)
        .map(|i| scoring(&format!("m{i}"), Y2026, Placement::ByArrival).tiebreak)
        .collect();
    assert!(seen.len() > 1000, "{}", seen.len());
    assert!(seen.iter().all(|t| (0..1024).contains(t)));
}

#[test]
fn saturation() {
    let opens = Y2026;
    let s = scoring("m", opens, Placement::ByArrival);
    let limit = MAX_OPEN_SCORE >> TIEBREAK_BITS; // 2^42 - 1 µs, about 50.9 days
    assert!(arrival_score(opens + limit, &s) <= MAX_OPEN_SCORE);
    assert!(arrival_score(opens + limit - 1, &s) < arrival_score(opens + limit, &s));
    for now in [opens + limit + 1, opens + 52 * DAY, i64::MAX] {
        assert_eq!(arrival_score(now, &s), MAX_OPEN_SCORE);
    }
    let behind = scoring("m", opens, Placement::Behind);
    assert_eq!(
        arrival_score(i64::MAX, &behind),
        MAX_OPEN_SCORE + BEHIND_OFFSET
    );
    // A clock far before opening still answers the pre-window score.
    assert_eq!(arrival_score(i64::MIN, &s), s.prewindow_score);
}

#[test]
fn debug_never_prints_the_key() {
    assert_eq!(format!("{:?}", key()), "ScoreKey(..)");
}

fn realistic() -> impl Strategy<Value = (i64, i64)> {
    // (now, opens_at): 2026–2030, opened up to 50 days before now (before
    // saturation) or up to one minute after (pre-window arrivals).
    (Y2026..Y2030, -60 * SEC..50 * DAY).prop_map(|(now, ago)| (now, now - ago))
}

proptest! {
    #[test]
    fn f64_round_trip_is_exact_and_order_preserving(
        (now, opens) in realistic(),
        dt in 0i64..10 * SEC,
        a in "[a-z0-9]{1,12}",
        b in "[a-z0-9]{1,12}",
        place_a in placement(),
        place_b in placement(),
    ) {
        let sa = arrival_score(now, &scoring(&a, opens, place_a));
        let sb = arrival_score(now + dt, &scoring(&b, opens, place_b));
        prop_assert!(sa.abs() < 1 << 53 && sb.abs() < 1 << 53);
        prop_assert_eq!(from_f64(to_f64(sa)), sa);
        prop_assert_eq!(from_f64(to_f64(sb)), sb);
        prop_assert_eq!(sa.cmp(&sb), to_f64(sa).partial_cmp(&to_f64(sb)).unwrap());
    }

    #[test]
    fn later_join_after_opening_never_sorts_first(
        (now, opens) in realistic(),
        dt in 1i64..SEC,
        a in "[a-z0-9]{1,12}",
        b in "[a-z0-9]{1,12}",
        place in placement(),
    ) {
        prop_assume!(now >= opens);
        let first = to_f64(arrival_score(now, &scoring(&a, opens, place)));
        let second = to_f64(arrival_score(now + dt, &scoring(&b, opens, place)));
        prop_assert!(first < second);
    }

    #[test]
    fn behind_sorts_after_every_non_behind_score(
        (now, opens) in realistic(),
        later in -60 * SEC..50 * DAY,
        a in "[a-z0-9]{1,12}",
        b in "[a-z0-9]{1,12}",
    ) {
        // The behind visitor may have joined long before the verified one.
        let verified = arrival_score(opens + later, &scoring(&a, opens, Placement::ByArrival));
        let risky = arrival_score(now, &scoring(&b, opens, Placement::Behind));
        prop_assert!(to_f64(risky) > to_f64(verified));
    }

    #[test]
    fn a_batch_keeps_its_arrival_order_within_one_microsecond(
        (now, opens) in realistic(),
        len in 1usize..=MAX_BATCH_ORDER,
        names in proptest::collection::vec("[a-z0-9]{1,12}", 2..8),
    ) {
        prop_assume!(now >= opens);
        let hashed: Vec<JoinScoring> = names.iter().map(|n| scoring(n, opens, Placement::ByArrival)).collect();
        let mut last = None;
        for i in 0..len {
            let mut s = hashed[i % hashed.len()];
            s.tiebreak = batch_tiebreak(s.tiebreak, i, len);
            prop_assert!((0..1 << TIEBREAK_BITS).contains(&s.tiebreak));
            let score = to_f64(arrival_score(now, &s));
            prop_assert!(last.is_none_or(|l| l < score), "index {} of {}", i, len);
            last = Some(score);
        }
    }
}

#[test]
fn a_lone_join_keeps_its_whole_hash_tie_break() {
    for t in [0, 1, 511, 1023] {
        assert_eq!(batch_tiebreak(t, 0, 1), t);
    }
    assert_eq!(batch_tiebreak(1023, 1, 2), 512 + 511);
    assert_eq!(batch_tiebreak(1023, 255, 256), 255 * 4 + 3);
}
