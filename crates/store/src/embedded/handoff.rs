//! The hand-off of applied batches from an event's actor to its committer.
//!
//! A batch applied while the committer is busy with the last one waits
//! here, and whatever the actor applies after it, until the committer is
//! free, joins it: the next commit takes everything that arrived during
//! the last one. A rendezvous channel instead sealed the waiting batch at
//! once, so a caller that arrived during commit k waited for k+1 to be
//! written before its own batch was: with a fixed number of callers in
//! flight (a crowd's connections), each waited about two and a half
//! commits instead of one and a half, and the event's joins went at the
//! fsync's pace divided by that.
//!
//! The waiting batch is bounded (`cap` answers): past it the actor waits
//! for the committer, so memory stays at most one bounded batch ahead of
//! the disk, as before. An operation applied on its caller's thread (see
//! [`super::actor::apply_inline`]) joins the waiting batch the same way but
//! never waits: over the bound it goes to the actor instead. Every batch is
//! handed on while the event's state is locked, so the committer writes
//! changes in the order memory took them, whichever thread applied them.
//! Batches applied to different memory generations (a failed commit in
//! between) are never joined: the committer refuses the older one whole.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::actor::Batch;

struct Slot {
    waiting: VecDeque<Batch>,
    /// The actor's side is gone: nothing more will come.
    sender_gone: bool,
    /// The committer's side is gone: nothing more is taken.
    receiver_gone: bool,
    /// The committer waits for a batch / the actor waits for room: a side
    /// wakes the other only then, as a `Condvar` notification is a system
    /// call even when nobody waits, and operations applied on the callers'
    /// threads hand on one batch each. The side that notifies clears the
    /// flag; the waiter sets it again each time it goes back to waiting.
    receiver_waits: bool,
    sender_waits: bool,
}

impl Slot {
    fn answers(&self) -> usize {
        self.waiting.iter().map(|b| b.answers.len()).sum()
    }
}

struct Shared {
    slot: Mutex<Slot>,
    /// Signalled when a side that waits has something to see (a batch in,
    /// a batch out, a side gone); the two sides wait on it for opposite
    /// things.
    changed: Condvar,
    cap: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `b` on, joined to the batch already waiting when both were
    /// applied to the same memory; never waits. `Err` with the batch if
    /// either side is gone.
    fn push(&self, b: Batch) -> Result<(), Batch> {
        let mut slot = self.lock();
        if slot.receiver_gone || slot.sender_gone {
            return Err(b);
        }
        match slot.waiting.back_mut() {
            Some(last) if last.generation == b.generation => last.absorb(b),
            _ => slot.waiting.push_back(b),
        }
        if slot.receiver_waits {
            // Once: the pushes that follow before the committer runs again
            // (callers on every event loop) would each notify it anew.
            slot.receiver_waits = false;
            self.changed.notify_all();
        }
        Ok(())
    }
}

/// The actor's side.
pub(crate) struct Sender(Arc<Shared>);

/// A side that only hands batches on, for operations applied on their
/// callers' threads: unlike the [`Sender`] it does not keep the committer
/// running (the actor's going ends it), and it never waits.
pub(crate) struct Pusher(Arc<Shared>);

/// The committer's side.
pub(crate) struct Receiver(Arc<Shared>);

/// A hand-off whose waiting batch holds at most `cap` answers before the
/// actor waits (at least one batch always goes in).
pub(crate) fn handoff(cap: usize) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            waiting: VecDeque::new(),
            sender_gone: false,
            receiver_gone: false,
            receiver_waits: false,
            sender_waits: false,
        }),
        changed: Condvar::new(),
        cap: cap.max(1),
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl Sender {
    /// Hands `b` on, then waits while the waiting batch is over its bound.
    #[cfg(test)]
    pub(crate) fn send(&self, b: Batch) -> Result<(), Batch> {
        self.push(b)?;
        self.wait_room();
        Ok(())
    }

    /// Hands `b` on without waiting (see [`Self::wait_room`]).
    pub(crate) fn push(&self, b: Batch) -> Result<(), Batch> {
        self.0.push(b)
    }

    /// Waits while the waiting batch is over its bound (the actor calls it
    /// before applying its next batch, with the event's state unlocked).
    pub(crate) fn wait_room(&self) {
        let shared = &*self.0;
        let mut slot = shared.lock();
        while !slot.receiver_gone && slot.answers() > shared.cap {
            slot.sender_waits = true;
            slot = shared
                .changed
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
        slot.sender_waits = false;
    }

    pub(crate) fn pusher(&self) -> Pusher {
        Pusher(self.0.clone())
    }
}

impl Pusher {
    /// Is the waiting batch within its bound? An operation applied on its
    /// caller's thread goes to the actor instead when it is not, so that
    /// only the actor ever waits for the committer.
    pub(crate) fn has_room(&self) -> bool {
        let slot = self.0.lock();
        !slot.receiver_gone && !slot.sender_gone && slot.answers() <= self.0.cap
    }

    /// As [`Sender::push`].
    pub(crate) fn push(&self, b: Batch) -> Result<(), Batch> {
        self.0.push(b)
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.changed.notify_all();
    }
}

impl Receiver {
    /// The oldest waiting batch, waiting for one; `None` once the actor is
    /// gone and nothing waits.
    pub(crate) fn recv(&self) -> Option<Batch> {
        let shared = &*self.0;
        let mut slot = shared.lock();
        loop {
            if let Some(b) = slot.waiting.pop_front() {
                slot.receiver_waits = false;
                if slot.sender_waits {
                    slot.sender_waits = false;
                    shared.changed.notify_all();
                }
                return Some(b);
            }
            if slot.sender_gone {
                return None;
            }
            slot.receiver_waits = true;
            slot = shared
                .changed
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// As [`Self::recv`], waiting at most `timeout`.
    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<Batch, RecvTimeoutError> {
        let shared = &*self.0;
        let until = Instant::now() + timeout;
        let mut slot = shared.lock();
        loop {
            if let Some(b) = slot.waiting.pop_front() {
                slot.receiver_waits = false;
                if slot.sender_waits {
                    slot.sender_waits = false;
                    shared.changed.notify_all();
                }
                return Ok(b);
            }
            if slot.sender_gone {
                slot.receiver_waits = false;
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                slot.receiver_waits = false;
                return Err(RecvTimeoutError::Timeout);
            }
            slot.receiver_waits = true;
            slot = shared
                .changed
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.0.lock().receiver_gone = true;
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::actor::Answer;
    use crate::embedded::disk::Counters;
    use crate::embedded::writes::Writes;

    fn batch(generation: u64) -> Batch {
        Batch {
            generation,
            writes: Writes::default(),
            counters: Counters::default(),
            answers: Vec::new(),
        }
    }

    #[test]
    fn batches_of_one_generation_wait_as_one_and_others_apart() {
        let (tx, rx) = handoff(16);
        let mut a = batch(1);
        a.writes.unwait(1, "a");
        let mut b = batch(1);
        b.writes.unwait(2, "b");
        let mut c = batch(2);
        c.writes.unwait(3, "c");
        tx.send(a).ok().unwrap();
        tx.send(b).ok().unwrap();
        tx.send(c).ok().unwrap();
        let first = rx.recv().unwrap();
        assert_eq!((first.generation, first.writes.len()), (1, 2));
        let second = rx.recv().unwrap();
        assert_eq!((second.generation, second.writes.len()), (2, 1));
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Timeout)
        ));
        drop(tx);
        assert!(rx.recv().is_none());
    }

    /// A batch of `n` answers to callers that already left.
    fn answered(generation: u64, n: usize) -> Batch {
        let mut b = batch(generation);
        for _ in 0..n {
            let (reply, _) = tokio::sync::oneshot::channel();
            b.answers
                .push(Answer::Bool(crate::embedded::actor::Held::new(
                    crate::embedded::actor::ReplyTo::here(reply),
                    Ok(true),
                )));
        }
        b
    }

    #[test]
    fn the_actor_waits_while_the_waiting_batch_is_over_its_bound() {
        let (tx, rx) = handoff(4);
        tx.send(answered(1, 3)).ok().unwrap();
        let (sent, done) = std::sync::mpsc::channel();
        let actor = std::thread::spawn(move || {
            // 3 + 3 answers: over the bound of 4 until the committer takes them.
            tx.send(answered(1, 3)).ok().unwrap();
            sent.send(()).unwrap();
        });
        assert!(
            done.recv_timeout(Duration::from_millis(200)).is_err(),
            "the send returned with 6 answers waiting against a bound of 4"
        );
        let taken = rx.recv().unwrap();
        assert_eq!(taken.answers.len(), 6);
        done.recv_timeout(Duration::from_secs(10))
            .expect("the send still waits after the committer took the batch");
        actor.join().unwrap();
    }

    #[test]
    fn a_pusher_never_waits_and_has_no_room_past_the_bound_or_after_the_actor() {
        let (tx, rx) = handoff(4);
        let p = tx.pusher();
        assert!(p.has_room());
        p.push(answered(1, 3)).ok().unwrap();
        assert!(p.has_room(), "3 answers are within a bound of 4");
        // Past the bound the push still returns at once (only the actor
        // waits), and the next caller is sent to the actor.
        p.push(answered(1, 3)).ok().unwrap();
        assert!(!p.has_room());
        assert_eq!(rx.recv().unwrap().answers.len(), 6, "joined as one batch");
        assert!(p.has_room());
        // The actor's going ends the committer's input, pushers' included:
        // a pusher does not keep the committer running.
        drop(tx);
        assert!(!p.has_room());
        assert!(p.push(batch(1)).is_err());
        assert!(rx.recv().is_none());
    }

    #[test]
    fn a_send_after_the_committer_is_gone_gives_the_batch_back() {
        let (tx, rx) = handoff(16);
        drop(rx);
        assert!(tx.send(batch(1)).is_err());
    }
}
