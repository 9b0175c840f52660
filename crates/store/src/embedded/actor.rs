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
use super::state::{EventState, Sweep};
use super::writes::Writes;
use crate::{
    Admission, AdmitRequest, ExpireRequest, Expired, JoinOutcome, Nonce, RedeemOutcome, StoreError,
};

/// How often status-poll touches are flushed when nothing else commits.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// Most slots one idle-sweep step looks at, and most waiters it removes:
/// a step holds the event for tens of microseconds, whatever the queue's
/// size (see docs/benchmarks.md for the worst status latency measured).
const SWEEP_SCAN: usize = 16 << 10;
const SWEEP_REMOVE: usize = 1 << 10;

/// Members one slice of a rank-index repack moves.
const REPACK_STEP: usize = 8 << 10;

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
        // The idle sweep runs in steps before this (see `Applier::apply`).
        Op::Expire(_) => Reply::Expired(st.expire(0, now)),
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
    /// Runs a due repack of the rank index in slices, letting reads in
    /// between them.
    fn settle<'a>(&'a self, mut st: MutexGuard<'a, EventState>) -> MutexGuard<'a, EventState> {
        let generation = st.generation;
        loop {
            let s = &mut *st;
            if !s.order.repack_step(&mut s.table, REPACK_STEP) {
                return st;
            }
            st = self.pause(st);
            if st.generation != generation {
                return st;
            }
        }
    }

    /// Lets waiting readers (position polls) take the lock once.
    fn pause<'a>(&'a self, st: MutexGuard<'a, EventState>) -> MutexGuard<'a, EventState> {
        drop(st);
        std::thread::yield_now();
        lock(&self.state)
    }

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
        let generation = st.generation;
        let mut commands = batch.drain(..);
        while let Some(c) = commands.next() {
            let now = st.tick((self.clock)());
            let reply = match c.op {
                Op::Expire(req) => {
                    let mut sweep = Sweep::default();
                    let mut more = true;
                    while more {
                        more = st.sweep_idle_step(
                            req.waiting_seen_before_us,
                            &mut sweep,
                            SWEEP_SCAN,
                            SWEEP_REMOVE,
                        );
                        st = self.settle(st);
                        if more {
                            st = self.pause(st);
                        }
                        if st.generation != generation {
                            break;
                        }
                    }
                    if st.generation == generation {
                        let r = st.expire(sweep.idle, now);
                        st = self.settle(st);
                        Ok(Reply::Expired(r))
                    } else {
                        Err(StoreError::Unavailable("an earlier write failed".into()))
                    }
                }
                op => {
                    let r = apply(&mut st, op, now);
                    st = self.settle(st);
                    r
                }
            };
            answers.push((c.tx, reply));
            if st.generation != generation {
                // A failed commit rebuilt memory while reads were let in:
                // this batch was applied to memory that is gone, so none
                // of it may touch the rebuilt one (the committer refuses
                // what was applied, by its generation).
                let why = st
                    .down
                    .clone()
                    .unwrap_or_else(|| "an earlier write failed".into());
                for c in commands.by_ref() {
                    let _ = c.tx.send(Err(StoreError::Unavailable(why.clone())));
                }
                return Some(Batch {
                    generation,
                    writes: Writes::default(),
                    counters: st.counters,
                    answers,
                });
            }
        }
        drop(commands);
        st.flush_seen();
        if answers.is_empty() && st.writes.is_empty() {
            return None;
        }
        Some(Batch {
            generation,
            writes: std::mem::take(&mut st.writes),
            counters: st.counters,
            answers,
        })
    }
}
