//! The drain journal: this node's own admissions while draining, written to
//! local disk (one append-only file per event, fsynced) before any visitor
//! hears of them, so a crash cannot forget a visitor the node let in.
//!
//! A drain admission exists only on this node until the store returns and
//! records it (`reconcile_active`). Without the journal a node killed while
//! draining would, on restart, count its share as free again and admit a
//! second set of visitors on top of the first. So the node replays the
//! journal on start, holds the event's scheduler and share until the store
//! has recorded those admissions, and only then empties the file.
//!
//! The directory (`server.drain_journal`) is locked by one process: two
//! nodes sharing it would replay each other's admissions. It also keeps the
//! node's id (`node-id`), stable across restarts, under which the store
//! keeps the node's drain share.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anteroom_store::embedded::Stall;
use anteroom_store::{EventId, Nonce};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::locks::lock;

/// One line of an event's journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The node signed `member` an admission token with this nonce.
    Admitted {
        member: String,
        nonce: Nonce,
        token_expires_at_ms: i64,
    },
    /// The token was redeemed: the session lasts until `until_ms`.
    Redeemed { nonce: Nonce, until_ms: i64 },
}

/// The locked journal directory of this node.
#[derive(Debug)]
pub struct JournalDir {
    dir: PathBuf,
    node_id: String,
    /// Held for the life of the process (released when the file closes).
    _lock: File,
    /// One handle per event file, shared by every runtime of the event
    /// (one deleted and made again in place has a new one): its lock and
    /// its marks must be one, or a mark set through an old runtime would
    /// never be acted on.
    events: Mutex<std::collections::HashMap<EventId, Arc<Files>>>,
}

impl JournalDir {
    /// Creates (if needed) and locks `dir`, and reads or creates the node id.
    /// The error says what is wrong with the directory; the caller names the key.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let fail = |what: &str, e: io::Error| format!("{}: {what}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the directory", e))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))
            .map_err(|e| fail("cannot write in the directory", e))?;
        lock.try_lock().map_err(|e| {
            format!(
                "{}: in use by another anteroom process (each node needs its own): {e}",
                dir.display()
            )
        })?;
        let id_path = dir.join("node-id");
        let node_id = match std::fs::read_to_string(&id_path) {
            Ok(s) if is_node_id(s.trim()) => s.trim().to_owned(),
            Ok(_) => return Err(format!("{}: not a node id", id_path.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut raw = [0u8; 8];
                rand::rng().fill_bytes(&mut raw);
                let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                write_durably(dir, &id_path, id.as_bytes())
                    .map_err(|e| fail("cannot write node-id", e))?;
                id
            }
            Err(e) => return Err(fail("cannot read node-id", e)),
        };
        Ok(Self {
            dir: dir.to_owned(),
            node_id,
            _lock: lock,
            events: Mutex::default(),
        })
    }

    /// This node's id, stable across restarts on the same directory.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The journal file of one event (opened on first write).
    pub fn event(&self, id: &EventId) -> EventJournal {
        let inner = lock(&self.events)
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Files {
                    dir: self.dir.clone(),
                    path: self.dir.join(format!("{}.journal", id.as_str())),
                    file: Mutex::new(None),
                    writing: Stall::default(),
                    abandoned: AtomicBool::new(false),
                    epoch: AtomicU64::new(0),
                })
            })
            .clone();
        EventJournal { inner }
    }
}

fn is_node_id(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Writes a small file and makes both it and its directory entry durable.
fn write_durably(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// One event's journal file.
#[derive(Debug)]
pub struct EventJournal {
    inner: Arc<Files>,
}

#[derive(Debug)]
struct Files {
    dir: PathBuf,
    path: PathBuf,
    file: Mutex<Option<File>>,
    /// The write under way on the file, stamped under its lock (see
    /// [`EventJournal::append_within`]).
    writing: Stall,
    /// A write was given up on and may still land: the file holds records
    /// nobody acted on until it is next emptied.
    abandoned: AtomicBool,
    /// Moved on by each emptying, under the file's lock: a write asked for
    /// before it and still waiting for the lock (given up on, or asked for
    /// by a redeem the store has since recorded) is not made after it.
    epoch: AtomicU64,
}

impl EventJournal {
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Appends `records` and waits until they are on disk (`fdatasync`).
    /// Only then may the admissions they describe be answered.
    pub fn append(&self, records: &[Record]) -> io::Result<()> {
        self.inner.append_in(None, records)
    }

    /// As [`Self::append`], on the blocking pool, waited for at most
    /// `limit`: the request or drain task that asks must not stop its
    /// event loop on a disk that hangs (with the embedded store the journal
    /// is on the store's disk, and a store whose disk hangs is what made the
    /// node drain). While a write has been held by the disk longer than
    /// `limit`, the next are refused at once, so a hung disk holds one
    /// write, not a thread of the pool per try. A write given up on may
    /// still land; [`Self::abandoned`] says so until the journal is emptied.
    pub async fn append_within(&self, records: Vec<Record>, limit: Duration) -> io::Result<()> {
        let epoch = self.inner.epoch.load(Ordering::Acquire);
        self.blocking(limit, move |f, job| {
            f.append_in(Some((epoch, job)), &records)
        })
        .await
    }

    /// As [`Self::clear`], bounded as [`Self::append_within`] is.
    pub async fn clear_within(&self, limit: Duration) -> io::Result<()> {
        self.blocking(limit, |f, job| f.clear(Some(job))).await
    }

    /// Whether a write was given up on since the journal was last emptied:
    /// it may have landed, with admissions nobody was told of.
    pub fn abandoned(&self) -> bool {
        self.inner.abandoned.load(Ordering::Acquire)
    }

    async fn blocking(
        &self,
        limit: Duration,
        work: impl FnOnce(&Files, &Job) -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        if let Some(held) = self.inner.writing.held_for().filter(|h| *h > limit) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the disk has held a journal write for {} ms",
                    held.as_millis()
                ),
            ));
        }
        let job = Arc::new(Job::default());
        let (files, ran) = (self.inner.clone(), job.clone());
        let task = tokio::task::spawn_blocking(move || {
            let done = work(&files, &ran);
            ran.0.store(Job::DONE, Ordering::Release);
            done
        });
        // Armed until the write's outcome is known here: a write given up
        // on (timed out, or its caller dropped) is called off if it has not
        // started, and marks the journal otherwise (see `abandoned`).
        let mut waiting = GivenUp {
            job: &job,
            files: &self.inner,
            armed: true,
        };
        let outcome = tokio::time::timeout(limit, task).await;
        if outcome.is_ok() {
            waiting.armed = false;
        }
        match outcome {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => Err(io::Error::other(e)),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the disk did not finish the write within {} ms",
                    limit.as_millis()
                ),
            )),
        }
    }

    /// Reads every record. A last line cut short by a crash was never
    /// acknowledged (its fsync did not return): it is cut off the file so
    /// that later appends start on a clean line. A damaged complete line is
    /// an error, never skipped.
    pub fn replay(&self) -> Result<Vec<Record>, String> {
        self.inner.replay()
    }

    /// Empties the journal once the store has recorded every admission in it.
    pub fn clear(&self) -> io::Result<()> {
        self.inner.clear(None)
    }
}

/// One write handed to the blocking pool: it starts only under the file's
/// lock, and only if its caller has not called it off by then, so a write
/// given up on before it began is never made (a late emptying would erase
/// appends acknowledged since, a late append would bring back admissions
/// nobody was told of).
#[derive(Debug, Default)]
struct Job(AtomicU8);

impl Job {
    const PENDING: u8 = 0;
    const STARTED: u8 = 1;
    const DONE: u8 = 2;
    const CALLED_OFF: u8 = 3;

    /// Under the file's lock: `false` if the caller called it off.
    fn start(&self) -> bool {
        self.0
            .compare_exchange(
                Self::PENDING,
                Self::STARTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Calls a write off, or marks the journal, when its caller stops waiting
/// for it (see [`EventJournal::blocking`]).
struct GivenUp<'a> {
    job: &'a Job,
    files: &'a Files,
    armed: bool,
}

impl Drop for GivenUp<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let called_off = self
            .job
            .0
            .compare_exchange(
                Job::PENDING,
                Job::CALLED_OFF,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if !called_off {
            // Under way or made: it may have landed with nobody told.
            self.files.abandoned.store(true, Ordering::Release);
        }
    }
}

fn called_off() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the write was given up on before it began",
    )
}

impl Files {
    /// Appends unless the journal was emptied since `epoch` was read, or
    /// the job was called off.
    fn append_in(&self, asked: Option<(u64, &Job)>, records: &[Record]) -> io::Result<()> {
        let mut text = Vec::new();
        for r in records {
            serde_json::to_writer(&mut text, r).map_err(io::Error::other)?;
            text.push(b'\n');
        }
        let mut file = lock(&self.file);
        if let Some((epoch, job)) = asked {
            if !job.start() {
                return Err(called_off());
            }
            if epoch != self.epoch.load(Ordering::Acquire) {
                return Err(io::Error::other(
                    "the journal was emptied since this write was asked for",
                ));
            }
        }
        let _writing = self.writing.hold();
        if file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            // The new file's name must survive a crash as well as its data.
            File::open(&self.dir)?.sync_all()?;
            *file = Some(f);
        }
        let f = file
            .as_mut()
            .ok_or_else(|| io::Error::other("journal not open"))?;
        let before = f.metadata()?.len();
        if let Err(e) = f.write_all(&text).and_then(|()| f.sync_data()) {
            // The record may be in the file, whole or cut short, though
            // nobody acts on it: cut off as far as the disk lets us, the
            // journal marked so the drain's end empties it should the cut
            // fail, and the file opened anew by the next write.
            let _ = f.set_len(before);
            let _ = f.sync_data();
            *file = None;
            self.abandoned.store(true, Ordering::Release);
            return Err(e);
        }
        Ok(())
    }

    fn replay(&self) -> Result<Vec<Record>, String> {
        let mut f = match OpenOptions::new().read(true).write(true).open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if complete < bytes.len() {
            f.set_len(complete as u64)
                .and_then(|()| f.sync_data())
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
        }
        bytes[..complete]
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_slice(line)
                    .map_err(|e| format!("{}: line {} is damaged: {e}", self.path.display(), i + 1))
            })
            .collect()
    }

    fn clear(&self, job: Option<&Job>) -> io::Result<()> {
        let mut file = lock(&self.file);
        if job.is_some_and(|j| !j.start()) {
            return Err(called_off());
        }
        let _writing = self.writing.hold();
        *file = None;
        match OpenOptions::new().write(true).open(&self.path) {
            Ok(f) => {
                f.set_len(0)?;
                f.sync_data()?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Every write given up on before the lock was taken has landed or
        // failed by now, and was emptied with the rest; one still waiting
        // for the lock is not made (see `epoch`).
        self.abandoned.store(false, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev() -> EventId {
        EventId::new("tickets").unwrap()
    }

    /// Every runtime of an event writes through one handle: a mark set
    /// through one (an event deleted and made again in place) is seen by
    /// the next.
    #[test]
    fn an_events_runtimes_share_one_journal_handle() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = JournalDir::open(tmp.path()).unwrap();
        let (old, new) = (dir.event(&ev()), dir.event(&ev()));
        old.inner.abandoned.store(true, Ordering::Release);
        assert!(new.abandoned());
        let other = dir.event(&EventId::new("other").unwrap());
        assert!(!other.abandoned());
    }

    /// A small tmpfs mounted for one test (needs root, as CI has).
    struct Tmpfs(tempfile::TempDir);

    impl Tmpfs {
        fn mount(size: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .status()
                .expect("mount(8) (util-linux)")
                .success();
            assert!(ok, "mounting a tmpfs needs root (CAP_SYS_ADMIN)");
            Self(dir)
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0.path())
                .status();
        }
    }

    /// A write the disk refuses half-way (a full filesystem) leaves no half
    /// line for the next record to be glued onto: a journal a start could
    /// not read. The write is cut off and the journal marked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_the_disk_refuses_half_way_is_cut_off_and_marked() {
        let fs = Tmpfs::mount("256k");
        let dir = JournalDir::open(&fs.0.path().join("journal")).unwrap();
        let j = dir.event(&ev());
        let long = Duration::from_secs(30);
        j.append_within(vec![admitted("a")], long).await.unwrap();
        // Fill the rest, then free one page: the next record, longer than
        // that, is written in part.
        let filler = fs.0.path().join("filler");
        let mut f = File::create(&filler).unwrap();
        while f.write_all(&[0u8; 4096]).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len - 4096).unwrap();
        f.sync_all().unwrap();
        let big = admitted(&"b".repeat(12_000));
        let refused = j.append_within(vec![big], long).await;
        assert!(refused.is_err(), "a full disk took the record");
        assert!(j.abandoned());
        std::fs::remove_file(&filler).unwrap();
        j.append_within(vec![admitted("c")], long).await.unwrap();
        let members = members(&j);
        assert_eq!(members, ["a", "c"]);
    }

    /// The members of the journal's records, in order.
    fn members(j: &EventJournal) -> Vec<String> {
        j.replay()
            .unwrap()
            .into_iter()
            .map(|r| match r {
                Record::Admitted { member, .. } => member,
                Record::Redeemed { .. } => "redeemed".into(),
            })
            .collect()
    }

    fn admitted(member: &str) -> Record {
        Record::Admitted {
            member: member.into(),
            nonce: [1; 16],
            token_expires_at_ms: 10,
        }
    }

    /// On a disk that hangs for real: a write given up on while it runs
    /// marks the journal; an emptying given up on before it began (here its
    /// caller dropped) is never made, so it cannot erase what was
    /// acknowledged before or after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_given_up_on_before_it_began_is_never_made() {
        use futures::FutureExt as _;
        let disk = anteroom_store::testing::HungDisk::mount()
            .expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
        let dir = JournalDir::open(&disk.path().join("journal")).unwrap();
        let j = dir.event(&ev());
        let long = Duration::from_secs(30);
        j.append_within(vec![admitted("a")], long).await.unwrap();
        assert!(!j.abandoned());
        {
            let frozen = disk.freeze().unwrap();
            let mut b = Box::pin(j.append_within(vec![admitted("b")], long));
            assert!((&mut b).now_or_never().is_none());
            // Given up on (its caller dropped) once the disk holds it.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while j.inner.writing.held_for().is_none() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the write never began"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            drop(b);
            assert!(j.abandoned(), "a write under way was given up on");
            // Waits for the file behind the write the disk holds; dropped.
            let mut clear = Box::pin(j.clear_within(long));
            assert!((&mut clear).now_or_never().is_none());
            drop(clear);
            frozen.thaw();
        }
        j.append_within(vec![admitted("c")], long).await.unwrap();
        let members = members(&j);
        assert_eq!(
            members,
            ["a", "b", "c"],
            "the emptying given up on was made"
        );
        assert!(j.abandoned());
        j.clear_within(long).await.unwrap();
        assert!(!j.abandoned());
        assert_eq!(j.replay().unwrap(), vec![]);
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = JournalDir::open(tmp.path()).unwrap();
        let id = dir.node_id().to_owned();
        let j = dir.event(&ev());
        let a = Record::Admitted {
            member: "m1".into(),
            nonce: [7; 16],
            token_expires_at_ms: 10,
        };
        let r = Record::Redeemed {
            nonce: [7; 16],
            until_ms: 20,
        };
        j.append(std::slice::from_ref(&a)).unwrap();
        j.append(std::slice::from_ref(&r)).unwrap();
        drop(dir);
        // A crash in the middle of a write leaves half a line.
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"kind\":\"admi").unwrap();
        let dir = JournalDir::open(tmp.path()).unwrap();
        assert_eq!(dir.node_id(), id, "the node id is kept");
        let j = dir.event(&ev());
        assert_eq!(j.replay().unwrap(), vec![a.clone(), r.clone()]);
        j.append(std::slice::from_ref(&a)).unwrap();
        assert_eq!(j.replay().unwrap(), vec![a.clone(), r, a]);
        j.clear().unwrap();
        assert_eq!(j.replay().unwrap(), vec![]);
    }

    #[test]
    fn a_directory_is_used_by_one_process_and_damage_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let first = JournalDir::open(tmp.path()).unwrap();
        let err = JournalDir::open(tmp.path()).unwrap_err();
        assert!(err.contains("in use"), "{err}");
        std::fs::write(tmp.path().join("tickets.journal"), b"nonsense\n").unwrap();
        let err = first.event(&ev()).replay().unwrap_err();
        assert!(err.contains("line 1 is damaged"), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = JournalDir::open(&file).unwrap_err();
        assert!(err.contains("cannot create"), "{err}");
    }
}
