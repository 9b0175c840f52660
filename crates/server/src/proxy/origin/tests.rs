//! The lean origin client: its framing against RFC 9112 (bodies split at
//! every point a socket may split them), and its connections against a
//! scripted origin on loopback: kept and reused, a kept one the origin
//! closed retried on a fresh one, timeouts and refusals mapped as hyper's
//! client's are.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt as _;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use http::Uri;
use http::header::CONNECTION;

use super::*;

/// Parses `answer` as one answer head plus whatever follows, fed in pieces
/// of `cut` bytes, and decodes its body: (status, fields, body, framing
/// left when the bytes ran out).
fn read_all(
    answer: &[u8],
    cut: usize,
    head_only: bool,
) -> Result<(Head, Vec<u8>, Framing), String> {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let head = loop {
        match parse_head(&mut buf, head_only, false) {
            Ok(Some(head)) => break head,
            Ok(None) if fed < answer.len() => {
                let end = (fed + cut).min(answer.len());
                buf.extend_from_slice(&answer[fed..end]);
                fed = end;
            }
            Ok(None) => return Err("head incomplete".into()),
            Err(Failed::Stale) => return Err("stale".into()),
            Err(Failed::Proxy(e)) => return Err(format!("{e:?}")),
        }
    };
    let mut framing = head.framing;
    let mut body = Vec::new();
    loop {
        match decode(&mut framing, &mut buf) {
            Ok(Some(data)) => body.extend_from_slice(&data),
            Ok(None) if fed < answer.len() => {
                let end = (fed + cut).min(answer.len());
                buf.extend_from_slice(&answer[fed..end]);
                fed = end;
            }
            Ok(None) => break,
            Err(e) => return Err(e.to_string()),
        }
        if matches!(
            framing,
            Framing::Length(0) | Framing::Chunked(Chunked::Done)
        ) {
            break;
        }
    }
    assert!(buf.is_empty() || fed == answer.len());
    Ok((head, body, framing))
}

fn chunked(pieces: &[Vec<u8>], ext: bool, trailers: bool) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for p in pieces.iter().filter(|p| !p.is_empty()) {
        out.extend_from_slice(format!("{:X}", p.len()).as_bytes());
        if ext {
            out.extend_from_slice(b";name=\"v\"");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    if trailers {
        out.extend_from_slice(b"X-Checksum: 1\r\nX-More: 2\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

proptest! {
    /// A chunked body decodes to its bytes however the socket splits it,
    /// with or without extensions and trailers, and ends exactly.
    #[test]
    fn a_chunked_body_decodes_at_any_split(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
        cut in 1usize..64,
        ext in any::<bool>(),
        trailers in any::<bool>(),
    ) {
        let answer = chunked(&pieces, ext, trailers);
        let (head, body, framing) = read_all(&answer, cut, false).unwrap();
        prop_assert_eq!(head.status, StatusCode::OK);
        prop_assert!(head.keep_alive);
        prop_assert_eq!(body, pieces.concat());
        prop_assert_eq!(framing, Framing::Chunked(Chunked::Done));
    }

    /// A body of known length is exactly that many bytes at any split.
    #[test]
    fn a_sized_body_decodes_at_any_split(
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        cut in 1usize..128,
    ) {
        let mut answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", data.len()).into_bytes();
        answer.extend_from_slice(&data);
        let (head, body, _) = read_all(&answer, cut, false).unwrap();
        prop_assert_eq!(body, data);
        prop_assert!(head.keep_alive);
    }
}

#[test]
fn framing_follows_rfc_9112() {
    let frame = |answer: &str, head_only: bool| {
        read_all(answer.as_bytes(), 7, head_only)
            .map(|(h, body, _)| (h.status.as_u16(), h.keep_alive, body))
    };
    // Informational answers are skipped.
    assert_eq!(
        frame(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            false
        ),
        Ok((200, true, b"ok".to_vec()))
    );
    // No body for HEAD, 204 and 304, whatever their length says.
    assert_eq!(
        frame("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true),
        Ok((200, true, vec![]))
    );
    assert_eq!(
        frame("HTTP/1.1 204 No Content\r\n\r\n", false),
        Ok((204, true, vec![]))
    );
    assert_eq!(
        frame(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            false
        ),
        Ok((304, true, vec![]))
    );
    // Repeated lengths that agree are one length; disagreeing ones are a 502.
    assert_eq!(
        frame(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
            false
        ),
        Ok((200, true, b"ok".to_vec()))
    );
    assert!(
        frame(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
            false
        )
        .is_err()
    );
    assert!(frame("HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok", false).is_err());
    assert!(frame("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false).is_err());
    assert!(frame("HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", false).is_err());
    // A transfer coding wins over a length, and its length field is dropped.
    let (head, body, _) = read_all(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        5,
        false,
    )
    .unwrap();
    assert_eq!(body, b"ok");
    assert!(!head.headers.contains_key(CONTENT_LENGTH));
    // A coding that does not end in chunked, or no length at all: read to
    // the close, and the connection is not kept.
    let (head, _, framing) = read_all(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz",
        4,
        false,
    )
    .unwrap();
    assert!(!head.keep_alive);
    assert_eq!(framing, Framing::Eof);
    let (head, _, framing) = read_all(b"HTTP/1.1 200 OK\r\n\r\nall of it", 4, false).unwrap();
    assert!(!head.keep_alive);
    assert_eq!(framing, Framing::Eof);
    // `Connection: close`, and HTTP/1.0 unless it asks to be kept.
    assert_eq!(
        frame(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            false
        ),
        Ok((200, false, vec![]))
    );
    assert_eq!(
        frame("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        Ok((200, false, vec![]))
    );
    assert_eq!(
        frame(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            false
        ),
        Ok((200, true, vec![]))
    );
    // An upgrade nobody asked for, a malformed head, a broken chunk.
    assert!(
        frame(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
            false
        )
        .is_err()
    );
    assert!(frame("HTTP/1.1 2000 Huh\r\n\r\n", false).is_err());
    assert!(frame("HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", false).is_err());
    assert!(
        frame(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            false
        )
        .is_err()
    );
    assert!(
        frame(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n",
            false
        )
        .is_err()
    );
    assert!(
        frame(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
            false
        )
        .is_err()
    );
}

/// A scripted origin: answers each request head it reads with `answer`
/// (then closes if `close_after` requests were answered on the
/// connection); counts the connections it accepted.
async fn origin(answer: &'static [u8], close_after: usize) -> (Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut answered = 0;
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if s.write_all(answer).await.is_err() {
                            return;
                        }
                        answered += 1;
                        if answered == close_after {
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}/page?x=1").parse().unwrap(), accepted)
}

async fn get(target: &Uri) -> Result<(StatusCode, Vec<u8>), ProxyError> {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::HOST, HeaderValue::from_static("origin"));
    let response = send(
        Method::GET,
        target,
        &headers,
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
    .await?;
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Ok((status, body.to_vec()))
}

#[tokio::test]
async fn kept_connections_are_reused() {
    let (target, accepted) = origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0).await;
    for _ in 0..5 {
        assert_eq!(
            get(&target).await.unwrap(),
            (StatusCode::OK, b"ok".to_vec())
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for all five"
    );
}

#[tokio::test]
async fn a_kept_connection_the_origin_closed_is_retried_on_a_fresh_one() {
    // The origin answers once per connection, then closes it: every later
    // request finds its kept connection dead and must not fail for it.
    let (target, accepted) = origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1).await;
    for _ in 0..4 {
        assert_eq!(
            get(&target).await.unwrap(),
            (StatusCode::OK, b"ok".to_vec())
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn chunked_and_close_delimited_answers_stream_whole() {
    let (target, accepted) = origin(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        0,
    )
    .await;
    assert_eq!(get(&target).await.unwrap().1, b"abcde");
    assert_eq!(get(&target).await.unwrap().1, b"abcde");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "a chunked answer keeps the connection"
    );

    let (target, accepted) = origin(b"HTTP/1.1 200 OK\r\n\r\nto the end", 1).await;
    assert_eq!(get(&target).await.unwrap().1, b"to the end");
    assert_eq!(get(&target).await.unwrap().1, b"to the end");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "read to the close: never kept"
    );
}

#[tokio::test]
async fn a_silent_origin_is_a_timeout_and_a_closed_port_unreachable() {
    // Accepts and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            kept.push(s);
        }
    });
    let target: Uri = format!("http://{addr}/").parse().unwrap();
    assert!(matches!(get(&target).await, Err(ProxyError::Timeout)));
    held.abort();

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let target: Uri = format!("http://{addr}/").parse().unwrap();
    let err = get(&target).await.unwrap_err();
    assert!(matches!(err, ProxyError::Origin(_)), "{err:?}");
    assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
}

/// Bytes an origin writes past an answer, once that answer was read whole
/// and its connection kept (a body on a `HEAD` answer, more than its
/// `Content-Length`), must never be read as the next request's answer:
/// they made it one, and every later answer on that connection went to the
/// request after the one that asked for it.
#[tokio::test]
async fn bytes_an_idle_connection_receives_are_never_the_next_answer() {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    const INJECTED: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX-Injected: yes\r\n\r\nspoofed";
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (written, written_rx) = tokio::sync::oneshot::channel::<()>();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut later = Some((go_rx, written));
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut script = later.take();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        s.write_all(OK).await.unwrap();
                        // The first connection, once its answer was read
                        // and it sits idle in the pool, says more.
                        if let Some((go_rx, written)) = script.take() {
                            go_rx.await.unwrap();
                            s.write_all(INJECTED).await.unwrap();
                            written.send(()).unwrap();
                        }
                    }
                }
            });
        }
    });
    let target: Uri = format!("http://{addr}/").parse().unwrap();
    assert_eq!(
        get(&target).await.unwrap(),
        (StatusCode::OK, b"ok".to_vec())
    );
    go.send(()).unwrap();
    written_rx.await.unwrap();
    // One turn of the runtime, which polls its I/O driver: the event loop
    // has then seen the idle connection become readable.
    tokio::task::yield_now().await;
    for _ in 0..3 {
        assert_eq!(
            get(&target).await.unwrap(),
            (StatusCode::OK, b"ok".to_vec())
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the connection that spoke out of turn was replaced, and the new one kept"
    );
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_its_connection_is_not_kept() {
    let (target, accepted) = origin(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nonly5", 1).await;
    let response = send(
        Method::GET,
        &target,
        &HeaderMap::new(),
        Duration::from_secs(2),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert!(response.into_body().collect().await.is_err());
    let response = send(
        Method::GET,
        &target,
        &HeaderMap::new(),
        Duration::from_secs(2),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    drop(response);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn the_request_head_is_written_as_asked() {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::HOST, HeaderValue::from_static("o:9"));
    headers.append("x-a", HeaderValue::from_static("1"));
    headers.append("x-a", HeaderValue::from_static("2"));
    let mut head = request_line(&Method::GET, "/base", "/a/b?c=d", headers.len());
    for (name, value) in &headers {
        crate::proxy::headers::FieldSink::field(
            &mut crate::proxy::headers::HeadSink(&mut head),
            name,
            value,
        );
    }
    head.extend_from_slice(b"\r\n");
    assert_eq!(
        String::from_utf8(head).unwrap(),
        "GET /base/a/b?c=d HTTP/1.1\r\nhost: o:9\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
    );
}

#[test]
fn an_answers_hop_by_hop_fields_stay_on_the_origins_hop() {
    let answer = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\n\
        Keep-Alive: timeout=5\r\nX-Private: 1\r\nTransfer-Encoding: chunked\r\n\
        Content-Length: 9\r\nTrailer: x-t\r\nX-Kept: yes\r\nSet-Cookie: a=1\r\n\r\n\
        2\r\nok\r\n0\r\n\r\n";
    let (head, body, _) = read_all(answer, 7, false).unwrap();
    assert_eq!(body, b"ok");
    assert!(head.keep_alive);
    let mut names: Vec<&str> = head.headers.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    // The framing is the visitor's hop's to choose; what the origin's
    // `Connection` named goes with it.
    assert_eq!(names, ["set-cookie", "x-kept"]);
    // What `Connection` says about the origin's connection is still read.
    let answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    let (head, _, _) = read_all(answer, 64, false).unwrap();
    assert!(!head.keep_alive);
    assert!(!head.headers.contains_key(CONNECTION) && head.headers.len() == 1);
}

/// The per-connection answer timer: a timer left from an earlier request
/// (due sooner) does not cut a later request short, one due later is
/// brought forward, and work that finishes first wins.
#[tokio::test]
async fn a_connections_timer_bounds_each_answer_from_its_own_start() {
    let wait = Duration::from_millis(150);
    // Left by an earlier request: fires long before this one is due.
    let mut timer = Box::pin(tokio::time::sleep(Duration::from_millis(10)));
    let started = Instant::now();
    let out = within(std::future::pending::<()>(), timer.as_mut(), started + wait).await;
    assert!(out.is_none());
    assert!(
        started.elapsed() >= wait,
        "cut short: {:?}",
        started.elapsed()
    );

    // Set far in the future: brought forward to this request's due time.
    let mut timer = Box::pin(tokio::time::sleep(Duration::from_secs(3600)));
    let started = Instant::now();
    let out = within(std::future::pending::<()>(), timer.as_mut(), started + wait).await;
    assert!(out.is_none());
    assert!(started.elapsed() >= wait);
    assert!(timer.deadline() <= started + wait);

    // Work that is ready is answered, whatever the timer says.
    let out = within(async { 7 }, timer.as_mut(), Instant::now()).await;
    assert_eq!(out, Some(7));
}

/// A connection going back to the pool leaves no task's waker in its
/// timer: the task of the request that last used it can be freed at once,
/// not when the timer fires up to a response timeout later. So also when
/// the task has spent its scheduling budget, which a timer's poll reads.
#[tokio::test]
async fn an_idle_connections_timer_keeps_no_tasks_waker() {
    struct Task;
    impl std::task::Wake for Task {
        fn wake(self: Arc<Self>) {}
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    for budget_spent in [false, true] {
        let mut conn = Conn {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(60))),
        };
        let task = Arc::new(Task);
        let waker = std::task::Waker::from(task.clone());
        let pending = conn
            .timer
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending();
        assert!(pending);
        drop(waker);
        assert_eq!(
            Arc::strong_count(&task),
            2,
            "the timer holds the task's waker"
        );
        // A channel read until it answers `Pending` with messages still
        // in it: the budget of this poll is spent.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        for _ in 0..1000 {
            tx.send(()).unwrap();
        }
        std::future::poll_fn(|cx| {
            if budget_spent {
                while rx.poll_recv(cx).is_ready() {}
            }
            conn.forget_waker();
            Poll::Ready(())
        })
        .await;
        assert!(!budget_spent || !rx.is_empty());
        assert_eq!(
            Arc::strong_count(&task),
            1,
            "the idle timer still holds it (budget spent: {budget_spent})"
        );
    }
}

/// An answer's field as the origin may write it: names the client reads
/// (hop-by-hop ones, the framing, the gate's command, what `Connection`
/// may name), tokens, and text that is no token, in any case; values of
/// any byte but CR and LF.
fn answer_field() -> impl Strategy<Value = (String, Vec<u8>)> {
    let names = prop_oneof![
        6 => proptest::sample::select(vec![
            "Content-Length",
            "content-length",
            "Transfer-Encoding",
            "Connection",
            "Keep-Alive",
            "X-Listed",
            "Date",
            "Strict-Transport-Security",
            "Anteroom-Command",
            "ANTEROOM-COMMAND",
            "Set-Cookie",
            "Content-Type",
            "TE",
            "Upgrade",
        ])
        .prop_map(str::to_owned),
        3 => "[!#$%&'*+.^_`|~0-9A-Za-z-]{1,12}",
        1 => "[ -~]{1,6}",
    ];
    let values = prop_oneof![
        6 => proptest::sample::select(vec![
            "0",
            "5",
            "5, 5",
            "5, 6",
            "chunked",
            "gzip, chunked",
            "close",
            "keep-alive",
            "x-listed",
            "keep-alive, X-Listed",
            "release",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        3 => "[ -~]{0,12}".prop_map(String::into_bytes),
        1 => proptest::collection::vec(
            any::<u8>().prop_filter("no CR or LF", |b| *b != b'\r' && *b != b'\n'),
            0..12
        ),
    ];
    (names, values)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Passed fields are the map the answer would have had: the same
    /// fields once put in a map, the same framing and connection, the same
    /// refusals (so the parser refuses every field `http` would); and they
    /// never hold a field the gate must act on (`Anteroom-Command`) or one
    /// that `Connection` names, and come only with a length-framed body.
    #[test]
    fn passed_fields_are_the_map_the_answer_would_have_had(
        status in proptest::sample::select(vec![200u16, 200, 200, 201, 204, 304, 404, 500]),
        http10 in proptest::bool::weighted(0.2),
        head_only in proptest::bool::weighted(0.2),
        mut fields in proptest::collection::vec(answer_field(), 0..6),
        // Most answers have a plain length: the ones passed through.
        // (0 and 5 as often as the rest: the lengths the other fields write.)
        length in proptest::option::weighted(
            0.8,
            (0usize..8, prop_oneof![Just(0u64), Just(5), 0u64..100]),
        ),
    ) {
        if let Some((at, n)) = length {
            let at = at.min(fields.len());
            fields.insert(at, ("Content-Length".to_owned(), n.to_string().into_bytes()));
        }
        let mut answer = format!("HTTP/1.{} {status} X\r\n", u8::from(!http10)).into_bytes();
        for (name, value) in &fields {
            answer.extend_from_slice(name.as_bytes());
            answer.extend_from_slice(b": ");
            answer.extend_from_slice(value);
            answer.extend_from_slice(b"\r\n");
        }
        answer.extend_from_slice(b"\r\n");
        let parse = |pass| {
            let mut buf = BytesMut::from(&answer[..]);
            parse_head(&mut buf, head_only, pass).map(|head| (head, buf.len()))
        };
        match (parse(false), parse(true)) {
            (Err(map), Err(passed)) => {
                prop_assert_eq!(format!("{map:?}"), format!("{passed:?}"));
            }
            (Ok((Some(map), left)), Ok((Some(head), passed_left))) => {
                prop_assert_eq!(left, passed_left);
                prop_assert_eq!(map.status, head.status);
                prop_assert_eq!(map.framing, head.framing);
                prop_assert_eq!(map.keep_alive, head.keep_alive);
                prop_assert!(map.passed.is_none());
                if let Some(passed) = &head.passed {
                    prop_assert!(head.headers.is_empty());
                    prop_assert!(matches!(head.framing, Framing::Length(n) if n == passed.length()));
                    prop_assert_eq!(map.headers.get_all(CONTENT_LENGTH).iter().count(), 1);
                    prop_assert!(!map.headers[CONTENT_LENGTH].as_bytes().contains(&b','));
                    prop_assert!(!map.headers.contains_key("anteroom-command"));
                    let named = fields.iter().any(|(name, value)| {
                        name.eq_ignore_ascii_case("connection")
                            && value.split(|b| *b == b',').any(|t| {
                                let t = t.trim_ascii();
                                !t.eq_ignore_ascii_case(b"close")
                                    && !t.eq_ignore_ascii_case(b"keep-alive")
                                    && HeaderName::from_bytes(t).is_ok()
                            })
                    });
                    prop_assert!(!named, "a field Connection names was passed");
                }
                let mut response = http::Response::new(axum::body::Body::empty());
                *response.headers_mut() = head.headers;
                let answer = crate::serve::Answer { response, passed: head.passed };
                let response = answer.into_response();
                prop_assert_eq!(response.headers(), &map.headers);
            }
            (map, passed) => prop_assert!(
                false,
                "map {:?}, passed {:?}",
                map.map(|(h, _)| h.is_some()).map_err(|e| format!("{e:?}")),
                passed.map(|(h, _)| h.is_some()).map_err(|e| format!("{e:?}"))
            ),
        }
    }
}

#[test]
fn a_length_said_again_goes_on_as_one_value() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nX-Between: 1\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Between: 1\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2 , 2\r\nX-Between: 1\r\nContent-Length: 2\r\n\r\nok",
    ] {
        for pass in [false, true] {
            let mut buf = BytesMut::from(answer);
            let head = parse_head(&mut buf, false, pass).unwrap().unwrap();
            assert!(head.passed.is_none(), "a list is not passed through");
            assert_eq!(head.framing, Framing::Length(2));
            let lengths: Vec<_> = head.headers.get_all(CONTENT_LENGTH).iter().collect();
            assert_eq!(lengths, ["2"], "{}", String::from_utf8_lossy(answer));
            assert_eq!(head.headers["x-between"], "1");
        }
    }
}
