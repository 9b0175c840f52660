//! The disk threads (an event's committer and its checkpoints) run under
//! Linux's `SCHED_BATCH` policy.
//!
//! Why: the committer is woken by an event loop that has just handed it a
//! join or a redeem. Under the default policy the woken committer preempts
//! that loop on its own core at once, so a loop in the middle of a burst
//! of requests is switched out for every hand-off, and each batch goes to
//! the disk with whatever little had arrived. A `SCHED_BATCH` thread has
//! the same share of the CPU (the same nice level) but never preempts on
//! waking: it runs when the loop waits for its sockets or on the other
//! core, by which time more of the burst has joined its batch. Fewer
//! switches and fewer `fdatasync`s per request, for a commit that starts
//! a few hundred microseconds later under load (docs/benchmarks.md has
//! the figures). A checkpoint, long and never urgent, is the same kind of
//! work.
//!
//! This holds the workspace's second `unsafe` block (`huge.rs` holds the
//! first): `sched_setscheduler` on the calling thread, with a parameter
//! this function owns. Where the call fails or the policy does not exist,
//! the thread keeps the default policy, which is correct, only slower.
#![allow(unsafe_code)]

/// Puts the calling thread under `SCHED_BATCH` (Linux); nothing elsewhere.
pub(crate) fn apply() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a live, properly
        // initialised struct the kernel only reads.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
}

/// The scheduling policy of thread `tid` of this process as the kernel
/// reports it (`/proc`, field 41 of `stat`), for tests.
#[cfg(all(test, target_os = "linux"))]
fn policy_of(tid: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields are counted after the `)` that ends the thread's name: the
    // third field is the first after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(41 - 3)?.parse().ok()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// This thread's id, as `/proc/self/task` names it.
    fn tid() -> String {
        std::fs::read_link("/proc/thread-self")
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn the_calling_thread_and_only_it_is_put_under_sched_batch() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        // A thread beside it, alive while the other one changes its policy.
        let beside = std::thread::spawn(move || {
            tid_tx.send(tid()).unwrap();
            rx.recv().unwrap();
        });
        let beside_tid = tid_rx.recv().unwrap();
        let on_it = std::thread::spawn(|| {
            super::apply();
            super::policy_of(&tid())
        })
        .join()
        .unwrap();
        assert_eq!(on_it, Some(libc::SCHED_BATCH));
        assert_eq!(super::policy_of(&beside_tid), Some(libc::SCHED_OTHER));
        tx.send(()).unwrap();
        beside.join().unwrap();
    }
}
