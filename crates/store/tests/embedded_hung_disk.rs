//! The embedded store on a disk that hangs for real: a FUSE mount whose
//! daemon is stopped (see `anteroom_store::testing::HungDisk`), so writes
//! and syncs wait in the kernel without an error. A call that meets the
//! hang is answered unavailable (timed out) after the store's timeout, new
//! calls are refused at once, the ping says so (the server drains on it),
//! and polls are still answered from memory; once the disk answers again
//! the event serves with every acknowledged join, also after a reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anteroom_core::score::JoinScoring;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore, system_clock_us};
use anteroom_store::testing::HungDisk;
use anteroom_store::{
    AdmitRequest, EventId, MemberState, QueueStore, StoreError, Touch, UnavailableKind,
};

static OPENS_AT_US: LazyLock<i64> = LazyLock::new(|| system_clock_us() - 60_000_000);

fn scoring() -> JoinScoring {
    JoinScoring {
        opens_at_us: *OPENS_AT_US,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

const TIMEOUT: Duration = Duration::from_millis(300);

fn timed_out(r: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match r {
        Err(e) => assert_eq!(
            e.unavailable_kind(),
            Some(UnavailableKind::TimedOut),
            "{what}: {e:?}"
        ),
        Ok(v) => panic!("{what} answered {v:?} while the disk hangs"),
    }
}

/// A call that met the hang was answered after the store's timeout, and
/// not much later.
fn waited_the_timeout(waited: Duration, what: &str) {
    assert!(waited >= TIMEOUT, "answered before the timeout: {waited:?}");
    assert!(
        waited < TIMEOUT + Duration::from_millis(700),
        "{what} waited {waited:?} on a hung disk"
    );
}

/// Joins `member` to `ev` until the store takes it, within 5 s of `since`
/// (the disk thawed): an event that serves again, or starts afresh.
async fn joins_again(s: &EmbeddedStore, ev: &EventId, member: &str, since: Instant) {
    while let Err(e) = s.join(ev, member, &scoring()).await {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "{ev} never took a join again: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn open(disk: &HungDisk) -> EmbeddedStore {
    let opts = EmbeddedOptions {
        timeout: TIMEOUT,
        ..EmbeddedOptions::default()
    };
    EmbeddedStore::open(&disk.path().join("data"), opts)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_disk_times_calls_out_and_the_event_serves_again_when_it_answers() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("hung").unwrap();
    let acked: Vec<String> = (0..20).map(|i| format!("acked-{i}")).collect();
    let s = open(&disk).await;
    for m in &acked {
        s.join(&ev, m, &scoring()).await.unwrap();
    }
    s.ping(&ev).await.unwrap();
    let (waited, refused_in) = {
        let frozen = disk.freeze().unwrap();
        // A join whose commit meets the hang waits the timeout, no longer.
        let t = Instant::now();
        timed_out(s.join(&ev, "in-flight", &scoring()).await, "a join");
        let waited = t.elapsed();
        waited_the_timeout(waited, "a join");
        // The ping says so once the write has been held past the timeout
        // (it may be a moment after the join's own timer).
        let deadline = Instant::now() + Duration::from_secs(2);
        while s.ping(&ev).await.is_ok() {
            assert!(Instant::now() < deadline, "the ping never saw the hang");
        }
        timed_out(s.ping(&ev).await, "the ping");
        // Every durable call is refused at once now, not queued behind it.
        let t = Instant::now();
        timed_out(s.join(&ev, "late", &scoring()).await, "a later join");
        timed_out(s.release(&ev, &acked[0]).await, "a release");
        let refused_in = t.elapsed();
        assert!(
            refused_in < Duration::from_millis(100),
            "refusals took {refused_in:?}"
        );
        // Memory still answers a poll.
        let t = Instant::now();
        let st = s.status(&ev, &acked[3], Touch::Peek).await.unwrap();
        assert!(matches!(st, MemberState::Waiting { rank: 3, .. }), "{st:?}");
        assert!(t.elapsed() < Duration::from_millis(100));
        frozen.thaw();
        (waited, refused_in)
    };
    // Once the disk has finished the write it held, the event serves.
    let thawed = Instant::now();
    while s.ping(&ev).await.is_err() {
        assert!(
            thawed.elapsed() < Duration::from_secs(5),
            "the event never served again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let back_in = thawed.elapsed();
    s.join(&ev, "after", &scoring()).await.unwrap();
    drop(s);
    // Every acknowledged join is on disk.
    let s = open(&disk).await;
    for (i, m) in acked.iter().enumerate() {
        match s.status(&ev, m, Touch::Peek).await.unwrap() {
            MemberState::Waiting { rank, .. } => assert_eq!(rank, i as u64, "{m}"),
            other => panic!("{m} was acknowledged but is {other:?}"),
        }
    }
    assert!(matches!(
        s.status(&ev, "after", Touch::Peek).await.unwrap(),
        MemberState::Waiting { .. }
    ));
    println!(
        "hung disk: a join answered after {waited:?}, later calls refused in {refused_in:?}, \
         serving again {back_in:?} after the thaw"
    );
}

/// The meta file (admin states, stored configs, the audit trail) sits on
/// the same disk: an operator's pause that meets the hang is answered
/// unavailable after the store's timeout, later meta calls at once, and
/// once the disk answers the pause it held is in force on the node and in
/// the file alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_disk_times_the_meta_files_calls_out_and_a_late_pause_still_holds() {
    use anteroom_core::phase::AdminState;
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("meta").unwrap();
    let s = open(&disk).await;
    s.join(&ev, "first", &scoring()).await.unwrap();
    s.append_audit(&ev, "{\"action\":\"before\"}")
        .await
        .unwrap();
    let (waited, refused_in) = {
        let frozen = disk.freeze().unwrap();
        let t = Instant::now();
        timed_out(s.set_admin_state(&ev, AdminState::Paused).await, "a pause");
        let waited = t.elapsed();
        waited_the_timeout(waited, "a pause");
        // Refused at once while the disk holds the write, reads included
        // (they wait on the same file), not parked behind it.
        let t = Instant::now();
        timed_out(
            s.append_audit(&ev, "{\"action\":\"during\"}").await,
            "an audit append",
        );
        timed_out(s.audit(&ev, 10).await, "an audit read");
        timed_out(s.put_event_config(&ev, "{}").await, "a config write");
        let refused_in = t.elapsed();
        assert!(
            refused_in < Duration::from_millis(100),
            "refusals took {refused_in:?}"
        );
        frozen.thaw();
        (waited, refused_in)
    };
    // The pause the disk held lands, and the node's memory follows it.
    let thawed = Instant::now();
    while s.admin_state(&ev).await.unwrap() != AdminState::Paused {
        assert!(
            thawed.elapsed() < Duration::from_secs(5),
            "the held pause never took effect"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let in_force = thawed.elapsed();
    // In the running event too: the front waiter is not admitted.
    let admit = AdmitRequest {
        max: 1,
        max_active: 10,
        nonces: vec![[1; 16]],
        token_ttl_us: 60_000_000,
    };
    assert!(
        s.admit(&ev, &admit).await.unwrap().is_empty(),
        "admitted while paused"
    );
    s.append_audit(&ev, "{\"action\":\"after\"}").await.unwrap();
    assert_eq!(s.audit(&ev, 10).await.unwrap().len(), 2);
    drop(s);
    let s = open(&disk).await;
    assert_eq!(s.admin_state(&ev).await.unwrap(), AdminState::Paused);
    println!(
        "hung disk, meta file: a pause answered after {waited:?}, later calls refused in \
         {refused_in:?}, the held pause in force {in_force:?} after the thaw"
    );
}

/// An event's first call opens (here creates) its file: on a hung disk
/// that never ends. The call is answered unavailable after the store's
/// timeout and a second at once, while a running event keeps serving
/// durable calls (no lock of the store is held by the start); once the
/// disk answers, the new event serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_events_first_call_on_a_hung_disk_is_answered_in_time() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let running = EventId::new("running").unwrap();
    let new = EventId::new("new").unwrap();
    let s = open(&disk).await;
    s.join(&running, "first", &scoring()).await.unwrap();
    let (waited, again_in) = {
        let frozen = disk.freeze().unwrap();
        let t = Instant::now();
        timed_out(
            s.join(&new, "a", &scoring()).await,
            "a new event's first join",
        );
        let waited = t.elapsed();
        waited_the_timeout(waited, "a new event's first join");
        let t = Instant::now();
        timed_out(s.status(&new, "a", Touch::Peek).await, "a second call");
        let again_in = t.elapsed();
        assert!(
            again_in < Duration::from_millis(100),
            "a second call took {again_in:?}"
        );
        // The running event still answers from memory.
        let st = s.status(&running, "first", Touch::Peek).await.unwrap();
        assert!(matches!(st, MemberState::Waiting { rank: 0, .. }), "{st:?}");
        frozen.thaw();
        (waited, again_in)
    };
    let thawed = Instant::now();
    joins_again(&s, &new, "a", thawed).await;
    let serving_in = thawed.elapsed();
    assert!(matches!(
        s.status(&new, "a", Touch::Peek).await.unwrap(),
        MemberState::Waiting { rank: 0, .. }
    ));
    println!(
        "hung disk, new event: its first call answered after {waited:?}, a second in \
         {again_in:?}, serving {serving_in:?} after the thaw"
    );
}

/// While a new event's first start waits on a hung disk, its first call
/// holds no thread: on a runtime of one thread (one event loop) another
/// event's poll is answered at once, not after the first call's timeout.
#[tokio::test(flavor = "current_thread")]
async fn a_new_events_first_call_on_a_hung_disk_holds_no_event_loop() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let running = EventId::new("running").unwrap();
    let new = EventId::new("new").unwrap();
    let s = open(&disk).await;
    s.join(&running, "first", &scoring()).await.unwrap();
    let frozen = disk.freeze().unwrap();
    let t = Instant::now();
    let first = {
        let (s, new) = (s.clone(), new.clone());
        tokio::spawn(async move { s.join(&new, "a", &scoring()).await })
    };
    // The spawned call runs first, up to its wait for the start (a join
    // reaches it in its first poll: nothing before it awaits).
    tokio::task::yield_now().await;
    let st = s.status(&running, "first", Touch::Peek).await.unwrap();
    let polled_in = t.elapsed();
    assert!(matches!(st, MemberState::Waiting { rank: 0, .. }), "{st:?}");
    // Held, the loop would answer it after the first call's 300 ms.
    assert!(
        polled_in < Duration::from_millis(200),
        "a poll on the loop of a starting event's call waited {polled_in:?}"
    );
    timed_out(first.await.unwrap(), "a new event's first join");
    waited_the_timeout(t.elapsed(), "a new event's first join");
    frozen.thaw();
    // The start ends before the mount goes.
    let thawed = Instant::now();
    joins_again(&s, &new, "a", thawed).await;
}

/// A deletion of an event whose first start the disk holds is marked at
/// once and ends once the disk answers; the id then starts afresh, and what
/// it acknowledges survives a reopen. (Whether a start published after the
/// deletion removed its files, serving from unlinked ones, depends on the
/// order the thawed disk finishes the two in: this checks the end state,
/// not that order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_during_a_hung_first_start_leaves_no_stale_event() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("gone").unwrap();
    let s = open(&disk).await;
    let frozen = disk.freeze().unwrap();
    timed_out(s.join(&ev, "before", &scoring()).await, "a first join");
    let deleting = {
        let s = s.clone();
        let ev = ev.clone();
        tokio::spawn(async move { s.delete_event(&ev).await })
    };
    // The deletion has marked the event: calls are refused, not started.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match s.join(&ev, "during", &scoring()).await {
            Err(e) if e.unavailable_kind() == Some(UnavailableKind::Stopped) => break,
            other => assert!(
                Instant::now() < deadline,
                "not refused as deleting: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    frozen.thaw();
    let thawed = Instant::now();
    // The deletion ends once the disk answers; its last step, the meta
    // file's write, may meet the disk still catching up (the store's
    // timeout is short here): then it is made again.
    let mut deleted = tokio::time::timeout(Duration::from_secs(10), deleting)
        .await
        .expect("the deletion never ended")
        .unwrap();
    while let Err(e) = deleted {
        assert!(
            thawed.elapsed() < Duration::from_secs(5),
            "the deletion failed: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        deleted = s.delete_event(&ev).await;
    }
    // The id starts afresh, within the store's timeout once the disk is
    // quick again.
    joins_again(&s, &ev, "after", thawed).await;
    assert!(matches!(
        s.status(&ev, "before", Touch::Peek).await.unwrap(),
        MemberState::None
    ));
    drop(s);
    let s = open(&disk).await;
    match s.status(&ev, "after", Touch::Peek).await.unwrap() {
        MemberState::Waiting { rank: 0, .. } => {}
        other => panic!("an acknowledged join after the deletion is {other:?}"),
    }
}

/// An event's deletion whose actor the disk holds in a write is answered
/// unavailable after the store's timeout, not when the disk answers (an
/// operator's `DELETE` held so would hold every later admin change of the
/// node); it goes on, a second deletion meanwhile is refused at once, and
/// once the disk answers it ends by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_on_a_hung_disk_is_answered_in_time_and_ends_when_the_disk_answers() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("doomed").unwrap();
    let s = open(&disk).await;
    s.join(&ev, "before", &scoring()).await.unwrap();
    let frozen = disk.freeze().unwrap();
    // The actor is held in a write: its stop waits for the disk.
    timed_out(s.join(&ev, "held", &scoring()).await, "a join");
    let t = Instant::now();
    timed_out(s.delete_event(&ev).await, "a deletion");
    let answered = t.elapsed();
    waited_the_timeout(answered, "a deletion");
    let t = Instant::now();
    timed_out(s.delete_event(&ev).await, "a second deletion");
    let again = t.elapsed();
    assert!(
        again < Duration::from_millis(100),
        "a deletion under way kept a second one {again:?}"
    );
    // The event is marked deleting meanwhile: its calls are refused, it is
    // not started again from its files about to go.
    match s.join(&ev, "during", &scoring()).await {
        Err(e) if e.unavailable_kind() == Some(UnavailableKind::Stopped) => {}
        other => panic!("a call during the deletion: {other:?}"),
    }
    frozen.thaw();
    let thawed = Instant::now();
    // The deletion ends by itself once the disk answers: the event starts
    // afresh, without the visitors it had.
    joins_again(&s, &ev, "after", thawed).await;
    let ended_in = thawed.elapsed();
    for gone in ["before", "held"] {
        let state = s.status(&ev, gone, Touch::Peek).await.unwrap();
        assert!(
            matches!(state, MemberState::None),
            "{gone} outlived the deletion: {state:?}"
        );
    }
    // The deletion let go of the store before it let the event start: the
    // directory opens again at once.
    drop(s);
    let s = open(&disk).await;
    for gone in ["before", "held"] {
        let state = s.status(&ev, gone, Touch::Peek).await.unwrap();
        assert!(
            matches!(state, MemberState::None),
            "{gone} came back after a reopen: {state:?}"
        );
    }
    match s.status(&ev, "after", Touch::Peek).await.unwrap() {
        MemberState::Waiting { rank: 0, .. } => {}
        other => panic!("an acknowledged join after the deletion is {other:?}"),
    }
    println!(
        "hung disk: a deletion answered after {answered:?}, a second one refused in {again:?}, \
         the deletion ended {ended_in:?} after the thaw"
    );
}

/// A store whose events' files sit on the hung disk and whose meta file
/// does not (an `events` directory on a volume of its own): the meta file
/// answers while an event's deletion waits for its disk.
async fn open_events_on(disk: &HungDisk, meta_dir: &std::path::Path) -> EmbeddedStore {
    let opts = EmbeddedOptions {
        timeout: TIMEOUT,
        ..EmbeddedOptions::default()
    };
    let data = meta_dir.join("data");
    if !data.exists() {
        drop(EmbeddedStore::open(&data, opts.clone()).await.unwrap());
        std::fs::remove_dir(data.join("events")).unwrap();
        let events = disk.path().join("events");
        std::fs::create_dir(&events).unwrap();
        std::os::unix::fs::symlink(&events, data.join("events")).unwrap();
    }
    EmbeddedStore::open(&data, opts).await.unwrap()
}

/// While a deletion answered unavailable goes on, the event's admin state,
/// stored config and anchor are not written: the deletion's last step would
/// wipe them after they were acknowledged (a close answered, then undone,
/// and the event admitting again). Once it has ended they are written and
/// stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_being_deleted_takes_no_admin_change_its_deletion_would_wipe() {
    use anteroom_core::phase::AdminState;
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let meta_dir = tempfile::tempdir().unwrap();
    let ev = EventId::new("doomed").unwrap();
    let s = open_events_on(&disk, meta_dir.path()).await;
    s.join(&ev, "before", &scoring()).await.unwrap();
    s.put_event_config(&ev, "{\"v\":1}").await.unwrap();
    s.set_admin_state(&ev, AdminState::Closed).await.unwrap();
    let frozen = disk.freeze().unwrap();
    timed_out(s.join(&ev, "held", &scoring()).await, "a join");
    timed_out(s.delete_event(&ev).await, "a deletion");
    // The meta file answers; the writes the deletion would wipe are refused.
    fn refused<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
        match r {
            Err(e) if e.unavailable_kind() == Some(UnavailableKind::Stopped) => {}
            other => panic!("{what} during the deletion: {other:?}"),
        }
    }
    // So is the state about to go: a close of an event read as closed
    // would be answered done without a write, then undone.
    refused(s.admin_state(&ev).await, "an admin state read");
    refused(
        s.set_admin_state_if(&ev, AdminState::Closed, AdminState::Closed)
            .await,
        "a close of a closed event",
    );
    refused(s.set_admin_state(&ev, AdminState::Closed).await, "a close");
    refused(s.put_event_config(&ev, "{\"v\":2}").await, "a config write");
    refused(
        s.replace_event_config(&ev, u64::MAX, "{\"v\":3}").await,
        "a config replacement",
    );
    // Other events' admin changes and the audit trail are not held up.
    let other = EventId::new("other").unwrap();
    s.set_admin_state(&other, AdminState::Paused).await.unwrap();
    s.append_audit(&ev, "{\"action\":\"delete\"}")
        .await
        .unwrap();
    frozen.thaw();
    let thawed = Instant::now();
    let after = loop {
        match s.admin_state(&ev).await {
            Ok(state) => break state,
            Err(e) => assert!(
                thawed.elapsed() < Duration::from_secs(5),
                "the deletion never ended: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(after, AdminState::Running, "the deletion kept the close");
    s.set_admin_state(&ev, AdminState::Closed).await.unwrap();
    s.put_event_config(&ev, "{\"v\":4}").await.unwrap();
    let stored = |s: &EmbeddedStore| {
        let s = s.clone();
        let ev = ev.clone();
        async move {
            let set = s.event_config_set().await.unwrap();
            (
                s.admin_state(&ev).await.unwrap(),
                set.configs
                    .iter()
                    .find(|(id, _)| *id == ev)
                    .map(|(_, json)| json.clone()),
            )
        }
    };
    let want = (AdminState::Closed, Some("{\"v\":4}".to_owned()));
    assert_eq!(stored(&s).await, want, "undone by the deletion's end");
    assert_eq!(s.audit(&ev, 10).await.unwrap().len(), 1);
    drop(s);
    let s = open_events_on(&disk, meta_dir.path()).await;
    assert_eq!(stored(&s).await, want, "after a reopen");
    assert_eq!(s.admin_state(&other).await.unwrap(), AdminState::Paused);
}

/// The stopping actor's last checkpoint (what the log holds, written into
/// the event's file) and the file's close are writes a deletion waits for:
/// a disk that holds them answers the deletion unavailable in time, as one
/// that holds a commit does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_whose_last_checkpoint_the_disk_holds_is_answered_in_time() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("doomed").unwrap();
    let s = open(&disk).await;
    // The first join may start a checkpoint; the second, right after, is
    // left in the log for the last one.
    s.join(&ev, "a", &scoring()).await.unwrap();
    s.join(&ev, "b", &scoring()).await.unwrap();
    let frozen = disk.freeze().unwrap();
    let t = Instant::now();
    timed_out(s.delete_event(&ev).await, "a deletion");
    waited_the_timeout(t.elapsed(), "a deletion");
    frozen.thaw();
    let thawed = Instant::now();
    joins_again(&s, &ev, "after", thawed).await;
    assert!(matches!(
        s.status(&ev, "a", Touch::Peek).await.unwrap(),
        MemberState::None
    ));
}

/// A call whose commit the disk holds when a deletion takes its event away
/// is answered in time: its event's stamp went with it, and the call is
/// given up at its first late look rather than left waiting for the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_its_event_is_deleted_is_answered_in_time() {
    let disk = HungDisk::mount().expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
    let ev = EventId::new("doomed").unwrap();
    let s = open(&disk).await;
    s.join(&ev, "before", &scoring()).await.unwrap();
    let frozen = disk.freeze().unwrap();
    let t = Instant::now();
    let held = {
        let (s, ev) = (s.clone(), ev.clone());
        tokio::spawn(async move { s.join(&ev, "held", &scoring()).await })
    };
    // Let the join reach the committer first (were the deletion first, the
    // join would be refused at once as deleting, and pass all the same).
    tokio::time::sleep(Duration::from_millis(50)).await;
    timed_out(s.delete_event(&ev).await, "a deletion");
    let answer = tokio::time::timeout(Duration::from_secs(3), held)
        .await
        .expect("the join in flight waited for the disk")
        .unwrap();
    let waited = t.elapsed();
    assert!(answer.is_err(), "a join answered {answer:?} on a hung disk");
    assert!(
        waited < TIMEOUT + Duration::from_millis(700),
        "the join in flight waited {waited:?}"
    );
    frozen.thaw();
}
