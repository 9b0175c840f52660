//! Fault injection against a real `redis-server` and the real `anteroom`
//! binary: Redis killed mid-event and restarted (from its last snapshot),
//! and Redis frozen with SIGSTOP then thawed. Admitted visitors keep reaching
//! the origin, waiting ones see DRAINING then resume (some admitted by the
//! node itself, front first), nobody is admitted twice, and the origin never
//! sees more than `max_active` at once.

use crate::support::config::HOURLY;
use crate::support::process;
use crate::support::visitor::Visitor;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::wait_for;
use anteroom_store::testing::RedisServer;
use http::{Method, StatusCode};

const EVENT: &str = "tickets";
const MAX_ACTIVE: u64 = 4;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SAVE, `kill -9`, restart on the same port (loads the snapshot).
    KillAndRestart,
    /// SIGSTOP, later SIGCONT: connections stay open, nothing answers.
    Hang,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_event_drains_then_resumes() {
    scenario(Fault::KillAndRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hung_with_sigstop_drains_then_resumes() {
    scenario(Fault::Hang).await;
}

async fn scenario(fault: Fault) {
    let test_started = Instant::now();
    let mut redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(1)
        .event(process::event(EVENT, &origin.url(), MAX_ACTIVE).admission(HOURLY))
        .toml();
    let node = Node::start(&config, dir).await;

    // One visitor is admitted and active before the fault.
    let mut holder = active_visitor(&node).await;

    // Eight more join; at one admission per hour they all stay waiting, and
    // the node caches the rank each was told.
    let mut waiting: Vec<Visitor> = Vec::new();
    let mut ranks = Vec::new();
    for _ in 0..8 {
        let mut v = Visitor::default();
        let (status, _, p) = v.enter(&node, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        ranks.push(p["rank"].as_u64().unwrap());
        waiting.push(v);
    }
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
    // The front one leaves before the fault: the node forgets its rank, and
    // the drain admits from the next one on.
    assert_eq!(
        waiting[0].release(&node, EVENT).await,
        StatusCode::NO_CONTENT
    );
    let (s, body) = node.admin(Method::GET, "/admin/events/tickets").await;
    assert_eq!(s, StatusCode::OK);
    let stats: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let used_before = stats["stats"]["active"].as_u64().unwrap()
        + stats["stats"]["outstanding"].as_u64().unwrap();

    // The fault.
    if matches!(fault, Fault::KillAndRestart) {
        redis_cli(redis.port(), &["SAVE"]);
    }
    let fault_at = Instant::now();
    match fault {
        Fault::KillAndRestart => redis.kill().unwrap(),
        Fault::Hang => redis.pause().unwrap(),
    }

    // Drain entry, timed on the mode itself (/readyz): a request whose own
    // store call fails is answered 503 too, but only the probe drains the
    // event. Then a new arrival gets 503 draining with Retry-After.
    let readyz = node.admin_url("/readyz");
    let entry = until(fault_at, "/readyz names the draining event", || {
        let url = readyz.clone();
        async move {
            let r = process::send(Method::GET, &url, &[], None).await;
            r.is_ok_and(|(s, _, _)| s == StatusCode::SERVICE_UNAVAILABLE)
        }
    })
    .await;
    let (status, headers, body) = Visitor::default().enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "draining");
    assert!(headers.contains_key("retry-after"));

    // During the drain: the pass holder keeps reaching the origin; /readyz
    // and the metric show the mode; waiting visitors see DRAINING or are
    // admitted by the node, front first, within the capacity left.
    for i in 0..5 {
        assert_eq!(
            holder.fetch(&node, &format!("/tickets/d{i}")).await,
            StatusCode::OK
        );
    }
    // A release asked for during the drain ends the session on this node
    // at once, though the store cannot hear of it: the pass stops here.
    // (The store's release comes after it returns, below.)
    holder.release(&node, EVENT).await;
    assert_ne!(
        holder.fetch(&node, "/tickets/after-release").await,
        StatusCode::OK
    );
    let (status, _, ready) = process::send(Method::GET, &node.admin_url("/readyz"), &[], None)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let ready: serde_json::Value = serde_json::from_slice(&ready).unwrap();
    assert_eq!(ready["draining"], serde_json::json!([EVENT]));
    assert_eq!(node.draining_gauge(EVENT).await, Some(1.0));
    // Why, by kind: a frozen Redis is silence (at least the two timed-out
    // probes the window needs), a killed one refuses the connection.
    let (kind, least) = match fault {
        Fault::KillAndRestart => ("refused", 1.0),
        Fault::Hang => ("timed_out", 2.0),
    };
    let failed = node
        .metric_with(
            "anteroom_store_unavailable_total",
            &[("event", EVENT), ("kind", kind)],
        )
        .await;
    assert!(failed.is_some_and(|n| n >= least), "{kind}: {failed:?}");

    let room = MAX_ACTIVE.saturating_sub(used_before) as usize;
    let mut statuses = Vec::new();
    for v in &mut waiting {
        statuses.push(
            v.position(&node, EVENT).await["status"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let drained: Vec<usize> = (0..waiting.len())
        .filter(|i| statuses[*i] == "ADMITTED")
        .collect();
    assert_eq!(
        drained,
        (1..(room + 1).min(waiting.len())).collect::<Vec<_>>(),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| s == "ADMITTED" || s == "DRAINING"),
        "{statuses:?}"
    );
    for &i in &drained {
        let p = waiting[i].position(&node, EVENT).await;
        let token = p["token"].as_str().unwrap().to_owned();
        assert_eq!(
            waiting[i].redeem(&node, EVENT, &token).await,
            StatusCode::OK
        );
        // A drain token is single-use too.
        assert_eq!(
            waiting[i].redeem(&node, EVENT, &token).await,
            StatusCode::CONFLICT
        );
        assert_eq!(waiting[i].fetch(&node, "/tickets/in").await, StatusCode::OK);
    }

    // The store returns.
    let back_at = Instant::now();
    match fault {
        Fault::KillAndRestart => redis.restart().unwrap(),
        Fault::Hang => redis.resume().unwrap(),
    }
    let exit = until(
        back_at,
        "normal answers after the store returns",
        || async { Visitor::default().enter(&node, EVENT).await.0 == StatusCode::OK },
    )
    .await;
    wait_for("/readyz 200", Duration::from_secs(5), || {
        let url = readyz.clone();
        async move {
            process::send(Method::GET, &url, &[], None)
                .await
                .map(|r| r.0)
                == Ok(StatusCode::OK)
        }
    })
    .await;
    assert_eq!(node.draining_gauge(EVENT).await, Some(0.0));

    // Drain admissions were recorded as active; the rest resume in order.
    for &i in &drained {
        assert_eq!(waiting[i].position(&node, EVENT).await["status"], "ACTIVE");
    }
    holder.release(&node, EVENT).await;
    // Admissions speed up (a live config change) so the rest get in.
    process::put_event(&node, EVENT, MAX_ACTIVE, &origin.url(), process::fast()).await;
    let mut admitted_by_store = 0;
    for (i, v) in waiting.iter_mut().enumerate().skip(1) {
        let mut seen = Vec::new();
        if !drained.contains(&i) {
            v.until_active(&node, EVENT, Duration::from_secs(20), &mut seen)
                .await;
            admitted_by_store += 1;
        }
        assert_eq!(v.fetch(&node, "/tickets/after").await, StatusCode::OK);
        assert_eq!(v.release(&node, EVENT).await, StatusCode::NO_CONTENT);
        assert_eq!(
            v.redeems, 1,
            "visitor {i} redeemed {} times; saw {seen:?}",
            v.redeems
        );
    }
    assert!(
        origin.peak() as u64 <= MAX_ACTIVE,
        "origin peak {}",
        origin.peak()
    );
    println!(
        "{fault:?}: drain entry {entry:?}, exit {exit:?}; drain-admitted {}, admitted after {}, \
         origin peak {} (max_active {MAX_ACTIVE}), sessions at origin {}, test {:?}",
        drained.len(),
        admitted_by_store,
        origin.peak(),
        origin.sessions.lock().unwrap().len(),
        test_started.elapsed()
    );
    assert!(
        entry < Duration::from_millis(1500),
        "drain entry took {entry:?}"
    );
}

/// A pass that runs out while the store is out is renewed from what it
/// says: its issue moved the session's end `session_idle_timeout` past it,
/// so the holder is not sent to the waiting room by the outage (it was,
/// because only the store could say the session went on). Past that end,
/// the holder queues again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_runs_out_during_an_outage_is_renewed_within_its_sessions_idle_time() {
    let (mut redis, _origin, node, mut holder) = a_holder_on_one_node("4s").await;
    let issued = Instant::now();
    redis.kill().unwrap();
    // The pass (1 s) has run out; the session's idle time (4 s) has not.
    tokio::time::sleep_until((issued + Duration::from_millis(1500)).into()).await;
    assert_eq!(
        holder.fetch(&node, "/tickets/b").await,
        StatusCode::OK,
        "an expired pass within its session's idle time, store out"
    );
    // Renewed, so the holder browses on; left idle past the session's end
    // as the last pass set it, it queues.
    let renewed = Instant::now();
    tokio::time::sleep_until((renewed + Duration::from_millis(4500)).into()).await;
    assert_ne!(holder.fetch(&node, "/tickets/c").await, StatusCode::OK);
}

/// An admin `DELETE` whose store call fails puts the event back, and the
/// event goes on admitting: its background tasks wait out the moment it
/// was off the routes. Before, a task that looked for the event in that
/// moment ended, and the event ran on without a scheduler (nobody was
/// admitted again) until a restart. The store's `DEL` is refused here (an
/// ACL), and the store is 300 ms away, so the moment spans the tasks' turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_store_refuses_leaves_the_event_admitting() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let away =
        anteroom_store::testing::DistantProxy::start(redis.port(), Duration::from_millis(300))
            .await
            .unwrap();
    let config = process::redis_node(&[away.url()])
        .gateway_nodes(1)
        .store_timeout("5s")
        .event(process::event(EVENT, &origin.url(), MAX_ACTIVE).continuous(600))
        .toml();
    let node = Node::start(&config, dir).await;
    active_visitor(&node).await;
    redis_cli(redis.port(), &["ACL", "SETUSER", "default", "-del"]);
    let (status, body) = node
        .admin(Method::DELETE, "/admin/events/tickets?force=true")
        .await;
    redis_cli(redis.port(), &["ACL", "SETUSER", "default", "+del"]);
    assert!(
        status.is_server_error(),
        "the refused delete answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    let (status, _) = node.admin(Method::GET, "/admin/events/tickets").await;
    assert_eq!(status, StatusCode::OK, "the event was not put back");
    // A visitor who comes now is admitted: the scheduler still runs.
    active_visitor(&node).await;
}

/// Waits (at most 10 s) until the node's `/readyz` answers `want`.
async fn wait_ready(node: &Node, want: StatusCode, what: &str) {
    let url = node.admin_url("/readyz");
    wait_for(what, Duration::from_secs(10), || {
        let url = url.clone();
        async move {
            process::send(Method::GET, &url, &[], None)
                .await
                .is_ok_and(|(s, _, _)| s == want)
        }
    })
    .await;
}

/// Waits until the node's scheduler has swept the event twice more (each
/// full tick's `expire`, counted by the store latency metric).
async fn two_sweeps(node: &Node) {
    let sweeps = || async {
        node.metric_with("anteroom_store_latency_seconds_count", &[("op", "expire")])
            .await
            .unwrap_or(0.0)
    };
    let before = sweeps().await;
    wait_for("two sweeps", Duration::from_secs(10), || async {
        sweeps().await >= before + 2.0
    })
    .await;
}

/// A visitor who entered, was admitted, redeemed and reached the origin.
/// One node on a real Redis whose passes live 1 s and whose sessions idle
/// out after `idle`, with an active visitor: the outage tests of a pass
/// holder. The origin comes back too, to keep it running.
async fn a_holder_on_one_node(
    idle: &str,
) -> (
    RedisServer,
    Arc<crate::support::origin::Origin>,
    Node,
    Visitor,
) {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(1)
        .event(
            process::event(EVENT, &origin.url(), MAX_ACTIVE)
                .line("pass_ttl = \"1s\"")
                .line(&format!("session_idle_timeout = \"{idle}\"")),
        )
        .toml();
    let node = Node::start(&config, dir).await;
    let holder = active_visitor(&node).await;
    (redis, origin, node, holder)
}

async fn active_visitor(node: &Node) -> Visitor {
    let mut v = Visitor::default();
    v.enter(node, EVENT).await;
    let mut seen = Vec::new();
    v.until_active(node, EVENT, Duration::from_secs(10), &mut seen)
        .await;
    assert_eq!(v.fetch(node, "/tickets/a").await, StatusCode::OK);
    v
}

/// Polls `check` until it holds (at most 5 s); returns the time since `start`.
async fn until<F, Fut>(start: Instant, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn redis_cli(port: u16, args: &[&str]) {
    let out = std::process::Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli (apt-get install redis-server)");
    assert!(
        out.status.success() && !String::from_utf8_lossy(&out.stdout).starts_with("ERR"),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A waiter kept in place by the drain keeps it after an outage longer
/// than `queue_idle_timeout`: the node answered their polls itself, so no
/// seen mark reached the store, and the first sweep after the store came
/// back dropped every waiter (they rejoined at the back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_idle_timeout_costs_no_waiter_the_place() {
    let mut redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(1)
        .event(
            // One slot, held by the first visitor: the drain admits nobody.
            process::event(EVENT, &origin.url(), 1)
                .admission(HOURLY)
                .line("queue_idle_timeout = \"3s\""),
        )
        .toml();
    let node = Node::start(&config, dir).await;
    // Admitted at the first tick (one an hour): the rest wait.
    let _first = active_visitor(&node).await;
    let mut waiter = Visitor::default();
    let (status, _, joined) = waiter.enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::OK, "{joined}");
    assert_eq!(joined["status"], "WAITING", "{joined}");
    // The node's counts refreshed (the admin view reads them): the drain
    // sees the one slot taken.
    let (s, _) = node.admin(Method::GET, "/admin/events/tickets").await;
    assert_eq!(s, StatusCode::OK);
    redis_cli(redis.port(), &["SAVE"]);
    redis.kill().unwrap();
    wait_ready(&node, StatusCode::SERVICE_UNAVAILABLE, "the drain").await;
    // The waiter polls all through the outage, answered by the node.
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(4) {
        let p = waiter.position(&node, EVENT).await;
        assert_eq!(p["status"], "DRAINING", "{p}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    redis.restart().unwrap();
    wait_ready(&node, StatusCode::OK, "the drain's end").await;
    // Two sweeps (a full tick's) answered after the return, before the
    // waiter's next poll.
    two_sweeps(&node).await;
    let p = waiter.position(&node, EVENT).await;
    assert_eq!(p["status"], "WAITING", "the place was swept: {p}");
    assert_eq!(p["rank"], joined["rank"], "{p}");
}

/// A pass holder who browses all through an outage longer than
/// `session_idle_timeout` keeps the session once the store is back: the
/// gate renewed the pass on the node while the store's end could not move,
/// and the first sweep after the return ended the session by that old end
/// (the holder was sent to the waiting room). The drain's end now sends
/// the ends the gate moved before the scheduler sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_browsing_through_a_long_outage_keeps_the_session() {
    let (mut redis, _origin, node, mut holder) = a_holder_on_one_node("3s").await;
    redis_cli(redis.port(), &["SAVE"]);
    redis.kill().unwrap();
    wait_ready(&node, StatusCode::SERVICE_UNAVAILABLE, "the drain").await;
    // Browsing all through the outage, past the session's idle time.
    let outage = Instant::now();
    let mut i = 0;
    while outage.elapsed() < Duration::from_millis(4500) {
        assert_eq!(
            holder.fetch(&node, &format!("/tickets/o{i}")).await,
            StatusCode::OK,
            "during the outage"
        );
        i += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    redis.restart().unwrap();
    wait_ready(&node, StatusCode::OK, "the drain's end").await;
    two_sweeps(&node).await;
    assert_eq!(
        holder.fetch(&node, "/tickets/after").await,
        StatusCode::OK,
        "the session was ended by the sweep"
    );
    let p = holder.position(&node, EVENT).await;
    assert_eq!(p["status"], "ACTIVE", "{p}");
}

/// A Redis that still answers reads but refuses writes (here it asks for a
/// replica it lacks; in production: unable to persist, out of memory under
/// `noeviction`, a replica after a failover) drains the node, and the node
/// leaves the drain once writes are taken again. The probe only read the
/// clock: the node never drained, every join was refused and nobody was
/// admitted for as long as it lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_writes_drains_the_node() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = process::origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = process::redis_node(&[redis.url()])
        .gateway_nodes(1)
        .event(process::event(EVENT, &origin.url(), MAX_ACTIVE))
        .toml();
    let node = Node::start(&config, dir).await;
    wait_ready(&node, StatusCode::OK, "ready").await;
    redis_cli(
        redis.port(),
        &["CONFIG", "SET", "min-replicas-to-write", "1"],
    );
    // Reads are still answered.
    redis_cli(redis.port(), &["GET", "anything"]);
    wait_ready(&node, StatusCode::SERVICE_UNAVAILABLE, "the drain").await;
    redis_cli(
        redis.port(),
        &["CONFIG", "SET", "min-replicas-to-write", "0"],
    );
    wait_ready(&node, StatusCode::OK, "the drain's end").await;
    let (status, _, body) = Visitor::default().enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
