//! IP reputation lists loaded from CIDR files, swapped whole on reload.
//!
//! Readers clone an `Arc` under a read lock held for a pointer copy, so a
//! reload never blocks the enter path for longer than that. A file that fails
//! to parse on reload leaves the old lists in force: a typo pushed by an
//! operator must not silently unblock every datacenter.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// Modification time and length: a rewrite within one mtime tick (coarse
/// filesystems, fast tests) still changes the length in practice.
type Stamp = Option<(SystemTime, u64)>;

use anteroom_core::risk::{CidrList, ReputationLists};

use super::BotsError;
use super::config::ReputationFiles;

/// The lists in force, and what they were read from.
pub struct Reputation {
    files: ReputationFiles,
    current: RwLock<Arc<ReputationLists>>,
    /// Stamps of the loaded files, to skip unchanged ones.
    stamps: RwLock<[Stamp; 3]>,
}

impl Reputation {
    /// Reads every configured file; any error fails start.
    pub fn load(files: &ReputationFiles) -> Result<Self, BotsError> {
        let (lists, stamps) = read_all(files)?;
        Ok(Self {
            files: files.clone(),
            current: RwLock::new(Arc::new(lists)),
            stamps: RwLock::new(stamps),
        })
    }

    /// The lists in force now.
    pub fn current(&self) -> Arc<ReputationLists> {
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            // A panic while swapping an Arc cannot leave it half-written.
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Re-reads the files when any modification time changed. On error the
    /// old lists stay and the error (naming file and line) is returned.
    /// `Ok(true)` when new lists were installed.
    pub fn reload_if_changed(&self) -> Result<bool, BotsError> {
        let now = stamps_of(&self.files);
        let before = *self.stamps.read().unwrap_or_else(|p| p.into_inner());
        if now == before {
            return Ok(false);
        }
        self.reload()
    }

    /// Re-reads the files unconditionally (SIGHUP, admin, tests).
    pub fn reload(&self) -> Result<bool, BotsError> {
        let (lists, stamps) = read_all(&self.files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(lists);
        *self.stamps.write().unwrap_or_else(|p| p.into_inner()) = stamps;
        Ok(true)
    }
}

fn read_all(files: &ReputationFiles) -> Result<(ReputationLists, [Stamp; 3]), BotsError> {
    let stamps = stamps_of(files);
    let lists = ReputationLists {
        datacenter: read_list(files.datacenter.as_deref())?,
        vpn: read_list(files.vpn.as_deref())?,
        known_bot: read_list(files.known_bot.as_deref())?,
    };
    Ok((lists, stamps))
}

fn read_list(path: Option<&Path>) -> Result<CidrList, BotsError> {
    let Some(path) = path else {
        return Ok(CidrList::default());
    };
    let text = std::fs::read_to_string(path).map_err(|e| BotsError::ReputationRead {
        file: path.to_owned(),
        message: e.to_string(),
    })?;
    CidrList::parse(&text).map_err(|e| BotsError::ReputationParse {
        file: path.to_owned(),
        line: e.line,
        message: e.message,
    })
}

fn stamps_of(files: &ReputationFiles) -> [Stamp; 3] {
    let stamp = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    [
        stamp(&files.datacenter),
        stamp(&files.vpn),
        stamp(&files.known_bot),
    ]
}
