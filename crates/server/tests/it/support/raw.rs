//! HTTP/1.1 on raw sockets, for tests that must control every byte and
//! every connection: a request head written by hand, one answer read by
//! `content-length`, a connect that rides out a full listen backlog.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::TcpStream;

/// The start of a request head (request line, `Host`, `Accept`), each line
/// ended; the caller adds headers and the blank line.
pub fn head(host: SocketAddr, request_line: &str) -> String {
    format!("{request_line}\r\nHost: {host}\r\nAccept: application/json\r\n")
}

/// One answer read off a raw socket: status and body (by `content-length`,
/// which every answer under test carries); `None` if the socket closes first.
pub async fn read_response<S: AsyncRead + Unpin>(s: &mut S) -> Option<(u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                if s.read_buf(&mut buf).await.ok()? == 0 {
                    return None;
                }
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
            return Some((status, body));
        }
        if s.read_buf(&mut buf).await.ok()? == 0 {
            return None;
        }
    }
}

/// Connects, retrying for up to 20 s while the listen backlog is full (a
/// flood opens thousands at once; a dropped SYN is the kernel's business).
pub async fn connect(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => return s,
            Err(e) => {
                assert!(Instant::now() < deadline, "connect to {addr}: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Connects to `addr` from the loopback address `from` (Linux has the whole
/// 127/8): for tests that must tell the server's peer apart from 127.0.0.1,
/// which every other test connects from and a lost peer reads as.
pub async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(format!("{from}:0").parse().unwrap())
        .expect("cannot bind a 127/8 address (Linux has them all)");
    socket.connect(addr).await.unwrap()
}
