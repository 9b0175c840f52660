//! The single writer of one event (the Durable Object model), with group commit.
//!
//! The actor runs on its own OS thread. It takes every queued command (up to
//! `max_batch`), applies them to memory in arrival order and hands the batch
//! (its encoded changes and its answers) to a committer thread, which writes
//! it in ONE durable redb transaction and only then answers every caller: an
//! acknowledged change is on disk. The two threads form a pipeline: while
//! batch k waits for its fsync, batch k+1 is applied and encoded, so with
//! enough callers in flight throughput is bound by the CPU, not by the fsync
//! latency. If a commit fails, every caller of that batch and of any batch
//! applied before memory was rebuilt from disk gets the error, so nothing
//! unacknowledged is ever visible as durable.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redb::Database;
use tokio::sync::oneshot;

use super::disk::Counters;
use super::load;
use super::state::EventState;
use super::writes::{self, Writes};
use crate::{
    Admission, AdmitRequest, ExpireRequest, Expired, JoinOutcome, Nonce, RedeemOutcome, StoreError,
};

/// How often status-poll touches are flushed when nothing else commits.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// A durable operation sent to the actor.
pub(crate) enum Op {
    Join(Box<str>, JoinScoring),
    Admit(AdmitRequest),
    Redeem(Box<str>, Nonce, i64),
    Extend(Box<str>, i64),
    Release(Box<str>),
    Reconcile(Vec<(String, i64)>),
    Expire(ExpireRequest),
    ConsumeOnce(Nonce, i64),
}

/// The answer to an [`Op`], sent after the commit.
pub(crate) enum Reply {
    Join(JoinOutcome),
    Admit(Vec<Admission>),
    Redeem(RedeemOutcome),
    Bool(bool),
    Count(u64),
    Expired(Expired),
}

pub(crate) struct Command {
    pub(crate) op: Op,
    pub(crate) tx: oneshot::Sender<Result<Reply, StoreError>>,
}

pub(crate) type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Locks the state; a panic while holding the lock cannot leave a half-applied
/// batch acknowledged (nothing was answered), so the data is still usable.
pub(crate) fn lock(m: &Mutex<EventState>) -> MutexGuard<'_, EventState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn apply(st: &mut EventState, op: Op, now: i64) -> Result<Reply, StoreError> {
    Ok(match op {
        Op::Join(m, s) => Reply::Join(st.join(&m, &s, now)?),
        Op::Admit(req) => Reply::Admit(st.admit(&req, now)),
        Op::Redeem(m, n, exp) => Reply::Redeem(st.redeem(&m, &n, exp, now)?),
        Op::Extend(m, exp) => Reply::Bool(st.extend(&m, exp)?),
        Op::Release(m) => Reply::Bool(st.release(&m, now)?),
        Op::Reconcile(ms) => Reply::Count(st.reconcile(&ms)?),
        Op::Expire(req) => Reply::Expired(st.expire(&req, now)),
        Op::ConsumeOnce(n, exp) => Reply::Bool(st.consume_once(&n, exp, now)),
    })
}

pub(crate) struct Actor {
    pub(crate) db: Database,
    pub(crate) path: PathBuf,
    pub(crate) state: Arc<Mutex<EventState>>,
    pub(crate) clock: Clock,
    pub(crate) max_batch: usize,
}

type Answer = (
    oneshot::Sender<Result<Reply, StoreError>>,
    Result<Reply, StoreError>,
);

/// One applied batch on its way to disk.
struct Batch {
    /// The memory generation it was applied to (see [`EventState::generation`]).
    generation: u64,
    writes: Writes,
    counters: Counters,
    answers: Vec<Answer>,
}

impl Actor {
    pub(crate) fn run(self, rx: Receiver<Command>) {
        // A rendezvous channel: the actor runs at most one batch ahead of
        // the commit in progress, which bounds both memory and how far
        // memory can be ahead of the disk.
        let (to_disk, from_actor) = std::sync::mpsc::sync_channel::<Batch>(0);
        let committer = Committer {
            db: self.db,
            path: self.path,
            state: self.state.clone(),
            last_error: None,
        };
        let thread = std::thread::Builder::new()
            .name("event-commit".into())
            .spawn(move || committer.run(from_actor));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                lock(&self.state).failed = Some(format!("cannot start committer: {e}"));
                fail_all(rx, &format!("cannot start committer: {e}"));
                return;
            }
        };
        let applier = Applier {
            state: self.state,
            clock: self.clock,
            max_batch: self.max_batch,
        };
        applier.run(&rx, &to_disk);
        // Closing the channel lets the committer finish the last batch.
        drop(to_disk);
        let _ = thread.join();
    }
}

fn fail_all(rx: Receiver<Command>, why: &str) {
    for c in rx {
        let _ = c.tx.send(Err(StoreError::Storage(why.to_owned())));
    }
}

struct Applier {
    state: Arc<Mutex<EventState>>,
    clock: Clock,
    max_batch: usize,
}

impl Applier {
    fn run(&self, rx: &Receiver<Command>, to_disk: &SyncSender<Batch>) {
        let mut batch: Vec<Command> = Vec::with_capacity(self.max_batch);
        loop {
            let last = match rx.recv_timeout(FLUSH_EVERY) {
                Ok(c) => {
                    batch.push(c);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            while batch.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            if let Some(b) = self.apply(&mut batch)
                && to_disk.send(b).is_err()
            {
                return;
            }
            if last {
                return;
            }
        }
    }

    /// Applies one batch (possibly empty: a flush of touches) to memory.
    fn apply(&self, batch: &mut Vec<Command>) -> Option<Batch> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut st = lock(&self.state);
        if let Some(why) = &st.failed {
            for c in batch.drain(..) {
                let _ = c.tx.send(Err(StoreError::Storage(why.clone())));
            }
            return None;
        }
        for c in batch.drain(..) {
            let now = st.tick((self.clock)());
            answers.push((c.tx, apply(&mut st, c.op, now)));
        }
        st.flush_seen();
        if answers.is_empty() && st.writes.is_empty() {
            return None;
        }
        Some(Batch {
            generation: st.generation,
            writes: std::mem::take(&mut st.writes),
            counters: st.counters,
            answers,
        })
    }
}

struct Committer {
    db: Database,
    path: PathBuf,
    state: Arc<Mutex<EventState>>,
    /// Why the last failed commit failed, told to callers of stale batches.
    last_error: Option<String>,
}

impl Committer {
    fn run(mut self, rx: Receiver<Batch>) {
        for b in rx {
            self.step(b);
        }
    }

    /// Commits and answers one batch.
    fn step(&mut self, b: Batch) {
        let current = lock(&self.state).generation;
        if b.generation != current {
            // Applied to memory that a failed commit has since thrown away.
            let why = self
                .last_error
                .clone()
                .unwrap_or_else(|| "an earlier commit failed".into());
            for (tx, _) in b.answers {
                let _ = tx.send(Err(StoreError::Storage(why.clone())));
            }
            return;
        }
        if !b.writes.is_empty()
            && let Err(e) = writes::commit(&self.db, &self.path, &b.writes, b.counters)
        {
            tracing::error!(path = %self.path.display(), error = %e, "event commit failed; reloading from disk");
            self.recover();
            self.last_error = Some(e.to_string());
            for (tx, _) in b.answers {
                let _ = tx.send(Err(StoreError::Storage(e.to_string())));
            }
            return;
        }
        for (tx, r) in b.answers {
            // A caller that gave up (dropped its future) still had its change committed.
            let _ = tx.send(r);
        }
    }

    /// Puts memory back to what the disk holds after a failed commit.
    fn recover(&self) {
        let mut st = lock(&self.state);
        let (admin, generation) = (st.admin, st.generation + 1);
        match load::load(&self.db, &self.path) {
            Ok(mut fresh) => {
                fresh.admin = admin;
                *st = fresh;
            }
            Err(e) => st.failed = Some(format!("{e}; restart the node")),
        }
        st.generation = generation;
    }
}
