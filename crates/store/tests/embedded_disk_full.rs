//! The embedded store on a really full filesystem: a small tmpfs the test
//! mounts (the test needs root, as CI runs it), filled to the last byte.
//! Joins fail as unavailable (the server drains), never panic or fail
//! otherwise; when space is freed the event comes back by itself with every
//! acknowledged join, also after a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anteroom_core::score::JoinScoring;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore, system_clock_us};
use anteroom_store::{EventId, MemberState, QueueStore, StoreError, Touch};

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("cannot run mount(8): install util-linux");
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs at {} failed ({}): this test fills a real \
             filesystem and needs root (CAP_SYS_ADMIN); run it as root or in a \
             privileged container",
            dir.path().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds a file there: detach it anyway, so no
            // mount outlives the test.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fills the filesystem holding `path` until a write fails for lack of space.
fn fill(path: &Path) -> PathBuf {
    let filler = path.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0xa5u8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
    // The last partial chunk may have fitted in part: write byte by byte.
    let one = [0u8; 1];
    while f.write_all(&one).is_ok() {}
    let _ = f.sync_all();
    filler
}

static OPENS_AT_US: LazyLock<i64> = LazyLock::new(|| system_clock_us() - 60_000_000);

fn scoring() -> JoinScoring {
    JoinScoring {
        opens_at_us: *OPENS_AT_US,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

/// Long ids fill the disk faster.
fn member(i: usize) -> String {
    format!("{i:08}-{}", "x".repeat(200))
}

async fn assert_all_waiting(s: &EmbeddedStore, ev: &EventId, acked: &[String]) {
    for m in acked {
        match s.status(ev, m, Touch::Peek).await.unwrap() {
            MemberState::Waiting { .. } => {}
            other => panic!("{m} was acknowledged but is {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_drains_the_event_and_it_recovers_with_every_acknowledged_join() {
    let fs = Tmpfs::mount("6m");
    let data = fs.path().join("data");
    let ev = EventId::new("full").unwrap();
    let mut acked = Vec::new();
    {
        let s = EmbeddedStore::open(&data, EmbeddedOptions::default())
            .await
            .unwrap();
        for i in 0..200 {
            s.join(&ev, &member(i), &scoring()).await.unwrap();
            acked.push(member(i));
        }
        let filler = fill(fs.path());

        // Join until the disk refuses: 32 at a time, as a crowd would.
        let sc = scoring();
        let mut next = acked.len();
        let mut refused = 0;
        while refused == 0 {
            assert!(next < 200_000, "the full disk never refused a join");
            let batch: Vec<String> = (next..next + 32).map(member).collect();
            next += 32;
            let outcomes =
                futures::future::join_all(batch.iter().map(|m| s.join(&ev, m, &sc))).await;
            for (m, o) in batch.into_iter().zip(outcomes) {
                match o {
                    Ok(_) => acked.push(m),
                    Err(StoreError::Unavailable(_)) => refused += 1,
                    Err(e) => panic!("a join on a full disk failed as {e:?}, not as unavailable"),
                }
            }
        }
        // While the disk stays full the event keeps draining: nothing is
        // acknowledged that could not be kept.
        for i in 0..20 {
            let m = format!("full{i:03}");
            match s.join(&ev, &m, &sc).await {
                Ok(_) => acked.push(m),
                Err(StoreError::Unavailable(_)) => {}
                Err(e) => panic!("a join on a full disk failed as {e:?}, not as unavailable"),
            }
        }

        std::fs::remove_file(&filler).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match s.join(&ev, "back", &sc).await {
                Ok(_) => break,
                Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the event did not come back after space was freed: {e}"),
            }
        }
        acked.push("back".into());
        assert_all_waiting(&s, &ev, &acked).await;
        assert!(s.queue_length(&ev).await.unwrap() >= acked.len() as u64);
    }
    let s = EmbeddedStore::open(&data, EmbeddedOptions::default())
        .await
        .unwrap();
    assert_all_waiting(&s, &ev, &acked).await;
    drop(s);
}
