//! On-disk layout of the embedded store (redb files) and error mapping.
//!
//! `<dir>/meta.redb` holds admin states and event configs; every event has its
//! own `<dir>/events/<id>.redb`, so events commit (fsync) in parallel. Each
//! file carries a magic record, so a foreign or damaged file is refused with
//! [`StoreError::Corrupt`] naming it instead of being read as an empty queue.

use std::io::ErrorKind;
use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::{Nonce, StoreError};

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Waiting members keyed by (score, member), so that post-open joins, whose
/// scores rise, append at the tail of the B-tree instead of touching a random
/// leaf each; and a start-up scan reads them back already in rank order.
pub(crate) const WAITING: TableDefinition<&[u8], i64> = TableDefinition::new("waiting");
/// Admission grants: one row per admit call (not per member, which would
/// dirty a random B-tree leaf per admitted member), keyed by a sequence. The
/// value is the token expiry (i64 LE), then for every member admitted its
/// nonce (16 bytes), its length - 1 (one byte) and its id. A member stays
/// admitted until the row goes (its tokens expired) or its nonce appears in
/// `used` as redeemed ([`USED_TOKEN`]) or cancelled ([`USED_CANCELLED`]).
pub(crate) const GRANTS: TableDefinition<u64, &[u8]> = TableDefinition::new("grants");
/// Active sessions keyed by (session end, member): the end comes first
/// (ordered bytes, [`ordered_i64`]) because a redeem's session ends
/// "session length from now", so redeems append at the tail of the B-tree
/// instead of each dirtying a random leaf, and sessions ending together sit
/// together. No value: the key says it all.
pub(crate) const ACTIVE: TableDefinition<&[u8], ()> = TableDefinition::new("active_by_end");
/// Used nonces keyed by (kept until, kind, nonce), for the same reason:
/// a redeemed token is kept until its grant's expiry, which rises with
/// time, so these rows too are appended and expire from the head.
pub(crate) const USED: TableDefinition<&[u8], ()> = TableDefinition::new("used_by_end");
pub(crate) const REVOKED: TableDefinition<u64, &[u8]> = TableDefinition::new("revoked");
pub(crate) const ADMIN: TableDefinition<&str, u8> = TableDefinition::new("admin");
pub(crate) const CONFIGS: TableDefinition<&str, &str> = TableDefinition::new("configs");
/// The generation of the config documents (one row, [`GENERATION`]),
/// moved on by every change of any of them.
pub(crate) const CONFIG_GENERATION: TableDefinition<&str, u64> =
    TableDefinition::new("config_generation");
const GENERATION: &str = "generation";
/// Each event's anchor (µs), set once ([`anchor`]).
pub(crate) const ANCHORS: TableDefinition<&str, i64> = TableDefinition::new("anchors");
/// Admin audit trail: (event, sequence) → entry JSON, per event in order.
pub(crate) const AUDIT: TableDefinition<(&str, u64), &str> = TableDefinition::new("audit");

pub(crate) const EVENT_MAGIC: &[u8] = b"anteroom-event/4";
/// The format before [`ACTIVE`] and [`USED`] were keyed by their end: read
/// and rewritten in place when opened ([`super::upgrade`]).
pub(crate) const EVENT_MAGIC_3: &[u8] = b"anteroom-event/3";
pub(crate) const META_MAGIC: &[u8] = b"anteroom-meta/1";

/// Nonce namespaces in the `used` table.
pub(crate) const USED_TOKEN: u8 = 0;
pub(crate) const USED_POW: u8 = 1;
/// A token taken back before it was redeemed (its member left).
pub(crate) const USED_CANCELLED: u8 = 2;

/// Durable counters and the clock high-water mark, written with every commit.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub last_us: i64,
    pub admitted_total: u64,
    pub redeemed_total: u64,
}

/// Maps a redb error met while serving: I/O is a storage failure, anything
/// that says the file is damaged is corruption.
pub(crate) fn storage(path: &Path, e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(m) => StoreError::Corrupt(format!("{}: {m}", path.display())),
        redb::Error::Io(io) => StoreError::Storage(format!("{}: {io}", path.display())),
        other => StoreError::Storage(format!("{}: {other}", path.display())),
    }
}

/// Is this I/O error about the disk (full, read-only, no permission) rather
/// than about what is in the file?
pub(crate) fn is_disk_problem(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::PermissionDenied
            | ErrorKind::ReadOnlyFilesystem
            | ErrorKind::StorageFull
            | ErrorKind::QuotaExceeded
            | ErrorKind::WouldBlock
    )
}

/// How the store opens its files (the same for a first open and a reopen
/// after a failed write).
#[derive(Clone, Debug, Default)]
pub(crate) struct FileOpts {
    pub(crate) cache_bytes: usize,
    #[cfg(test)]
    pub(crate) faults: Option<std::sync::Arc<super::faults::Faults>>,
}

impl FileOpts {
    fn create(&self, path: &Path) -> Result<Database, redb::DatabaseError> {
        let mut b = Database::builder();
        b.set_cache_size(self.cache_bytes);
        #[cfg(test)]
        if let Some(f) = &self.faults {
            return b.create_with_backend(super::faults::Faulty::open(path, f.clone())?);
        }
        b.create(path)
    }
}

/// Opens (or creates) a redb file and checks its magic record.
pub(crate) fn open_file(path: &Path, magic: &[u8], o: &FileOpts) -> Result<Database, StoreError> {
    let existed = path.exists();
    let db = o.create(path).map_err(|e| match redb::Error::from(e) {
        redb::Error::Io(io) if is_disk_problem(&io) => {
            StoreError::Storage(format!("{}: {io}", path.display()))
        }
        redb::Error::DatabaseAlreadyOpen => StoreError::Storage(format!(
            "{}: already open by another process",
            path.display()
        )),
        other => StoreError::Corrupt(format!(
            "{}: not an anteroom data file ({other})",
            path.display()
        )),
    })?;
    let found = {
        let r = db.begin_read().map_err(|e| storage(path, e))?;
        match r.open_table(META) {
            Ok(t) => t
                .get("magic")
                .map_err(|e| storage(path, e))?
                .map(|v| v.value().to_vec()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(StoreError::Corrupt(format!("{}: {e}", path.display()))),
        }
    };
    match found {
        Some(m) if m == magic => Ok(db),
        Some(m) if m == EVENT_MAGIC_3 && magic == EVENT_MAGIC => {
            super::upgrade::from_3(&db, path)?;
            Ok(db)
        }
        Some(m) if same_kind(&m, magic) => Err(StoreError::Corrupt(format!(
            "{}: data format {} is not {} (written by another Anteroom version; \
             this build cannot read it)",
            path.display(),
            String::from_utf8_lossy(&m),
            String::from_utf8_lossy(magic)
        ))),
        Some(_) => Err(StoreError::Corrupt(format!(
            "{}: wrong magic record",
            path.display()
        ))),
        None if existed && has_tables(&db) => Err(StoreError::Corrupt(format!(
            "{}: redb file without anteroom magic",
            path.display()
        ))),
        None => {
            let mut w = db.begin_write().map_err(|e| storage(path, e))?;
            w.set_durability(Durability::Immediate)
                .map_err(|e| storage(path, e))?;
            {
                let mut t = w.open_table(META).map_err(|e| storage(path, e))?;
                t.insert("magic", magic).map_err(|e| storage(path, e))?;
            }
            w.commit().map_err(|e| storage(path, e))?;
            Ok(db)
        }
    }
}

/// Same kind of file (`anteroom-event/…`), maybe another format version.
fn same_kind(found: &[u8], magic: &[u8]) -> bool {
    let kind = |m: &[u8]| m.split(|b| *b == b'/').next().map(<[u8]>::to_vec);
    kind(found) == kind(magic)
}

fn has_tables(db: &Database) -> bool {
    db.begin_read()
        .ok()
        .and_then(|r| r.list_tables().ok().map(|mut t| t.next().is_some()))
        .unwrap_or(false)
}

/// The inverse of the waiting key of [`super::writes::Writes::waiting`].
pub(crate) fn split_waiting_key(k: &[u8]) -> Option<(i64, &str)> {
    let score = ordered_i64_at(k)?;
    Some((score, std::str::from_utf8(&k[8..]).ok()?))
}

pub(crate) fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    let mut x = [0u8; 8];
    x.copy_from_slice(b.get(at..at + 8)?);
    Some(i64::from_le_bytes(x))
}

/// `x` big-endian with the sign bit flipped, so bytes sort like numbers.
pub(crate) fn ordered_i64(x: i64) -> [u8; 8] {
    ((x as u64) ^ (1 << 63)).to_be_bytes()
}

/// The inverse of [`ordered_i64`] on the first 8 bytes of `k`.
pub(crate) fn ordered_i64_at(k: &[u8]) -> Option<i64> {
    let mut b = [0u8; 8];
    b.copy_from_slice(k.get(..8)?);
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// An [`ACTIVE`] key.
pub(crate) fn active_key(member: &str, ends_at_us: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + member.len());
    k.extend_from_slice(&ordered_i64(ends_at_us));
    k.extend_from_slice(member.as_bytes());
    k
}

/// The inverse of [`active_key`]: (member, session end).
pub(crate) fn split_active_key(k: &[u8]) -> Option<(&str, i64)> {
    let end = ordered_i64_at(k)?;
    Some((std::str::from_utf8(&k[8..]).ok()?, end))
}

/// A [`USED`] key.
pub(crate) fn used_key(kind: u8, n: &Nonce, kept_until_us: i64) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[..8].copy_from_slice(&ordered_i64(kept_until_us));
    k[8] = kind;
    k[9..].copy_from_slice(n);
    k
}

/// The inverse of [`used_key`]: (kind, nonce, kept until).
pub(crate) fn split_used_key(k: &[u8]) -> Option<(u8, Nonce, i64)> {
    if k.len() != 25 {
        return None;
    }
    let mut n: Nonce = [0; 16];
    n.copy_from_slice(&k[9..]);
    Some((k[8], n, ordered_i64_at(k)?))
}

/// Calls `f(key, value)` for every row of a `&str → &[u8]` table.
pub(crate) fn scan_bytes(
    db: &Database,
    path: &Path,
    def: TableDefinition<&str, &[u8]>,
    mut f: impl FnMut(&str, &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let r = db.begin_read().map_err(|e| storage(path, e))?;
    let t = match r.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(storage(path, e)),
    };
    for row in t.iter().map_err(|e| storage(path, e))? {
        let (k, v) = row.map_err(|e| storage(path, e))?;
        f(k.value(), v.value())?;
    }
    Ok(())
}

/// Every row of a `K → V` table as owned values.
pub(crate) fn scan<K, V, T>(
    db: &Database,
    path: &Path,
    def: TableDefinition<K, V>,
    mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> Option<T>,
) -> Result<Vec<T>, StoreError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let r = db.begin_read().map_err(|e| storage(path, e))?;
    let t = match r.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(storage(path, e)),
    };
    let mut out = Vec::new();
    for row in t.iter().map_err(|e| storage(path, e))? {
        let (k, v) = row.map_err(|e| storage(path, e))?;
        if let Some(x) = f(k.value(), v.value()) {
            out.push(x);
        }
    }
    Ok(out)
}

/// Records an event's admin state durably in the shared meta file.
pub(crate) fn put_admin(
    db: &Database,
    path: &Path,
    key: &str,
    value: u8,
) -> Result<(), StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    {
        let mut t = w.open_table(ADMIN).map_err(|e| storage(path, e))?;
        t.insert(key, value).map_err(|e| storage(path, e))?;
    }
    w.commit().map_err(|e| storage(path, e))
}

/// Records an event's config document durably in the shared meta file.
pub(crate) fn put_config(
    db: &Database,
    path: &Path,
    key: &str,
    json: &str,
) -> Result<(), StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    {
        let mut t = w.open_table(CONFIGS).map_err(|e| storage(path, e))?;
        t.insert(key, json).map_err(|e| storage(path, e))?;
    }
    next_generation(&w, path)?;
    w.commit().map_err(|e| storage(path, e))
}

/// Records an event's config document only while the documents'
/// generation is still `generation`, moving it on. One write transaction,
/// as [`anchor`]: no other writer's change can land between the comparison
/// and the insert.
pub(crate) fn replace_config(
    db: &Database,
    path: &Path,
    key: &str,
    generation: u64,
    json: &str,
) -> Result<bool, StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    if next_generation(&w, path)? != generation + 1 {
        w.abort().map_err(|e| storage(path, e))?;
        return Ok(false);
    }
    {
        let mut t = w.open_table(CONFIGS).map_err(|e| storage(path, e))?;
        t.insert(key, json).map_err(|e| storage(path, e))?;
    }
    w.commit().map_err(|e| storage(path, e))?;
    Ok(true)
}

/// Moves the documents' generation on inside `w`; the new one.
fn next_generation(w: &redb::WriteTransaction, path: &Path) -> Result<u64, StoreError> {
    let mut t = w
        .open_table(CONFIG_GENERATION)
        .map_err(|e| storage(path, e))?;
    let now = t
        .get(GENERATION)
        .map_err(|e| storage(path, e))?
        .map_or(0, |v| v.value());
    t.insert(GENERATION, now + 1)
        .map_err(|e| storage(path, e))?;
    Ok(now + 1)
}

/// The config documents' generation alone (0 until a first change).
pub(crate) fn config_generation(db: &Database, path: &Path) -> Result<u64, StoreError> {
    let r = db.begin_read().map_err(|e| storage(path, e))?;
    generation_in(&r, path)
}

fn generation_in(r: &redb::ReadTransaction, path: &Path) -> Result<u64, StoreError> {
    match r.open_table(CONFIG_GENERATION) {
        Ok(t) => Ok(t
            .get(GENERATION)
            .map_err(|e| storage(path, e))?
            .map_or(0, |v| v.value())),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(storage(path, e)),
    }
}

/// Every config document and their generation, from one read transaction.
pub(crate) fn configs(
    db: &Database,
    path: &Path,
) -> Result<(u64, Vec<(String, String)>), StoreError> {
    let r = db.begin_read().map_err(|e| storage(path, e))?;
    let generation = generation_in(&r, path)?;
    let mut rows = Vec::new();
    match r.open_table(CONFIGS) {
        Ok(t) => {
            for row in t.iter().map_err(|e| storage(path, e))? {
                let (k, v) = row.map_err(|e| storage(path, e))?;
                rows.push((k.value().to_owned(), v.value().to_owned()));
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(storage(path, e)),
    }
    Ok((generation, rows))
}

/// The event's anchor: the one kept, else `now`, kept durably. One write
/// transaction (redb has one writer at a time), so two callers cannot both
/// find it absent.
pub(crate) fn anchor(db: &Database, path: &Path, key: &str, now: i64) -> Result<i64, StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    let anchor = {
        let mut t = w.open_table(ANCHORS).map_err(|e| storage(path, e))?;
        let kept = t.get(key).map_err(|e| storage(path, e))?.map(|v| v.value());
        match kept {
            Some(kept) => kept,
            None => {
                t.insert(key, now).map_err(|e| storage(path, e))?;
                now
            }
        }
    };
    w.commit().map_err(|e| storage(path, e))?;
    Ok(anchor)
}

/// Appends an audit entry to an event's trail, dropping the oldest beyond `keep`.
pub(crate) fn append_audit(
    db: &Database,
    path: &Path,
    key: &str,
    json: &str,
    keep: usize,
) -> Result<(), StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    {
        let mut t = w.open_table(AUDIT).map_err(|e| storage(path, e))?;
        let range = (key, 0u64)..=(key, u64::MAX);
        let (first, last) = {
            let mut rows = t.range(range.clone()).map_err(|e| storage(path, e))?;
            let first = rows.next().transpose().map_err(|e| storage(path, e))?;
            let last = rows.next_back().transpose().map_err(|e| storage(path, e))?;
            let seq =
                |r: Option<(redb::AccessGuard<'_, (&str, u64)>, _)>| r.map(|(k, _)| k.value().1);
            let first = seq(first);
            (first, seq(last).or(first))
        };
        let next = last.map_or(0, |l| l.saturating_add(1));
        t.insert((key, next), json).map_err(|e| storage(path, e))?;
        let keep = u64::try_from(keep.max(1)).unwrap_or(u64::MAX);
        // Sequences are contiguous, so the oldest ones to drop are known.
        if let Some(first) = first {
            let mut seq = first;
            while next - seq >= keep {
                t.remove((key, seq)).map_err(|e| storage(path, e))?;
                seq += 1;
            }
        }
    }
    w.commit().map_err(|e| storage(path, e))
}

/// The newest `limit` audit entries of an event, newest first.
pub(crate) fn read_audit(
    db: &Database,
    path: &Path,
    key: &str,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let r = db.begin_read().map_err(|e| storage(path, e))?;
    let t = match r.open_table(AUDIT) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(storage(path, e)),
    };
    let mut out = Vec::new();
    for row in t
        .range((key, 0u64)..=(key, u64::MAX))
        .map_err(|e| storage(path, e))?
        .rev()
        .take(limit)
    {
        let (_, v) = row.map_err(|e| storage(path, e))?;
        out.push(v.value().to_owned());
    }
    Ok(out)
}

/// Events with at least one audit entry, sorted.
pub(crate) fn audit_events(db: &Database, path: &Path) -> Result<Vec<String>, StoreError> {
    let mut ids: Vec<String> = scan(db, path, AUDIT, |k, _| Some(k.0.to_owned()))?;
    ids.dedup();
    Ok(ids)
}

/// Forgets an event's admin state and config document.
pub(crate) fn forget_event(db: &Database, path: &Path, key: &str) -> Result<(), StoreError> {
    let mut w = db.begin_write().map_err(|e| storage(path, e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| storage(path, e))?;
    {
        let mut t = w.open_table(ADMIN).map_err(|e| storage(path, e))?;
        t.remove(key).map_err(|e| storage(path, e))?;
        let mut t = w.open_table(CONFIGS).map_err(|e| storage(path, e))?;
        t.remove(key).map_err(|e| storage(path, e))?;
        let mut t = w.open_table(ANCHORS).map_err(|e| storage(path, e))?;
        t.remove(key).map_err(|e| storage(path, e))?;
    }
    next_generation(&w, path)?;
    w.commit().map_err(|e| storage(path, e))
}
