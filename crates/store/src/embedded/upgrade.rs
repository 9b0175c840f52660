//! Rewrites an event file of an older format into the current one, in place
//! and in one durable transaction, so an operator who upgrades keeps every
//! queue, admission and session (a failed or interrupted rewrite leaves the
//! old file as it was, and the next start tries again).

use std::path::Path;

use redb::{Database, Durability, ReadableTable, TableDefinition, TableError};

use super::disk::{self, ACTIVE, EVENT_MAGIC, META, USED};
use crate::StoreError;

/// Format 3's sessions: member → session end.
const ACTIVE_3: TableDefinition<&str, i64> = TableDefinition::new("active");
/// Format 3's used nonces: (kind, nonce) → kept until.
const USED_3: TableDefinition<&[u8], i64> = TableDefinition::new("used");

/// Format 3 → 4: sessions and used nonces keyed by their end.
pub(crate) fn from_3(db: &Database, path: &Path) -> Result<(), StoreError> {
    let e = |x: redb::Error| disk::storage(path, x);
    let corrupt =
        |what: &str| StoreError::Corrupt(format!("{}: malformed {what} record", path.display()));
    let mut w = db.begin_write().map_err(|x| e(x.into()))?;
    w.set_durability(Durability::Immediate)
        .map_err(|x| e(x.into()))?;
    let sessions: Vec<(String, i64)> = match w.open_table(ACTIVE_3) {
        Ok(t) => t
            .iter()
            .map_err(|x| e(x.into()))?
            .map(|r| {
                r.map(|(k, v)| (k.value().to_owned(), v.value()))
                    .map_err(|x| e(x.into()))
            })
            .collect::<Result<_, _>>()?,
        Err(TableError::TableDoesNotExist(_)) => Vec::new(),
        Err(x) => return Err(e(x.into())),
    };
    let used: Vec<(Vec<u8>, i64)> = match w.open_table(USED_3) {
        Ok(t) => t
            .iter()
            .map_err(|x| e(x.into()))?
            .map(|r| {
                r.map(|(k, v)| (k.value().to_vec(), v.value()))
                    .map_err(|x| e(x.into()))
            })
            .collect::<Result<_, _>>()?,
        Err(TableError::TableDoesNotExist(_)) => Vec::new(),
        Err(x) => return Err(e(x.into())),
    };
    w.delete_table(ACTIVE_3).map_err(|x| e(x.into()))?;
    w.delete_table(USED_3).map_err(|x| e(x.into()))?;
    {
        let mut t = w.open_table(ACTIVE).map_err(|x| e(x.into()))?;
        for (m, end) in &sessions {
            t.insert(disk::active_key(m, *end).as_slice(), ())
                .map_err(|x| e(x.into()))?;
        }
        let mut t = w.open_table(USED).map_err(|x| e(x.into()))?;
        for (k, until) in &used {
            let (&kind, nonce) = k.split_first().ok_or_else(|| corrupt("used nonce"))?;
            let nonce: &crate::Nonce = nonce.try_into().map_err(|_| corrupt("used nonce"))?;
            t.insert(disk::used_key(kind, nonce, *until).as_slice(), ())
                .map_err(|x| e(x.into()))?;
        }
        let mut t = w.open_table(META).map_err(|x| e(x.into()))?;
        t.insert("magic", EVENT_MAGIC).map_err(|x| e(x.into()))?;
    }
    w.commit().map_err(|x| e(x.into()))?;
    tracing::info!(
        file = %path.display(),
        sessions = sessions.len(),
        used_nonces = used.len(),
        "event file rewritten from format 3 to 4"
    );
    Ok(())
}
