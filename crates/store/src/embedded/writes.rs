//! The changes of one batch, encoded once, and the commit that writes them.
//!
//! Every key and value is encoded into one byte buffer as the change is made,
//! so a batch of thousands of joins costs two growing `Vec`s, not several
//! heap blocks per join; the commit then hands redb slices of that buffer.

use std::ops::Range;
use std::path::Path;

use redb::{Database, Durability};

use super::disk::{ACTIVE, Counters, GRANTS, META, REVOKED, USED, WAITING, ordered_i64, storage};
use crate::{Nonce, StoreError};

/// Which table a change goes to, and whether it inserts or removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Waiting,
    Unwait,
    Grant,
    Ungrant,
    Active,
    Deactivate,
    Used,
    Unuse,
    Revoked,
    Unrevoke,
}

/// One change: its key and (for inserts) value, as ranges of the buffer.
#[derive(Clone, Debug)]
struct Change {
    kind: Kind,
    key: Range<usize>,
    value: Range<usize>,
}

/// The changes of one batch, in the order they were made.
#[derive(Default, Debug)]
pub(crate) struct Writes {
    buf: Vec<u8>,
    changes: Vec<Change>,
}

impl Writes {
    /// Writes with room for `bytes` of keys and values and `changes`
    /// changes.
    pub(crate) fn with_capacity(bytes: usize, changes: usize) -> Self {
        Self {
            buf: Vec::with_capacity(bytes),
            changes: Vec::with_capacity(changes),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.changes.len()
    }

    /// Empties these writes and keeps their buffers, for the next round of
    /// changes to fill without growing them again.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.changes.clear();
    }

    /// `later`'s changes after these, in their order (a commit applies
    /// them in order, so a later change of a key wins, as in memory).
    pub(crate) fn append(&mut self, later: Writes) {
        let shift = self.buf.len();
        self.buf.extend_from_slice(&later.buf);
        self.changes
            .extend(later.changes.into_iter().map(|c| Change {
                kind: c.kind,
                key: c.key.start + shift..c.key.end + shift,
                value: c.value.start + shift..c.value.end + shift,
            }));
    }

    fn push(&mut self, kind: Kind, key: &[&[u8]], value: &[&[u8]]) {
        let k0 = self.buf.len();
        for part in key {
            self.buf.extend_from_slice(part);
        }
        let v0 = self.buf.len();
        for part in value {
            self.buf.extend_from_slice(part);
        }
        self.changes.push(Change {
            kind,
            key: k0..v0,
            value: v0..self.buf.len(),
        });
    }

    /// A waiting row keyed by (score, member), so that byte order is rank
    /// order: post-open joins, whose scores rise, append at the tail of the
    /// B-tree, and a start-up scan reads rank order.
    pub(crate) fn waiting(&mut self, score: i64, member: &str, seen: i64) {
        let s = ordered_i64(score);
        self.push(
            Kind::Waiting,
            &[&s, member.as_bytes()],
            &[&seen.to_le_bytes()],
        );
    }

    pub(crate) fn unwait(&mut self, score: i64, member: &str) {
        self.push(Kind::Unwait, &[&ordered_i64(score), member.as_bytes()], &[]);
    }

    /// One admit call's grant row; `entries` as [`super::disk::GRANTS`] says.
    pub(crate) fn grant(&mut self, id: u64, expires_at_us: i64, entries: &[u8]) {
        self.push(
            Kind::Grant,
            &[&id.to_le_bytes()],
            &[&expires_at_us.to_le_bytes(), entries],
        );
    }

    pub(crate) fn ungrant(&mut self, id: u64) {
        self.push(Kind::Ungrant, &[&id.to_le_bytes()], &[]);
    }

    /// A session row, keyed as [`super::disk::active_key`] says; a session
    /// whose end moves is removed under its old end and written anew.
    pub(crate) fn active(&mut self, member: &str, ends_at_us: i64) {
        self.push(
            Kind::Active,
            &[&ordered_i64(ends_at_us), member.as_bytes()],
            &[],
        );
    }

    pub(crate) fn deactivate(&mut self, member: &str, ends_at_us: i64) {
        self.push(
            Kind::Deactivate,
            &[&ordered_i64(ends_at_us), member.as_bytes()],
            &[],
        );
    }

    /// A used nonce, keyed as [`super::disk::used_key`] says.
    pub(crate) fn used(&mut self, kind: u8, nonce: &Nonce, kept_until_us: i64) {
        self.push(
            Kind::Used,
            &[&ordered_i64(kept_until_us), &[kind], nonce],
            &[],
        );
    }

    pub(crate) fn unuse(&mut self, kind: u8, nonce: &Nonce, kept_until_us: i64) {
        self.push(
            Kind::Unuse,
            &[&ordered_i64(kept_until_us), &[kind], nonce],
            &[],
        );
    }

    pub(crate) fn revoked(&mut self, seq: u64, at_us: i64, member: &str) {
        self.push(
            Kind::Revoked,
            &[&seq.to_le_bytes()],
            &[&at_us.to_le_bytes(), member.as_bytes()],
        );
    }

    pub(crate) fn unrevoke(&mut self, seq: u64) {
        self.push(Kind::Unrevoke, &[&seq.to_le_bytes()], &[]);
    }
}

impl Kind {
    const ALL: [Kind; 10] = [
        Kind::Waiting,
        Kind::Unwait,
        Kind::Grant,
        Kind::Ungrant,
        Kind::Active,
        Kind::Deactivate,
        Kind::Used,
        Kind::Unuse,
        Kind::Revoked,
        Kind::Unrevoke,
    ];

    /// The kind's byte in the log: its place in [`Kind::ALL`], which lists
    /// the kinds in declaration order.
    fn code(self) -> u8 {
        self as u8
    }
}

impl Writes {
    /// Appends these changes to `out` as the write-ahead log stores them:
    /// per change its kind (one byte), key and value lengths (u32 LE each),
    /// then the key and the value.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.buf.len() + self.changes.len() * 9);
        for c in &self.changes {
            out.push(c.kind.code());
            out.extend_from_slice(&(c.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&(c.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&self.buf[c.key.clone()]);
            out.extend_from_slice(&self.buf[c.value.clone()]);
        }
    }

    /// The changes [`Writes::encode`] wrote, appended to these; `None` if
    /// `bytes` is not such an encoding (nothing is appended then).
    pub(crate) fn decode_into(&mut self, mut bytes: &[u8]) -> Option<()> {
        let mut changes = Vec::new();
        let mut buf = Vec::with_capacity(bytes.len());
        let shift = self.buf.len();
        while let [code, rest @ ..] = bytes {
            let kind = *Kind::ALL.get(*code as usize)?;
            let klen = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let vlen = u32::from_le_bytes(rest.get(4..8)?.try_into().ok()?) as usize;
            let body = rest.get(8..8usize.checked_add(klen)?.checked_add(vlen)?)?;
            let k0 = shift + buf.len();
            buf.extend_from_slice(body);
            changes.push(Change {
                kind,
                key: k0..k0 + klen,
                value: k0 + klen..k0 + klen + vlen,
            });
            bytes = &rest[8 + klen + vlen..];
        }
        self.buf.extend_from_slice(&buf);
        self.changes.extend(changes);
        Some(())
    }
}

/// The meta key of the last write-ahead log record a checkpoint holds.
pub(crate) const WAL_SEQ: &str = "wal_seq";

fn le_i64(b: &[u8]) -> i64 {
    let mut x = [0u8; 8];
    let n = b.len().min(8);
    x[..n].copy_from_slice(&b[..n]);
    i64::from_le_bytes(x)
}

/// Writes `writes` and the counters in ONE durable transaction, with the
/// sequence of the last write-ahead log record they include (a checkpoint:
/// the log's records up to it are no longer needed).
pub(crate) fn commit(
    db: &Database,
    path: &Path,
    writes: &Writes,
    c: Counters,
    wal_seq: u64,
) -> Result<(), StoreError> {
    let e = |e: redb::Error| storage(path, e);
    let mut w = db.begin_write().map_err(|x| e(x.into()))?;
    w.set_durability(Durability::Immediate)
        .map_err(|x| e(x.into()))?;
    {
        let mut meta = w.open_table(META).map_err(|x| e(x.into()))?;
        meta.insert("last_us", c.last_us.to_le_bytes().as_slice())
            .map_err(|x| e(x.into()))?;
        meta.insert("admitted_total", c.admitted_total.to_le_bytes().as_slice())
            .map_err(|x| e(x.into()))?;
        meta.insert("redeemed_total", c.redeemed_total.to_le_bytes().as_slice())
            .map_err(|x| e(x.into()))?;
        meta.insert(WAL_SEQ, wal_seq.to_le_bytes().as_slice())
            .map_err(|x| e(x.into()))?;
        let mut waiting = w.open_table(WAITING).map_err(|x| e(x.into()))?;
        let mut grants = w.open_table(GRANTS).map_err(|x| e(x.into()))?;
        let mut active = w.open_table(ACTIVE).map_err(|x| e(x.into()))?;
        let mut used = w.open_table(USED).map_err(|x| e(x.into()))?;
        let mut revoked = w.open_table(REVOKED).map_err(|x| e(x.into()))?;
        for ch in &writes.changes {
            let k = &writes.buf[ch.key.clone()];
            let v = &writes.buf[ch.value.clone()];
            let r = match ch.kind {
                Kind::Waiting => waiting.insert(k, le_i64(v)).map(drop),
                Kind::Unwait => waiting.remove(k).map(drop),
                Kind::Grant => grants.insert(le_i64(k) as u64, v).map(drop),
                Kind::Ungrant => grants.remove(le_i64(k) as u64).map(drop),
                Kind::Active => active.insert(k, ()).map(drop),
                Kind::Deactivate => active.remove(k).map(drop),
                Kind::Used => used.insert(k, ()).map(drop),
                Kind::Unuse => used.remove(k).map(drop),
                Kind::Revoked => revoked.insert(le_i64(k) as u64, v).map(drop),
                Kind::Unrevoke => revoked.remove(le_i64(k) as u64).map(drop),
            };
            r.map_err(|x| e(x.into()))?;
        }
    }
    w.commit().map_err(|x| e(x.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_log_byte_names_it_back() {
        for k in Kind::ALL {
            assert_eq!(Kind::ALL[k.code() as usize], k);
        }
    }
}
