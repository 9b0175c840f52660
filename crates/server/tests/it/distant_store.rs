//! A store across a network: a real `redis-server` behind a proxy that
//! holds each of the node's requests [`AWAY`] before passing it on. An
//! admission tick claims its tick and reads what it needs (the store's
//! clock, the event's counts, its admin state) in one round trip, not in a
//! round trip each: with Redis a few milliseconds away that is the
//! difference between a tick that fits the 50 ms grid and one that does not.
//! The tick that sweeps (the first of each second) reads the counts the
//! sweep left in the sweep's own round trip.

use std::sync::Arc;
use std::time::Duration;

use crate::support::process::{self, Node};
use crate::support::visitor::Visitor;
use crate::support::wait_for;
use anteroom_store::testing::{DistantProxy, RedisServer};
use http::{Method, StatusCode};

const EVENT: &str = "tickets";
/// Each request's way to Redis: a tick of one round trip takes 35 ms, one
/// of two (the claim, then the reads) 70 ms; a sweeping tick of two (the
/// claim and reads, then the sweep and its counts) 70 ms, one of three
/// (the counts read after the sweep in a call of their own) 105 ms.
const AWAY: Duration = Duration::from_millis(35);
const TICKS: &str = "anteroom_admission_tick_seconds_count";
const TICKS_UNDER: &str = "anteroom_admission_tick_seconds_bucket";

#[tokio::test(flavor = "multi_thread")]
async fn a_tick_claims_and_reads_in_one_round_trip_and_sweeps_in_one_more() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let proxy = DistantProxy::start(redis.port(), AWAY).await.unwrap();
    let origin = process::origin().await;
    let config = process::redis_node(&[proxy.url()])
        .gateway_nodes(1)
        .event(process::event(EVENT, &origin.url(), 4))
        .toml();
    let node = Node::start(&config, Arc::new(tempfile::tempdir().unwrap())).await;
    // Paused with visitors waiting, the event ticks on its 50 ms grid and
    // every tick claims and reads, then stops: nobody is admitted.
    let (status, body) = node
        .admin(Method::POST, &format!("/admin/events/{EVENT}/pause"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
    for _ in 0..2 {
        let (status, _, p) = Visitor::default().enter(&node, EVENT).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        assert!(
            matches!(p["status"].as_str(), Some("PAUSED" | "WAITING")),
            "{p}"
        );
    }
    let ticks = || async { node.metric(TICKS, EVENT).await.unwrap_or(0.0) };
    let under = |le: &'static str| {
        let node = &node;
        async move {
            node.metric_with(TICKS_UNDER, &[("event", EVENT), ("le", le)])
                .await
                .unwrap_or(0.0)
        }
    };
    // From the first fast tick on (the snapshot shows the waiting visitors
    // within half a second).
    let first = ticks().await;
    wait_for("fast ticks", Duration::from_secs(10), || async {
        ticks().await >= first + 5.0
    })
    .await;
    let (n0, quick0, sweeps0) = (ticks().await, under("0.05").await, under("0.1").await);
    // Four seconds: four sweeping ticks.
    wait_for("80 more ticks", Duration::from_secs(30), || async {
        ticks().await >= n0 + 80.0
    })
    .await;
    let (n1, quick1, sweeps1) = (ticks().await, under("0.05").await, under("0.1").await);
    let share = (quick1 - quick0) / (n1 - n0);
    let slow = (n1 - n0) - (sweeps1 - sweeps0);
    eprintln!("{quick1} - {quick0} of {n1} - {n0} ticks took 50 ms or less, {slow} over 100 ms");
    // Nineteen ticks in twenty claim and read in one round trip (30 ms);
    // the first of each second also sweeps, two round trips more.
    assert!(
        share >= 0.75,
        "{:.0} % of {} ticks took 50 ms or less with the store {} ms away: a tick that claims, then reads, takes two round trips",
        share * 100.0,
        n1 - n0,
        AWAY.as_millis()
    );
    // The sweeping ticks too take two round trips, not three: with a third
    // every sweeping tick (one in twenty, four of these eighty) is over
    // 100 ms. Two noisy ticks are allowed (a full suite's load average of
    // ten on two cores made two).
    assert!(
        slow <= 2.0,
        "{slow} of {} ticks took over 100 ms with the store {} ms away: a sweeping tick reads its counts after the sweep, in a round trip of their own",
        n1 - n0,
        AWAY.as_millis()
    );
}
