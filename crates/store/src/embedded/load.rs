//! Rebuilding one event's memory from its redb file at start-up (and after a
//! failed commit, so memory never claims more than the disk holds).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::disk::{self, ACTIVE, GRANTS, META, REVOKED, USED, USED_CANCELLED, USED_TOKEN, WAITING};
use super::state::{EventState, Grant, Revoked, Token, Used};
use crate::{Nonce, StoreError};

fn corrupt(path: &Path, what: &str) -> StoreError {
    StoreError::Corrupt(format!("{}: malformed {what} record", path.display()))
}

fn waiting_count(db: &Database, path: &Path) -> Result<u64, StoreError> {
    let r = db.begin_read().map_err(|e| disk::storage(path, e))?;
    match r.open_table(WAITING) {
        Ok(t) => t.len().map_err(|e| disk::storage(path, e)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(disk::storage(path, e)),
    }
}

/// An event's memory from its file, at `now_us` on the node's clock. A
/// waiter's last-seen time is kept in memory only (a poll writes nothing):
/// the file holds the time of its join, and a waiter counts as seen no
/// earlier than now, so the time the node was down (or its disk refused
/// writes) is never the visitors' absence; one that left for good before
/// it is swept one `queue_idle_timeout` after.
pub(crate) fn load(db: &Database, path: &Path, now_us: i64) -> Result<EventState, StoreError> {
    let mut st = EventState::new();
    disk::scan_bytes(db, path, META, |k, v| {
        let num = || disk::i64_at(v, 0).ok_or_else(|| corrupt(path, "meta"));
        match k {
            "last_us" => st.counters.last_us = num()?,
            "admitted_total" => st.counters.admitted_total = num()? as u64,
            "redeemed_total" => st.counters.redeemed_total = num()? as u64,
            _ => {}
        }
        Ok(())
    })?;
    let n = waiting_count(db, path)?;
    st.table.reserve(n as usize);
    {
        let r = db.begin_read().map_err(|e| disk::storage(path, e))?;
        match r.open_table(WAITING) {
            Ok(t) => {
                for row in t.iter().map_err(|e| disk::storage(path, e))? {
                    let (k, seen) = row.map_err(|e| disk::storage(path, e))?;
                    let (score, m) = disk::split_waiting_key(k.value())
                        .ok_or_else(|| corrupt(path, "waiting"))?;
                    let slot = st
                        .table
                        .push_unindexed(m, score, seen.value().max(now_us))
                        .map_err(|_| corrupt(path, "waiting"))?;
                    // Disk order is rank order, so these are appends.
                    st.order.insert(&mut st.table, slot);
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(disk::storage(path, e)),
        }
    }
    st.table.build_index();
    // One row per session and per used nonce; were there two for one (a
    // row left behind by a bug), the later end is the one kept.
    for row in disk::scan(db, path, ACTIVE, |k, ()| {
        Some(disk::split_active_key(k).map(|(m, end)| (Box::<str>::from(m), end)))
    })? {
        let (m, end) = row.ok_or_else(|| corrupt(path, "session"))?;
        let e = st.active.entry(m).or_insert(end);
        *e = (*e).max(end);
    }
    for row in disk::scan(db, path, USED, |k, ()| Some(disk::split_used_key(k)))? {
        let (kind, nonce, until) = row.ok_or_else(|| corrupt(path, "used nonce"))?;
        let e = st.used.entry(Used { kind, nonce }).or_insert(until);
        *e = (*e).max(until);
    }
    // Admitted: every member of a grant row whose token was neither
    // redeemed nor cancelled (`used` is loaded first for that).
    let r = db.begin_read().map_err(|e| disk::storage(path, e))?;
    match r.open_table(GRANTS) {
        Ok(t) => {
            for row in t.iter().map_err(|e| disk::storage(path, e))? {
                let (id, v) = row.map_err(|e| disk::storage(path, e))?;
                let exp = load_grant(&mut st, v.value()).ok_or_else(|| corrupt(path, "grant"))?;
                st.grants.push(Grant {
                    id: id.value(),
                    expires_at_us: exp,
                });
                st.next_grant = st.next_grant.max(id.value() + 1);
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(disk::storage(path, e)),
    }
    for r in disk::scan(db, path, REVOKED, |seq, v| {
        let at_us = disk::i64_at(v, 0)?;
        let member = std::str::from_utf8(&v[8..]).ok()?;
        Some(Revoked {
            seq,
            at_us,
            member: member.into(),
        })
    })? {
        st.revocations.push_back(r);
    }
    Ok(st)
}

/// Adds the members of one grant row still admitted; returns its expiry.
fn load_grant(st: &mut EventState, v: &[u8]) -> Option<i64> {
    let exp = disk::i64_at(v, 0)?;
    let mut rest = v.get(8..)?;
    while !rest.is_empty() {
        let len = usize::from(*rest.get(16)?) + 1;
        let m = std::str::from_utf8(rest.get(17..17 + len)?).ok()?;
        let mut n: Nonce = [0; 16];
        n.copy_from_slice(&rest[..16]);
        let used = |kind| Used { kind, nonce: n };
        if !st.used.contains_key(&used(USED_TOKEN)) && !st.used.contains_key(&used(USED_CANCELLED))
        {
            st.admitted.insert(
                m.into(),
                Token {
                    nonce: n,
                    expires_at_us: exp,
                },
            );
        }
        rest = &rest[17 + len..];
    }
    Some(exp)
}
