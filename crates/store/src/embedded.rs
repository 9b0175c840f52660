//! The embedded backend: a durable single-node queue store on local disk.
//!
//! Every event has one memory (an order-statistic index, see [`index`])
//! changed by one writer at a time under its lock, an actor thread (see
//! [`actor`]) for the operations that touch many members, and a committer
//! that makes each batch of changes durable in the event's write-ahead log
//! (see [`wal`]) and checkpoints them into its redb file (see [`disk`]).
//! Single-member operations (join, redeem, release…) are applied on their
//! caller's thread, the rest by the actor; either way they are acknowledged
//! only after their group commit. Reads (status, length, stats,
//! revocations) lock the event's memory directly, so a position poll never
//! waits for a commit. Architecture invariant: memory never shows a change
//! that is not committed or handed to the committer in the batch waiting
//! for it; if a write fails, the event answers unavailable (drain) until its
//! file is reopened and memory rebuilt from it (see [`commit`]; the tests in
//! `faults.rs`).

mod actor;
mod batch_policy;
mod commit;
mod disk;
#[cfg(test)]
pub(crate) mod faults;
mod handoff;
mod huge;
mod index;
mod load;
mod stall;
mod state;
mod table;
mod upgrade;
mod wal;
mod writes;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use anteroom_core::phase::AdminState;
use anteroom_core::score::JoinScoring;
use arc_swap::ArcSwap;
use async_trait::async_trait;
use redb::Database;
use tokio::sync::oneshot;

use self::actor::{Actor, Op, ReplyTo, lock};
use self::handoff::Pusher;
pub use self::stall::{Holding, Stall};
use self::state::EventState;
use crate::{
    Admission, AdmitRequest, ConfigSet, EventId, EventStats, ExpireRequest, Expired, JoinOutcome,
    MemberState, Nonce, QueueStore, RedeemOutcome, Result, Revocation, ShareGrant, ShareRequest,
    StoreError, Touch, Unavailable, UnavailableKind, check_member, check_node,
};

/// Settings of the embedded store.
#[derive(Clone)]
pub struct EmbeddedOptions {
    /// The canonical clock, µs since the Unix epoch (the node's clock by default).
    pub clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    /// Most commands one group commit takes.
    pub max_batch: usize,
    /// The longest a call waits for its event's disk (`store.timeout`): a
    /// write the disk has held longer makes the event unavailable (see
    /// [`stall`]) until the disk finishes it.
    pub timeout: Duration,
    /// redb page cache per event file, in bytes. Reads are served from memory,
    /// so a small cache only slows start-up scans down a little.
    pub cache_bytes: usize,
    /// Write failures on command, for the store's own tests.
    #[cfg(test)]
    pub faults: Option<Arc<faults::Faults>>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(system_clock_us),
            max_batch: 4096,
            timeout: Duration::from_secs(1),
            // The cache mostly holds the B-tree paths that commits touch; the
            // start-up scan reads each page once, so a bigger cache would only
            // add resident memory.
            cache_bytes: 4 << 20,
            #[cfg(test)]
            faults: None,
        }
    }
}

impl fmt::Debug for EmbeddedOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedOptions")
            .field("max_batch", &self.max_batch)
            .field("timeout", &self.timeout)
            .field("cache_bytes", &self.cache_bytes)
            .finish_non_exhaustive()
    }
}

/// The node's wall clock: this is the edge where the embedded store's
/// canonical time comes from (tests inject their own).
pub fn system_clock_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// A read-only look at one event's queue, taken under the event's lock by
/// [`EmbeddedStore::with_queue`]: ranks at the cost of the index itself,
/// without the async call path of [`QueueStore::status`].
pub struct QueueView<'a> {
    st: &'a EventState,
}

impl QueueView<'_> {
    /// Waiters ahead of `member`, or `None` if it is not waiting.
    pub fn rank(&self, member: &str) -> Option<u64> {
        self.st.rank(member)
    }

    /// Waiters in the queue.
    pub fn len(&self) -> u64 {
        self.st.order.len() as u64
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.st.order.len() == 0
    }
}

/// One live event: its memory and the way to its actor.
struct EventHandle {
    state: Arc<Mutex<EventState>>,
    /// Where operations applied on their callers' threads hand their
    /// changes to the committer (see `actor::apply_inline`).
    to_disk: Pusher,
    tx: Mutex<Option<Sender<Op>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The write the event's committer has under way (see [`stall`]).
    stall: Arc<stall::Stall>,
}

struct Inner {
    dir: PathBuf,
    opts: EmbeddedOptions,
    /// The shared meta file; `None` after a failed write until the next
    /// call reopens it (redb refuses every call after an I/O error).
    meta: Mutex<Option<Database>>,
    meta_path: PathBuf,
    /// The meta file's write under way (see [`stall`]): an operator's
    /// pause, a stored config or the audit trail on a hung disk is
    /// answered unavailable after the store's timeout, as an event's call
    /// is, never left waiting with the request and a blocking thread.
    meta_stall: stall::Stall,
    /// The events' handles, changed under this lock (an event started or
    /// deleted) and published to `published` as each change is made.
    events: Mutex<HashMap<EventId, Arc<EventHandle>>>,
    /// What `events` holds, read without a lock: every store call of every
    /// request finds its event here, and one lock shared by the event loops
    /// (with a reference count taken and dropped per call) moved its cache
    /// line from core to core on nearly every request.
    published: ArcSwap<HashMap<EventId, Arc<EventHandle>>>,
    /// Events whose deletion is under way (see [`Inner::deleting`]),
    /// each with the deletion's token: the deletion holds the token until
    /// its last step is done, however its caller fared. Added under
    /// `events`' lock.
    deletions: Mutex<HashMap<EventId, Weak<()>>>,
    /// First starts of events under way, each on a thread of its own (see
    /// [`EmbeddedStore::event`]), changed under `events`' lock.
    starts: Mutex<HashMap<EventId, Arc<Starting>>>,
    admin: Mutex<HashMap<EventId, AdminState>>,
    /// Tick and batch guards (`claim_tick`): when each was claimed and
    /// until when it holds, µs.
    ticks: Mutex<HashMap<(EventId, u64), (i64, i64)>>,
    /// Per event, the nodes' holds (`hold_share`). In memory: one
    /// process is the whole cluster here, so the holds only keep the
    /// contract (a restart forgets them, and nobody else was counting).
    shares: Mutex<HashMap<EventId, Holds>>,
    /// Per event, what its batch under way owes (`set_batch_owed`):
    /// `(start_ms, owed, kept until µs)`. In memory, advice for the wait
    /// estimate that a restart may forget.
    batch_owed: Mutex<HashMap<EventId, (i64, u64, i64)>>,
}

/// An event's first start under way: its callers wait for it, at most the
/// store's timeout from when it began.
struct Starting {
    began: std::time::Instant,
    /// The handle, or why the start failed (each waiter gets a copy).
    done: Mutex<Option<Result<Arc<EventHandle>>>>,
    /// Wakes the threads waiting (see [`Starting::wait`]).
    finished: std::sync::Condvar,
    /// Wakes the tasks awaiting (see [`Starting::wait_async`]).
    awaited: tokio::sync::Notify,
}

/// An event found running, or its first start under way.
enum Found {
    Running(Arc<EventHandle>),
    Starting(Arc<Starting>),
}

impl Starting {
    /// Until the start has ended, however long the disk takes (a deletion
    /// waits so, as it waits for an actor to stop).
    fn wait_ended(&self) {
        let mut done = locked(&self.done);
        while done.is_none() {
            done = self.finished.wait(done).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// How the start ended, if it has.
    fn outcome(&self) -> Option<Result<Arc<EventHandle>>> {
        match locked(&self.done).as_ref()? {
            Ok(h) => Some(Ok(h.clone())),
            Err(e) => Some(Err(copy_error(e))),
        }
    }

    /// [`Self::wait`] for a task: the thread goes on with other tasks.
    async fn wait_async(&self, id: &EventId, limit: Duration) -> Result<Arc<EventHandle>> {
        let deadline = tokio::time::Instant::from_std(self.began + limit);
        loop {
            let ended = self.awaited.notified();
            tokio::pin!(ended);
            // Listening before looking: an end between the two still wakes.
            ended.as_mut().enable();
            if let Some(outcome) = self.outcome() {
                return outcome;
            }
            // A start already past its time is refused without a timer:
            // every call to an event whose disk holds its start comes here.
            if self.began.elapsed() >= limit {
                return Err(stall::hung(id, self.began.elapsed()));
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self
                    .outcome()
                    .unwrap_or_else(|| Err(stall::hung(id, self.began.elapsed())));
            }
        }
    }

    fn wait(&self, id: &EventId, limit: Duration) -> Result<Arc<EventHandle>> {
        let deadline = self.began + limit;
        let mut done = locked(&self.done);
        loop {
            match done.as_ref() {
                Some(Ok(h)) => return Ok(h.clone()),
                Some(Err(e)) => return Err(copy_error(e)),
                None => {}
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(stall::hung(id, self.began.elapsed()));
            }
            done = self
                .finished
                .wait_timeout(done, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// A copy of `e` (a store error is not `Clone`: the error beneath an
/// unavailable one is shared, the texts copied).
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(u) => StoreError::Unavailable(u.clone()),
        StoreError::InvalidInput(what) => StoreError::InvalidInput(what),
        StoreError::Corrupt(why) => StoreError::Corrupt(why.clone()),
        StoreError::Storage(why) => StoreError::Storage(why.clone()),
    }
}

/// One event's holds, by node id.
type Holds = HashMap<String, Hold>;

/// Forgets the holds lapsed at `now_us` and sums what the nodes other than
/// `node` hold.
fn other_holds(holds: &mut Holds, node: &str, now_us: i64) -> u64 {
    holds.retain(|_, h| h.expires_at_us > now_us);
    holds
        .iter()
        .filter(|(n, _)| *n != node)
        .fold(0u64, |sum, (_, h)| {
            sum.saturating_add(h.reserve).saturating_add(h.pending)
        })
}

/// One node's hold on an event's capacity (see [`QueueStore::hold_share`]).
struct Hold {
    reserve: u64,
    pending: u64,
    expires_at_us: i64,
}

/// The embedded store. Cheap to clone; dropping the last clone stops every
/// actor after its last commit and closes the files.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A blocking task of the store that did not finish (panicked or cancelled).
fn stopped(what: &str, e: tokio::task::JoinError) -> StoreError {
    Unavailable::new(UnavailableKind::Stopped, format!("{what}: {e}"))
        .with_source(e)
        .into()
}

impl Inner {
    /// Whether a deletion of `id` is under way. A call for such an event is
    /// refused rather than start the event again from the files about to
    /// go (which brought the deleted event's waiters and sessions back into
    /// the next event of its id, and let that event write into unlinked
    /// files); so is a write of its admin state, stored config or anchor,
    /// which the deletion's last step would wipe after it was acknowledged.
    fn deleting(&self, id: &EventId) -> bool {
        locked(&self.deletions)
            .get(id)
            .is_some_and(|token| token.strong_count() > 0)
    }

    /// `Err` while a deletion of `id` is under way (see [`Self::deleting`]).
    fn not_deleting(&self, id: &EventId) -> Result<()> {
        if self.deleting(id) {
            return Err(being_deleted(id));
        }
        Ok(())
    }
}

fn being_deleted(id: &EventId) -> StoreError {
    StoreError::unavailable(
        UnavailableKind::Stopped,
        format!("event {id}: being deleted"),
    )
}

/// What an event's deletion is waiting for, for its caller to tell a disk
/// that holds a write from work merely under way (see
/// [`EmbeddedStore::delete_event`]).
#[derive(Default)]
struct DeletionWatch {
    /// The deletion's own waits on the disk: a first start of the event
    /// under way (since it began), the files' removal.
    own: stall::Stall,
    /// The stopping actor's writes: its last batches, last checkpoint and
    /// the file's close.
    actor: Option<Arc<stall::Stall>>,
    /// Set once the deletion has come to the meta file, whose writer is
    /// then what it waits for.
    at_meta: AtomicBool,
}

fn actor_stopped(id: &EventId) -> StoreError {
    StoreError::unavailable(
        UnavailableKind::Stopped,
        format!("event {id}: actor stopped"),
    )
}

/// A disk that cannot take an event's file now may later: the event drains
/// meanwhile, so a storage failure is answered as an unavailable disk.
fn disk_down(e: StoreError) -> StoreError {
    match e {
        StoreError::Storage(why) => StoreError::unavailable(UnavailableKind::Disk, why),
        other => other,
    }
}

fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Storage(format!("{}: {e}", path.display()))
}

impl EmbeddedStore {
    /// Opens (creating if needed) the data directory and rebuilds every
    /// event's queue from disk. A directory that is not ours, or a damaged
    /// file, is refused with [`StoreError::Corrupt`] naming it; a disk that
    /// cannot be written is [`StoreError::Storage`].
    pub async fn open(path: &Path, opts: EmbeddedOptions) -> Result<Self> {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || Self::open_blocking(&path, opts))
            .await
            .map_err(|e| stopped("store open task failed", e))?
    }

    fn open_blocking(dir: &Path, opts: EmbeddedOptions) -> Result<Self> {
        if dir.exists() && !dir.is_dir() {
            return Err(StoreError::Corrupt(format!(
                "{}: exists and is not a directory",
                dir.display()
            )));
        }
        let meta_path = dir.join("meta.redb");
        let events_dir = dir.join("events");
        if dir.is_dir() && !meta_path.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
            if entries.next().is_some() {
                return Err(StoreError::Corrupt(format!(
                    "{}: not an anteroom data directory (no meta.redb, but not empty)",
                    dir.display()
                )));
            }
        }
        std::fs::create_dir_all(&events_dir).map_err(|e| io_error(&events_dir, e))?;
        refuse_emptied_meta(&meta_path, &events_dir)?;
        let meta = disk::open_file(&meta_path, disk::META_MAGIC, &meta_files(&opts))?;
        let admin = read_admin(&meta, &meta_path)?;
        let store = Self {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                opts,
                meta: Mutex::new(Some(meta)),
                meta_stall: stall::Stall::default(),
                meta_path,
                events: Mutex::new(HashMap::new()),
                published: ArcSwap::default(),
                deletions: Mutex::new(HashMap::new()),
                starts: Mutex::new(HashMap::new()),
                admin: Mutex::new(admin),
                ticks: Mutex::new(HashMap::new()),
                shares: Mutex::new(HashMap::new()),
                batch_owed: Mutex::new(HashMap::new()),
            }),
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&events_dir).map_err(|e| io_error(&events_dir, e))? {
            let p = entry.map_err(|e| io_error(&events_dir, e))?.path();
            // An event's write-ahead log sits beside its file and is opened
            // with it; one without a file is a deleted event's, which the
            // next file of that id never reads (see `wal::open_event`).
            if wal::is_log_file(&p) {
                continue;
            }
            let id = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".redb"))
                .and_then(|n| EventId::new(n).ok())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("{}: not an anteroom event file", p.display()))
                })?;
            found.push(id);
        }
        // Events load in parallel: each is its own file and its own index.
        let loaded: Vec<Result<(EventId, Arc<EventHandle>)>> = std::thread::scope(|s| {
            let jobs: Vec<_> = found
                .into_iter()
                .map(|id| s.spawn(|| store.start_event(&id).map(|h| (id, h))))
                .collect();
            jobs.into_iter()
                .map(|j| {
                    j.join()
                        .unwrap_or_else(|_| Err(StoreError::Corrupt("event load panicked".into())))
                })
                .collect()
        });
        let mut events = locked(&store.inner.events);
        for r in loaded {
            let (id, h) = r?;
            events.insert(id, h);
        }
        store.publish(&events);
        drop(events);
        Ok(store)
    }

    fn files(&self) -> disk::FileOpts {
        disk::FileOpts {
            cache_bytes: self.inner.opts.cache_bytes,
            #[cfg(test)]
            faults: self.inner.opts.faults.clone(),
        }
    }

    fn event_path(&self, id: &EventId) -> PathBuf {
        self.inner.dir.join("events").join(format!("{id}.redb"))
    }

    /// Opens an event's file, rebuilds its memory and starts its actor.
    fn start_event(&self, id: &EventId) -> Result<Arc<EventHandle>> {
        let path = self.event_path(id);
        let files = self.files();
        let (db, wal) = wal::open_event(&path, &files, None)?;
        let mut st = load::load(&db, &path, self.clock_us())?;
        st.admin = locked(&self.inner.admin)
            .get(id)
            .copied()
            .unwrap_or_default();
        let state = Arc::new(Mutex::new(st));
        let (tx, rx) = std::sync::mpsc::channel();
        let max_batch = self.inner.opts.max_batch.max(1);
        let (to_disk, from_actor) = handoff::handoff(max_batch);
        let pusher = to_disk.pusher();
        let stall = Arc::new(stall::Stall::default());
        let actor = Actor {
            db,
            wal,
            to_disk,
            from_actor,
            path,
            files,
            state: state.clone(),
            clock: self.inner.opts.clock.clone(),
            max_batch,
            stall: stall.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("event-{id}"))
            .spawn(move || actor.run(rx))
            .map_err(|e| StoreError::Storage(format!("cannot start event actor: {e}")))?;
        Ok(Arc::new(EventHandle {
            state,
            to_disk: pusher,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            stall,
        }))
    }

    /// The event's handle, starting it on first use, the start waited for
    /// on this thread (the request path looks in `published` first and
    /// awaits a start instead: see [`Self::with_event`]).
    fn event(&self, id: &EventId) -> Result<Arc<EventHandle>> {
        match self.find(id)? {
            Found::Running(h) => Ok(h),
            Found::Starting(start) => start.wait(id, self.inner.opts.timeout),
        }
    }

    /// [`Self::event`], the start awaited without holding the thread.
    ///
    /// A first start opens or creates the event's file, rare and quick on
    /// a disk that answers; on one that hangs it never ends. So it runs on
    /// a thread of its own, with no lock held, and its callers await it at
    /// most the store's timeout from when it began, each holding nothing
    /// meanwhile: not the events' lock, not its event loop, so every other
    /// connection of that loop, and every other event, goes on. A disk that
    /// cannot take the new file now may later: the event drains meanwhile,
    /// and the start, once done, serves the next call.
    async fn started(&self, id: &EventId) -> Result<Arc<EventHandle>> {
        match self.find(id)? {
            Found::Running(h) => Ok(h),
            Found::Starting(start) => start.wait_async(id, self.inner.opts.timeout).await,
        }
    }

    /// The event's handle if it runs, else its first start, begun now if
    /// none is under way.
    fn find(&self, id: &EventId) -> Result<Found> {
        let starting = {
            let events = locked(&self.inner.events);
            if let Some(h) = events.get(id) {
                return Ok(Found::Running(h.clone()));
            }
            self.inner.not_deleting(id)?;
            let mut starts = locked(&self.inner.starts);
            match starts.get(id) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Starting {
                        began: std::time::Instant::now(),
                        done: Mutex::new(None),
                        finished: std::sync::Condvar::new(),
                        awaited: tokio::sync::Notify::new(),
                    });
                    let (store, event, start) = (self.clone(), id.clone(), s.clone());
                    std::thread::Builder::new()
                        .name(format!("start-{id}"))
                        .spawn(move || store.finish_start(&event, &start))
                        .map_err(|e| {
                            StoreError::Storage(format!("cannot start event {id}: {e}"))
                        })?;
                    starts.insert(id.clone(), s.clone());
                    s
                }
            }
        };
        Ok(Found::Starting(starting))
    }

    /// Runs an event's first start (see [`Self::event`]) and makes its
    /// handle what later calls find, unless a deletion of the event took
    /// the start over meanwhile (it is then no longer the registered one):
    /// the new actor is stopped and joined before the start reports, so the
    /// deletion, which waits for that report, removes the files only once
    /// nothing has them open.
    fn finish_start(self, id: &EventId, start: &Arc<Starting>) {
        // A start that panicked must still end: its callers and a deletion
        // wait for it.
        let started =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.start_event(id)))
                .unwrap_or_else(|_| {
                    Err(StoreError::Corrupt(format!(
                        "event {id}: its start panicked"
                    )))
                })
                .map_err(disk_down);
        let (outcome, stop) = {
            let mut events = locked(&self.inner.events);
            let mut starts = locked(&self.inner.starts);
            let ours = starts.get(id).is_some_and(|s| Arc::ptr_eq(s, start));
            if ours {
                starts.remove(id);
            }
            drop(starts);
            match started {
                Ok(h) if ours => {
                    // The admin state as it is now, not as the start read
                    // it: a pause stored meanwhile found no running event
                    // to tell (see `set_admin_state`, which looks under
                    // this lock).
                    lock(&h.state).admin = locked(&self.inner.admin)
                        .get(id)
                        .copied()
                        .unwrap_or_default();
                    events.insert(id.clone(), h.clone());
                    self.publish(&events);
                    (Ok(h), None)
                }
                Ok(h) => (Err(being_deleted(id)), Some(h)),
                Err(e) => (Err(e), None),
            }
        };
        if let Some(h) = stop {
            locked(&h.tx).take();
            if let Some(t) = locked(&h.thread).take() {
                let _ = t.join();
            }
        }
        // The store's clone goes before anyone is told: a caller that then
        // drops the store and opens the directory again finds it closed.
        drop(self);
        *locked(&start.done) = Some(outcome);
        start.finished.notify_all();
        start.awaited.notify_waiters();
    }

    /// Runs `f` on the event's handle, found without a lock or a reference
    /// count taken in the common case (see `Inner::published`); a first
    /// start is awaited (see [`Self::started`]).
    async fn with_event<T>(
        &self,
        id: &EventId,
        f: impl FnOnce(&EventHandle) -> Result<T>,
    ) -> Result<T> {
        let f = match self.with_running(id, f) {
            Ok(done) => return done,
            Err(f) => f,
        };
        // Boxed: the await's state (a timer, a wake-up) is carried by every
        // call's future otherwise, the hot ones included.
        let h = Box::pin(self.started(id)).await?;
        f(&h)
    }

    /// `f` on the event's handle if it runs (see [`Self::with_event`]), as
    /// a plain call: the hot calls (a poll, a join) try this first, so
    /// that their common case runs no future of its own. `Err(f)` when the
    /// event has to be started.
    fn with_running<T, F: FnOnce(&EventHandle) -> Result<T>>(
        &self,
        id: &EventId,
        f: F,
    ) -> std::result::Result<Result<T>, F> {
        let published = self.inner.published.load();
        match published.get(id) {
            Some(h) => Ok(f(h)),
            None => Err(f),
        }
    }

    /// Makes `events` what readers find; called under its lock, after each
    /// change.
    fn publish(&self, events: &HashMap<EventId, Arc<EventHandle>>) {
        self.inner.published.store(Arc::new(events.clone()));
    }

    /// Sends the event's actor the operation `op` builds around its reply
    /// sender, and awaits the answer (after the commit).
    ///
    /// Bounded by the event's disk, as a Redis call is by its timeout:
    /// while the disk holds a write past the store's timeout, the call is
    /// refused at once, and a call still waiting when a write has been held
    /// that long is answered unavailable. Its change may still be made once
    /// the disk finishes (as a timed-out Redis call's may), so every caller
    /// treats such an answer as "not known". Time the actor spends on work
    /// of its own (a big admit, an idle sweep) with the disk answering is
    /// waited for: only the disk's hang makes the event unavailable.
    async fn call<T>(&self, id: &EventId, op: impl FnOnce(ReplyTo<T>) -> Op) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        let op = op(ReplyTo::here(tx));
        let limit = self.inner.opts.timeout;
        let send = |h: &EventHandle| {
            if let Some(refused) = h.stall.refusal(id, limit) {
                return Err(refused);
            }
            let Err(op) = actor::apply_inline(&h.state, &self.inner.opts.clock, &h.to_disk, op)
            else {
                return Ok(());
            };
            match locked(&h.tx).as_ref().map(|s| s.send(op).is_ok()) {
                Some(true) => Ok(()),
                _ => Err(actor_stopped(id)),
            }
        };
        match self.with_running(id, send) {
            Ok(sent) => sent?,
            Err(send) => Box::pin(self.with_event(id, send)).await?,
        }
        let mut rx = rx;
        // The event's stamp is looked up again only on a late answer: a
        // handle kept across the wait would take and drop a reference count
        // shared by the event loops per call. An event gone meanwhile (a
        // deletion stopping its actor) no longer shows its stamp, and its
        // disk may hold the write this call waits for: the call is given up
        // at its first late look, not left waiting for the disk.
        let gone = AtomicBool::new(false);
        let held = || match self.inner.published.load().get(id) {
            Some(h) => h.stall.held_for(),
            None => {
                gone.store(true, Ordering::Relaxed);
                Some(limit)
            }
        };
        match stall::within(&mut rx, limit, held).await {
            Ok(answer) => answer.map_err(|_| actor_stopped(id))?,
            Err(_) if gone.load(Ordering::Relaxed) => Err(StoreError::unavailable(
                UnavailableKind::Stopped,
                format!("event {id}: stopped while the call waited"),
            )),
            Err(held) => Err(stall::hung(id, held)),
        }
    }

    /// The node's clock (µs), which the event's canonical clock follows.
    fn clock_us(&self) -> i64 {
        (self.inner.opts.clock)()
    }

    /// Runs a read on the event's memory at the canonical time.
    async fn read<T>(&self, id: &EventId, f: impl FnOnce(&mut EventState, i64) -> T) -> Result<T> {
        self.with_event(id, |h| self.read_on(h, f)).await
    }

    fn read_on<T>(&self, h: &EventHandle, f: impl FnOnce(&mut EventState, i64) -> T) -> Result<T> {
        let mut st = lock(&h.state);
        if let Some(why) = &st.down {
            return Err(StoreError::Unavailable(why.clone()));
        }
        let now_us = self.clock_us();
        Ok(f(&mut st, now_us))
    }

    /// Runs `f` on a read-only view of the event's queue. The event's actor
    /// waits while `f` runs, so keep it short (a few thousand ranks). A
    /// first start is waited for on this thread.
    pub fn with_queue<T>(&self, event: &EventId, f: impl FnOnce(&QueueView<'_>) -> T) -> Result<T> {
        let h = self.event(event)?;
        self.read_on(&h, |st, _| f(&QueueView { st }))
    }

    /// Runs `f` on the meta file on a blocking thread. A failed write drops
    /// the file (redb would refuse every later call) and answers
    /// unavailable; the next call reopens it.
    async fn meta_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database, &Path) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.meta_call_then(f, Ok).await
    }

    /// [`Self::meta_call`], then `then` on what `f` gave, still under the
    /// file's lock (so in the order of the writes) but no longer counted as
    /// the disk's time, and run whether or not the caller still waits: what
    /// memory must follow of a write, so that a write the disk finishes
    /// after its caller was answered still takes effect on this node.
    ///
    /// Bounded as an event's call is (see [`Self::call`]): once the meta
    /// file's disk has held a write for the store's timeout, a call is
    /// refused at once (no blocking thread parked behind it), and a call
    /// still waiting is answered unavailable; its change may still be made
    /// when the disk answers.
    async fn meta_call_then<T: Send + 'static, U: Send + 'static>(
        &self,
        f: impl FnOnce(&Database, &Path) -> Result<T> + Send + 'static,
        then: impl FnOnce(T) -> Result<U> + Send + 'static,
    ) -> Result<U> {
        let limit = self.inner.opts.timeout;
        if let Some(held) = self.inner.meta_stall.held_for().filter(|h| *h >= limit) {
            return Err(stall::meta_hung(held));
        }
        let inner = self.inner.clone();
        let mut task = tokio::task::spawn_blocking(move || on_meta(&inner, f, then));
        // Waiting for a blocking thread, or for the lock the disk's writer
        // just let go of, is waited for.
        match stall::within(&mut task, limit, || self.inner.meta_stall.held_for()).await {
            Ok(done) => done.map_err(|e| stopped("meta task failed", e))?,
            Err(held) => Err(stall::meta_hung(held)),
        }
    }
}

/// An event's deletion (see [`EmbeddedStore::delete_event`]), on a
/// blocking thread: waits for a first start under way to end and for the
/// actor to stop, removes the files, then forgets the event's admin state,
/// stored config and anchor. Each write it waits for is stamped on `watch`.
fn delete_steps(
    inner: &Inner,
    watch: &DeletionWatch,
    event: &EventId,
    handle: Option<Arc<EventHandle>>,
    starting: Option<Arc<Starting>>,
    file: PathBuf,
) -> Result<()> {
    if let Some(start) = starting {
        // The start's time counts from its beginning, as its callers count
        // it (see `Starting::wait`): most of it is the disk's (a new file
        // made), the rest the load of a file left behind.
        watch.own.begin_at(start.began);
        start.wait_ended();
        watch.own.end();
    }
    if let Some(h) = handle {
        locked(&h.tx).take();
        if let Some(t) = locked(&h.thread).take() {
            let _ = t.join();
        }
    }
    {
        let _held = watch.own.hold();
        // The file first: a log whose file went is never read (opening the
        // event removes it first), while a file whose log went would come
        // back behind by every change since its last checkpoint, should the
        // delete stop half way (a removal that fails, a crash) after a last
        // checkpoint that failed.
        let [log0, log1] = wal::paths_for(&file);
        for f in [file, log0, log1] {
            match std::fs::remove_file(&f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&f, e)),
            }
        }
    }
    watch.at_meta.store(true, Ordering::Release);
    // Memory follows the file under its lock, in the order of its writes.
    // The event stays deleting until then, so nothing starts it again from
    // the state about to go, nor writes state this would wipe.
    on_meta(
        inner,
        |db, path| disk::forget_event(db, path, event.as_str()),
        |()| {
            locked(&inner.admin).remove(event);
            locked(&inner.batch_owed).remove(event);
            Ok(())
        },
    )
}

/// Runs `f` on the meta file, then `then` still under its lock (see
/// [`EmbeddedStore::meta_call_then`]), on the calling thread, waiting for
/// the disk however long it takes. A failed write drops the file (redb
/// would refuse every later call) and answers unavailable; the next call
/// reopens it.
fn on_meta<T, U>(
    inner: &Inner,
    f: impl FnOnce(&Database, &Path) -> Result<T>,
    then: impl FnOnce(T) -> Result<U>,
) -> Result<U> {
    let mut meta = locked(&inner.meta);
    // From the lock on, until the file is done with: a call waiting for the
    // lock is not holding the disk, the one ahead of it is.
    let disk = inner.meta_stall.hold();
    let done = (|| {
        if meta.is_none() {
            let db = disk::open_file(&inner.meta_path, disk::META_MAGIC, &meta_files(&inner.opts))
                .map_err(|e| {
                    StoreError::from(
                        Unavailable::new(UnavailableKind::Disk, e.to_string()).with_source(e),
                    )
                })?;
            *meta = Some(db);
        }
        let Some(db) = meta.as_ref() else {
            return Err(StoreError::unavailable(
                UnavailableKind::Disk,
                "meta file not open",
            ));
        };
        match f(db, &inner.meta_path) {
            Err(StoreError::Storage(why)) => {
                tracing::error!(path = %inner.meta_path.display(), error = %why,
                    "meta write failed; reopening the file on the next call");
                *meta = None;
                Err(StoreError::unavailable(UnavailableKind::Disk, why))
            }
            other => other,
        }
    })();
    drop(disk);
    done.and_then(then)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channels lets each actor commit what it holds and exit;
        // joining them closes the files, so the directory can be reopened.
        self.published.store(Arc::default());
        let events: Vec<_> = locked(&self.events).drain().map(|(_, h)| h).collect();
        for h in &events {
            locked(&h.tx).take();
        }
        for h in &events {
            if let Some(t) = locked(&h.thread).take() {
                let _ = t.join();
            }
        }
    }
}

/// The meta file is small: a larger cache than 1 MiB would only hold memory.
fn meta_files(opts: &EmbeddedOptions) -> disk::FileOpts {
    disk::FileOpts {
        cache_bytes: opts.cache_bytes.min(1 << 20),
        #[cfg(test)]
        faults: opts.faults.clone(),
    }
}

fn admin_code(s: AdminState) -> u8 {
    match s {
        AdminState::Running => 0,
        AdminState::Paused => 1,
        AdminState::Closed => 2,
    }
}

fn read_admin(db: &Database, path: &Path) -> Result<HashMap<EventId, AdminState>> {
    let rows = disk::scan(db, path, disk::ADMIN, |k, v| {
        let state = match v {
            0 => AdminState::Running,
            1 => AdminState::Paused,
            _ => AdminState::Closed,
        };
        Some((EventId::new(k).ok()?, state))
    })?;
    Ok(rows.into_iter().collect())
}

#[async_trait]
impl QueueStore for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn now_us(&self, event: &EventId) -> Result<i64> {
        self.read(event, |_, now_us| now_us).await
    }

    async fn anchor_us(&self, event: &EventId) -> Result<i64> {
        let now = self.now_us(event).await?;
        let (inner, event) = (self.inner.clone(), event.clone());
        self.meta_call(move |db, path| {
            inner.not_deleting(&event)?;
            disk::anchor(db, path, event.as_str(), now)
        })
        .await
    }

    async fn join(
        &self,
        event: &EventId,
        member: &str,
        scoring: &JoinScoring,
    ) -> Result<JoinOutcome> {
        check_member(member)?;
        self.call(event, |reply| Op::Join {
            member: member.into(),
            scoring: *scoring,
            reply,
        })
        .await
    }

    async fn status(&self, event: &EventId, member: &str, touch: Touch) -> Result<MemberState> {
        check_member(member)?;
        // A poll: see `with_running`.
        let read = |h: &EventHandle| self.read_on(h, |st, now_us| st.status(member, touch, now_us));
        match self.with_running(event, read) {
            Ok(done) => done?,
            Err(read) => Box::pin(self.with_event(event, read)).await?,
        }
    }

    async fn queue_length(&self, event: &EventId) -> Result<u64> {
        self.read(event, |st, _| st.order.len() as u64).await
    }

    async fn admit(&self, event: &EventId, req: &AdmitRequest) -> Result<Vec<Admission>> {
        self.call(event, |reply| Op::Admit {
            req: req.clone(),
            reply,
        })
        .await
    }

    async fn admit_sharing(
        &self,
        event: &EventId,
        req: &AdmitRequest,
        node: &str,
    ) -> Result<Vec<Admission>> {
        check_node(node)?;
        let now_us = self.now_us(event).await?;
        // Not one step with the admission, as on Redis: one process is the
        // whole cluster here (see `Inner::shares`).
        let others = {
            let mut shares = locked(&self.inner.shares);
            let holds = shares.entry(event.clone()).or_default();
            let others = other_holds(holds, node, now_us);
            holds.remove(node);
            others
        };
        let req = AdmitRequest {
            max_active: req.max_active.saturating_sub(others),
            ..req.clone()
        };
        self.admit(event, &req).await
    }

    async fn redeem_as(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        opens: bool,
    ) -> Result<RedeemOutcome> {
        check_member(member)?;
        self.call(event, |reply| Op::Redeem {
            member: member.into(),
            nonce: *nonce,
            session_expires_at_us,
            opens,
            reply,
        })
        .await
    }

    async fn extend(&self, event: &EventId, member: &str, expires_at_us: i64) -> Result<bool> {
        check_member(member)?;
        self.call(event, |reply| Op::Extend {
            member: member.into(),
            expires_at_us,
            reply,
        })
        .await
    }

    async fn release(&self, event: &EventId, member: &str) -> Result<bool> {
        check_member(member)?;
        self.call(event, |reply| Op::Release {
            member: member.into(),
            reply,
        })
        .await
    }

    async fn reconcile_active(&self, event: &EventId, members: &[(String, i64)]) -> Result<u64> {
        for (m, _) in members {
            check_member(m)?;
        }
        self.call(event, |reply| Op::Reconcile {
            members: members.to_vec(),
            reply,
        })
        .await
    }

    async fn hold_share(&self, event: &EventId, req: &ShareRequest) -> Result<ShareGrant> {
        check_node(&req.node)?;
        let (stats, now_us) = self
            .read(event, |st, now_us| (st.stats(now_us), now_us))
            .await?;
        let used = stats.active.saturating_add(stats.outstanding);
        let mut shares = locked(&self.inner.shares);
        let holds = shares.entry(event.clone()).or_default();
        let others = other_holds(holds, &req.node, now_us);
        if req.ttl_ms == 0 {
            holds.remove(&req.node);
            return Ok(ShareGrant {
                others,
                ..ShareGrant::default()
            });
        }
        let free = req.max_active.saturating_sub(used).saturating_sub(others);
        let pending = req.pending.min(free);
        let reserve = req.reserve.min(free - pending);
        let ttl_us = i64::try_from(req.ttl_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
        holds.insert(
            req.node.clone(),
            Hold {
                reserve,
                pending,
                expires_at_us: now_us.saturating_add(ttl_us),
            },
        );
        Ok(ShareGrant {
            reserve,
            pending,
            others,
        })
    }

    async fn expire(&self, event: &EventId, req: &ExpireRequest) -> Result<Expired> {
        self.call(event, |reply| Op::Expire { req: *req, reply })
            .await
    }

    async fn stats(&self, event: &EventId) -> Result<EventStats> {
        self.read(event, |st, now_us| st.stats(now_us)).await
    }

    async fn revocations_since(&self, event: &EventId, since_us: i64) -> Result<Vec<Revocation>> {
        self.read(event, |st, _| st.revocations_since(since_us))
            .await
    }

    async fn consume_once(
        &self,
        event: &EventId,
        nonce: &Nonce,
        expires_at_us: i64,
    ) -> Result<bool> {
        self.call(event, |reply| Op::ConsumeOnce {
            nonce: *nonce,
            expires_at_us,
            reply,
        })
        .await
    }

    async fn set_batch_owed(
        &self,
        event: &EventId,
        start_ms: i64,
        owed: u64,
        ttl_ms: u64,
    ) -> Result<()> {
        let ttl = i64::try_from(ttl_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
        let now = self.clock_us();
        let until = now.saturating_add(ttl);
        let mut all = locked(&self.inner.batch_owed);
        let e = all.entry(event.clone()).or_insert((start_ms, owed, until));
        // A lapsed record is gone, as a Redis key past its TTL.
        if start_ms >= e.0 || e.2 <= now {
            *e = (start_ms, owed, until);
        }
        Ok(())
    }

    async fn batch_owed(&self, event: &EventId) -> Result<Option<(i64, u64)>> {
        let now = self.clock_us();
        Ok(locked(&self.inner.batch_owed)
            .get(event)
            .filter(|&&(_, _, until)| until > now)
            .map(|&(start, owed, _)| (start, owed)))
    }

    async fn claim_tick(&self, event: &EventId, tick: u64, ttl_ms: u64) -> Result<bool> {
        // One process is the whole cluster here: an in-memory set is enough.
        let clock_us = self.clock_us();
        let mut ticks = locked(&self.inner.ticks);
        // A claim made after now was made while the clock ran ahead (it was
        // set back since): it guards nothing, and kept, it would refuse every
        // tick of the step until the clock caught up.
        let holds = |&(at, exp): &(i64, i64)| at <= clock_us && exp > clock_us;
        if ticks.len() > 4096 {
            ticks.retain(|_, claim| holds(claim));
        }
        let key = (event.clone(), tick);
        match ticks.get(&key) {
            Some(claim) if holds(claim) => Ok(false),
            _ => {
                let ttl = i64::try_from(ttl_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
                ticks.insert(key, (clock_us, clock_us.saturating_add(ttl)));
                Ok(true)
            }
        }
    }

    async fn set_admin_state(&self, event: &EventId, state: AdminState) -> Result<()> {
        let key = event.as_str().to_owned();
        let (inner, event) = (self.inner.clone(), event.clone());
        // Memory follows the file on the blocking thread: a write the disk
        // finishes after the caller was answered unavailable (a hung disk)
        // still takes effect on this node, as it will at the next start,
        // rather than leave the two disagreeing.
        self.meta_call_then(
            move |db, path| {
                // Checked here, in the order of the meta file's writes: a
                // deletion's last step, made after, would wipe it.
                inner.not_deleting(&event)?;
                disk::put_admin(db, path, &key, admin_code(state))?;
                // A start publishes its event under the events' lock,
                // taking the admin state from the map as it does: under
                // the same lock here, the start either sees the new state
                // or its event is found below.
                let _events = locked(&inner.events);
                locked(&inner.admin).insert(event.clone(), state);
                Ok(_events.get(&event).cloned())
            },
            move |running: Option<Arc<EventHandle>>| {
                // Under the event's lock, so no admit applied after this
                // returns sees the old state. An event not running yet
                // reads the map when it starts.
                if let Some(h) = running {
                    lock(&h.state).admin = state;
                }
                Ok(())
            },
        )
        .await
    }

    async fn admin_state(&self, event: &EventId) -> Result<AdminState> {
        // Not the state about to be wiped: a caller that took it for the
        // event's (a close of an event it read as closed, answered as done
        // without a write) would answer for a state the deletion's end
        // undoes.
        self.inner.not_deleting(event)?;
        Ok(locked(&self.inner.admin)
            .get(event)
            .copied()
            .unwrap_or_default())
    }

    async fn put_event_config(&self, event: &EventId, json: &str) -> Result<()> {
        let (inner, event, json) = (self.inner.clone(), event.clone(), json.to_owned());
        self.meta_call(move |db, path| {
            inner.not_deleting(&event)?;
            disk::put_config(db, path, event.as_str(), &json)
        })
        .await
    }

    async fn replace_event_config(
        &self,
        event: &EventId,
        generation: u64,
        json: &str,
    ) -> Result<bool> {
        let (inner, event, json) = (self.inner.clone(), event.clone(), json.to_owned());
        self.meta_call(move |db, path| {
            inner.not_deleting(&event)?;
            disk::replace_config(db, path, event.as_str(), generation, &json)
        })
        .await
    }

    async fn config_generation(&self) -> Result<u64> {
        self.meta_call(disk::config_generation).await
    }

    async fn event_config_set(&self) -> Result<ConfigSet> {
        self.meta_call(|db, path| {
            let (generation, rows) = disk::configs(db, path)?;
            let configs = rows
                .into_iter()
                .filter_map(|(k, v)| Some((EventId::new(&k).ok()?, v)))
                .collect();
            Ok(ConfigSet {
                generation,
                configs,
            })
        })
        .await
    }

    async fn ping(&self, event: &EventId) -> Result<()> {
        self.read(event, |_, _| ()).await?;
        // Memory answers even while the disk hangs: the ping also asks
        // whether the disk has finished its writes in time.
        self.with_event(event, |h| {
            match h.stall.refusal(event, self.inner.opts.timeout) {
                Some(refused) => Err(refused),
                None => Ok(()),
            }
        })
        .await
    }

    async fn delete_event(&self, event: &EventId) -> Result<()> {
        // The actor commits what it holds and stops before its file goes;
        // meanwhile nothing starts the event again, nor writes what its
        // last step removes (see `Inner::deleting`).
        let token = Arc::new(());
        let (handle, starting) = {
            let mut events = locked(&self.inner.events);
            {
                let mut deletions = locked(&self.inner.deletions);
                deletions.retain(|_, token| token.strong_count() > 0);
                // A deletion answered unavailable goes on while the disk
                // holds it (below): a second one would find nothing to stop
                // and could end first, its caller told the files were gone.
                if deletions.contains_key(event) {
                    return Err(StoreError::unavailable(
                        UnavailableKind::TimedOut,
                        format!("event {event}: its deletion is still under way"),
                    ));
                }
                deletions.insert(event.clone(), Arc::downgrade(&token));
            }
            let handle = events.remove(event);
            self.publish(&events);
            // A first start under way is taken over: it stops the actor it
            // made rather than publish it (see `finish_start`).
            let starting = locked(&self.inner.starts).remove(event);
            (handle, starting)
        };
        let watch = Arc::new(DeletionWatch {
            actor: handle.as_ref().map(|h| h.stall.clone()),
            ..DeletionWatch::default()
        });
        let (tx, mut rx) = oneshot::channel();
        let (inner, steps, id) = (self.inner.clone(), watch.clone(), event.clone());
        let file = self.event_path(event);
        // The steps run to their end whatever becomes of the caller, who is
        // answered unavailable once the disk holds one of them past the
        // store's timeout (below), or who hangs up: stopped half way, they
        // would leave memory and the files disagreeing.
        tokio::task::spawn_blocking(move || {
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                delete_steps(&inner, &steps, &id, handle, starting, file)
            }))
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(
                    UnavailableKind::Stopped,
                    format!("event {id}: its deletion panicked"),
                ))
            });
            // The store's reference goes before the token, and the token
            // before anyone is told: a caller that then drops the store and
            // opens the directory again finds the files closed (unless
            // another call given up on the disk still holds the store), and
            // one that calls the event again finds it deletable, startable
            // and writable.
            drop(inner);
            drop(token);
            if let Err(ended) = tx.send(ended) {
                match ended {
                    Ok(()) => tracing::info!(event = %id,
                        "a deletion whose caller is gone has ended: the event's queue and state are gone"),
                    Err(e) => tracing::warn!(event = %id, error = %e,
                        "a deletion whose caller is gone has failed; deleting the event again finishes it"),
                }
            }
        });
        // Bounded as every other call: with the disk answering, stopping an
        // actor, removing three files and writing the meta file takes
        // milliseconds, and is waited for however long; a disk that holds
        // one of these writes would hold the operator's `DELETE`, and with
        // it every later admin change of the node, without a bound.
        let limit = self.inner.opts.timeout;
        let held = || {
            let meta = if watch.at_meta.load(Ordering::Acquire) {
                self.inner.meta_stall.held_for()
            } else {
                None
            };
            let actor = watch.actor.as_ref().and_then(|s| s.held_for());
            [watch.own.held_for(), actor, meta]
                .into_iter()
                .flatten()
                .max()
        };
        match stall::within(&mut rx, limit, held).await {
            Ok(Ok(ended)) => ended,
            Ok(Err(_)) => Err(StoreError::unavailable(
                UnavailableKind::Stopped,
                format!("event {event}: its deletion stopped half way"),
            )),
            Err(held) => Err(StoreError::unavailable(
                UnavailableKind::TimedOut,
                format!(
                    "event {event}: its disk has not finished a write for {} ms; \
                     the deletion goes on, and ends when the disk answers",
                    held.as_millis()
                ),
            )),
        }
    }

    async fn append_audit(&self, event: &EventId, json: &str) -> Result<()> {
        let (key, json) = (event.as_str().to_owned(), json.to_owned());
        self.meta_call(move |db, path| disk::append_audit(db, path, &key, &json, crate::AUDIT_KEEP))
            .await
    }

    async fn audit(&self, event: &EventId, limit: usize) -> Result<Vec<String>> {
        let key = event.as_str().to_owned();
        self.meta_call(move |db, path| disk::read_audit(db, path, &key, limit))
            .await
    }

    async fn audit_events(&self) -> Result<Vec<EventId>> {
        let ids = self.meta_call(disk::audit_events).await?;
        Ok(ids.iter().filter_map(|k| EventId::new(k).ok()).collect())
    }
}

/// Refuses a `meta.redb` of no bytes beside event files. redb would take
/// it for a new file and the store would start without the events' admin
/// states and stored configs: a closed event open again, a paused one
/// admitting. With no event file there is nothing to lose (a crash while
/// the store was first made leaves such a file), and it is made anew.
fn refuse_emptied_meta(meta_path: &Path, events_dir: &Path) -> Result<()> {
    let emptied = std::fs::metadata(meta_path).is_ok_and(|m| m.is_file() && m.len() == 0);
    if !emptied {
        return Ok(());
    }
    let mut events = std::fs::read_dir(events_dir).map_err(|e| io_error(events_dir, e))?;
    if events.next().is_some() {
        return Err(StoreError::Corrupt(format!(
            "{}: empty, but {} holds event files; restore meta.redb from a backup \
             (or move the data directory away to start afresh)",
            meta_path.display(),
            events_dir.display()
        )));
    }
    Ok(())
}
