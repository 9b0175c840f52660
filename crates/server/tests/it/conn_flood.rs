//! Connections cannot pin the node, checked against the real binary: thousands
//! of sockets that never speak, hundreds that stop half-way through a request
//! head and trickle a byte now and then (on a fresh connection and on a
//! kept-alive one), and bodies that stall, all held open at once while
//! ordinary visitors join, poll, redeem and reach the origin through the gate.
//! The server must close every idle or half-sent head within
//! `server.header_read_timeout`, answer a stalled body `408 body_timeout`,
//! keep serving the visitors with no error and never drain; past
//! `server.max_connections` (here derived from a small `RLIMIT_NOFILE`) a
//! connection gets the clean `503 too_many_connections`, while the origin pool
//! and the Redis store keep their descriptors.

use crate::support::config::{ConfigBuilder, Event};
use crate::support::visitor::Visitor;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::process::Node;
use crate::support::raw::{connect, head, read_response};
use crate::support::wait_for;
use anteroom_store::testing::RedisServer;
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

const EVENT: &str = "tickets";
/// Short, so that the flood turns over several times within the test.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// How late after its timeout the server may close a socket. Generous: the
/// box is shared by several builds, and thousands of sockets time out in
/// the same instant.
const SLACK: Duration = Duration::from_secs(3);
/// The client's clock starts when its task sees the connect complete, which
/// on a loaded box can be long after the server accepted (thousands of
/// tasks share two threads), so a close can look early by that lag. Only a
/// close in less than half the timeout is a bug by this measure; the
/// printed medians tell the rest.
const EARLY_FRACTION: u32 = 2;

/// An origin that reads every request body before it answers, so that a
/// body stalled on the way in stalls the proxied request.
async fn start_origin() -> String {
    let app = axum::Router::new().fallback(|body: axum::body::Bytes| async move {
        format!("origin read {} bytes", body.len())
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn config(origin: &str, redis: &str, extra_server: &str) -> String {
    config_with(origin, redis, extra_server, HEADER_TIMEOUT)
}

fn config_with(origin: &str, redis: &str, extra_server: &str, header_timeout: Duration) -> String {
    ConfigBuilder::new()
        .process()
        .drain_journal()
        .server_line(&format!(
            "header_read_timeout = \"{}ms\"",
            header_timeout.as_millis()
        ))
        .server_line(&format!(
            "body_read_timeout = \"{}ms\"",
            BODY_TIMEOUT.as_millis()
        ))
        .server_line(extra_server)
        .redis(&[redis.to_owned()])
        .store_timeout("2s")
        .no_limits()
        .event(
            Event::new(EVENT, origin)
                .max_active(10000)
                .token_ttl("2m")
                .continuous(60000)
                .challenge_off(),
        )
        .toml()
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (the child
/// inherits it and takes half of it for client connections); fails naming
/// the limit when the box allows fewer than `needed`.
fn raise_nofile(needed: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        hard >= needed,
        "this test holds thousands of sockets and needs RLIMIT_NOFILE >= {needed}; the hard \
         limit is {hard} (raise it: `ulimit -Hn {needed}` as root, or LimitNOFILE in the unit)"
    );
    if limit.current.is_some_and(|soft| soft < hard) {
        limit.current = Some(hard);
        setrlimit(Resource::Nofile, limit).expect("raise the soft RLIMIT_NOFILE");
    }
}

/// The flood's reconnection waves land in the accept queue all at once; the
/// node asks for 4096 places, which the kernel caps at `net.core.somaxconn`.
fn assert_accept_queue(needed: usize) {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        somaxconn >= needed,
        "net.core.somaxconn is {somaxconn}: the flood needs an accept queue of {needed} \
         (sysctl -w net.core.somaxconn=4096)"
    );
}

/// Open descriptors of process `pid` (its sockets among them).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or(0)
}

/// How a held socket ended.
#[derive(Debug)]
struct Closed {
    /// From the moment the socket was idle (connect, or the last answer) to
    /// the server's close.
    after: Duration,
    /// What the server sent before closing.
    bytes: Vec<u8>,
}

/// Waits for the server to close `s`, writing one byte of `trickle` every
/// `every` meanwhile (nothing if empty). Panics if the server has not closed
/// it well past any timeout.
async fn until_closed(
    what: &str,
    s: TcpStream,
    since: Instant,
    trickle: &[u8],
    every: Duration,
) -> Closed {
    until_closed_within(
        what,
        s,
        since,
        trickle,
        every,
        HEADER_TIMEOUT.max(BODY_TIMEOUT),
    )
    .await
}

/// [`until_closed`] for a server whose longest timeout is `timeout`.
async fn until_closed_within(
    what: &str,
    mut s: TcpStream,
    since: Instant,
    trickle: &[u8],
    every: Duration,
    timeout: Duration,
) -> Closed {
    let deadline = since + timeout + SLACK * 4;
    let mut bytes = Vec::new();
    let mut next = 0;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            read = s.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick(), if next < trickle.len() => {
                // A write after the server closed may fail (reset): the
                // read sees the close next.
                let _ = s.write_all(&trickle[next..=next]).await;
                next += 1;
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                panic!("the server kept a {what} open for {:?}", since.elapsed());
            }
        }
    }
    Closed {
        after: since.elapsed(),
        bytes,
    }
}

/// Socket counts and close times of one kind of flood socket.
#[derive(Default)]
struct Tally {
    closes: Mutex<Vec<Duration>>,
    held: AtomicUsize,
    peak: AtomicUsize,
}

impl Tally {
    fn opened(&self) {
        let now = self.held.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn closed(&self, after: Duration) {
        self.held.fetch_sub(1, Ordering::SeqCst);
        self.closes.lock().unwrap().push(after);
    }

    /// `(count, min, median, max)` of the close times.
    fn figures(&self) -> (usize, Duration, Duration, Duration) {
        let mut c = self.closes.lock().unwrap().clone();
        c.sort();
        assert!(!c.is_empty(), "no socket of this kind was closed");
        (c.len(), c[0], c[c.len() / 2], c[c.len() - 1])
    }

    /// Every close time within `[timeout - EARLY, timeout + SLACK]`.
    fn assert_within(&self, what: &str, timeout: Duration) {
        let (n, min, median, max) = self.figures();
        eprintln!(
            "{what}: peak {} held, {n} closed by the server after min {min:?} / median \
             {median:?} / max {max:?} (timeout {timeout:?})",
            self.peak.load(Ordering::SeqCst)
        );
        assert!(
            min >= timeout / EARLY_FRACTION,
            "{what}: closed after {min:?}, long before its timeout {timeout:?}"
        );
        assert!(
            max <= timeout + SLACK,
            "{what}: closed only after {max:?} (timeout {timeout:?} + slack {SLACK:?})"
        );
    }
}

/// One visitor's full journey: join, poll until admitted, redeem, one
/// request through the gate to the origin, release. Every answer must be the
/// expected one; returns each call's latency.
async fn journey(node: &Node, latencies: &Mutex<Vec<Duration>>) -> Result<(), String> {
    let mut v = Visitor::default();
    let timed = |started: Instant| latencies.lock().unwrap().push(started.elapsed());
    let t = Instant::now();
    let (status, _, p) = v.enter(node, EVENT).await;
    timed(t);
    if status != StatusCode::OK {
        return Err(format!("enter: {status} {p}"));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let token = loop {
        let t = Instant::now();
        let url = node.url(&format!("/api/queue/position?eventId={EVENT}"));
        let (status, _, p) = v.api(Method::GET, &url, None).await;
        timed(t);
        if status != StatusCode::OK {
            return Err(format!("position: {status} {p}"));
        }
        match p["status"].as_str() {
            Some("ADMITTED") => break p["token"].as_str().unwrap().to_owned(),
            Some("WAITING") => {}
            other => return Err(format!("position: unexpected {other:?} in {p}")),
        }
        if Instant::now() > deadline {
            return Err("not admitted within 15 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let t = Instant::now();
    let status = v.redeem(node, EVENT, &token).await;
    timed(t);
    if status != StatusCode::OK {
        return Err(format!("redeem: {status}"));
    }
    let t = Instant::now();
    let (status, _, _) = v
        .api(Method::GET, &node.url(&format!("/{EVENT}/seat")), None)
        .await;
    timed(t);
    if status != StatusCode::OK {
        return Err(format!("gate: {status}"));
    }
    let t = Instant::now();
    let status = v.release(node, EVENT).await;
    timed(t);
    if !status.is_success() {
        return Err(format!("release: {status}"));
    }
    Ok(())
}

/// One request on the kept-alive connection; it must be answered `200`.
async fn kept_call(kept: &mut TcpStream, request: &str) {
    kept.write_all(request.as_bytes()).await.unwrap();
    let (status, body) = read_response(kept)
        .await
        .expect("the kept connection was closed");
    assert_eq!(status, 200, "{body}");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_half_sent_and_trickling_sockets_are_closed_while_visitors_are_served() {
    const SILENT: usize = 3000;
    const SLOWLORIS: usize = 300;
    const KEPT_ALIVE_SLOWLORIS: usize = 50;
    const BODY_TRICKLERS: usize = 40;
    const VISITORS: usize = 12;
    /// The flood reconnects whatever the server closes for this long.
    const FLOOD: Duration = Duration::from_secs(9);
    raise_nofile(8192);
    assert_accept_queue(SILENT + SLOWLORIS + KEPT_ALIVE_SLOWLORIS + BODY_TRICKLERS);
    let test_started = Instant::now();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = start_origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let node = Arc::new(Node::start(&config(&origin, &redis.url(), ""), dir).await);
    let addr = node.public;
    let pid = node.pid().unwrap();

    // A visitor with a pass, whose cookies the gate tricklers borrow.
    let mut holder = Visitor::default();
    holder.enter(&node, EVENT).await;
    holder
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let cookie = holder
        .cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");

    let flood_ends = Instant::now() + FLOOD;
    let silent = Arc::new(Tally::default());
    let slowloris = Arc::new(Tally::default());
    let kept_alive = Arc::new(Tally::default());
    let mut flood = JoinSet::new();
    for i in 0..SILENT {
        let tally = silent.clone();
        flood.spawn(async move {
            // Spread the first wave over ~300 ms, then reconnect at once.
            tokio::time::sleep(Duration::from_micros(100 * i as u64)).await;
            while Instant::now() < flood_ends {
                let s = connect(addr).await;
                tally.opened();
                let c = until_closed(
                    "silent socket",
                    s,
                    Instant::now(),
                    b"",
                    Duration::from_secs(1),
                )
                .await;
                assert!(c.bytes.is_empty() || c.bytes.starts_with(b"HTTP/1.1 408"));
                tally.closed(c.after);
            }
        });
    }
    for i in 0..SLOWLORIS {
        let tally = slowloris.clone();
        flood.spawn(async move {
            tokio::time::sleep(Duration::from_millis(i as u64)).await;
            while Instant::now() < flood_ends {
                let mut s = connect(addr).await;
                let since = Instant::now();
                tally.opened();
                let half = head(addr, "GET /api/queue/position?eventId=tickets HTTP/1.1");
                s.write_all(half.as_bytes()).await.unwrap();
                // Another header, one byte every 200 ms: never complete in time.
                let c = until_closed(
                    "half-sent head",
                    s,
                    since,
                    b"X-Slow: 1\r\nX-Slower: 2\r\n",
                    Duration::from_millis(200),
                )
                .await;
                tally.closed(c.after);
            }
        });
    }
    for i in 0..KEPT_ALIVE_SLOWLORIS {
        let tally = kept_alive.clone();
        flood.spawn(async move {
            tokio::time::sleep(Duration::from_millis(2 * i as u64)).await;
            while Instant::now() < flood_ends {
                let mut s = connect(addr).await;
                // One complete request first: the connection is kept alive and
                // hyper's own header timer runs from the answer on.
                let full = head(addr, "GET /api/queue/position?eventId=tickets HTTP/1.1") + "\r\n";
                s.write_all(full.as_bytes()).await.unwrap();
                let (status, _) = read_response(&mut s).await.expect("first answer");
                assert_eq!(status, 200);
                let since = Instant::now();
                tally.opened();
                let half = head(addr, "GET /api/queue/position?eventId=tickets HTTP/1.1");
                s.write_all(half.as_bytes()).await.unwrap();
                let c = until_closed(
                    "half-sent second head",
                    s,
                    since,
                    b"X-Slow: 1\r\nX-Slower: 2\r\n",
                    Duration::from_millis(200),
                )
                .await;
                tally.closed(c.after);
            }
        });
    }

    // Bodies that stop arriving, and bodies trickled a byte every 500 ms
    // (never a 2 s wait between pieces, but far below 64 KiB per 2 s): to
    // the queue API and as a proxied upload through the gate.
    let tricklers = Arc::new(Tally::default());
    let mut bodies = JoinSet::new();
    for i in 0..BODY_TRICKLERS {
        let (tally, cookie) = (tricklers.clone(), cookie.clone());
        let (to_gate, keeps_trickling) = (i % 2 == 0, i % 4 < 2);
        bodies.spawn(async move {
            let mut s = connect(addr).await;
            let request = if to_gate {
                head(addr, "POST /tickets/upload HTTP/1.1")
                    + &format!("Cookie: {cookie}\r\nContent-Length: 100000\r\n\r\n")
            } else {
                head(addr, "POST /api/queue/enter?eventId=tickets HTTP/1.1")
                    + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            };
            s.write_all(request.as_bytes()).await.unwrap();
            s.write_all(b"{\"chall").await.unwrap();
            let since = Instant::now();
            tally.opened();
            let (mut r, mut w) = s.into_split();
            let trickle = async move {
                if keeps_trickling {
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if w.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                }
                std::future::pending::<()>().await;
            };
            let answer = tokio::select! {
                answer = read_response(&mut r) => answer,
                () = trickle => unreachable!(),
                () = tokio::time::sleep(BODY_TIMEOUT + SLACK * 2) => {
                    panic!("no answer to a body stalled or trickled for {:?}", since.elapsed())
                }
            };
            tally.closed(since.elapsed());
            (to_gate, keeps_trickling, answer)
        });
    }

    // readyz on the admin listener, all along: the node never drains.
    let stop = Arc::new(AtomicBool::new(false));
    let readyz = {
        let (node, stop) = (node.clone(), stop.clone());
        tokio::spawn(async move {
            let mut checks = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let (status, body) = node.admin(Method::GET, "/readyz").await;
                assert_eq!(status, StatusCode::OK, "readyz during the flood: {body:?}");
                checks += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            checks
        })
    };

    // Wait for the flood to be in place, then let visitors through it.
    wait_for("the flood to be open", Duration::from_secs(20), || {
        let held = silent.held.load(Ordering::SeqCst) + slowloris.held.load(Ordering::SeqCst);
        async move { held >= (SILENT + SLOWLORIS) * 9 / 10 }
    })
    .await;
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(Ordering::SeqCst) {
                peak = peak.max(open_fds(pid));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            peak
        })
    };
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let journeys = Arc::new(AtomicUsize::new(0));
    let mut visitors = JoinSet::new();
    for _ in 0..VISITORS {
        let (node, latencies, journeys) = (node.clone(), latencies.clone(), journeys.clone());
        visitors.spawn(async move {
            while Instant::now() + Duration::from_secs(1) < flood_ends {
                journey(&node, &latencies).await?;
                journeys.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, String>(())
        });
    }
    let mut errors = Vec::new();
    while let Some(r) = visitors.join_next().await {
        if let Err(e) = r.unwrap() {
            errors.push(e);
        }
    }
    sampling.store(false, Ordering::SeqCst);
    let server_fds = sampler.await.unwrap();
    while let Some(r) = flood.join_next().await {
        r.unwrap();
    }
    let mut answers = Vec::new();
    while let Some(r) = bodies.join_next().await {
        answers.push(r.unwrap());
    }
    stop.store(true, Ordering::SeqCst);
    let readyz_checks = readyz.await.unwrap();

    // Figures first, then the verdicts.
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    eprintln!(
        "server held up to {server_fds} descriptors with the flood open; \
         {} journeys, {} calls, latency p50 {:?} / p99 {:?} / max {:?}; {readyz_checks} \
         readyz checks, all 200; {:?} in all",
        journeys.load(Ordering::SeqCst),
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
        test_started.elapsed()
    );
    assert!(
        errors.is_empty(),
        "visitors failed during the flood: {errors:?}"
    );
    assert!(
        journeys.load(Ordering::SeqCst) >= VISITORS,
        "too few journeys"
    );
    assert!(
        server_fds >= (SILENT + SLOWLORIS) * 9 / 10,
        "the server held only {server_fds} descriptors: the flood did not reach it"
    );
    silent.assert_within("silent sockets", HEADER_TIMEOUT);
    slowloris.assert_within("half-sent heads", HEADER_TIMEOUT);
    kept_alive.assert_within("half-sent second heads", HEADER_TIMEOUT);
    tricklers.assert_within("stalled and trickled bodies", BODY_TIMEOUT);
    for (to_gate, trickling, answer) in &answers {
        let what = format!("body (to the gate: {to_gate}, trickling: {trickling})");
        let (status, body) = answer
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: closed without an answer"));
        assert_eq!(*status, 408, "{what}: {body}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "body_timeout", "{body}");
    }
    assert_eq!(node.draining_gauge(EVENT).await, Some(0.0));
    // After the flood, the node holds about what it held before it.
    wait_for(
        "the flood's descriptors to be released",
        Duration::from_secs(10),
        || {
            let fds = open_fds(pid);
            async move { fds < 200 }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_new_sockets_are_refused_cleanly_and_served_once_it_clears() {
    // 1200 descriptors: the public listener may hold (1200 - 512 - 256) / 2.
    const NOFILE: u64 = 1200;
    const CAP: usize = 216;
    const OVER: usize = 600;
    /// Longer than the other tests' timeout: every flood socket must be
    /// accepted before the first held one times out and frees its slot, or
    /// a late socket is held where the test counts on a refusal. On a box
    /// busy with browser tests, accepting the 816 sockets can take over 2 s.
    const CAP_HEADER_TIMEOUT: Duration = Duration::from_secs(8);
    raise_nofile(4096);
    let test_started = Instant::now();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let origin = start_origin().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let node = Node::start_with_nofile(
        &config_with(&origin, &redis.url(), "", CAP_HEADER_TIMEOUT),
        dir,
        NOFILE,
    )
    .await;
    let addr = node.public;

    // An admitted visitor on one kept-alive connection, opened before the flood.
    let mut holder = Visitor::default();
    holder.enter(&node, EVENT).await;
    holder
        .until_active(&node, EVENT, Duration::from_secs(10), &mut Vec::new())
        .await;
    let cookie = holder
        .cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let mut kept = connect(addr).await;
    let gate_request =
        head(addr, "GET /tickets/seat HTTP/1.1") + &format!("Cookie: {cookie}\r\n\r\n");
    kept.write_all(gate_request.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut kept).await.expect("gate answer").0, 200);

    // The flood: far more silent sockets than the cap. Each one is either
    // held (and closed by the header timeout) or refused at once. The kept
    // connection asks something now and then, or its own header timeout
    // (from its last answer) would close it.
    let poll = head(addr, "GET /api/queue/position?eventId=tickets HTTP/1.1")
        + &format!("Cookie: {cookie}\r\n\r\n");
    let flood_started = Instant::now();
    let refused = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::new(Tally::default());
    let mut readers = JoinSet::new();
    for i in 0..CAP + OVER {
        let s = connect(addr).await;
        let (refused, held) = (refused.clone(), held.clone());
        readers.spawn(async move {
            let c = until_closed_within(
                "socket at the cap",
                s,
                flood_started,
                b"",
                Duration::from_secs(1),
                CAP_HEADER_TIMEOUT,
            )
            .await;
            if c.bytes.is_empty() {
                held.closes.lock().unwrap().push(c.after);
            } else {
                refused.lock().unwrap().push(c);
            }
        });
        if i % 100 == 99 {
            kept_call(&mut kept, &poll).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while refused.lock().unwrap().len() < OVER {
        let closed = held.closes.lock().unwrap().len();
        assert!(
            closed == 0,
            "{closed} held sockets timed out before all {OVER} refusals came ({} so far, \
             {:?} after the flood began): the box accepted the flood slower than the \
             {CAP_HEADER_TIMEOUT:?} header timeout",
            refused.lock().unwrap().len(),
            flood_started.elapsed()
        );
        assert!(
            Instant::now() < deadline,
            "the refusals did not come: {} of {OVER} after {:?}",
            refused.lock().unwrap().len(),
            flood_started.elapsed()
        );
        kept_call(&mut kept, &poll).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refusals_took = flood_started.elapsed();

    // The cap is full. A client that writes its request and then reads
    // (hyper's) gets the JSON refusal, not a broken connection. Asked
    // first: the flood's held sockets start closing one header timeout
    // after they were accepted, and then a new connection finds a slot.
    let (status, _, p) = Visitor::default().enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{p}");
    assert_eq!(p["error"], "too_many_connections", "{p}");
    // The kept connection still reaches the origin and the store, never a
    // 502.
    let mut gate_calls = 0;
    for _ in 0..20 {
        kept.write_all(gate_request.as_bytes()).await.unwrap();
        let (status, body) = read_response(&mut kept).await.expect("gate answer");
        assert_eq!(status, 200, "proxied request at the cap: {body}");
        gate_calls += 1;
    }
    kept_call(&mut kept, &poll).await;
    let (status, body) = node.admin(Method::GET, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(node.draining_gauge(EVENT).await, Some(0.0));

    while let Some(r) = readers.join_next().await {
        r.unwrap();
    }
    let refused = std::mem::take(&mut *refused.lock().unwrap());
    let mut refusal_times: Vec<Duration> = refused.iter().map(|c| c.after).collect();
    refusal_times.sort();
    let (kept_n, min, median, max) = held.figures();
    eprintln!(
        "cap {CAP}: {kept_n} of {} sockets held, closed after min {min:?} / median {median:?} / \
         max {max:?}; {} refused (last refusal {:?} after the flood began); {gate_calls} proxied \
         calls on the kept connection at the cap; all refused within {refusals_took:?}; {:?} \
         in all",
        CAP + OVER,
        refused.len(),
        refusal_times.last().unwrap(),
        test_started.elapsed()
    );
    for c in refused.iter() {
        let text = String::from_utf8_lossy(&c.bytes);
        assert!(
            text.starts_with("HTTP/1.1 503") && text.contains("\"too_many_connections\""),
            "not the clean refusal: {text}"
        );
    }
    // The kept connection holds one slot, the rest are the flood's.
    assert!(
        kept_n < CAP && kept_n + 5 >= CAP - 1,
        "{kept_n} flood sockets held with a cap of {CAP}"
    );
    assert_eq!(kept_n + refused.len(), CAP + OVER);
    assert!(
        max <= CAP_HEADER_TIMEOUT + SLACK,
        "held sockets closed only after {max:?}"
    );

    // Once the flood is closed, new visitors are served again.
    let (status, _, p) = Visitor::default().enter(&node, EVENT).await;
    assert_eq!(status, StatusCode::OK, "{p}");
}

/// Pipelines requests on a socket with a small receive buffer and never
/// reads: the server's answers fill both socket buffers and its write
/// waits. The read half, and the task writing the requests (its writes stop
/// too once the server no longer reads).
async fn never_reading(
    node: &Node,
    first: &str,
) -> (tokio::net::tcp::OwnedReadHalf, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(node.public).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let poll = format!("GET /api/queue/position?eventId={EVENT} HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut requests = first.as_bytes().to_vec();
    while requests.len() < 8 << 20 {
        requests.extend_from_slice(poll.as_bytes());
    }
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(&requests).await;
        std::future::pending::<()>().await;
    });
    (reader, writing)
}

/// A client that asks and never reads is closed within
/// `server.send_timeout`, whether the door answers it or hyper does (a
/// first request the door hands on): a write waiting for room waited
/// forever, and with it the connection's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_closed_within_the_send_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = ConfigBuilder::new()
        .embedded(dir.path())
        .server_line("send_timeout = \"1s\"")
        .no_limits()
        .event(Event::new(EVENT, "http://127.0.0.1:9").challenge_off())
        .toml();
    let node = Node::in_process(&config).await;
    let closed = || async {
        node.metric_with(
            "anteroom_connections_closed_total",
            &[("reason", "send_timeout")],
        )
        .await
        .unwrap_or(0.0)
    };
    let hyper_first =
        format!("HEAD /api/queue/position?eventId={EVENT} HTTP/1.1\r\nHost: a\r\n\r\n");
    for (n, first) in [(1.0, ""), (2.0, hyper_first.as_str())] {
        let (mut reader, writing) = never_reading(&node, first).await;
        wait_for(
            "the never-reading connection closed for send_timeout",
            Duration::from_secs(1) + SLACK * 3,
            || async { closed().await >= n },
        )
        .await;
        // The socket is closed: what was sent drains, then it ends.
        let mut buf = vec![0u8; 64 << 10];
        let ended = tokio::time::timeout(SLACK * 3, async {
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "the connection stayed open after its send timeout"
        );
        // Counted once, whatever the server tried to write after it.
        assert_eq!(closed().await, n);
        writing.abort();
    }
}
