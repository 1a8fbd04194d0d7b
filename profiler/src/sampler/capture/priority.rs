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
pub(crate) fn set_realtime(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads `param` and changes only this thread's policy.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) == 0
    }
}

/// Where the reader cannot have real-time priority: make it nicer than the copier (`nice` 10,
/// this thread only), so that the copier, woken while the reader unwinds, takes the CPU from it
/// at once rather than after the scheduler's usual slice.
pub(crate) fn yield_to_copier() {
    // SAFETY: gettid has no arguments; setpriority changes only this thread's nice value.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

/// `struct sched_attr` as `sched_setattr(2)` reads it (its first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Where the copier cannot have real-time priority: ask the scheduler for a short slice (100
/// µs; Linux 6.12 and later honour it for ordinary threads, unprivileged), which lets the copier,
/// when a ring wakes it, take the CPU from a thread that has run longer instead of waiting for
/// that thread's slice to end. Older kernels refuse it, and the copier then keeps the usual slice.
pub(crate) fn short_slice() {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: 100_000,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr reads `attr` (its size given in it) for the calling thread only.
    unsafe {
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0);
    }
}
