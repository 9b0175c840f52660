//! Event loops that own connections: a few threads, each running a
//! single-threaded tokio runtime, to which the accept loop hands each
//! accepted connection, round-robin, for its whole life.
//!
//! Why not the shared multi-threaded runtime: on the request path of a busy
//! gateway its coordination costs more than the request itself. A poll
//! answered there woke a parked worker or stole a task across threads on
//! most requests (reschedule interrupts, futex wake-ups and context
//! switches were a quarter of a poll's CPU in `perf`), while a connection
//! that stays on one thread with its own reactor, as nginx's workers do,
//! is read, answered and written without any thread being woken. What a
//! connection spawns (HTTP/2 streams, upgraded tunnels, the proxy's origin
//! connections) runs on the same loop. The store, the schedulers and the
//! admin listener stay on the shared runtime; a connection talks to them
//! through channels, as before.
//!
//! The cost: a connection cannot move to an idle core. Connections are
//! spread evenly as they arrive, and a request's work is microseconds, so
//! in practice the loops stay level; an operator who prefers work stealing
//! sets `server.event_loops = 0`.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// One accepted connection and what serves it, sent to a loop. The stream
/// travels as a std socket: it leaves the accepting runtime's reactor and
/// joins the loop's, so its readiness wakes the loop's thread and no other.
struct Job {
    stream: std::net::TcpStream,
    serve: Box<dyn FnOnce(TcpStream) + Send>,
}

thread_local! {
    /// Which event loop this thread is (`None` off the loops): the proxy
    /// keeps one origin pool per loop so an origin connection is driven by
    /// the thread whose requests use it.
    static LOOP_INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The event loop the calling thread runs, if it is one.
pub fn current_loop() -> Option<usize> {
    LOOP_INDEX.with(Cell::get)
}

/// The loops of one listener. Dropping it closes their queues: each loop
/// then ends, cancelling what it still runs (the listener's graceful stop
/// has already waited for requests in flight).
pub struct Workers {
    queues: Vec<mpsc::UnboundedSender<Job>>,
    threads: Vec<JoinHandle<()>>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `n` loops (at least one). A loop that cannot start is an
    /// error the listener reports at start.
    pub fn start(n: usize, name: &str) -> std::io::Result<Self> {
        let mut queues = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for index in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    LOOP_INDEX.with(|i| i.set(Some(index)));
                    runtime.block_on(async move {
                        while let Some(job) = rx.recv().await {
                            match TcpStream::from_std(job.stream) {
                                Ok(stream) => (job.serve)(stream),
                                Err(e) => {
                                    tracing::debug!(error = %e, "event loop: socket not registered")
                                }
                            }
                        }
                    });
                    // Whatever is left (a tunnel, a stream past the grace)
                    // is cancelled here, not waited for.
                    runtime.shutdown_timeout(Duration::from_millis(100));
                })?;
            queues.push(tx);
            threads.push(thread);
        }
        Ok(Self {
            queues,
            threads,
            next: AtomicUsize::new(0),
        })
    }

    /// Serves `stream` with `serve` on the next loop. Falls back to the
    /// calling runtime if the socket cannot leave it or the loop is gone,
    /// so a connection is never dropped for the hand-off's sake.
    pub fn spawn<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "event loop: socket left the reactor badly; closed");
                return;
            }
        };
        let job = Job {
            stream: std_stream,
            serve: Box::new(move |s| {
                tokio::spawn(serve(s));
            }),
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        if let Err(mpsc::error::SendError(job)) = self.queues[i].send(job) {
            match TcpStream::from_std(job.stream) {
                Ok(s) => (job.serve)(s),
                Err(e) => tracing::debug!(error = %e, "event loop gone and socket lost"),
            }
        }
    }

    /// Closes the loops and waits for their threads (off the async
    /// threads: a join blocks).
    pub async fn stop(mut self) {
        self.queues.clear();
        let threads = std::mem::take(&mut self.threads);
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}
