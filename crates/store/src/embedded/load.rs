//! Rebuilding one event's memory from its redb file at start-up (and after a
//! failed commit, so memory never claims more than the disk holds).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::disk::{self, ACTIVE, ADMITTED, META, REVOKED, USED, WAITING};
use super::state::EventState;
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

pub(crate) fn load(db: &Database, path: &Path) -> Result<EventState, StoreError> {
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
                        .push_unindexed(m, score, seen.value())
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
    let mut bad = false;
    disk::scan_bytes(db, path, ADMITTED, |m, v| {
        let Some(exp) = disk::i64_at(v, 16) else {
            bad = true;
            return Ok(());
        };
        let mut nonce: Nonce = [0; 16];
        nonce.copy_from_slice(&v[..16]);
        st.admitted.insert(m.into(), (nonce, exp));
        Ok(())
    })?;
    if bad {
        return Err(corrupt(path, "admitted"));
    }
    for (m, exp) in disk::scan(db, path, ACTIVE, |m, exp| Some((Box::<str>::from(m), exp)))? {
        st.active.insert(m, exp);
    }
    for (k, exp) in disk::scan(db, path, USED, |k, exp| {
        let mut nonce: Nonce = [0; 16];
        if k.len() != 17 {
            return None;
        }
        nonce.copy_from_slice(&k[1..]);
        Some(((k[0], nonce), exp))
    })? {
        st.used.insert(k, exp);
    }
    for (seq, at, m) in disk::scan(db, path, REVOKED, |seq, v| {
        let at = disk::i64_at(v, 0)?;
        let m = std::str::from_utf8(&v[8..]).ok()?;
        Some((seq, at, Box::<str>::from(m)))
    })? {
        st.revocations.push_back((seq, at, m));
    }
    Ok(st)
}
