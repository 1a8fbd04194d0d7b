//! The wire format between the allocation shim (crate `hpcrun-alloc`, running inside the
//! measured program) and `hpcrun-rs`, which reads it. Both depend on this crate (std and libc
//! only, so the shim stays small), so the two ends cannot disagree on a layout. The OpenMP tool's
//! records (crate `hpcrun-ompt`) are in [`ompt`].
//!
//! - `hpcrun-rs` creates a `SOCK_SEQPACKET` socket pair and passes one end to the command by
//!   number in [`ENV_FD`] (inherited across `fork` and `exec`), with [`ENV_MIN`], [`ENV_STACK`]
//!   and [`ENV_RING`].
//! - Each thread of each process, at its first tracked call, creates a ring (a memfd of
//!   [`RING_HEADER_BYTES`] + data bytes, a power of two) and sends its descriptor with a
//!   [`Message`] of kind [`MSG_RING`]; when a ring becomes more than a quarter full (or full) the writer sends
//!   one [`MSG_WAKE`] (until the reader clears [`RingHeader::wake`]), so the reader need not poll
//!   on a timer.
//! - A record is a [`RecordHeader`] followed by `stack_len` bytes of stack, padded to 8 bytes;
//!   records may wrap around the end of the data area. Positions (`head`, `tail`) only grow.

pub mod ompt;

/// CLOCK_MONOTONIC in ns: the clock hpcrun-rs's perf events use (vDSO, no system call), for
/// the shims' records.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Descriptor number of the shim's end of the socket pair.
pub const ENV_FD: &str = "HPCRUN_ALLOC_FD";
/// Smallest block size recorded, in bytes (0 records every block).
pub const ENV_MIN: &str = "HPCRUN_ALLOC_MIN";
/// Bytes of stack copied from `sp` at each allocation.
pub const ENV_STACK: &str = "HPCRUN_ALLOC_STACK";
/// Bytes of record space in each ring (a power of two).
pub const ENV_RING: &str = "HPCRUN_ALLOC_RING";

/// `RingHeader::magic`: "HPCALLOC".
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"HPCALLOC");
/// Format version, in the ring header and in each message.
pub const VERSION: u32 = 1;
/// Bytes before the data area of a ring (one page, so the data area is page aligned).
pub const RING_HEADER_BYTES: usize = 4096;
/// The most stack bytes one record may carry.
pub const MAX_STACK_BYTES: u32 = 64 * 1024;

/// Record op: a block came into being (malloc, calloc, memalign, posix_memalign,
/// aligned_alloc, valloc, pvalloc).
pub const OP_ALLOC: u32 = 1;
/// Record op: a block ended (free).
pub const OP_FREE: u32 = 2;
/// Record op: realloc or reallocarray: `old_ptr` ended (if not 0) and `ptr` began (if not 0).
pub const OP_REALLOC: u32 = 3;

/// Message kind: a new ring; its memfd comes with the message (`SCM_RIGHTS`).
pub const MSG_RING: u32 = 1;
/// Message kind: some ring is more than a quarter full.
pub const MSG_WAKE: u32 = 2;

/// One datagram on the socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Message {
    /// [`MSG_RING`] or [`MSG_WAKE`].
    pub kind: u32,
    /// [`VERSION`].
    pub version: u32,
    /// Process of the ring's thread.
    pub pid: u32,
    /// The ring's thread.
    pub tid: u32,
    /// Data bytes of the ring (after the header).
    pub data_bytes: u64,
}

/// One cache line, so writer and reader fields do not share one.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Line<T>(pub T);

/// The start of every ring.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingHeader {
    /// [`RING_MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<RecordHeader>()`.
    pub record_header_bytes: u32,
    /// Bytes of the data area (a power of two).
    pub data_bytes: u64,
    /// Process of the writing thread.
    pub pid: u32,
    /// The writing thread.
    pub tid: u32,
    /// Position after the last published record (writer).
    pub head: Line<AtomicU64>,
    /// Position of the first unread record (reader).
    pub tail: Line<AtomicU64>,
    /// Records dropped: ring full, or a tracked call made while the thread was already inside
    /// the shim (a signal handler's).
    pub lost: Line<AtomicU64>,
    /// While a tracked call is in progress its entry time, else 0: a reader must not hand out
    /// records stamped after it, from any ring, until it is published (global time order).
    pub busy: Line<AtomicU64>,
    /// 1 once the writer has sent a [`MSG_WAKE`] the reader has not yet answered.
    pub wake: Line<AtomicU32>,
    /// 1 once the thread has exited: no more records will come.
    pub closed: Line<AtomicU32>,
}

/// The fixed part of a record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`OP_ALLOC`], [`OP_FREE`] or [`OP_REALLOC`].
    pub op: u32,
    /// The calling thread.
    pub tid: u32,
    /// Bytes of stack that follow the header (before padding).
    pub stack_len: u32,
    /// Zero.
    pub reserved: u32,
    /// CLOCK_MONOTONIC ns when the call entered the shim.
    pub t_entry: u64,
    /// CLOCK_MONOTONIC ns when the allocator returned; records of one ring are in its order.
    pub t_return: u64,
    /// The block allocated (or freed, for [`OP_FREE`]).
    pub ptr: u64,
    /// Bytes requested (0 for a free).
    pub size: u64,
    /// For [`OP_REALLOC`], the block passed in.
    pub old_ptr: u64,
    /// Return address into the caller.
    pub ip: u64,
    /// Stack pointer at the interposed function's entry: it points at the return address, and
    /// the stack copy starts there.
    pub sp: u64,
    /// Frame pointer register at entry.
    pub bp: u64,
}

/// Bytes of a [`RecordHeader`].
pub const RECORD_HEADER_BYTES: usize = std::mem::size_of::<RecordHeader>();

/// Bytes a record with `stack_len` bytes of stack takes in a ring.
pub const fn record_bytes(stack_len: u32) -> u64 {
    (RECORD_HEADER_BYTES as u64) + ((stack_len as u64 + 7) & !7)
}
