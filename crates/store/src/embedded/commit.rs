//! The committer of one event: writes each applied batch durably, answers
//! its callers, and brings the event back after a failed write.
//!
//! redb refuses every call on a `Database` once one of its writes failed
//! (a full or failing disk), so a failed commit cannot simply be retried:
//! the event goes down (every read and command is answered
//! [`StoreError::Unavailable`], which the server turns into drain), the
//! `Database` is dropped and the file reopened with backoff, and memory is
//! rebuilt from what the reopened file holds. A batch that failed was never
//! acknowledged, so rolling memory back to the last commit loses nothing
//! anybody was told is kept.

use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::Database;

use super::actor::{Batch, lock};
use super::disk::{Counters, FileOpts};
use super::handoff::Receiver;
use super::load;
use super::state::EventState;
use super::wal::{self, Wal};
use super::writes::{self, Writes};
use crate::{StoreError, Unavailable, UnavailableKind};

/// First wait before reopening a file whose write failed: a disk that just
/// failed is rarely back within a millisecond, and a reopen rebuilds the
/// whole event from disk.
const RETRY_FIRST: Duration = if cfg!(test) {
    Duration::from_millis(20)
} else {
    Duration::from_millis(100)
};

/// Longest wait between reopen attempts, so a disk that comes back is used
/// again within seconds.
const RETRY_MAX: Duration = if cfg!(test) {
    Duration::from_millis(500)
} else {
    Duration::from_secs(5)
};

/// A checkpoint is due when this long has passed since the last one with
/// changes waiting...
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// ...or this many changes wait...
const CHECKPOINT_CHANGES: usize = 2 << 10;
/// ...or the log's round has grown this large. The three bound how much
/// memory the changes not yet in the redb file hold and how much a
/// start-up replays. Small checkpoints cost the joins least: a checkpoint's
/// CPU burst competes with the callers on a small box (2 Ki changes against
/// 8 Ki and 32 Ki: see docs/benchmarks.md).
const CHECKPOINT_BYTES: u64 = 4 << 20;

/// A checkpoint running beside the committer; it hands back the changes it
/// wrote, whose buffers the next round reuses.
type Checkpointing = std::thread::JoinHandle<(Result<(), StoreError>, Writes)>;

pub(crate) struct Committer {
    /// `None` only while a reopen is being tried. The `Database` is shared
    /// with the checkpoint running, if any.
    db: Option<(Arc<Database>, Wal)>,
    checkpointing: Option<Checkpointing>,
    path: PathBuf,
    files: FileOpts,
    state: Arc<Mutex<EventState>>,
    /// The node's clock: memory rebuilt from the file counts every waiter
    /// as seen at the rebuild (see `load`).
    clock: super::actor::Clock,
    /// Wait before the next reopen; it grows while writes keep failing
    /// (a still-full disk reopens fine and fails the next commit) and is
    /// reset by a commit that succeeds.
    backoff: Duration,
    /// Changes durable in the log but not yet in the redb file, in order,
    /// with the counters as the last of them left them.
    pending: Writes,
    pending_counters: Option<Counters>,
    /// The buffers of the last checkpoint's changes, emptied, for `pending`
    /// to take at the next one. A round's changes fill hundreds of
    /// kilobytes; grown afresh each round, they cost the committer a
    /// reallocation per doubling and fresh pages from the kernel, zeroed,
    /// every tenth of a second under load (docs/benchmarks.md).
    spare: Writes,
    last_checkpoint: Instant,
    /// Stamped while a write to the log or a reopen is under way, for the
    /// callers to see a disk that hangs (see [`super::stall`]).
    stall: Arc<super::stall::Stall>,
}

impl Committer {
    pub(crate) fn new(
        db: Database,
        wal: Wal,
        path: PathBuf,
        files: FileOpts,
        state: Arc<Mutex<EventState>>,
        clock: super::actor::Clock,
        stall: Arc<super::stall::Stall>,
    ) -> Self {
        Self {
            db: Some((Arc::new(db), wal)),
            checkpointing: None,
            path,
            files,
            state,
            clock,
            backoff: RETRY_FIRST,
            pending: Writes::default(),
            pending_counters: None,
            spare: Writes::default(),
            last_checkpoint: Instant::now(),
            stall,
        }
    }

    pub(crate) fn run(mut self, rx: Receiver) {
        // Woken by every hand-off: it must not preempt the loop that woke
        // it (see `batch_policy`).
        super::batch_policy::apply();
        while let Some(b) = rx.recv() {
            if let Err(why) = self.step(b)
                && !self.recover(&rx, &why)
            {
                return;
            }
        }
        // Stopping: the log would be replayed at the next start anyway,
        // but a file that holds everything starts faster. The last
        // checkpoint and the file's close are writes an event's deletion
        // waits for (see `EmbeddedStore::delete_event`): stamped as the
        // log's writes are, so that the deletion gives up on a disk that
        // holds one past the store's timeout, and otherwise waits.
        let stall = self.stall.clone();
        let _held = stall.hold();
        if let Err(why) = self
            .finish_checkpoint()
            .and_then(|()| self.checkpoint_now())
        {
            tracing::warn!(path = %self.path.display(), error = %why,
                "last checkpoint failed; the write-ahead log is replayed at the next start");
        }
        drop(self.db.take());
    }

    /// Waits for the checkpoint running, if any; its failure if it failed.
    fn finish_checkpoint(&mut self) -> Result<(), Unavailable> {
        let Some(t) = self.checkpointing.take() else {
            return Ok(());
        };
        let (done, mut changes) = t.join().unwrap_or_else(|_| {
            (
                Err(StoreError::Storage("the checkpoint thread panicked".into())),
                Writes::default(),
            )
        });
        changes.clear();
        self.spare = changes;
        done.map_err(checkpoint_failed)
    }

    /// Hands the changes the log holds to a checkpoint beside the
    /// committer, when one is due and the last one has finished; the log
    /// goes on in its other file meanwhile, so batches never wait for a
    /// checkpoint (one of thousands of changes takes milliseconds: on the
    /// committer's thread every caller in flight waited for it).
    fn checkpoint(&mut self) -> Result<(), Unavailable> {
        if self.checkpointing.as_ref().is_some_and(|t| t.is_finished()) {
            self.finish_checkpoint()?;
        }
        if self.checkpointing.is_some() || !self.checkpoint_due() {
            return Ok(());
        }
        let (Some(c), Some((db, wal))) = (self.pending_counters, &mut self.db) else {
            return Ok(());
        };
        let (db, path, seq) = (db.clone(), self.path.clone(), wal.seq());
        let changes = std::mem::replace(&mut self.pending, std::mem::take(&mut self.spare));
        self.pending_counters = None;
        self.last_checkpoint = Instant::now();
        // Everything in the other file is in the redb file: the checkpoint
        // before this one has finished.
        wal.switch();
        let job = move || {
            super::batch_policy::apply();
            let done = writes::commit(&db, &path, &changes, c, seq);
            (done, changes)
        };
        match std::thread::Builder::new()
            .name("event-checkpoint".into())
            .spawn(job)
        {
            Ok(t) => self.checkpointing = Some(t),
            Err(e) => {
                return Err(Unavailable::new(
                    UnavailableKind::Disk,
                    format!("cannot start a checkpoint: {e}"),
                )
                .with_source(e));
            }
        }
        Ok(())
    }

    /// Writes the changes the log holds into the redb file now, on this
    /// thread (as the committer stops).
    fn checkpoint_now(&mut self) -> Result<(), Unavailable> {
        let (Some(c), Some((db, wal))) = (self.pending_counters, &mut self.db) else {
            return Ok(());
        };
        writes::commit(db, &self.path, &self.pending, c, wal.seq()).map_err(checkpoint_failed)?;
        self.pending.clear();
        self.pending_counters = None;
        Ok(())
    }

    fn checkpoint_due(&self) -> bool {
        self.pending_counters.is_some()
            && (self.pending.len() >= CHECKPOINT_CHANGES
                || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY
                || self
                    .db
                    .as_ref()
                    .is_some_and(|(_, w)| w.len() >= CHECKPOINT_BYTES))
    }

    /// Goes down after a failed write: memory shows batches (maybe more,
    /// already applied) that the disk does not have, so nobody reads it
    /// until it is rebuilt.
    fn down(&self, why: &Unavailable) {
        let mut st = lock(&self.state);
        st.down = Some(why.clone());
        st.generation += 1;
    }

    /// Commits and answers one batch; `Err` if the write failed.
    fn step(&mut self, b: Batch) -> Result<(), Unavailable> {
        let current = lock(&self.state).generation;
        if b.generation != current {
            // Applied to memory that a failed commit has since thrown away.
            refuse(
                b,
                &Unavailable::new(
                    UnavailableKind::Disk,
                    "an earlier write of this event failed",
                ),
            );
            return Ok(());
        }
        if !b.writes.is_empty() {
            let done = match &mut self.db {
                Some((_, wal)) => wal
                    .append_watched(&b.writes, b.counters, Some(&self.stall))
                    .map_err(|e| StoreError::Storage(format!("{}: {e}", wal.path().display()))),
                None => Err(StoreError::unavailable(
                    UnavailableKind::Disk,
                    "event file not open",
                )),
            };
            if let Err(e) = done {
                let why = Unavailable::new(
                    UnavailableKind::Disk,
                    format!("event store write failed: {e}"),
                )
                .with_source(e);
                self.down(&why);
                refuse(b, &why);
                return Err(why);
            }
            self.backoff = RETRY_FIRST;
            self.pending.append(b.writes);
            self.pending_counters = Some(b.counters);
        }
        super::actor::deliver(b.answers);
        if let Err(why) = self.checkpoint() {
            // Everything answered is in the log, and the reopen replays
            // it: only the event's service stops meanwhile.
            self.down(&why);
            return Err(why);
        }
        Ok(())
    }

    /// Reopens the file and rebuilds memory from it, retrying with backoff;
    /// batches that arrive meanwhile (applied before the failure) are
    /// refused. `false` if the actor stopped first.
    fn recover(&mut self, rx: &Receiver, why: &Unavailable) -> bool {
        tracing::error!(path = %self.path.display(), error = %why,
            "event write failed; the event drains until its file is reopened");
        // Only a fresh Database reads the file again; the old one must be
        // gone first, as it holds the file's lock; the checkpoint running
        // shares it, so it ends first (what it failed to write is in the
        // log, which the reopen replays). The log's last record that was
        // synced is the last one the reopen may bring back: a record whose
        // sync failed was refused to its callers.
        // The running checkpoint and the old file's close (redb's close
        // writes, and so may the log's files' close) may be held by a disk
        // that hangs: the callers of batches already handed on wait for
        // them, so they count as a write under way.
        let upto = {
            let stall = self.stall.clone();
            let _held = stall.hold();
            let _ = self.finish_checkpoint();
            let old = self.db.take();
            let upto = old.as_ref().map(|(_, wal)| wal.seq());
            drop(old);
            upto
        };
        self.pending.clear();
        self.pending_counters = None;
        loop {
            let until = Instant::now() + self.backoff;
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match rx.recv_timeout(left) {
                    Ok(b) => refuse(b, why),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return false,
                }
            }
            self.backoff = (self.backoff * 2).min(RETRY_MAX);
            let reopened = {
                let _held = self.stall.hold();
                self.reopen(upto)
            };
            match reopened {
                Ok((db, fresh)) => {
                    let mut st = lock(&self.state);
                    let (admin, generation) = (st.admin, st.generation);
                    *st = fresh;
                    st.admin = admin;
                    // A generation of its own: a batch the actor applied
                    // since the failure (its generation read while memory
                    // was down) is refused, not committed over this memory.
                    st.generation = generation + 1;
                    drop(st);
                    self.db = Some((Arc::new(db.0), db.1));
                    self.last_checkpoint = Instant::now();
                    tracing::info!(path = %self.path.display(), "event file reopened; the event serves again");
                    return true;
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e,
                        retry_in_ms = self.backoff.as_millis() as u64, "event file still cannot be reopened");
                }
            }
        }
    }

    fn reopen(&self, upto: Option<u64>) -> Result<((Database, Wal), EventState), StoreError> {
        let (db, wal) = wal::open_event(&self.path, &self.files, upto)?;
        let fresh = load::load(&db, &self.path, (self.clock)())?;
        Ok(((db, wal), fresh))
    }
}

fn checkpoint_failed(e: StoreError) -> Unavailable {
    Unavailable::new(
        UnavailableKind::Disk,
        format!("event store checkpoint failed: {e}"),
    )
    .with_source(e)
}

/// Tells every caller of `b` that its change was not kept.
fn refuse(b: Batch, why: &Unavailable) {
    for a in b.answers {
        a.refuse(StoreError::Unavailable(why.clone()));
    }
}
