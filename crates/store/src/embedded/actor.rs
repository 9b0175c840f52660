//! The single writer of one event (the Durable Object model), with group commit.
//!
//! The actor runs on its own OS thread. It takes every queued command (up to
//! `max_batch`), applies them to memory in arrival order and hands the batch
//! (its encoded changes and its answers) to a committer thread, which writes
//! it in ONE durable redb transaction and only then answers every caller: an
//! acknowledged change is on disk. The two threads form a pipeline: while
//! batch k waits for its fsync, batch k+1 is applied and encoded, so with
//! enough callers in flight throughput is bound by the CPU, not by the fsync
//! latency. If a commit fails, the event is down until the committer has
//! reopened its file and rebuilt memory from it (see [`super::commit`]):
//! every caller of that batch, of any batch applied before the rebuild and of
//! anything asked meanwhile is told the store is unavailable, so nothing
//! unacknowledged is ever visible as durable.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redb::Database;
use tokio::sync::oneshot;

use super::commit::Committer;
use super::disk::{Counters, FileOpts};
use super::state::EventState;
use super::writes::Writes;
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
    pub(crate) files: FileOpts,
    pub(crate) state: Arc<Mutex<EventState>>,
    pub(crate) clock: Clock,
    pub(crate) max_batch: usize,
}

pub(crate) type Answer = (
    oneshot::Sender<Result<Reply, StoreError>>,
    Result<Reply, StoreError>,
);

/// One applied batch on its way to disk.
pub(crate) struct Batch {
    /// The memory generation it was applied to (see [`EventState::generation`]).
    pub(crate) generation: u64,
    pub(crate) writes: Writes,
    pub(crate) counters: Counters,
    pub(crate) answers: Vec<Answer>,
}

impl Actor {
    pub(crate) fn run(self, rx: Receiver<Command>) {
        // A rendezvous channel: the actor runs at most one batch ahead of
        // the commit in progress, which bounds both memory and how far
        // memory can be ahead of the disk.
        let (to_disk, from_actor) = std::sync::mpsc::sync_channel::<Batch>(0);
        let committer = Committer::new(self.db, self.path, self.files, self.state.clone());
        let thread = std::thread::Builder::new()
            .name("event-commit".into())
            .spawn(move || committer.run(from_actor));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let why = format!("cannot start committer: {e}");
                lock(&self.state).down = Some(why.clone());
                fail_all(rx, &why);
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
        let _ = c.tx.send(Err(StoreError::Unavailable(why.to_owned())));
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
        if let Some(why) = &st.down {
            // Nothing is applied while memory waits to be rebuilt from disk.
            for c in batch.drain(..) {
                let _ = c.tx.send(Err(StoreError::Unavailable(why.clone())));
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
