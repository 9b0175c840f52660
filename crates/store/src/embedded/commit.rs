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
use super::disk::{self, FileOpts};
use super::handoff::Receiver;
use super::load;
use super::state::EventState;
use super::writes;
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

pub(crate) struct Committer {
    /// `None` only while a reopen is being tried.
    db: Option<Database>,
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
}

impl Committer {
    pub(crate) fn new(
        db: Database,
        path: PathBuf,
        files: FileOpts,
        state: Arc<Mutex<EventState>>,
        clock: super::actor::Clock,
    ) -> Self {
        Self {
            db: Some(db),
            path,
            files,
            state,
            clock,
            backoff: RETRY_FIRST,
        }
    }

    pub(crate) fn run(mut self, rx: Receiver) {
        while let Some(b) = rx.recv() {
            if let Err(why) = self.step(b)
                && !self.recover(&rx, &why)
            {
                return;
            }
        }
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
            let done = match &self.db {
                Some(db) => writes::commit(db, &self.path, &b.writes, b.counters),
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
                {
                    // Memory shows this batch (and maybe the next, already
                    // applied) that the disk does not have: nobody reads it
                    // until it is rebuilt.
                    let mut st = lock(&self.state);
                    st.down = Some(why.clone());
                    st.generation += 1;
                }
                refuse(b, &why);
                return Err(why);
            }
            self.backoff = RETRY_FIRST;
        }
        for a in b.answers {
            a.send();
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
        // gone first, as it holds the file's lock.
        self.db = None;
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
            match self.reopen() {
                Ok((db, fresh)) => {
                    let mut st = lock(&self.state);
                    let (admin, generation) = (st.admin, st.generation);
                    *st = fresh;
                    st.admin = admin;
                    st.generation = generation;
                    drop(st);
                    self.db = Some(db);
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

    fn reopen(&self) -> Result<(Database, EventState), StoreError> {
        let db = disk::open_file(&self.path, disk::EVENT_MAGIC, &self.files)?;
        let fresh = load::load(&db, &self.path, (self.clock)())?;
        Ok((db, fresh))
    }
}

/// Tells every caller of `b` that its change was not kept.
fn refuse(b: Batch, why: &Unavailable) {
    for a in b.answers {
        a.refuse(StoreError::Unavailable(why.clone()));
    }
}
