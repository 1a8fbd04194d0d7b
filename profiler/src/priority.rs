//! The reader's place on the CPU. A command that makes many threads runnable at once (a burst
//! of 200 short threads on 2 cores) keeps an ordinary-priority hpcrun-rs waiting for the CPU
//! for hundreds of milliseconds: its poll, due every 50 ms, came back after up to 1.2 s, and
//! the per-CPU buffers (about 125 samples of 16 KiB stacks at 2 MiB) overflowed meanwhile
//! (`PERF_RECORD_LOST`). The lowest real-time priority lets the reader run as soon as it is
//! woken; it sleeps in between, so the command loses next to nothing (perf record's
//! `--realtime` does the same on request).

/// The reader's `SCHED_FIFO` priority: the lowest.
pub(crate) const READER: i32 = 1;

/// The ring copier's: one above the reader's, so that a copy (a few microseconds) is never kept
/// waiting by an unwinding reader, ours or another hpcrun-rs's, on a busy machine.
pub(crate) const COPIER: i32 = 2;

/// Give the calling thread (the reader or the copier) `SCHED_FIFO` priority `priority`, not
/// inherited by processes it creates later; false where it is not permitted (an unprivileged
/// user without `RLIMIT_RTPRIO`), and the thread then keeps its ordinary priority.
pub(crate) fn raise_reader(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads `param` and changes only this thread's policy.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) == 0
    }
}
