//! Call batching: the joins (or the position polls) waiting for one event
//! when Redis is ready for more go to it as one `join.lua` (`status.lua`)
//! call.
//!
//! Why: a lone join pays, inside Redis, for an EVALSHA with its keys, a
//! `TIME`, and one command each for the existence check, the seen mark and
//! the queue length, several times what the member itself costs; on the
//! client it pays one command encoding and one reply per join. A batch pays
//! those once. Each batch is still one atomic script, and every member in it
//! is handled as if its own call had run alone at the batch's `TIME`. Polls
//! are the same story with a smaller script (Redis CPU per poll, lone and
//! batched, in docs/benchmarks.md).
//!
//! No call waits for a batch to fill: one driver task per event and kind
//! takes whatever is queued as soon as fewer than [`IN_FLIGHT`] batches of
//! that event are on their way, so a quiet node sends each call alone at
//! once and a busy one sends larger batches (up to [`MAX_BATCH`], which
//! bounds how long one script holds Redis).
//!
//! Joins keep their arrival order at the node: the members of one batch are
//! ordered by their place in it (see `join.lua` and
//! [`anteroom_core::score::batch_tiebreak`]), and a batch sent while the one
//! before it is still on its way names that one, so if it overtakes it (two
//! tasks, a reconnect, a cluster redirect) Redis refuses it untouched and it
//! is sent again once the earlier one is answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anteroom_core::score::{JoinScoring, MAX_BATCH_ORDER};
use redis::{Cmd, Value};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::conn::{Conn, Lua};
use super::keys::EventKeys;
use super::{decode_held, scripts};
use crate::{EventId, JoinOutcome, MemberState, Result, StoreError, Touch, UnavailableKind};

/// Largest batch: about a millisecond of Redis time at a few µs per member,
/// so one batch never holds up other clients for long.
const MAX_BATCH: usize = 256;

// Every member of a batch needs its own tie-break value to keep its order.
const _: () = assert!(MAX_BATCH <= MAX_BATCH_ORDER);

/// Batches of one event on their way at once: two keep Redis busy while the
/// client encodes the next batch and decodes the last reply (one left Redis
/// idle a third of the time), and give larger batches than four when many
/// events share the joins, so less Redis time per join (the 30-event figures
/// are in docs/benchmarks.md).
const IN_FLIGHT: usize = 2;

/// A driver with no call for this long ends (the next call starts another).
const IDLE: Duration = Duration::from_secs(60);

/// What one kind of batched call sends and gets back.
pub(crate) trait Kind: Send + Sync + 'static {
    /// Per-member arguments beyond the member id.
    type Input: Send + 'static;
    type Output: Send + 'static;
    /// Whether batches must reach Redis in the order they were formed (the
    /// script then takes the driver's order key last and `seq, after` first).
    const ORDERED: bool;
    fn script() -> &'static Lua;
    fn keys(k: &EventKeys) -> Vec<String>;
    fn args(call: &mut Cmd, member: &str, input: &Self::Input);
    /// The outcome of member `i` from `{queue length, code, value, ...}`.
    fn outcome(queue_length: u64, code: u64, value: Value) -> Result<Self::Output>;
}

/// Joins: `join.lua`, one member with its scoring per call.
pub(crate) struct Joins;

impl Kind for Joins {
    type Input = JoinScoring;
    type Output = JoinOutcome;
    const ORDERED: bool = true;
    fn script() -> &'static Lua {
        &scripts::JOIN
    }
    fn keys(k: &EventKeys) -> Vec<String> {
        vec![
            k.queue(),
            k.seen(),
            k.held(),
            k.active(),
            k.join_batches(),
            k.join_batch_members(),
        ]
    }
    fn args(call: &mut Cmd, member: &str, s: &JoinScoring) {
        call.arg(member)
            .arg(s.opens_at_us)
            .arg(s.prewindow_score)
            .arg(s.tiebreak)
            .arg(u8::from(s.behind));
    }
    fn outcome(queue_length: u64, code: u64, value: Value) -> Result<JoinOutcome> {
        if code == 0 {
            return Err(StoreError::Corrupt("join reply says not known".into()));
        }
        Ok(JoinOutcome {
            new: code == 2,
            state: state(queue_length, code, value)?,
        })
    }
}

/// Position polls: `status.lua`, one member and whether to mark it seen.
pub(crate) struct Polls;

impl Kind for Polls {
    type Input = Touch;
    type Output = MemberState;
    // A poll changes no order: any interleaving answers the same.
    const ORDERED: bool = false;
    fn script() -> &'static Lua {
        &scripts::STATUS
    }
    fn keys(k: &EventKeys) -> Vec<String> {
        vec![k.queue(), k.seen(), k.held(), k.active()]
    }
    fn args(call: &mut Cmd, member: &str, touch: &Touch) {
        call.arg(member).arg(u8::from(*touch == Touch::Seen));
    }
    fn outcome(queue_length: u64, code: u64, value: Value) -> Result<MemberState> {
        state(queue_length, code, value)
    }
}

/// A member's state from its `code, value` pair: 0 not known, 1 or 2
/// waiting (value = rank), 3 admitted (the token: 16-byte nonce then
/// decimal expiry), 4 active (decimal session end).
fn state(queue_length: u64, code: u64, value: Value) -> Result<MemberState> {
    Ok(match code {
        0 => MemberState::None,
        1 | 2 => MemberState::Waiting {
            rank: uint(&value)?,
            queue_length,
        },
        3 | 4 => decode_held(code == 3, &bytes(value)?)?,
        other => {
            return Err(StoreError::Corrupt(format!(
                "unknown member state {other} from redis"
            )));
        }
    })
}

struct Request<K: Kind> {
    member: String,
    input: K::Input,
    reply: oneshot::Sender<Result<K::Output>>,
}

/// The per-event drivers of one kind of call, for one store (shared by its
/// clones).
pub(crate) struct Batcher<K: Kind> {
    conn: Conn,
    timeout: Duration,
    drivers: Arc<Mutex<HashMap<EventId, mpsc::UnboundedSender<Request<K>>>>>,
}

impl<K: Kind> Clone for Batcher<K> {
    fn clone(&self) -> Self {
        Self {
            conn: self.conn.clone(),
            timeout: self.timeout,
            drivers: self.drivers.clone(),
        }
    }
}

impl<K: Kind> Batcher<K> {
    pub(crate) fn new(conn: Conn, timeout: Duration) -> Self {
        Self {
            conn,
            timeout,
            drivers: Arc::default(),
        }
    }

    /// Queues one call for `event`'s next batch and waits for its outcome,
    /// bounded by the store's timeout like any other call.
    pub(crate) async fn call(
        &self,
        event: &EventId,
        member: &str,
        input: K::Input,
    ) -> Result<K::Output> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            member: member.to_owned(),
            input,
            reply,
        };
        // A driver that has just closed for idleness refuses the request;
        // the second attempt starts a fresh one.
        if let Err(mpsc::error::SendError(request)) = self.driver(event)?.send(request) {
            self.driver(event)?.send(request).map_err(|_| {
                StoreError::unavailable(UnavailableKind::Stopped, "the batch driver stopped")
            })?;
        }
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(StoreError::unavailable(
                UnavailableKind::Stopped,
                "the batch driver dropped the call",
            )),
            Err(_) => Err(super::conn::timed_out(self.timeout)),
        }
    }

    /// The sender of `event`'s driver, started on first use. A driver that
    /// closed (idle, or its runtime has gone) is replaced.
    fn driver(&self, event: &EventId) -> Result<mpsc::UnboundedSender<Request<K>>> {
        let mut drivers = self.drivers.lock().map_err(|_| {
            StoreError::unavailable(UnavailableKind::Stopped, "batch drivers lock poisoned")
        })?;
        if let Some(tx) = drivers.get(event).filter(|tx| !tx.is_closed()) {
            return Ok(tx.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::unavailable(
                UnavailableKind::Stopped,
                "store called outside a tokio runtime",
            )
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let k = EventKeys::new(event);
        let mut keys = K::keys(&k);
        if K::ORDERED {
            // Each driver numbers its own batches from 1.
            keys.push(k.join_order(rand::random()));
        }
        runtime.spawn(drive::<K>(rx, self.conn.clone(), keys, self.timeout));
        drivers.insert(event.clone(), tx.clone());
        Ok(tx)
    }
}

/// One event's driver: takes what is queued whenever a batch slot is free.
/// It ends when every sender is gone (the store was dropped), or after
/// [`IDLE`] without a call, so events that went quiet keep no task.
async fn drive<K: Kind>(
    mut rx: mpsc::UnboundedReceiver<Request<K>>,
    conn: Conn,
    keys: Vec<String>,
    timeout: Duration,
) {
    let keys: Arc<[String]> = keys.into();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut seq = 0u64;
    // Dropped (closed) when the last batch sent has been answered.
    let mut last_done: Option<oneshot::Receiver<()>> = None;
    loop {
        // Waiting for a slot before reading lets the queue grow while all
        // slots are busy: that is what makes batches under load.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match tokio::time::timeout(IDLE, rx.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return,
            Err(_) => {
                // Closing makes new calls start a fresh driver; the loop
                // still serves whatever raced in, then ends on `None`.
                rx.close();
                continue;
            }
        };
        let mut batch = Vec::with_capacity(rx.len().min(MAX_BATCH - 1) + 1);
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        // A caller that already gave up (its timeout passed while the
        // request waited for a slot) was told its call failed: do not run
        // it behind its back now.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        seq += 1;
        let (done, done_rx) = oneshot::channel::<()>();
        let order = Order {
            seq,
            before: last_done.replace(done_rx),
        };
        let (conn, keys) = (conn.clone(), keys.clone());
        tokio::spawn(async move {
            run::<K>(&conn, &keys, batch, timeout, order).await;
            drop(done);
            drop(slot);
        });
    }
}

/// Where a batch stands in its driver's sequence.
struct Order {
    seq: u64,
    /// Closes when the batch before it has been answered.
    before: Option<oneshot::Receiver<()>>,
}

impl Order {
    /// The batch that must run first, if it may still be on its way.
    fn after(&mut self) -> u64 {
        match self.before.as_mut().map(oneshot::Receiver::try_recv) {
            Some(Err(oneshot::error::TryRecvError::Empty)) => self.seq - 1,
            _ => 0,
        }
    }
}

/// Sends one batch and hands every caller its own outcome, or the batch's
/// error to each: like a lone call that failed, a caller cannot tell whether
/// its join ran, and a retry is harmless because a join is insert-if-absent.
async fn run<K: Kind>(
    conn: &Conn,
    keys: &[String],
    batch: Vec<Request<K>>,
    timeout: Duration,
    mut order: Order,
) {
    let script = K::script();
    let first = call::<K>(keys, order.seq, order.after(), &batch);
    let mut reply = conn.eval::<Value>(script, &first, timeout).await;
    if K::ORDERED && matches!(&reply, Ok(Value::Array(v)) if v.len() == 1) {
        // It overtook the batch before it: send it again once that one is
        // answered (whatever the answer, it has reached Redis or never will).
        if let Some(before) = order.before.take() {
            let _ = tokio::time::timeout(timeout, before).await;
        }
        let again = call::<K>(keys, order.seq, 0, &batch);
        reply = conn.eval::<Value>(script, &again, timeout).await;
    }
    match reply.and_then(|v| decode::<K>(v, batch.len())) {
        Ok(outcomes) => {
            for (r, outcome) in batch.into_iter().zip(outcomes) {
                // A caller that gave up (timed out) no longer listens.
                let _ = r.reply.send(outcome);
            }
        }
        Err(e) => {
            for r in batch {
                let _ = r.reply.send(Err(copy(&e)));
            }
        }
    }
}

/// The script call of one batch (`seq, after` first for ordered kinds).
fn call<K: Kind>(keys: &[String], seq: u64, after: u64, batch: &[Request<K>]) -> Cmd {
    let mut call = K::script().call(keys);
    if K::ORDERED {
        call.arg(seq).arg(after);
    }
    for r in batch {
        K::args(&mut call, &r.member, &r.input);
    }
    call
}

/// Splits `{queue length, code, value, ...}` into `n` outcomes.
fn decode<K: Kind>(reply: Value, n: usize) -> Result<Vec<Result<K::Output>>> {
    let Value::Array(items) = reply else {
        return Err(StoreError::Corrupt("batch reply is not an array".into()));
    };
    if items.len() != 1 + 2 * n {
        return Err(StoreError::Corrupt(format!(
            "batch reply has {} values for {n} members",
            items.len()
        )));
    }
    let mut items = items.into_iter();
    let queue_length = items.next().map_or(Ok(0), |v| uint(&v))?;
    let mut out = Vec::with_capacity(n);
    while let (Some(code), Some(value)) = (items.next(), items.next()) {
        out.push(uint(&code).and_then(|c| K::outcome(queue_length, c, value)));
    }
    Ok(out)
}

fn uint(v: &Value) -> Result<u64> {
    match v {
        Value::Int(i) => Ok(u64::try_from(*i).unwrap_or(0)),
        other => Err(StoreError::Corrupt(format!(
            "expected an integer from redis, got {other:?}"
        ))),
    }
}

fn bytes(v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        other => Err(StoreError::Corrupt(format!(
            "expected text from redis, got {other:?}"
        ))),
    }
}

/// The same error for every caller of a failed batch.
fn copy(e: &StoreError) -> StoreError {
    e.duplicate()
}

#[cfg(all(test, feature = "conformance"))]
mod tests;
