//! One HTTP/1.1 keep-alive connection of the crowd's fixed pool: a request
//! goes out on whichever connection is free, whoever the visitor, so a
//! million visitors need only `--connections` sockets. A connection the
//! server closed is opened again before the next request goes out on it.
//!
//! A kept connection the server closes as a request goes out on it (its
//! idle timeout, `server.header_read_timeout`, ran out meanwhile) fails that
//! request with no answer. A browser sends such a request again on a new
//! connection (RFC 9112, section 9.3.1: one never written, or an idempotent
//! one that got no answer), and so does the crowd, once: a request never
//! written always, a `GET` only when the connection had stood unused for
//! [`STALE_AFTER`]; each such retry is counted in the report
//! (`stale_retries`), never hidden.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, client::conn::http1::SendRequest, header::HeaderMap};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request gets this long for its answer, body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An answered request.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A connection slot of the pool, bound to one server node: open, or to be
/// opened at its next use.
pub struct Conn {
    /// Which of the run's nodes (its index in `--target`) it goes to.
    pub node: usize,
    addr: SocketAddr,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// When its last answer came (an open connection only).
    answered_at: Option<Instant>,
}

/// How long a kept connection must have stood unused before a request it
/// closes unanswered counts as the server's idle close: one in steady use
/// is never closed for idling, and there an unanswered request is the
/// server's fault (a dropped connection), an error to count.
const STALE_AFTER: Duration = Duration::from_secs(1);

/// What one exchange on a connection came to.
pub struct Exchange {
    pub conn: Conn,
    /// Whether a new socket was opened for it.
    pub connected: bool,
    /// Whether it was sent again on a new socket after the kept one it
    /// first went out on closed unanswered.
    pub retried: bool,
    pub result: Result<Answer, &'static str>,
}

/// How a request on one connection failed.
enum Failed {
    /// Never written: the connection was closed first (the request is
    /// given back).
    Unsent(Box<Request<Full<Bytes>>>),
    /// Written, and the connection closed before an answer's head.
    Unanswered,
    /// The answer broke off, or anything else.
    Broken,
}

/// Sends `req` on `sender` and reads the whole answer.
async fn send_on(
    sender: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<Answer, Failed> {
    if sender.ready().await.is_err() {
        return Err(Failed::Unsent(Box::new(req)));
    }
    let resp = match sender.try_send_request(req).await {
        Ok(resp) => resp,
        Err(mut e) => {
            return Err(match e.take_message() {
                Some(req) => Failed::Unsent(Box::new(req)),
                None if e.error().is_incomplete_message() => Failed::Unanswered,
                None => Failed::Broken,
            });
        }
    };
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|_| Failed::Broken)?.to_bytes();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// A copy of an idempotent request, to send again if it goes unanswered.
fn spare(req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return None;
    }
    let mut copy = Request::new(Full::new(Bytes::new()));
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

pub(super) async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, &'static str> {
    let stream = TcpStream::connect(addr).await.map_err(|_| "connect")?;
    // Small requests and answers: no Nagle delay.
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| "connect")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl Conn {
    /// A slot to node `node` at `addr`, opened at its first use.
    pub fn to(node: usize, addr: SocketAddr) -> Self {
        Conn {
            node,
            addr,
            sender: None,
            answered_at: None,
        }
    }

    /// Sends `req` (opening the socket first when needed) and reads the whole answer.
    pub async fn exchange(self, req: Request<Full<Bytes>>) -> Exchange {
        let (node, addr) = (self.node, self.addr);
        let idle = self.answered_at.map(|at| at.elapsed());
        let mut connected = false;
        let mut sender = match self.sender {
            Some(s) if !s.is_closed() => s,
            _ => {
                connected = true;
                match connect(addr).await {
                    Ok(s) => s,
                    Err(e) => {
                        return Exchange {
                            conn: Conn::to(node, addr),
                            connected,
                            retried: false,
                            result: Err(e),
                        };
                    }
                }
            }
        };
        // Only a kept connection that stood unused can have been closed
        // for idling as the request went out.
        let stale = !connected && idle.is_some_and(|idle| idle >= STALE_AFTER);
        let spare = if stale { spare(&req) } else { None };
        let mut retried = false;
        let result = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let again = match (send_on(&mut sender, req).await, spare) {
                (Ok(answer), _) => return Ok(answer),
                (Err(Failed::Unsent(req)), _) if !connected => *req,
                (Err(Failed::Unanswered), Some(copy)) => copy,
                _ => return Err("transport"),
            };
            retried = true;
            sender = connect(addr).await?;
            send_on(&mut sender, again).await.map_err(|_| "transport")
        })
        .await
        .unwrap_or(Err("timeout"));
        // After an error the connection's state is unknown: open a fresh one.
        let conn = Conn {
            node,
            addr,
            sender: result.is_ok().then_some(sender),
            answered_at: Some(Instant::now()),
        };
        Exchange {
            conn,
            connected: connected || retried,
            retried,
            result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Reads one request head (these requests have no body).
    async fn read_head(s: &mut TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed mid-head");
            head.push(byte[0]);
        }
    }

    /// A server whose first connection answers one request, then reads the
    /// next and closes without an answer (its idle timeout running out as
    /// the request arrives), and whose later connections answer.
    async fn closes_the_second_request_unanswered() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut first, _) = listener.accept().await.unwrap();
            read_head(&mut first).await;
            first
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            read_head(&mut first).await;
            drop(first);
            loop {
                let (mut next, _) = listener.accept().await.unwrap();
                read_head(&mut next).await;
                next.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain")
                    .await
                    .unwrap();
            }
        });
        addr
    }

    fn request(method: hyper::Method, addr: SocketAddr) -> Request<Full<Bytes>> {
        Request::builder()
            .method(method)
            .uri("/api/queue/position")
            .header("host", addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    #[tokio::test]
    async fn a_get_on_a_kept_connection_closed_unanswered_is_sent_again_once_and_counted() {
        let addr = closes_the_second_request_unanswered().await;
        let first = Conn::to(0, addr)
            .exchange(request(hyper::Method::GET, addr))
            .await;
        assert!(first.connected && !first.retried);
        assert_eq!(first.result.as_ref().unwrap().body, "ok");
        tokio::time::sleep(STALE_AFTER).await;
        let second = first.conn.exchange(request(hyper::Method::GET, addr)).await;
        assert!(second.retried, "not sent again");
        assert!(second.connected, "the retry's socket is a new one");
        assert_eq!(second.result.as_ref().unwrap().body, "again");
    }

    #[tokio::test]
    async fn a_post_that_went_out_unanswered_is_an_error_not_sent_again() {
        let addr = closes_the_second_request_unanswered().await;
        let first = Conn::to(0, addr)
            .exchange(request(hyper::Method::GET, addr))
            .await;
        assert!(first.result.is_ok());
        tokio::time::sleep(STALE_AFTER).await;
        let second = first
            .conn
            .exchange(request(hyper::Method::POST, addr))
            .await;
        assert!(
            !second.retried,
            "a POST that may have been acted on was sent again"
        );
        assert_eq!(second.result.err(), Some("transport"));
    }

    /// On a connection in steady use an unanswered request is the server
    /// dropping it, not an idle close: an error, not sent again.
    #[tokio::test]
    async fn a_get_a_busy_connection_drops_unanswered_is_an_error() {
        let addr = closes_the_second_request_unanswered().await;
        let first = Conn::to(0, addr)
            .exchange(request(hyper::Method::GET, addr))
            .await;
        assert!(first.result.is_ok());
        let second = first.conn.exchange(request(hyper::Method::GET, addr)).await;
        assert!(
            !second.retried,
            "a dropped request on a busy connection was sent again"
        );
        assert_eq!(second.result.err(), Some("transport"));
    }
}
