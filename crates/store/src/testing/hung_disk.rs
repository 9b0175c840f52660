//! A directory whose disk can be made to hang for real: a FUSE passthrough
//! mount (`bindfs`) of a temporary directory. Stopping the `bindfs`
//! process (`SIGSTOP`) leaves every system call on the mount that needs it
//! (a write, an `fsync`, an open) waiting in the kernel, as a stuck network
//! volume or a frozen device does, without an error; `SIGCONT` lets them
//! all finish. Needs root (or `/dev/fuse` and `fusermount3` usable by the
//! user) and Debian's `bindfs` and `fuse3`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};

/// A FUSE mount whose disk hangs on command; unmounted when dropped.
pub struct HungDisk {
    _backing: tempfile::TempDir,
    mount: tempfile::TempDir,
    bindfs: Child,
}

impl HungDisk {
    /// Mounts a fresh temporary directory through `bindfs`; returns once
    /// the mount is in the mount table.
    pub fn mount() -> anyhow::Result<Self> {
        let backing = tempfile::tempdir()?;
        let mount = tempfile::tempdir()?;
        let mut bindfs = Command::new("bindfs")
            .arg("-f")
            .arg(backing.path())
            .arg(mount.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run bindfs: apt-get install bindfs fuse3")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !mounted(mount.path())? {
            if let Some(status) = bindfs.try_wait()? {
                let mut why = String::new();
                if let Some(mut err) = bindfs.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut why);
                }
                bail!(
                    "bindfs exited ({status}) without mounting {}: {}; this test needs \
                     /dev/fuse and root (apt-get install bindfs fuse3)",
                    mount.path().display(),
                    why.trim()
                );
            }
            if Instant::now() > deadline {
                let _ = bindfs.kill();
                bail!(
                    "bindfs did not mount {} within 10 s",
                    mount.path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Self {
            _backing: backing,
            mount,
            bindfs,
        })
    }

    /// The mounted directory.
    pub fn path(&self) -> &Path {
        self.mount.path()
    }

    /// Makes the disk hang until the guard is dropped or thawed. Declare
    /// the guard after anything that must not be dropped while the disk
    /// hangs (a store whose threads wait on it would never finish).
    pub fn freeze(&self) -> anyhow::Result<Frozen<'_>> {
        self.signal("STOP")?;
        Ok(Frozen { disk: self })
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.bindfs.id().to_string())
            .status()?
            .success();
        ensure!(ok, "kill -{sig} of bindfs failed");
        Ok(())
    }
}

/// Whether `path` is a mount point now (`/proc/self/mountinfo`'s fifth
/// field, in the kernel's octal escapes for spaces and the like).
fn mounted(path: &Path) -> anyhow::Result<bool> {
    let want = path.to_string_lossy().replace(' ', "\\040");
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(table
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str())))
}

/// A hung disk; dropping it lets the disk answer again.
pub struct Frozen<'a> {
    disk: &'a HungDisk,
}

impl Frozen<'_> {
    /// Lets the disk answer again (every call that waited finishes).
    pub fn thaw(self) {}
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.disk.signal("CONT");
    }
}

impl Drop for HungDisk {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
        // Lazily: a process that still has a file open there (a server
        // killed a moment ago) must not keep the mount.
        let path: PathBuf = self.mount.path().to_owned();
        let unmounted = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&path).status();
        }
        let _ = self.bindfs.kill();
        let _ = self.bindfs.wait();
    }
}
