//! HTTP/2 connections cannot pin the node: over real TLS (ALPN `h2`, a real
//! HTTP/2 client), a connection with no open stream is sent GOAWAY and closed
//! after `server.http2_idle_timeout`, and one whose client stops answering
//! PINGs (behind a relay that goes silent, as a vanished machine does) is
//! closed after `http2_keep_alive_interval` + `http2_keep_alive_timeout`,
//! even while a push stream keeps it busy.

use crate::support::origin::Origin;
use crate::support::tls;

use std::time::{Duration, Instant};

use crate::support::tls::{Ca, config, handshake, try_start};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
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
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
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
