//! Drain cannot overshoot: two real `anteroom` nodes on one real
//! `redis-server`, each through its own TCP proxy, and the test cuts only
//! one node's proxy. The cut node admits on its own only what the store
//! holds for it while the other goes on admitting through the store, so
//! active + outstanding + the cut node's own admissions never pass
//! `max_active`; and a cut node killed (`kill -9`) after answering
//! admissions finds them in its journal on restart and records them before
//! admitting again: its visitors keep working, nobody gets in twice.

use crate::support::config::{FAST_BATCH, HOURLY};
use crate::support::origin::Origin;
use crate::support::process;
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::cut::CutProxy;
use crate::support::process::Node;
use crate::support::wait_for;
use anteroom_store::testing::RedisServer;
use http::{Method, StatusCode};
use serde_json::Value;

const EVENT: &str = "tickets";
const MAX_ACTIVE: u64 = 6;
const WAITING: usize = 10;

/// Two nodes (`gateway_nodes = 2`), A and B, each behind its own proxy; one
/// active pass holder; `WAITING` visitors queued through B (so B knows
/// their ranks), none of them admitted yet; both nodes hold a reserve.
struct Setup {
    _redis: RedisServer,
    origin: Arc<Origin>,
    _dir: Arc<tempfile::TempDir>,
    _pa: CutProxy,
    pb: CutProxy,
    a: Node,
    b: Node,
    waiting: Vec<Visitor>,
}

async fn setup() -> Setup {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (pa, pb) = (
        CutProxy::start(redis.port()).await,
        CutProxy::start(redis.port()).await,
    );
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = |url: String| {
        process::redis_node(&[url])
            .gateway_nodes(2)
            .event(process::event(EVENT, &origin.url(), MAX_ACTIVE).admission(HOURLY))
            .toml()
    };
    let a = Node::start(&config(pa.url()), dir.clone()).await;
    let b = Node::start(&config(pb.url()), dir.clone()).await;

    let mut holder = Visitor::default();
    holder.enter(&a, EVENT).await;
    holder
        .until_active(&a, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let mut waiting = Vec::new();
    for _ in 0..WAITING {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&b, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        waiting.push(v);
    }
    // Each node's policy owes its first batch (of one) until it admits it
    // on a tick it wins or forfeits it on one it loses, and the holder's
    // batch may have been either node's: wait until both have tried a few
    // ticks since the queue filled, so both first batches are settled, then
    // let anybody admitted in, so every visitor B still knows as waiting is
    // waiting in the store too and no batch lands after the cut.
    let (a0, b0) = (claims(&a).await, claims(&b).await);
    wait_for("both nodes tick", Duration::from_secs(10), || async {
        claims(&a).await >= a0 + 3.0 && claims(&b).await >= b0 + 3.0
    })
    .await;
    for v in &mut waiting {
        let p = v.position(&b, EVENT).await;
        if p["status"] == "ADMITTED" {
            let token = p["token"].as_str().unwrap().to_owned();
            assert_eq!(v.redeem(&b, EVENT, &token).await, StatusCode::OK);
        }
    }
    // Each node renews its reserve about once a second from its snapshot
    // of the queue: one renewed before the admissions above reached its
    // snapshot holds more than its half for a while (the store grants only
    // what is free, so the other gets less). Wait until both hold their
    // half of what is left, as the store counts it now.
    for n in [&a, &b] {
        wait_for(
            "both nodes hold their half of the free capacity",
            Duration::from_secs(10),
            || async {
                let half = MAX_ACTIVE.saturating_sub(store_used(&a).await) / 2;
                n.metric("anteroom_drain_share", EVENT)
                    .await
                    .is_some_and(|s| half >= 1 && s == half as f64)
            },
        )
        .await;
    }
    Setup {
        _redis: redis,
        origin,
        _dir: dir,
        _pa: pa,
        pb,
        a,
        b,
        waiting,
    }
}

/// The ticks `n` tried to claim so far.
async fn claims(n: &Node) -> f64 {
    n.metric_with(
        "anteroom_store_latency_seconds_count",
        &[("op", "claim_tick")],
    )
    .await
    .unwrap_or(0.0)
}

/// Active + outstanding as the store counts them (read through A).
async fn store_used(a: &Node) -> u64 {
    let (s, body) = a
        .admin(Method::GET, &format!("/admin/events/{EVENT}"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["stats"]["active"].as_u64().unwrap() + v["stats"]["outstanding"].as_u64().unwrap()
}

async fn ready(n: &Node) -> StatusCode {
    process::send(Method::GET, &n.admin_url("/readyz"), &[], None)
        .await
        .map_or(StatusCode::BAD_GATEWAY, |r| r.0)
}

/// Cuts B from Redis and waits until B drains and has admitted what it may
/// from its cache; returns the indices of the visitors B admitted, each told
/// ADMITTED with B's own token.
async fn cut_b_and_let_it_admit(s: &mut Setup) -> Vec<(usize, String)> {
    let share = s.b.metric("anteroom_drain_share", EVENT).await.unwrap() as u64;
    let cut_at = Instant::now();
    s.pb.cut();
    wait_for("B drains", Duration::from_secs(10), || async {
        ready(&s.b).await == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let drained_on_b = || async {
        s.b.metric("anteroom_drain_admissions_total", EVENT)
            .await
            .unwrap_or(0.0) as u64
    };
    wait_for("B admits on its own", Duration::from_secs(10), || async {
        drained_on_b().await > 0
    })
    .await;
    let admitted = drained_on_b().await;
    assert!(
        admitted <= share,
        "B admitted {admitted} with a reserve of {share}"
    );
    let mut tokens = Vec::new();
    for (i, v) in s.waiting.iter_mut().enumerate() {
        let p = v.position(&s.b, EVENT).await;
        match p["status"].as_str().unwrap() {
            "ADMITTED" => tokens.push((i, p["token"].as_str().unwrap().to_owned())),
            "DRAINING" => {}
            other => panic!("visitor {i}: {other} while B drains"),
        }
    }
    assert_eq!(tokens.len() as u64, admitted, "{tokens:?}");
    // Front first: B's visitors joined in order (those already let in before
    // the cut are not in the queue).
    let front: Vec<usize> = (0..s.waiting.len())
        .filter(|i| s.waiting[*i].redeems == 0)
        .take(tokens.len())
        .collect();
    assert_eq!(
        tokens.iter().map(|t| t.0).collect::<Vec<_>>(),
        front,
        "front first"
    );
    println!(
        "B: reserve {share}, drained in {:?}, admitted {admitted} on its own",
        cut_at.elapsed()
    );
    tokens
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_cut_from_redis_keeps_max_active_while_the_other_admits() {
    let mut s = setup().await;
    let used_before = store_used(&s.a).await;
    let tokens = cut_b_and_let_it_admit(&mut s).await;
    let b_admitted = tokens.len() as u64;
    for (i, token) in &tokens {
        let v = &mut s.waiting[*i];
        assert_eq!(v.redeem(&s.b, EVENT, token).await, StatusCode::OK);
        assert_eq!(v.fetch(&s.b, "/tickets/in").await, StatusCode::OK);
    }
    assert_eq!(ready(&s.a).await, StatusCode::OK, "A still has the store");

    // A goes on admitting through the store, fast now (a live change on A;
    // B cannot hear of it). Everybody in the queue is a candidate, B's
    // admissions included: the store does not know them.
    process::put_event(&s.a, EVENT, MAX_ACTIVE, &s.origin.url(), process::fast()).await;
    let watch_until = Instant::now() + Duration::from_secs(3);
    let mut peak = 0;
    let mut used = used_before;
    while Instant::now() < watch_until {
        used = store_used(&s.a).await;
        peak = peak.max(used + b_admitted);
        assert!(
            used + b_admitted <= MAX_ACTIVE,
            "store {used} + B's own {b_admitted} > max_active {MAX_ACTIVE}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        used > used_before,
        "A kept admitting through the store ({used_before} -> {used})"
    );

    // B gets the store back: its admissions are recorded, the sum holds.
    s.pb.heal();
    wait_for("B leaves drain", Duration::from_secs(10), || async {
        ready(&s.b).await == StatusCode::OK
    })
    .await;
    for (i, _) in &tokens {
        let v = &mut s.waiting[*i];
        assert_eq!(v.position(&s.a, EVENT).await["status"], "ACTIVE");
        assert_eq!(v.fetch(&s.a, "/tickets/after").await, StatusCode::OK);
    }
    let after = store_used(&s.a).await;
    assert!(after <= MAX_ACTIVE, "after the reconcile: {after}");
    assert!(s.waiting.iter().all(|v| v.redeems <= 1));
    println!(
        "max_active {MAX_ACTIVE}: store used {used_before} before the cut, {used} with A \
         admitting, peak store + B's own {peak}, {after} after B reconciled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_killed_after_admitting_reconciles_its_journal_on_restart() {
    let mut s = setup().await;
    let used_before = store_used(&s.a).await;
    let tokens = cut_b_and_let_it_admit(&mut s).await;
    assert!(
        tokens.len() >= 2,
        "need one redeemed and one not: {tokens:?}"
    );
    let (first, first_token) = tokens[0].clone();
    let (second, second_token) = tokens[1].clone();
    assert_eq!(
        s.waiting[first].redeem(&s.b, EVENT, &first_token).await,
        StatusCode::OK
    );
    assert_eq!(
        s.waiting[first].fetch(&s.b, "/tickets/in").await,
        StatusCode::OK
    );

    // A crash, not a stop: nothing is flushed on the way out.
    s.b.kill9();
    s.pb.heal();
    let journal = s
        ._dir
        .path()
        .join(format!("journal-{}", s.b.public.port()))
        .join(format!("{EVENT}.journal"));
    assert!(
        std::fs::metadata(&journal).unwrap().len() > 0,
        "the admissions are on disk"
    );
    let restarted = Instant::now();
    s.b.restart().await;
    let drained = tokens.len() as u64;
    let ix: Vec<usize> = tokens.iter().map(|t| t.0).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    for &i in &ix {
        // Recorded in the store: another node sees the session.
        while s.waiting[i].position(&s.a, EVENT).await["status"] != "ACTIVE" {
            assert!(Instant::now() < deadline, "visitor {i} never recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!(
        "restarted B recorded {drained} drain admissions within {:?}",
        restarted.elapsed()
    );
    wait_for("B empties its journal", Duration::from_secs(5), || async {
        std::fs::metadata(&journal).unwrap().len() == 0
    })
    .await;

    // The redeemed visitor keeps working on both nodes; their token stays spent.
    let v = &mut s.waiting[first];
    assert_eq!(v.fetch(&s.b, "/tickets/after").await, StatusCode::OK);
    assert_eq!(v.fetch(&s.a, "/tickets/after").await, StatusCode::OK);
    assert_eq!(
        v.redeem(&s.b, EVENT, &first_token).await,
        StatusCode::CONFLICT
    );
    // The one who had only been told ADMITTED redeems once, on the restarted B.
    let v = &mut s.waiting[second];
    assert_eq!(v.redeem(&s.b, EVENT, &second_token).await, StatusCode::OK);
    assert_eq!(
        v.redeem(&s.b, EVENT, &second_token).await,
        StatusCode::CONFLICT
    );
    assert_eq!(v.fetch(&s.b, "/tickets/in").await, StatusCode::OK);
    // The counts add up: every drain admission counted once, and nobody else
    // let in but the restarted B's first batch (of one). That batch may land
    // between reading the visitors' statuses and reading the store's count,
    // so the two are read again until they agree (or the deadline says they
    // never will).
    let settle = Instant::now() + Duration::from_secs(5);
    loop {
        let mut admitted_after = 0;
        for (i, v) in s.waiting.iter_mut().enumerate() {
            if ix.contains(&i) || v.redeems > 0 {
                continue;
            }
            match v.position(&s.a, EVENT).await["status"].as_str().unwrap() {
                "WAITING" => {}
                "ADMITTED" => admitted_after += 1,
                other => panic!("visitor {i}: {other}"),
            }
        }
        assert!(
            admitted_after <= 1,
            "{admitted_after} admitted after the restart"
        );
        let used = store_used(&s.a).await;
        if used == used_before + drained + admitted_after || Instant::now() > settle {
            assert_eq!(
                used,
                used_before + drained + admitted_after,
                "store count = before + drained + admitted after the restart"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.waiting.iter().all(|v| v.redeems <= 1));
}

/// The store calls `n` made of `op` so far.
async fn store_calls(n: &Node, op: &str) -> f64 {
    n.metric_with("anteroom_store_latency_seconds_count", &[("op", op)])
        .await
        .unwrap_or(0.0)
}

/// An admission by one of several nodes is one store call that stays out
/// of the other nodes' holds and gives up the node's own: no hold of the
/// admitted slots is made first (a round trip more on every admitting
/// tick) and none is left behind, where the other nodes would count the
/// slots twice, once as taken and once as held, until the next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_among_several_nodes_is_one_store_call_and_leaves_no_hold() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, &origin.url(), 1000).admission(FAST_BATCH))
        .toml();
    let node = Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await;
    for _ in 0..60 {
        let (status, _, p) = Visitor::default().enter(&node, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
    }
    let (admits0, holds0) = (
        store_calls(&node, "admit").await,
        store_calls(&node, "hold_share").await,
    );
    // One admission every 100 ms, each on a tick of its own.
    wait_for(
        "twenty admitting ticks",
        Duration::from_secs(20),
        || async { store_calls(&node, "admit").await >= admits0 + 20.0 },
    )
    .await;
    let admits = store_calls(&node, "admit").await - admits0;
    let holds = store_calls(&node, "hold_share").await - holds0;
    // The reserve's renewals remain, about one a second.
    assert!(
        holds < admits / 2.0,
        "{holds} holds for {admits} admissions: each admission is held first"
    );
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "--raw"])
        .args(["HVALS", &format!("anteroom:{{{EVENT}}}:shares")])
        .output()
        .expect("redis-cli (apt-get install redis-server)");
    assert!(out.status.success(), "redis-cli HVALS");
    // Each hold is `reserve:pending:expiry`.
    let holds = String::from_utf8_lossy(&out.stdout).into_owned();
    for hold in holds.lines().filter(|l| !l.is_empty()) {
        let pending = hold.split(':').nth(1);
        assert_eq!(
            pending,
            Some("0"),
            "a hold outlived its admission: {holds:?}"
        );
    }
}

/// A node stopped gracefully gives its hold up: the capacity it reserved
/// would otherwise stay pinned for a minute plus a token's and a session's
/// life, which no node left could use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_gracefully_gives_its_hold_up() {
    let mut s = setup().await;
    let key = format!("anteroom:{{{EVENT}}}:shares");
    let holders = |port: u16| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "HLEN", &key])
            .output()
            .expect("redis-cli (apt-get install redis-server)");
        assert!(out.status.success(), "redis-cli HLEN");
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(holders(s._redis.port()), 2, "both nodes hold a reserve");
    let status = s.b.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
    assert_eq!(holders(s._redis.port()), 1, "only A's hold is left");
}
