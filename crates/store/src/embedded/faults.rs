//! Test-only write failures on command: a redb storage backend that wraps
//! the real file and fails every write, resize and sync while switched on,
//! as a failing or full disk would.

use std::fs::OpenOptions;
use std::io::{Error, ErrorKind};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The switch every file opened with it obeys.
#[derive(Debug, Default)]
pub struct Faults {
    failing: AtomicBool,
    failed: AtomicU64,
    /// The next log sync fails after its record was written, and every
    /// write after it, as a disk that dies under a sync does.
    sync_dies: AtomicBool,
}

impl Faults {
    /// Makes every later write fail (`true`) or succeed again (`false`).
    pub fn set_failing(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    /// Writes refused so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    /// Makes the next log sync fail after its write, and every write after
    /// it (see [`Faults::set_failing`]).
    pub fn die_at_next_sync(&self) {
        self.sync_dies.store(true, Ordering::SeqCst);
    }

    /// Before a log's sync, its record written.
    pub(crate) fn check_sync(&self) -> Result<(), Error> {
        if self.sync_dies.swap(false, Ordering::SeqCst) {
            self.set_failing(true);
        }
        self.check()
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.failing.load(Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(Error::new(ErrorKind::StorageFull, "injected write failure"));
        }
        Ok(())
    }
}

/// A file backend that fails on command.
#[derive(Debug)]
pub(crate) struct Faulty {
    inner: FileBackend,
    faults: Arc<Faults>,
}

impl Faulty {
    pub(crate) fn open(path: &Path, faults: Arc<Faults>) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let inner = FileBackend::new(file).map_err(|e| Error::other(e.to_string()))?;
        Ok(Self { inner, faults })
    }
}

impl StorageBackend for Faulty {
    fn len(&self) -> Result<u64, Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), Error> {
        self.faults.check()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), Error> {
        self.faults.check()?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.faults.check()?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anteroom_core::score::JoinScoring;

    use super::Faults;
    use crate::embedded::{EmbeddedOptions, EmbeddedStore};
    use crate::{EventId, MemberState, QueueStore, StoreError, Touch};

    /// Opened a minute before the tests started, so arrival order is rank order.
    static OPENS_AT_US: std::sync::LazyLock<i64> =
        std::sync::LazyLock::new(|| crate::embedded::system_clock_us() - 60_000_000);

    fn scoring() -> JoinScoring {
        JoinScoring {
            opens_at_us: *OPENS_AT_US,
            prewindow_score: -1,
            tiebreak: 0,
            behind: false,
        }
    }

    /// Joins until one is acknowledged, retrying while the event drains.
    async fn join_when_back(s: &EmbeddedStore, ev: &EventId, m: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match s.join(ev, m, &scoring()).await {
                Ok(_) => return,
                Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("join of {m} while recovering: {e}"),
            }
        }
    }

    async fn assert_waiting(s: &EmbeddedStore, ev: &EventId, members: &[String]) {
        for (i, m) in members.iter().enumerate() {
            match s.status(ev, m, Touch::Peek).await.unwrap() {
                MemberState::Waiting { rank, .. } => assert_eq!(rank, i as u64, "{m}"),
                other => panic!("{m} was acknowledged but is {other:?}"),
            }
        }
    }

    /// A failed write drains the event instead of breaking it until restart:
    /// it answers unavailable (no other error), comes back by itself when
    /// writes work again, keeps every acknowledged join, and forgets the
    /// joins that were refused, also after a restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_drains_the_event_until_the_disk_works_again() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::default());
        let opts = EmbeddedOptions {
            faults: Some(faults.clone()),
            ..EmbeddedOptions::default()
        };
        let ev = EventId::new("faulty").unwrap();
        let mut acked: Vec<String> = Vec::new();
        {
            let s = EmbeddedStore::open(dir.path(), opts).await.unwrap();
            for i in 0..50 {
                let m = format!("before{i:03}");
                s.join(&ev, &m, &scoring()).await.unwrap();
                acked.push(m);
            }
            faults.set_failing(true);
            // Concurrent joins: some are applied in the batch that fails,
            // some in the batch pipelined behind it, some while down.
            let refused: Vec<String> = (0..64).map(|i| format!("refused{i:03}")).collect();
            let sc = scoring();
            let outcomes =
                futures::future::join_all(refused.iter().map(|m| s.join(&ev, m, &sc))).await;
            for (m, o) in refused.iter().zip(outcomes) {
                match o {
                    // Why it is unavailable: the disk (the drain decides by it).
                    Err(StoreError::Unavailable(u)) => {
                        assert_eq!(u.kind(), crate::UnavailableKind::Disk, "{m}: {u}");
                    }
                    other => panic!("join of {m} on a failing disk: {other:?}"),
                }
            }
            assert!(faults.failed() > 0, "no write was attempted");
            // Reads are refused too: memory may show what the disk lacks.
            let read = s.status(&ev, &acked[0], Touch::Peek).await;
            assert!(matches!(read, Err(StoreError::Unavailable(_))));
            let kind = read.err().and_then(|e| e.unavailable_kind());
            assert_eq!(kind, Some(crate::UnavailableKind::Disk));
            assert!(matches!(
                s.set_admin_state(&ev, anteroom_core::phase::AdminState::Paused)
                    .await,
                Err(StoreError::Unavailable(_))
            ));
            // Still failing after several reopen attempts.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(matches!(
                s.join(&ev, "late", &scoring()).await,
                Err(StoreError::Unavailable(_))
            ));
            faults.set_failing(false);
            join_when_back(&s, &ev, "after000").await;
            acked.push("after000".into());
            for i in 1..20 {
                let m = format!("after{i:03}");
                s.join(&ev, &m, &scoring()).await.unwrap();
                acked.push(m);
            }
            assert_waiting(&s, &ev, &acked).await;
            for m in refused.iter().map(String::as_str).chain(["late"]) {
                assert_eq!(
                    s.status(&ev, m, Touch::Peek).await.unwrap(),
                    MemberState::None,
                    "{m}"
                );
            }
            assert_eq!(s.queue_length(&ev).await.unwrap(), acked.len() as u64);
            // The meta file came back too.
            s.set_admin_state(&ev, anteroom_core::phase::AdminState::Running)
                .await
                .unwrap();
        }
        let s = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .unwrap();
        assert_waiting(&s, &ev, &acked).await;
        assert_eq!(s.queue_length(&ev).await.unwrap(), acked.len() as u64);
    }
    /// A record whose sync failed was refused, so no start may bring it
    /// back, even one before the failed event was reopened (a restart while
    /// the disk still fails), though the failed sync left it readable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_join_whose_sync_failed_is_not_brought_back_by_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::default());
        let opts = EmbeddedOptions {
            faults: Some(faults.clone()),
            ..EmbeddedOptions::default()
        };
        let ev = EventId::new("faulty-sync").unwrap();
        let acked: Vec<String> = (0..10).map(|i| format!("m{i:03}")).collect();
        {
            let s = EmbeddedStore::open(dir.path(), opts).await.unwrap();
            for m in &acked {
                s.join(&ev, m, &scoring()).await.unwrap();
            }
            faults.die_at_next_sync();
            let refused = s.join(&ev, "refused", &scoring()).await;
            assert!(
                matches!(refused, Err(StoreError::Unavailable(_))),
                "join whose sync failed: {refused:?}"
            );
            // Stopped while the disk still fails: the reopen that would
            // have cleared the log never succeeded.
            assert!(faults.failed() >= 1);
        }
        let s = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .unwrap();
        assert_waiting(&s, &ev, &acked).await;
        assert_eq!(
            s.status(&ev, "refused", Touch::Peek).await.unwrap(),
            MemberState::None
        );
        assert_eq!(s.queue_length(&ev).await.unwrap(), acked.len() as u64);
    }

    fn admit_req(max: u64, seed: u8) -> crate::AdmitRequest {
        crate::AdmitRequest {
            max,
            max_active: 100,
            nonces: (0..max).map(|i| [seed; 16].map(|b| b ^ i as u8)).collect(),
            token_ttl_us: 3_600_000_000,
        }
    }

    /// After a failed commit the memory is rebuilt from the file, not kept:
    /// an admit and a redeem in the failing batch were answered unavailable,
    /// so after recovery (and after a restart) their members are exactly as
    /// the disk last had them: the newly admitted back in the line at their
    /// ranks with no token, the redeemed one still holding its token, and
    /// the slots they would have taken free for the next admit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_admit_and_a_redeem_refused_by_the_disk_leave_nothing_in_the_rebuilt_memory() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::default());
        let opts = EmbeddedOptions {
            faults: Some(faults.clone()),
            ..EmbeddedOptions::default()
        };
        let ev = EventId::new("faulty-admit").unwrap();
        let members: Vec<String> = (0..10).map(|i| format!("m{i:03}")).collect();
        let first;
        {
            let s = EmbeddedStore::open(dir.path(), opts).await.unwrap();
            for m in &members {
                s.join(&ev, m, &scoring()).await.unwrap();
            }
            first = s.admit(&ev, &admit_req(2, 1)).await.unwrap();
            assert_eq!(
                first.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(),
                ["m000", "m001"]
            );
            faults.set_failing(true);
            let admit = s.admit(&ev, &admit_req(3, 2)).await;
            assert!(
                matches!(admit, Err(StoreError::Unavailable(_))),
                "admit on a failing disk: {admit:?}"
            );
            let ends = crate::embedded::system_clock_us() + 600_000_000;
            let redeem = s.redeem(&ev, &first[0].member, &first[0].nonce, ends).await;
            assert!(
                matches!(redeem, Err(StoreError::Unavailable(_))),
                "redeem on a failing disk: {redeem:?}"
            );
            faults.set_failing(false);
            join_when_back(&s, &ev, "after000").await;
            check_as_on_disk(&s, &ev, &members, &first).await;
            // The slots the refused admit would have taken are free: the
            // next admit hands out the same members, each once.
            let again = s.admit(&ev, &admit_req(3, 3)).await.unwrap();
            assert_eq!(
                again.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(),
                ["m002", "m003", "m004"]
            );
        }
        // The file agrees with what the recovered memory answered.
        let s = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .unwrap();
        for a in &first {
            assert!(
                matches!(
                    s.status(&ev, &a.member, Touch::Peek).await.unwrap(),
                    MemberState::Admitted { nonce, .. } if nonce == a.nonce
                ),
                "{} lost its token over the restart",
                a.member
            );
        }
        for m in ["m002", "m003", "m004"] {
            assert!(matches!(
                s.status(&ev, m, Touch::Peek).await.unwrap(),
                MemberState::Admitted { .. }
            ));
        }
    }

    /// The state the last good commit left: the first two admitted with
    /// their tokens (the redeem never happened), the rest waiting in order.
    async fn check_as_on_disk(
        s: &EmbeddedStore,
        ev: &EventId,
        members: &[String],
        first: &[crate::Admission],
    ) {
        for a in first {
            match s.status(ev, &a.member, Touch::Peek).await.unwrap() {
                MemberState::Admitted { nonce, .. } => assert_eq!(nonce, a.nonce, "{}", a.member),
                other => panic!("{} should still hold its token: {other:?}", a.member),
            }
        }
        for (rank, m) in members[2..].iter().enumerate() {
            match s.status(ev, m, Touch::Peek).await.unwrap() {
                MemberState::Waiting { rank: r, .. } => assert_eq!(r, rank as u64, "{m}"),
                other => panic!("{m} was never admitted on disk but is {other:?}"),
            }
        }
    }
}
