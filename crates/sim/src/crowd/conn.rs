//! One HTTP/1.1 keep-alive connection of the crowd's fixed pool: a request
//! goes out on whichever connection is free, whoever the visitor, so a
//! million visitors need only `--connections` sockets. A connection the
//! server closed is opened again before the next request goes out on it.

use std::{net::SocketAddr, time::Duration};

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
}

/// What one exchange on a connection came to.
pub struct Exchange {
    pub conn: Conn,
    /// Whether a new socket was opened for it.
    pub connected: bool,
    pub result: Result<Answer, &'static str>,
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
        }
    }

    /// Sends `req` (opening the socket first when needed) and reads the whole answer.
    pub async fn exchange(self, req: Request<Full<Bytes>>) -> Exchange {
        let (node, addr) = (self.node, self.addr);
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
                            result: Err(e),
                        };
                    }
                }
            }
        };
        let result = tokio::time::timeout(REQUEST_TIMEOUT, async {
            sender.ready().await.map_err(|_| "transport")?;
            let resp = sender.send_request(req).await.map_err(|_| "transport")?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map_err(|_| "transport")?.to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        })
        .await
        .unwrap_or(Err("timeout"));
        // After an error the connection's state is unknown: open a fresh one.
        let conn = Conn {
            node,
            addr,
            sender: result.is_ok().then_some(sender),
        };
        Exchange {
            conn,
            connected,
            result,
        }
    }
}
