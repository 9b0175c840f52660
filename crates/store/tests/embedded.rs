//! The embedded backend against the conformance suite, the model check, a
//! restart, bad data directories and a `kill -9` in the middle of joins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use anteroom_core::score::JoinScoring;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use anteroom_store::{
    AdmitRequest, EventId, MemberState, QueueStore, StoreError, Touch, conformance,
};

/// A plain join's scoring: after the pre-window, for an event that opens
/// at `opens_at_us`.
fn opening_at(opens_at_us: i64) -> JoinScoring {
    JoinScoring {
        opens_at_us,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

async fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, EmbeddedOptions::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn QueueStore> = Arc::new(open(dir.path()).await);
    conformance::test_suite(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_matches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn QueueStore> = Arc::new(open(dir.path()).await);
    conformance::model_check(store, 48).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    conformance::test_suite(Arc::new(open(dir.path()).await)).await;
    conformance::test_suite(Arc::new(open(dir.path()).await)).await;
}

/// Everything a member can be, written, then compared after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_restores_every_position() {
    let dir = tempfile::tempdir().unwrap();
    let ev = EventId::new("restart").unwrap();
    // Half session ids (kept inline in memory), half other ids.
    let members: Vec<String> = (0..600u64)
        .map(|i| {
            if i % 2 == 0 {
                format!("{:032x}", i * 0x9e37_79b9)
            } else {
                format!("m{i:04}")
            }
        })
        .collect();
    let before: HashMap<String, MemberState> = {
        let s = open(dir.path()).await;
        let t = s.now_us(&ev).await.unwrap();
        for (i, m) in members.iter().enumerate() {
            // A third pre-window (shuffled), the rest after opening.
            let sc = JoinScoring {
                opens_at_us: if i % 3 == 0 { t + 3_600_000_000 } else { t - 1 },
                prewindow_score: -((i as i64 * 7919) % 1000) - 1,
                tiebreak: 0,
                behind: i % 50 == 0,
            };
            s.join(&ev, m, &sc).await.unwrap();
        }
        let req = AdmitRequest {
            max: 5,
            max_active: 10,
            nonces: (0..5u8).map(|i| [i; 16]).collect(),
            token_ttl_us: 3_600_000_000,
        };
        let got = s.admit(&ev, &req).await.unwrap();
        s.redeem(&ev, &got[0].member, &got[0].nonce, t + 3_600_000_000)
            .await
            .unwrap();
        // An admitted member who leaves: its grant row still lists it.
        assert!(s.release(&ev, &got[1].member).await.unwrap());
        s.set_admin_state(&ev, anteroom_core::phase::AdminState::Paused)
            .await
            .unwrap();
        s.put_event_config(&ev, "{}").await.unwrap();
        let mut m = HashMap::new();
        for x in &members {
            m.insert(x.clone(), s.status(&ev, x, Touch::Peek).await.unwrap());
        }
        m
    };
    let s = open(dir.path()).await;
    for x in &members {
        assert_eq!(
            s.status(&ev, x, Touch::Peek).await.unwrap(),
            before[x],
            "{x} after restart"
        );
    }
    assert_eq!(
        s.admin_state(&ev).await.unwrap(),
        anteroom_core::phase::AdminState::Paused
    );
    assert_eq!(
        s.event_configs().await.unwrap(),
        vec![(ev.clone(), "{}".to_owned())]
    );
    let st = s.stats(&ev).await.unwrap();
    assert_eq!(
        (
            st.waiting,
            st.active,
            st.outstanding,
            st.admitted_total,
            st.redeemed_total
        ),
        (595, 1, 3, 5, 1)
    );
}

/// A store in `dir` whose event `e` holds one waiter, closed again.
async fn with_one_waiter(dir: &Path) {
    let s = open(dir).await;
    let sc = opening_at(0);
    s.join(&EventId::new("e").unwrap(), "m", &sc).await.unwrap();
}

fn corrupt_names(r: Result<EmbeddedStore, StoreError>, file: &str) {
    match r {
        Err(StoreError::Corrupt(m)) => assert!(m.contains(file), "{m} should name {file}"),
        Err(e) => panic!("expected Corrupt naming {file}, got {e}"),
        Ok(_) => panic!("expected Corrupt naming {file}, got a store"),
    }
}

/// An event file from an older format is refused with a message that says
/// so, not read as an empty queue.
#[tokio::test]
async fn an_older_format_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).await);
    {
        let db = redb::Database::create(dir.path().join("events").join("old.redb")).unwrap();
        let w = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut t = w.open_table(def).unwrap();
            t.insert("magic", b"anteroom-event/2".as_slice()).unwrap();
        }
        w.commit().unwrap();
    }
    match EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).await {
        Err(StoreError::Corrupt(m)) => {
            assert!(
                m.contains("old.redb") && m.contains("another Anteroom version"),
                "{m}"
            )
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("expected Corrupt, got a store"),
    }
}

/// A format-3 event file (sessions keyed by member, used nonces by nonce)
/// is rewritten in place when opened, keeping its session, its redeemed
/// token's record and its still-admitted member, and stays so on the next
/// open.
#[tokio::test]
async fn a_format_3_event_file_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).await);
    let ev = EventId::new("old").unwrap();
    let far = 4_000_000_000_000_000i64;
    let (a, b) = ([7u8; 16], [9u8; 16]);
    {
        let db = redb::Database::create(dir.path().join("events").join("old.redb")).unwrap();
        let w = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut t = w.open_table(meta).unwrap();
            t.insert("magic", b"anteroom-event/3".as_slice()).unwrap();
            t.insert("last_us", 1_000i64.to_le_bytes().as_slice())
                .unwrap();
            t.insert("admitted_total", 2u64.to_le_bytes().as_slice())
                .unwrap();
            t.insert("redeemed_total", 1u64.to_le_bytes().as_slice())
                .unwrap();
            // One grant of two: "in" redeemed (its nonce used, its session
            // active), "out" still admitted.
            let grants: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("grants");
            let mut row = far.to_le_bytes().to_vec();
            for (nonce, m) in [(a, "in"), (b, "out")] {
                row.extend_from_slice(&nonce);
                row.push(m.len() as u8 - 1);
                row.extend_from_slice(m.as_bytes());
            }
            w.open_table(grants)
                .unwrap()
                .insert(0, row.as_slice())
                .unwrap();
            let active: redb::TableDefinition<&str, i64> = redb::TableDefinition::new("active");
            w.open_table(active).unwrap().insert("in", far).unwrap();
            let used: redb::TableDefinition<&[u8], i64> = redb::TableDefinition::new("used");
            let mut key = vec![0u8];
            key.extend_from_slice(&a);
            w.open_table(used)
                .unwrap()
                .insert(key.as_slice(), far)
                .unwrap();
        }
        w.commit().unwrap();
    }
    for round in ["upgraded", "reopened"] {
        let s = open(dir.path()).await;
        assert_eq!(
            s.status(&ev, "in", Touch::Peek).await.unwrap(),
            MemberState::Active { expires_at_us: far },
            "{round}"
        );
        assert_eq!(
            s.status(&ev, "out", Touch::Peek).await.unwrap(),
            MemberState::Admitted {
                nonce: b,
                expires_at_us: far
            },
            "{round}"
        );
        assert_eq!(
            s.redeem(&ev, "in", &a, far).await.unwrap(),
            anteroom_store::RedeemOutcome::AlreadyUsed,
            "{round}"
        );
        let st = s.stats(&ev).await.unwrap();
        assert_eq!(
            (
                st.active,
                st.outstanding,
                st.admitted_total,
                st.redeemed_total
            ),
            (1, 1, 2, 1),
            "{round}"
        );
    }
}

#[tokio::test]
async fn foreign_or_damaged_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"hello").unwrap();
    corrupt_names(
        EmbeddedStore::open(&file, EmbeddedOptions::default()).await,
        "plain-file",
    );

    let other = dir.path().join("someone-elses");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    corrupt_names(
        EmbeddedStore::open(&other, EmbeddedOptions::default()).await,
        "someone-elses",
    );

    let bad_meta = dir.path().join("bad-meta");
    std::fs::create_dir(&bad_meta).unwrap();
    std::fs::write(bad_meta.join("meta.redb"), vec![0x5a; 8192]).unwrap();
    corrupt_names(
        EmbeddedStore::open(&bad_meta, EmbeddedOptions::default()).await,
        "meta.redb",
    );

    let bad_event = dir.path().join("bad-event");
    drop(open(&bad_event).await);
    std::fs::write(bad_event.join("events").join("drop.redb"), vec![0x17; 8192]).unwrap();
    corrupt_names(
        EmbeddedStore::open(&bad_event, EmbeddedOptions::default()).await,
        "drop.redb",
    );

    // A redb file of the wrong kind (an event file where meta belongs).
    let swapped = dir.path().join("swapped");
    with_one_waiter(&swapped).await;
    std::fs::copy(
        swapped.join("events").join("e.redb"),
        swapped.join("meta.redb"),
    )
    .unwrap();
    corrupt_names(
        EmbeddedStore::open(&swapped, EmbeddedOptions::default()).await,
        "meta.redb",
    );

    // meta.redb emptied beside event files (a bad restore, a full disk's
    // truncation): opened as new it would forget every paused or closed
    // event and every stored config, so it is refused, and nothing in the
    // directory is touched.
    let emptied = dir.path().join("emptied");
    with_one_waiter(&emptied).await;
    std::fs::write(emptied.join("meta.redb"), b"").unwrap();
    corrupt_names(
        EmbeddedStore::open(&emptied, EmbeddedOptions::default()).await,
        "meta.redb",
    );
    assert_eq!(
        std::fs::metadata(emptied.join("meta.redb")).unwrap().len(),
        0,
        "the refused file is left as it was"
    );
    // An empty meta.redb with no event beside it (a crash while the store
    // was first made) holds nothing to lose: the store is made anew.
    for f in std::fs::read_dir(emptied.join("events")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    drop(open(&emptied).await);
}

/// `kill -9` a process in the middle of joins: every join it acknowledged
/// is there after reopening, in acknowledged order per writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_join() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_writer"))
        .arg(dir.path())
        .arg("crash")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut acked: Vec<(u32, u64, String)> = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let mut parts = line.split(' ');
        let t = parts.next().unwrap().parse().unwrap();
        let i = parts.next().unwrap().parse().unwrap();
        acked.push((t, i, parts.next().unwrap().to_owned()));
        if acked.len() == 5000 {
            child.kill().unwrap(); // SIGKILL: no destructor, no flush.
            break;
        }
    }
    child.wait().unwrap();
    let s = open(dir.path()).await;
    let ev = EventId::new("crash").unwrap();
    let mut last_rank: HashMap<u32, (u64, u64)> = HashMap::new();
    for (t, i, m) in &acked {
        let rank = match s.status(&ev, m, Touch::Peek).await.unwrap() {
            MemberState::Waiting { rank, .. } => rank,
            other => panic!("acknowledged {m} lost after kill -9: {other:?}"),
        };
        if let Some((pi, pr)) = last_rank.insert(*t, (*i, rank)) {
            assert!(
                pi < *i && pr < rank,
                "writer {t}: {m} acknowledged after #{pi} but ranks {rank} <= {pr}"
            );
        }
    }
    assert!(s.queue_length(&ev).await.unwrap() >= acked.len() as u64);
}

/// A waiter's last-seen time lives in memory: after a restart (or a rebuild
/// from the file) every waiter counts as seen at that moment, so the node's
/// downtime never idles the line out, and one that stays silent after it
/// is swept as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_waiter_counts_as_seen_then() {
    use std::sync::atomic::{AtomicI64, Ordering};
    const HOUR_US: i64 = 3_600_000_000;
    let dir = tempfile::tempdir().unwrap();
    let ev = EventId::new("grace").unwrap();
    let clock = Arc::new(AtomicI64::new(1_900_000_000_000_000));
    let opts = || {
        let c = clock.clone();
        EmbeddedOptions {
            clock: Arc::new(move || c.load(Ordering::SeqCst)),
            ..EmbeddedOptions::default()
        }
    };
    let t0 = clock.load(Ordering::SeqCst);
    {
        let s = EmbeddedStore::open(dir.path(), opts()).await.unwrap();
        let sc = opening_at(t0 - 1);
        s.join(&ev, "early", &sc).await.unwrap();
        s.join(&ev, "polled", &sc).await.unwrap();
        clock.store(t0 + 60_000_000, Ordering::SeqCst);
        s.status(&ev, "polled", Touch::Seen).await.unwrap();
    }
    // Down for an hour, far past any idle timeout.
    let back = t0 + HOUR_US;
    clock.store(back, Ordering::SeqCst);
    let s = EmbeddedStore::open(dir.path(), opts()).await.unwrap();
    let idle_before = |cutoff| anteroom_store::ExpireRequest {
        waiting_seen_before_us: cutoff,
    };
    let e = s.expire(&ev, &idle_before(back - 1)).await.unwrap();
    assert_eq!(
        e.idle_waiters, 0,
        "nobody idled out while the node was down"
    );
    for m in ["early", "polled"] {
        assert!(
            matches!(
                s.status(&ev, m, Touch::Peek).await.unwrap(),
                MemberState::Waiting { .. }
            ),
            "{m}"
        );
    }
    // Silent since the restart: swept once the cutoff passes it.
    clock.store(back + HOUR_US, Ordering::SeqCst);
    s.status(&ev, "polled", Touch::Seen).await.unwrap();
    let e = s.expire(&ev, &idle_before(back + 1)).await.unwrap();
    assert_eq!(e.idle_waiters, 1);
    assert_eq!(
        s.status(&ev, "early", Touch::Peek).await.unwrap(),
        MemberState::None
    );
}

/// A node clock that ran an hour ahead and is set right: arrival order and
/// the revocation feed stay in order (across a restart too), but expiry and
/// the store's clock follow the clock as it is now. Before, the store's clock
/// stayed an hour ahead until time caught up: a session opened meanwhile
/// (its end set by the node's corrected clock) was swept as over at once,
/// and every reader of the store's clock saw it frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_set_right_after_running_ahead_keeps_order_but_ends_nothing_early() {
    use anteroom_store::{ExpireRequest, RedeemOutcome};
    use std::sync::atomic::{AtomicI64, Ordering};
    const HOUR_US: i64 = 3_600_000_000;
    let dir = tempfile::tempdir().unwrap();
    let ev = EventId::new("stepped").unwrap();
    let t0: i64 = 1_900_000_000_000_000;
    let clock = Arc::new(AtomicI64::new(t0 + HOUR_US));
    let opts = || {
        let c = clock.clone();
        EmbeddedOptions {
            clock: Arc::new(move || c.load(Ordering::SeqCst)),
            ..EmbeddedOptions::default()
        }
    };
    let sc = opening_at(t0 - HOUR_US);
    let admit_one = |n: u8| AdmitRequest {
        max: 1,
        max_active: 100,
        nonces: vec![[n; 16]],
        token_ttl_us: 60_000_000,
    };
    let s = EmbeddedStore::open(dir.path(), opts()).await.unwrap();
    // While the clock runs ahead: two waiters, and one who leaves.
    for m in ["a", "b", "c"] {
        s.join(&ev, m, &sc).await.unwrap();
    }
    assert!(s.release(&ev, "c").await.unwrap());
    let left = s.revocations_since(&ev, 0).await.unwrap();
    assert_eq!(left.len(), 1);
    let left_at = left[0].at_us;

    clock.store(t0, Ordering::SeqCst);
    assert_eq!(
        s.now_us(&ev).await.unwrap(),
        t0,
        "the store's clock is the clock as it is now, not frozen an hour ahead"
    );
    // The one who left comes back, after the two who waited.
    s.join(&ev, "c", &sc).await.unwrap();
    assert_eq!(
        s.status(&ev, "c", Touch::Peek).await.unwrap(),
        MemberState::Waiting {
            rank: 2,
            queue_length: 3
        },
        "a join after the step still ranks after those before it"
    );
    for (n, m) in [(1, "a"), (2, "b"), (3, "c")] {
        let got = s.admit(&ev, &admit_one(n)).await.unwrap();
        assert_eq!(got[0].member, m);
    }
    let session_end = t0 + 10 * 60_000_000;
    let started = match s.redeem(&ev, "c", &[3; 16], session_end).await.unwrap() {
        RedeemOutcome::Redeemed { at_us } => at_us,
        other => panic!("{other:?}"),
    };
    assert!(
        started > left_at,
        "the session starts after the revocation stamped before it, which must not end it"
    );
    clock.store(t0 + 1_000_000, Ordering::SeqCst);
    let swept = s
        .expire(
            &ev,
            &ExpireRequest {
                waiting_seen_before_us: t0 - HOUR_US,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        swept.sessions, 0,
        "a session with ten minutes ahead of it is not over"
    );
    assert_eq!(
        s.status(&ev, "c", Touch::Peek).await.unwrap(),
        MemberState::Active {
            expires_at_us: session_end
        }
    );
    // Leaving again is read by a node that reads on from the last stamp it saw.
    assert!(s.release(&ev, "c").await.unwrap());
    let next = s.revocations_since(&ev, left_at + 1).await.unwrap();
    assert_eq!(
        next.len(),
        1,
        "the second leave is not hidden behind the first"
    );
    assert!(next[0].at_us > started);
    // One joins while the clock still lags what the store handed out.
    s.join(&ev, "w", &sc).await.unwrap();
    drop(s);

    // The order holds across a restart: the instant last handed out is kept.
    let s = EmbeddedStore::open(dir.path(), opts()).await.unwrap();
    s.join(&ev, "d", &sc).await.unwrap();
    for (m, rank) in [("w", 0), ("d", 1)] {
        assert_eq!(
            s.status(&ev, m, Touch::Peek).await.unwrap(),
            MemberState::Waiting {
                rank,
                queue_length: 2
            },
            "{m}"
        );
    }
}

/// A tick or batch guard claimed while the clock ran ahead guards nothing
/// once the clock is set back: kept, it refused every tick of the step
/// until the clock caught up, and nothing was admitted or swept meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_made_while_the_clock_ran_ahead_does_not_hold_after_it_is_set_back() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let ev = EventId::new("claims").unwrap();
    let t0: i64 = 1_900_000_000_000_000;
    let clock = Arc::new(AtomicI64::new(t0 + 60_000_000));
    let c = clock.clone();
    let s = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            clock: Arc::new(move || c.load(Ordering::SeqCst)),
            ..EmbeddedOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(s.claim_tick(&ev, 7, 3_600_000).await.unwrap());
    assert!(!s.claim_tick(&ev, 7, 3_600_000).await.unwrap(), "held");
    // A minute back: the claim was made "in the future".
    clock.store(t0, Ordering::SeqCst);
    assert!(s.claim_tick(&ev, 7, 3_600_000).await.unwrap());
    assert!(
        !s.claim_tick(&ev, 7, 3_600_000).await.unwrap(),
        "held again"
    );
    assert!(s.claim_tick_and_read(&ev, 8, 100).await.unwrap().is_some());
    assert!(s.claim_tick_and_read(&ev, 8, 100).await.unwrap().is_none());
}

/// The disk threads do not preempt the event loops that wake them: an
/// event's committer runs under `SCHED_BATCH` (the reason is in
/// `embedded/batch_policy.rs`).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_committer_runs_under_sched_batch() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let ev = EventId::new("batch-policy").unwrap();
    let t = s.now_us(&ev).await.unwrap();
    let sc = JoinScoring {
        opens_at_us: t - 1,
        prewindow_score: 0,
        tiebreak: 0,
        behind: false,
    };
    // An acknowledged join went through the committer, so it is running.
    s.join(&ev, "m1", &sc).await.unwrap();
    let mut policies = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
            continue; // a thread that ended meanwhile
        };
        if name.trim() != "event-commit" {
            continue;
        }
        let stat = std::fs::read_to_string(task.join("stat")).unwrap();
        // Field 41 (the policy), counted after the `)` that ends the name.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        policies.push(rest.split(' ').nth(41 - 3).unwrap().parse::<i32>().unwrap());
    }
    // SCHED_BATCH is policy 3.
    assert_eq!(policies, vec![3], "one committer, under SCHED_BATCH");
}

/// Calls that arrive while an event is being deleted (an old task of the
/// event, a visitor's poll) never start it again from the files about to
/// go: before, one found the event gone from the map, opened its files
/// (the deleted waiters and sessions with them) and kept writing into them
/// after they were unlinked, so the next event of that id began with the
/// deleted one's visitors and lost its own writes at the next restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_during_a_deletion_bring_nothing_of_the_deleted_event_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path()).await);
    let ev = EventId::new("e").unwrap();
    let sc = opening_at(0);
    for round in 0..5 {
        for i in 0..200 {
            s.join(&ev, &format!("m{i}"), &sc).await.unwrap();
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                let (s, ev, stop) = (s.clone(), ev.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = s.queue_length(&ev).await;
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        s.delete_event(&ev).await.unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for p in pollers {
            p.await.unwrap();
        }
        assert_eq!(
            s.queue_length(&ev).await.unwrap(),
            0,
            "round {round}: the deleted event's waiters came back"
        );
    }
}

/// A deletion whose caller goes away at once (an operator's client that
/// hung up) still runs to its end: the event's queue, admin state and
/// stored config all go, not the queue alone with a closed event's state
/// left to outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_whose_caller_goes_away_still_ends() {
    use anteroom_core::phase::AdminState;
    use futures::FutureExt as _;
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let ev = EventId::new("e").unwrap();
    let sc = opening_at(0);
    s.join(&ev, "a", &sc).await.unwrap();
    s.set_admin_state(&ev, AdminState::Closed).await.unwrap();
    s.put_event_config(&ev, "{}").await.unwrap();
    // Polled once, then dropped.
    let answered = s.delete_event(&ev).now_or_never();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while let Err(e) = s.join(&ev, "b", &sc).await {
        assert!(
            std::time::Instant::now() < deadline,
            "the deletion never ended ({answered:?}): {e:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(matches!(
        s.status(&ev, "a", Touch::Peek).await.unwrap(),
        MemberState::None
    ));
    assert_eq!(s.admin_state(&ev).await.unwrap(), AdminState::Running);
    let configs = s.event_config_set().await.unwrap().configs;
    assert!(
        configs.iter().all(|(id, _)| *id != ev),
        "the stored config outlived the deletion: {configs:?}"
    );
}
