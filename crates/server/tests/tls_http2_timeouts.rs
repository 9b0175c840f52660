//! HTTP/2 connections cannot pin the node: over real TLS (ALPN `h2`, a real
//! HTTP/2 client), a connection with no open stream is sent GOAWAY and closed
//! after `server.http2_idle_timeout`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "tls/support.rs"]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use support::{Ca, config_toml, handshake, start_origin, try_start};

const HOST: &str = "tickets.test";

type Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;
type Conn = hyper::client::conn::http2::Connection<
    TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Empty<Bytes>,
    TokioExecutor,
>;

/// An HTTP/2 connection over TLS whose client never sends PINGs itself.
async fn h2(ca: &Ca, addr: std::net::SocketAddr) -> (Sender, Conn) {
    let h = handshake(addr, HOST, support::client_config(ca.roots(), &[b"h2"]))
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

async fn start(server: &str) -> (Ca, support::TlsServer) {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = start_origin().await;
    let toml = config_toml(
        dir.path(),
        origin,
        server,
        &format!("cert = {cert:?}\nkey = {key:?}"),
    );
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
