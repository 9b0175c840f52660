//! The door: a public connection's plain HTTP/1.1 requests for the hot
//! routes (a waiting crowd's position polls, its joins and redeems, and the
//! gate's `GET`s: an admitted crowd's pages) read, answered and written by
//! hand, before hyper is involved at all.
//!
//! Why: a poll's own work is a few microseconds, and on top of it hyper's
//! dispatcher (its service future, the request body channel, a boxed header
//! timer made for every request head, the encoder's vectored writes) and the
//! glue between hyper and tower cost about as much again. A gateway that
//! stands in front of a flash crowd answers far more polls than anything
//! else, so the door answers exactly those requests with one parse
//! (httparse, as hyper itself uses), one handler call and one write.
//!
//! A gated request's answer may stream (a proxied page): the door writes
//! it with its `content-length` when the length is known and chunked
//! otherwise, as hyper would, and closes the connection if the body fails
//! half-way.
//!
//! The door only ever takes the simplest case, and hands the connection to
//! hyper for everything else: the moment a request is anything but a
//! complete HTTP/1.1 `GET` for a hot route with no body, or `POST` for one
//! whose whole body (one plain `Content-Length`, at most 16 KiB) arrived
//! with its head, with no `Transfer-Encoding`, `Upgrade` or `Expect` and no
//! `Connection` token but `keep-alive` and `close`, the
//! bytes read so far are given back to hyper in front of the socket
//! ([`Prefixed`]) and hyper serves the connection from then on, from that
//! very request, as if the door had never been there. So every parse error,
//! limit and protocol feature is hyper's, answered as before: a head over
//! 100 fields or over the read buffer (hyper's `431`), a malformed head
//! (hyper's `400`), an HTTP/2 preface, HTTP/1.0, pipelined requests behind
//! an uncommon one, a body still on its way (hyper's body timeouts wait for
//! it). The one thing the door owns is the wait for a request head, which
//! it bounds as hyper does: the first head within
//! `server.header_read_timeout` of the connection's start, each later one
//! within that of the previous answer, and a graceful stop closes a
//! connection that waits.

use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf as _, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, DATE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Answer, ClientScheme, HotRoutes, MAX_BUF, PassedFields};

/// Header fields a head may have on the door's path: hyper's own default,
/// so a head the door cannot hold is one hyper refuses too (it is handed to
/// hyper, which answers it).
const MAX_HEADERS: usize = crate::config::MAX_HEADER_FIELDS;
/// The read buffer's first size and what each read makes room for.
const READ_CHUNK: usize = 8 * 1024;
/// Answers made but not yet written are written once they hold this much,
/// before more requests are answered. Pipelined requests are answered in a
/// row and their answers written together (one write for many small ones),
/// but a client that sends many and reads none must not make the
/// connection hold all their answers: at this size the door waits on the
/// client, as hyper's bounded write buffer does, and reads no more of its
/// requests meanwhile. The same bound holds a streamed body's frames.
const MAX_OUT: usize = 64 * 1024;
/// The largest request body the door reads with its head (the queue API's
/// are a few hundred bytes); a larger one is hyper's, with its limits.
const MAX_BODY: usize = 16 * 1024;

/// How the door left a connection.
pub(super) enum Left<S> {
    /// Closed: by the client, by a timeout, by a graceful stop, after an
    /// answer with `Connection: close`, or on an I/O error.
    Closed,
    /// A request the door does not answer: hyper serves the connection from
    /// that request on, its head due by the instant given (the connection's
    /// first head's deadline if the door answered nothing).
    ToHyper(Prefixed<S>, Instant),
}

/// Who is at the door: what a gated request carries to the gate as the
/// router's fallback would see it. Not the connection's slot: the router
/// attaches it so that an upgraded connection, which outlives hyper's, keeps
/// its slot, but a head asking to upgrade is never the door's (see
/// [`parse`]), so the connection that holds the slot outlives every request
/// the door answers.
pub(super) struct Visit {
    pub peer: SocketAddr,
    pub scheme: ClientScheme,
    /// How long each later head may take, from the last answer.
    pub header_read_timeout: Duration,
    /// When the first head is due (counted from the accept).
    pub head_due: Instant,
}

/// Serves `stream`'s hot requests until one is not, then hands the
/// connection on. The first head is waited for until `visit.head_due`.
pub(super) async fn serve<S>(
    mut stream: S,
    hot: &Arc<dyn HotRoutes>,
    visit: Visit,
    stop: &mut watch::Receiver<bool>,
) -> Left<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (peer, header_read_timeout) = (visit.peer, visit.header_read_timeout);
    // One wait for the stop for the connection's life (a wait made per
    // request would join and leave the watch's waiter list each time).
    let mut stopped = std::pin::pin!(stop.wait_for(|stop| *stop));
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    // The deadline of the head being waited for; `None` between a head and
    // its answer.
    let mut deadline = Some(visit.head_due);
    let mut first = true;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(visit.head_due));
    // The head handed to hyper is due when the first one was, if the door
    // answered none (a client must not win a second timeout by sending
    // what the door does not take), else a whole timeout from now.
    let head_due = |first: bool| {
        if first {
            visit.head_due
        } else {
            Instant::now() + header_read_timeout
        }
    };
    loop {
        // Every complete request already read is answered first.
        loop {
            match parse(&buf, &**hot) {
                Parsed::Hot(request) => {
                    first = false;
                    let (close, whole) = (request.close, request.whole);
                    let head = buf.split_to(request.len).freeze();
                    let body = buf.split_to(request.body).freeze();
                    let Some(mut parts) = request.parts(&head) else {
                        // A field hyper would take but `http` refuses: put
                        // the head back for hyper (the door cannot split it).
                        let mut back = BytesMut::from(&head[..]);
                        back.extend_from_slice(&body);
                        back.extend_from_slice(&buf);
                        return hand_off(stream, back, &out, head_due(first)).await;
                    };
                    let kept = if whole {
                        if visit.scheme == ClientScheme::Https {
                            parts.extensions.insert(ClientScheme::Https);
                        }
                        let body = if body.is_empty() {
                            axum::body::Body::empty()
                        } else {
                            axum::body::Body::from(body)
                        };
                        let req = axum::extract::Request::from_parts(parts, body);
                        let answer = hot.answer_whole(req, peer).await;
                        match write_streamed(&mut stream, answer, close, &mut out).await {
                            Ok(kept) => kept,
                            Err(_) => return Left::Closed,
                        }
                    } else {
                        let response = hot.answer(parts, peer).await;
                        encode(response, close, &mut out).await;
                        !close
                    };
                    if !kept {
                        if write_out(&mut stream, &out).await.is_ok() {
                            let _ = stream.shutdown().await;
                        }
                        return Left::Closed;
                    }
                    if out.len() >= MAX_OUT {
                        if write_out(&mut stream, &out).await.is_err() {
                            return Left::Closed;
                        }
                        out.clear();
                    }
                    deadline = None;
                }
                Parsed::Partial => break,
                Parsed::Other => return hand_off(stream, buf, &out, head_due(first)).await,
            }
        }
        if !out.is_empty() {
            if write_out(&mut stream, &out).await.is_err() {
                return Left::Closed;
            }
            out.clear();
        }
        if buf.len() >= MAX_BUF {
            // hyper's own limit: hyper answers it.
            return hand_off(stream, buf, &out, head_due(first)).await;
        }
        let due = *deadline.get_or_insert_with(|| Instant::now() + header_read_timeout);
        buf.reserve(READ_CHUNK);
        match read_until(&mut stream, &mut buf, timer.as_mut(), due, stopped.as_mut()).await {
            Read::Bytes => {}
            Read::Eof | Read::Stopped => return Left::Closed,
            Read::TimedOut => {
                if first {
                    metrics::counter!("anteroom_connections_closed_total", "reason" => "header_timeout")
                        .increment(1);
                }
                return Left::Closed;
            }
        }
    }
}

/// What the wait for bytes ended with.
enum Read {
    Bytes,
    Eof,
    TimedOut,
    Stopped,
}

/// Reads what the socket has into `buf`, waiting until `due` at most. The
/// timer is moved only when it would fire too early or was never set: one
/// per connection, its deadline kept lazily, so a kept-alive connection's
/// requests do not each register a new timer.
async fn read_until<S, F>(
    stream: &mut S,
    buf: &mut BytesMut,
    mut timer: Pin<&mut tokio::time::Sleep>,
    due: Instant,
    mut stopped: Pin<&mut F>,
) -> Read
where
    S: AsyncRead + Unpin,
    F: Future,
{
    poll_fn(|cx| {
        match poll_read_buf(stream, cx, buf) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Read::Eof),
            Poll::Ready(Ok(_)) => return Poll::Ready(Read::Bytes),
            Poll::Pending => {}
        }
        if stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Read::Stopped);
        }
        crate::clock::poll_due(timer.as_mut(), due, cx).map(|()| Read::TimedOut)
    })
    .await
}

/// One read of what the socket has into `buf`'s spare room. `read_buf` is
/// cancel safe: a pending read dropped here loses no bytes.
fn poll_read_buf<S: AsyncRead + Unpin>(
    stream: &mut S,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    use tokio::io::AsyncReadExt as _;
    let read = std::pin::pin!(stream.read_buf(buf));
    read.poll(cx)
}

/// Writes the answers and flushes them (a TLS stream holds records until
/// flushed).
async fn write_out<S: AsyncWrite + Unpin>(stream: &mut S, out: &[u8]) -> io::Result<()> {
    stream.write_all(out).await?;
    stream.flush().await
}

/// Writes the answers made so far, then gives the connection to hyper with
/// the unanswered bytes in front of it.
async fn hand_off<S>(mut stream: S, buf: BytesMut, out: &[u8], due: Instant) -> Left<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !out.is_empty() && write_out(&mut stream, out).await.is_err() {
        return Left::Closed;
    }
    Left::ToHyper(Prefixed::new(buf.freeze(), stream), due)
}

/// What the start of the read buffer holds.
enum Parsed {
    /// A complete head-only hot request, the door's to answer.
    Hot(HotHead),
    /// Not a whole head yet (or nothing at all).
    Partial,
    /// Anything else: hyper's.
    Other,
}

/// A head the door answers: its length in the buffer, whether it asked to
/// close, and where its target and fields lie in the head.
struct HotHead {
    len: usize,
    /// The body's length (`Content-Length`), all of it in the buffer
    /// behind the head; 0 for a `GET`.
    body: usize,
    close: bool,
    /// A request the hot routes take whole (the gate's, a queue call
    /// with a body), not head-only.
    whole: bool,
    method: Method,
    uri: Uri,
    fields: Vec<((usize, usize), (usize, usize))>,
}

impl HotHead {
    /// The request head as the hot route takes it, its target and values
    /// sharing the head's bytes (as hyper's do). `None` when `http` refuses
    /// a name or value httparse took.
    fn parts(self, head: &Bytes) -> Option<http::request::Parts> {
        let slice = |(start, end): (usize, usize)| head.slice(start..end);
        let mut headers = HeaderMap::with_capacity(self.fields.len());
        for &(name, value) in &self.fields {
            let name = HeaderName::from_bytes(&head[name.0..name.1]).ok()?;
            let value = HeaderValue::from_maybe_shared(slice(value)).ok()?;
            headers.append(name, value);
        }
        let mut request = http::Request::new(());
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = headers;
        Some(request.into_parts().0)
    }
}

/// Reads the head at the start of `buf`, if there is a whole one, and says
/// whether the door answers it.
fn parse(buf: &[u8], hot: &dyn HotRoutes) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    // Left uninitialised for the parser to fill: writing out a hundred
    // empty fields per request would cost as much as the parse.
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let method = match req.method {
        Some("GET") => Method::GET,
        Some("POST") => Method::POST,
        _ => return Parsed::Other,
    };
    if req.version != Some(1) {
        return Parsed::Other;
    }
    let Some(target) = req.path else {
        return Parsed::Other;
    };
    // Offsets into `buf` of what the head's slices point at.
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        (start, start + s.len())
    };
    // The target parsed once, as hyper parses it: for the match and for
    // the request.
    let Ok(uri) = target.parse::<Uri>() else {
        return Parsed::Other;
    };
    let whole = if method == Method::GET && hot.takes(&method, &uri) {
        false
    } else if hot.takes_whole(&method, &uri) {
        true
    } else {
        return Parsed::Other;
    };
    let mut close = false;
    let mut body: Option<usize> = None;
    let mut spans = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            // One plain length, small enough to be read with the head; a
            // list, a repeat or anything else is hyper's to judge.
            let n = std::str::from_utf8(h.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok());
            match (body, n) {
                (None, Some(n)) if n <= MAX_BODY => body = Some(n),
                _ => return Parsed::Other,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if !token.eq_ignore_ascii_case(b"keep-alive") && !token.is_empty() {
                    return Parsed::Other;
                }
            }
        }
        spans.push((at(name), at(h.value)));
    }
    let body = body.unwrap_or(0);
    if method == Method::GET && body > 0 {
        return Parsed::Other;
    }
    if buf.len() < len + body {
        // The body is not all here yet: waiting for it is hyper's (with its
        // body timeouts), from this very request.
        return Parsed::Other;
    }
    Parsed::Hot(HotHead {
        len,
        body,
        close,
        whole,
        method,
        uri,
        fields: spans,
    })
}

/// Appends `response` as HTTP/1.1 to `out`: the status line, its fields,
/// `content-length` and `date` as hyper adds them, `connection: close` when
/// the connection closes after it, and the body.
async fn encode(response: axum::response::Response, close: bool, out: &mut Vec<u8>) {
    let (mut parts, body) = response.into_parts();
    let body = whole_body(body).await;
    let status = parts.status;
    status_line(status, out);
    // A 204 and a 304 carry no body and no length (as hyper writes them).
    let bodiless = status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    if bodiless {
        without_framing(&mut parts.headers);
    }
    let written = fields(None, &parts.headers, out);
    if !bodiless && written.length.is_none() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    end_head(written.date, close, out);
    if !bodiless {
        out.extend_from_slice(&body);
    }
}

/// A bodiless answer's fields without a length or a coding: hyper writes
/// neither on a `1xx`, `204` or `304` (a `204` must carry none, and a
/// `304`'s length would be read as the length of the page it stands for),
/// though the router gives an empty body's answer a `content-length: 0`.
fn without_framing(headers: &mut HeaderMap) {
    headers.remove(CONTENT_LENGTH);
    headers.remove(http::header::TRANSFER_ENCODING);
}

fn status_line(status: StatusCode, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// What an answer's fields said as they were written: the head's end
/// depends on two of them, and noting them on the way costs less than
/// looking each up by name afterwards.
#[derive(Default)]
struct Written {
    /// The first `Content-Length` (as a lookup by name reads it), as a
    /// number when it is one.
    length: Option<Length>,
    date: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Length {
    Is(u64),
    /// A value that is not one plain number.
    Unreadable,
}

impl Length {
    fn of(value: &HeaderValue) -> Self {
        value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Self::Unreadable, Self::Is)
    }
}

/// Writes the passed fields, then the map's.
fn fields(passed: Option<&PassedFields>, headers: &HeaderMap, out: &mut Vec<u8>) -> Written {
    let mut written = Written::default();
    if let Some(passed) = passed {
        out.extend_from_slice(passed.lines());
        written.length = Some(Length::Is(passed.length()));
        written.date = passed.has_date();
    }
    for (name, value) in headers {
        if name == CONTENT_LENGTH {
            written.length.get_or_insert_with(|| Length::of(value));
        } else if name == DATE {
            written.date = true;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    written
}

/// `date` unless the answer has one, `connection: close` when closing,
/// and the blank line.
fn end_head(date: bool, close: bool, out: &mut Vec<u8>) {
    if !date {
        out.extend_from_slice(b"date: ");
        http_date(out);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Data frames up to this size are copied behind the head (one write for
/// a small answer); a larger one is written on its own, uncopied.
const COPY_FRAME: usize = 16 * 1024;

/// Writes `response`, whose body may stream, after the answers already in
/// `out`: framed by its `content-length` (the one it carries, or its exact
/// size), chunked when its length is unknown. `Ok(false)` when the
/// connection must close after it: asked to, or the body failed or broke
/// its length half-way (the client then sees the close, as hyper would
/// leave it).
async fn write_streamed<S>(
    stream: &mut S,
    answer: Answer,
    close: bool,
    out: &mut Vec<u8>,
) -> io::Result<bool>
where
    S: AsyncWrite + Unpin,
{
    use http_body_util::BodyExt as _;
    let Answer { response, passed } = answer;
    let (mut parts, mut body) = response.into_parts();
    let status = parts.status;
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if bodiless {
        without_framing(&mut parts.headers);
    }
    status_line(status, out);
    let written = fields(passed.as_ref(), &parts.headers, out);
    let declared = match written.length {
        Some(Length::Is(n)) => Some(n),
        _ => None,
    };
    let exact = hyper::body::Body::size_hint(&body).exact();
    let length = if bodiless {
        Some(0)
    } else {
        declared.or(exact)
    };
    if !bodiless && declared.is_none() {
        match exact {
            Some(n) => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            None => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
    }
    end_head(written.date, close, out);
    if bodiless {
        return Ok(!close);
    }
    let mut sent: u64 = 0;
    let mut failed = false;
    loop {
        // What the body has now goes behind the head without a wait; only
        // when it must wait is what is ready written first.
        let ready = {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            hyper::body::Body::poll_frame(Pin::new(&mut body), &mut cx)
        };
        let frame = match ready {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                write_out(stream, out).await?;
                out.clear();
                body.frame().await
            }
        };
        let data = match frame {
            None => break,
            Some(Err(_)) => {
                failed = true;
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => continue,
            },
        };
        sent += data.len() as u64;
        if length.is_some_and(|n| sent > n) {
            failed = true;
            break;
        }
        if length.is_none() {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        if data.len() > COPY_FRAME {
            write_out(stream, out).await?;
            out.clear();
            write_out(stream, &data).await?;
        } else {
            out.extend_from_slice(&data);
        }
        if length.is_none() {
            out.extend_from_slice(b"\r\n");
        }
        if out.len() >= MAX_OUT {
            // A body whose frames are all ready (an origin faster than the
            // client) goes out at the client's pace, not into memory.
            write_out(stream, out).await?;
            out.clear();
        }
    }
    if failed || length.is_some_and(|n| sent != n) {
        // A body cut short: what was sent stands, the connection closes.
        return Ok(false);
    }
    if length.is_none() {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    Ok(!close)
}

/// A hot answer's body, which is a whole buffer: taken in one poll, without
/// a waker, when it is (it always is); awaited whole otherwise.
async fn whole_body(mut body: axum::body::Body) -> Bytes {
    use http_body_util::BodyExt as _;
    let first = {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        hyper::body::Body::poll_frame(Pin::new(&mut body), &mut cx)
    };
    let first = match first {
        Poll::Ready(None) => return Bytes::new(),
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        Poll::Ready(Some(Err(_))) => return Bytes::new(),
        Poll::Pending => Bytes::new(),
    };
    if hyper::body::Body::is_end_stream(&body) {
        return first;
    }
    let rest = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if first.is_empty() {
        return rest;
    }
    let mut all = BytesMut::from(&first[..]);
    all.extend_from_slice(&rest);
    all.freeze()
}

thread_local! {
    /// The `date` field's text for the current second, made once a second
    /// per thread (hyper caches it the same way).
    static DATE_TEXT: std::cell::RefCell<(u64, [u8; 29])> =
        const { std::cell::RefCell::new((u64::MAX, [0; 29])) };
}

/// Appends the current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE_TEXT.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = secs;
            } else {
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.1);
    });
}

/// A stream with bytes already read from it put back in front: hyper reads
/// `prefix` first, then the stream. Writes go straight to the stream.
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Self { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                // Let go of the door's read buffer: a connection hyper
                // serves for long (a push stream) must not keep it.
                this.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
