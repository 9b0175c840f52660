//! The door on an in-memory connection, with a hot route of its own: what it
//! answers, what it hands to hyper (byte for byte), and when it closes.

use std::time::Duration;

use axum::response::IntoResponse as _;
use http::header;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

use super::*;
use crate::serve::{ConnectionSlot, HotAnswer, HotWholeAnswer};

/// The body of `GET /hot?big`.
const BIG: usize = 8 * 1024;

/// Takes `GET /hot` (any query); answers its query and `Cookie` back
/// (`?big`: [`BIG`] bytes instead).
struct Echo;

impl HotRoutes for Echo {
    fn takes(&self, method: &Method, uri: &Uri) -> bool {
        method == Method::GET && uri.path() == "/hot"
    }

    fn answer(&self, head: http::request::Parts, _peer: SocketAddr) -> HotAnswer {
        let cookie = head
            .headers
            .get(header::COOKIE)
            .map(|v| v.to_str().unwrap_or("?").to_owned())
            .unwrap_or_default();
        let query = head.uri.query().unwrap_or("").to_owned();
        Box::pin(async move {
            if query == "big" {
                return "b".repeat(BIG).into_response();
            }
            (
                [(header::CONTENT_TYPE, "application/json")],
                format!("{{\"q\":\"{query}\",\"cookie\":\"{cookie}\"}}"),
            )
                .into_response()
        })
    }

    fn takes_whole(&self, _: &Method, uri: &Uri) -> bool {
        uri.path() == "/whole"
    }

    /// Streams its answer: `?chunks` of unknown length, `?sized` of known
    /// length, `?broken` failing after its first piece; the peer and the
    /// scheme the request carried come back as fields.
    fn answer_whole(&self, req: axum::extract::Request, peer: SocketAddr) -> HotWholeAnswer {
        // The door gives the peer apart, and attaches nothing for it.
        assert!(
            req.extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .is_none()
        );
        let peer = peer.to_string();
        let https = req.extensions().get::<ClientScheme>() == Some(&ClientScheme::Https);
        let slot = req.extensions().get::<ConnectionSlot>().is_some();
        let query = req.uri().query().unwrap_or("").to_owned();
        Box::pin(async move {
            if query == "echo" {
                let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                    .await
                    .unwrap();
                return axum::response::Response::new(axum::body::Body::from(body)).into();
            }
            let pieces: Vec<Result<Bytes, std::io::Error>> = match query.as_str() {
                "many" => (0..100).map(|_| Ok(Bytes::from(vec![b'm'; BIG]))).collect(),
                "broken" => vec![
                    Ok(Bytes::from_static(b"half")),
                    Err(std::io::Error::other("origin gone")),
                ],
                _ => vec![
                    Ok(Bytes::from_static(b"one,")),
                    Ok(Bytes::from(vec![b'x'; 20_000])),
                    Ok(Bytes::from_static(b",three")),
                ],
            };
            let body = if query == "sized" {
                let all: Vec<u8> = pieces
                    .into_iter()
                    .flat_map(|p| p.unwrap().to_vec())
                    .collect();
                axum::body::Body::from(all)
            } else {
                axum::body::Body::from_stream(futures::stream::iter(pieces))
            };
            let mut r = axum::response::Response::new(body);
            let h = r.headers_mut();
            h.insert("x-peer", HeaderValue::from_str(&peer).unwrap());
            h.insert(
                "x-https",
                HeaderValue::from_static(if https { "yes" } else { "no" }),
            );
            h.insert(
                "x-slot",
                HeaderValue::from_static(if slot { "yes" } else { "no" }),
            );
            r.into()
        })
    }
}

fn hot() -> Arc<dyn HotRoutes> {
    Arc::new(Echo)
}

fn parsed(head: &str) -> Parsed {
    parse(head.as_bytes(), &Echo)
}

fn is_hot(p: &Parsed) -> Option<bool> {
    match p {
        Parsed::Hot(h) => Some(h.close),
        _ => None,
    }
}

#[test]
fn only_a_plain_http11_get_for_a_hot_route_is_the_doors() {
    let hot = |h: &str| is_hot(&parsed(h));
    assert_eq!(hot("GET /hot HTTP/1.1\r\nHost: a\r\n\r\n"), Some(false));
    assert_eq!(hot("GET /hot?x=1 HTTP/1.1\r\n\r\n"), Some(false));
    assert_eq!(hot("GET http://a/hot HTTP/1.1\r\n\r\n"), Some(false));
    assert_eq!(
        hot("GET /hot HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        Some(false)
    );
    assert_eq!(
        hot("GET /hot HTTP/1.1\r\nConnection: keep-alive\r\n\r\n"),
        Some(false)
    );
    assert_eq!(
        hot("GET /hot HTTP/1.1\r\nConnection: Close\r\n\r\n"),
        Some(true)
    );
    // Leading empty lines are skipped, as hyper skips them.
    assert_eq!(hot("\r\nGET /hot HTTP/1.1\r\n\r\n"), Some(false));

    let other = |h: &str| matches!(parsed(h), Parsed::Other);
    assert!(other("GET /cold HTTP/1.1\r\n\r\n"));
    assert!(other("POST /hot HTTP/1.1\r\n\r\n"));
    assert!(other("HEAD /hot HTTP/1.1\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.0\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"));
    assert!(other(
        "GET /hot HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n"
    ));
    assert!(other(
        "GET /hot HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    ));
    assert!(other("GET /hot HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.1\r\nConnection: Upgrade\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"));
    assert!(other("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.1\r\nBad Header: x\r\n\r\n"));
    assert!(other("GET /hot HTTP/1.1\r\n folded: x\r\n\r\n"));
    // A TLS hello on the plain port.
    assert!(matches!(
        parse(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", &Echo),
        Parsed::Other
    ));
    // More fields than hyper parses: hyper's to refuse.
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("x-{i}: v\r\n"))
        .collect();
    assert!(other(&format!("GET /hot HTTP/1.1\r\n{many}\r\n")));

    // A POST whose whole body came with its head; any doubt about the
    // body, or a body still on its way, is hyper's.
    let whole = |h: &str| matches!(parsed(h), Parsed::Hot(HotHead { whole: true, .. }));
    assert!(whole(
        "POST /whole HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    ));
    assert!(whole("POST /whole HTTP/1.1\r\n\r\n"));
    assert!(whole("GET /whole HTTP/1.1\r\n\r\n"));
    assert!(other("POST /whole HTTP/1.1\r\nContent-Length: 3\r\n\r\nab"));
    assert!(other(
        "POST /whole HTTP/1.1\r\nContent-Length: 99999\r\n\r\n"
    ));
    assert!(other(
        "POST /whole HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"
    ));
    assert!(other(
        "POST /whole HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc"
    ));
    assert!(other(
        "POST /whole HTTP/1.1\r\nContent-Length: 1,1\r\n\r\nx"
    ));
    assert!(other(
        "POST /whole HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ));
    assert!(other("GET /whole HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"));
    assert!(other("PUT /whole HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));

    let partial = |h: &str| matches!(parsed(h), Parsed::Partial);
    assert!(partial(""));
    assert!(partial("GET /hot HTTP/1.1\r\nHost: a\r\n"));
    assert!(partial("GE"));
}

/// Starts the door on one end of an in-memory connection; the other end
/// and the door's task (which ends with how the door left it) come back.
fn door(
    timeout: Duration,
) -> (
    DuplexStream,
    watch::Sender<bool>,
    tokio::task::JoinHandle<Option<Vec<u8>>>,
) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (stop_tx, mut stop) = watch::channel(false);
    let hot = hot();
    let task = tokio::spawn(async move {
        let visit = Visit {
            peer: "127.0.0.1:1".parse().unwrap(),
            scheme: ClientScheme::Http,
            header_read_timeout: timeout,
            head_due: tokio::time::Instant::now() + timeout,
        };
        match serve(server, &hot, visit, &mut stop).await {
            Left::Closed => None,
            Left::ToHyper(mut rest, _) => {
                // What hyper would read first: the bytes the door gave back.
                let mut prefix = vec![0u8; 1 << 16];
                let n = rest.read(&mut prefix).await.unwrap();
                prefix.truncate(n);
                Some(prefix)
            }
        }
    });
    (client, stop_tx, task)
}

/// Reads `n` answers (by `content-length`) and returns their heads and bodies.
async fn answers(client: &mut DuplexStream, n: usize) -> Vec<(String, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf[..end].to_vec()).unwrap();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            if buf.len() >= end + 4 + len {
                let body = String::from_utf8(buf[end + 4..end + 4 + len].to_vec()).unwrap();
                buf.drain(..end + 4 + len);
                out.push((head, body));
                continue;
            }
        }
        let mut chunk = [0u8; 4096];
        let k = client.read(&mut chunk).await.unwrap();
        assert!(k > 0, "closed after {} answers", out.len());
        buf.extend_from_slice(&chunk[..k]);
    }
    assert!(buf.is_empty(), "more than {n} answers");
    out
}

#[tokio::test]
async fn kept_alive_and_pipelined_requests_are_answered_in_order() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    client
        .write_all(b"GET /hot?n=1 HTTP/1.1\r\nCookie: a=1\r\n\r\n")
        .await
        .unwrap();
    let first = answers(&mut client, 1).await;
    assert_eq!(first[0].1, r#"{"q":"n=1","cookie":"a=1"}"#);
    let head = &first[0].0;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert!(head.contains("\r\ndate: "), "{head}");
    assert!(!head.contains("connection"), "{head}");

    // Two in one write, then one split across writes.
    client
        .write_all(b"GET /hot?n=2 HTTP/1.1\r\n\r\nGET /hot?n=3 HTTP/1.1\r\n\r\nGET /hot?n=4 HTT")
        .await
        .unwrap();
    let two = answers(&mut client, 2).await;
    assert_eq!(two[0].1, r#"{"q":"n=2","cookie":""}"#);
    assert_eq!(two[1].1, r#"{"q":"n=3","cookie":""}"#);
    client.write_all(b"P/1.1\r\n\r\n").await.unwrap();
    assert_eq!(
        answers(&mut client, 1).await[0].1,
        r#"{"q":"n=4","cookie":""}"#
    );

    drop(client);
    assert_eq!(task.await.unwrap(), None, "a closed client ends the door");
}

/// The door's side of a connection, noting the most bytes it offered to
/// one write: what it held of answers not yet written.
struct Noting {
    inner: DuplexStream,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

impl AsyncRead for Noting {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Noting {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.most
            .fetch_max(buf.len(), std::sync::atomic::Ordering::SeqCst);
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Many pipelined requests read at once are answered in a row, but their
/// answers are written as they pass [`MAX_OUT`]: a client that sent
/// thousands and read none made the connection hold every answer (8 to 17
/// MB for 90 KB of requests), where hyper's write buffer is bounded.
#[tokio::test]
async fn pipelined_answers_are_written_before_they_pile_up() {
    const N: usize = 600;
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let noting = Noting {
        inner: server,
        most: most.clone(),
    };
    let (_stop_tx, mut stop) = watch::channel(false);
    let task = tokio::spawn(async move {
        let visit = Visit {
            peer: "127.0.0.1:1".parse().unwrap(),
            scheme: ClientScheme::Http,
            header_read_timeout: Duration::from_secs(10),
            head_due: tokio::time::Instant::now() + Duration::from_secs(10),
        };
        let hot = hot();
        matches!(serve(noting, &hot, visit, &mut stop).await, Left::Closed)
    });
    // All of them in one write: the door's reads find hundreds at once.
    client
        .write_all(&b"GET /hot?big HTTP/1.1\r\n\r\n".repeat(N))
        .await
        .unwrap();
    let all = answers(&mut client, N).await;
    assert!(all.iter().all(|(_, body)| body.len() == BIG));
    // A streamed body whose frames are all ready goes out at the same pace.
    client
        .write_all(b"GET /whole?many HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(streamed(&mut client).await.1.len(), 100 * BIG);
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most <= MAX_OUT + BIG + 1024,
        "{most} bytes of answers held before a write"
    );
    drop(client);
    assert!(task.await.unwrap());
}

#[tokio::test]
async fn the_first_request_it_does_not_answer_goes_to_hyper_whole_after_the_answers_before_it() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    let rest = "POST /cold HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET /hot HTTP/1.1\r\n\r\n";
    client
        .write_all(format!("GET /hot?n=1 HTTP/1.1\r\n\r\n{rest}").as_bytes())
        .await
        .unwrap();
    assert_eq!(
        answers(&mut client, 1).await[0].1,
        r#"{"q":"n=1","cookie":""}"#
    );
    let given_back = task.await.unwrap().expect("handed to hyper");
    assert_eq!(String::from_utf8(given_back).unwrap(), rest);
}

#[tokio::test]
async fn connection_close_is_answered_then_closed() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    client
        .write_all(b"GET /hot HTTP/1.1\r\nConnection: close\r\n\r\nGET /hot HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let answer = answers(&mut client, 1).await;
    assert!(
        answer[0].0.contains("\r\nconnection: close"),
        "{}",
        answer[0].0
    );
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "nothing after the close: {rest:?}");
    assert_eq!(task.await.unwrap(), None);
}

#[tokio::test]
async fn a_head_that_never_completes_is_closed_at_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let (mut client, _stop, task) = door(timeout);
    let started = std::time::Instant::now();
    client.write_all(b"GET /hot HTTP/1.1\r\nHo").await.unwrap();
    assert_eq!(task.await.unwrap(), None);
    let took = started.elapsed();
    assert!(took >= timeout, "closed after {took:?}");
    assert!(took < Duration::from_secs(5), "closed only after {took:?}");
}

#[tokio::test]
async fn each_later_head_has_its_own_header_timeout() {
    // Three answers, each asked for just inside the timeout: 3 × 200 ms is
    // past one timeout, but every head came within its own.
    let timeout = Duration::from_millis(400);
    let (mut client, _stop, task) = door(timeout);
    for n in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        client
            .write_all(format!("GET /hot?n={n} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        answers(&mut client, 1).await;
    }
    // Then silence: closed by the timeout.
    assert_eq!(task.await.unwrap(), None);
}

#[tokio::test]
async fn a_graceful_stop_closes_a_waiting_connection() {
    let (mut client, stop, task) = door(Duration::from_secs(60));
    client
        .write_all(b"GET /hot HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    answers(&mut client, 1).await;
    stop.send(true).unwrap();
    let left = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the stop closes a waiting connection at once");
    assert_eq!(left.unwrap(), None);
}

#[tokio::test]
async fn a_head_past_the_read_buffer_goes_to_hyper() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    let big = format!("GET /hot HTTP/1.1\r\nx-big: {}", "a".repeat(MAX_BUF));
    // Written from a task: the door stops reading once it has its limit.
    let writer = tokio::spawn(async move {
        let _ = client.write_all(big.as_bytes()).await;
        client
    });
    let given_back = task.await.unwrap().expect("handed to hyper");
    assert!(given_back.starts_with(b"GET /hot HTTP/1.1\r\nx-big: aaa"));
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn the_answer_is_written_as_hyper_writes_it() {
    let mut out = Vec::new();
    let response = (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "3")],
        "{}",
    )
        .into_response();
    encode(response, false, &mut out).await;
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert_eq!(body, "{}");
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some("HTTP/1.1 429 Too Many Requests"));
    let mut fields: Vec<&str> = lines.collect();
    fields.sort_unstable();
    let date = fields.iter().find(|f| f.starts_with("date: ")).unwrap();
    assert!(
        httpdate::parse_http_date(&date["date: ".len()..]).is_ok(),
        "{date}"
    );
    fields.retain(|f| !f.starts_with("date: "));
    assert_eq!(
        fields,
        [
            "content-length: 2",
            "content-type: text/plain; charset=utf-8",
            "retry-after: 3"
        ]
    );

    let mut out = Vec::new();
    encode(StatusCode::NO_CONTENT.into_response(), true, &mut out).await;
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 204 No Content\r\n"), "{text}");
    assert!(!text.contains("content-length"), "{text}");
    assert!(text.ends_with("connection: close\r\n\r\n"), "{text}");
}

#[tokio::test]
async fn prefixed_bytes_are_read_before_the_stream() {
    let (mut a, b) = tokio::io::duplex(64);
    a.write_all(b" world").await.unwrap();
    drop(a);
    let mut p = Prefixed::new(Bytes::from_static(b"hello"), b);
    let mut all = String::new();
    p.read_to_string(&mut all).await.unwrap();
    assert_eq!(all, "hello world");
}

/// One answer's head and its body decoded from chunked or sized framing.
async fn streamed(client: &mut DuplexStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf[..end].to_vec()).unwrap();
            let mut rest = buf[end + 4..].to_vec();
            if let Some(len) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                let len: usize = len.parse().unwrap();
                while rest.len() < len {
                    let k = client.read(&mut chunk).await.unwrap();
                    assert!(k > 0, "closed inside the body");
                    rest.extend_from_slice(&chunk[..k]);
                }
                return (head, rest[..len].to_vec());
            }
            assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
            let mut body = Vec::new();
            loop {
                let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                    let k = client.read(&mut chunk).await.unwrap();
                    assert!(k > 0, "closed inside the body");
                    rest.extend_from_slice(&chunk[..k]);
                    continue;
                };
                let size =
                    usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
                while rest.len() < eol + 2 + size + 2 {
                    let k = client.read(&mut chunk).await.unwrap();
                    assert!(k > 0, "closed inside the body");
                    rest.extend_from_slice(&chunk[..k]);
                }
                if size == 0 {
                    return (head, body);
                }
                body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
                rest.drain(..eol + 2 + size + 2);
            }
        }
        let k = client.read(&mut chunk).await.unwrap();
        assert!(k > 0, "closed before the answer");
        buf.extend_from_slice(&chunk[..k]);
    }
}

#[tokio::test]
async fn a_whole_request_is_answered_streaming_with_the_routers_extensions() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    let expected: Vec<u8> = [&b"one,"[..], &vec![b'x'; 20_000], b",three"].concat();
    // Unknown length: chunked.
    client
        .write_all(b"GET /whole?chunks HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = streamed(&mut client).await;
    assert_eq!(body, expected);
    assert!(head.contains("\r\nx-peer: 127.0.0.1:1"), "{head}");
    assert!(head.contains("\r\nx-https: no"), "{head}");
    // Not the connection's slot: a door request cannot be upgraded, so it
    // never outlives the connection that holds it.
    assert!(head.contains("\r\nx-slot: no"), "{head}");
    // Known length: content-length, on the same connection.
    client
        .write_all(b"GET /whole?sized HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = streamed(&mut client).await;
    assert!(
        head.contains(&format!("content-length: {}", expected.len())),
        "{head}"
    );
    assert_eq!(body, expected);
    // Then a head-only hot route, still kept alive.
    client
        .write_all(b"GET /hot HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        answers(&mut client, 1).await[0].1,
        r#"{"q":"","cookie":""}"#
    );
    drop(client);
    assert_eq!(task.await.unwrap(), None);
}

#[tokio::test]
async fn a_body_that_fails_half_way_closes_the_connection() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    client
        .write_all(b"GET /whole?broken HTTP/1.1\r\n\r\nGET /hot HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    client.read_to_end(&mut all).await.unwrap();
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\n\r\n4\r\nhalf\r\n"), "{text}");
    assert!(!text.contains("0\r\n\r\n"), "no end of body: {text}");
    assert_eq!(
        text.matches("HTTP/1.1").count(),
        1,
        "nothing after the cut: {text}"
    );
    assert_eq!(task.await.unwrap(), None);
}

#[tokio::test]
async fn a_post_body_that_came_with_its_head_reaches_the_route_and_the_next_request_follows() {
    let (mut client, _stop, task) = door(Duration::from_secs(10));
    client
        .write_all(b"POST /whole?echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let (_, body) = streamed(&mut client).await;
    assert_eq!(body, b"hello");
    client
        .write_all(b"GET /hot?n=2 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        answers(&mut client, 1).await[0].1,
        r#"{"q":"n=2","cookie":""}"#
    );
    drop(client);
    assert_eq!(task.await.unwrap(), None);
}

proptest::proptest! {
    /// What the door notes of an answer's fields as it writes them is what
    /// a lookup of each by name says: the first `Content-Length` value and
    /// whether there is a `Date`.
    #[test]
    fn the_fields_noted_as_written_are_the_lookups_by_name(
        fields in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "content-length", "Content-Length", "date", "Date", "server",
                    "content-type", "x-length", "set-cookie",
                ]),
                proptest::sample::select(vec!["0", "12", " 7 ", "x", "Sat, 05 Dec 2026 14:00:00 GMT"]),
            ),
            0..8,
        ),
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in &fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static(value),
            );
        }
        let mut out = Vec::new();
        let written = super::fields(None, &headers, &mut out);
        proptest::prop_assert_eq!(
            written.length,
            headers.get(header::CONTENT_LENGTH).map(super::Length::of)
        );
        proptest::prop_assert_eq!(written.date, headers.contains_key(header::DATE));
    }
    /// An answer with passed fields is written as the one response it
    /// stands for: the same fields, each name's values in the same order
    /// (the passed ones first), and the same length and date noted.
    #[test]
    fn passed_fields_are_written_as_their_response_would_be(
        length in 0u64..100_000,
        passed_fields in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "date", "server", "content-type", "set-cookie", "x-a", "vary",
                ]),
                "[ -~]{0,12}",
            ),
            0..6,
        ),
        own in proptest::collection::vec(
            (
                proptest::sample::select(vec!["set-cookie", "strict-transport-security", "x-a"]),
                "[!-~]{1,12}",
            ),
            0..4,
        ),
    ) {
        let mut passed = super::PassedFields::new(length, 0);
        let length_text = length.to_string();
        let mut all = vec![("content-length", length_text.clone())];
        all.extend(passed_fields.iter().map(|(n, v)| (*n, v.trim().to_owned())));
        for (name, value) in &all {
            passed.push(name.as_bytes(), value.as_bytes());
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &own {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let mut with_passed = Vec::new();
        let written = super::fields(Some(&passed), &headers, &mut with_passed);
        let mut response = axum::response::Response::new(axum::body::Body::empty());
        *response.headers_mut() = headers;
        let one = super::Answer { response, passed: Some(passed) }.into_response();
        let mut as_one = Vec::new();
        let written_one = super::fields(None, one.headers(), &mut as_one);
        proptest::prop_assert_eq!(written.length, written_one.length);
        proptest::prop_assert_eq!(written.length, Some(super::Length::Is(length)));
        proptest::prop_assert_eq!(written.date, written_one.date);
        // Fields of different names may come in another order; each name's
        // values may not.
        let by_name = |out: &[u8]| {
            let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for line in String::from_utf8_lossy(out).split("\r\n").filter(|l| !l.is_empty()) {
                let (name, value) = line.split_once(": ").unwrap();
                seen.entry(name.to_owned()).or_default().push(value.to_owned());
            }
            seen
        };
        proptest::prop_assert_eq!(by_name(&with_passed), by_name(&as_one));
    }
}
