//! The Redis backend against a 3-master Redis Cluster started by the test:
//! every operation on events spread over the masters, and per-event failure
//! isolation (killing one master drains only that master's events).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anteroom_store::redis::RedisStore;
use anteroom_store::testing::RedisCluster;
use anteroom_store::{
    AdmitRequest, EventId, ExpireRequest, MemberState, QueueStore, RedeemOutcome, StoreError, Touch,
};

mod support;

use support::{TIMEOUT, event, open};

async fn store(cluster: &RedisCluster) -> RedisStore {
    support::connect(cluster.urls(), true).await
}

/// Join, admit, redeem, stats and expire on one event: every script runs on
/// the event's own master.
async fn round_trip(s: &RedisStore, e: &EventId) -> Result<(), StoreError> {
    for m in ["a", "b", "c"] {
        s.join(e, m, &open()).await?;
    }
    let now = s.now_us(e).await?;
    let req = AdmitRequest {
        max: 2,
        max_active: 10,
        nonces: vec![[1; 16], [2; 16]],
        token_ttl_us: 60_000_000,
    };
    let got = s.admit(e, &req).await?;
    assert_eq!(got.len(), 2);
    assert!(matches!(
        s.redeem(e, &got[0].member, &got[0].nonce, now + 60_000_000)
            .await?,
        RedeemOutcome::Redeemed { .. }
    ));
    assert_eq!(
        s.status(e, "c", Touch::Seen).await?,
        MemberState::Waiting {
            rank: 0,
            queue_length: 1
        }
    );
    let st = s.stats(e).await?;
    assert_eq!((st.waiting, st.active, st.outstanding), (1, 1, 1));
    s.expire(
        e,
        &ExpireRequest {
            waiting_seen_before_us: 0,
        },
    )
    .await?;
    assert!(s.claim_tick(e, 1, 10_000).await?);
    assert!(s.consume_once(e, &[3; 16], now + 60_000_000).await?);
    assert!(s.release(e, "c").await?);
    s.ping(e).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_spread_over_masters_and_a_dead_master_drains_only_its_events() {
    let mut cluster = RedisCluster::start(3).unwrap();
    let s = store(&cluster).await;
    assert_eq!(s.name(), "redis-cluster");
    let events: Vec<EventId> = (0..30).map(|i| event(&format!("ev-{i}"))).collect();
    let mut by_master: HashMap<u16, Vec<EventId>> = HashMap::new();
    for e in &events {
        by_master
            .entry(cluster.master_for_event(e.as_str()).unwrap())
            .or_default()
            .push(e.clone());
    }
    assert!(
        by_master.len() >= 2,
        "30 events all hashed to one master: {by_master:?}"
    );
    for e in &events {
        round_trip(&s, e).await.unwrap();
    }
    s.put_event_config(&events[0], "{}").await.unwrap();
    assert_eq!(s.event_configs().await.unwrap().len(), 1);

    let victim = events[0].clone();
    let dead = cluster.kill_master_for_event(victim.as_str()).unwrap();
    let (lost, kept): (Vec<_>, Vec<_>) = events.iter().partition(|e| by_master[&dead].contains(e));
    let kept: HashSet<&EventId> = kept.into_iter().collect();
    // Every call on a dead master's event fails as Unavailable within the
    // timeout, and the other masters' events go on working meanwhile.
    for e in &lost {
        let t0 = Instant::now();
        let err = s.join(e, "late", &open()).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{e}: {err}");
        assert!(t0.elapsed() < TIMEOUT * 3, "{e}: took {:?}", t0.elapsed());
        assert!(matches!(s.ping(e).await, Err(StoreError::Unavailable(_))));
    }
    // Let the survivors notice the failure (cluster-node-timeout) and check
    // they still serve their slots afterwards too.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for e in &kept {
        let j = s.join(e, "after", &open()).await.unwrap();
        assert!(j.new, "{e}");
        assert_eq!(s.queue_length(e).await.unwrap(), 1);
    }
    for e in &lost {
        assert!(
            matches!(s.stats(e).await, Err(StoreError::Unavailable(_))),
            "{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_on_a_three_master_cluster() {
    let cluster = RedisCluster::start(3).unwrap();
    let s: std::sync::Arc<dyn QueueStore> = std::sync::Arc::new(store(&cluster).await);
    anteroom_store::conformance::test_suite(s.clone()).await;
    anteroom_store::conformance::model_check(s, 32).await;
}

/// A cluster's connections go without Nagle's hold too: the client makes
/// one to each master it discovers, with the builder's TCP settings, which
/// the seed's settings do not carry. Every master 30 ms away (each behind a
/// proxy it announces as its address), three reads of one event started at
/// once are each answered within one round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_made_together_are_answered_within_one_round_trip_in_a_cluster() {
    let away = Duration::from_millis(30);
    let cluster = RedisCluster::start(3).unwrap();
    let proxies = cluster.distant(away).await.unwrap();
    let seeds = proxies.iter().map(|p| p.url()).collect();
    let s = support::connect(seeds, true).await;
    support::answered_together_within_one_round_trip(&s, away).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scripts_reload_on_every_master_after_script_flush() {
    let cluster = RedisCluster::start(3).unwrap();
    let s = store(&cluster).await;
    let events: Vec<EventId> = (0..10).map(|i| event(&format!("flush-{i}"))).collect();
    for e in &events {
        s.join(e, "a", &open()).await.unwrap();
    }
    for url in cluster.urls() {
        let mut c = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    for e in &events {
        assert!(s.join(e, "b", &open()).await.unwrap().new);
    }
}

/// Admission news crosses the cluster: a node subscribed on one seed hears
/// admissions into events whose slots live on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admission_news_reaches_another_node_from_every_master() {
    let cluster = RedisCluster::start(3).unwrap();
    let (a, b) = (store(&cluster).await, store(&cluster).await);
    let mut hears = b
        .admissions_elsewhere()
        .expect("a cluster carries admission news");
    // The node subscribes on the first seed.
    anteroom_store::testing::wait_for_news_listeners(&cluster.urls()[0], 1)
        .await
        .unwrap();
    // One event per master.
    let mut chosen: HashMap<u16, EventId> = HashMap::new();
    for i in 0..60 {
        let e = event(&format!("news-{i}"));
        chosen
            .entry(cluster.master_for_event(e.as_str()).unwrap())
            .or_insert(e);
    }
    assert_eq!(chosen.len(), 3, "60 events did not cover the 3 masters");
    let mut expected = HashSet::new();
    for e in chosen.values() {
        a.join(e, "m", &open()).await.unwrap();
        let req = AdmitRequest {
            max: 1,
            max_active: 10,
            nonces: vec![[9; 16]],
            token_ttl_us: 60_000_000,
        };
        assert_eq!(a.admit(e, &req).await.unwrap().len(), 1);
        expected.insert(e.clone());
    }
    let mut heard = HashSet::new();
    while heard.len() < expected.len() {
        let e = tokio::time::timeout(Duration::from_secs(10), hears.recv())
            .await
            .expect("not every admission was heard within 10 s")
            .unwrap();
        heard.insert(e);
    }
    assert_eq!(heard, expected);
}
