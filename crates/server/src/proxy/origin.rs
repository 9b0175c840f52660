//! A lean HTTP/1.1 client to the origins, for the gate's bodiless `GET` and
//! `HEAD` requests made on an event loop: the bulk of an admitted crowd's
//! traffic (its pages and their assets).
//!
//! Why not hyper's pooled client for these: there each request is handed
//! over a channel to a connection task, the pool is a shared map behind a
//! lock, and the request and response heads are built and parsed through
//! generic machinery; together that was about as much CPU as the rest of
//! a proxied request. Here the visitor's own task drives the origin
//! connection: it takes an idle connection from its event loop's pool (a
//! thread-local list per origin, so no lock and no other thread), writes
//! the head in one write, parses the answer's head with httparse, and
//! streams the body back as [`OriginBody`], which returns the connection to
//! the pool when the body is done. Everything else (bodies, upgrades, the
//! shared runtime) stays on hyper's client.
//!
//! The contract is the proxy's: the same timeouts (connect, answer head),
//! the same `502`/`504` answers, one retry on a fresh connection when a kept
//! connection turns out closed before anything of the answer arrived (safe:
//! these methods are idempotent), bodies streamed and never buffered.
//! Framing follows RFC 9112 6.3: no body for `HEAD`, `1xx`, `204` and
//! `304`; `Transfer-Encoding` ending in `chunked` decoded (any other coding
//! read to the close); one `Content-Length`, or several that agree; else the
//! body runs to the close. An answer that breaks these rules is a `502`.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use hyper::body::Frame;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::ProxyError;
use super::headers::HopFields;
use crate::serve::PassedFields;

/// An idle pooled connection is closed after this (before an origin's own
/// keep-alive timeout would close it under a request).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per origin on each event loop.
const MAX_IDLE_PER_ORIGIN: usize = 512;
/// An answer head larger than this is a `502`.
const MAX_HEAD: usize = 256 * 1024;
/// Fields an answer head may have.
const MAX_HEADERS: usize = 128;
/// A chunk-size line (with its extensions) longer than this is a `502`.
const MAX_CHUNK_LINE: usize = 1024;
/// Trailer fields after the last chunk are read and dropped, up to this.
const MAX_TRAILERS: usize = 16 * 1024;
/// Each read makes room for this much.
const READ_CHUNK: usize = 16 * 1024;

/// Whether a request goes by this client: `GET` or `HEAD`, no body framing,
/// and on an event loop (whose thread owns the pool).
pub(super) fn eligible(method: &Method, hop: &HopFields<'_>) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && !hop.transfer_encoding
        && !hop.length
        && crate::serve::workers::current_loop().is_some()
}

/// One connection to an origin with what was read past the last answer.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    /// The bound on each answer head's wait, one per connection and moved
    /// lazily (see [`within`]): a timer made per request would enter and
    /// leave the runtime's timer wheel, under its lock, every time.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Conn {
    /// Leaves the timer holding no task's waker. A timer keeps the waker it
    /// was last polled with until it fires or is polled again, so an idle
    /// connection's would keep the task of the request that last used it,
    /// and all that task holds, alive for up to the response timeout. One
    /// poll with a waker that wakes nobody puts that one in its place; out
    /// of the task's budget, which a timer's poll otherwise spends (and
    /// when it is spent, returns before the waker is replaced).
    /// Whether this idle connection has said nothing since its last answer.
    /// An origin that writes past an answer's framing (a body on a `HEAD`
    /// answer, more than its `Content-Length`) would otherwise have those
    /// bytes read as the next visitor's answer, and each answer after them
    /// on the connection handed to the request after the one that asked for
    /// it. So, as nginx does with its kept upstream connections, one that
    /// became readable while idle (bytes, or the origin's close) is not used
    /// again. tokio reads the socket only when the event loop has seen it
    /// become readable, so a quiet connection costs no system call; bytes
    /// that arrive after the loop last looked are not seen here (nginx has
    /// the same window), only those that arrived before.
    fn is_quiet(&mut self) -> bool {
        matches!(
            self.stream.try_read_buf(&mut self.buf),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        )
    }

    fn forget_waker(&mut self) {
        let mut timer = self.timer.as_mut();
        let once = tokio::task::unconstrained(std::future::poll_fn(move |cx| {
            let _ = timer.as_mut().poll(cx);
            Poll::Ready(())
        }));
        let _ = std::pin::pin!(once).poll(&mut Context::from_waker(std::task::Waker::noop()));
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

thread_local! {
    /// This event loop's idle connections, by origin authority. A list, not
    /// a map: a gateway has a handful of origins, and comparing a few short
    /// keys costs less than hashing one twice per request.
    static POOL: RefCell<Vec<(String, Vec<Idle>)>> = const { RefCell::new(Vec::new()) };
}

/// The newest idle connection to `key` that has not idled out by `now`
/// and has stayed quiet ([`Conn::is_quiet`]); the others are closed.
fn checkout(key: &str, now: Instant) -> Option<Conn> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (_, idle) = pool.iter_mut().find(|(k, _)| k == key)?;
        // The oldest sit at the front: drop the ones past the timeout.
        let stale = idle
            .iter()
            .take_while(|i| now.duration_since(i.since) >= POOL_IDLE_TIMEOUT)
            .count();
        idle.drain(..stale);
        while let Some(mut i) = idle.pop() {
            if i.conn.is_quiet() {
                return Some(i.conn);
            }
        }
        None
    })
}

/// Gives a connection whose last answer was read whole back to the pool.
fn checkin(key: &str, mut conn: Conn) {
    if conn.buf.capacity() > 2 * READ_CHUNK {
        // A large answer grew the buffer: an idle connection keeps a small one.
        conn.buf = BytesMut::with_capacity(READ_CHUNK);
    }
    conn.forget_waker();
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        // The key is copied only for an origin's first connection.
        let index = match pool.iter().position(|(k, _)| k == key) {
            Some(index) => index,
            None => {
                pool.push((key.to_owned(), Vec::new()));
                pool.len() - 1
            }
        };
        let idle = &mut pool[index].1;
        if idle.len() >= MAX_IDLE_PER_ORIGIN {
            idle.remove(0);
        }
        idle.push(Idle {
            conn,
            since: Instant::now(),
        });
    });
}

/// Sends a bodiless request to `target` (an `http://` URI with the origin's
/// authority) with `headers` (already rewritten for the origin) and answers
/// with the origin's response head and a streaming body (its fields, which
/// the tests that send this way do not read, may have been passed through).
#[cfg(test)]
pub(super) async fn send(
    method: Method,
    target: &http::Uri,
    headers: &HeaderMap,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<http::Response<OriginBody>, ProxyError> {
    let path = target.path_and_query().map_or("/", |pq| pq.as_str());
    let mut head = request_line(&method, "", path, headers.len());
    for (name, value) in headers {
        super::headers::FieldSink::field(&mut super::headers::HeadSink(&mut head), name, value);
    }
    head.extend_from_slice(b"\r\n");
    let authority = target.authority().ok_or(ProxyError::BadOrigin)?;
    let (response, _) = send_head(
        method == Method::HEAD,
        authority.as_str(),
        head,
        connect_timeout,
        response_timeout,
    )
    .await?;
    Ok(response)
}

/// Sends `head` (a whole bodiless request head, `HEAD` if `head_only`) to
/// the origin at `authority` (`host:port`) and answers with the origin's
/// response head, its hop-by-hop fields left out, and a streaming body. A
/// plain answer's fields come as [`PassedFields`] instead of in the
/// response's map (see [`parse_head`]).
pub(super) async fn send_head(
    head_only: bool,
    authority: &str,
    head: Vec<u8>,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Answered, ProxyError> {
    // Kept connections first; one that fails before any byte of the
    // answer was closed by the origin while idle: the next one is tried.
    // One read of the clock serves the pool's idle check and the answer's
    // deadline, which counts from the first try.
    let now = Instant::now();
    while let Some(conn) = checkout(authority, now) {
        match exchange(conn, &head, head_only, authority, now + response_timeout).await {
            Ok(response) => return Ok(response),
            Err(Failed::Stale) => continue,
            Err(Failed::Proxy(e)) => return Err(e),
        }
    }
    let conn = connect(authority, connect_timeout, response_timeout).await?;
    let due = Instant::now() + response_timeout;
    match exchange(conn, &head, head_only, authority, due).await {
        Ok(response) => Ok(response),
        Err(Failed::Stale) => Err(ProxyError::Origin(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the origin closed the connection without answering",
        ))),
        Err(Failed::Proxy(e)) => Err(e),
    }
}

/// The request line for `base` (the origin's own path, no trailing `/`)
/// followed by `requested` (the request's path and query), in a buffer with
/// room for `fields` field lines after it. Both are valid URI paths, so
/// their join is one: nothing to check again.
pub(super) fn request_line(method: &Method, base: &str, requested: &str, fields: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(256 + fields * 48);
    head.extend_from_slice(method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(base.as_bytes());
    head.extend_from_slice(requested.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    head
}

/// A new connection to `authority` (`host:port`, port 80 by default),
/// trying each address within `timeout` in all.
async fn connect(
    authority: &str,
    timeout: Duration,
    response_timeout: Duration,
) -> Result<Conn, ProxyError> {
    let connect = async {
        let host_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let mut last = None;
        for addr in tokio::net::lookup_host(host_port.as_str()).await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the origin's name has no address")))
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(stream)) => Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            timer: Box::pin(tokio::time::sleep(response_timeout)),
        }),
        Ok(Err(e)) => Err(ProxyError::Origin(e)),
        Err(_) => Err(ProxyError::Timeout),
    }
}

/// Why one exchange failed.
#[derive(Debug)]
enum Failed {
    /// The connection was closed (or reset) before any byte of the answer:
    /// a kept connection the origin had dropped. Safe to send again.
    Stale,
    Proxy(ProxyError),
}

impl From<ProxyError> for Failed {
    fn from(e: ProxyError) -> Self {
        Self::Proxy(e)
    }
}

fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// Writes the request head and reads the answer's head on `conn`, by
/// `due`.
async fn exchange(
    mut conn: Conn,
    head: &[u8],
    head_only: bool,
    key: &str,
    due: Instant,
) -> Result<Answered, Failed> {
    if !conn.buf.is_empty() {
        // Bytes nobody asked for: the connection is out of step.
        return Err(Failed::Stale);
    }
    let Conn { stream, buf, timer } = &mut conn;
    let answer = within(
        answer_head(stream, buf, head, head_only),
        timer.as_mut(),
        due,
    )
    .await
    .ok_or(Failed::Proxy(ProxyError::Timeout))??;
    Ok(answer.into_response(conn, key))
}

/// `work`'s output, or `None` once `due` passed first (the connection's
/// `timer` kept as [`crate::clock::poll_due`] keeps it).
async fn within<F: std::future::Future>(
    work: F,
    mut timer: Pin<&mut tokio::time::Sleep>,
    due: Instant,
) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        crate::clock::poll_due(timer.as_mut(), due, cx).map(|()| None)
    })
    .await
}

/// Writes the request head and reads the answer's head off the connection.
async fn answer_head(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    head: &[u8],
    head_only: bool,
) -> Result<Head, Failed> {
    if let Err(e) = stream.write_all(head).await {
        return Err(if is_closed(&e) {
            Failed::Stale
        } else {
            Failed::Proxy(ProxyError::Origin(e))
        });
    }
    let mut received = false;
    loop {
        match parse_head(buf, head_only, true)? {
            Some(parsed) => return Ok(parsed),
            None if buf.len() >= MAX_HEAD => {
                return Err(bad("the answer's head is too large"));
            }
            None => {}
        }
        buf.reserve(READ_CHUNK);
        match std::future::poll_fn(|cx| {
            tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, buf)
        })
        .await
        {
            Ok(0) if !received => return Err(Failed::Stale),
            Ok(0) => {
                return Err(bad(
                    "the origin closed the connection inside the answer's head",
                ));
            }
            Ok(_) => received = true,
            Err(e) if !received && is_closed(&e) => return Err(Failed::Stale),
            Err(e) => return Err(Failed::Proxy(ProxyError::Origin(e))),
        }
    }
}

fn bad(why: &'static str) -> Failed {
    Failed::Proxy(ProxyError::Origin(io::Error::new(
        io::ErrorKind::InvalidData,
        why,
    )))
}

/// An answer of the lean client: the response, and its fields passed
/// through when they were (its map is then empty).
pub(super) type Answered = (http::Response<OriginBody>, Option<PassedFields>);

/// An answer head read off the buffer.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    passed: Option<PassedFields>,
    framing: Framing,
    keep_alive: bool,
}

impl Head {
    fn into_response(self, conn: Conn, key: &str) -> Answered {
        let body = OriginBody::new(conn, key, self.framing, self.keep_alive);
        let mut response = http::Response::new(body);
        *response.status_mut() = self.status;
        *response.version_mut() = Version::HTTP_11;
        *response.headers_mut() = self.headers;
        (response, self.passed)
    }
}

/// Parses the answer head at the start of `buf` (skipping `1xx` answers
/// other than `101`), consuming it; `None` when it is not all there yet.
///
/// With `pass` (always, but for the tests that read the map), a plain
/// answer (a body framed by one `Content-Length` of one value, no field its
/// `Connection` names and no `Anteroom-Command`, which the gate must act on
/// and remove) keeps its fields as the lines the door writes
/// ([`PassedFields`]) rather than in a map: the parser has refused every
/// field `http` would refuse
/// (`tests::passed_fields_are_the_map_the_answer_would_have_had`), and the
/// door would only turn the map back into those lines. Anything else gets
/// the map.
fn parse_head(buf: &mut BytesMut, head_only: bool, pass: bool) -> Result<Option<Head>, Failed> {
    loop {
        if buf.is_empty() {
            return Ok(None);
        }
        // Left uninitialised for the parser to fill (see `serve::door`).
        let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            buf,
            &mut fields,
        ) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(bad("too many answer fields")),
            Err(_) => return Err(bad("a malformed answer head")),
        };
        let code = response.code.unwrap_or(0);
        let status = StatusCode::from_u16(code).map_err(|_| bad("an invalid status code"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(Failed::Proxy(ProxyError::UnexpectedUpgrade));
        }
        if status.is_informational() {
            // `100 Continue`, `103 Early Hints`: not for this request.
            buf.advance(len);
            continue;
        }
        let http11 = response.version == Some(1);
        let mut close = !http11;
        let mut keep_alive_asked = false;
        let mut length: Option<u64> = None;
        let mut lengths = 0;
        let mut lengths_disagree = false;
        let mut coding: Option<bool> = None; // Some(ends in chunked)
        // Fields the `Connection` field names: the origin's hop only.
        let mut listed: Vec<HeaderName> = Vec::new();
        // Where the kept fields' names and values lie in the head: their
        // values become slices of the head, not copies of their own.
        let base = buf.as_ptr() as usize;
        // (u32: a head is at most `MAX_HEAD` bytes.)
        let at = |s: &[u8]| {
            let start = s.as_ptr() as usize - base;
            (start as u32, (start + s.len()) as u32)
        };
        let mut kept = [((0u32, 0u32), (0u32, 0u32)); MAX_HEADERS];
        let mut fields = 0;
        // The kept fields' bytes, for the room their lines take.
        let mut kept_bytes = 0;
        let mut command = false;
        for h in response.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"connection") {
                for token in h.value.split(|b| *b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive_asked = true;
                    } else if let Ok(name) = HeaderName::from_bytes(token) {
                        listed.push(name);
                    }
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = h
                    .value
                    .rsplit(|b| *b == b',')
                    .next()
                    .unwrap_or(b"")
                    .trim_ascii();
                coding = Some(last.eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                for part in h.value.split(|b| *b == b',') {
                    let n = parse_length(part.trim_ascii())
                        .ok_or_else(|| bad("an invalid Content-Length"))?;
                    if length.is_some_and(|l| l != n) {
                        lengths_disagree = true;
                    }
                    length = Some(n);
                    lengths += 1;
                }
            }
            // The answer's hop-by-hop fields stay on the origin's hop: the
            // visitor's hop gets its own framing and connection handling.
            // Nor does the origin set Anteroom's own cookies.
            if !super::headers::is_hop_by_hop_name(name)
                && !super::headers::sets_own_cookie(name, h.value)
            {
                kept[fields] = (at(name), at(h.value));
                fields += 1;
                kept_bytes += name.len() + h.value.len() + 4;
                command |= name.eq_ignore_ascii_case(b"anteroom-command");
            }
        }
        let bodiless =
            head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        if pass
            && !bodiless
            && coding.is_none()
            && lengths == 1
            && listed.is_empty()
            && !command
            && let Some(n) = length
        {
            let mut passed = PassedFields::new(n, kept_bytes);
            for &(name, value) in &kept[..fields] {
                passed.push(
                    &buf[name.0 as usize..name.1 as usize],
                    &buf[value.0 as usize..value.1 as usize],
                );
            }
            buf.advance(len);
            if !http11 && keep_alive_asked {
                close = false;
            }
            return Ok(Some(Head {
                status,
                headers: HeaderMap::new(),
                passed: Some(passed),
                framing: Framing::Length(n),
                keep_alive: !close,
            }));
        }
        let head = buf.split_to(len).freeze();
        let mut headers = HeaderMap::with_capacity(fields);
        for &(name, value) in &kept[..fields] {
            let name = HeaderName::from_bytes(&head[name.0 as usize..name.1 as usize])
                .map_err(|_| bad("an invalid answer field name"))?;
            let value =
                HeaderValue::from_maybe_shared(head.slice(value.0 as usize..value.1 as usize))
                    .map_err(|_| bad("an invalid answer field value"))?;
            headers.append(name, value);
        }
        for name in listed {
            headers.remove(name);
        }
        if !http11 && keep_alive_asked {
            close = false;
        }
        let framing = if bodiless {
            Framing::Length(0)
        } else if let Some(chunked) = coding {
            // RFC 9112 6.3: a transfer coding overrides any length.
            headers.remove(CONTENT_LENGTH);
            if chunked {
                Framing::Chunked(Chunked::Size {
                    value: 0,
                    digits: 0,
                    line: 0,
                    in_ext: false,
                })
            } else {
                close = true;
                Framing::Eof
            }
        } else if lengths_disagree {
            return Err(bad("Content-Length values that disagree"));
        } else if let Some(n) = length {
            if lengths > 1 {
                // A list of one length said again (`5, 5`, or the field
                // twice) goes on as the one value (RFC 9110 8.6): passed
                // on as sent, it stood beside the length the visitor's
                // hop writes when it cannot read the field as a number.
                headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
            }
            Framing::Length(n)
        } else {
            close = true;
            Framing::Eof
        };
        return Ok(Some(Head {
            status,
            headers,
            passed: None,
            framing,
            keep_alive: !close,
        }));
    }
}

fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// How the answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    Chunked(Chunked),
    /// At the close.
    Eof,
}

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// In a chunk-size line: the size so far, its digits, the line's
    /// length, whether past the size (in extensions or spaces).
    Size {
        value: u64,
        digits: u8,
        line: usize,
        in_ext: bool,
    },
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data (`true` once the CR is read).
    DataEnd(bool),
    /// Trailer fields after the last chunk: bytes read so far, and whether
    /// the current line is empty so far.
    Trailers {
        read: usize,
        line_empty: bool,
    },
    Done,
}

/// An origin answer's body, read from its connection as it is sent on; the
/// connection goes back to this loop's pool once the body was read whole
/// (and is closed if the body is dropped before that).
pub struct OriginBody {
    conn: Option<Conn>,
    key: String,
    framing: Framing,
    keep_alive: bool,
}

impl OriginBody {
    fn new(conn: Conn, key: &str, framing: Framing, keep_alive: bool) -> Self {
        let mut body = Self {
            conn: Some(conn),
            key: key.to_owned(),
            framing,
            keep_alive,
        };
        body.finish_if_done();
        body
    }

    fn done(&self) -> bool {
        matches!(
            self.framing,
            Framing::Length(0) | Framing::Chunked(Chunked::Done)
        )
    }

    /// Back to the pool when the body is whole, the connection may be kept
    /// and nothing unasked-for follows it.
    fn finish_if_done(&mut self) {
        if self.done()
            && let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.buf.is_empty()
        {
            checkin(&self.key, conn);
        }
    }
}

fn body_error(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl hyper::body::Body for OriginBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            if this.done() {
                this.finish_if_done();
                return Poll::Ready(None);
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match decode(&mut this.framing, &mut conn.buf) {
                Ok(Some(data)) => {
                    if this.done() {
                        this.finish_if_done();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(None)
                    if matches!(
                        this.framing,
                        Framing::Length(0) | Framing::Chunked(Chunked::Done)
                    ) =>
                {
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            conn.buf.reserve(READ_CHUNK);
            match ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut conn.stream),
                cx,
                &mut conn.buf
            )) {
                Ok(0) if this.framing == Framing::Eof => {
                    this.conn = None;
                    this.framing = Framing::Length(0);
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(body_error(
                        "the origin closed the connection inside the body",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self.framing {
            Framing::Length(n) => hyper::body::SizeHint::with_exact(n),
            _ => hyper::body::SizeHint::default(),
        }
    }
}

/// Takes the next piece of body data out of `buf`, moving `framing` on;
/// `None` when `buf` holds no data yet (or only framing, now consumed).
fn decode(framing: &mut Framing, buf: &mut BytesMut) -> io::Result<Option<Bytes>> {
    match framing {
        Framing::Length(left) => {
            if buf.is_empty() || *left == 0 {
                return Ok(None);
            }
            let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
            *left -= n as u64;
            Ok(Some(buf.split_to(n).freeze()))
        }
        Framing::Eof => {
            if buf.is_empty() {
                return Ok(None);
            }
            Ok(Some(buf.split().freeze()))
        }
        Framing::Chunked(state) => decode_chunked(state, buf),
    }
}

fn decode_chunked(state: &mut Chunked, buf: &mut BytesMut) -> io::Result<Option<Bytes>> {
    loop {
        if buf.is_empty() {
            return Ok(None);
        }
        match state {
            Chunked::Size {
                value,
                digits,
                line,
                in_ext,
            } => {
                let b = buf[0];
                buf.advance(1);
                *line += 1;
                if *line > MAX_CHUNK_LINE {
                    return Err(body_error("a chunk-size line too long"));
                }
                match b {
                    b'\n' => {
                        if *digits == 0 {
                            return Err(body_error("a chunk without a size"));
                        }
                        *state = if *value == 0 {
                            Chunked::Trailers {
                                read: 0,
                                line_empty: true,
                            }
                        } else {
                            Chunked::Data(*value)
                        };
                    }
                    b'\r' => {}
                    _ if *in_ext => {}
                    b';' | b' ' | b'\t' => *in_ext = true,
                    _ => {
                        let d = (b as char)
                            .to_digit(16)
                            .ok_or_else(|| body_error("an invalid chunk size"))?;
                        if *digits >= 16 {
                            return Err(body_error("a chunk size too large"));
                        }
                        *value = (*value << 4) | u64::from(d);
                        *digits += 1;
                    }
                }
            }
            Chunked::Data(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                *left -= n as u64;
                if *left == 0 {
                    *state = Chunked::DataEnd(false);
                }
                return Ok(Some(buf.split_to(n).freeze()));
            }
            Chunked::DataEnd(cr) => {
                let b = buf[0];
                buf.advance(1);
                match (b, *cr) {
                    (b'\r', false) => *cr = true,
                    (b'\n', _) => {
                        *state = Chunked::Size {
                            value: 0,
                            digits: 0,
                            line: 0,
                            in_ext: false,
                        }
                    }
                    _ => return Err(body_error("no line end after a chunk")),
                }
            }
            Chunked::Trailers { read, line_empty } => {
                let b = buf[0];
                buf.advance(1);
                *read += 1;
                if *read > MAX_TRAILERS {
                    return Err(body_error("trailers too large"));
                }
                match b {
                    b'\n' if *line_empty => *state = Chunked::Done,
                    b'\n' => *line_empty = true,
                    b'\r' => {}
                    _ => *line_empty = false,
                }
            }
            Chunked::Done => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
