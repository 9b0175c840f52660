//! Session lifecycle with real ticks and a hand-moved clock: every way a
//! visitor's hold on the event ends frees capacity at the next tick —
//! idling, the absolute session lifetime, void tokens, and waiters who stop
//! polling (who re-queue at the back when they return).

use crate::support::admission::Harness;
use anteroom_store::MemberState;

const EVENT: &str = r#"max_active = 1
session_ttl = "10m"
session_idle_timeout = "2m"
token_ttl = "30s"
queue_idle_timeout = "5m"
admission = { mode = "continuous", max_per_minute = 600 }"#;

#[tokio::test]
async fn an_idle_session_ends_and_its_slot_is_refilled_at_the_next_tick() {
    let h = Harness::new(EVENT).await;
    h.join("a").await;
    h.join("b").await;
    assert_eq!(h.tick().await, 1);
    assert!(h.redeem("a").await);
    // 2 minutes without a request through the gate: over at the next tick.
    h.clock.advance(119_000);
    h.poll("b").await;
    assert_eq!(h.tick().await, 0);
    assert!(matches!(h.status("a").await, MemberState::Active { .. }));
    assert_eq!(h.step(1_000).await, 1, "b takes a's slot");
    assert_eq!(h.status("a").await, MemberState::None);
}

#[tokio::test]
async fn renewals_keep_a_session_but_never_past_session_ttl() {
    let h = Harness::new(EVENT).await;
    h.join("a").await;
    assert_eq!(h.tick().await, 1);
    let start = h.now_ms();
    assert!(h.redeem("a").await);
    let rt = h.rt();
    // Active every minute: the idle end keeps moving, up to the lifetime.
    for _ in 0..12 {
        h.clock.advance(60_000);
        let end = anteroom::admission::lifecycle::session_end_us(&rt, start, h.now_ms());
        h.store.extend(&h.id, "a", end).await.unwrap();
        h.tick().await;
        let active = matches!(h.status("a").await, MemberState::Active { .. });
        let lived = h.now_ms() - start;
        assert_eq!(active, lived < 600_000, "after {lived} ms");
    }
}

#[tokio::test]
async fn an_unredeemed_token_voids_and_frees_its_slot() {
    let h = Harness::new(EVENT).await;
    h.join("a").await;
    h.join("b").await;
    assert_eq!(h.tick().await, 1);
    h.poll("b").await;
    assert_eq!(h.step(29_000).await, 0);
    // The store's canonical clock is strictly monotone (a µs apart per
    // call), so the token ends a hair after 30 s.
    let n = h.step(1_001).await;
    assert_eq!(n, 1, "a's token is void at 30 s, b is admitted");
    assert_eq!(h.status("a").await, MemberState::None);
    assert!(!h.redeem("a").await);
}

#[tokio::test]
async fn a_silent_waiter_loses_the_place_and_rejoins_at_the_back() {
    let h = Harness::new(EVENT).await;
    h.join("holder").await;
    assert_eq!(h.tick().await, 1);
    assert!(h.redeem("holder").await);
    h.clock.advance(1);
    h.join("quiet").await;
    h.clock.advance(1);
    h.join("polling").await;
    for _ in 0..5 {
        h.clock.advance(60_000);
        h.poll("polling").await;
        // The holder stays active through the gate.
        let rt = h.rt();
        let end = anteroom::admission::lifecycle::session_end_us(&rt, h.now_ms(), h.now_ms());
        h.store.extend(&h.id, "holder", end).await.unwrap();
        h.tick().await;
    }
    assert_eq!(h.status("quiet").await, MemberState::None, "idled out");
    assert!(matches!(
        h.status("polling").await,
        MemberState::Waiting { rank: 0, .. }
    ));
    h.join("quiet").await;
    assert!(matches!(
        h.status("quiet").await,
        MemberState::Waiting { rank: 1, .. }
    ));
}

/// The session's end in the store, once it reads `expected` (an extension
/// sent in the background), or what it reads after a few seconds.
async fn active_until(h: &Harness, member: &str, expected: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let MemberState::Active { expires_at_us } = h.status(member).await else {
            panic!("{member} is not active");
        };
        if expires_at_us == expected || tokio::time::Instant::now() > deadline {
            return expires_at_us;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_burst_of_renewals_of_one_session_is_one_store_write() {
    // The default 60 s pass: extensions within 15 s of the last one sent
    // for the same session are not sent again.
    let h = Harness::new(EVENT).await;
    h.join("a").await;
    assert_eq!(h.tick().await, 1);
    assert!(h.redeem("a").await);
    let rt = h.rt();
    let queue = anteroom::queue::Queue::new(&h.state, &rt);
    let end =
        |h: &Harness| anteroom::admission::lifecycle::session_end_us(&rt, h.now_ms(), h.now_ms());
    let first = end(&h);
    assert!(queue.extend_in_background("a", 7, first));
    assert_eq!(active_until(&h, "a", first).await, first);
    // The requests in flight with the same pass, up to 15 s later: the
    // gate renews their passes, the store keeps the first extension.
    for _ in 0..5 {
        h.clock.advance(2_999);
        assert!(!queue.extend_in_background("a", 7, end(&h)));
    }
    assert_eq!(active_until(&h, "a", first).await, first);
    // A window later the next renewal moves the end again, and a new
    // session of the member is never held back by the old one's.
    h.clock.advance(6);
    let later = end(&h);
    assert!(queue.extend_in_background("a", 7, later));
    assert_eq!(active_until(&h, "a", later).await, later);
    assert!(queue.extend_in_background("a", 8, end(&h)));
}

/// While the store cannot say whether a session goes on, the gate honours a
/// pass that ran out until `session_idle_timeout` after its issue; so a
/// revocation is remembered at least that long. Kept only a pass life
/// (10 s + 30 s here), a released session's old pass worked again in an
/// outage from 46 s on, renewed on every request until the store was back.
#[tokio::test]
async fn a_revocation_is_remembered_as_long_as_an_old_pass_could_be_honoured() {
    let h = Harness::new(
        r#"max_active = 1
pass_ttl = "10s"
session_idle_timeout = "2m""#,
    )
    .await;
    h.join("a").await;
    assert_eq!(h.tick().await, 1);
    assert!(h.redeem("a").await);
    h.release("a").await;
    let rt = h.rt();
    let revoked = || anteroom::app::read(&rt.live.revocations).revokes("a", 0);
    anteroom::passes::refresh_revocations(&h.state, &rt)
        .await
        .unwrap();
    assert!(revoked());
    // A minute on: a pass issued just before the release could still be
    // honoured for another minute.
    h.clock.advance(60_000);
    anteroom::passes::refresh_revocations(&h.state, &rt)
        .await
        .unwrap();
    assert!(
        revoked(),
        "forgotten while an old pass could still be honoured"
    );
    // Past 2 min + 30 s it is forgotten: the cache stays bounded.
    h.clock.advance(91_000);
    anteroom::passes::refresh_revocations(&h.state, &rt)
        .await
        .unwrap();
    assert!(!revoked());
}
