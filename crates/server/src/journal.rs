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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        })
    }

    /// This node's id, stable across restarts on the same directory.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The journal file of one event (opened on first write).
    pub fn event(&self, id: &EventId) -> EventJournal {
        EventJournal {
            inner: Arc::new(Files {
                dir: self.dir.clone(),
                path: self.dir.join(format!("{}.journal", id.as_str())),
                file: Mutex::new(None),
                waiting: AtomicUsize::new(0),
            }),
        }
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

/// Journal writes the node lets wait on a disk that does not answer, per
/// event, before it refuses more at once: each holds a thread of the
/// blocking pool until the disk answers.
const MAX_WAITING: usize = 64;

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
    /// Writes handed to the blocking pool and not yet finished.
    waiting: AtomicUsize,
}

/// Takes one of an event's journal writes off the count when it finishes,
/// however it ends.
struct Waiting(Arc<Files>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl EventJournal {
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Appends `records` and waits until they are on disk (`fdatasync`).
    /// Only then may the admissions they describe be answered.
    pub fn append(&self, records: &[Record]) -> io::Result<()> {
        self.inner.append(records)
    }

    /// As [`Self::append`], on the blocking pool, waited for at most
    /// `limit`: the request or drain task that asks must not stop its
    /// event loop on a disk that hangs (with the embedded store the journal
    /// is on the store's disk, and a store whose disk hangs is what made the
    /// node drain). A write that takes longer is answered as failed, though
    /// it may still be made: its admissions then count against the node's
    /// share after a restart without anybody holding them, which admits
    /// fewer, never more.
    pub async fn append_within(&self, records: Vec<Record>, limit: Duration) -> io::Result<()> {
        self.blocking(limit, move |f| f.append(&records)).await
    }

    /// As [`Self::clear`], bounded as [`Self::append_within`] is.
    pub async fn clear_within(&self, limit: Duration) -> io::Result<()> {
        self.blocking(limit, Files::clear).await
    }

    async fn blocking(
        &self,
        limit: Duration,
        work: impl FnOnce(&Files) -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        if self.inner.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            self.inner.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "earlier journal writes still wait for the disk",
            ));
        }
        let waiting = Waiting(self.inner.clone());
        let task = tokio::task::spawn_blocking(move || work(&waiting.0));
        match tokio::time::timeout(limit, task).await {
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
        self.inner.clear()
    }
}

impl Files {
    fn append(&self, records: &[Record]) -> io::Result<()> {
        let mut text = Vec::new();
        for r in records {
            serde_json::to_writer(&mut text, r).map_err(io::Error::other)?;
            text.push(b'\n');
        }
        let mut file = lock(&self.file);
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
        f.write_all(&text)?;
        f.sync_data()
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

    fn clear(&self) -> io::Result<()> {
        let mut file = lock(&self.file);
        *file = None;
        match OpenOptions::new().write(true).open(&self.path) {
            Ok(f) => {
                f.set_len(0)?;
                f.sync_data()
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev() -> EventId {
        EventId::new("tickets").unwrap()
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
