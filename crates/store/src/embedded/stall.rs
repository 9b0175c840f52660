//! How long an event's disk has held its committer: a hung disk (a stuck
//! network volume, a FUSE daemon that stopped answering, a device whose
//! queue froze) never fails a write, it just never finishes one. Without a
//! watch the event's memory goes on answering polls and pings while every
//! join, redeem and admission waits for the disk forever, so the node
//! neither serves nor drains. The committer stamps each write it starts
//! and clears the stamp when it is done; a write held past the store's
//! timeout makes the event unavailable, as a timed-out Redis call does:
//! its ping says so (the node drains), new calls are refused at once, and
//! a caller already waiting is answered after the timeout (see
//! `EmbeddedStore::call`). The server's drain journal, written on the same
//! disk by default, watches its writes the same way.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{EventId, StoreError, UnavailableKind};

/// The instant stamps count from: a stamp is its milliseconds + 1, so 0
/// means no write under way.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    u64::try_from(BASE.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

/// The write under way on one disk, if any (one writer at a time).
#[derive(Debug, Default)]
pub struct Stall {
    since_ms: AtomicU64,
}

impl Stall {
    /// A write to the disk starts.
    pub fn begin(&self) {
        self.since_ms.store(now_ms(), Ordering::Release);
    }

    /// A write that started at `at`, before this watch of it began (a
    /// first start of an event that a deletion comes to wait for).
    pub fn begin_at(&self, at: Instant) {
        let ms =
            u64::try_from(at.saturating_duration_since(*BASE).as_millis()).unwrap_or(u64::MAX - 1);
        self.since_ms.store(ms + 1, Ordering::Release);
    }

    /// The write has finished (written or failed).
    pub fn end(&self) {
        self.since_ms.store(0, Ordering::Release);
    }

    /// A write starts, and ends when the guard is dropped (however it ends).
    pub fn hold(&self) -> Holding<'_> {
        self.begin();
        Holding(self)
    }

    /// How long the write under way has taken; `None` when none is.
    pub fn held_for(&self) -> Option<Duration> {
        match self.since_ms.load(Ordering::Acquire) {
            0 => None,
            since => Some(Duration::from_millis(now_ms().saturating_sub(since))),
        }
    }

    /// The refusal of a call to `event` while its disk has held a write
    /// longer than `limit`.
    pub(crate) fn refusal(&self, event: &EventId, limit: Duration) -> Option<StoreError> {
        let held = self.held_for().filter(|held| *held > limit)?;
        Some(hung(event, held))
    }
}

/// Awaits `answer` while the disk it depends on answers: gives up (with how
/// long the write was held) only once `held` reports a write held for
/// `limit`; time without a write under way (work of the caller's own, a
/// queue ahead of it) is waited for. `held` is asked only when `answer`
/// is late.
pub(crate) async fn within<F: std::future::Future + Unpin>(
    answer: &mut F,
    limit: Duration,
    held: impl Fn() -> Option<Duration>,
) -> Result<F::Output, Duration> {
    let mut wait = limit;
    loop {
        match tokio::time::timeout(wait, &mut *answer).await {
            Ok(out) => return Ok(out),
            Err(_) => match held() {
                Some(held) if held >= limit => return Err(held),
                // A write under way, not yet held that long: until it is.
                Some(held) => wait = (limit - held).max(Duration::from_millis(1)),
                None => wait = limit,
            },
        }
    }
}

/// A write under way (see [`Stall::hold`]).
pub struct Holding<'a>(&'a Stall);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The disk of `event` has held a write for `held`.
pub(crate) fn hung(event: &EventId, held: Duration) -> StoreError {
    StoreError::unavailable(
        UnavailableKind::TimedOut,
        format!(
            "event {event}: its disk has not finished a write for {} ms",
            held.as_millis()
        ),
    )
}

/// The meta file's disk (admin states, stored configs, the audit trail)
/// has held a write for `held`.
pub(crate) fn meta_hung(held: Duration) -> StoreError {
    StoreError::unavailable(
        UnavailableKind::TimedOut,
        format!(
            "the meta file's disk has not finished a write for {} ms",
            held.as_millis()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AdmitRequest;
    use crate::QueueStore as _;
    use crate::embedded::actor::lock;
    use crate::embedded::{EmbeddedOptions, EmbeddedStore};
    use anteroom_core::score::JoinScoring;

    /// Past a commit's `fdatasync` on a loaded box: only the actor's long
    /// step may outlast it.
    const TIMEOUT: Duration = Duration::from_millis(300);

    /// A store with one member waiting in `ev`, and a thread that keeps the
    /// event's actor from its memory for five timeouts (as a big admit, a
    /// sweep or a big last batch keeps it), holding it once this returns.
    async fn store_with_a_busy_actor(
        dir: &std::path::Path,
        ev: &EventId,
    ) -> (EmbeddedStore, std::thread::JoinHandle<()>) {
        let opts = EmbeddedOptions {
            timeout: TIMEOUT,
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStore::open(dir, opts).await.unwrap();
        let scoring = JoinScoring {
            opens_at_us: 0,
            prewindow_score: -1,
            tiebreak: 0,
            behind: false,
        };
        s.join(ev, "a", &scoring).await.unwrap();
        let h = s.event(ev).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let busy = std::thread::spawn(move || {
            let _memory = lock(&h.state);
            held_tx.send(()).unwrap();
            std::thread::sleep(TIMEOUT * 5);
        });
        held_rx.recv().unwrap();
        (s, busy)
    }

    /// A call waiting behind long work of the actor's own with the disk
    /// answering is waited for however long that takes: only a write the
    /// disk holds makes the event unavailable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_behind_long_work_of_the_actor_waits_past_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let ev = EventId::new("busy").unwrap();
        let (s, busy) = store_with_a_busy_actor(dir.path(), &ev).await;
        let t = std::time::Instant::now();
        let admit = AdmitRequest {
            max: 1,
            max_active: 10,
            nonces: vec![[1; 16]],
            token_ttl_us: 60_000_000,
        };
        let admitted = s.admit(&ev, &admit).await;
        let waited = t.elapsed();
        busy.join().unwrap();
        assert_eq!(admitted.unwrap().len(), 1, "refused after {waited:?}");
        assert!(waited >= TIMEOUT * 2, "waited only {waited:?}");
    }

    /// An event's deletion whose actor is slow to stop with the disk
    /// answering is waited for past the timeout, not answered unavailable
    /// while it goes on: only a write the disk holds bounds it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deletion_slow_on_a_disk_that_answers_waits_past_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let ev = EventId::new("slow").unwrap();
        let (s, busy) = store_with_a_busy_actor(dir.path(), &ev).await;
        let t = std::time::Instant::now();
        let deleted = s.delete_event(&ev).await;
        let waited = t.elapsed();
        busy.join().unwrap();
        assert!(deleted.is_ok(), "{deleted:?} after {waited:?}");
        assert!(waited >= TIMEOUT * 2, "waited only {waited:?}");
        assert!(matches!(
            s.status(&ev, "a", crate::Touch::Peek).await.unwrap(),
            crate::MemberState::None
        ));
    }

    #[test]
    fn a_write_held_past_the_limit_refuses_until_it_ends() {
        let ev = EventId::new("e").unwrap();
        let s = Stall::default();
        assert!(s.held_for().is_none());
        assert!(
            s.refusal(&ev, Duration::ZERO).is_none(),
            "no write, no refusal"
        );
        s.begin();
        std::thread::sleep(Duration::from_millis(5));
        assert!(s.refusal(&ev, Duration::from_secs(60)).is_none());
        let e = s
            .refusal(&ev, Duration::from_millis(1))
            .expect("held past 1 ms");
        assert_eq!(e.unavailable_kind(), Some(UnavailableKind::TimedOut));
        s.end();
        assert!(s.refusal(&ev, Duration::ZERO).is_none());
    }
}
