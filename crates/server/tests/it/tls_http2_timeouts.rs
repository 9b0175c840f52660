//! HTTP/2 connections cannot pin the node: over real TLS (ALPN `h2`, a real
//! HTTP/2 client), a connection with no open stream is sent GOAWAY and closed
//! after `server.http2_idle_timeout`, and one whose client stops answering
//! PINGs (behind a relay that goes silent, as a vanished machine does) is
//! closed after `http2_keep_alive_interval` + `http2_keep_alive_timeout`,
//! even while a push stream keeps it busy. Nor can a client that never
//! opens its flow-control window hold more of the origin than eight HTTP/1
//! connections would: each stream the gate forwards holds an origin
//! connection until its body is sent. And an HTTP/2 head is held to
//! HTTP/1's field count.

use crate::support::origin::Origin;
use crate::support::tls;

use std::time::{Duration, Instant};

use crate::support::tls::{Ca, config, handshake, try_start};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

const HOST: &str = "tickets.test";

type Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;
type Conn = hyper::client::conn::http2::Connection<
    TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Empty<Bytes>,
    TokioExecutor,
>;

/// An HTTP/2 connection over TLS whose client never sends PINGs itself.
async fn h2(ca: &Ca, addr: std::net::SocketAddr) -> (Sender, Conn) {
    let h = handshake(addr, HOST, tls::client_config(ca.roots(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]));
    hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(h.stream))
        .await
        .unwrap()
}

fn get(path: &str, cookie: Option<&str>) -> Request<Empty<Bytes>> {
    let mut b = Request::get(format!("https://{HOST}{path}"));
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    b.body(Empty::new()).unwrap()
}

async fn start(server: &str) -> (Ca, tls::TlsServer) {
    let origin = Origin::options().echo_proto().start().await;
    start_before(server, &origin).await
}

async fn start_before(server: &str, origin: &Origin) -> (Ca, tls::TlsServer) {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = origin.addr;
    let toml = config(dir.path(), origin)
        .server_line(server)
        .tls(&format!("cert = {cert:?}\nkey = {key:?}"))
        .toml();
    let s = try_start(dir, &toml).await.unwrap();
    (ca, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_gets_goaway_after_the_idle_timeout() {
    let (ca, s) = start("http2_idle_timeout = \"1s\"").await;
    let (mut send, conn) = h2(&ca, s.public).await;
    let driver = tokio::spawn(conn);
    let res = send
        .send_request(get("/api/queue/position?eventId=tickets", None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    res.into_body().collect().await.unwrap();
    let idle_from = Instant::now();
    // The server ends the connection by itself: the client's driver returns.
    let ended = tokio::time::timeout(Duration::from_secs(10), driver).await;
    let after = idle_from.elapsed();
    assert!(
        ended.is_ok(),
        "an idle HTTP/2 connection still open after 10 s"
    );
    println!("idle HTTP/2 connection closed {after:?} after its last stream");
    assert!(
        after >= Duration::from_millis(900),
        "closed before the idle timeout: {after:?}"
    );
    assert!(send.is_closed(), "the client saw GOAWAY");
    let metrics = s.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("anteroom_connections_closed_total{reason=\"idle\"}")),
        "the close is counted: {metrics}"
    );
    s.stop().await;
}

/// A TCP relay between the client and the server that can go silent: once
/// frozen it forwards nothing either way (the client's PING answers never
/// arrive, as with a client whose machine vanished without a FIN), keeps
/// reading what the server sends, and reports when the server closes.
struct Relay {
    addr: std::net::SocketAddr,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    closed: tokio::sync::oneshot::Receiver<Instant>,
}

async fn relay(server: std::net::SocketAddr) -> Relay {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    let f = frozen.clone();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let upstream = tokio::net::TcpStream::connect(server).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = upstream.into_split();
        let f2 = f.clone();
        // Client to server: stops forwarding once frozen (the bytes are dropped).
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = cr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if !f2.load(Ordering::SeqCst) && sw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            std::future::pending::<()>().await;
        });
        // Server to client: always read, forward only until frozen, and say
        // when the server ends the connection.
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = closed_tx.send(Instant::now());
                    break;
                }
                Ok(n) => {
                    if !f.load(Ordering::SeqCst) {
                        let _ = cw.write_all(&buf[..n]).await;
                    }
                }
            }
        }
        std::future::pending::<()>().await;
    });
    Relay {
        addr,
        frozen,
        closed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_answering_pings_is_closed_even_with_a_stream_open() {
    let (ca, s) = start(
        "http2_idle_timeout = \"60s\"\nhttp2_keep_alive_interval = \"1s\"\nhttp2_keep_alive_timeout = \"1s\"",
    )
    .await;
    let relay = relay(s.public).await;
    let (mut send, conn) = h2(&ca, relay.addr).await;
    tokio::spawn(conn);
    let enter = send
        .send_request(
            Request::post(format!("https://{HOST}/api/queue/enter?eventId=tickets"))
                .header("accept-language", "en")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(enter.status(), StatusCode::OK);
    let cookie = enter
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("; ");
    enter.into_body().collect().await.unwrap();
    // A push stream never ends by itself: the connection is busy, so the
    // idle timeout (60 s) cannot be what closes it.
    let stream = send
        .send_request(get("/api/queue/stream?eventId=tickets", Some(&cookie)))
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut body = stream.into_body();
    assert!(
        body.frame().await.is_some_and(|f| f.is_ok()),
        "the stream sends the position at once"
    );
    let silent_from = Instant::now();
    relay
        .frozen
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let closed_at = tokio::time::timeout(Duration::from_secs(15), relay.closed)
        .await
        .expect("a client that answers no PING is still connected after 15 s")
        .unwrap();
    let after = closed_at - silent_from;
    println!("HTTP/2 client silent with a stream open: closed by the server after {after:?}");
    assert!(
        after >= Duration::from_millis(1500),
        "closed before a PING could go unanswered: {after:?}"
    );
    assert!(after <= Duration::from_secs(6), "closed late: {after:?}");
    drop(body);
    s.stop().await;
}

/// An HTTP/2 connection whose client never opens a stream's window: it
/// takes each answer's head and none of its body.
/// A sender whose requests may carry a body.
type BodySender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// Aborting the returned driver closes the connection.
async fn h2_closed_window(
    ca: &Ca,
    addr: std::net::SocketAddr,
) -> (BodySender, tokio::task::JoinHandle<hyper::Result<()>>) {
    let h = handshake(addr, HOST, tls::client_config(ca.roots(), &[b"h2"]))
        .await
        .unwrap();
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(0)
        .handshake(TokioIo::new(h.stream))
        .await
        .unwrap();
    (send, tokio::spawn(conn))
}

type Head = hyper::Response<hyper::body::Incoming>;

/// `request` for a [`BodySender`].
fn bodiless(request: Request<Empty<Bytes>>) -> Request<Full<Bytes>> {
    request.map(|_| Full::default())
}

/// The `name=value` pairs of an answer's `Set-Cookie`s.
fn set_cookies(head: &Head) -> Vec<String> {
    head.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect()
}

/// Enters the `tickets` line, waits for the turn and redeems it over an
/// HTTP/2 connection of its own; the `Cookie` value that carries the pass,
/// and the connection, still open.
async fn admitted(ca: &Ca, addr: std::net::SocketAddr) -> (String, Sender) {
    let (mut send, conn) = h2(ca, addr).await;
    tokio::spawn(conn);
    let enter = send
        .send_request(
            Request::post(format!("https://{HOST}/api/queue/enter?eventId=tickets"))
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(enter.status(), StatusCode::OK);
    let mut cookies = set_cookies(&enter);
    let deadline = Instant::now() + Duration::from_secs(20);
    let token = loop {
        let position = send
            .send_request(get(
                "/api/queue/position?eventId=tickets",
                Some(&cookies.join("; ")),
            ))
            .await
            .unwrap();
        let body = position.into_body().collect().await.unwrap().to_bytes();
        let p: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if let Some(t) = p["token"].as_str() {
            break t.to_owned();
        }
        assert!(Instant::now() < deadline, "not admitted: {p}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let redeem = send
        .send_request(get(
            &format!("/api/queue/redeem?eventId=tickets&token={token}&return=/tickets/"),
            Some(&cookies.join("; ")),
        ))
        .await
        .unwrap();
    assert_eq!(redeem.status(), StatusCode::FOUND);
    cookies.extend(set_cookies(&redeem));
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("__Host-anteroom_pass=")),
        "{cookies:?}"
    );
    (cookies.join("; "), send)
}

/// Sends `n` requests for a body far larger than any buffer on `send`, each
/// answer's head reported on the channel as it arrives.
fn ask_big(send: &BodySender, n: usize) -> Heads {
    ask(send, n, "/big?n=8000000", None)
}

/// Sends `n` requests for `path` on `send`, each answer's head reported on
/// the channel as it arrives.
fn ask(send: &BodySender, n: usize, path: &str, cookie: Option<&str>) -> Heads {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let asking = (0..n)
        .map(|_| {
            let (mut send, tx) = (send.clone(), tx.clone());
            let request = bodiless(get(path, cookie));
            tokio::spawn(async move {
                if let Ok(head) = send.send_request(request).await {
                    let _ = tx.send(head);
                }
            })
        })
        .collect();
    Heads { rx, asking }
}

/// The answers' heads to [`ask_big`]'s requests, as they arrive.
struct Heads {
    rx: tokio::sync::mpsc::UnboundedReceiver<Head>,
    /// The tasks still waiting for theirs (each holds the connection open).
    asking: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Heads {
    fn drop(&mut self) {
        for task in &self.asking {
            task.abort();
        }
    }
}

/// The next `n` answers' heads, each `200`.
async fn heads_ok(heads: &mut Heads, n: usize) -> Vec<Head> {
    let mut held = Vec::new();
    for _ in 0..n {
        let head = next_head(heads).await;
        assert_eq!(head.status(), StatusCode::OK);
        held.push(head);
    }
    held
}

async fn next_head(heads: &mut Heads) -> Head {
    tokio::time::timeout(Duration::from_secs(10), heads.rx.recv())
        .await
        .expect("an answer's head within 10 s")
        .expect("the request was sent")
}

/// What one client connection may hold of the origin at once
/// (`ORIGIN_REQUESTS_PER_CONNECTION`).
const SHARE: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_at_most_its_share_of_origin_connections() {
    let origin = Origin::start().await;
    let (ca, s) = start_before("", &origin).await;
    let (send, driver) = h2_closed_window(&ca, s.public).await;
    let mut heads = ask_big(&send, SHARE + 8);
    let mut held = heads_ok(&mut heads, SHARE).await;
    // The same connection is still answered where no origin is involved,
    // and another connection still reaches the origin.
    let (mut other, conn) = h2(&ca, s.public).await;
    tokio::spawn(conn);
    let mut same = send.clone();
    let position = same
        .send_request(bodiless(get("/api/queue/position?eventId=tickets", None)))
        .await
        .unwrap();
    assert_eq!(position.status(), StatusCode::OK);
    let small = other.send_request(get("/big?n=10", None)).await.unwrap();
    assert_eq!(small.status(), StatusCode::OK);
    assert_eq!(
        small.into_body().collect().await.unwrap().to_bytes().len(),
        10
    );
    // A request with a body does not wait behind the share (its unread
    // data would hold the connection's window): refused at once.
    let upload = same.send_request(
        Request::post(format!("https://{HOST}/echo"))
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap(),
    );
    let upload = tokio::time::timeout(Duration::from_secs(10), upload)
        .await
        .expect("refused at once, not after a wait")
        .unwrap();
    assert_eq!(upload.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upload.headers()["retry-after"], "1");
    assert!(
        heads.rx.try_recv().is_err(),
        "a stream past the share got its answer while the share's bodies were held"
    );
    assert_eq!(
        origin.connections(),
        SHARE + 1,
        "the share held for the reader of nothing, one for the other client"
    );
    // The other 8 wait, not refused: one held answer given up lets one in.
    drop(held.pop());
    let next = next_head(&mut heads).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert!(heads.rx.try_recv().is_err(), "one let in for one given up");
    // The client goes away: every origin connection it held is closed
    // (the other client's stays in the pool).
    drop((held, next, heads, same, send, position, upload));
    driver.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.open() > 1 {
        assert!(
            Instant::now() < deadline,
            "{} origin connections still open 10 s after their client left",
            origin.open()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_origin_request_past_a_connections_first_counts_against_the_connection_cap() {
    let origin = Origin::start().await;
    let (ca, s) = start_before("max_connections = 16", &origin).await;
    let (a, a_driver) = h2_closed_window(&ca, s.public).await;
    let (mut b, b_driver) = h2_closed_window(&ca, s.public).await;
    // The third connection is where a visitor was admitted. B's requests
    // carry the pass: a refused one must not count as the origin failing,
    // which would slow admission for everyone.
    let (pass, c) = admitted(&ca, s.public).await;
    // Three connections, then A's eight streams: 3 + 7 slots.
    let mut a_heads = ask_big(&a, 8);
    let mut held = heads_ok(&mut a_heads, 8).await;
    // B's first rides on its own slot, the next six fill the cap, the
    // last is refused at once, as a seventeenth connection would be.
    let mut b_heads = ask(&b, 8, "/tickets/seat", Some(&pass));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let head = next_head(&mut b_heads).await;
        if head.status() == StatusCode::SERVICE_UNAVAILABLE {
            // (Its JSON body, `too_many_connections`, cannot be read through
            // a window never opened.)
            assert_eq!(head.headers()["retry-after"], "1");
            statuses.push(503);
        } else {
            statuses.push(head.status().as_u16());
            held.push(head);
        }
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 503]);
    // At most one origin connection each (the lean client may take a
    // small answer whole and pool its connection at once).
    assert!(origin.connections() <= 15, "{}", origin.connections());
    let stats = s.admin_json("/admin/events/tickets").await;
    assert_eq!(stats["stats"]["origin_error_rate"], 0.0, "{stats}");
    // A's answers given up: their slots are the listener's again.
    drop((held.drain(..8), a_heads, a));
    a_driver.abort();
    // (Once the server has seen A go: until then B is still refused.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let later = loop {
        let res = b
            .send_request(bodiless(get("/big?n=10", None)))
            .await
            .unwrap();
        if res.status() == StatusCode::OK {
            break res;
        }
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "A's slots not freed in 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop((held, b_heads, b, later, c));
    b_driver.abort();
    s.stop().await;
}

/// A client that never opens a stream's window is never sent a byte of an
/// answer's body, so no write to it ever waits: its streams held their
/// origin connections, and their slots of the listener, for as long as it
/// answered PINGs (32 a connection: a few thousand such connections shut
/// every visitor out). An answer that waits `send_timeout` for its window
/// is cut, and what it held goes; the connection's other streams go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_opens_a_window_has_its_answers_cut_after_the_send_timeout() {
    let origin = Origin::start().await;
    let (ca, s) = start_before("send_timeout = \"1s\"", &origin).await;
    let (send, driver) = h2_closed_window(&ca, s.public).await;
    // Seven: fewer cut streams than closes a connection held busy.
    let mut heads = ask_big(&send, 7);
    let held = heads_ok(&mut heads, 7).await;
    let asked = Instant::now();
    tls::wait_until("its origin connections closed", || async {
        origin.open() == 0
    })
    .await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(5), "cut after {took:?}");
    let metrics = s.metrics().await;
    let cut: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("anteroom_http2_streams_cut_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(cut >= 7.0, "{metrics}");
    // The connection itself is still served (a head needs no window).
    let mut same = send.clone();
    let position = same
        .send_request(bodiless(get("/api/queue/position?eventId=tickets", None)))
        .await
        .unwrap();
    assert_eq!(position.status(), StatusCode::OK);
    assert!(!driver.is_finished());
    drop((held, heads, send, same, position));
    driver.abort();
    s.stop().await;
}

/// A graceful close waits for the streams open, and a client that opens no
/// window keeps them open for good (an answer hyper took whole sits in its
/// buffers): the close is forced `send_timeout` after it began. Polls,
/// whose answers are made at once, held such a connection for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_takes_its_answers_is_closed_after_going_idle() {
    let (ca, s) = start("send_timeout = \"1s\"\nhttp2_idle_timeout = \"1s\"").await;
    let (send, driver) = h2_closed_window(&ca, s.public).await;
    let mut heads = ask(&send, 5, "/api/queue/position?eventId=tickets", None);
    let held = heads_ok(&mut heads, 5).await;
    let ended = tokio::time::timeout(Duration::from_secs(15), driver).await;
    assert!(ended.is_ok(), "still open 15 s after its answers' heads");
    drop((held, heads, send));
    s.stop().await;
}

/// The client's wait is timed per piece of at most 16 KiB, not per chunk
/// of the origin's: a client reading 16 KiB every half second, below a 1 s
/// send timeout, reads a body sent in 64 KiB chunks whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_http2_reader_that_keeps_reading_is_not_cut() {
    let origin = Origin::start().await;
    let (ca, s) = start_before("send_timeout = \"1s\"", &origin).await;
    let h = handshake(s.public, HOST, tls::client_config(ca.roots(), &[b"h2"]))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(16 * 1024)
        .handshake(TokioIo::new(h.stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let res = send.send_request(get("/big?n=131072", None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut got = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("the answer was cut while read");
        if let Ok(data) = frame.into_data() {
            got += data.len();
            // A slow reader: a window's worth every half second.
            tokio::time::sleep(Duration::from_millis(500 * data.len() as u64 / 16_384)).await;
        }
    }
    assert_eq!(got, 131_072);
    s.stop().await;
}

/// hyper holds a cut stream open until its client opens the window, which
/// such a client never does: a connection with eight held so is closed,
/// though another of its streams keeps it busy (a push stream, here an
/// answer still to come), or it would hold its slot for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holding_many_cut_streams_is_closed_though_busy() {
    let origin = Origin::start().await;
    let (ca, s) = start_before("send_timeout = \"1s\"", &origin).await;
    let (send, driver) = h2_closed_window(&ca, s.public).await;
    let _busy = ask(&send, 1, "/slow", None);
    let mut heads = ask_big(&send, 8);
    let held = heads_ok(&mut heads, 8).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), driver).await;
    assert!(ended.is_ok(), "still open 10 s after its answers' heads");
    drop((held, heads, send));
    s.stop().await;
}

/// The send timeout starts at an answer's head: an origin slower than it,
/// and a body waiting for its source, are not the client's stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_slower_than_the_send_timeout_is_not_cut() {
    let origin = Origin::options()
        .hold(Duration::from_millis(2_500))
        .start()
        .await;
    let (ca, s) = start_before("send_timeout = \"1s\"", &origin).await;
    let (mut send, conn) = h2(&ca, s.public).await;
    tokio::spawn(conn);
    let slow = send.send_request(get("/page", None)).await.unwrap();
    assert_eq!(slow.status(), StatusCode::OK);
    assert!(
        !slow
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_head_with_more_than_a_hundred_fields_is_refused_like_http1s() {
    let origin = Origin::options().echo_proto().start().await;
    let (ca, s) = start_before("", &origin).await;
    let (mut send, conn) = h2(&ca, s.public).await;
    tokio::spawn(conn);
    let with_fields = |path: &str, n: usize| {
        let mut request = get(path, None);
        for i in 0..n {
            request.headers_mut().insert(
                http::HeaderName::try_from(format!("x-field-{i}")).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        request
    };
    // The poll (answered before the router), a gated path and one the
    // gate forwards unguarded.
    for path in [
        "/api/queue/position?eventId=tickets",
        "/tickets/seat",
        "/shop",
    ] {
        let res = send.send_request(with_fields(path, 101)).await.unwrap();
        assert_eq!(
            res.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "{path}"
        );
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "headers_too_large", "{path}");
    }
    assert!(
        origin.requests.lock().unwrap().is_empty(),
        "nothing was forwarded"
    );
    // Cookies sent one per field (as Firefox does over HTTP/2) count as the
    // one `Cookie` line they are over HTTP/1.
    let mut crumbs = with_fields("/shop", 80);
    for i in 0..60 {
        crumbs.headers_mut().append(
            http::header::COOKIE,
            http::HeaderValue::try_from(format!("c{i}=v")).unwrap(),
        );
    }
    let res = send.send_request(crumbs).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // (Ninety: the gate adds its forwarding fields, and this origin's own
    // parser, hyper's too, holds a hundred.)
    let res = send.send_request(with_fields("/shop", 90)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(origin.requests.lock().unwrap().len(), 2);
    s.stop().await;
}
