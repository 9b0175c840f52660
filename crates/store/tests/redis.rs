//! The Redis backend against a real standalone `redis-server` started by each
//! test on a free port: every operation, script reload after `SCRIPT FLUSH`,
//! faults (stopped, refused), foreign keys, and races between two gateway
//! nodes sharing one Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::phase::AdminState;
use anteroom_core::score::{JoinScoring, arrival_score};
use anteroom_store::redis::{RedisConfig, RedisStore};
use anteroom_store::testing::{DistantProxy, RedisServer};
use anteroom_store::{
    AdmitRequest, EventId, ExpireRequest, MemberState, Nonce, QueueStore, RedeemOutcome,
    StoreError, Touch, UnavailableKind,
};

mod support;

use support::{TIMEOUT, event, open};

async fn store(server: &RedisServer) -> RedisStore {
    support::connect(vec![server.url()], false).await
}

fn nonces(n: usize, seed: u8) -> Vec<Nonce> {
    (0..n)
        .map(|i| {
            let mut nonce = [seed; 16];
            nonce[..8].copy_from_slice(&(i as u64).to_be_bytes());
            nonce
        })
        .collect()
}

fn admit_req(max: u64, max_active: u64, ttl_us: i64, seed: u8) -> AdmitRequest {
    AdmitRequest {
        max,
        max_active,
        nonces: nonces(max as usize, seed),
        token_ttl_us: ttl_us,
    }
}

/// A raw client for looking under the hood.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_on_standalone_redis() {
    let server = RedisServer::start().unwrap();
    let s: Arc<dyn QueueStore> = Arc::new(store(&server).await);
    anteroom_store::conformance::test_suite(s.clone()).await;
    anteroom_store::conformance::model_check(s, 64).await;
}

#[tokio::test]
async fn join_is_insert_if_absent_and_ranks() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("join");
    let scoring = JoinScoring {
        opens_at_us: i64::MAX,
        prewindow_score: -100,
        tiebreak: 0,
        behind: false,
    };
    let first = s.join(&e, "a", &scoring).await.unwrap();
    assert!(first.new);
    assert_eq!(
        first.state,
        MemberState::Waiting {
            rank: 0,
            queue_length: 1
        }
    );
    let earlier = JoinScoring {
        prewindow_score: -200,
        ..scoring
    };
    let b = s.join(&e, "b", &earlier).await.unwrap();
    assert_eq!(
        b.state,
        MemberState::Waiting {
            rank: 0,
            queue_length: 2
        }
    );
    // A refresh keeps the score, whatever it would be now.
    let again = s
        .join(
            &e,
            "a",
            &JoinScoring {
                prewindow_score: -300,
                ..scoring
            },
        )
        .await
        .unwrap();
    assert!(!again.new);
    assert_eq!(
        again.state,
        MemberState::Waiting {
            rank: 1,
            queue_length: 2
        }
    );
    assert_eq!(s.queue_length(&e).await.unwrap(), 2);
    assert_eq!(
        s.status(&e, "nobody", Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert!(matches!(
        s.join(&e, "", &scoring).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(matches!(
        s.join(&e, &"x".repeat(257), &scoring).await,
        Err(StoreError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn lua_score_mirrors_arrival_score() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let mut conn = raw(&server).await;
    let e = event("score");
    let now = s.now_us(&e).await.unwrap();
    let cases = [
        (
            "pre",
            JoinScoring {
                opens_at_us: now + 60_000_000,
                prewindow_score: -12345,
                tiebreak: 7,
                behind: false,
            },
        ),
        (
            "pre-behind",
            JoinScoring {
                opens_at_us: now + 60_000_000,
                prewindow_score: -5,
                tiebreak: 7,
                behind: true,
            },
        ),
        (
            "saturated",
            JoinScoring {
                opens_at_us: 0,
                prewindow_score: -1,
                tiebreak: 1023,
                behind: false,
            },
        ),
        (
            "saturated-behind",
            JoinScoring {
                opens_at_us: i64::MIN / 2,
                prewindow_score: -1,
                tiebreak: 3,
                behind: true,
            },
        ),
        (
            "open",
            JoinScoring {
                opens_at_us: now - 5_000_000,
                prewindow_score: -1,
                tiebreak: 999,
                behind: false,
            },
        ),
        (
            "open-behind",
            JoinScoring {
                opens_at_us: now - 1,
                prewindow_score: -1,
                tiebreak: 1,
                behind: true,
            },
        ),
    ];
    for (member, scoring) in cases {
        let before = s.now_us(&e).await.unwrap();
        s.join(&e, member, &scoring).await.unwrap();
        let after = s.now_us(&e).await.unwrap();
        let score: f64 = redis::cmd("ZSCORE")
            .arg("anteroom:{score}:q")
            .arg(member)
            .query_async(&mut conn)
            .await
            .unwrap();
        let score = score as i64;
        // The script read TIME somewhere between `before` and `after`.
        let matches = (before..=after).any(|t| arrival_score(t, &scoring) == score);
        assert!(
            matches,
            "{member}: score {score} is not arrival_score(t) for t in {before}..={after}"
        );
    }
}

#[tokio::test]
async fn admit_redeem_extend_release() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("flow");
    for m in ["a", "b", "c", "d"] {
        s.join(&e, m, &open()).await.unwrap();
    }
    let now = s.now_us(&e).await.unwrap();
    let exp = 60_000_000;
    // max_active caps active + outstanding.
    let got = s.admit(&e, &admit_req(10, 2, exp, 1)).await.unwrap();
    let after = s.now_us(&e).await.unwrap();
    assert_eq!(
        got.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(got[0].nonce, nonces(10, 1)[0]);
    // The tokens last their lifetime from Redis's clock at the pop.
    let MemberState::Admitted {
        nonce,
        expires_at_us,
    } = s.status(&e, "a", Touch::Peek).await.unwrap()
    else {
        panic!("a is admitted");
    };
    assert_eq!(nonce, got[0].nonce);
    assert!(
        (now + exp..=after + exp).contains(&expires_at_us),
        "{now} + {exp} <= {expires_at_us} <= {after} + {exp}"
    );
    assert!(
        s.admit(&e, &admit_req(10, 2, exp, 2))
            .await
            .unwrap()
            .is_empty()
    );
    // A join never demotes an admitted member.
    let j = s.join(&e, "a", &open()).await.unwrap();
    assert!(!j.new);
    assert!(matches!(j.state, MemberState::Admitted { .. }));
    assert_eq!(
        s.status(&e, "c", Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 0,
            queue_length: 2
        }
    );

    let ses = now + 120_000_000;
    assert_eq!(
        s.redeem(&e, "a", &got[1].nonce, ses).await.unwrap(),
        RedeemOutcome::NotAdmitted
    );
    assert!(matches!(
        s.redeem(&e, "a", &got[0].nonce, ses).await.unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    assert_eq!(
        s.redeem(&e, "a", &got[0].nonce, ses).await.unwrap(),
        RedeemOutcome::AlreadyUsed
    );
    assert_eq!(
        s.status(&e, "a", Touch::Peek).await.unwrap(),
        MemberState::Active { expires_at_us: ses }
    );
    assert!(s.extend(&e, "a", ses + 1).await.unwrap());
    assert!(!s.extend(&e, "b", ses + 1).await.unwrap());
    assert_eq!(
        s.join(&e, "a", &open()).await.unwrap().state,
        MemberState::Active {
            expires_at_us: ses + 1
        }
    );

    let st = s.stats(&e).await.unwrap();
    assert_eq!((st.waiting, st.active, st.outstanding), (2, 1, 1));
    assert_eq!(
        (
            st.admitted_total,
            st.redeemed_total,
            st.admitted_last_1m,
            st.admitted_last_5m
        ),
        (2, 1, 2, 2)
    );

    // Release frees the slot and revokes the pass.
    let before = s.now_us(&e).await.unwrap();
    assert!(s.release(&e, "a").await.unwrap());
    assert!(!s.release(&e, "a").await.unwrap());
    let revs = s.revocations_since(&e, before).await.unwrap();
    assert_eq!(revs.len(), 1);
    assert_eq!(revs[0].member, "a");
    assert!(revs[0].at_us >= before);
    let got = s.admit(&e, &admit_req(10, 2, exp, 3)).await.unwrap();
    assert_eq!(
        got.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(),
        ["c"]
    );
    assert_eq!(s.stats(&e).await.unwrap().churn_last_1m, 1);
}

#[tokio::test]
async fn paused_or_closed_never_admits() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("pause");
    s.join(&e, "a", &open()).await.unwrap();
    assert_eq!(s.admin_state(&e).await.unwrap(), AdminState::Running);
    for state in [AdminState::Paused, AdminState::Closed] {
        s.set_admin_state(&e, state).await.unwrap();
        assert_eq!(s.admin_state(&e).await.unwrap(), state);
        assert!(
            s.admit(&e, &admit_req(5, 5, 3_600_000_000, 1))
                .await
                .unwrap()
                .is_empty()
        );
    }
    s.set_admin_state(&e, AdminState::Running).await.unwrap();
    assert_eq!(
        s.admit(&e, &admit_req(5, 5, 3_600_000_000, 1))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn expire_sweeps_idle_waiters_tokens_and_sessions() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("expire");
    for m in ["w1", "w2", "t1", "s1"] {
        s.join(&e, m, &open()).await.unwrap();
    }
    let now = s.now_us(&e).await.unwrap();
    // Tokens and sessions that end right away.
    let t = s.admit(&e, &admit_req(1, 10, 1, 1)).await.unwrap(); // w1
    assert_eq!(t[0].member, "w1");
    let t2 = s.admit(&e, &admit_req(1, 10, 200_000, 2)).await.unwrap(); // w2
    assert!(matches!(
        s.redeem(&e, "w2", &t2[0].nonce, now + 1).await.unwrap(),
        RedeemOutcome::Redeemed { .. }
    ));
    // Touch t1 later than s1 so only s1 is idle.
    let cut = s.now_us(&e).await.unwrap() + 1;
    tokio::time::sleep(Duration::from_millis(2)).await;
    s.status(&e, "t1", Touch::Seen).await.unwrap();
    let st = s.stats(&e).await.unwrap();
    assert_eq!(
        (st.active, st.outstanding),
        (1, 1),
        "ended sessions and tokens hold their slot until the sweep"
    );
    let before = s.now_us(&e).await.unwrap();
    let x = s
        .expire(
            &e,
            &ExpireRequest {
                waiting_seen_before_us: cut,
            },
        )
        .await
        .unwrap();
    assert_eq!((x.idle_waiters, x.unredeemed_tokens, x.sessions), (1, 1, 1));
    assert_eq!(
        s.status(&e, "s1", Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert_eq!(
        s.status(&e, "w1", Touch::Peek).await.unwrap(),
        MemberState::None
    );
    assert!(matches!(
        s.status(&e, "t1", Touch::Peek).await.unwrap(),
        MemberState::Waiting { rank: 0, .. }
    ));
    assert_eq!(
        s.redeem(&e, "w1", &t[0].nonce, now + 10).await.unwrap(),
        RedeemOutcome::NotAdmitted
    );
    let revs = s.revocations_since(&e, before).await.unwrap();
    assert_eq!(
        revs.iter().map(|r| r.member.as_str()).collect::<Vec<_>>(),
        ["w2"]
    );
    let st = s.stats(&e).await.unwrap();
    assert_eq!((st.churn_last_1m, st.no_shows_last_5m), (2, 1));
    assert_eq!(
        s.expire(
            &e,
            &ExpireRequest {
                waiting_seen_before_us: cut
            }
        )
        .await
        .unwrap(),
        Default::default()
    );
}

#[tokio::test]
async fn reconcile_records_drain_admissions() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("reconcile");
    s.join(&e, "waiting", &open()).await.unwrap();
    s.join(&e, "admitted", &open()).await.unwrap();
    let now = s.now_us(&e).await.unwrap();
    s.admit(&e, &admit_req(1, 10, 60_000_000, 1)).await.unwrap(); // "waiting" joined first
    let later = now + 90_000_000;
    let members: Vec<(String, i64)> = ["waiting", "admitted", "stranger"]
        .iter()
        .map(|m| (m.to_string(), later))
        .collect();
    // "waiting" is admitted (left as is); the other two become active.
    assert_eq!(s.reconcile_active(&e, &members).await.unwrap(), 2);
    assert!(matches!(
        s.status(&e, "waiting", Touch::Peek).await.unwrap(),
        MemberState::Admitted { .. }
    ));
    assert_eq!(
        s.status(&e, "admitted", Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: later
        }
    );
    assert_eq!(s.queue_length(&e).await.unwrap(), 0);
    assert_eq!(s.reconcile_active(&e, &members).await.unwrap(), 0);
}

/// A tick or batch guard stamped after the store's clock (claimed while it
/// ran ahead: a failover to a replica whose clock is behind) guards nothing:
/// its PX expiry is counted on the clock that stepped back, so kept, it
/// would refuse that tick until the clock caught up. A guard an earlier
/// version set (`1`) still holds.
#[tokio::test]
async fn a_guard_stamped_ahead_of_the_store_clock_does_not_hold() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let mut raw = raw(&server).await;
    let e = event("stepped");
    let ahead = s.now_us(&e).await.unwrap() + 3_600_000_000;
    for tick in [7u64, 8] {
        let () = redis::cmd("SET")
            .arg(format!("anteroom:{{stepped}}:tick:{tick}"))
            .arg(ahead)
            .arg("PX")
            .arg(3_600_000)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    assert!(s.claim_tick(&e, 7, 1000).await.unwrap());
    assert!(
        !s.claim_tick(&e, 7, 1000).await.unwrap(),
        "held once claimed"
    );
    assert!(s.claim_tick_and_read(&e, 8, 1000).await.unwrap().is_some());
    assert!(s.claim_tick_and_read(&e, 8, 1000).await.unwrap().is_none());
    let () = redis::cmd("SET")
        .arg("anteroom:{stepped}:tick:9")
        .arg(1)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!s.claim_tick(&e, 9, 1000).await.unwrap());
    assert!(s.claim_tick_and_read(&e, 9, 1000).await.unwrap().is_none());
}

#[tokio::test]
async fn guards_state_and_configs() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("guards");
    let now = s.now_us(&e).await.unwrap();
    let n = [9u8; 16];
    assert!(s.consume_once(&e, &n, now + 60_000_000).await.unwrap());
    assert!(!s.consume_once(&e, &n, now + 60_000_000).await.unwrap());
    assert!(
        s.consume_once(&event("other"), &n, now + 60_000_000)
            .await
            .unwrap()
    );
    assert!(s.claim_tick(&e, 1, 1000).await.unwrap());
    assert!(!s.claim_tick(&e, 1, 1000).await.unwrap());
    assert!(s.claim_tick(&e, 2, 1000).await.unwrap());
    s.put_event_config(&event("b"), r#"{"id":"b"}"#)
        .await
        .unwrap();
    s.put_event_config(&event("a"), r#"{"id":"a"}"#)
        .await
        .unwrap();
    s.put_event_config(&event("a"), r#"{"id":"a","v":2}"#)
        .await
        .unwrap();
    let configs = s.event_configs().await.unwrap();
    assert_eq!(
        configs,
        vec![
            (event("a"), r#"{"id":"a","v":2}"#.to_string()),
            (event("b"), r#"{"id":"b"}"#.to_string())
        ]
    );
    s.ping(&e).await.unwrap();
    assert_eq!(s.name(), "redis");
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let mut conn = raw(&server).await;
    let e = event("flush");
    assert!(s.join(&e, "a", &open()).await.unwrap().new);
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let cached: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(redis::Script::new(include_str!("../src/redis/join.lua")).get_hash())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(cached, [false]);
    assert!(s.join(&e, "b", &open()).await.unwrap().new);
    assert_eq!(
        s.admit(&e, &admit_req(2, 2, 10_000_000, 1))
            .await
            .unwrap()
            .len(),
        2
    );
    // After a restart the server is empty and knows no script either.
    let mut server = server;
    server.restart().unwrap();
    let t0 = Instant::now();
    loop {
        match s.join(&e, "c", &open()).await {
            Ok(j) => {
                assert!(j.new);
                break;
            }
            Err(StoreError::Unavailable(_)) if t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(err) => panic!("no recovery after restart: {err}"),
        }
    }
}

#[tokio::test]
async fn stopped_server_is_unavailable_within_the_timeout() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("stopped");
    s.join(&e, "a", &open()).await.unwrap();
    server.pause().unwrap();
    let t0 = Instant::now();
    let err = s.join(&e, "b", &open()).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(t0.elapsed() < TIMEOUT * 3, "took {:?}", t0.elapsed());
    // A frozen server is silence, not refusal: the drain waits it out.
    assert_eq!(
        err.unavailable_kind(),
        Some(UnavailableKind::TimedOut),
        "{err}"
    );
    let t0 = Instant::now();
    let stats = s.stats(&e).await;
    assert!(matches!(stats, Err(StoreError::Unavailable(_))));
    assert!(t0.elapsed() < TIMEOUT * 3);
    let kind = stats.err().and_then(|e| e.unavailable_kind());
    assert_eq!(kind, Some(UnavailableKind::TimedOut));
    server.resume().unwrap();
    let t0 = Instant::now();
    loop {
        match s.status(&e, "a", Touch::Peek).await {
            Ok(state) => {
                assert!(matches!(state, MemberState::Waiting { rank: 0, .. }));
                break;
            }
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(err) => panic!("no recovery after SIGCONT: {err}"),
        }
    }
}

#[tokio::test]
async fn refused_connection_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = RedisConfig {
        urls: vec![format!("redis://127.0.0.1:{port}")],
        cluster: false,
        timeout: TIMEOUT,
    };
    let t0 = Instant::now();
    let connect = RedisStore::connect(&cfg).await;
    assert!(matches!(connect, Err(StoreError::Unavailable(_))));
    assert!(t0.elapsed() < TIMEOUT * 3);
    // Nothing listens: refused, which drains at once, with the redis error kept.
    let err = connect.err().unwrap();
    assert_eq!(
        err.unavailable_kind(),
        Some(UnavailableKind::Refused),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some(), "{err}");

    // A server that dies after connecting: calls fail fast, never hang.
    let mut server = RedisServer::start().unwrap();
    let s = store(&server).await;
    server.kill().unwrap();
    let t0 = Instant::now();
    let err = s.join(&event("dead"), "a", &open()).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(t0.elapsed() < TIMEOUT * 3);
    assert_eq!(
        err.unavailable_kind(),
        Some(UnavailableKind::Refused),
        "{err}"
    );
    let bad = RedisConfig {
        urls: vec![],
        cluster: false,
        timeout: TIMEOUT,
    };
    assert!(matches!(
        RedisStore::connect(&bad).await,
        Err(StoreError::InvalidInput(_))
    ));
}

/// Runs every operation once on `e`.
async fn exercise(s: &RedisStore, e: &EventId) {
    for i in 0..20 {
        s.join(e, &format!("m{i}"), &open()).await.unwrap();
    }
    let now = s.now_us(e).await.unwrap();
    let got = s.admit(e, &admit_req(5, 10, 1, 1)).await.unwrap();
    s.redeem(e, &got[0].member, &got[0].nonce, now + 1)
        .await
        .unwrap();
    s.extend(e, &got[0].member, now + 2).await.unwrap();
    s.release(e, "m10").await.unwrap();
    s.reconcile_active(e, &[("m11".into(), now + 1)])
        .await
        .unwrap();
    s.status(e, "m12", Touch::Seen).await.unwrap();
    s.consume_once(e, &[1; 16], now + 1_000).await.unwrap();
    s.claim_tick(e, 1, 1000).await.unwrap();
    s.set_admin_state(e, AdminState::Paused).await.unwrap();
    s.put_event_config(e, "{}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.expire(
        e,
        &ExpireRequest {
            waiting_seen_before_us: now + 10_000_000,
        },
    )
    .await
    .unwrap();
    s.stats(e).await.unwrap();
    s.revocations_since(e, 0).await.unwrap();
    s.event_configs().await.unwrap();
}

#[tokio::test]
async fn keys_of_other_applications_are_untouched() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let mut conn = raw(&server).await;
    let foreign = [
        ("q", "1"),
        ("app:{flow}:q", "2"),
        ("anteroom", "3"),
        ("{flow}:active", "4"),
    ];
    for (k, v) in foreign {
        let () = redis::cmd("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let () = redis::cmd("ZADD")
        .arg("leaderboard")
        .arg(1)
        .arg("m1")
        .query_async(&mut conn)
        .await
        .unwrap();
    exercise(&s, &event("flow")).await;
    anteroom_store::conformance::test_suite(Arc::new(s.clone())).await;
    for (k, v) in foreign {
        let got: String = redis::cmd("GET")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, v, "{k}");
    }
    let board: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("leaderboard")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(board, [("m1".to_string(), 1.0)]);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ours: Vec<&String> = keys
        .iter()
        .filter(|k| !foreign.iter().any(|(f, _)| f == k) && *k != "leaderboard")
        .collect();
    assert!(!ours.is_empty());
    for k in ours {
        assert!(
            k.starts_with("anteroom:{") || k == "anteroom:{@config}:events",
            "unexpected key {k}"
        );
    }
}

/// The key layout: an event's keys are `anteroom:{<event>}:<name>`, so the
/// hash tag puts all of them in the event's own cluster slot; the only keys
/// outside any event's tag are the cross-event ones, the configs hash with
/// its generation and the set of audited events, tagged with an `@` no
/// event id can hold.
#[tokio::test]
async fn every_key_is_under_its_events_hash_tag_or_a_shared_one() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let mut conn = raw(&server).await;
    let events = [event("flow"), event("other-event")];
    for e in &events {
        exercise(&s, e).await;
        s.append_audit(e, r#"{"action":"pause"}"#).await.unwrap();
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let shared = [
        "anteroom:{@config}:events",
        "anteroom:{@config}:generation",
        "anteroom:{@audit}:events",
    ];
    for k in shared {
        assert!(keys.iter().any(|x| x == k), "{k} not written: {keys:?}");
    }
    for k in &keys {
        if shared.contains(&k.as_str()) {
            continue;
        }
        let tag = k
            .strip_prefix("anteroom:{")
            .and_then(|rest| rest.split_once("}:"))
            .map(|(tag, _)| tag)
            .unwrap_or_else(|| panic!("{k} is not anteroom:{{<event>}}:<name>"));
        assert!(
            events.iter().any(|e| e.as_str() == tag),
            "{k} is tagged {tag:?}, not with an event it belongs to"
        );
    }
}

/// Two nodes whose ticks overlap: node A reads the clock for its tick,
/// node B admits the front meanwhile, and A's admit lands after B's. A pops
/// the later rank, so its token must carry the later issue time (expiry
/// less lifetime): the store stamps it at the pop, not from A's older read.
#[tokio::test]
async fn a_later_pop_from_another_node_never_carries_an_earlier_stamp() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server).await, store(&server).await);
    let e = event("overlap");
    for m in ["first", "second"] {
        a.join(&e, m, &open()).await.unwrap();
    }
    let ttl = 60_000_000;
    let a_read = a.now_us(&e).await.unwrap();
    let mut b_now = b.now_us(&e).await.unwrap();
    while b_now < a_read + 5_000 {
        tokio::task::yield_now().await;
        b_now = b.now_us(&e).await.unwrap();
    }
    let by_b = b.admit(&e, &admit_req(1, 10, ttl, 1)).await.unwrap();
    let by_a = a.admit(&e, &admit_req(1, 10, ttl, 2)).await.unwrap();
    assert_eq!(
        (by_b[0].member.as_str(), by_a[0].member.as_str()),
        ("first", "second")
    );
    let issued = |st: MemberState| match st {
        MemberState::Admitted { expires_at_us, .. } => expires_at_us - ttl,
        other => panic!("not admitted: {other:?}"),
    };
    let first = issued(a.status(&e, "first", Touch::Peek).await.unwrap());
    let second = issued(a.status(&e, "second", Touch::Peek).await.unwrap());
    assert!(
        first >= b_now,
        "B's pop is stamped when it ran: {first} < {b_now}"
    );
    assert!(
        second >= first,
        "the later pop carries the earlier issue time: {second} < {first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateway_nodes_racing_admit_never_double_admit() {
    let server = RedisServer::start().unwrap();
    let nodes = [
        Arc::new(store(&server).await),
        Arc::new(store(&server).await),
    ];
    let e = event("race");
    let scoring = open();
    let mut joins = Vec::new();
    for i in 0..400 {
        let s = nodes[i % 2].clone();
        let e = e.clone();
        joins.push(tokio::spawn(async move {
            s.join(&e, &format!("m{i}"), &scoring).await.unwrap()
        }));
    }
    for j in joins {
        assert!(j.await.unwrap().new);
    }
    let max_active = 150;
    let mut tasks = Vec::new();
    for t in 0..40u8 {
        let s = nodes[usize::from(t) % 2].clone();
        let e = e.clone();
        tasks.push(tokio::spawn(async move {
            s.admit(&e, &admit_req(7, max_active, 60_000_000, t))
                .await
                .unwrap()
        }));
    }
    let mut admitted = HashSet::new();
    for t in tasks {
        for a in t.await.unwrap() {
            assert!(
                admitted.insert(a.member.clone()),
                "{} admitted twice",
                a.member
            );
        }
    }
    assert_eq!(admitted.len() as u64, max_active);
    let st = nodes[1].stats(&e).await.unwrap();
    assert_eq!(
        (st.outstanding, st.waiting, st.admitted_total),
        (max_active, 400 - max_active, max_active)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_tick_is_won_once_across_nodes() {
    let server = RedisServer::start().unwrap();
    let nodes = [
        Arc::new(store(&server).await),
        Arc::new(store(&server).await),
    ];
    let e = event("ticks");
    let mut tasks = Vec::new();
    for t in 0..64 {
        let s = nodes[t % 2].clone();
        let e = e.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for tick in 0..50u64 {
                if s.claim_tick(&e, tick, 10_000).await.unwrap() {
                    won.push(tick);
                }
            }
            won
        }));
    }
    let mut wins = Vec::new();
    for t in tasks {
        wins.extend(t.await.unwrap());
    }
    wins.sort_unstable();
    assert_eq!(wins, (0..50).collect::<Vec<_>>());
}

/// Concurrent joins leave one gateway node in batches (see the backend's
/// join batching): a member named several times in one burst is new exactly
/// once, distinct members get distinct ranks, and a member holding a token
/// keeps it even when its join shares a batch with new waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_joins_behave_like_lone_joins() {
    let server = RedisServer::start().unwrap();
    let s = Arc::new(store(&server).await);
    let e = event("batched");
    assert!(s.join(&e, "holder", &open()).await.unwrap().new);
    let admitted = s.admit(&e, &admit_req(1, 10, 60_000_000, 3)).await.unwrap();
    assert_eq!(admitted.len(), 1);

    let mut calls = Vec::new();
    for round in 0..4 {
        for i in 0..300 {
            let (s, e) = (s.clone(), e.clone());
            calls.push(tokio::spawn(async move {
                let m = format!("m{i:03}");
                (m.clone(), round, s.join(&e, &m, &open()).await.unwrap())
            }));
        }
        let (s, e) = (s.clone(), e.clone());
        calls.push(tokio::spawn(async move {
            let j = s.join(&e, "holder", &open()).await.unwrap();
            ("holder".to_string(), round, j)
        }));
    }
    let mut new = HashSet::new();
    for c in calls {
        let (m, _, j) = c.await.unwrap();
        if m == "holder" {
            assert!(!j.new);
            assert!(
                matches!(j.state, MemberState::Admitted { nonce, .. } if nonce == admitted[0].nonce),
                "{j:?}"
            );
            continue;
        }
        assert!(matches!(j.state, MemberState::Waiting { .. }), "{j:?}");
        if j.new {
            assert!(new.insert(m.clone()), "{m} was new twice");
        }
    }
    assert_eq!(new.len(), 300);
    assert_eq!(s.queue_length(&e).await.unwrap(), 300);
    let mut ranks = HashSet::new();
    for i in 0..300 {
        match s
            .status(&e, &format!("m{i:03}"), Touch::Peek)
            .await
            .unwrap()
        {
            MemberState::Waiting { rank, .. } => assert!(ranks.insert(rank)),
            other => panic!("{other:?}"),
        }
    }
}

/// A new waiter is seen at its join through its join batch, not its own
/// `seen` entry. A member that left (released, or its token expired) and
/// joined again after the cutoff must not be taken for idle through the
/// older batch that still names it; and a sweep over more batches than one
/// script call takes goes on until every idle waiter is gone.
#[tokio::test]
async fn idle_expiry_through_join_batches() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("idle-batches");
    let sweep = |cutoff| ExpireRequest {
        waiting_seen_before_us: cutoff,
    };
    for m in ["released", "admitted", "stays-idle"] {
        assert!(s.join(&e, m, &open()).await.unwrap().new);
    }
    assert!(s.release(&e, "released").await.unwrap());
    let t = s.admit(&e, &admit_req(1, 10, 1_000, 4)).await.unwrap();
    assert_eq!(t[0].member, "admitted");
    tokio::time::sleep(Duration::from_millis(3)).await;
    // The token has expired: the sweep frees its slot (and marks the member).
    let freed = s.expire(&e, &sweep(i64::MIN)).await.unwrap();
    assert_eq!(freed.unredeemed_tokens, 1);
    let cutoff = s.now_us(&e).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert!(s.join(&e, "released", &open()).await.unwrap().new);
    assert!(s.join(&e, "admitted", &open()).await.unwrap().new);
    let freed = s.expire(&e, &sweep(cutoff)).await.unwrap();
    assert_eq!(
        freed.idle_waiters, 1,
        "only the waiter not seen since the cutoff"
    );
    assert_eq!(
        s.status(&e, "stays-idle", Touch::Peek).await.unwrap(),
        MemberState::None
    );
    for m in ["released", "admitted"] {
        assert!(
            matches!(
                s.status(&e, m, Touch::Peek).await.unwrap(),
                MemberState::Waiting { .. }
            ),
            "{m} joined again after the cutoff"
        );
    }

    // Lone joins make one batch each: more than one sweep call's worth.
    let e = event("many-batches");
    for i in 0..300 {
        s.join(&e, &format!("m{i}"), &open()).await.unwrap();
    }
    s.status(&e, "m7", Touch::Seen).await.unwrap();
    let cutoff = s.now_us(&e).await.unwrap() + 1;
    let freed = s.expire(&e, &sweep(cutoff)).await.unwrap();
    assert_eq!(freed.idle_waiters, 300);
    assert_eq!(s.queue_length(&e).await.unwrap(), 0);
}

/// Polls every future once, in order (so each join is queued for its batch
/// in that order), then waits for all of them.
async fn in_order<F: Future + Unpin>(mut futs: Vec<F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut out: Vec<Option<F::Output>> = std::future::poll_fn(|cx| {
        Poll::Ready(
            futs.iter_mut()
                .map(|f| match std::pin::Pin::new(f).poll(cx) {
                    Poll::Ready(v) => Some(v),
                    Poll::Pending => None,
                })
                .collect(),
        )
    })
    .await;
    for (slot, f) in out.iter_mut().zip(futs) {
        if slot.is_none() {
            *slot = Some(f.await);
        }
    }
    out.into_iter().flatten().collect()
}

/// Joins that arrive at a node one after the other keep that order in the
/// queue, also when they share one `join.lua` call (one Redis TIME) and
/// their hash tie-breaks would reverse them, and across the node's
/// batches in flight together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_keep_their_arrival_order_inside_and_across_batches() {
    let server = RedisServer::start().unwrap();
    let s = store(&server).await;
    let e = event("arrival-order");
    let members: Vec<String> = (0..1500).map(|i| format!("m{i:04}")).collect();
    let scorings: Vec<JoinScoring> = (0..members.len())
        .map(|i| JoinScoring {
            tiebreak: 1023 - (i % 1024) as i64,
            ..open()
        })
        .collect();
    let joins = members
        .iter()
        .zip(&scorings)
        .map(|(m, sc)| Box::pin(s.join(&e, m, sc)))
        .collect();
    for j in in_order(joins).await {
        assert!(j.unwrap().new);
    }
    let mut raw = raw(&server).await;
    let order: Vec<String> = redis::cmd("ZRANGE")
        .arg("anteroom:{arrival-order}:q")
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let batches: u64 = redis::cmd("HGET")
        .arg("anteroom:{arrival-order}:jm")
        .arg("next")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(batches > 2, "the joins went as {batches} batches");
    assert!(
        (batches as usize) < members.len() / 4,
        "the joins were hardly batched ({batches} batches)"
    );
    assert_eq!(order, members);
}

/// Waits for the next admission news of `rx`, failing after 10 s.
async fn next_news(rx: &mut tokio::sync::broadcast::Receiver<EventId>) -> EventId {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no admission news within 10 s")
        .expect("the news channel closed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_nodes_admission_is_news_and_a_nodes_own_is_not() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server).await, store(&server).await);
    let (e1, e2) = (event("news-one"), event("news-two"));
    let mut hears_a = a
        .admissions_elsewhere()
        .expect("redis carries admission news");
    let mut hears_b = b
        .admissions_elsewhere()
        .expect("redis carries admission news");
    // Both subscriptions are up once the channel counts two listeners.
    anteroom_store::testing::wait_for_news_listeners(&server.url(), 2)
        .await
        .unwrap();
    let exp = 60_000_000;
    // An admit call that admits nobody is no news.
    assert!(
        a.admit(&e1, &admit_req(5, 10, exp, 1))
            .await
            .unwrap()
            .is_empty()
    );
    a.join(&e1, "m1", &open()).await.unwrap();
    assert_eq!(
        a.admit(&e1, &admit_req(5, 10, exp, 2)).await.unwrap().len(),
        1
    );
    assert_eq!(next_news(&mut hears_b).await, e1);
    // B admits into another event: A hears that, and nothing before it, so
    // A's own admission (published before B's, on the same channel) was
    // not handed back to A.
    b.join(&e2, "m2", &open()).await.unwrap();
    assert_eq!(
        b.admit(&e2, &admit_req(5, 10, exp, 3)).await.unwrap().len(),
        1
    );
    assert_eq!(next_news(&mut hears_a).await, e2);
    assert!(
        hears_a.try_recv().is_err(),
        "A heard more than B's admission"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admission_news_resumes_after_the_subscription_is_cut() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server).await, store(&server).await);
    let e = event("news-cut");
    let mut hears = b.admissions_elsewhere().unwrap();
    let exp = 60_000_000;
    // Admits one more visitor every 100 ms until B hears of it; news sent
    // while B is not subscribed is lost (it is a hint), so one admission
    // alone could go unheard.
    async fn admit_until_heard(
        a: &RedisStore,
        e: &EventId,
        exp: i64,
        hears: &mut tokio::sync::broadcast::Receiver<EventId>,
        round: u8,
    ) {
        let deadline = Instant::now() + Duration::from_secs(15);
        for i in 0u32.. {
            assert!(Instant::now() < deadline, "B never heard (round {round})");
            a.join(e, &format!("r{round}-{i}"), &open()).await.unwrap();
            let admitted = a.admit(e, &admit_req(1, 1_000, exp, round)).await.unwrap();
            assert_eq!(admitted.len(), 1);
            if let Ok(Ok(heard)) =
                tokio::time::timeout(Duration::from_millis(100), hears.recv()).await
            {
                assert_eq!(&heard, e);
                return;
            }
        }
    }
    admit_until_heard(&a, &e, exp, &mut hears, 1).await;
    // The server drops every subscriber's connection: B subscribes again.
    let mut conn = raw(&server).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(killed, 1, "B's subscription was not there to cut");
    // Whatever was heard before the cut is not news of this round.
    while hears.try_recv().is_ok() {}
    admit_until_heard(&a, &e, exp, &mut hears, 2).await;
}

/// Calls made together on the store's one connection travel together: with
/// Redis 30 ms away, each of three reads started at once is answered within
/// one round trip. redis-rs leaves `TCP_NODELAY` off, and with Nagle's
/// algorithm the second and third requests often waited in the socket for
/// the first one's answer (which brings its acknowledgement): two round
/// trips.
#[tokio::test(flavor = "multi_thread")]
async fn calls_made_together_are_answered_within_one_round_trip() {
    let away = Duration::from_millis(30);
    let server = RedisServer::start().unwrap();
    let proxy = DistantProxy::start(server.port(), away).await.unwrap();
    let s = support::connect(vec![proxy.url()], false).await;
    support::answered_together_within_one_round_trip(&s, away).await;
}

/// The admission tick that sweeps decides on the counts the sweep left:
/// with Redis 30 ms away, the sweep and those counts take one round trip,
/// not one for the sweep and another for the counts.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_reads_the_counts_it_left_in_its_own_round_trip() {
    let away = Duration::from_millis(30);
    let server = RedisServer::start().unwrap();
    let proxy = DistantProxy::start(server.port(), away).await.unwrap();
    let s = support::connect(vec![proxy.url()], false).await;
    let id = event("tickets");
    let req = ExpireRequest {
        waiting_seen_before_us: 0,
    };
    // The first call finds the script not loaded and sends it.
    s.expire_and_stats(&id, &req).await.unwrap();
    let mut took = Vec::new();
    for _ in 0..8 {
        let started = Instant::now();
        s.expire_and_stats(&id, &req).await.unwrap();
        took.push(started.elapsed());
    }
    // The median: two calls take two round trips every time, a stall of
    // the box delays one now and then.
    let mut sorted = took.clone();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] < away * 3 / 2,
        "a sweep and its counts with Redis {away:?} away took {took:?}: one round trip is {away:?}"
    );
}
