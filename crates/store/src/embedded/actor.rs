//! The single writer of one event (the Durable Object model), with group commit.
//!
//! The actor runs on its own OS thread because a durable redb commit blocks
//! on fsync. It takes every queued command (up to `max_batch`), applies them
//! to memory in arrival order, writes all their changes in ONE redb
//! transaction, commits durably, and only then answers every caller: an
//! acknowledged change is on disk. If a commit fails, every caller of the
//! batch gets the error and memory is rebuilt from disk, so nothing
//! unacknowledged is ever visible as durable.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redb::Database;
use tokio::sync::oneshot;

use super::disk;
use super::load;
use super::state::EventState;
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

impl Actor {
    pub(crate) fn run(self, rx: Receiver<Command>) {
        let mut batch: Vec<Command> = Vec::with_capacity(self.max_batch);
        loop {
            match rx.recv_timeout(FLUSH_EVERY) {
                Ok(c) => batch.push(c),
                Err(RecvTimeoutError::Timeout) => {
                    self.step(&mut batch);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.step(&mut batch);
                    return;
                }
            }
            while batch.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            self.step(&mut batch);
        }
    }

    /// Applies, commits and answers one batch (possibly empty: a flush of touches).
    fn step(&self, batch: &mut Vec<Command>) {
        let mut answers = Vec::with_capacity(batch.len());
        let (writes, counters) = {
            let mut st = lock(&self.state);
            if let Some(why) = &st.failed {
                for c in batch.drain(..) {
                    let _ = c.tx.send(Err(StoreError::Storage(why.clone())));
                }
                return;
            }
            for c in batch.drain(..) {
                let now = st.tick((self.clock)());
                answers.push((c.tx, apply(&mut st, c.op, now)));
            }
            st.flush_seen();
            (std::mem::take(&mut st.writes), st.counters)
        };
        if !writes.is_empty()
            && let Err(e) = disk::commit(&self.db, &self.path, &writes, counters)
        {
            tracing::error!(path = %self.path.display(), error = %e, "event commit failed; reloading from disk");
            self.recover();
            for (tx, _) in answers {
                let _ = tx.send(Err(StoreError::Storage(e.to_string())));
            }
            return;
        }
        for (tx, r) in answers {
            // A caller that gave up (dropped its future) still had its change committed.
            let _ = tx.send(r);
        }
    }

    /// Puts memory back to what the disk holds after a failed commit.
    fn recover(&self) {
        let mut st = lock(&self.state);
        let admin = st.admin;
        match load::load(&self.db, &self.path) {
            Ok(mut fresh) => {
                fresh.admin = admin;
                *st = fresh;
            }
            Err(e) => st.failed = Some(format!("{e}; restart the node")),
        }
    }
}
