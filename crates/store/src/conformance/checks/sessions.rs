//! Named rules about tokens, sessions, expiry and event-wide state.

use anteroom_core::phase::AdminState;

use super::{Store, admit, join_n, now, rank};
use crate::conformance::{Ctx, HOUR_US, nonce, open_scoring};
use crate::{AdmitRequest, ConfigSet, EventId, ExpireRequest, MemberState, RedeemOutcome, Touch};

pub(super) async fn redeem_is_single_use(s: Store, c: Ctx) {
    let ev = c.event("redeem");
    let ms = join_n(&s, &ev, "m", 3).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 2, 10, HOUR_US).await;
    let (na, nb) = (got[0].nonce, got[1].nonce);
    let sess = t + HOUR_US;
    assert_eq!(
        s.redeem(&ev, &ms[0], &nb, sess).await.unwrap(),
        RedeemOutcome::NotAdmitted,
        "another member's token"
    );
    assert_eq!(
        s.redeem(&ev, &ms[0], &nonce(), sess).await.unwrap(),
        RedeemOutcome::NotAdmitted,
        "a nonce never issued"
    );
    assert_eq!(
        s.redeem(&ev, &ms[2], &na, sess).await.unwrap(),
        RedeemOutcome::NotAdmitted,
        "a waiting member"
    );
    assert!(matches!(
        s.redeem(&ev, &ms[0], &na, sess).await.unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: sess
        }
    );
    assert_eq!(
        s.redeem(&ev, &ms[0], &na, sess).await.unwrap(),
        RedeemOutcome::AlreadyUsed,
        "same member again"
    );
    assert_eq!(
        s.redeem(&ev, &ms[1], &na, sess).await.unwrap(),
        RedeemOutcome::AlreadyUsed,
        "other member, used nonce"
    );
    assert!(matches!(
        s.redeem(&ev, &ms[1], &nb, sess).await.unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
}

/// A pause or a close stored before a redeem refuses it in the redeem's own
/// step, whatever admin state the redeeming node last read, and keeps the
/// token: it redeems once the event runs again.
pub(super) async fn redeem_is_refused_while_paused_or_closed_and_keeps_the_token(s: Store, c: Ctx) {
    let ev = c.event("redeempause");
    let ms = join_n(&s, &ev, "m", 3).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 3, 10, HOUR_US).await;
    let sess = t + HOUR_US;
    s.set_admin_state(&ev, AdminState::Paused).await.unwrap();
    assert_eq!(
        s.redeem(&ev, &ms[0], &got[0].nonce, sess).await.unwrap(),
        RedeemOutcome::Paused
    );
    assert!(
        matches!(
            s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
            MemberState::Admitted { nonce, .. } if nonce == got[0].nonce
        ),
        "no session opened while paused, the token still outstanding"
    );
    // A node taking over the token of a drain session it recorded opens
    // nothing new: whatever the admin state, the token becomes the session.
    assert!(matches!(
        s.take_over_token(&ev, &ms[2], &got[2].nonce, sess)
            .await
            .unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    s.set_admin_state(&ev, AdminState::Running).await.unwrap();
    assert!(
        matches!(
            s.redeem(&ev, &ms[0], &got[0].nonce, sess).await.unwrap(),
            RedeemOutcome::Redeemed { .. }
        ),
        "the token was kept through the pause"
    );
    s.set_admin_state(&ev, AdminState::Closed).await.unwrap();
    assert_eq!(
        s.redeem(&ev, &ms[1], &got[1].nonce, sess).await.unwrap(),
        RedeemOutcome::Closed
    );
    assert!(matches!(
        s.status(&ev, &ms[1], Touch::Peek).await.unwrap(),
        MemberState::Admitted { .. }
    ));
    assert_eq!(s.stats(&ev).await.unwrap().redeemed_total, 2);
    // Closed as well.
    assert!(matches!(
        s.take_over_token(&ev, &ms[1], &got[1].nonce, sess)
            .await
            .unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    assert_eq!(
        s.status(&ev, &ms[1], Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: sess
        }
    );
}

/// A redeem says when, on the store's canonical clock, its session
/// started: between the clock's readings around the call, and no later than
/// the revocation of the release that ends it (a pass carries that start,
/// and a revocation ends the sessions that started at or before it).
pub(super) async fn redeem_tells_when_its_session_started(s: Store, c: Ctx) {
    let ev = c.event("redeem_at");
    let ms = join_n(&s, &ev, "m", 1).await;
    let got = admit(&s, &ev, 1, 10, HOUR_US).await;
    let before = now(&s, &ev).await;
    let redeemed = s
        .redeem(&ev, &ms[0], &got[0].nonce, before + HOUR_US)
        .await
        .unwrap();
    let after = now(&s, &ev).await;
    let RedeemOutcome::Redeemed { at_us } = redeemed else {
        panic!("the admitted member's token is redeemed: {redeemed:?}");
    };
    assert!(
        (before..=after).contains(&at_us),
        "the session's start {at_us} lies between the clock's readings {before} and {after}"
    );
    assert!(s.release(&ev, &ms[0]).await.unwrap());
    let revoked = s.revocations_since(&ev, before).await.unwrap();
    assert!(
        revoked
            .iter()
            .any(|r| r.member == ms[0] && r.at_us >= at_us),
        "the release revokes the session that started at {at_us}: {revoked:?}"
    );
}

pub(super) async fn release_ends_every_presence(s: Store, c: Ctx) {
    let ev = c.event("release");
    let ms = join_n(&s, &ev, "m", 4).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 2, 10, HOUR_US).await;
    assert!(matches!(
        s.redeem(&ev, &ms[1], &got[1].nonce, t + HOUR_US)
            .await
            .unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    for m in [&ms[0], &ms[1], &ms[3]] {
        assert!(s.release(&ev, m).await.unwrap(), "release {m}");
        assert_eq!(
            s.status(&ev, m, Touch::Peek).await.unwrap(),
            MemberState::None
        );
    }
    assert!(
        !s.release(&ev, "ghost").await.unwrap(),
        "release of an absent member"
    );
    assert_eq!(
        s.status(&ev, &ms[2], Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 0,
            queue_length: 1
        }
    );
    assert_eq!(
        s.redeem(&ev, &ms[0], &got[0].nonce, t + HOUR_US)
            .await
            .unwrap(),
        RedeemOutcome::NotAdmitted
    );
    let revoked: Vec<String> = s
        .revocations_since(&ev, t)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.member)
        .collect();
    assert!(
        revoked.contains(&ms[1]),
        "released session is revoked: {revoked:?}"
    );
    assert_eq!(s.stats(&ev).await.unwrap().active, 0);
}

pub(super) async fn extend_moves_session_end(s: Store, c: Ctx) {
    let ev = c.event("extend");
    let ms = join_n(&s, &ev, "m", 2).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 1, 10, HOUR_US).await;
    s.redeem(&ev, &ms[0], &got[0].nonce, t + 1000)
        .await
        .unwrap();
    assert!(s.extend(&ev, &ms[0], t + HOUR_US).await.unwrap());
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: t + HOUR_US
        }
    );
    // A renewal that lands after a later one (another request, another
    // node's clock) leaves the later end standing.
    assert!(s.extend(&ev, &ms[0], t + HOUR_US / 2).await.unwrap());
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: t + HOUR_US
        },
        "extend moved a session's end earlier"
    );
    assert!(s.extend(&ev, &ms[0], t + 2 * HOUR_US).await.unwrap());
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: t + 2 * HOUR_US
        }
    );
    assert!(
        !s.extend(&ev, &ms[1], t + HOUR_US).await.unwrap(),
        "a waiting member has no session"
    );
    assert!(!s.extend(&ev, "ghost", t + HOUR_US).await.unwrap());
}

pub(super) async fn expire_drops_idle_waiters(s: Store, c: Ctx) {
    let ev = c.event("idle");
    let sc = open_scoring(&*s, &ev).await;
    s.join(&ev, "old", &sc).await.unwrap();
    s.join(&ev, "polled", &sc).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let cutoff = now(&s, &ev).await;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    s.join(&ev, "fresh", &sc).await.unwrap();
    s.status(&ev, "polled", Touch::Seen).await.unwrap();
    let e = s
        .expire(
            &ev,
            &ExpireRequest {
                waiting_seen_before_us: cutoff,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        e.idle_waiters, 1,
        "only the member not seen since the cutoff"
    );
    assert_eq!(
        s.status(&ev, "old", Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert_eq!(
        s.status(&ev, "polled", Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 0,
            queue_length: 2
        }
    );
    assert!(
        s.join(&ev, "old", &sc).await.unwrap().new,
        "re-entry after expiry goes to the back"
    );
    assert_eq!(rank(&s.status(&ev, "old", Touch::Peek).await.unwrap()), 2);
}

pub(super) async fn expire_drops_tokens_and_sessions(s: Store, c: Ctx) {
    let ev = c.event("expiry");
    let ms = join_n(&s, &ev, "m", 4).await;
    let t = now(&s, &ev).await;
    let stale = admit(&s, &ev, 2, 10, -1).await;
    assert_eq!(
        s.redeem(&ev, &ms[0], &stale[0].nonce, t + HOUR_US)
            .await
            .unwrap(),
        RedeemOutcome::NotAdmitted,
        "expired token"
    );
    let live = admit(&s, &ev, 2, 10, HOUR_US).await;
    s.redeem(&ev, &ms[2], &live[0].nonce, t - 1).await.unwrap();
    s.redeem(&ev, &ms[3], &live[1].nonce, t + HOUR_US)
        .await
        .unwrap();
    let e = s
        .expire(
            &ev,
            &ExpireRequest {
                waiting_seen_before_us: i64::MIN,
            },
        )
        .await
        .unwrap();
    assert_eq!((e.idle_waiters, e.unredeemed_tokens, e.sessions), (0, 2, 1));
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert_eq!(
        s.status(&ev, &ms[2], Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert!(matches!(
        s.status(&ev, &ms[3], Touch::Peek).await.unwrap(),
        MemberState::Active { .. }
    ));
    let revoked: Vec<String> = s
        .revocations_since(&ev, t)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.member)
        .collect();
    assert_eq!(revoked, [ms[2].clone()], "the expired session is revoked");
    let st = s.stats(&ev).await.unwrap();
    assert_eq!((st.active, st.outstanding, st.no_shows_last_5m), (1, 0, 2));
}

pub(super) async fn stats_count_admissions(s: Store, c: Ctx) {
    let ev = c.event("stats");
    let ms = join_n(&s, &ev, "m", 4).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 3, 10, HOUR_US).await;
    s.redeem(&ev, &ms[0], &got[0].nonce, t + HOUR_US)
        .await
        .unwrap();
    s.release(&ev, &ms[3]).await.unwrap();
    let st = s.stats(&ev).await.unwrap();
    assert_eq!((st.waiting, st.active, st.outstanding), (0, 1, 2));
    assert_eq!((st.admitted_total, st.redeemed_total), (3, 1));
    assert_eq!((st.admitted_last_1m, st.admitted_last_5m), (3, 3));
    assert_eq!(st.churn_last_1m, 1, "one release");
}

pub(super) async fn consume_once_is_single_use(s: Store, c: Ctx) {
    let ev = c.event("once");
    let exp = now(&s, &ev).await + HOUR_US;
    let (a, b) = (nonce(), nonce());
    assert!(s.consume_once(&ev, &a, exp).await.unwrap());
    assert!(!s.consume_once(&ev, &a, exp).await.unwrap(), "second use");
    assert!(s.consume_once(&ev, &b, exp).await.unwrap());
    let other = c.event("once2");
    assert!(
        s.consume_once(&other, &a, exp).await.unwrap(),
        "nonces are per event"
    );
}

pub(super) async fn claim_tick_once_per_tick(s: Store, c: Ctx) {
    let ev = c.event("tick");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (s, ev) = (s.clone(), ev.clone());
            tokio::spawn(async move { s.claim_tick(&ev, 7, 60_000).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1, "exactly one claimer per tick");
    assert!(
        s.claim_tick(&ev, 8, 60_000).await.unwrap(),
        "the next tick is free"
    );
    assert!(!s.claim_tick(&ev, 8, 60_000).await.unwrap());
}

/// What a batch owes is read back as its node recorded it; an earlier
/// batch's late record does not replace a later one's; it lapses after
/// its time, and goes with its event.
pub(super) async fn batch_owed_is_shared(s: Store, c: Ctx) {
    let ev = c.event("owed");
    assert_eq!(s.batch_owed(&ev).await.unwrap(), None, "nothing recorded");
    s.set_batch_owed(&ev, 1_700_000_060_000, 40, 60_000)
        .await
        .unwrap();
    assert_eq!(
        s.batch_owed(&ev).await.unwrap(),
        Some((1_700_000_060_000, 40))
    );
    s.set_batch_owed(&ev, 1_700_000_060_000, 12, 60_000)
        .await
        .unwrap();
    assert_eq!(
        s.batch_owed(&ev).await.unwrap(),
        Some((1_700_000_060_000, 12))
    );
    s.set_batch_owed(&ev, 1_700_000_000_000, 50, 60_000)
        .await
        .unwrap();
    assert_eq!(
        s.batch_owed(&ev).await.unwrap(),
        Some((1_700_000_060_000, 12)),
        "an earlier batch's record came after"
    );
    s.set_batch_owed(&ev, 1_700_000_120_000, 0, 60_000)
        .await
        .unwrap();
    assert_eq!(
        s.batch_owed(&ev).await.unwrap(),
        Some((1_700_000_120_000, 0))
    );
    s.delete_event(&ev).await.unwrap();
    assert_eq!(
        s.batch_owed(&ev).await.unwrap(),
        None,
        "deleted with its event"
    );
    let short = c.event("owed-short");
    s.set_batch_owed(&short, 5_000, 3, 1).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while s.batch_owed(&short).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "a 1 ms record still kept after 5 s"
        );
        tokio::task::yield_now().await;
    }
    // Lapsed, a later batch's record no longer keeps an earlier one's out
    // (a store clock set back since, a node's late record).
    s.set_batch_owed(&short, 4_000, 7, 60_000).await.unwrap();
    assert_eq!(
        s.batch_owed(&short).await.unwrap(),
        Some((4_000, 7)),
        "refused after the later record lapsed"
    );
}

/// One caller wins a tick, whichever call claims it, and only the winner
/// reads: the store's clock at the claim, the counts, the admin state.
pub(super) async fn claim_tick_and_read_reads_for_the_winner_only(s: Store, c: Ctx) {
    let ev = c.event("tickread");
    join_n(&s, &ev, "m", 3).await;
    admit(&s, &ev, 1, 10, HOUR_US).await;
    s.set_admin_state(&ev, AdminState::Paused).await.unwrap();
    let before = now(&s, &ev).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (s, ev) = (s.clone(), ev.clone());
            tokio::spawn(async move { s.claim_tick_and_read(&ev, 7, 60_000).await.unwrap() })
        })
        .collect();
    let mut views = Vec::new();
    for t in tasks {
        views.extend(t.await.unwrap());
    }
    let after = now(&s, &ev).await;
    assert_eq!(views.len(), 1, "exactly one claimer per tick reads");
    let view = &views[0];
    assert!(
        (before..=after).contains(&view.now_us),
        "read at {} between {before} and {after}",
        view.now_us
    );
    assert_eq!(view.admin, AdminState::Paused);
    assert_eq!(view.stats, s.stats(&ev).await.unwrap());
    let st = &view.stats;
    assert_eq!((st.waiting, st.outstanding, st.admitted_total), (2, 1, 1));
    // Either call claims the tick for the other.
    assert!(s.claim_tick(&ev, 8, 60_000).await.unwrap());
    assert!(
        s.claim_tick_and_read(&ev, 8, 60_000)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.claim_tick_and_read(&ev, 9, 60_000)
            .await
            .unwrap()
            .is_some()
    );
    assert!(!s.claim_tick(&ev, 9, 60_000).await.unwrap());
    // An event nobody paused reads as running.
    let other = c.event("tickread2");
    let fresh = s.claim_tick_and_read(&other, 7, 60_000).await.unwrap();
    assert_eq!(fresh.map(|v| v.admin), Some(AdminState::Running));
}

pub(super) async fn admin_state_is_stored(s: Store, c: Ctx) {
    let ev = c.event("admin");
    assert_eq!(
        s.admin_state(&ev).await.unwrap(),
        AdminState::Running,
        "default"
    );
    for st in [AdminState::Paused, AdminState::Closed, AdminState::Running] {
        s.set_admin_state(&ev, st).await.unwrap();
        assert_eq!(s.admin_state(&ev).await.unwrap(), st);
    }
}

/// An admin change made on what was read: it takes effect only while the
/// state is still that, and otherwise answers what it found.
pub(super) async fn admin_state_changes_only_from_the_state_read(s: Store, c: Ctx) {
    let ev = c.event("admin-if");
    use AdminState::{Closed, Paused, Running};
    assert_eq!(
        s.set_admin_state_if(&ev, Running, Paused).await.unwrap(),
        None
    );
    assert_eq!(s.admin_state(&ev).await.unwrap(), Paused);
    // Another node closed it after this one read "paused".
    s.set_admin_state(&ev, Closed).await.unwrap();
    assert_eq!(
        s.set_admin_state_if(&ev, Paused, Running).await.unwrap(),
        Some(Closed),
        "a resume decided on a stale read"
    );
    assert_eq!(
        s.admin_state(&ev).await.unwrap(),
        Closed,
        "the close stands"
    );
    assert_eq!(
        s.set_admin_state_if(&ev, Closed, Running).await.unwrap(),
        None
    );
    assert_eq!(s.admin_state(&ev).await.unwrap(), Running);
}

pub(super) async fn event_configs_are_stored(s: Store, c: Ctx) {
    let (a, b) = (c.event("cfg-a"), c.event("cfg-b"));
    s.put_event_config(&a, r#"{"v":1}"#).await.unwrap();
    s.put_event_config(&b, r#"{"v":2}"#).await.unwrap();
    s.put_event_config(&a, r#"{"v":3}"#).await.unwrap();
    let all = s.event_configs().await.unwrap();
    let get = |e: &EventId| all.iter().find(|(id, _)| id == e).map(|(_, j)| j.clone());
    assert_eq!(get(&a).as_deref(), Some(r#"{"v":3}"#), "a put replaces");
    assert_eq!(get(&b).as_deref(), Some(r#"{"v":2}"#));
}

pub(super) async fn event_config_replace_is_conditional(s: Store, c: Ctx) {
    let (a, b) = (c.event("cfg-cas-a"), c.event("cfg-cas-b"));
    let get = |set: &ConfigSet, e: &EventId| {
        set.configs
            .iter()
            .find(|(id, _)| id == e)
            .map(|(_, j)| j.clone())
    };
    let g0 = s.event_config_set().await.unwrap().generation;
    assert!(s.replace_event_config(&a, g0, "1").await.unwrap());
    let set = s.event_config_set().await.unwrap();
    assert_eq!(get(&set, &a).as_deref(), Some("1"));
    assert_eq!(set.generation, g0 + 1, "a replace moves the generation on");
    // Stale: any change since the read, of this document or another one.
    assert!(!s.replace_event_config(&a, g0, "9").await.unwrap());
    assert!(!s.replace_event_config(&b, g0, "9").await.unwrap());
    let set = s.event_config_set().await.unwrap();
    assert_eq!(
        get(&set, &a).as_deref(),
        Some("1"),
        "nothing stored on a refusal"
    );
    assert_eq!(get(&set, &b), None);
    assert_eq!(set.generation, g0 + 1);
    // A plain put and a deletion move it on too, so a replace read before
    // them is refused.
    s.put_event_config(&b, "2").await.unwrap();
    let g2 = s.event_config_set().await.unwrap().generation;
    assert!(g2 > g0 + 1, "a put moves the generation on");
    s.delete_event(&b).await.unwrap();
    assert!(
        !s.replace_event_config(&a, g2, "9").await.unwrap(),
        "after a deletion"
    );
    let g3 = s.event_config_set().await.unwrap().generation;
    assert!(g3 > g2);
    // Read alone, as the nodes' watch reads it every second, it is the
    // same number, and a deletion moves it on: how another node learns of
    // one within the contract's seconds.
    assert_eq!(s.config_generation().await.unwrap(), g3);
    s.put_event_config(&b, "3").await.unwrap();
    let g3 = s.config_generation().await.unwrap();
    s.delete_event(&b).await.unwrap();
    let g4 = s.config_generation().await.unwrap();
    assert!(
        g4 > g3,
        "a deletion moves the generation on: {g4} after {g3}"
    );
    assert_eq!(s.event_config_set().await.unwrap().generation, g4);
    // A rule over the whole set holds under writers at once: each adds its
    // own document only while fewer than three of theirs exist. Were the
    // documents compared one by one, all six would see room and add theirs.
    let slot = |w: usize| c.event(&format!("cfg-slot-{w}"));
    let prefix = slot(0).as_str().trim_end_matches('0').to_owned();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..6 {
        let (s, mine, prefix) = (s.clone(), slot(w), prefix.clone());
        writers.spawn(async move {
            loop {
                let set = s.event_config_set().await.unwrap();
                if slots_taken(&set, &prefix) >= 3 {
                    return false;
                }
                if s.replace_event_config(&mine, set.generation, "{}")
                    .await
                    .unwrap()
                {
                    return true;
                }
            }
        });
    }
    let added = writers.join_all().await.into_iter().filter(|&x| x).count();
    let set = s.event_config_set().await.unwrap();
    assert_eq!((added, slots_taken(&set, &prefix)), (3, 3));
}

/// How many documents of the set are named with `prefix`.
fn slots_taken(set: &ConfigSet, prefix: &str) -> usize {
    set.configs
        .iter()
        .filter(|(id, _)| id.as_str().starts_with(prefix))
        .count()
}

pub(super) async fn anchor_is_set_once_by_the_first_caller(s: Store, c: Ctx) {
    let (a, b) = (c.event("anchor-a"), c.event("anchor-b"));
    let before = now(&s, &a).await;
    // Callers asking together (nodes starting together) all get one value:
    // a store that read, then wrote, would give each its own time.
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (s, a) = (s.clone(), a.clone());
        callers.spawn(async move { s.anchor_us(&a).await.unwrap() });
    }
    let anchors: Vec<i64> = callers.join_all().await;
    let first = anchors[0];
    assert!(anchors.iter().all(|&x| x == first), "{anchors:?}");
    let after = now(&s, &a).await;
    assert!(
        (before..=after).contains(&first),
        "{before} <= {first} <= {after}"
    );
    // Kept exactly (not rounded on its way into the store), and per event.
    assert_eq!(s.anchor_us(&a).await.unwrap(), first);
    assert!(s.anchor_us(&b).await.unwrap() >= first);
    assert_eq!(s.anchor_us(&a).await.unwrap(), first);
}

pub(super) async fn reconcile_active_records_drained_sessions(s: Store, c: Ctx) {
    let ev = c.event("reconcile");
    let ms = join_n(&s, &ev, "m", 3).await;
    let t = now(&s, &ev).await;
    let got = admit(&s, &ev, 1, 10, HOUR_US).await;
    let token = s.status(&ev, &ms[0], Touch::Peek).await.unwrap();
    assert!(
        matches!(token, MemberState::Admitted { nonce, .. } if nonce == got[0].nonce),
        "{token:?}"
    );
    let exp = t + HOUR_US;
    let members = vec![
        (ms[0].clone(), exp),
        (ms[1].clone(), exp),
        ("walk-in".to_owned(), exp),
    ];
    assert_eq!(
        s.reconcile_active(&ev, &members).await.unwrap(),
        2,
        "admitted members are left as they are"
    );
    assert_eq!(
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap(),
        token,
        "an admitted member keeps its token"
    );
    assert_eq!(
        s.status(&ev, &ms[1], Touch::Peek).await.unwrap(),
        MemberState::Active { expires_at_us: exp }
    );
    assert_eq!(
        s.status(&ev, &ms[2], Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 0,
            queue_length: 1
        }
    );
    assert_eq!(
        s.reconcile_active(&ev, &members).await.unwrap(),
        0,
        "idempotent"
    );
    assert_eq!(s.stats(&ev).await.unwrap().active, 2);
}

pub(super) async fn hold_share_keeps_every_node_within_max_active(s: Store, c: Ctx) {
    let ev = c.event("share");
    let ms = join_n(&s, &ev, "m", 4).await;
    let t = now(&s, &ev).await;
    // One slot taken by an outstanding token: 5 of 6 are free.
    admit(&s, &ev, 1, 10, HOUR_US).await;
    let ask = |node: &str, reserve: u64, pending: u64, ttl_ms: u64| crate::ShareRequest {
        node: node.to_owned(),
        max_active: 6,
        reserve,
        pending,
        ttl_ms,
    };
    let hour = 3_600_000;
    let a = s.hold_share(&ev, &ask("a", 2, 0, hour)).await.unwrap();
    assert_eq!((a.reserve, a.pending, a.others), (2, 0, 0));
    let b = s.hold_share(&ev, &ask("b", 4, 0, hour)).await.unwrap();
    assert_eq!(
        (b.reserve, b.others),
        (3, 2),
        "granted at most what is free"
    );
    // A node about to admit: pending comes first, its reserve from the rest.
    let a = s.hold_share(&ev, &ask("a", 2, 5, hour)).await.unwrap();
    assert_eq!((a.reserve, a.pending, a.others), (0, 2, 3));
    // A renewal replaces the node's own hold, never stacks on it.
    let a = s.hold_share(&ev, &ask("a", 1, 0, hour)).await.unwrap();
    assert_eq!((a.reserve, a.pending, a.others), (1, 0, 3));
    // Sessions and tokens count: a redeemed session still takes its slot.
    let got = admit(&s, &ev, 1, 6 - a.others, HOUR_US).await;
    assert_eq!(got.len(), 1, "{got:?}");
    s.redeem(&ev, &got[0].member, &got[0].nonce, t + HOUR_US)
        .await
        .unwrap();
    let b = s.hold_share(&ev, &ask("b", 4, 0, hour)).await.unwrap();
    assert_eq!((b.reserve, b.others), (3, 1));
    let a = s.hold_share(&ev, &ask("a", 9, 0, hour)).await.unwrap();
    assert_eq!((a.reserve, a.others), (1, 3), "2 used + 3 held by b");
    // Dropping a hold frees it; a lapsed hold is forgotten.
    let b = s.hold_share(&ev, &ask("b", 0, 0, 0)).await.unwrap();
    assert_eq!((b.reserve, b.pending, b.others), (0, 0, 1));
    let a = s.hold_share(&ev, &ask("a", 9, 0, hour)).await.unwrap();
    assert_eq!((a.reserve, a.others), (4, 0));
    s.hold_share(&ev, &ask("c", 0, 0, 1)).await.unwrap();
    s.hold_share(&ev, &ask("a", 1, 0, 1)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let c2 = s.hold_share(&ev, &ask("c", 9, 0, hour)).await.unwrap();
    assert_eq!((c2.reserve, c2.others), (4, 0), "a's hold lapsed");
    assert!(
        s.hold_share(&ev, &ask("", 1, 0, hour)).await.is_err(),
        "an empty node id is refused"
    );
    assert_eq!(ms.len(), 4);
}

pub(super) async fn admit_sharing_stays_out_of_other_holds_and_drops_its_own(s: Store, c: Ctx) {
    let ev = c.event("share-admit");
    join_n(&s, &ev, "m", 8).await;
    let ask = |node: &str, reserve: u64, ttl_ms: u64| crate::ShareRequest {
        node: node.to_owned(),
        max_active: 6,
        reserve,
        pending: 0,
        ttl_ms,
    };
    let hour = 3_600_000;
    let sharing = |node: &'static str, max: u64| {
        let s = s.clone();
        let ev = ev.clone();
        async move {
            let req = AdmitRequest {
                max,
                max_active: 6,
                nonces: (0..max).map(|_| nonce()).collect(),
                token_ttl_us: HOUR_US,
            };
            s.admit_sharing(&ev, &req, node).await.unwrap()
        }
    };
    // a holds 2 and b 3 of the 6: b may admit its own 3 and the one free
    // slot, never a's 2.
    s.hold_share(&ev, &ask("a", 2, hour)).await.unwrap();
    let b = s.hold_share(&ev, &ask("b", 3, hour)).await.unwrap();
    assert_eq!((b.reserve, b.others), (3, 2));
    let got = sharing("b", 10).await;
    assert_eq!(got.len(), 4, "6 less a's 2: {got:?}");
    // b's hold went with its admission: the 4 admitted count once, as
    // outstanding, not again as a hold.
    let a = s.hold_share(&ev, &ask("a", 9, hour)).await.unwrap();
    assert_eq!(
        (a.reserve, a.others),
        (2, 0),
        "b holds nothing after admitting"
    );
    // Now a's 2 are its own to admit, and nobody else's.
    assert!(sharing("b", 10).await.is_empty(), "a's hold is kept from b");
    assert_eq!(sharing("a", 10).await.len(), 2);
    assert_eq!(s.stats(&ev).await.unwrap().outstanding, 6);
    // A lapsed hold is forgotten: it keeps nothing from anyone.
    let ev2 = c.event("share-lapse");
    join_n(&s, &ev2, "m", 3).await;
    s.hold_share(&ev2, &ask("a", 2, 1)).await.unwrap();
    let lapsed = now(&s, &ev2).await + 2_000;
    while now(&s, &ev2).await <= lapsed {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let req = AdmitRequest {
        max: 3,
        max_active: 3,
        nonces: (0..3).map(|_| nonce()).collect(),
        token_ttl_us: HOUR_US,
    };
    assert_eq!(s.admit_sharing(&ev2, &req, "b").await.unwrap().len(), 3);
    assert!(
        s.admit_sharing(&ev2, &req, "").await.is_err(),
        "an empty node id is refused"
    );
}

pub(super) async fn expire_and_stats_reads_the_counts_the_sweep_left(s: Store, c: Ctx) {
    let ev = c.event("sweep-read");
    join_n(&s, &ev, "m", 6).await;
    let t = now(&s, &ev).await;
    // Two tokens that expired at once, then two redeemed: one session
    // ended, one running; two wait. (Whoever the admissions took: a run of
    // the suite may shuffle the queue's order.)
    admit(&s, &ev, 2, 10, -1).await;
    let live = admit(&s, &ev, 2, 10, HOUR_US).await;
    for (a, ends) in live.iter().zip([t - 1, t + HOUR_US]) {
        let redeemed = s.redeem(&ev, &a.member, &a.nonce, ends).await.unwrap();
        assert!(
            matches!(redeemed, RedeemOutcome::Redeemed { .. }),
            "{redeemed:?}"
        );
    }
    let before = s.stats(&ev).await.unwrap();
    assert_eq!(
        (before.waiting, before.active, before.outstanding),
        (2, 2, 2)
    );
    let (e, after) = sweep_and_read(&s, &ev, i64::MIN).await;
    assert_eq!((e.idle_waiters, e.unredeemed_tokens, e.sessions), (0, 2, 1));
    assert_eq!(
        (after.waiting, after.active, after.outstanding),
        (2, 1, 0),
        "the counts as the sweep left them: {after:?}"
    );
    assert_eq!(after, s.stats(&ev).await.unwrap());
    // An idle waiter leaves the count too.
    let ev = c.event("sweep-read-idle");
    let sc = open_scoring(&*s, &ev).await;
    s.join(&ev, "old", &sc).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let cutoff = now(&s, &ev).await;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    s.join(&ev, "fresh", &sc).await.unwrap();
    let (e, after) = sweep_and_read(&s, &ev, cutoff).await;
    assert_eq!((e.idle_waiters, after.waiting), (1, 1));
    assert_eq!(after.churn_last_1m, 1, "{after:?}");
}

/// `expire_and_stats` of the waiters not seen since `cutoff`.
async fn sweep_and_read(
    s: &Store,
    ev: &EventId,
    cutoff: i64,
) -> (crate::Expired, crate::EventStats) {
    let req = ExpireRequest {
        waiting_seen_before_us: cutoff,
    };
    s.expire_and_stats(ev, &req).await.unwrap()
}
