//! One event's write-ahead log: the durable record of every batch between
//! two checkpoints of its redb file.
//!
//! A redb commit writes about ten pages scattered over the file (the
//! changed leaves, their branches, the table tree, the freed tree, the
//! header) and syncs them: each page is its own request to the disk, and
//! the commit thread spent about a third of a join's CPU there. The log
//! makes a batch durable with ONE sequential write and one `fdatasync`;
//! the redb file is written only at checkpoints, every
//! [`super::commit`]`::CHECKPOINT_*`, when thousands of batches' changes
//! share one transaction's pages.
//!
//! Layout: two files (`<id>.wal0`, `<id>.wal1`), each records one after
//! another from offset 0, each
//! `[payload length u32][seq u64][crc32 of seq and payload u32][payload]`,
//! the payload the batch's counters (three 8-byte words) and its changes as
//! [`Writes::encode`] writes them. Sequences rise by one per record and
//! never restart: a checkpoint stores the last one it holds (`wal_seq` in
//! the meta table). A checkpoint runs beside the committer, so as it
//! starts the records go on in the other file, from its start, over
//! records that the previous checkpoint (finished, or this one would not
//! start) holds. Replay takes the file whose first record is the next after
//! the checkpoint, and then the other if its first record follows on (a
//! checkpoint that had not finished), each up to the first record that is
//! not the next in sequence, whose checksum fails or that is cut short: a
//! record left from an earlier round has a sequence at or below the
//! checkpoint's, and a torn write was never acknowledged (its `fdatasync`
//! had not returned). Opening an event empties both files once their
//! records are in the redb file; after that a file is never shrunk, so
//! after its first round a record overwrites blocks the file already has
//! and its sync carries no change of size.

use std::fs::{File, OpenOptions};
use std::io::{Error, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use redb::Database;

use super::disk::{self, Counters, FileOpts};
use super::writes::{self, Writes};
use crate::StoreError;

const HEADER: usize = 4 + 8 + 4;
const COUNTERS: usize = 24;

pub(crate) struct Wal {
    /// Two files: records go to the active one, and a checkpoint, which
    /// runs beside the committer, switches it to the other (see
    /// [`Wal::switch`]).
    files: [File; 2],
    paths: [PathBuf; 2],
    active: usize,
    /// Where the next record goes in the active file.
    end: u64,
    /// The last sequence written; the next record is `seq + 1`.
    seq: u64,
    /// The record being written, reused.
    buf: Vec<u8>,
    #[cfg(test)]
    faults: Option<std::sync::Arc<super::faults::Faults>>,
}

/// What a replay found after the checkpoint.
pub(crate) struct Replayed {
    /// Every change of the records read, in order.
    pub(crate) writes: Writes,
    /// The counters as the last record read left them.
    pub(crate) counters: Option<Counters>,
    /// The last record read (the checkpoint's own sequence if none).
    pub(crate) seq: u64,
}

/// The log's two files beside an event's redb file.
pub(crate) fn paths_for(db_path: &Path) -> [PathBuf; 2] {
    [
        db_path.with_extension("wal0"),
        db_path.with_extension("wal1"),
    ]
}

/// Is `p` one of an event's log files?
pub(crate) fn is_log_file(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "wal0" || x == "wal1")
}

impl Wal {
    /// Opens (creating) the log's two files. Nothing is read yet: see
    /// [`Wal::replay`].
    pub(crate) fn open(
        paths: [PathBuf; 2],
        #[cfg(test)] faults: Option<std::sync::Arc<super::faults::Faults>>,
    ) -> Result<Wal, Error> {
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
        };
        Ok(Wal {
            files: [open(&paths[0])?, open(&paths[1])?],
            paths,
            active: 0,
            end: 0,
            seq: 0,
            buf: Vec::new(),
            #[cfg(test)]
            faults,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.paths[self.active]
    }

    /// The records after `checkpoint` (and none after `upto`, when given:
    /// after a failed write in this process, a record whose sync failed was
    /// refused to its callers and is not brought back): the file whose
    /// first record is the next in sequence, then the other if its first
    /// record follows on (a checkpoint that had not finished when the
    /// records after it went to the other file).
    pub(crate) fn replay(&self, checkpoint: u64, upto: Option<u64>) -> Result<Replayed, Error> {
        let mut out = Replayed {
            writes: Writes::default(),
            counters: None,
            seq: checkpoint,
        };
        let mut bytes = [Vec::new(), Vec::new()];
        for (f, b) in self.files.iter().zip(bytes.iter_mut()) {
            let len = f.metadata()?.len();
            b.resize(usize::try_from(len).map_err(Error::other)?, 0);
            f.read_exact_at(b, 0)?;
        }
        let mut read = [false; 2];
        while let Some(i) = (0..2).find(|&i| {
            !read[i]
                && bytes[i]
                    .get(4..12)
                    .is_some_and(|s| u64::from_le_bytes(word(s, 0)) == out.seq + 1)
        }) {
            read[i] = true;
            chain(&bytes[i], upto, &mut out)?;
        }
        // A file that starts with a whole record (its checksum holds) past
        // the one after the last read: the records between are missing.
        // Every round of the log starts right after a checkpoint, so that
        // happens only when the redb file lost what it held (emptied,
        // replaced by an older copy); going on would clear the log and lose
        // its acknowledged joins for good. Not after a failed write in this
        // process (`upto`), where records past it were refused anyway.
        if upto.is_none() {
            for (i, b) in bytes.iter().enumerate() {
                if let Some(seq) = first_record(b).filter(|&seq| !read[i] && seq > out.seq + 1) {
                    return Err(Error::new(
                        ErrorKind::InvalidData,
                        format!(
                            "the write-ahead log starts at record {seq}, but the redb file holds \
                             records up to {} only: the records between are missing (was the \
                             redb file emptied or replaced?)",
                            out.seq
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Empties both files: after a replay whose records are now in the redb
    /// file, nothing in them is needed, and a record refused to its callers
    /// (its sync failed) must not be found again under a sequence that is
    /// about to be reused.
    pub(crate) fn clear(&mut self, seq: u64) -> Result<(), Error> {
        for f in &self.files {
            f.set_len(0)?;
            f.sync_all()?;
        }
        self.active = 0;
        self.restart(seq);
        Ok(())
    }

    /// Sends the next records to the other file, from its start: the
    /// caller has made sure everything in that file is in the redb file
    /// (the checkpoint before the one now starting has finished).
    pub(crate) fn switch(&mut self) {
        self.active = 1 - self.active;
        self.end = 0;
    }

    /// The next record is `seq + 1`, written at the start of the active
    /// file.
    fn restart(&mut self, seq: u64) {
        self.seq = seq;
        self.end = 0;
    }

    /// Bytes written in this round.
    pub(crate) fn len(&self) -> u64 {
        self.end
    }

    /// Writes one batch as the next record and syncs it; its sequence once
    /// it is durable.
    #[cfg(test)]
    pub(crate) fn append(&mut self, writes: &Writes, c: Counters) -> Result<u64, Error> {
        self.append_watched(writes, c, None)
    }

    /// As [`Self::append`], with the write and its sync (not the record's
    /// encoding, which is CPU) stamped on `stall`: a disk that hangs is
    /// told from a big batch.
    pub(crate) fn append_watched(
        &mut self,
        writes: &Writes,
        c: Counters,
        stall: Option<&super::stall::Stall>,
    ) -> Result<u64, Error> {
        #[cfg(test)]
        if let Some(f) = &self.faults {
            f.check()?;
        }
        let seq = self.seq + 1;
        self.buf.clear();
        self.buf.extend_from_slice(&[0u8; HEADER]);
        self.buf.extend_from_slice(&c.last_us.to_le_bytes());
        self.buf.extend_from_slice(&c.admitted_total.to_le_bytes());
        self.buf.extend_from_slice(&c.redeemed_total.to_le_bytes());
        writes.encode(&mut self.buf);
        let n = u32::try_from(self.buf.len() - HEADER)
            .map_err(|_| Error::new(ErrorKind::InvalidInput, "batch too large for one record"))?;
        let crc = checksum(seq, &self.buf[HEADER..]);
        self.buf[0..4].copy_from_slice(&n.to_le_bytes());
        self.buf[4..12].copy_from_slice(&seq.to_le_bytes());
        self.buf[12..16].copy_from_slice(&crc.to_le_bytes());
        let file = &self.files[self.active];
        let held = stall.map(super::stall::Stall::hold);
        let written = file.write_all_at(&self.buf, self.end).and_then(|()| {
            #[cfg(test)]
            if let Some(f) = &self.faults {
                f.check_sync()?;
            }
            file.sync_data()
        });
        // Held through the clean-up below too: a disk that fails a sync
        // and then hangs holds the truncation.
        if let Err(e) = written {
            // The record was refused to its callers, but it may be whole in
            // the page cache (a failed sync leaves the page readable) and
            // would be replayed by a start before the reopen clears the log
            // (a restart during the backoff): it is cut off, as far as the
            // disk still lets us.
            let _ = file.set_len(self.end);
            let _ = file.sync_data();
            drop(held);
            return Err(e);
        }
        drop(held);
        self.end += self.buf.len() as u64;
        self.seq = seq;
        Ok(seq)
    }

    /// The last sequence written.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

/// Reads the records of one file's start that follow `out` in sequence.
fn chain(bytes: &[u8], upto: Option<u64>, out: &mut Replayed) -> Result<(), Error> {
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + HEADER) {
        let n = u32::from_le_bytes(word(head, 0)) as usize;
        let seq = u64::from_le_bytes(word(head, 4));
        let crc = u32::from_le_bytes(word(head, 12));
        if seq != out.seq + 1 || upto.is_some_and(|u| seq > u) {
            break;
        }
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + n) else {
            break;
        };
        if checksum(seq, payload) != crc || payload.len() < COUNTERS {
            break;
        }
        let counters = Counters {
            last_us: i64::from_le_bytes(word(payload, 0)),
            admitted_total: u64::from_le_bytes(word(payload, 8)),
            redeemed_total: u64::from_le_bytes(word(payload, 16)),
        };
        if out.writes.decode_into(&payload[COUNTERS..]).is_none() {
            // The checksum held, so this is no torn write: the record was
            // written by something that is not this format.
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("malformed record {seq} in the write-ahead log"),
            ));
        }
        out.counters = Some(counters);
        out.seq = seq;
        at += HEADER + n;
    }
    Ok(())
}

/// The sequence of the whole record at the start of `bytes`, if one is
/// there (its checksum holds).
fn first_record(bytes: &[u8]) -> Option<u64> {
    let head = bytes.get(..HEADER)?;
    let n = u32::from_le_bytes(word(head, 0)) as usize;
    let seq = u64::from_le_bytes(word(head, 4));
    let crc = u32::from_le_bytes(word(head, 12));
    let payload = bytes.get(HEADER..HEADER.checked_add(n)?)?;
    (checksum(seq, payload) == crc).then_some(seq)
}

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    h.finalize()
}

fn word<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&b[at..at + N]);
    w
}

/// Opens an event's redb file and its log, and brings the file up to date
/// with the log: the records after the file's checkpoint are written into
/// it in one durable transaction, and the log starts its next round. Memory
/// is then loaded from the file alone ([`super::load`]).
///
/// A file that did not exist starts with no log either: a log left by a
/// deleted event of the same id (its file went first) is not this one's.
pub(crate) fn open_event(
    path: &Path,
    files: &FileOpts,
    upto: Option<u64>,
) -> Result<(Database, Wal), StoreError> {
    let logs = paths_for(path);
    if !path.exists() {
        for log in &logs {
            match std::fs::remove_file(log) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io(log, e)),
            }
        }
    }
    let db = disk::open_file(path, disk::EVENT_MAGIC, files)?;
    let mut wal = Wal::open(
        logs.clone(),
        #[cfg(test)]
        files.faults.clone(),
    )
    .map_err(|e| io(&logs[0], e))?;
    let checkpoint = checkpoint_seq(&db, path)?;
    let found = wal.replay(checkpoint, upto).map_err(|e| io(&logs[0], e))?;
    if let Some(c) = found.counters {
        writes::commit(&db, path, &found.writes, c, found.seq)?;
    }
    wal.clear(found.seq).map_err(|e| io(&logs[0], e))?;
    Ok((db, wal))
}

/// The last log record the redb file holds (0 for a file never checkpointed).
fn checkpoint_seq(db: &Database, path: &Path) -> Result<u64, StoreError> {
    let mut seq = 0;
    disk::scan_bytes(db, path, disk::META, |k, v| {
        if k == writes::WAL_SEQ {
            seq = disk::i64_at(v, 0).ok_or_else(|| {
                StoreError::Corrupt(format!("{}: malformed meta record", path.display()))
            })? as u64;
        }
        Ok(())
    })?;
    Ok(seq)
}

fn io(path: &Path, e: Error) -> StoreError {
    if e.kind() == ErrorKind::InvalidData {
        StoreError::Corrupt(format!("{}: {e}", path.display()))
    } else {
        StoreError::Storage(format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> FileOpts {
        FileOpts {
            cache_bytes: 1 << 20,
            faults: None,
        }
    }

    fn batch(members: &[&str], first_score: i64) -> Writes {
        let mut w = Writes::default();
        for (i, m) in members.iter().enumerate() {
            w.waiting(first_score + i as i64, m, 7);
        }
        w
    }

    fn counters(last_us: i64) -> Counters {
        Counters {
            last_us,
            admitted_total: 3,
            redeemed_total: 2,
        }
    }

    fn waiting(db: &Database, path: &Path) -> Vec<String> {
        let st = super::super::load::load(db, path, 0).unwrap();
        let out = disk::scan(db, path, disk::WAITING, |k, _| {
            Some(disk::split_waiting_key(k).unwrap().1.to_owned())
        })
        .unwrap();
        assert_eq!(
            st.table.len(),
            out.len(),
            "memory loads what the file holds"
        );
        out
    }

    fn log(dir: &Path) -> Wal {
        Wal::open(paths_for(&dir.join("e.redb")), None).unwrap()
    }

    #[test]
    fn records_are_replayed_in_order_up_to_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = log(dir.path());
        assert_eq!(wal.append(&batch(&["a", "b"], 1), counters(10)).unwrap(), 1);
        assert_eq!(wal.append(&batch(&["c"], 3), counters(20)).unwrap(), 2);
        assert_eq!(wal.append(&batch(&["d"], 4), counters(30)).unwrap(), 3);
        // A fourth record whose write was cut short by a crash: its header
        // is whole, its payload is not.
        let mut torn = Vec::new();
        torn.extend_from_slice(&100u32.to_le_bytes());
        torn.extend_from_slice(&4u64.to_le_bytes());
        torn.extend_from_slice(&0u32.to_le_bytes());
        torn.extend_from_slice(&[1, 2, 3]);
        wal.files[0].write_all_at(&torn, wal.len()).unwrap();

        let r = log(dir.path()).replay(0, None).unwrap();
        assert_eq!(r.seq, 3);
        assert_eq!(r.writes.len(), 4);
        assert_eq!(r.counters.unwrap().last_us, 30);
        // Once a checkpoint holds 3, nothing is replayed.
        let r = log(dir.path()).replay(3, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (3, 0));
        // In-process recovery brings back no record past the last synced.
        let r = log(dir.path()).replay(0, Some(1)).unwrap();
        assert_eq!((r.seq, r.writes.len()), (1, 2));
    }

    #[test]
    fn a_flipped_bit_ends_the_replay_before_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = log(dir.path());
        wal.append(&batch(&["a"], 1), counters(10)).unwrap();
        let second = wal.len();
        wal.append(&batch(&["b"], 2), counters(20)).unwrap();
        wal.append(&batch(&["c"], 3), counters(30)).unwrap();
        // One bit of the second record's member id.
        let at = second + (HEADER + COUNTERS + 9 + 8) as u64;
        let mut b = [0u8];
        wal.files[0].read_exact_at(&mut b, at).unwrap();
        wal.files[0].write_all_at(&[b[0] ^ 1], at).unwrap();
        let r = log(dir.path()).replay(0, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (1, 1));
    }

    #[test]
    fn a_replay_follows_records_into_the_other_file_and_stops_at_an_older_round() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = log(dir.path());
        wal.append(&batch(&["a"], 1), counters(1)).unwrap();
        wal.append(&batch(&["b"], 2), counters(2)).unwrap();
        // A checkpoint of 1–2 starts; the next records go to the other file.
        wal.switch();
        wal.append(&batch(&["c"], 3), counters(3)).unwrap();
        wal.append(&batch(&["d"], 4), counters(4)).unwrap();
        // The crash came before the checkpoint finished: 1–4.
        let r = log(dir.path()).replay(0, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (4, 4));
        // It had finished: 3–4.
        let r = log(dir.path()).replay(2, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (2 + 2, 2));
        // A checkpoint of 3–4 starts; 5 goes over record 1 of the first
        // file, and record 2 behind it is from an older round.
        wal.switch();
        wal.append(&batch(&["e"], 5), counters(5)).unwrap();
        let r = log(dir.path()).replay(4, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (5, 1));
        assert_eq!(r.counters.unwrap().last_us, 5);
        let r = log(dir.path()).replay(2, None).unwrap();
        assert_eq!((r.seq, r.writes.len()), (5, 3), "3–4 then 5");
    }

    #[test]
    fn changes_only_in_the_log_reach_the_file_and_memory_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.redb");
        {
            let (db, mut wal) = open_event(&path, &opts(), None).unwrap();
            writes::commit(&db, &path, &batch(&["a"], 1), counters(1), 0).unwrap();
            // Acknowledged after these syncs; the process dies before any
            // checkpoint.
            wal.append(&batch(&["b", "c"], 2), counters(2)).unwrap();
            wal.append(&batch(&["d"], 4), counters(4)).unwrap();
        }
        let (db, wal) = open_event(&path, &opts(), None).unwrap();
        assert_eq!(waiting(&db, &path), ["a", "b", "c", "d"]);
        assert_eq!(checkpoint_seq(&db, &path).unwrap(), 2);
        assert_eq!((wal.seq(), wal.len()), (2, 0), "the log starts empty");
        drop((db, wal));
        // Opened again with nothing new: the same, nothing replayed twice.
        let (db, _) = open_event(&path, &opts(), None).unwrap();
        assert_eq!(waiting(&db, &path), ["a", "b", "c", "d"]);
    }

    /// An event file emptied (or replaced by an older copy) while its log
    /// holds acknowledged records: the open is refused as corrupt, and the
    /// log is kept, rather than the file taken as a new event and the log
    /// cleared with every join in it.
    #[test]
    fn a_log_that_does_not_follow_on_from_the_file_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.redb");
        {
            let (_db, mut wal) = open_event(&path, &opts(), None).unwrap();
            wal.append(&batch(&["a"], 1), counters(1)).unwrap();
            wal.append(&batch(&["b"], 2), counters(2)).unwrap();
        }
        {
            // The next open writes 1–2 into the file and starts the log
            // again after them; 3 is acknowledged, then the process dies.
            let (_db, mut wal) = open_event(&path, &opts(), None).unwrap();
            wal.append(&batch(&["c"], 3), counters(3)).unwrap();
        }
        std::fs::File::create(&path).unwrap().set_len(0).unwrap();
        let logs = paths_for(&path);
        let sizes = || logs.each_ref().map(|l| std::fs::metadata(l).unwrap().len());
        let before = sizes();
        match open_event(&path, &opts(), None) {
            Err(StoreError::Corrupt(m)) => {
                assert!(m.contains("records between are missing"), "{m}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("an emptied file was taken as a new event"),
        }
        assert_eq!(sizes(), before, "the log is kept");
        assert!(before[0] > 0);
    }

    #[test]
    fn a_log_left_by_a_deleted_event_is_not_read_by_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.redb");
        {
            let (_db, mut wal) = open_event(&path, &opts(), None).unwrap();
            wal.append(&batch(&["ghost"], 1), counters(1)).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
        let (db, _) = open_event(&path, &opts(), None).unwrap();
        assert!(waiting(&db, &path).is_empty());
    }
}
