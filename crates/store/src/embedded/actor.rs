//! The single writer of one event (the Durable Object model), with group commit.
//!
//! The actor runs on its own OS thread. It takes every queued command (up to
//! `max_batch`), applies them to memory in arrival order and hands the batch
//! (its encoded changes and its answers) to a committer thread, which writes
//! it in ONE durable redb transaction and only then answers every caller: an
//! acknowledged change is on disk. The two threads form a pipeline: while
//! batch k waits for its fsync, batch k+1 is applied and encoded, and
//! whatever is applied before the committer is free joins it (see
//! [`super::handoff`]), so with enough callers in flight throughput is
//! bound by the CPU, not by the fsync latency. If a commit fails, the event is down until the committer has
//! reopened its file and rebuilt memory from it (see [`super::commit`]):
//! every caller of that batch, of any batch applied before the rebuild and of
//! anything asked meanwhile is told the store is unavailable, so nothing
//! unacknowledged is ever visible as durable.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redb::Database;
use tokio::sync::oneshot;

use super::commit::Committer;
use super::disk::{Counters, FileOpts};
use super::handoff::{Pusher, Sender};
use super::state::{EventState, Sweep};
use super::writes::Writes;
use crate::{
    Admission, AdmitRequest, ExpireRequest, Expired, JoinOutcome, Nonce, RedeemOutcome, StoreError,
    Unavailable, UnavailableKind,
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

/// Where the answer to one operation goes. Each [`Op`] carries the sender of
/// its own result type, so an operation cannot be answered with another's,
/// and where its caller waits (see [`deliver`]).
pub(crate) struct ReplyTo<T> {
    tx: oneshot::Sender<Result<T, StoreError>>,
    home: Option<Home>,
}

impl<T> ReplyTo<T> {
    /// The sender for a caller awaiting `tx`'s receiver on this thread.
    pub(crate) fn here(tx: oneshot::Sender<Result<T, StoreError>>) -> Self {
        Self {
            tx,
            home: Home::current(),
        }
    }

    fn send(self, result: Result<T, StoreError>) {
        // A caller that gave up (dropped its future) needs no answer.
        let _ = self.tx.send(result);
    }
}

/// The runtime a caller awaits its answer on, and a number naming the
/// thread it called from: callers on one event loop are answered together
/// from that loop (see [`deliver`]).
struct Home {
    thread: u64,
    rt: tokio::runtime::Handle,
}

impl Home {
    fn current() -> Option<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            static THREAD: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(Self {
            thread: THREAD.with(|t| *t),
            rt,
        })
    }
}

/// A durable operation sent to the actor, with where its answer goes.
pub(crate) enum Op {
    Join {
        member: Box<str>,
        scoring: JoinScoring,
        reply: ReplyTo<JoinOutcome>,
    },
    Admit {
        req: AdmitRequest,
        reply: ReplyTo<Vec<Admission>>,
    },
    Redeem {
        member: Box<str>,
        nonce: Nonce,
        session_expires_at_us: i64,
        /// Refused while the event is paused or closed (a visitor's redeem);
        /// not for a drain session taken over (`take_over_token`).
        opens: bool,
        reply: ReplyTo<RedeemOutcome>,
    },
    Extend {
        member: Box<str>,
        expires_at_us: i64,
        reply: ReplyTo<bool>,
    },
    Release {
        member: Box<str>,
        reply: ReplyTo<bool>,
    },
    Reconcile {
        members: Vec<(String, i64)>,
        reply: ReplyTo<u64>,
    },
    Expire {
        req: ExpireRequest,
        reply: ReplyTo<Expired>,
    },
    ConsumeOnce {
        nonce: Nonce,
        expires_at_us: i64,
        reply: ReplyTo<bool>,
    },
}

impl Op {
    /// Answers the operation without applying it.
    pub(crate) fn refuse(self, e: StoreError) {
        match self {
            Op::Join { reply, .. } => Held::refused(reply, e),
            Op::Admit { reply, .. } => Held::refused(reply, e),
            Op::Redeem { reply, .. } => Held::refused(reply, e),
            Op::Extend { reply, .. } | Op::Release { reply, .. } => Held::refused(reply, e),
            Op::Reconcile { reply, .. } => Held::refused(reply, e),
            Op::Expire { reply, .. } => Held::refused(reply, e),
            Op::ConsumeOnce { reply, .. } => Held::refused(reply, e),
        }
    }
}

/// The result of an applied operation, held with its sender until the
/// batch is committed.
pub(crate) struct Held<T> {
    reply: ReplyTo<T>,
    result: Result<T, StoreError>,
}

impl<T> Held<T> {
    pub(super) fn new(reply: ReplyTo<T>, result: Result<T, StoreError>) -> Self {
        Self { reply, result }
    }

    fn refused(reply: ReplyTo<T>, e: StoreError) {
        reply.send(Err(e));
    }

    fn send(self) {
        // A caller that gave up still had its change committed.
        self.reply.send(self.result);
    }
}

/// One applied operation's answer, by result type.
pub(crate) enum Answer {
    Join(Held<JoinOutcome>),
    Admit(Held<Vec<Admission>>),
    Redeem(Held<RedeemOutcome>),
    Bool(Held<bool>),
    Count(Held<u64>),
    Expired(Held<Expired>),
}

impl Answer {
    /// Where its caller waits.
    fn home(&self) -> Option<&Home> {
        match self {
            Answer::Join(h) => h.reply.home.as_ref(),
            Answer::Admit(h) => h.reply.home.as_ref(),
            Answer::Redeem(h) => h.reply.home.as_ref(),
            Answer::Bool(h) => h.reply.home.as_ref(),
            Answer::Count(h) => h.reply.home.as_ref(),
            Answer::Expired(h) => h.reply.home.as_ref(),
        }
    }

    /// Sends the result: its batch is on disk.
    pub(crate) fn send(self) {
        match self {
            Answer::Join(h) => h.send(),
            Answer::Admit(h) => h.send(),
            Answer::Redeem(h) => h.send(),
            Answer::Bool(h) => h.send(),
            Answer::Count(h) => h.send(),
            Answer::Expired(h) => h.send(),
        }
    }

    /// Sends `e` instead of the result: its batch was not kept.
    pub(crate) fn refuse(self, e: StoreError) {
        match self {
            Answer::Join(h) => Held::refused(h.reply, e),
            Answer::Admit(h) => Held::refused(h.reply, e),
            Answer::Redeem(h) => Held::refused(h.reply, e),
            Answer::Bool(h) => Held::refused(h.reply, e),
            Answer::Count(h) => Held::refused(h.reply, e),
            Answer::Expired(h) => Held::refused(h.reply, e),
        }
    }
}

/// Sends a committed batch's answers, waking each event loop once.
///
/// Why: answering a caller on another thread wakes its task, and tokio
/// wakes a runtime parked in `epoll_wait` from outside with a write to its
/// eventfd on every such wake, whether or not the loop is already awake: a
/// system call on the committer per answer, and the loop woken again and
/// again while it works through them. So the answers to callers of one
/// thread are handed to that thread's runtime as one task, which answers
/// them there (a local wake costs no system call). A runtime that has shut
/// down drops the task unrun, and [`Delivery`]'s drop answers them then,
/// wherever that is: no caller is left without its answer.
pub(crate) fn deliver(answers: Vec<Answer>) {
    if answers.len() < 2 {
        answers.into_iter().for_each(Answer::send);
        return;
    }
    // A handful of event loops at most: a scan beats a map.
    let mut groups: Vec<(u64, tokio::runtime::Handle, Vec<Answer>)> = Vec::new();
    for a in answers {
        let Some(home) = a.home() else {
            a.send();
            continue;
        };
        match groups.iter_mut().find(|g| g.0 == home.thread) {
            Some(group) => group.2.push(a),
            None => groups.push((home.thread, home.rt.clone(), vec![a])),
        }
    }
    for (_, rt, answers) in groups {
        if answers.len() == 1 {
            answers.into_iter().for_each(Answer::send);
        } else {
            let delivery = Delivery(answers);
            drop(rt.spawn(async move { drop(delivery) }));
        }
    }
}

/// Answers handed to a caller's runtime: sent when dropped, run or not.
struct Delivery(Vec<Answer>);

impl Drop for Delivery {
    fn drop(&mut self) {
        self.0.drain(..).for_each(Answer::send);
    }
}

pub(crate) type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Locks the state; a panic while holding the lock cannot leave a half-applied
/// batch acknowledged (nothing was answered), so the data is still usable.
pub(crate) fn lock(m: &Mutex<EventState>) -> MutexGuard<'_, EventState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn apply(st: &mut EventState, op: Op, now_us: i64) -> Answer {
    match op {
        Op::Join {
            member,
            scoring,
            reply,
        } => Answer::Join(Held::new(reply, st.join(&member, &scoring, now_us))),
        Op::Admit { req, reply } => Answer::Admit(Held::new(reply, Ok(st.admit(&req, now_us)))),
        Op::Redeem {
            member,
            nonce,
            session_expires_at_us,
            opens,
            reply,
        } => Answer::Redeem(Held::new(
            reply,
            st.redeem(&member, &nonce, session_expires_at_us, opens, now_us),
        )),
        Op::Extend {
            member,
            expires_at_us,
            reply,
        } => Answer::Bool(Held::new(reply, st.extend(&member, expires_at_us))),
        Op::Release { member, reply } => {
            Answer::Bool(Held::new(reply, st.release(&member, now_us)))
        }
        Op::Reconcile { members, reply } => Answer::Count(Held::new(reply, st.reconcile(&members))),
        // The idle sweep runs in steps before this (see `Applier::apply`).
        Op::Expire { reply, .. } => Answer::Expired(Held::new(reply, Ok(st.expire(0, now_us)))),
        Op::ConsumeOnce {
            nonce,
            expires_at_us,
            reply,
        } => Answer::Bool(Held::new(
            reply,
            Ok(st.consume_once(&nonce, expires_at_us, now_us)),
        )),
    }
}

/// Applies `op` on the caller's thread and hands its batch of one to the
/// committer, as the actor would have: the caller is answered after the
/// commit, as any other. This spares the operation the actor's hop (a
/// futex wake of the actor's thread and a context switch, about an eighth
/// of a join's CPU). `Err` gives the operation back for the actor when it
/// is not one taken here (admissions, expiry and reconciling touch many
/// members and stay with the actor), when the committer's batch is over
/// its bound (only the actor waits for room), or when a repack of the rank
/// index is pending (the actor runs it in slices, letting reads in).
pub(crate) fn apply_inline(
    state: &Mutex<EventState>,
    clock: &Clock,
    to_disk: &Pusher,
    op: Op,
) -> Result<(), Op> {
    if matches!(
        op,
        Op::Admit { .. } | Op::Expire { .. } | Op::Reconcile { .. }
    ) || !to_disk.has_room()
    {
        return Err(op);
    }
    let mut st = lock(state);
    if let Some(why) = &st.down {
        op.refuse(StoreError::Unavailable(why.clone()));
        return Ok(());
    }
    if st.actor_paused || st.order.repack_pending() {
        return Err(op);
    }
    let now_us = clock();
    let generation = st.generation;
    let answer = apply(&mut st, op, now_us);
    // The next operation's writes start with room for one operation's (a
    // redeem's few keys): grown from empty, they were reallocated on the
    // way, twice for a redeem. An operation that wrote nothing leaves the
    // room it found.
    let writes = if st.writes.is_empty() {
        Writes::default()
    } else {
        std::mem::replace(&mut st.writes, Writes::with_capacity(256, 4))
    };
    let b = Batch {
        generation,
        writes,
        counters: st.counters,
        answers: vec![answer],
    };
    // Handed on under the lock, as the actor does: memory's order is the
    // disk's. The committer is gone only while the event stops, and its
    // memory goes with it.
    if let Err(b) = to_disk.push(b) {
        for a in b.answers {
            a.refuse(StoreError::Unavailable(Unavailable::new(
                UnavailableKind::Stopped,
                "the event is stopping",
            )));
        }
    }
    Ok(())
}

pub(crate) struct Actor {
    pub(crate) db: Database,
    pub(crate) wal: super::wal::Wal,
    /// The hand-off to the committer (see [`super::handoff`]); callers that
    /// apply their own operations hold a [`Pusher`] of it.
    pub(crate) to_disk: Sender,
    pub(crate) from_actor: super::handoff::Receiver,
    pub(crate) path: PathBuf,
    pub(crate) files: FileOpts,
    pub(crate) state: Arc<Mutex<EventState>>,
    pub(crate) clock: Clock,
    pub(crate) max_batch: usize,
    pub(crate) stall: Arc<super::stall::Stall>,
}

/// One applied batch on its way to disk.
pub(crate) struct Batch {
    /// The memory generation it was applied to (see [`EventState::generation`]).
    pub(crate) generation: u64,
    pub(crate) writes: Writes,
    pub(crate) counters: Counters,
    pub(crate) answers: Vec<Answer>,
}

impl Batch {
    /// Joins `later`, applied after this batch to the same memory: one
    /// commit writes both and then answers both.
    pub(crate) fn absorb(&mut self, later: Batch) {
        debug_assert_eq!(self.generation, later.generation);
        self.writes.append(later.writes);
        // Each batch carries the counters as they stood after it.
        self.counters = later.counters;
        self.answers.extend(later.answers);
    }
}

impl Actor {
    pub(crate) fn run(self, rx: Receiver<Op>) {
        // The actor runs at most one bounded batch ahead of the commit in
        // progress, which bounds both memory and how far memory can be
        // ahead of the disk; what it applies meanwhile joins that batch
        // (see `handoff`).
        let (to_disk, from_actor) = (self.to_disk, self.from_actor);
        let committer = Committer::new(
            self.db,
            self.wal,
            self.path,
            self.files,
            self.state.clone(),
            self.clock.clone(),
            self.stall.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("event-commit".into())
            .spawn(move || committer.run(from_actor));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let why = Unavailable::new(
                    UnavailableKind::Stopped,
                    format!("cannot start committer: {e}"),
                )
                .with_source(e);
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

fn fail_all(rx: Receiver<Op>, why: &Unavailable) {
    for op in rx {
        op.refuse(StoreError::Unavailable(why.clone()));
    }
}

/// The answer to an operation applied to memory that a failed commit has
/// since thrown away (or not applied because of it).
fn earlier_write_failed(st: &EventState) -> StoreError {
    let why = st
        .down
        .clone()
        .unwrap_or_else(|| Unavailable::new(UnavailableKind::Disk, "an earlier write failed"));
    StoreError::Unavailable(why)
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
    fn pause<'a>(&'a self, mut st: MutexGuard<'a, EventState>) -> MutexGuard<'a, EventState> {
        st.actor_paused = true;
        drop(st);
        std::thread::yield_now();
        let mut st = lock(&self.state);
        st.actor_paused = false;
        st
    }

    fn run(&self, rx: &Receiver<Op>, to_disk: &Sender) {
        let mut batch: Vec<Op> = Vec::with_capacity(self.max_batch);
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
            // Room first, with the state unlocked: reads go on while the
            // committer catches up.
            to_disk.wait_room();
            if self.apply(&mut batch, to_disk).is_err() {
                return;
            }
            if last {
                return;
            }
        }
    }

    /// Applies one batch (possibly empty: a flush of touches, or a repack
    /// left by operations applied on their callers' threads) to memory and
    /// hands it on to the committer before the state is unlocked; `Err` if
    /// the committer is gone.
    fn apply(&self, batch: &mut Vec<Op>, to_disk: &Sender) -> Result<(), ()> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut st = lock(&self.state);
        if let Some(why) = &st.down {
            // Nothing is applied while memory waits to be rebuilt from disk.
            for op in batch.drain(..) {
                op.refuse(StoreError::Unavailable(why.clone()));
            }
            return Ok(());
        }
        // Read before the repack lets reads in: a write that fails while it
        // pauses sets memory to be rebuilt, and nothing of this batch may be
        // applied to it (the rebuild, in a later pause, would keep it).
        let generation = st.generation;
        st = self.settle(st);
        if st.generation != generation {
            for op in batch.drain(..) {
                op.refuse(earlier_write_failed(&st));
            }
            return Ok(());
        }
        let mut commands = batch.drain(..);
        while let Some(op) = commands.next() {
            let now_us = (self.clock)();
            let answer = match op {
                Op::Expire { req, reply } => {
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
                    let result = if st.generation == generation {
                        let r = st.expire(sweep.idle, now_us);
                        st = self.settle(st);
                        Ok(r)
                    } else {
                        Err(earlier_write_failed(&st))
                    };
                    Answer::Expired(Held::new(reply, result))
                }
                op => {
                    let a = apply(&mut st, op, now_us);
                    st = self.settle(st);
                    a
                }
            };
            answers.push(answer);
            if st.generation != generation {
                // A failed commit rebuilt memory while reads were let in:
                // this batch was applied to memory that is gone, so none
                // of it may touch the rebuilt one (the committer refuses
                // what was applied, by its generation).
                for op in commands.by_ref() {
                    op.refuse(earlier_write_failed(&st));
                }
                let b = Batch {
                    generation,
                    writes: Writes::default(),
                    counters: st.counters,
                    answers,
                };
                return to_disk.push(b).map_err(drop);
            }
        }
        drop(commands);
        if answers.is_empty() && st.writes.is_empty() {
            return Ok(());
        }
        let b = Batch {
            generation,
            writes: std::mem::take(&mut st.writes),
            counters: st.counters,
            answers,
        };
        // Handed on under the lock: no operation applied on a caller's
        // thread can hand its later changes on before these.
        let r = to_disk.push(b).map_err(drop);
        drop(st);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` answers whose callers wait on the runtime current where this is
    /// called, with their receivers.
    fn answers(
        n: usize,
    ) -> (
        Vec<Answer>,
        Vec<oneshot::Receiver<Result<bool, StoreError>>>,
    ) {
        (0..n)
            .map(|_| {
                let (tx, rx) = oneshot::channel();
                (Answer::Bool(Held::new(ReplyTo::here(tx), Ok(true))), rx)
            })
            .unzip()
    }

    /// A runtime as the server's event loops are: one thread.
    fn event_loop() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn answers_delivered_on_their_callers_runtime_all_arrive() {
        let rt = event_loop();
        let (batch, receivers) = rt.block_on(async { answers(5) });
        assert!(batch.iter().all(|a| a.home().is_some()));
        // Delivered from another thread, as the committer does.
        std::thread::spawn(move || deliver(batch)).join().unwrap();
        rt.block_on(async {
            for rx in receivers {
                assert!(rx.await.unwrap().unwrap());
            }
        });
    }

    #[test]
    fn answers_for_a_runtime_that_shut_down_still_arrive() {
        let rt = event_loop();
        let (batch, receivers) = rt.block_on(async { answers(3) });
        drop(rt);
        deliver(batch);
        for mut rx in receivers {
            assert!(rx.try_recv().unwrap().unwrap());
        }
    }

    #[test]
    fn answers_without_a_runtime_are_sent_at_once() {
        let (batch, receivers) = answers(2);
        assert!(batch.iter().all(|a| a.home().is_none()));
        deliver(batch);
        for mut rx in receivers {
            assert!(rx.try_recv().unwrap().unwrap());
        }
    }
}
