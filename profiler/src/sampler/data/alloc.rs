//! Allocation tracking for `hpcrun-rs --data`: the receiving end of the `hpcrun-alloc` shim.
//!
//! The shim (`libhpcrun_alloc.so`, built with the workspace and found beside the running
//! executable) is preloaded into the command. For each block of at least a minimum size it
//! records the call, the block, the return address, `sp` and `bp` at the interposed function's
//! entry and a copy of the caller's stack into a per-thread ring in shared memory, and sends the
//! ring's memfd over a socket pair that [`AllocTracker`] creates and the command inherits.
//! [`AllocTracker::drain`] maps new rings and hands out their records in time order across all
//! rings, on CLOCK_MONOTONIC like the perf samples, so both streams merge by timestamp.
//!
//! Launching with the shim:
//!
//! ```no_run
//! use profiler::alloc::AllocTracker;
//! use profiler::launch;
//!
//! let mut tracker = AllocTracker::new(4096, 8192).expect("shim beside hpcrun-rs");
//! let argv = vec!["./app".into()];
//! let blocked =
//!     launch::spawn_blocked_with(&argv, &tracker.child_env(), &tracker.fds_to_keep()).unwrap();
//! let pid = blocked.release("./app").unwrap();
//! let mut events = Vec::new();
//! // ... poll tracker.poll_fd() with the sample rings; after each wake-up:
//! tracker.drain(u64::MAX, &mut events);
//! ```

use hpcrun_alloc_format as format;

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use crate::sampler::capture::launch::beside_exe;
use format::{
    record_bytes, Message, RecordHeader, RingHeader, ENV_FD, ENV_MIN, ENV_RING, ENV_STACK,
    MAX_STACK_BYTES, MSG_RING, MSG_WAKE, OP_ALLOC, OP_FREE, OP_REALLOC, RECORD_HEADER_BYTES,
    RING_HEADER_BYTES, RING_MAGIC, VERSION,
};

/// File name of the shim library.
const SHIM_NAME: &str = "libhpcrun_alloc.so";

/// A ring marked busy for longer than this belongs to a thread that died inside the shim
/// (its process was killed); it no longer holds back the other rings.
const STALE_BUSY_NS: u64 = 1_000_000_000;

/// What an allocation record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AllocOp {
    /// Block `ptr` of `size` bytes began (malloc, calloc, memalign, posix_memalign,
    /// aligned_alloc, valloc, pvalloc).
    Alloc,
    /// Block `ptr` ended (free).
    Free,
    /// realloc or reallocarray: `old_ptr` ended (if not 0) and `ptr` of `size` bytes began
    /// (if not 0; `realloc(p, 0)` frees `p`).
    Realloc,
}

/// One allocator call of the measured program.
///
/// To unwind it, start in the caller: pc = `ip` (a return address), sp = `sp + 8`, bp = `bp`;
/// `stack` holds the memory from `sp` up (its first 8 bytes are `ip`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocEvent {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// What happened.
    pub op: AllocOp,
    /// CLOCK_MONOTONIC ns when the call entered the shim.
    pub t_entry: u64,
    /// CLOCK_MONOTONIC ns when the allocator returned: the event's time.
    pub t_return: u64,
    /// The block allocated or freed.
    pub ptr: u64,
    /// Bytes requested (0 for a free).
    pub size: u64,
    /// For [`AllocOp::Realloc`], the block passed in (0 for `realloc(NULL, n)`).
    pub old_ptr: u64,
    /// Return address into the caller.
    pub ip: u64,
    /// Stack pointer at the allocator's entry (it points at the return address).
    pub sp: u64,
    /// Frame pointer register at the allocator's entry.
    pub bp: u64,
    /// The caller's stack from `sp` (empty for frees, and where the stack was unknown).
    pub stack: Vec<u8>,
}

/// The measured program's allocation records: the socket its shim announces rings on, and the
/// rings announced so far.
pub struct AllocTracker {
    /// hpcrun-rs's end of the socket pair.
    sock: OwnedFd,
    /// The command's end (close-on-exec here; [`crate::sampler::capture::launch`] keeps it open in the command).
    child: OwnedFd,
    shim: PathBuf,
    min_size: u64,
    stack_bytes: u32,
    ring_bytes: u64,
    rings: Vec<Ring>,
    threads: Vec<(u32, u32)>,
    /// Records lost in rings already let go.
    lost_retired: u64,
}

impl AllocTracker {
    /// Prepare to track blocks of at least `min_size` bytes (0: every block), copying up to
    /// `stack_bytes` of stack per allocation (at most 64 KiB). Fails when the shim is not
    /// beside the current executable, or the socket pair cannot be made.
    pub fn new(min_size: u64, stack_bytes: u32) -> io::Result<Self> {
        Self::with_shim(find_shim()?, min_size, stack_bytes)
    }

    /// [`AllocTracker::new`] with the shim at `shim`.
    fn with_shim(shim: PathBuf, min_size: u64, stack_bytes: u32) -> io::Result<Self> {
        let mut fds = [0i32; 2];
        // SAFETY: socketpair writes two new descriptors into `fds` when it returns 0.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and ours.
        let (sock, child) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let stack_bytes = stack_bytes.min(MAX_STACK_BYTES);
        // Room for 64 records with a full stack copy, at least 1 MiB. Small enough to stay in
        // the cache the writer and the reader share: on mbench a 1 MiB ring costs the program
        // 2.3x, an 8 MiB one 2.8x (cache misses on every record written). A full ring makes the
        // writer wait for the reader (see `poll_fd`).
        let ring_bytes = (64 * record_bytes(stack_bytes))
            .max(1 << 20)
            .next_power_of_two();
        Ok(AllocTracker {
            sock,
            child,
            shim,
            min_size,
            stack_bytes,
            ring_bytes,
            rings: Vec::new(),
            threads: Vec::new(),
            lost_retired: 0,
        })
    }

    /// The variables to add to the command's environment: `LD_PRELOAD` (the shim before any
    /// value hpcrun-rs has) and the shim's settings.
    pub fn child_env(&self) -> Vec<(OsString, OsString)> {
        let mut preload = self.shim.clone().into_os_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
        let number = |n: u64| OsString::from(n.to_string());
        vec![
            ("LD_PRELOAD".into(), preload),
            (ENV_FD.into(), number(self.child.as_raw_fd() as u64)),
            (ENV_MIN.into(), number(self.min_size)),
            (ENV_STACK.into(), number(u64::from(self.stack_bytes))),
            (ENV_RING.into(), number(self.ring_bytes)),
        ]
    }

    /// The descriptors the command must inherit (the shim's end of the socket).
    pub fn fds_to_keep(&self) -> [BorrowedFd<'_>; 1] {
        [self.child.as_fd()]
    }

    /// Readable when the shim has announced a ring or a ring is more than a quarter full: poll it
    /// with the sample rings and [`AllocTracker::drain`] when it fires.
    pub fn poll_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Append to `out` every record stamped (`t_return`) no later than `cutoff_ns`, in time
    /// order across all rings. Records still being written hold back later ones from every
    /// ring, so successive drains are in time order too. `u64::MAX` takes everything written,
    /// ignoring calls that never finished: the last drain, once the command has ended.
    ///
    /// Returns the time up to which every record has now been handed out (`cutoff_ns` or
    /// earlier): merge other streams (perf samples) only up to it to keep one time order.
    pub fn drain(&mut self, cutoff_ns: u64, out: &mut Vec<AllocEvent>) -> u64 {
        self.receive();
        let limit = if cutoff_ns == u64::MAX {
            u64::MAX
        } else {
            cutoff_ns.min(self.unfinished_limit())
        };
        for ring in &mut self.rings {
            ring.snapshot();
        }
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (i, ring) in self.rings.iter_mut().enumerate() {
                if let Some(rec) = ring.peek() {
                    if rec.t_return <= limit && best.is_none_or(|(_, t)| rec.t_return < t) {
                        best = Some((i, rec.t_return));
                    }
                }
            }
            let Some((i, _)) = best else { break };
            out.push(self.rings[i].take());
        }
        let mut lost_retired = 0;
        self.rings.retain_mut(|ring| {
            ring.release();
            let done = ring.finished();
            if done {
                lost_retired += ring.lost();
            }
            !done
        });
        self.lost_retired += lost_retired;
        limit
    }

    /// Records the shim could not deliver: a ring was full, a tracked call came from a signal
    /// handler interrupting the shim, or a ring was found corrupt.
    pub fn lost(&self) -> u64 {
        self.lost_retired + self.rings.iter().map(Ring::lost).sum::<u64>()
    }

    /// The (pid, tid) of every thread that announced a ring, in order of announcement.
    pub fn threads(&self) -> &[(u32, u32)] {
        &self.threads
    }

    /// Map the rings announced since the last call.
    fn receive(&mut self) {
        while let Some((msg, fd)) = receive_one(&self.sock) {
            if msg.kind == MSG_WAKE {
                continue; // the drain that follows answers it
            }
            let Some(fd) = fd.filter(|_| msg.kind == MSG_RING && msg.version == VERSION) else {
                continue;
            };
            if let Some(ring) = Ring::map(fd, msg.data_bytes, msg.pid, msg.tid) {
                self.threads.push((msg.pid, msg.tid));
                self.rings.push(ring);
            }
        }
    }

    /// The latest time up to which every ring's records are known: before the entry of any
    /// call in progress, and no later than now (a call not yet marked stamps its return later).
    fn unfinished_limit(&self) -> u64 {
        let now = monotonic_ns();
        let mut limit = now;
        for ring in &self.rings {
            let busy = ring.header().busy.0.load(Ordering::SeqCst);
            if busy != 0 && now.saturating_sub(busy) < STALE_BUSY_NS {
                limit = limit.min(busy - 1);
            }
        }
        limit
    }
}

/// The shim beside the current executable (or, for cargo's test and example binaries in
/// `deps/` and `examples/`, one directory up).
fn find_shim() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let found = beside_exe(&exe, SHIM_NAME).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "allocation tracking needs {SHIM_NAME} beside {} (build the whole workspace)",
                exe.display()
            ),
        )
    })?;
    // LD_PRELOAD separates entries with spaces and colons.
    if found
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(|b| b" :".contains(b))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} cannot go in LD_PRELOAD (a space or colon in its path)",
                found.display()
            ),
        ));
    }
    Ok(found.clone())
}

/// One message from the socket, with the descriptor it carried; None when none is waiting.
fn receive_one(sock: &OwnedFd) -> Option<(Message, Option<OwnedFd>)> {
    let mut msg = Message::default();
    let mut iov = libc::iovec {
        iov_base: (&raw mut msg).cast(),
        iov_len: size_of::<Message>(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all-zero is "no name, no control".
    let mut hdr: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = size_of_val(&control);
    let n = loop {
        // SAFETY: `hdr` points at live buffers for the duration of the call.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut hdr,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n <= 0 {
        return None;
    }
    let mut fd = None;
    // SAFETY: the CMSG_* walk stays within `msg_controllen` bytes the kernel filled in; an
    // SCM_RIGHTS payload holds descriptors now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<i32>();
                let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / size_of::<i32>();
                for k in 0..count {
                    let owned = OwnedFd::from_raw_fd(data.add(k).read_unaligned());
                    fd.get_or_insert(owned);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
        }
    }
    let whole = n as usize == size_of::<Message>();
    Some((if whole { msg } else { Message::default() }, fd))
}

/// CLOCK_MONOTONIC in ns, the clock the perf samples (and the watchpoints' traps) carry.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One thread's ring as the reader sees it.
struct Ring {
    map: memmap2::MmapRaw,
    pid: u32,
    mask: u64,
    /// Position of the next record to read.
    pos: u64,
    /// The writer's position when last looked at.
    head: u64,
    /// The record at `pos`, once read.
    peeked: Option<RecordHeader>,
    /// Found corrupt: read no further.
    broken: bool,
}

impl Ring {
    /// Map a ring announced with `data_bytes` of data; None if it is not a valid ring.
    fn map(fd: OwnedFd, data_bytes: u64, pid: u32, tid: u32) -> Option<Ring> {
        if !data_bytes.is_power_of_two() || data_bytes > 1 << 40 {
            return None;
        }
        let file = File::from(fd);
        let map = memmap2::MmapOptions::new()
            .len(RING_HEADER_BYTES + data_bytes as usize)
            .map_raw(&file)
            .ok()?;
        let ring = Ring {
            map,
            pid,
            mask: data_bytes - 1,
            pos: 0,
            head: 0,
            peeked: None,
            broken: false,
        };
        let h = ring.header();
        let valid = h.magic == RING_MAGIC
            && h.version == VERSION
            && h.record_header_bytes as usize == RECORD_HEADER_BYTES
            && h.data_bytes == data_bytes
            && h.tid == tid;
        let mut ring = valid.then_some(ring)?;
        ring.pos = ring.header().tail.0.load(Ordering::Acquire);
        ring.head = ring.pos;
        Some(ring)
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: the mapping starts with a RingHeader (checked in `map`) and lives as long as
        // `self`; the writer changes only its atomic fields after announcing it.
        unsafe { &*self.map.as_ptr().cast::<RingHeader>() }
    }

    /// Take in what the writer has published.
    fn snapshot(&mut self) {
        let head = self.header().head.0.load(Ordering::Acquire);
        if head.wrapping_sub(self.pos) > self.mask + 1 {
            self.broken = true;
        } else {
            self.head = head;
        }
    }

    /// The next record's header, if one is published (and the ring is sound).
    fn peek(&mut self) -> Option<RecordHeader> {
        if self.peeked.is_none() && !self.broken && self.head != self.pos {
            let mut rec = RecordHeader::default();
            // SAFETY: RecordHeader is plain data of RECORD_HEADER_BYTES.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut((&raw mut rec).cast::<u8>(), RECORD_HEADER_BYTES)
            };
            self.copy_out(self.pos, bytes);
            let sound = matches!(rec.op, OP_ALLOC | OP_FREE | OP_REALLOC)
                && rec.stack_len <= MAX_STACK_BYTES
                && record_bytes(rec.stack_len) <= self.head - self.pos;
            self.broken = !sound;
            self.peeked = sound.then_some(rec);
        }
        self.peeked
    }

    /// The record [`Ring::peek`] returned, as an event; moves past it.
    fn take(&mut self) -> AllocEvent {
        let rec = self.peeked.take().expect("take after a successful peek");
        let mut stack = vec![0u8; rec.stack_len as usize];
        self.copy_out(self.pos + RECORD_HEADER_BYTES as u64, &mut stack);
        self.pos += record_bytes(rec.stack_len);
        AllocEvent {
            pid: self.pid,
            tid: rec.tid,
            op: match rec.op {
                OP_ALLOC => AllocOp::Alloc,
                OP_FREE => AllocOp::Free,
                _ => AllocOp::Realloc,
            },
            t_entry: rec.t_entry,
            t_return: rec.t_return,
            ptr: rec.ptr,
            size: rec.size,
            old_ptr: rec.old_ptr,
            ip: rec.ip,
            sp: rec.sp,
            bp: rec.bp,
            stack,
        }
    }

    /// Give the space read back to the writer and answer its wake-up.
    fn release(&self) {
        let h = self.header();
        h.tail.0.store(self.pos, Ordering::Release);
        h.wake.0.store(0, Ordering::Relaxed);
    }

    /// Whether nothing more will come: the thread exited and all was read, or it is corrupt.
    fn finished(&self) -> bool {
        self.broken
            || (self.header().closed.0.load(Ordering::Acquire) == 1
                && self.header().head.0.load(Ordering::Acquire) == self.pos)
    }

    /// Records lost in this ring (one more if it turned out corrupt).
    fn lost(&self) -> u64 {
        self.header().lost.0.load(Ordering::Relaxed) + u64::from(self.broken)
    }

    /// Copy `out.len()` bytes from ring position `pos`, wrapping at the end of the data.
    fn copy_out(&self, pos: u64, out: &mut [u8]) {
        let size = (self.mask + 1) as usize;
        let at = (pos & self.mask) as usize;
        let first = out.len().min(size - at);
        // SAFETY: the data area is `size` bytes after the header, inside the mapping; both
        // pieces stay within it (`out.len()` ≤ a record, which is smaller than the data area).
        unsafe {
            let data = self.map.as_ptr().add(RING_HEADER_BYTES);
            std::ptr::copy_nonoverlapping(data.add(at), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

#[cfg(test)]
#[path = "alloc_tests.rs"]
mod tests;
