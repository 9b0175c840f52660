//! Drain entry tells a slow store from a dead one, against a real
//! `redis-server` and the real `anteroom` binary: Redis frozen (SIGSTOP) for
//! less than `server.drain_after` while visitors keep calling never drains
//! the event, nobody is told `503 draining` or `DRAINING`; a longer freeze
//! drains after the window; a killed Redis (connection refused) drains at
//! once, at worst within the window. Each prints its entry and exit times.

use crate::support::config::HOURLY;
use crate::support::origin::Origin;
use crate::support::process;
use crate::support::visitor::Visitor;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::wait_for;
use anteroom_store::testing::RedisServer;
use http::{Method, StatusCode};

const EVENT: &str = "tickets";
const DRAIN_AFTER: Duration = Duration::from_secs(1);

/// A node whose store calls get the default 1 s (a busy Redis answers well
/// within it) and which drains a silent store after one second.
async fn start(redis: &RedisServer, origin: &Origin) -> Node {
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(1)
        .event(process::event(EVENT, &origin.url(), 4).admission(HOURLY))
        .store_timeout("1s")
        .server_line("drain_after = \"1s\"")
        .toml();
    Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await
}

/// What `/readyz` says of the node's one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readyz {
    Ready,
    /// `503`: the event drains.
    Draining,
}

/// What `/readyz` says now (`None`: no answer).
pub(crate) async fn readyz(node: &Node) -> Option<Readyz> {
    let (status, _, _) = process::send(Method::GET, &node.admin_url("/readyz"), &[], None)
        .await
        .ok()?;
    Some(if status == StatusCode::SERVICE_UNAVAILABLE {
        Readyz::Draining
    } else {
        Readyz::Ready
    })
}

/// Polls `/readyz` back to back until it says `want`; the time since `from`.
pub(crate) async fn until_readyz(node: &Node, want: Readyz, from: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(5);
    while readyz(node).await != Some(want) {
        assert!(Instant::now() < deadline, "/readyz never said {want:?}");
    }
    from.elapsed()
}

/// One answered request of the traffic: what was asked, what came back, how long it took.
type Outcome = (&'static str, String, Duration);

/// Visitors calling in a loop until `stop`: new arrivals joining, a waiting
/// visitor polling, the pass holder reaching the origin.
fn traffic(
    node: &Arc<Node>,
    holder: &Visitor,
    waiter: &Visitor,
    stop: &Arc<AtomicBool>,
) -> (Arc<Mutex<Vec<Outcome>>>, tokio::task::JoinSet<()>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (node, stop, log) = (node.clone(), stop.clone(), log.clone());
        let (mut holder, mut waiter) = (holder.clone(), waiter.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let (what, seen) = match i % 3 {
                    0 => {
                        let (s, _, b) = Visitor::default().enter(&node, EVENT).await;
                        ("enter", format!("{} {}", s.as_u16(), b["status"]))
                    }
                    1 => (
                        "position",
                        waiter.position(&node, EVENT).await["status"].to_string(),
                    ),
                    _ => (
                        "pass",
                        holder.fetch(&node, "/tickets/x").await.as_u16().to_string(),
                    ),
                };
                log.lock().unwrap().push((what, seen, t.elapsed()));
            }
        });
    }
    (log, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_freeze_under_traffic_does_not_drain_but_a_long_one_does() {
    let started = Instant::now();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let node = Arc::new(start(&redis, &origin).await);

    let mut holder = Visitor::default();
    holder.enter(&node, EVENT).await;
    holder
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let mut waiter = Visitor::default();
    assert_eq!(waiter.enter(&node, EVENT).await.0, StatusCode::OK);

    let stop = Arc::new(AtomicBool::new(false));
    let (log, mut tasks) = traffic(&node, &holder, &waiter, &stop);
    let busy = log.clone();
    wait_for("traffic flowing", Duration::from_secs(5), || {
        let n = busy.lock().unwrap().len();
        async move { n >= 30 }
    })
    .await;

    // 300 ms: well under every timeout. 600 ms: longer than a probe's own
    // timeout (half the window), so at least one probe fails as slow, yet
    // shorter than the 1 s store timeout, so every request is answered.
    let mut readyz_polls = 0;
    for pause in [Duration::from_millis(300), Duration::from_millis(600)] {
        let paused_at = Instant::now();
        redis.pause().unwrap();
        tokio::time::sleep(pause).await; // the deliberate freeze
        redis.resume().unwrap();
        // Past the point where a drain would have begun, the mode never
        // changed (polled back to back).
        while paused_at.elapsed() < DRAIN_AFTER + Duration::from_millis(300) {
            assert_eq!(
                readyz(&node).await,
                Some(Readyz::Ready),
                "drained after a {pause:?} freeze"
            );
            readyz_polls += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let log = log.lock().unwrap().clone();
    let bad: Vec<&Outcome> = log
        .iter()
        .filter(|(what, seen, _)| match *what {
            "enter" => !seen.starts_with("200 "),
            "position" => seen != "\"WAITING\"",
            _ => seen != "200",
        })
        .collect();
    assert!(bad.is_empty(), "answers other than normal: {bad:?}");
    let frozen = log
        .iter()
        .filter(|o| o.2 >= Duration::from_millis(250))
        .count();
    let slowest = log.iter().map(|o| o.2).max().unwrap_or_default();
    assert!(frozen > 0, "no request was in flight during a freeze");
    assert_eq!(node.draining_gauge(EVENT).await, Some(0.0));

    // A freeze longer than the window drains, not before it.
    let paused_at = Instant::now();
    redis.pause().unwrap();
    let entry = until_readyz(&node, Readyz::Draining, paused_at).await;
    let (status, headers, body) = Visitor::default().enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "draining");
    assert!(headers.contains_key("retry-after"));
    // Answered by the node itself: DRAINING, or ADMITTED from its cache
    // (the waiter is at the front and capacity is left).
    let p = waiter.position(&node, EVENT).await;
    assert!(
        p["status"] == "DRAINING" || p["status"] == "ADMITTED",
        "{p}"
    );
    let resumed_at = Instant::now();
    redis.resume().unwrap();
    let exit = until_readyz(&node, Readyz::Ready, resumed_at).await;
    println!(
        "short freezes: {} requests, {frozen} held by a freeze (slowest {slowest:?}), none \
         draining, {readyz_polls} /readyz polls ready; long freeze: drain entry {entry:?}, \
         exit {exit:?}; test {:?}",
        log.len(),
        started.elapsed()
    );
    assert!(
        entry >= DRAIN_AFTER - Duration::from_millis(50),
        "drained early: {entry:?}"
    );
    assert!(
        entry < Duration::from_millis(1500),
        "drain entry took {entry:?}"
    );
    assert!(exit < Duration::from_secs(1), "drain exit took {exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_drains_without_waiting_for_the_window() {
    let mut redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let node = start(&redis, &origin).await;
    let mut waiter = Visitor::default();
    assert_eq!(waiter.enter(&node, EVENT).await.0, StatusCode::OK);

    let killed_at = Instant::now();
    redis.kill().unwrap();
    let entry = until_readyz(&node, Readyz::Draining, killed_at).await;
    // Answered by the node itself: DRAINING, or ADMITTED from its cache
    // (the waiter is at the front and capacity is left).
    let p = waiter.position(&node, EVENT).await;
    assert!(
        p["status"] == "DRAINING" || p["status"] == "ADMITTED",
        "{p}"
    );
    let restarted_at = Instant::now();
    redis.restart().unwrap();
    let exit = until_readyz(&node, Readyz::Ready, restarted_at).await;
    println!("refused: drain entry {entry:?}, exit {exit:?}");
    // Typically one probe period (~0.1 s): the probe that meets the dropped
    // connection fails fast and drains at once. If another task met it
    // first, redis-rs's ConnectionManager retries the reconnect with backoff
    // and callers wait on it, so the refusal looks like a hang and drains
    // after `drain_after` instead: bounded by the window either way.
    assert!(
        entry < DRAIN_AFTER + Duration::from_millis(500),
        "drain entry took {entry:?}"
    );
    assert!(exit < Duration::from_secs(2), "drain exit took {exit:?}");
}
