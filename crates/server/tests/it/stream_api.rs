//! `GET /api/queue/stream` against the real server (`anteroom::run` on port
//! 0, embedded store): the position at once, ranks that only go down as
//! visitors ahead are admitted, the admission within the contract's second
//! of the scheduler making it, the `503` + `Retry-After` past
//! `server.max_streams`, a fan-out that reads the store once per event
//! per tick, not once per stream, and (on a real `redis-server`) streams
//! woken at once by an admission another node made.

use crate::support::config::{Event, FAST_BATCH};
use crate::support::origin::Origin;
use crate::support::server;
use crate::support::visitor::Visitor;

use std::time::{Duration, Instant};

use crate::support::server::TestServer;
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

const ENTER: &str = "/api/queue/enter?eventId=tickets";
const STREAM: &str = "/api/queue/stream?eventId=tickets";

/// One open stream: its messages as they arrive.
struct Sse {
    body: hyper::body::Incoming,
    buf: String,
}

impl Sse {
    async fn open(s: &TestServer, v: &Visitor) -> (StatusCode, http::HeaderMap, Option<Self>) {
        Self::open_from(s, v, None).await
    }

    /// [`Sse::open`] through a trusted proxy that says the client is at
    /// `client`, when given.
    async fn open_from(
        s: &TestServer,
        v: &Visitor,
        client: Option<&str>,
    ) -> (StatusCode, http::HeaderMap, Option<Self>) {
        let http: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let jar: Vec<String> = v.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut req = http::Request::get(s.url(STREAM))
            .header("accept", "text/event-stream")
            .header("cookie", jar.join("; "));
        if let Some(client) = client {
            req = req.header("x-forwarded-for", client);
        }
        let req = req.body(Empty::new()).unwrap();
        let client = http;
        let res = client.request(req).await.unwrap();
        let (parts, body) = res.into_parts();
        let sse = (parts.status == StatusCode::OK).then(|| Sse {
            body,
            buf: String::new(),
        });
        (parts.status, parts.headers, sse)
    }

    /// The next `position` message, `None` when the stream ended; fails
    /// after `limit`.
    async fn next(&mut self, limit: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if let Some(data) = block
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .filter(|_| block.contains("event: position"))
                {
                    return Some(serde_json::from_str(data).unwrap());
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("no stream message in time");
            match frame {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
                _ => return None,
            }
        }
    }
}

/// The harness's events with `tickets` holding `max_active` and the node
/// `max_streams`.
async fn start(max_active: u64, max_streams: u64) -> TestServer {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let tickets = Event::at("tickets", origin_addr)
        .max_active(max_active)
        .admission(FAST_BATCH);
    let toml = server::config(dir.path(), origin_addr, tickets)
        .server_line(&format!("max_streams = {max_streams}"))
        // Every visitor here comes from one loopback address.
        .server_line(&format!("max_streams_per_address = {}", max_streams.max(1)))
        .toml();
    TestServer::start_with(&toml, origin, dir).await
}

async fn joined(s: &TestServer) -> Visitor {
    let mut v = Visitor::default();
    let (status, body) = v.json(Method::POST, &s.url(ENTER), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    v
}

/// Redeems `token` for `v`; the answer's status.
async fn redeem(s: &TestServer, mut v: Visitor, token: &Value) -> StatusCode {
    let body = serde_json::json!({ "token": token }).to_string();
    let url = s.url("/api/queue/redeem?eventId=tickets");
    v.json(Method::POST, &url, Some(&body)).await.0
}

async fn metric(s: &TestServer, name: &str) -> f64 {
    let (_, _, body) = s.admin_get("/metrics", None).await;
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn ranks_go_down_as_visitors_ahead_are_admitted_then_the_admission_arrives() {
    let s = start(10, 100).await;
    s.pause("tickets", "pause").await;
    let ahead = [joined(&s).await, joined(&s).await, joined(&s).await];
    let v = joined(&s).await;
    let (status, headers, sse) = Sse::open(&s, &v).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    let mut sse = sse.unwrap();
    let first = sse.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(first["status"], "PAUSED", "{first}");
    assert_eq!(first["rank"], 3, "{first}");

    s.pause("tickets", "resume").await;
    let resumed = Instant::now();
    let mut ranks = vec![3];
    let admitted = loop {
        let p = sse
            .next(Duration::from_secs(10))
            .await
            .expect("ended early");
        match p["status"].as_str().unwrap() {
            "WAITING" | "PAUSED" => {
                let r = p["rank"].as_u64().unwrap();
                assert!(r <= *ranks.last().unwrap(), "rank rose: {ranks:?} then {r}");
                ranks.push(r);
            }
            "ADMITTED" => break p,
            other => panic!("unexpected {other}: {p}"),
        }
    };
    let took = resumed.elapsed();
    eprintln!("ranks told {ranks:?}; resume to ADMITTED through the stream {took:?}");
    assert!(ranks.len() >= 2, "no rank change told: {ranks:?}");
    assert!(admitted["token"].is_string(), "{admitted}");
    assert!(
        sse.next(Duration::from_secs(5)).await.is_none(),
        "the stream ends after ADMITTED"
    );
    // The token is the visitor's and redeems.
    assert_eq!(redeem(&s, v, &admitted["token"]).await, StatusCode::OK);
    drop(ahead);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admission_reaches_the_stream_within_a_second_of_being_made() {
    // One visitor at a time, so each admission is this visitor's own:
    // the stream's ADMITTED is timed against the store's grant.
    let s = start(10, 100).await;
    let mut latencies = Vec::new();
    for _ in 0..5 {
        s.pause("tickets", "pause").await;
        let v = joined(&s).await;
        let (_, _, sse) = Sse::open(&s, &v).await;
        let mut sse = sse.unwrap();
        assert_eq!(
            sse.next(Duration::from_secs(10)).await.unwrap()["status"],
            "PAUSED"
        );
        let before: f64 = metric(&s, "anteroom_stream_reads_total").await;
        s.pause("tickets", "resume").await;
        let resumed = Instant::now();
        let p = sse.next(Duration::from_secs(10)).await.unwrap();
        let p = if p["status"] == "WAITING" {
            sse.next(Duration::from_secs(10)).await.unwrap()
        } else {
            p
        };
        assert_eq!(p["status"], "ADMITTED", "{p}");
        latencies.push(resumed.elapsed());
        assert!(metric(&s, "anteroom_stream_reads_total").await > before);
    }
    latencies.sort();
    eprintln!(
        "resume to ADMITTED (min/median/max): {:?} / {:?} / {:?}",
        latencies[0], latencies[2], latencies[4]
    );
    // Resume → the scheduler's next tick (100 ms here) → the grant → the
    // hub, kicked by the grant → the stream's read: within the contract's
    // second after the grant, with room for a loaded box.
    assert!(latencies[2] < Duration::from_millis(1500), "{latencies:?}");
}

/// Visitors ahead who leave without being admitted (a release here; an
/// idle-out or an eviction alike) bring the admission sooner than the
/// admissions alone would: the stream still tells it within the contract's
/// second. Before, it woke only once as many admissions as its rank had
/// been made, which with ten of the 25 ahead gone never came (16 slots),
/// and `ADMITTED` waited for the stream's next read of presence, a minute.
#[tokio::test(flavor = "multi_thread")]
async fn departures_ahead_do_not_delay_the_admissions_news() {
    let s = start(16, 100).await;
    s.pause("tickets", "pause").await;
    let mut ahead = Vec::new();
    for _ in 0..25 {
        ahead.push(joined(&s).await);
    }
    let v = joined(&s).await;
    let (_, _, sse) = Sse::open(&s, &v).await;
    let mut sse = sse.unwrap();
    let first = sse.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (first["status"].as_str(), first["rank"].as_u64()),
        (Some("PAUSED"), Some(25)),
        "{first}"
    );
    for mut gone in ahead.drain(..10) {
        let url = s.url("/api/queue/release?eventId=tickets");
        let (status, body) = gone.json(Method::POST, &url, None).await;
        assert!(status.is_success(), "release: {status} {body}");
    }
    s.pause("tickets", "resume").await;
    let resumed = Instant::now();
    // One admission every 100 ms: the visitor, 15th now, is the 16th.
    let admitted = loop {
        let p = sse
            .next(Duration::from_secs(90))
            .await
            .expect("ended early");
        if p["status"] == "ADMITTED" {
            break p;
        }
        assert!(
            matches!(p["status"].as_str(), Some("WAITING" | "PAUSED")),
            "{p}"
        );
    };
    let took = resumed.elapsed();
    eprintln!("resume to ADMITTED through the stream, ten of the 25 ahead gone: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(redeem(&s, v, &admitted["token"]).await, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_max_streams_a_stream_is_refused_with_503_and_retry_after() {
    let s = start(2, 1).await;
    s.pause("tickets", "pause").await;
    let a = joined(&s).await;
    let b = joined(&s).await;
    let (status, _, first) = Sse::open(&s, &a).await;
    assert_eq!(status, StatusCode::OK);
    let mut first = first.unwrap();
    first.next(Duration::from_secs(10)).await.unwrap();

    let (status, headers, _) = Sse::open(&s, &b).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    let (_, body) = b.clone().json(Method::GET, &s.url(STREAM), None).await;
    assert_eq!(body["error"], "too_many_streams", "{body}");
    assert_eq!(metric(&s, "anteroom_streams_open").await, 1.0);

    // The place frees when the open stream goes.
    drop(first);
    server::wait_until("the closed stream's place freed", || async {
        Sse::open(&s, &b).await.0 == StatusCode::OK
    })
    .await;
}

/// One client address holds at most `server.max_streams_per_address` of
/// the node's streams, so a few addresses cycling session cookies cannot
/// take every stream; other clients are not held back by it, and a closed
/// stream gives its address's place back.
#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_at_most_its_share_of_the_streams() {
    let origin = Origin::start().await;
    let origin_addr = origin.addr;
    let dir = tempfile::tempdir().unwrap();
    let tickets = Event::at("tickets", origin_addr)
        .max_active(2)
        .admission(FAST_BATCH);
    let toml = server::config(dir.path(), origin_addr, tickets)
        .server_line("max_streams = 100")
        .server_line("max_streams_per_address = 2")
        .limit("trusted_proxies = [\"127.0.0.1/32\"]")
        .toml();
    let s = TestServer::start_with(&toml, origin, dir).await;
    s.pause("tickets", "pause").await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let v = joined(&s).await;
        let (status, _, sse) = Sse::open_from(&s, &v, Some("203.0.113.7")).await;
        assert_eq!(status, StatusCode::OK);
        let mut sse = sse.unwrap();
        sse.next(Duration::from_secs(10)).await.unwrap();
        held.push(sse);
    }
    let third = joined(&s).await;
    let (status, headers, _) = Sse::open_from(&s, &third, Some("203.0.113.7")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    // Another client opens one.
    let (status, _, _other) = Sse::open_from(&s, &third, Some("203.0.113.8")).await;
    assert_eq!(status, StatusCode::OK);
    // The address's place frees when one of its streams goes.
    drop(held.pop());
    server::wait_until("the closed stream's place freed", || async {
        Sse::open_from(&s, &third, Some("203.0.113.7")).await.0 == StatusCode::OK
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_without_a_session_tells_none_and_ends() {
    let s = start(2, 10).await;
    let (status, _, sse) = Sse::open(&s, &Visitor::default()).await;
    assert_eq!(status, StatusCode::OK);
    let mut sse = sse.unwrap();
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap()["status"],
        "NONE"
    );
    assert!(sse.next(Duration::from_secs(5)).await.is_none());
    let (status, _, _) = server::send(
        Method::GET,
        &s.url("/api/queue/stream?eventId=nope"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fan_out_reads_the_store_once_per_event_per_tick_not_per_stream() {
    let s = start(1000, 1000).await;
    s.pause("tickets", "pause").await;
    const STREAMS: usize = 200;
    let mut visitors = Vec::new();
    for _ in 0..STREAMS {
        visitors.push(joined(&s).await);
    }
    let mut streams = Vec::new();
    for v in &visitors {
        let (status, _, sse) = Sse::open(&s, v).await;
        assert_eq!(status, StatusCode::OK);
        let mut sse = sse.unwrap();
        sse.next(Duration::from_secs(10)).await.unwrap();
        streams.push(sse);
    }
    let window = Duration::from_secs(4);
    let (reads0, fanout0) = (
        metric(&s, "anteroom_stream_reads_total").await,
        metric(&s, "anteroom_stream_fanout_reads_total").await,
    );
    tokio::time::sleep(window).await;
    let (reads, fanout) = (
        metric(&s, "anteroom_stream_reads_total").await - reads0,
        metric(&s, "anteroom_stream_fanout_reads_total").await - fanout0,
    );
    eprintln!("{STREAMS} streams over {window:?}: {fanout} fan-out reads, {reads} stream reads");
    // One hub read per tick (100 ms) for the event, whatever the streams
    // (no admissions while paused, so no kicks).
    assert!(
        fanout <= 10.0 * window.as_secs_f64() + 2.0,
        "fan-out reads {fanout}"
    );
    assert!(fanout >= 1.0, "the hub did not tick");
    // Only the visitors near the front (rank < 20) read their own status,
    // once a second; the 180 behind them read nothing in this window.
    let front = 20.0 * (window.as_secs_f64() + 1.0);
    assert!(
        reads <= front,
        "{reads} stream reads for {STREAMS} streams in {window:?}"
    );
}

/// Another gateway node (here the test itself, through its own store
/// handle on the same `redis-server`) admits a visitor streamed by this
/// node: the admission news wakes the node's fan-out, and the visitor hears
/// ADMITTED with a token that redeems here.
#[tokio::test(flavor = "multi_thread")]
async fn an_admission_by_another_node_reaches_this_nodes_stream_as_news() {
    use anteroom_store::redis::{RedisConfig, RedisStore};
    use anteroom_store::{AdmitRequest, EventId, QueueStore};

    let redis = anteroom_store::testing::RedisServer::start()
        .expect("redis-server (apt-get install redis-server)");
    let origin = Origin::start().await;
    // One slot, taken by the first visitor: this node admits nobody else.
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("drain-journal");
    let toml = crate::support::config::ConfigBuilder::new()
        .redis(&[redis.url()])
        .server_line(&format!(
            "drain_journal = {:?}",
            journal.display().to_string()
        ))
        .no_limits()
        .event(
            Event::at("tickets", origin.addr)
                .max_active(1)
                .admission(FAST_BATCH),
        )
        .toml();
    let s = TestServer::start_with(&toml, origin, dir).await;
    let holder = joined(&s).await;
    crate::support::server::poll_until(
        &holder,
        &s.url("/api/queue/position?eventId=tickets"),
        "ADMITTED",
    )
    .await;
    let v = joined(&s).await;
    let (_, _, sse) = Sse::open(&s, &v).await;
    let mut sse = sse.unwrap();
    assert_eq!(
        sse.next(Duration::from_secs(10)).await.unwrap()["status"],
        "WAITING"
    );

    // The node listens once the channel has its subscriber.
    anteroom_store::testing::wait_for_news_listeners(&redis.url(), 1)
        .await
        .unwrap();
    let news0 = metric(&s, "anteroom_admission_news_total").await;

    let other = RedisStore::connect(&RedisConfig {
        urls: vec![redis.url()],
        cluster: false,
        timeout: Duration::from_secs(2),
    })
    .await
    .unwrap();
    let e = EventId::new("tickets").unwrap();
    let admitted = other
        .admit(
            &e,
            &AdmitRequest {
                max: 1,
                max_active: 100,
                nonces: vec![rand::random()],
                token_ttl_us: 60_000_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        admitted.len(),
        1,
        "the streamed visitor was not the one waiting"
    );
    let p = loop {
        let p = sse
            .next(Duration::from_secs(10))
            .await
            .expect("ended early");
        if p["status"] != "WAITING" {
            break p;
        }
    };
    assert_eq!(p["status"], "ADMITTED", "{p}");
    crate::support::server::wait_until("the node heard the news", || async {
        metric(&s, "anteroom_admission_news_total").await > news0
    })
    .await;
    assert_eq!(redeem(&s, v, &p["token"]).await, StatusCode::OK);
}
