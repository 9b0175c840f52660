//! The named rules of `QueueStore`, one async function each.

use std::collections::BTreeSet;
use std::sync::Arc;

use anteroom_core::phase::AdminState;
use anteroom_core::score::JoinScoring;
use futures::future::BoxFuture;

mod admin;
mod sessions;

use self::admin::*;
use self::sessions::*;
use super::{Ctx, HOUR_US, nonce, open_scoring};
use crate::{AdmitRequest, EventId, ExpireRequest, MemberState, QueueStore, StoreError, Touch};

pub(super) type Store = Arc<dyn QueueStore>;
pub(crate) type Check = fn(Store, Ctx) -> BoxFuture<'static, ()>;

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        vec![$((stringify!($name), (|s, c| Box::pin($name(s, c))) as Check)),*]
    };
}

pub(crate) fn all() -> Vec<(&'static str, Check)> {
    checks![
        join_is_insert_if_absent,
        rank_after_admits,
        admit_stamps_expiry_at_its_pop,
        admit_respects_max_and_max_active,
        admit_never_while_paused_or_closed,
        redeem_is_single_use,
        redeem_is_refused_while_paused_or_closed_and_keeps_the_token,
        redeem_tells_when_its_session_started,
        release_ends_every_presence,
        extend_moves_session_end,
        expire_drops_idle_waiters,
        expire_drops_tokens_and_sessions,
        stats_count_admissions,
        consume_once_is_single_use,
        claim_tick_once_per_tick,
        claim_tick_and_read_reads_for_the_winner_only,
        batch_owed_is_shared,
        admin_state_is_stored,
        admin_state_changes_only_from_the_state_read,
        event_configs_are_stored,
        event_config_replace_is_conditional,
        anchor_is_set_once_by_the_first_caller,
        reconcile_active_records_drained_sessions,
        hold_share_keeps_every_node_within_max_active,
        admit_sharing_stays_out_of_other_holds_and_drops_its_own,
        expire_and_stats_reads_the_counts_the_sweep_left,
        repeated_calls_are_idempotent,
        events_side_by_side,
        concurrent_joins_get_distinct_ranks,
        concurrent_polls_agree_with_lone_ones,
        prewindow_and_behind_order,
        equal_scores_order_by_member,
        invalid_input_is_refused,
        audit_trail_is_kept_per_event,
        delete_event_removes_all_but_the_audit,
    ]
}

pub(super) async fn join_n(s: &Store, ev: &EventId, prefix: &str, n: usize) -> Vec<String> {
    let sc = open_scoring(&**s, ev).await;
    let mut out = Vec::new();
    for i in 0..n {
        let m = format!("{prefix}{i:03}");
        assert!(
            s.join(ev, &m, &sc).await.unwrap().new,
            "first join of {m} is new"
        );
        out.push(m);
    }
    out
}

pub(super) fn rank(st: &MemberState) -> u64 {
    match st {
        MemberState::Waiting { rank, .. } => *rank,
        other => panic!("expected Waiting, got {other:?}"),
    }
}

pub(super) async fn admit(
    s: &Store,
    ev: &EventId,
    max: u64,
    max_active: u64,
    ttl_us: i64,
) -> Vec<crate::Admission> {
    let req = AdmitRequest {
        max,
        max_active,
        nonces: (0..max).map(|_| nonce()).collect(),
        token_ttl_us: ttl_us,
    };
    s.admit(ev, &req).await.unwrap()
}

pub(super) async fn now(s: &Store, ev: &EventId) -> i64 {
    s.now_us(ev).await.unwrap()
}

async fn join_is_insert_if_absent(s: Store, c: Ctx) {
    let ev = c.event("nx");
    let ms = join_n(&s, &ev, "m", 3).await;
    let sc = open_scoring(&*s, &ev).await;
    let again = s.join(&ev, &ms[1], &sc).await.unwrap();
    assert!(!again.new, "a rejoin is not new");
    assert_eq!(
        again.state,
        MemberState::Waiting {
            rank: 1,
            queue_length: 3
        },
        "a rejoin keeps its rank"
    );
    assert_eq!(s.queue_length(&ev).await.unwrap(), 3);
    for (i, m) in ms.iter().enumerate() {
        assert_eq!(
            rank(&s.status(&ev, m, Touch::Peek).await.unwrap()),
            i as u64
        );
    }
    assert_eq!(
        s.status(&ev, "nobody", Touch::Seen).await.unwrap(),
        MemberState::None
    );
}

async fn rank_after_admits(s: Store, c: Ctx) {
    let ev = c.event("rank");
    let ms = join_n(&s, &ev, "m", 5).await;
    let got = admit(&s, &ev, 2, 100, HOUR_US).await;
    let who: Vec<&str> = got.iter().map(|a| a.member.as_str()).collect();
    assert_eq!(
        who,
        [ms[0].as_str(), ms[1].as_str()],
        "admit takes the best-ranked"
    );
    assert_eq!(
        s.status(&ev, &ms[2], Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 0,
            queue_length: 3
        }
    );
    assert_eq!(
        s.status(&ev, &ms[4], Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 2,
            queue_length: 3
        }
    );
    let st = s.status(&ev, &ms[0], Touch::Peek).await.unwrap();
    assert!(
        matches!(st, MemberState::Admitted { nonce, .. } if nonce == got[0].nonce),
        "{st:?}"
    );
    let sc = open_scoring(&*s, &ev).await;
    let j = s.join(&ev, &ms[0], &sc).await.unwrap();
    assert!(
        !j.new && j.state == st,
        "a join never demotes an admitted member"
    );
}

/// A token's expiry is its lifetime counted from the store's clock when the
/// admit takes it from the queue, not from whenever the caller read the
/// clock: an admit that reaches the store late (another node's tick went
/// first, a slow round trip) must not give later ranks an earlier issue time
/// than the ranks admitted before them.
async fn admit_stamps_expiry_at_its_pop(s: Store, c: Ctx) {
    let ev = c.event("stamp");
    let ms = join_n(&s, &ev, "m", 2).await;
    let read = now(&s, &ev).await;
    // The caller's clock read ages before its admit arrives.
    let mut before = now(&s, &ev).await;
    while before < read + 5_000 {
        tokio::task::yield_now().await;
        before = now(&s, &ev).await;
    }
    let got = admit(&s, &ev, 1, 10, HOUR_US).await;
    let after = now(&s, &ev).await;
    assert_eq!(got.len(), 1);
    let MemberState::Admitted { expires_at_us, .. } =
        s.status(&ev, &ms[0], Touch::Peek).await.unwrap()
    else {
        panic!("the first member is admitted");
    };
    assert!(
        (before + HOUR_US..=after + HOUR_US).contains(&expires_at_us),
        "expiry {expires_at_us} not within [{before}, {after}] + {HOUR_US}"
    );
    // Already over when the lifetime is negative.
    admit(&s, &ev, 1, 10, -1).await;
    let MemberState::Admitted { expires_at_us, .. } =
        s.status(&ev, &ms[1], Touch::Peek).await.unwrap()
    else {
        panic!("the second member is admitted");
    };
    assert!(expires_at_us < now(&s, &ev).await);
}

async fn admit_respects_max_and_max_active(s: Store, c: Ctx) {
    let ev = c.event("caps");
    join_n(&s, &ev, "m", 10).await;
    assert_eq!(
        admit(&s, &ev, 3, 5, HOUR_US).await.len(),
        3,
        "max bounds the step"
    );
    assert_eq!(
        admit(&s, &ev, 10, 5, HOUR_US).await.len(),
        2,
        "outstanding tokens count against max_active"
    );
    assert!(admit(&s, &ev, 10, 5, HOUR_US).await.is_empty(), "full");
    assert!(
        admit(&s, &ev, 0, 100, HOUR_US).await.is_empty(),
        "max 0 admits nobody"
    );
    assert_eq!(s.queue_length(&ev).await.unwrap(), 5);
}

async fn admit_never_while_paused_or_closed(s: Store, c: Ctx) {
    let ev = c.event("pause");
    join_n(&s, &ev, "m", 3).await;
    for state in [AdminState::Paused, AdminState::Closed] {
        s.set_admin_state(&ev, state).await.unwrap();
        assert!(
            admit(&s, &ev, 3, 10, HOUR_US).await.is_empty(),
            "no admission while {state:?}"
        );
    }
    s.set_admin_state(&ev, AdminState::Running).await.unwrap();
    assert_eq!(admit(&s, &ev, 3, 10, HOUR_US).await.len(), 3);
}

async fn repeated_calls_are_idempotent(s: Store, c: Ctx) {
    let ev = c.event("idem");
    let ms = join_n(&s, &ev, "m", 3).await;
    let sc = open_scoring(&*s, &ev).await;
    for _ in 0..3 {
        assert_eq!(
            s.join(&ev, &ms[2], &sc).await.unwrap().state,
            MemberState::Waiting {
                rank: 2,
                queue_length: 3
            }
        );
    }
    assert!(s.release(&ev, &ms[0]).await.unwrap());
    assert!(
        !s.release(&ev, &ms[0]).await.unwrap(),
        "second release finds nothing"
    );
    let req = ExpireRequest {
        waiting_seen_before_us: i64::MIN,
    };
    s.expire(&ev, &req).await.unwrap();
    assert_eq!(
        s.expire(&ev, &req).await.unwrap(),
        crate::Expired::default()
    );
    assert_eq!(s.queue_length(&ev).await.unwrap(), 2);
}

async fn events_side_by_side(s: Store, c: Ctx) {
    let evs: Vec<EventId> = (0..4).map(|i| c.event(&format!("side{i}"))).collect();
    let mut scorings = Vec::new();
    for ev in &evs {
        scorings.push(open_scoring(&*s, ev).await);
    }
    for round in 0..5 {
        for (i, ev) in evs.iter().enumerate() {
            for k in 0..=i {
                s.join(ev, &format!("r{round}k{k}"), &scorings[i])
                    .await
                    .unwrap();
            }
        }
    }
    assert_eq!(admit(&s, &evs[0], 5, 100, HOUR_US).await.len(), 5);
    for (i, ev) in evs.iter().enumerate() {
        let want = if i == 0 { 0 } else { 5 * (i as u64 + 1) };
        assert_eq!(
            s.queue_length(ev).await.unwrap(),
            want,
            "event {i} is on its own"
        );
    }
    assert_eq!(
        rank(&s.status(&evs[3], "r1k0", Touch::Peek).await.unwrap()),
        4
    );
}

async fn concurrent_joins_get_distinct_ranks(s: Store, c: Ctx) {
    let ev = c.event("concurrent");
    let sc = open_scoring(&*s, &ev).await;
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (s, ev) = (s.clone(), ev.clone());
            tokio::spawn(async move {
                let m = format!("t{i}");
                let a = s.join(&ev, &m, &sc).await.unwrap().new;
                let b = s.join(&ev, "shared", &sc).await.unwrap().new;
                (m, a, b)
            })
        })
        .collect();
    let mut firsts = 0;
    let mut ranks = BTreeSet::new();
    for t in tasks {
        let (m, new, shared) = t.await.unwrap();
        assert!(new);
        firsts += usize::from(shared);
        ranks.insert(rank(&s.status(&ev, &m, Touch::Peek).await.unwrap()));
    }
    assert_eq!(
        firsts, 1,
        "exactly one concurrent join of the same member is new"
    );
    ranks.insert(rank(&s.status(&ev, "shared", Touch::Peek).await.unwrap()));
    assert_eq!(
        ranks,
        (0..65).collect::<BTreeSet<u64>>(),
        "ranks are 0..n-1"
    );
}

/// Many position polls at once (which a backend may batch) see exactly what
/// one poll at a time sees, and a poll with the seen mark keeps a waiter
/// from the idle sweep.
async fn concurrent_polls_agree_with_lone_ones(s: Store, c: Ctx) {
    let ev = c.event("polls");
    let mut members = join_n(&s, &ev, "p", 40).await;
    let got = admit(&s, &ev, 3, 100, HOUR_US).await;
    assert_eq!(got.len(), 3);
    assert!(s.release(&ev, &members[10]).await.unwrap());
    members.push("never-joined".into());
    let mut lone = Vec::new();
    for m in &members {
        lone.push(s.status(&ev, m, Touch::Peek).await.unwrap());
    }
    let cutoff = now(&s, &ev).await;
    let polls: Vec<_> = (0..members.len() * 4)
        .map(|i| {
            let (s, ev, m) = (s.clone(), ev.clone(), members[i % members.len()].clone());
            let touch = if i % 2 == 0 { Touch::Seen } else { Touch::Peek };
            tokio::spawn(async move { s.status(&ev, &m, touch).await })
        })
        .collect();
    for (i, p) in polls.into_iter().enumerate() {
        let st = p.await.unwrap();
        let k = i % members.len();
        assert_eq!(st.unwrap(), lone[k], "poll {i} of {}", members[k]);
    }
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
        e.idle_waiters, 0,
        "every waiter was just polled with the mark"
    );
}

async fn prewindow_and_behind_order(s: Store, c: Ctx) {
    let ev = c.event("prewindow");
    let t = now(&s, &ev).await;
    let pre = |p: i64, behind: bool| JoinScoring {
        opens_at_us: t + HOUR_US,
        prewindow_score: p,
        tiebreak: 0,
        behind,
    };
    let open = |behind: bool| JoinScoring {
        opens_at_us: t - HOUR_US,
        prewindow_score: -1,
        tiebreak: 0,
        behind,
    };
    s.join(&ev, "late", &open(false)).await.unwrap();
    s.join(&ev, "risky", &pre(-9_000, true)).await.unwrap();
    s.join(&ev, "p3", &pre(-100, false)).await.unwrap();
    s.join(&ev, "p1", &pre(-9_000, false)).await.unwrap();
    s.join(&ev, "p2", &pre(-5_000, false)).await.unwrap();
    s.join(&ev, "later", &open(false)).await.unwrap();
    let order = ["p1", "p2", "p3", "late", "later", "risky"];
    for (i, m) in order.iter().enumerate() {
        assert_eq!(
            rank(&s.status(&ev, m, Touch::Peek).await.unwrap()),
            i as u64,
            "{m}"
        );
    }
    let got = admit(&s, &ev, 2, 10, HOUR_US).await;
    assert_eq!(
        got.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(),
        ["p1", "p2"]
    );
}

async fn equal_scores_order_by_member(s: Store, c: Ctx) {
    let ev = c.event("ties");
    let t = now(&s, &ev).await;
    let sc = JoinScoring {
        opens_at_us: t + HOUR_US,
        prewindow_score: -42,
        tiebreak: 0,
        behind: false,
    };
    for m in ["carol", "alice", "bob"] {
        s.join(&ev, m, &sc).await.unwrap();
    }
    for (i, m) in ["alice", "bob", "carol"].iter().enumerate() {
        assert_eq!(
            rank(&s.status(&ev, m, Touch::Peek).await.unwrap()),
            i as u64,
            "{m}"
        );
    }
}

async fn invalid_input_is_refused(s: Store, c: Ctx) {
    for bad in ["", "has space", "é", &"x".repeat(65)] {
        assert!(
            matches!(EventId::new(bad), Err(StoreError::InvalidInput(_))),
            "event id {bad:?}"
        );
    }
    let ev = c.event("invalid");
    let sc = open_scoring(&*s, &ev).await;
    let long = "m".repeat(crate::MAX_MEMBER_LEN + 1);
    for m in ["", long.as_str()] {
        let bad = |r: Result<(), StoreError>| matches!(r, Err(StoreError::InvalidInput(_)));
        assert!(bad(s.join(&ev, m, &sc).await.map(drop)), "join {}", m.len());
        assert!(bad(s.status(&ev, m, Touch::Seen).await.map(drop)), "status");
        assert!(bad(s.redeem(&ev, m, &nonce(), 0).await.map(drop)), "redeem");
        assert!(bad(s.release(&ev, m).await.map(drop)), "release");
        assert!(bad(s.extend(&ev, m, 0).await.map(drop)), "extend");
        assert!(
            bad(s
                .reconcile_active(&ev, &[(m.to_owned(), 0)])
                .await
                .map(drop)),
            "reconcile"
        );
    }
    let max = "m".repeat(crate::MAX_MEMBER_LEN);
    assert!(
        s.join(&ev, &max, &sc).await.unwrap().new,
        "the longest member id is fine"
    );
    assert_eq!(s.queue_length(&ev).await.unwrap(), 1);
}
