//! The door on the wire: a real server's public listener answers plain
//! HTTP/1.1 position polls itself and hands every other request, with the
//! rest of its connection, to hyper. The answers must be the ones hyper
//! gives for the same poll, a connection must carry on across the hand-off
//! (without a second first-head timeout), and TLS connections that chose
//! HTTP/1.1 go through the door too.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::server::TestServer;
use crate::support::tls::{Ca, client_config, config, handshake, try_start};

/// One answer off a connection: status, fields (lower-case names, each
/// value in order) and body, read by `content-length`.
struct Answer {
    status: u16,
    fields: BTreeMap<String, Vec<String>>,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .get(name)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Reads answers one at a time from a connection, keeping what it read
/// past the last one.
struct Conn<S> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &str) {
        self.stream.write_all(bytes.as_bytes()).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    async fn answer(&mut self) -> Answer {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(self.buf[..end].to_vec()).unwrap();
                let mut lines = head.split("\r\n");
                let status = lines.next().unwrap().split(' ').nth(1).unwrap();
                let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for line in lines {
                    let (k, v) = line.split_once(':').unwrap();
                    fields
                        .entry(k.to_ascii_lowercase())
                        .or_default()
                        .push(v.trim().to_owned());
                }
                let len: usize = fields["content-length"][0].parse().unwrap();
                if self.buf.len() >= end + 4 + len {
                    let body = self.buf[end + 4..end + 4 + len].to_vec();
                    self.buf.drain(..end + 4 + len);
                    return Answer {
                        status: status.parse().unwrap(),
                        fields,
                        body,
                    };
                }
            }
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                self.stream.read(&mut chunk),
            )
            .await
            .expect("an answer within 10 s")
            .unwrap();
            assert!(n > 0, "the connection closed before the answer");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn poll(host: SocketAddr, cookie: &str, extra: &str) -> String {
    format!(
        "GET /api/queue/position?eventId=tickets HTTP/1.1\r\nHost: {host}\r\n\
         Accept: application/json\r\nAccept-Language: fr\r\nCookie: {cookie}\r\n{extra}\r\n"
    )
}

fn enter(host: SocketAddr) -> String {
    format!(
        "POST /api/queue/enter?eventId=tickets HTTP/1.1\r\nHost: {host}\r\n\
         Accept: application/json\r\nContent-Length: 0\r\n\r\n"
    )
}

/// The same join with a chunked (empty) body: a framing the door leaves to
/// hyper.
fn enter_chunked(host: SocketAddr) -> String {
    format!(
        "POST /api/queue/enter?eventId=tickets HTTP/1.1\r\nHost: {host}\r\n\
         Accept: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
}

/// A visitor's session cookie: entered over its own connection.
async fn session(server: &TestServer) -> String {
    let mut c = Conn::new(TcpStream::connect(server.public).await.unwrap());
    c.send(&enter(server.public)).await;
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    a.fields["set-cookie"]
        .iter()
        .map(|v| v.split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What must agree between two answers to the same poll: status, field
/// names, every value but the clock's (`date`, and `retry-after`, which
/// rounds the jittered `pollAfterMs`), and the JSON without `pollAfterMs`
/// and `timestamp`.
fn comparable(a: &Answer) -> (u16, Vec<(String, Vec<String>)>, Value) {
    let fields = a
        .fields
        .iter()
        .map(|(k, v)| match k.as_str() {
            "date" | "retry-after" => (k.clone(), vec!["[clock]".to_owned()]),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let mut json = a.json();
    let o = json.as_object_mut().unwrap();
    o.remove("pollAfterMs");
    o.remove("timestamp");
    (a.status, fields, json)
}

#[tokio::test]
async fn the_doors_answer_to_a_poll_is_hypers_answer() {
    // Nobody is admitted (the event is paused), so both asks see the same
    // waiting visitor.
    let server = TestServer::start("").await;
    server.pause("tickets", "pause").await;
    let cookie = session(&server).await;

    let mut door = Conn::new(TcpStream::connect(server.public).await.unwrap());
    door.send(&poll(server.public, &cookie, "")).await;
    let by_door = door.answer().await;

    // A `Connection` token the door leaves alone sends the very same poll
    // to hyper (and through hyper to the same hot route).
    let mut hyper = Conn::new(TcpStream::connect(server.public).await.unwrap());
    hyper
        .send(&poll(
            server.public,
            &cookie,
            "Connection: keep-alive, TE\r\nTE: trailers\r\n",
        ))
        .await;
    let by_hyper = hyper.answer().await;

    assert_eq!(by_door.status, 200);
    assert_eq!(by_door.json()["status"], "PAUSED", "{}", by_door.json());
    assert_eq!(comparable(&by_door), comparable(&by_hyper));
    assert!(
        httpdate::parse_http_date(by_door.field("date").unwrap()).is_ok(),
        "{:?}",
        by_door.field("date")
    );
    server.stop().await;
}

#[tokio::test]
async fn one_connection_carries_polls_through_the_door_and_on_through_hyper() {
    let server = TestServer::start("").await;
    server.pause("tickets", "pause").await;
    let cookie = session(&server).await;
    let mut c = Conn::new(TcpStream::connect(server.public).await.unwrap());
    let host = server.public;

    // Polls kept alive, the second pair pipelined in one write.
    c.send(&poll(host, &cookie, "")).await;
    assert_eq!(c.answer().await.json()["status"], "PAUSED");
    c.send(&format!(
        "{}{}",
        poll(host, &cookie, ""),
        poll(host, &cookie, "")
    ))
    .await;
    for _ in 0..2 {
        assert_eq!(c.answer().await.json()["status"], "PAUSED");
    }

    // A poll, then a request the door does not answer, then a poll, in one
    // write: answered in order, the last two by hyper.
    c.send(&format!(
        "{}{}{}",
        poll(host, &cookie, ""),
        enter_chunked(host),
        poll(host, &cookie, "")
    ))
    .await;
    let before = c.answer().await;
    assert_eq!(before.json()["status"], "PAUSED");
    let entered = c.answer().await;
    assert_eq!(entered.status, 200);
    assert!(entered.fields.contains_key("set-cookie"), "a new visitor");
    assert_eq!(c.answer().await.json()["status"], "PAUSED");

    // Still open and answering.
    c.send(&poll(host, &cookie, "")).await;
    assert_eq!(c.answer().await.json()["rank"], before.json()["rank"]);

    // `Connection: close` is answered, marked and closed.
    c.send(&poll(host, &cookie, "Connection: close\r\n")).await;
    let last = c.answer().await;
    assert_eq!(last.field("connection"), Some("close"));
    let mut rest = Vec::new();
    c.stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn malformed_and_oversized_heads_still_get_hypers_answers() {
    let server = TestServer::start("").await;
    let host = server.public;

    // A field name with a space: hyper's `400`.
    let mut c = TcpStream::connect(host).await.unwrap();
    c.write_all(b"GET /api/queue/position?eventId=tickets HTTP/1.1\r\nBad Name: x\r\n\r\n")
        .await
        .unwrap();
    let (status, _) = crate::support::raw::read_response(&mut c)
        .await
        .unwrap_or((0, String::new()));
    assert_eq!(status, 400);

    // More than 100 fields: hyper's `431`.
    let many: String = (0..101).map(|i| format!("x-f{i}: v\r\n")).collect();
    let mut c = TcpStream::connect(host).await.unwrap();
    c.write_all(
        format!("GET /api/queue/position?eventId=tickets HTTP/1.1\r\nHost: {host}\r\n{many}\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let (status, _) = crate::support::raw::read_response(&mut c)
        .await
        .unwrap_or((0, String::new()));
    assert_eq!(status, 431);

    // Over 32 KiB of fields in fewer than 100: the hot route's own `431`
    // JSON, as the router's guard gives it.
    let mut c = Conn::new(TcpStream::connect(host).await.unwrap());
    let big = "b".repeat(40 * 1024);
    c.send(&poll(host, "", &format!("x-big: {big}\r\n"))).await;
    let a = c.answer().await;
    assert_eq!(a.status, 431);
    assert_eq!(a.json()["error"], "headers_too_large");
    server.stop().await;
}

#[tokio::test]
async fn tls_connections_that_chose_http1_poll_through_the_door() {
    const HOST: &str = "tickets.test";
    let ca = Ca::new("door ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = crate::support::origin::Origin::start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}\nhsts = \"max-age=600\"");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();

    let shake = handshake(s.public, HOST, client_config(ca.roots(), &[b"http/1.1"]))
        .await
        .unwrap();
    assert_eq!(shake.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let mut c = Conn::new(shake.stream);
    c.send(&enter(s.public)).await;
    let entered = c.answer().await;
    assert_eq!(entered.status, 200);
    let cookie = entered.fields["set-cookie"]
        .iter()
        .map(|v| v.split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ");

    // A fresh connection: its polls are the door's from the first.
    let shake = handshake(s.public, HOST, client_config(ca.roots(), &[b"http/1.1"]))
        .await
        .unwrap();
    let mut c = Conn::new(shake.stream);
    for _ in 0..3 {
        c.send(&poll(s.public, &cookie, "")).await;
        let a = c.answer().await;
        assert_eq!(a.status, 200);
        // The event admits a batch every 100 ms: on a loaded box a tick may
        // come before a poll, whose answer is then the admission.
        let j = a.json();
        assert!(
            j["position"].is_u64() || (j["status"] == "ADMITTED" && j["token"].is_string()),
            "{j}"
        );
        // HTTPS sets HSTS on the door's answers as on the router's.
        assert_eq!(a.field("strict-transport-security"), Some("max-age=600"));
    }
    s.stop().await;
}

/// A first head the door hands to hyper is due when it was due at the
/// door: a client that sends the start of a request the door does not
/// take just before the deadline gets no second timeout for the rest.
#[tokio::test]
async fn a_head_handed_to_hyper_keeps_the_first_heads_deadline() {
    let origin = crate::support::origin::Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = crate::support::server::config(
        dir.path(),
        origin.addr,
        crate::support::server::tickets(origin.addr),
    )
    .server_line("header_read_timeout = \"2s\"")
    .toml();
    let server = TestServer::start_with(&toml, origin, dir).await;
    for start in [
        // A gated path: not the door's.
        "GET /tickets/seat HTTP/1.1\r\n",
        // HTTP/2 with prior knowledge, which hyper serves on this port.
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let mut c = TcpStream::connect(server.public).await.unwrap();
        let opened = tokio::time::Instant::now();
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        c.write_all(start.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut out)).await;
        let took = opened.elapsed();
        assert!(read.is_ok(), "{start:?}: the connection was left open");
        assert!(
            took < std::time::Duration::from_millis(3000),
            "{start:?}: closed only {took:?} after the accept, a second timeout after the hand-off"
        );
    }
    server.stop().await;
}
