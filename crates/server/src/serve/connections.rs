//! Connection accounting: how many client connections a listener may hold
//! (`server.max_connections`, capped by the descriptors the process has),
//! the clean refusal past that, accept errors without a busy loop, and
//! whether a connection is busy or idle.
//!
//! Architecture invariant: client connections never take the descriptors the
//! origin pool, the store and the files need. The public listener holds at
//! most half of what is left of `RLIMIT_NOFILE` after a fixed reserve (each
//! proxied request may hold one origin connection beside its client one;
//! a third, with a redirect listener beside HTTPS, which holds as many),
//! the admin listener a small fixed number inside the reserve; past that a
//! connection is accepted and refused at once (a few refusals at a time,
//! [`CLEAN_REFUSALS`], keep their descriptor briefly, also inside the
//! reserve). Checked by
//! `conn_flood::past_the_connection_cap_new_sockets_are_refused_cleanly_and_served_once_it_clears`.
//!
//! "One origin connection beside each client one" must hold for HTTP/2
//! too, whose connection multiplexes many requests: each origin request in
//! flight past a connection's first takes a slot of the listener, and a
//! connection has at most [`ORIGIN_REQUESTS_PER_CONNECTION`] in flight
//! ([`ConnectionSlot::origin_lease`]).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors kept for everything that is not a client connection: store
/// connections, database files, log output, reputation files, the runtime.
pub const DESCRIPTOR_RESERVE: u64 = 512;
/// Connections the admin listener may hold (inside the reserve's budget).
pub const ADMIN_MAX_CONNECTIONS: usize = 256;
/// A listener whose share of descriptors is below this refuses to start.
const MIN_CONNECTIONS: u64 = 16;

/// Per-listener connection limits and timeouts (all from `[server]`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The first request head must be complete this long after accept; later
    /// heads on a kept-alive HTTP/1 connection within this of the last answer.
    pub header_read_timeout: Duration,
    /// The longest wait for the next piece of a request body, and the time
    /// each 64 KiB of it may take.
    pub body_read_timeout: Duration,
    /// A write to a client that waits this long for it to take a byte
    /// fails, and the connection closes (see [`super::send_deadline`]).
    pub send_timeout: Duration,
    /// Open client connections this listener holds at most.
    pub max_connections: usize,
    /// HTTP/2 PING interval, and how long its answer may take.
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/2 gets a GOAWAY; idle HTTP/1 connections time out sooner, by
    /// `header_read_timeout`).
    pub http2_idle_timeout: Duration,
    /// How long a graceful stop waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Threads with their own event loop that serve this listener's
    /// connections (see [`super::workers`]); 0 serves them on the shared
    /// runtime.
    pub event_loops: usize,
    /// HTTP/1.1 only: the redirect listener, whose answers each close their
    /// connection. Offered HTTP/2 with prior knowledge there, hyper took
    /// `Connection: close` off the answer, and one request a minute kept
    /// the socket on a slot for good.
    pub http1_only: bool,
}

/// The descriptors this process may open: the soft `RLIMIT_NOFILE`, raised
/// to the hard limit first (the default soft limit of 1024 is far too small
/// for a gateway, and raising it needs no privilege).
pub fn descriptor_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum
        && limit.current.is_some_and(|soft| soft < hard)
    {
        limit.current = Some(hard);
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "could not raise RLIMIT_NOFILE to its hard limit");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// How many connections each listener may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub public: usize,
    pub admin: usize,
    /// The plain-HTTP redirect listener beside HTTPS (zero without one).
    pub redirect: usize,
}

/// The listeners' connection caps for `max_connections` and a process
/// allowed `nofile` descriptors: each public connection counts twice (its
/// origin connection beside it), and with a `redirect` listener beside
/// HTTPS, that listener may hold as many as the public one (a flash crowd
/// typing the bare name comes through it, and so do the ACME CA's
/// validations), each once.
pub fn connection_caps(max_connections: u64, nofile: u64, redirect: bool) -> Result<Caps, String> {
    let admin = ADMIN_MAX_CONNECTIONS as u64;
    let share = nofile.saturating_sub(DESCRIPTOR_RESERVE + admin) / (2 + u64::from(redirect));
    if share < MIN_CONNECTIONS.min(max_connections) {
        return Err(format!(
            "server.max_connections: the process may open only {nofile} file descriptors \
             (RLIMIT_NOFILE), too few for client connections beside the origin and store \
             pools; raise the limit (e.g. `LimitNOFILE=65536` in the service unit)"
        ));
    }
    let public = max_connections.min(share);
    if public < max_connections {
        tracing::warn!(
            max_connections,
            nofile,
            cap = public,
            "server.max_connections lowered to fit RLIMIT_NOFILE (after a reserve, the descriptors \
             are shared with the origin connections, and with the redirect listener's when there is one)"
        );
    }
    let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(Caps {
        public: to_usize(public),
        admin: to_usize(admin.min(max_connections.max(MIN_CONNECTIONS))),
        redirect: if redirect { to_usize(public) } else { 0 },
    })
}

/// Origin requests one client connection may have in flight at once. An
/// HTTP/1 connection has one at a time; an HTTP/2 connection multiplexes
/// up to `H2_MAX_STREAMS`, and each stream the gate forwards holds an
/// origin connection until its answer's body is sent, which a client that
/// never opens its flow-control window can put off for ever. A browser
/// spreads a page over six HTTP/1 connections; 32 leave room for a page's
/// assets beside a few long polls or downloads in other tabs, which share
/// one HTTP/2 connection.
pub const ORIGIN_REQUESTS_PER_CONNECTION: usize = 32;

/// The listener's slot for one connection, released when the socket closes.
/// Requests carry it so that an upgraded connection (a WebSocket tunnel),
/// which outlives hyper's connection, keeps its slot while it is open, and
/// so that the gate counts what the connection holds of the origin
/// ([`ConnectionSlot::origin_lease`]).
#[derive(Clone, Debug)]
pub struct ConnectionSlot {
    inner: Arc<Slot>,
}

#[derive(Debug)]
struct Slot {
    permit: OwnedSemaphorePermit,
    /// The connection's share of origin requests in flight.
    origin: Arc<Semaphore>,
    /// Whether an origin request rides on the connection's own permit.
    own_in_use: AtomicBool,
}

impl ConnectionSlot {
    pub fn new(permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner: Arc::new(Slot {
                permit,
                origin: Arc::new(Semaphore::new(ORIGIN_REQUESTS_PER_CONNECTION)),
                own_in_use: AtomicBool::new(false),
            }),
        }
    }

    /// Leave for one more request to the origin, held until its answer's
    /// body is sent, and whether it had to wait for it. Past the
    /// connection's share it waits up to `wait` for one of the connection's
    /// own requests to finish; `None` does not wait (a request with a body:
    /// its unread data would hold the connection's flow-control window, and
    /// the requests it waits for might need it to finish). The first
    /// request in flight rides on the connection's slot (the descriptor
    /// budget counts one origin connection beside each client connection);
    /// each further one takes a slot of the listener, as a connection of its
    /// own would, and when the listener holds `server.max_connections` it is
    /// refused at once, as a new connection would be.
    pub async fn origin_lease(
        &self,
        wait: Option<Duration>,
    ) -> Result<(OriginLease, bool), AtConnectionCap> {
        let origin = &self.inner.origin;
        let (share, waited) = match Arc::clone(origin).try_acquire_owned() {
            Ok(share) => (share, false),
            Err(_) => {
                let wait = wait.ok_or(AtConnectionCap)?;
                let share = tokio::time::timeout(wait, Arc::clone(origin).acquire_owned())
                    .await
                    .map_err(|_| AtConnectionCap)?
                    .map_err(|_| AtConnectionCap)?;
                (share, true)
            }
        };
        let extra = if self.inner.own_in_use.swap(true, Ordering::AcqRel) {
            let listener = Arc::clone(self.inner.permit.semaphore());
            match listener.try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::counter!("anteroom_connections_refused_total", "reason" => "max_connections")
                        .increment(1);
                    return Err(AtConnectionCap);
                }
            }
        } else {
            None
        };
        let lease = OriginLease {
            slot: Arc::clone(&self.inner),
            extra,
            _share: share,
        };
        Ok((lease, waited))
    }
}

/// One origin request's hold on its client connection's share and, past
/// the first, on a slot of the listener (see
/// [`ConnectionSlot::origin_lease`]).
#[derive(Debug)]
pub struct OriginLease {
    slot: Arc<Slot>,
    extra: Option<OwnedSemaphorePermit>,
    _share: OwnedSemaphorePermit,
}

impl Drop for OriginLease {
    fn drop(&mut self) {
        if self.extra.is_none() {
            self.slot.own_in_use.store(false, Ordering::Release);
        }
    }
}

/// An origin request refused: the listener holds `server.max_connections`,
/// or the connection its share of origin requests for longer than it may
/// wait.
#[derive(Debug)]
pub struct AtConnectionCap;

/// The answer to a connection over the cap: written once without waiting
/// (a client that does not read it simply sees the close).
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 80\r\n\r\n\
{\"error\":\"too_many_connections\",\"message\":\"the server is at its connection cap\"}";

/// Refusals answered cleanly at once, per listener: each holds its
/// descriptor for up to [`REFUSAL_WAIT`] (+ [`REFUSAL_LINGER`] for a client
/// that sent its request), out of the descriptor reserve.
pub const CLEAN_REFUSALS: usize = 64;
/// How long a refused connection may take to send its request: a client
/// sends it right behind the handshake, so it is here within a round trip.
const REFUSAL_WAIT: Duration = Duration::from_millis(100);
/// How long a refused connection is read after the answer, until the
/// client closes.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);

/// Refuses a connection over the cap: on a plain listener a `503` JSON,
/// then close (a TLS client just sees the close). While fewer than
/// [`CLEAN_REFUSALS`] are being answered (`answering` holds their permits),
/// the answer comes after the client's request, with a lingering close
/// (see [`answer_refusal`]); past that, as under a flood, it is written
/// once without waiting and the socket closed. Never awaits, so a flood
/// cannot slow the accept loop.
pub fn refuse(stream: TcpStream, cap: usize, plain: bool, answering: &Arc<Semaphore>) {
    metrics::counter!("anteroom_connections_refused_total", "reason" => "max_connections")
        .increment(1);
    tracing::debug!(
        cap,
        "connection refused: listener at server.max_connections"
    );
    if !plain {
        return;
    }
    match answering.clone().try_acquire_owned() {
        Ok(permit) => {
            tokio::spawn(async move {
                answer_refusal(stream).await;
                drop(permit);
            });
        }
        Err(_) => {
            let _ = stream.try_write(REFUSAL);
        }
    }
}

/// The clean refusal: the answer after the request, because many clients
/// (hyper's among them) take an answer that arrives before they have
/// written their request for a broken connection, not for a `503`; then
/// `FIN`, and the rest of the request read until the client closes,
/// because closing with unread bytes sends a reset, which can destroy the
/// answer before the client has read it. A client that sent nothing within
/// [`REFUSAL_WAIT`] gets the answer and the close at once.
async fn answer_refusal(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = [0u8; 4096];
    let asked = tokio::time::timeout(REFUSAL_WAIT, stream.read(&mut buf))
        .await
        .is_ok_and(|r| r.is_ok_and(|n| n > 0));
    if tokio::time::timeout(REFUSAL_WAIT, stream.write_all(REFUSAL))
        .await
        .is_err()
        || !asked
    {
        return;
    }
    let _ = stream.shutdown().await;
    let drain = async { while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}

/// Accept queue length asked of the kernel (capped by
/// `net.core.somaxconn`, 4096 by default since Linux 5.4). A flash crowd,
/// or a flood being refused, arrives faster than one accept loop takes
/// connections for a moment; a short queue drops their handshakes and each
/// visitor waits a second or more for the retransmission.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds a listener with a deep accept queue ([`LISTEN_BACKLOG`]).
pub fn bind(addr: std::net::SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std and tokio do on Unix: a restarted node may bind at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// After a failed accept. Out of descriptors (or kernel memory) the pending
/// connection stays in the backlog and the next accept would fail at once:
/// wait for one of our connections to close, at most 100 ms, instead of
/// spinning. Other errors concern one connection (aborted before accept).
pub async fn accept_failed(e: &io::Error, slots: &Arc<Semaphore>) {
    let exhausted = matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::MFILE.raw_os_error()
            || code == rustix::io::Errno::NFILE.raw_os_error()
            || code == rustix::io::Errno::NOBUFS.raw_os_error()
            || code == rustix::io::Errno::NOMEM.raw_os_error()
    );
    if exhausted {
        metrics::counter!("anteroom_connections_refused_total", "reason" => "descriptors")
            .increment(1);
        tracing::warn!(error = %e, "accept failed: out of descriptors; pausing accepts");
        let free_before = slots.available_permits();
        let wait = async {
            while slots.available_permits() <= free_before {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(100), wait).await;
    } else {
        tracing::debug!(error = %e, "accept failed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether a connection has had a request yet, how many are in flight and
/// since when it has had none; and its HTTP/2 answers' waits for the
/// client's window ([`SendWatch`]).
#[derive(Clone, Debug)]
pub struct Activity(Arc<ActivityInner>);

#[derive(Debug)]
struct ActivityInner {
    any_request: AtomicBool,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// What the send watches count from.
    epoch: Instant,
    /// Whether any answer was ever watched (an HTTP/2 connection), and
    /// the connection's watchdog woken for it (lock-free: it is polled at
    /// every wake-up of every connection).
    watched: AtomicBool,
    first_watch: futures::task::AtomicWaker,
    /// The HTTP/2 answers whose bodies are being sent.
    sending: Mutex<Vec<Weak<dyn Stall>>>,
}

impl Activity {
    pub fn new() -> Self {
        let now = Instant::now();
        Self(Arc::new(ActivityInner {
            any_request: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            epoch: now,
            watched: AtomicBool::new(false),
            first_watch: futures::task::AtomicWaker::new(),
            sending: Mutex::new(Vec::new()),
        }))
    }

    /// Watches an HTTP/2 answer's body, `held` (what its stall is cut
    /// from: the body and the request's [`Busy`]), from now until it is
    /// dropped (see [`SendWatch`]).
    pub fn watch_send<T: Send + 'static>(&self, held: T) -> Arc<SendWatch<T>> {
        let watch = Arc::new(SendWatch {
            since: AtomicU64::new(0),
            cut_at: AtomicU64::new(0),
            epoch: self.0.epoch,
            held: Mutex::new(Some(held)),
        });
        watch.owed();
        if !self.0.watched.load(Ordering::Relaxed) {
            self.0.watched.store(true, Ordering::Release);
            self.0.first_watch.wake();
        }
        let mut sending = crate::locks::lock(&self.0.sending);
        // Dropped watches are swept once they are as many as live ones can
        // be (a connection's streams), so the list stays short.
        if sending.len() >= SENDING_SWEEP {
            sending.retain(|w| w.strong_count() > 0);
        }
        let weak: Weak<dyn Stall> = Arc::downgrade(&(watch.clone() as Arc<dyn Stall>));
        sending.push(weak);
        watch
    }

    /// Completes once an answer has been watched here (only HTTP/2's
    /// are): an HTTP/1 connection's watchdog never wakes to look for
    /// stalls.
    pub fn first_watch(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.0.watched.load(Ordering::Acquire) {
                return std::task::Poll::Ready(());
            }
            self.0.first_watch.register(cx.waker());
            if self.0.watched.load(Ordering::Acquire) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }

    /// Cuts every answer that has waited `limit` or longer for hyper to
    /// take its next piece (see [`SendWatch`]); how many it cut, and how
    /// many cut at least `limit` ago are still open (hyper holds a cut
    /// stream, and what it took of it, until the client opens its window,
    /// which such a client never does).
    pub fn cut_stalled(&self, limit: Duration) -> (usize, usize) {
        let now = self.0.epoch.elapsed();
        let watched: Vec<Arc<dyn Stall>> = crate::locks::lock(&self.0.sending)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let cut = watched
            .iter()
            .filter(|w| w.cut_if_stalled(now, limit))
            .count();
        let stuck = watched
            .iter()
            .filter(|w| {
                w.cut_since()
                    .is_some_and(|t| now.saturating_sub(t) >= limit)
            })
            .count();
        (cut, stuck)
    }

    /// A request head arrived; the connection is busy until the guard drops.
    pub fn begin(&self) -> Busy {
        self.0.any_request.store(true, Ordering::Relaxed);
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.0.clone())
    }

    pub fn any_request(&self) -> bool {
        self.0.any_request.load(Ordering::Relaxed)
    }

    /// How long the connection has had no request in flight (zero if busy).
    pub fn idle_for(&self) -> Duration {
        if self.0.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        crate::locks::lock(&self.0.idle_since).elapsed()
    }
}

/// Watches kept before the dropped ones are swept: twice the streams an
/// HTTP/2 connection may have open.
const SENDING_SWEEP: usize = 512;

/// One HTTP/2 answer's body, from the answer's head on: whether hyper owes
/// it a poll, and since when, and what the answer holds (`held`: the body,
/// with the origin connection and the listener's slot it may hold, and the
/// request's [`Busy`]).
///
/// A client that never opens a stream's flow-control window is never sent
/// a byte of that stream's body, so hyper never polls it again and no
/// socket write waits (which is what `server.send_timeout` bounds for
/// HTTP/1): such streams held their origin connections, and their slots
/// of the listener, for as long as the client answered PINGs. An answer
/// that has waited `send_timeout` is cut: what it holds is dropped, and
/// hyper resets the stream if it ever polls it again. Only that stream:
/// the connection's other streams (the waiting room's push stream beside
/// a paused video) go on. A body that waits for its own source (a push
/// stream between events, a slow origin) was polled, and owes nothing.
pub struct SendWatch<T> {
    /// Milliseconds from the connection's epoch, plus one, since the body
    /// gave hyper a piece (or its head was made) and has not been polled
    /// since; zero while it has been.
    since: AtomicU64,
    /// Likewise, when it was cut; zero if it was not.
    cut_at: AtomicU64,
    epoch: Instant,
    held: Mutex<Option<T>>,
}

impl<T> std::fmt::Debug for SendWatch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendWatch")
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

impl<T> SendWatch<T> {
    fn now_mark(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// The body gave hyper a piece (or its head went out): the next poll
    /// waits for the client.
    pub fn owed(&self) {
        self.since.store(self.now_mark(), Ordering::Release);
    }

    /// hyper polled the body.
    pub fn paid(&self) {
        self.since.store(0, Ordering::Release);
    }

    /// What the answer holds, unless it was cut.
    pub fn held(&self) -> std::sync::MutexGuard<'_, Option<T>> {
        crate::locks::lock(&self.held)
    }
}

/// A mark of [`SendWatch`] as a time from the connection's epoch.
fn mark_to(t: u64) -> Option<Duration> {
    (t > 0).then(|| Duration::from_millis(t - 1))
}

/// A watched answer, as its connection's watchdog sees it.
trait Stall: Send + Sync + std::fmt::Debug {
    /// Drops what it holds if hyper has owed it a poll for `limit` as of
    /// `now` (from the connection's epoch), judged under its lock, so a
    /// poll that just took a piece is never cut after it; whether it did.
    fn cut_if_stalled(&self, now: Duration, limit: Duration) -> bool;
    /// When it was cut, if it was.
    fn cut_since(&self) -> Option<Duration>;
}

impl<T: Send> Stall for SendWatch<T> {
    fn cut_if_stalled(&self, now: Duration, limit: Duration) -> bool {
        let mut held = self.held();
        let stalled = mark_to(self.since.load(Ordering::Acquire))
            .is_some_and(|t| now.saturating_sub(t) >= limit);
        if !stalled || held.is_none() {
            return false;
        }
        let taken = held.take();
        self.paid();
        self.cut_at.store(self.now_mark(), Ordering::Release);
        drop(held);
        drop(taken);
        true
    }

    fn cut_since(&self) -> Option<Duration> {
        mark_to(self.cut_at.load(Ordering::Acquire))
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct Busy(Arc<ActivityInner>);

impl Drop for Busy {
    fn drop(&mut self) {
        *crate::locks::lock(&self.0.idle_since) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_leave_half_the_descriptors_after_the_reserve() {
        let caps = |max, nofile| {
            let c = connection_caps(max, nofile, false).unwrap();
            assert_eq!(c.redirect, 0);
            (c.public, c.admin)
        };
        assert_eq!(caps(50_000, 1_048_576), (50_000, 256));
        // 20000 descriptors: (20000 - 512 - 256) / 2 = 9616 client connections.
        assert_eq!(caps(50_000, 20_000), (9_616, 256));
        assert_eq!(caps(100, 20_000), (100, 100));
        assert!(connection_caps(50_000, 256, false).is_err());
    }

    /// The redirect listener beside HTTPS holds as many as the public one
    /// (it was held to the admin listener's 256, which a crowd arriving by
    /// the bare name, or a few hundred idle sockets, filled, failing the
    /// ACME CA's validations too), and both fit the descriptors.
    #[test]
    fn the_redirect_listener_holds_as_many_as_the_public_one() {
        let c = connection_caps(50_000, 1_048_576, true).unwrap();
        assert_eq!((c.public, c.admin, c.redirect), (50_000, 256, 50_000));
        // (20000 - 512 - 256) / 3 = 6410 each: 2 × 6410 + 6410 fit.
        let c = connection_caps(50_000, 20_000, true).unwrap();
        assert_eq!((c.public, c.redirect), (6_410, 6_410));
    }

    #[test]
    fn the_refusal_is_a_complete_json_answer() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "too_many_connections");
    }
}
