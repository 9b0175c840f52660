//! Admin changes made on several gateway nodes sharing one Redis. A node
//! takes up another node's change at its next watch of the store (seconds
//! later), so an operator's `PATCH` on one node can reach it before that
//! node has seen a colleague's change made on another a moment earlier.
//! A change is made over, and checked against, the events as the store has
//! them, and stored only if no event's document changed meanwhile: neither
//! change is lost, and no path goes to two events.

use crate::support::config::{ConfigBuilder, HOURLY};
use crate::support::process::{self, Node};
use crate::support::wait_for;
use anteroom::config::RawEvent;
use anteroom::config::stored;
use anteroom_store::testing::RedisServer;
use anteroom_store::{EventId, QueueStore};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const EVENT: &str = "tickets";
const PATH: &str = "/admin/events/tickets";

async fn config_on(node: &Node) -> Value {
    let (status, body) = node.admin(Method::GET, PATH).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice::<Value>(&body).unwrap()["config"].clone()
}

/// The config of two nodes on `redis`, both with the one event.
fn two_node_config(redis: &RedisServer) -> ConfigBuilder {
    process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, "http://127.0.0.1:9", 1).admission(HOURLY))
}

async fn two_nodes(redis: &RedisServer) -> (Node, Node) {
    let config = two_node_config(redis).toml();
    (
        Node::in_process(&config).await,
        Node::in_process(&config).await,
    )
}

/// The config of two nodes on `redis` whose one event admits ten a second.
fn continuous_nodes(redis: &RedisServer) -> ConfigBuilder {
    process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event(EVENT, "http://127.0.0.1:9", 10).continuous(600))
}

/// A new visitor with an active session, queued and redeemed on `node`.
async fn active_on(node: &Node) -> crate::support::visitor::Visitor {
    let mut v = crate::support::visitor::Visitor::default();
    assert_eq!(v.enter(node, EVENT).await.0, StatusCode::OK);
    v.until_active(node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    v
}

/// The event's table as the store has it.
async fn stored_event(store: &dyn QueueStore) -> Option<RawEvent> {
    let mut docs = stored::read_all(store).await.unwrap();
    docs.remove(&EventId::new(EVENT).unwrap())?.event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_on_two_nodes_moments_apart_are_both_kept() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (one, two) = two_nodes(&redis).await;
    let store = process::redis_store(&redis.url()).await;
    for round in 0..3u64 {
        // One operator on node one, a colleague on node two a moment later,
        // each changing a different field.
        let max_active = 100 + round;
        let ttl = format!("{}s", 30 + round);
        let (status, ev) = one
            .admin_json(Method::PATCH, PATH, &json!({ "max_active": max_active }))
            .await;
        assert_eq!(status, StatusCode::OK, "{ev}");
        let (status, ev) = two
            .admin_json(Method::PATCH, PATH, &json!({ "token_ttl": ttl }))
            .await;
        assert_eq!(status, StatusCode::OK, "{ev}");
        // Node two's answer is the event with both changes: its change was
        // made over node one's, not over its own older copy.
        assert_eq!(
            ev["config"]["max_active"], max_active,
            "round {round}: {ev}"
        );
        assert_eq!(ev["config"]["token_ttl"], ttl.as_str(), "round {round}");
        let raw = stored_event(&store).await.unwrap();
        assert_eq!(raw.max_active, Some(max_active), "round {round}: stored");
        assert_eq!(
            raw.token_ttl.as_deref(),
            Some(ttl.as_str()),
            "round {round}"
        );
    }
    // Node one takes node two's last change up.
    wait_for(
        "node one to take up node two's change",
        Duration::from_secs(15),
        || async {
            let c = config_on(&one).await;
            c["token_ttl"] == "32s" && c["max_active"] == 102
        },
    )
    .await;
    // A PUT replaces the whole table, as it says; the next PATCH on the other
    // node is made over that, even before that node has taken the PUT up.
    let (status, ev) = one
        .admin_json(
            Method::PUT,
            PATH,
            &json!({ "paths": ["/tickets"], "origin": "http://127.0.0.1:9", "max_active": 7 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    let (status, ev) = two
        .admin_json(Method::PATCH, PATH, &json!({ "queue_idle_timeout": "10m" }))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["max_active"], 7, "{ev}");
    assert!(
        ev["config"]["token_ttl"].is_null(),
        "the PUT reset it: {ev}"
    );
    // A PATCH on a node that has not yet seen another node's DELETE finds
    // the event gone, as it is everywhere else, rather than bringing it back.
    let (status, _) = one
        .admin(Method::DELETE, &format!("{PATH}?force=true"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, ev) = two
        .admin_json(Method::PATCH, PATH, &json!({ "max_active": 9 }))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{ev}");
    assert_eq!(ev["error"], "unknown_event", "{ev}");
}

/// `CHANGES` PATCHes on `node`, one after another, each raising `field`.
async fn raise(node: &Node, field: &str, base: u64) {
    for i in 1..=CHANGES {
        let value = match field {
            "max_active" => json!(base + i),
            _ => json!(format!("{}s", base + i)),
        };
        let (status, ev) = node
            .admin_json(Method::PATCH, PATH, &json!({ field: value }))
            .await;
        assert_eq!(status, StatusCode::OK, "{field} = {value}: {ev}");
    }
}

const CHANGES: u64 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_on_two_nodes_at_once_are_both_kept() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (one, two) = two_nodes(&redis).await;
    // Each node raises its own field, one change after another, while the
    // other does the same. Read back from the store at any moment, neither
    // field may ever go down: a write made over a table read before the
    // other node's last change would put that field back.
    let store = process::redis_store(&redis.url()).await;
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let done = done.clone();
        async move {
            let (mut seen, mut backwards) = ((0, 0), Vec::new());
            while !done.load(Ordering::Relaxed) {
                let Some(raw) = stored_event(&store).await else {
                    continue;
                };
                let now = (
                    raw.max_active.unwrap_or(0),
                    raw.token_ttl
                        .as_deref()
                        .and_then(|t| t.trim_end_matches('s').parse::<u64>().ok())
                        .unwrap_or(0),
                );
                if now.0 < seen.0 || now.1 < seen.1 {
                    backwards.push((seen, now));
                }
                seen = (seen.0.max(now.0), seen.1.max(now.1));
            }
            (backwards, store)
        }
    });
    tokio::join!(
        raise(&one, "max_active", 1000),
        raise(&two, "token_ttl", 100)
    );
    done.store(true, Ordering::Relaxed);
    let (backwards, store) = watcher.await.unwrap();
    assert!(
        backwards.is_empty(),
        "a stored field went back {} times, first (highest seen, then read): {:?}",
        backwards.len(),
        &backwards[..backwards.len().min(5)]
    );
    let raw = stored_event(&store).await.unwrap();
    assert_eq!(raw.max_active, Some(1000 + CHANGES));
    assert_eq!(raw.token_ttl, Some(format!("{}s", 100 + CHANGES)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_store_keeps_changing_under_is_refused_with_409() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (one, _two) = two_nodes(&redis).await;
    // Writers rewriting the event's document as fast as Redis takes it,
    // each write different: a change made over what it read finds it
    // changed again at every round.
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let (done, url) = (done.clone(), redis.url());
        writers.push(tokio::spawn(async move {
            let store = process::redis_store(&url).await;
            let id = EventId::new(EVENT).unwrap();
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                let doc = json!({ "event": {
                    "id": EVENT, "paths": ["/tickets"], "origin": "http://127.0.0.1:9",
                    "max_active": 1 + w * 1000 + n % 1000,
                } });
                store.put_event_config(&id, &doc.to_string()).await.unwrap();
            }
        }));
    }
    // A writer stalled by the box answers a change 200 now and then; under
    // steady rewriting the change is refused, never stored over them.
    let mut refused = None;
    for _ in 0..50 {
        let (status, ev) = one
            .admin_json(Method::PATCH, PATH, &json!({ "token_ttl": "41s" }))
            .await;
        match status {
            StatusCode::CONFLICT => {
                refused = Some(ev);
                break;
            }
            StatusCode::OK => {}
            other => panic!("{other}: {ev}"),
        }
    }
    done.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let ev = refused.expect("no 409 in 50 changes under steady rewriting");
    assert_eq!(ev["error"], "concurrent_change", "{ev}");
    assert!(
        ev["message"]
            .as_str()
            .unwrap()
            .contains("make the change again"),
        "{ev}"
    );
    // Once the writers stop, the same change goes through.
    let (status, ev) = one
        .admin_json(Method::PATCH, PATH, &json!({ "token_ttl": "41s" }))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["token_ttl"], "41s", "{ev}");
}

/// An event table with these paths, for a `PUT`.
/// Stores, by hand, the table of an event "broken" on `/broken/` that no
/// node can run: its origin is empty.
async fn store_broken_table(redis: &RedisServer) {
    let store = process::redis_store(&redis.url()).await;
    let broken = json!({ "event": { "id": "broken", "paths": ["/broken/"], "origin": "" } });
    store
        .put_event_config(&EventId::new("broken").unwrap(), &broken.to_string())
        .await
        .unwrap();
}

fn table(paths: &[&str]) -> Value {
    json!({ "paths": paths, "origin": "http://127.0.0.1:9", "max_active": 5 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_never_give_one_path_to_two_events() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (one, two) = two_nodes(&redis).await;
    // One after the other: node two has not taken node one's new event up
    // yet, but checks against the store's events, so the second claim of
    // the path is refused naming the first.
    let (status, ev) = one
        .admin_json(Method::PUT, "/admin/events/first", &table(&["/drop/"]))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    let (status, ev) = two
        .admin_json(Method::PUT, "/admin/events/second", &table(&["/drop/"]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{ev}");
    assert!(
        ev["message"].as_str().unwrap().contains("first"),
        "names the event holding the path: {ev}"
    );
    // At once, both nodes creating an event for one new path, five rounds:
    // exactly one of each pair is stored, the other refused.
    let store = process::redis_store(&redis.url()).await;
    for round in 0..5 {
        let path = format!("/sale-{round}/");
        let (a, b) = (
            format!("/admin/events/a{round}"),
            format!("/admin/events/b{round}"),
        );
        let body = table(&[&path]);
        let ((sa, ea), (sb, eb)) = tokio::join!(
            one.admin_json(Method::PUT, &a, &body),
            two.admin_json(Method::PUT, &b, &body),
        );
        let mut statuses = [sa, sb];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::BAD_REQUEST],
            "round {round}: {ea} / {eb}"
        );
        let holders: Vec<String> = stored::read_all(&store)
            .await
            .unwrap()
            .into_iter()
            .filter(|(_, doc)| {
                !doc.deleted
                    && doc
                        .event
                        .as_ref()
                        .is_some_and(|e| e.paths.as_ref().is_some_and(|p| p.contains(&path)))
            })
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(holders.len(), 1, "round {round}: stored for {holders:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_table_no_node_can_run_blocks_no_other_change() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let (one, _two) = two_nodes(&redis).await;
    // A document written by hand (or by a node that could run it) whose
    // table this node refuses.
    store_broken_table(&redis).await;
    let (status, ev) = one
        .admin_json(Method::PATCH, PATH, &json!({ "max_active": 11 }))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["max_active"], 11, "{ev}");
    // It is no event here, and its table can be replaced by a good one.
    let (status, _) = one.admin(Method::GET, "/admin/events/broken").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, ev) = one
        .admin_json(Method::PUT, "/admin/events/broken", &table(&["/broken/"]))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_never_takes_up_a_second_event_for_one_of_its_paths() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let base = two_node_config(&redis);
    // Node two's config file has an event node one's lacks (files that
    // differ between nodes): node one lets a new event claim its path.
    let one = Node::in_process(&base.clone().toml()).await;
    let two = Node::in_process(
        &base
            .event(process::event("local", "http://127.0.0.1:9", 1).paths(&["/local/"]))
            .toml(),
    )
    .await;
    let (status, ev) = one
        .admin_json(Method::PUT, "/admin/events/other", &table(&["/local/"]))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    // Two watches of the store later (a marker put after the first has
    // arrived, then a second after the first marker), node two has looked
    // at the claim and kept its own event on the path.
    for marker in ["marker-1", "marker-2"] {
        let path = format!("/{marker}/");
        let (status, ev) = one
            .admin_json(
                Method::PUT,
                &format!("/admin/events/{marker}"),
                &table(&[&path]),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{ev}");
        wait_for(
            "node two to take the marker up",
            Duration::from_secs(15),
            || async {
                two.admin(Method::GET, &format!("/admin/events/{marker}"))
                    .await
                    .0
                    == StatusCode::OK
            },
        )
        .await;
    }
    let (status, _) = two.admin(Method::GET, "/admin/events/other").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "node two runs a second event on /local/"
    );
    let (status, body) = two.admin(Method::GET, "/admin/events/local").await;
    assert_eq!(status, StatusCode::OK);
    let local: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(local["config"]["paths"], json!(["/local/"]), "{local}");
}

/// A node that refuses a stored event says so on its `/metrics` while the
/// refusal lasts, and stops saying it once it runs the event. Process nodes:
/// each has its own metrics (in-process nodes would share one recorder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_shows_the_stored_events_it_refuses_until_it_runs_them() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let base = two_node_config(&redis);
    let one = Node::start(&base.clone().toml(), dir.clone()).await;
    // Node two's config file has an event node one's lacks.
    let two = Node::start(
        &base
            .event(process::event("local", "http://127.0.0.1:9", 1).paths(&["/local/"]))
            .toml(),
        dir,
    )
    .await;
    let (status, ev) = one
        .admin_json(Method::PUT, "/admin/events/other", &table(&["/local/"]))
        .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    store_broken_table(&redis).await;
    // A document with a key this version does not know (as a newer node
    // would store it during a rolling upgrade): no node can read it.
    let store = process::redis_store(&redis.url()).await;
    let newer = json!({ "event": { "id": "newer", "paths": ["/newer/"],
        "origin": "http://127.0.0.1:9", "a_later_key": 1 } });
    store
        .put_event_config(&EventId::new("newer").unwrap(), &newer.to_string())
        .await
        .unwrap();
    until(&two, "other", 1.0).await;
    until(&two, "newer", 1.0).await;
    until(&one, "newer", 1.0).await;
    until(&two, "broken", 1.0).await;
    until(&one, "broken", 1.0).await;
    // Node one runs "other": it never refused it.
    assert_eq!(one.metric(REFUSED, "other").await, None);
    // And each node's admin API says why, with no access to its log.
    let why = refusals(&two).await;
    let events: Vec<&str> = why.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["broken", "newer", "other"], "{why:?}");
    assert!(why[0].1.contains("origin"), "{why:?}");
    assert!(why[1].1.contains("a_later_key"), "{why:?}");
    assert!(
        why[2].1.contains("/local/ is protected by event local"),
        "{why:?}"
    );
    let why = refusals(&one).await;
    let events: Vec<&str> = why.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["broken", "newer"], "{why:?}");

    // Both tables made runnable: each node runs them and the refusals end.
    for (id, path) in [
        ("other", "/elsewhere/"),
        ("broken", "/broken/"),
        ("newer", "/newer/"),
    ] {
        let (status, ev) = one
            .admin_json(Method::PUT, &format!("/admin/events/{id}"), &table(&[path]))
            .await;
        assert_eq!(status, StatusCode::OK, "{ev}");
    }
    until(&two, "other", 0.0).await;
    until(&two, "broken", 0.0).await;
    until(&one, "broken", 0.0).await;
    until(&two, "newer", 0.0).await;
    until(&one, "newer", 0.0).await;
    for id in ["other", "broken", "newer"] {
        let (status, _) = two.admin(Method::GET, &format!("/admin/events/{id}")).await;
        assert_eq!(status, StatusCode::OK, "node two runs {id}");
    }
    assert_eq!(refusals(&two).await, []);
    assert_eq!(refusals(&one).await, []);
}

/// `GET /admin/refusals` of `node`: each refused event with its reason, after
/// checking that each entry is dated.
async fn refusals(node: &Node) -> Vec<(String, String)> {
    let (status, body) = node.admin(Method::GET, "/admin/refusals").await;
    assert_eq!(status, StatusCode::OK);
    let view: Value = serde_json::from_slice(&body).unwrap();
    let list = view["refusals"]
        .as_array()
        .unwrap_or_else(|| panic!("{view}"));
    list.iter()
        .map(|r| {
            assert!(r["since_ms"].as_i64().is_some_and(|ms| ms > 0), "{r}");
            assert!(r["since"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
            let text = |k: &str| r[k].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
            (text("event"), text("reason"))
        })
        .collect()
}

const REFUSED: &str = "anteroom_stored_event_refused";

/// Waits until `node`'s `/metrics` gives `event` the refusal gauge `value`.
async fn until(node: &Node, event: &str, value: f64) {
    wait_for(
        &format!("{REFUSED}{{event={event}}} {value}"),
        Duration::from_secs(20),
        || async { node.metric(REFUSED, event).await == Some(value) },
    )
    .await;
}

/// A pause made through one node is in force on another at once, though
/// that node reads the admin state only twice a second: the store refuses
/// the redeem in the redeem's own step, and keeps the token for the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_made_on_one_node_refuses_a_redeem_on_another_at_once() {
    use crate::support::visitor::Visitor;
    use std::time::Instant;
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let config = continuous_nodes(&redis).toml();
    let (one, two) = (
        Node::in_process(&config).await,
        Node::in_process(&config).await,
    );
    // Three rounds: each gives node two's twice-a-second read of the admin
    // state a chance to land between the pause and the redeem, which would
    // hide a redeem that only node two's own check refuses.
    for round in 0..3 {
        let mut v = Visitor::default();
        assert_eq!(v.enter(&two, EVENT).await.0, StatusCode::OK);
        let deadline = Instant::now() + Duration::from_secs(10);
        let token = loop {
            let p = v.position(&two, EVENT).await;
            if p["status"] == "ADMITTED" {
                break p["token"].as_str().unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: not admitted: {p}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(
            one.admin(Method::POST, "/admin/events/tickets/pause")
                .await
                .0,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            v.redeem(&two, EVENT, &token).await,
            StatusCode::CONFLICT,
            "round {round}: node two opened a session after the pause's 204"
        );
        assert_eq!(
            one.admin(Method::POST, "/admin/events/tickets/resume")
                .await
                .0,
            StatusCode::NO_CONTENT
        );
        // Once node two has read the resume, the kept token redeems.
        let deadline = Instant::now() + Duration::from_secs(5);
        while v.redeem(&two, EVENT, &token).await != StatusCode::OK {
            assert!(
                Instant::now() < deadline,
                "round {round}: the kept token never redeemed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An event deleted and made again through one node (the same table, in
/// moments) ends the deleted event's sessions on another node too, though
/// that node may never have seen the deletion between two looks at the
/// store: the creation is on record in the event's document, and a node
/// that runs the same table takes it up as a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_made_again_on_one_node_refuses_the_deleted_ones_passes_on_another() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let config = continuous_nodes(&redis).toml();
    let (one, two) = (
        Node::in_process(&config).await,
        Node::in_process(&config).await,
    );
    let mut v = active_on(&two).await;
    // Let through to the origin, which is not there: 502, not the waiting room.
    assert_eq!(v.fetch(&two, "/tickets/a").await, StatusCode::BAD_GATEWAY);
    let (status, before) = one.admin(Method::GET, PATH).await;
    assert_eq!(status, StatusCode::OK);
    let table = serde_json::from_slice::<Value>(&before).unwrap()["config"].clone();
    let (status, _) = one
        .admin(Method::DELETE, &format!("{PATH}?force=true"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, ev) = one.admin_json(Method::PUT, PATH, &table).await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(
        v.fetch(&one, "/tickets/a").await,
        StatusCode::TOO_MANY_REQUESTS,
        "node one let the deleted event's pass through"
    );
    wait_for(
        "node two to refuse the deleted event's pass",
        Duration::from_secs(15),
        || async {
            let mut v = v.clone();
            v.fetch(&two, "/tickets/a").await == StatusCode::TOO_MANY_REQUESTS
        },
    )
    .await;
}

/// A `PUT` through a node that does not run the event (its config file
/// lacks it) changes the event another node runs: it is no creation, so
/// the sessions that node opened go on. Counted as a creation, it put a
/// floor under every session start and ended them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_through_a_node_without_the_event_ends_no_session_on_the_node_with_it() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let with = continuous_nodes(&redis).toml();
    let without = process::redis_node(&[redis.url()])
        .gateway_nodes(2)
        .event(process::event("other", "http://127.0.0.1:9", 10))
        .toml();
    let (one, two) = (
        Node::in_process(&with).await,
        Node::in_process(&without).await,
    );
    let mut v = active_on(&one).await;
    assert_eq!(v.fetch(&one, "/tickets/a").await, StatusCode::BAD_GATEWAY);
    let mut table = config_on(&one).await;
    table["max_active"] = json!(11);
    let (status, ev) = two.admin_json(Method::PUT, PATH, &table).await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    wait_for(
        "node one to take up the change",
        Duration::from_secs(15),
        || async { config_on(&one).await["max_active"] == 11 },
    )
    .await;
    assert_eq!(
        v.fetch(&one, "/tickets/a").await,
        StatusCode::BAD_GATEWAY,
        "the change ended a session of the node that runs the event"
    );
}
