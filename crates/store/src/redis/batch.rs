//! Join batching: the joins waiting for one event when Redis is ready for
//! more go to it as one `join.lua` call.
//!
//! Why: a lone join pays, inside Redis, for an EVALSHA with its keys, a
//! `TIME`, and one command each for the existence check, the seen mark and
//! the queue length, several times what the member itself costs; on the
//! client it pays one command encoding and one reply per join. A batch pays
//! those once. Each batch is still one atomic script, and every member in it
//! is handled as if its own join had run alone at the batch's `TIME`.
//!
//! No join waits for a batch to fill: one driver task per event takes
//! whatever is queued as soon as fewer than [`IN_FLIGHT`] batches of that
//! event are on their way, so a quiet node sends each join alone at once and
//! a busy one sends larger batches (up to [`MAX_BATCH`], which bounds how
//! long one script holds Redis).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redis::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::conn::Conn;
use super::keys::EventKeys;
use super::{decode_held, scripts};
use crate::{EventId, JoinOutcome, MemberState, Result, StoreError};

/// Largest batch: about a millisecond of Redis time at a few µs per member,
/// so one batch never holds up other clients for long.
const MAX_BATCH: usize = 256;

/// Batches of one event on their way at once: two keep Redis busy while the
/// client encodes the next batch and decodes the last reply (one left Redis
/// idle a third of the time), and give twice the batch size of four when
/// many events share the joins (30 events: ~13 joins a script instead of ~8,
/// 4.7 instead of 7.2 µs of Redis time per join).
const IN_FLIGHT: usize = 2;

/// A driver with no join for this long ends (the next join starts another).
const IDLE: Duration = Duration::from_secs(60);

struct Request {
    member: String,
    scoring: JoinScoring,
    reply: oneshot::Sender<Result<JoinOutcome>>,
}

/// The per-event join drivers of one store (shared by its clones).
#[derive(Clone)]
pub(crate) struct Joiner {
    conn: Conn,
    timeout: Duration,
    drivers: Arc<Mutex<HashMap<EventId, mpsc::UnboundedSender<Request>>>>,
}

impl Joiner {
    pub(crate) fn new(conn: Conn, timeout: Duration) -> Self {
        Self {
            conn,
            timeout,
            drivers: Arc::default(),
        }
    }

    /// Queues one join for `event`'s next batch and waits for its outcome,
    /// bounded by the store's timeout like any other call.
    pub(crate) async fn join(
        &self,
        event: &EventId,
        member: &str,
        scoring: &JoinScoring,
    ) -> Result<JoinOutcome> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            member: member.to_owned(),
            scoring: *scoring,
            reply,
        };
        // A driver that has just closed for idleness refuses the request;
        // the second attempt starts a fresh one.
        if let Err(mpsc::error::SendError(request)) = self.driver(event)?.send(request) {
            self.driver(event)?
                .send(request)
                .map_err(|_| StoreError::Unavailable("the join driver stopped".into()))?;
        }
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "the join driver dropped the call".into(),
            )),
            Err(_) => Err(StoreError::Unavailable(format!(
                "redis did not answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// The sender of `event`'s driver, started on first use. A driver that
    /// closed (idle, or its runtime has gone) is replaced.
    fn driver(&self, event: &EventId) -> Result<mpsc::UnboundedSender<Request>> {
        let mut drivers = self
            .drivers
            .lock()
            .map_err(|_| StoreError::Unavailable("join drivers lock poisoned".into()))?;
        if let Some(tx) = drivers.get(event).filter(|tx| !tx.is_closed()) {
            return Ok(tx.clone());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("join called outside a tokio runtime".into()))?;
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(drive(
            rx,
            self.conn.clone(),
            EventKeys::new(event),
            self.timeout,
        ));
        drivers.insert(event.clone(), tx.clone());
        Ok(tx)
    }
}

/// One event's driver: takes what is queued whenever a batch slot is free.
/// It ends when every sender is gone (the store was dropped), or after
/// [`IDLE`] without a join, so events that stopped joining keep no task.
async fn drive(
    mut rx: mpsc::UnboundedReceiver<Request>,
    conn: Conn,
    keys: EventKeys,
    timeout: Duration,
) {
    let keys: Arc<[String; 6]> = Arc::new([
        keys.queue(),
        keys.seen(),
        keys.held(),
        keys.active(),
        keys.join_batches(),
        keys.join_batch_members(),
    ]);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
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
                // Closing makes new joins start a fresh driver; the loop
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
        // request waited for a slot) was told its join failed: do not run
        // it behind its back now.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let (conn, keys) = (conn.clone(), keys.clone());
        tokio::spawn(async move {
            run(&conn, &keys, batch, timeout).await;
            drop(slot);
        });
    }
}

/// Sends one batch and hands every caller its own outcome, or the batch's
/// error to each: like a lone join that failed, a caller cannot tell whether
/// its join ran, and a retry is harmless because a join is insert-if-absent.
async fn run(conn: &Conn, keys: &[String; 6], batch: Vec<Request>, timeout: Duration) {
    let mut call = scripts::JOIN.call(keys);
    for r in &batch {
        call.arg(&r.member)
            .arg(r.scoring.opens_at_us)
            .arg(r.scoring.prewindow_score)
            .arg(r.scoring.tiebreak)
            .arg(u8::from(r.scoring.behind));
    }
    let reply = conn.eval::<Value>(&scripts::JOIN, &call, timeout).await;
    match reply.and_then(|v| decode(v, batch.len())) {
        Ok(outcomes) => {
            for (r, outcome) in batch.into_iter().zip(outcomes) {
                // A caller that gave up (timed out) no longer listens.
                let _ = r.reply.send(Ok(outcome));
            }
        }
        Err(e) => {
            for r in batch {
                let _ = r.reply.send(Err(copy(&e)));
            }
        }
    }
}

/// Decodes `{length, code, value, ...}` (see `join.lua`) into `n` outcomes.
fn decode(reply: Value, n: usize) -> Result<Vec<JoinOutcome>> {
    let Value::Array(items) = reply else {
        return Err(StoreError::Corrupt("join reply is not an array".into()));
    };
    if items.len() != 1 + 2 * n {
        return Err(StoreError::Corrupt(format!(
            "join reply has {} values for {n} members",
            items.len()
        )));
    }
    let mut items = items.into_iter();
    let queue_length = items.next().map_or(Ok(0), |v| uint(&v))?;
    let mut out = Vec::with_capacity(n);
    while let (Some(code), Some(value)) = (items.next(), items.next()) {
        let outcome = match uint(&code)? {
            c @ (1 | 2) => JoinOutcome {
                new: c == 2,
                state: MemberState::Waiting {
                    rank: uint(&value)?,
                    queue_length,
                },
            },
            c @ (3 | 4) => JoinOutcome {
                new: false,
                state: decode_held(c == 3, &bytes(value)?)?,
            },
            other => {
                return Err(StoreError::Corrupt(format!(
                    "unknown join code {other} from redis"
                )));
            }
        };
        out.push(outcome);
    }
    Ok(out)
}

fn uint(v: &Value) -> Result<u64> {
    match v {
        Value::Int(i) => Ok(u64::try_from(*i).unwrap_or(0)),
        other => Err(StoreError::Corrupt(format!(
            "expected an integer from join, got {other:?}"
        ))),
    }
}

fn bytes(v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        other => Err(StoreError::Corrupt(format!(
            "expected text from join, got {other:?}"
        ))),
    }
}

/// The same error for every caller of a failed batch.
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(s) => StoreError::Unavailable(s.clone()),
        StoreError::InvalidInput(s) => StoreError::InvalidInput(s),
        StoreError::Corrupt(s) => StoreError::Corrupt(s.clone()),
        StoreError::Storage(s) => StoreError::Storage(s.clone()),
    }
}
