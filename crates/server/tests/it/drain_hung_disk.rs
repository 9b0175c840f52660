//! The real `anteroom` binary on an embedded store whose disk hangs for
//! real (a FUSE mount whose daemon is stopped: writes and syncs wait in the
//! kernel, no error comes). The event drains as it would on a silent
//! Redis: a join that met the hang is answered `503 draining` after the
//! store's timeout, the event drains `server.drain_after` later, new
//! arrivals are turned away at once, a pass holder keeps reaching the
//! origin and a waiting visitor is answered. The drain journal sits on
//! the same hung disk (the embedded store's default), so no visitor is
//! admitted on the node's own, and its writes never hold an event loop.
//! Once the disk answers the drain ends and every acknowledged join is
//! still in the queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_store::testing::HungDisk;
use http::{Method, StatusCode};

use crate::drain_slow_store::{Readyz, until_readyz};
use crate::support::config::{ConfigBuilder, HOURLY};
use crate::support::process::{self, Node};
use crate::support::visitor::Visitor;

const EVENT: &str = "tickets";
const STORE_TIMEOUT: Duration = Duration::from_millis(300);
const DRAIN_AFTER: Duration = Duration::from_secs(1);
/// The drain journal's writes are waited for the store's timeout, but never
/// less than a second.
const JOURNAL_TIMEOUT: Duration = Duration::from_secs(1);

/// A node's config with its embedded store on `disk`, calls given up
/// after `STORE_TIMEOUT`.
fn embedded_on(disk: &HungDisk) -> ConfigBuilder {
    ConfigBuilder::new()
        .embedded(&disk.path().join("data"))
        .process()
        .no_limits()
        .store_timeout("300ms")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_disk_drains_the_event_and_the_node_keeps_serving() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let origin = process::origin().await;
    let config = embedded_on(&disk)
        .server_line("drain_after = \"1s\"")
        .event(process::event(EVENT, &origin.url(), 4).admission(HOURLY))
        .toml();
    let mut node = Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await;

    let mut holder = Visitor::default();
    holder.enter(&node, EVENT).await;
    holder
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let mut acked = Vec::new();
    for _ in 0..5 {
        let mut v = Visitor::default();
        assert_eq!(v.enter(&node, EVENT).await.0, StatusCode::OK);
        acked.push(v);
    }
    // Polled once, so the node knows their ranks and its drain would
    // admit them, were its journal's disk answering.
    for v in &mut acked {
        assert_eq!(v.position(&node, EVENT).await["status"], "WAITING");
    }

    let frozen = disk.freeze().unwrap();
    let frozen_at = Instant::now();
    // A join that meets the hang is answered after the store's timeout.
    let (status, _, body) = Visitor::default().enter(&node, EVENT).await;
    let first = frozen_at.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "draining");
    assert!(
        first < STORE_TIMEOUT + Duration::from_millis(700),
        "a join waited {first:?} on the hung disk"
    );
    let entry = until_readyz(&node, Readyz::Draining, frozen_at).await;
    assert!(
        entry < STORE_TIMEOUT + DRAIN_AFTER + Duration::from_secs(1),
        "drain entry took {entry:?}"
    );
    // Past a timed-out write of the drain journal (on the same disk), the
    // node still answers everyone at once: nothing holds an event loop.
    let checks_from = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut rounds = 0;
    while checks_from.elapsed() < JOURNAL_TIMEOUT + STORE_TIMEOUT || rounds < 3 {
        rounds += 1;
        let t = Instant::now();
        let (status, headers, body) = Visitor::default().enter(&node, EVENT).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"], "draining");
        assert!(headers.contains_key("retry-after"));
        assert_eq!(holder.fetch(&node, "/tickets/x").await, StatusCode::OK);
        let p = acked[0].position(&node, EVENT).await;
        assert_eq!(p["status"], "DRAINING", "{p}");
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(500),
        "a round of answers took {slowest:?} while the disk hung"
    );
    assert_eq!(node.draining_gauge(EVENT).await, Some(1.0));
    // The drain tried to admit the front, and its journal's write on the
    // hung disk timed out: nobody was admitted.
    assert!(
        node.metric("anteroom_drain_journal_failures_total", EVENT)
            .await
            .is_some_and(|n| n >= 1.0),
        "the drain never tried to admit"
    );
    assert_eq!(
        node.metric("anteroom_drain_admissions_total", EVENT).await,
        None,
        "admitted with the journal's disk hung"
    );
    // An operator's pause writes the meta file on the same disk: it is
    // answered `503` after the store's timeout, not left waiting (holding
    // every later admin change of the node behind it), and a second is
    // refused at once.
    let t = Instant::now();
    let (status, body) = node
        .admin(Method::POST, &format!("/admin/events/{EVENT}/pause"))
        .await;
    let pause_in = t.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
    assert!(
        pause_in < STORE_TIMEOUT + Duration::from_millis(700),
        "a pause waited {pause_in:?} on the hung disk"
    );
    let t = Instant::now();
    let (status, body) = node
        .admin(Method::POST, &format!("/admin/events/{EVENT}/pause"))
        .await;
    let again_in = t.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
    assert!(
        again_in < Duration::from_millis(200),
        "a second pause took {again_in:?}"
    );

    let thawed_at = Instant::now();
    frozen.thaw();
    let exit = until_readyz(&node, Readyz::Ready, thawed_at).await;
    assert!(exit < Duration::from_secs(3), "drain exit took {exit:?}");
    // The pause the disk held landed with the thaw: the node and the file
    // agree on it (a pause answered `503` may still have been made, as a
    // timed-out Redis call's may).
    loop {
        let (status, body) = node
            .admin(Method::GET, &format!("/admin/events/{EVENT}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if event["state"] == "paused" {
            break;
        }
        assert!(
            thawed_at.elapsed() < Duration::from_secs(5),
            "the pause the disk held is not in force: {event}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = node
        .admin(Method::POST, &format!("/admin/events/{EVENT}/resume"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
    for v in &mut acked {
        let p = v.position(&node, EVENT).await;
        assert!(
            p["status"] == "WAITING" || p["status"] == "ADMITTED",
            "an acknowledged join is {p}"
        );
    }
    assert_eq!(
        Visitor::default().enter(&node, EVENT).await.0,
        StatusCode::OK
    );
    // The admissions whose journal write was given up on landed once the
    // disk answered; nobody was told of them, so the drain's end emptied
    // the journal rather than leave them for a restart to take back.
    let journal = disk
        .path()
        .join("data/drain-journal")
        .join(format!("{EVENT}.journal"));
    let left = std::fs::metadata(&journal).map_or(0, |m| m.len());
    assert_eq!(left, 0, "{} still holds {left} bytes", journal.display());
    println!(
        "hung disk: first join answered after {first:?}, drain entry {entry:?}, \
         {rounds} rounds of answers while drained (slowest {slowest:?}), a pause answered \
         after {pause_in:?} and again in {again_in:?}, exit {exit:?}"
    );
    node.kill9();
}

/// A node on Redis whose drain journal's disk hangs after it admitted a
/// visitor on its own: the visitor's redeem needs a journal write, which is
/// refused with `503 draining` after the store's timeout while the node
/// answers everyone else at once (the write waits off the event loops,
/// with no lock held); once the disk answers, the same token redeems.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_journal_refuses_a_drain_redeem_in_time_and_holds_up_nobody_else() {
    let redis = anteroom_store::testing::RedisServer::start()
        .expect("redis-server (apt-get install redis-server)");
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let origin = process::origin().await;
    let config = ConfigBuilder::new()
        .redis(&[redis.url()])
        .process()
        .no_limits()
        .store_timeout("300ms")
        .gateway_nodes(1)
        .server_line(&format!(
            "drain_journal = \"{}\"",
            disk.path().join("journal").display()
        ))
        .event(process::event(EVENT, &origin.url(), 4).admission(HOURLY))
        .toml();
    let node = Arc::new(Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await);
    let mut holder = Visitor::default();
    holder.enter(&node, EVENT).await;
    holder
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let mut waiter = Visitor::default();
    assert_eq!(waiter.enter(&node, EVENT).await.0, StatusCode::OK);
    assert_eq!(waiter.position(&node, EVENT).await["status"], "WAITING");

    // Redis gone: the node drains and admits the waiter on its own (the
    // journal's disk still answers).
    let mut redis = redis;
    redis.kill().unwrap();
    until_readyz(&node, Readyz::Draining, Instant::now()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let token = loop {
        let p = waiter.position(&node, EVENT).await;
        if p["status"] == "ADMITTED" {
            break p["token"].as_str().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "never admitted while draining: {p}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let frozen = disk.freeze().unwrap();
    let redeem = {
        let (node, token) = (node.clone(), token.clone());
        let mut waiter = waiter.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let status = waiter.redeem(&node, EVENT, &token).await;
            (status, t.elapsed())
        })
    };
    // While the redeem waits for the journal, everyone else is answered,
    // and a second redeem of the token is told to retry, never that it was
    // used (the first may yet fail; `state::drain`'s tests check that it is
    // told so at once).
    let mut twice = waiter.clone();
    assert_eq!(
        twice.redeem(&node, EVENT, &token).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let t = Instant::now();
    let mut rounds = 0;
    while !redeem.is_finished() {
        let (status, _, body) = Visitor::default().enter(&node, EVENT).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(holder.fetch(&node, "/tickets/x").await, StatusCode::OK);
        rounds += 1;
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the redeem never came back"
        );
    }
    let (status, took) = redeem.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        took < JOURNAL_TIMEOUT + Duration::from_millis(700),
        "the redeem waited {took:?} on the hung journal"
    );
    assert!(
        node.metric("anteroom_drain_journal_failures_total", EVENT)
            .await
            .is_some_and(|n| n >= 1.0)
    );
    frozen.thaw();
    // The refused redeem did not spend the token: retried (as a visitor
    // told `503` does) once the disk has finished the write it held, it
    // redeems.
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = waiter.redeem(&node, EVENT, &token).await;
        if status != StatusCode::SERVICE_UNAVAILABLE || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, StatusCode::OK);
    println!(
        "hung journal: the redeem answered 503 after {took:?}, {rounds} rounds of other \
         answers meanwhile"
    );
}

/// An operator's `DELETE` on an embedded store whose disk hangs is answered
/// `503` after the store's timeout instead of waiting for the disk, so the
/// node's admin changes do not queue behind it; the deletion goes on, and
/// once the disk answers a repeated `DELETE` finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_a_hung_disk_is_answered_in_time_and_finishes_when_repeated() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let origin = process::origin().await;
    let config = embedded_on(&disk)
        .event(process::event(EVENT, &origin.url(), 4).admission(HOURLY))
        .event(process::event("other", &origin.url(), 4).admission(HOURLY))
        .toml();
    let mut node = Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await;
    for event in [EVENT, "other"] {
        assert_eq!(
            Visitor::default().enter(&node, event).await.0,
            StatusCode::OK
        );
    }
    let delete = format!("/admin/events/{EVENT}?force=true");

    let frozen = disk.freeze().unwrap();
    let t = Instant::now();
    let (status, body) = node.admin(Method::DELETE, &delete).await;
    let delete_in = t.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
    assert!(
        delete_in < STORE_TIMEOUT + Duration::from_millis(700),
        "a DELETE waited {delete_in:?} on the hung disk"
    );
    // The node's admin turn is free: another event's change is answered
    // (the meta file is on the same disk, so with 503), not queued.
    let t = Instant::now();
    let (status, body) = node.admin(Method::POST, "/admin/events/other/pause").await;
    let pause_in = t.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
    assert!(
        pause_in < STORE_TIMEOUT + Duration::from_millis(700),
        "a pause behind the DELETE took {pause_in:?}"
    );

    let thawed_at = Instant::now();
    frozen.thaw();
    // Repeated once the disk answers, the DELETE finishes.
    loop {
        let (status, body) = node.admin(Method::DELETE, &delete).await;
        if status == StatusCode::NO_CONTENT {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
        assert!(
            thawed_at.elapsed() < Duration::from_secs(5),
            "the DELETE never finished: {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let finished = thawed_at.elapsed();
    let (status, body) = node
        .admin(Method::GET, &format!("/admin/events/{EVENT}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body:?}");
    assert_eq!(
        Visitor::default().enter(&node, "other").await.0,
        StatusCode::OK
    );
    println!(
        "hung disk: a DELETE answered after {delete_in:?}, a pause behind it after \
         {pause_in:?}, the repeated DELETE done {finished:?} after the thaw"
    );
    node.kill9();
}
