//! Transparent huge pages for the member table's big arrays.
//!
//! A rank at 10M waiters reads a random bucket and a random slot in arrays of
//! hundreds of megabytes; with 4 KiB pages each read also misses the TLB,
//! and 2 MiB pages cut the rank's tail latency there (the figures of
//! `anteroom-sim engine --waiters 10000000` are in docs/benchmarks.md). Kernels set to
//! `transparent_hugepage=madvise` (Debian and Ubuntu's default) give huge
//! pages only to memory that asks, which is what this does.
//!
//! This is the workspace's one `unsafe` block: `madvise(MADV_HUGEPAGE)` on
//! whole 2 MiB pages inside an allocation this process owns. The advice
//! never changes what the memory holds or who may use it; a kernel without
//! THP answers EINVAL, which is ignored.
#![allow(unsafe_code)]

const HUGE: usize = 2 << 20;

/// Asks for huge pages under the allocation of `v` (its whole capacity).
pub(crate) fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < 2 * HUGE {
        return;
    }
    let start = v.as_ptr() as usize;
    let (first, end) = (start.next_multiple_of(HUGE), (start + bytes) / HUGE * HUGE);
    if first >= end {
        return;
    }
    // SAFETY: [first, end) lies inside `v`'s live allocation and is 2 MiB
    // aligned; MADV_HUGEPAGE is advisory and leaves contents and access
    // rights unchanged, so no Rust reference is affected.
    let _ = unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
}
