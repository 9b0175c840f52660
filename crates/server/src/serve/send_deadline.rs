//! A client stream whose writes fail once the client has taken no byte for
//! `server.send_timeout`.
//!
//! Every other limit of a connection is on what the client sends; without
//! this one a client that asks and never reads pins its connection slot
//! (and, through the gate, an origin connection) for good: a write waiting
//! for room in a full socket buffer waits forever, and a graceful close
//! waits for that write. Pipelined polls on a socket with a small receive
//! buffer were enough. The deadline runs only while a write waits for room,
//! and each byte the client takes starts it again, so a slow reader of a
//! long download or of a push stream is never cut off while it reads. It
//! wraps the TCP stream itself, beneath TLS: a TLS flush writes its buffer
//! in several socket writes and answers only once all are done, so above
//! TLS a slow reader's progress would not be seen.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `S`, its writes (and flushes and shutdown, which write for TLS) failing
/// with [`io::ErrorKind::TimedOut`] once one has waited `timeout` for room.
pub struct SendDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Kept once made, reset for each wait: most connections never wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// A write is waiting and `timer` runs for it.
    waiting: bool,
    /// The deadline passed: every later write fails at once, counted once.
    timed_out: bool,
    /// Bytes the client has taken so far, for the connection's watchdog
    /// (whether a close it waits for still makes progress).
    written: Arc<AtomicU64>,
}

/// A TLS listener looks at the first byte before the handshake.
impl<S: crate::tls::Peek + Sync> crate::tls::Peek for SendDeadline<S> {
    fn peek(&self, buf: &mut [u8]) -> impl std::future::Future<Output = io::Result<usize>> + Send {
        self.inner.peek(buf)
    }
}

impl<S> SendDeadline<S> {
    /// `inner` with its writes timed out after `timeout`, adding each byte
    /// the client takes to `written`.
    pub fn counting(inner: S, timeout: Duration, written: Arc<AtomicU64>) -> Self {
        Self {
            inner,
            timeout,
            timer: None,
            waiting: false,
            timed_out: false,
            written,
        }
    }

    fn taken(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r {
            self.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }

    fn done<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.wait(cx),
            ready => {
                self.waiting = false;
                ready
            }
        }
    }

    /// A write is waiting for room: pending until the deadline, then an
    /// error that ends the connection.
    fn wait<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.timed_out {
            return Poll::Ready(Err(timed_out()));
        }
        let deadline = Instant::now() + self.timeout;
        let timer = match &mut self.timer {
            Some(t) => {
                if !self.waiting {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.waiting = true;
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.timed_out = true;
                metrics::counter!("anteroom_connections_closed_total", "reason" => "send_timeout")
                    .increment(1);
                Poll::Ready(Err(timed_out()))
            }
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client took no byte within server.send_timeout",
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for SendDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.taken(&r);
        self.done(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.taken(&r);
        self.done(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.done(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.done(cx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const TIMEOUT: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_takes_fails_at_the_deadline() {
        let (ours, _client) = tokio::io::duplex(1024);
        let mut s = SendDeadline::counting(ours, TIMEOUT, Arc::default());
        let started = Instant::now();
        let e = s.write_all(&[0u8; 4096]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_never_cut_off_while_it_reads() {
        let (ours, mut client) = tokio::io::duplex(1024);
        let mut s = SendDeadline::counting(ours, TIMEOUT, Arc::default());
        // The client takes 512 bytes each 20 s: every wait is shorter than
        // the deadline, the whole far longer.
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 512];
            while got < 16 * 1024 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                got += client.read(&mut buf).await.unwrap();
            }
            got
        });
        let started = Instant::now();
        s.write_all(&[1u8; 16 * 1024]).await.unwrap();
        assert!(started.elapsed() > TIMEOUT * 10);
        assert_eq!(reader.await.unwrap(), 16 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_ended_leaves_no_deadline_behind() {
        let (ours, mut client) = tokio::io::duplex(1024);
        let mut s = SendDeadline::counting(ours, TIMEOUT, Arc::default());
        let drain = async {
            tokio::time::sleep(Duration::from_secs(25)).await;
            let mut buf = vec![0u8; 2048];
            client.read_exact(&mut buf).await.unwrap();
            client
        };
        // One wait of 25 s, then a long quiet time with nothing to send.
        let (w, mut client) = tokio::join!(s.write_all(&[2u8; 2048]), drain);
        w.unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        // The next wait has its own deadline, not the old one's.
        let drain = async {
            tokio::time::sleep(Duration::from_secs(25)).await;
            let mut buf = vec![0u8; 2048];
            client.read_exact(&mut buf).await.unwrap();
        };
        let (w, ()) = tokio::join!(s.write_all(&[3u8; 2048]), drain);
        w.unwrap();
    }
}
