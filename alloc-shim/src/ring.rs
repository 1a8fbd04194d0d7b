//! Per-thread state and the writing end of a thread's ring.
//!
//! Each thread's state is a `const`-initialised thread-local of plain `Copy` data (no
//! destructor, no allocation). A thread's ring is created at its first tracked call, announced
//! to `hpcrun-rs` over the socket, and closed by a `pthread_key` destructor when the thread
//! exits; a fork's child forgets the parent's ring and makes its own.

use std::cell::Cell;
use std::ffi::c_void;
use std::mem::{size_of, MaybeUninit};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use crate::format::{
    record_bytes, Message, RecordHeader, RingHeader, MSG_RING, MSG_WAKE, RECORD_HEADER_BYTES,
    RING_HEADER_BYTES, RING_MAGIC, VERSION,
};
use crate::{RING_BYTES, SOCK};
use hpcrun_alloc_format::monotonic_ns;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    /// No ring yet: the next tracked call makes one.
    Fresh,
    /// Recording into `header`.
    Active,
    /// Not recording (no socket, the ring could not be made, or the thread is exiting).
    Off,
}

/// A thread's ring as its writer sees it.
#[derive(Clone, Copy)]
pub(crate) struct Writer {
    status: Status,
    header: *mut RingHeader,
    data: *mut u8,
    mask: u64,
    tid: u32,
    /// The thread's stack: `sp` in `[stack_lo, stack_hi)` is copied up to `stack_hi`.
    stack_lo: usize,
    stack_hi: usize,
}

impl Writer {
    const FRESH: Writer = Writer {
        status: Status::Fresh,
        header: null_mut(),
        data: null_mut(),
        mask: 0,
        tid: 0,
        stack_lo: 0,
        stack_hi: 0,
    };
    const OFF: Writer = Writer {
        status: Status::Off,
        ..Writer::FRESH
    };
}

thread_local! {
    static WRITER: Cell<Writer> = const { Cell::new(Writer::FRESH) };
    /// Set while the thread is inside the shim's recording code.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The reader's position when this thread last gave up waiting for room (else u64::MAX).
    static STALLED_AT: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// How long a writer waits for the reader to make room in a full ring before dropping records.
const FULL_WAIT_NS: u64 = 200_000_000;
/// For how much of that it yields the CPU (to the reader, when they share one) before sleeping.
const YIELD_NS: u64 = 2_000_000;

/// The key whose destructor closes an exiting thread's ring.
static mut EXIT_KEY: libc::pthread_key_t = 0;

/// Register the fork and thread-exit handlers; false if either cannot be.
pub(crate) fn install() -> bool {
    // SAFETY: called once from the constructor, before any thread reads EXIT_KEY; both calls
    // take plain function pointers.
    unsafe {
        libc::pthread_key_create(&raw mut EXIT_KEY, Some(thread_exit)) == 0
            && libc::pthread_atfork(None, None, Some(after_fork_child)) == 0
    }
}

/// In a fork's child: the parent's ring is not ours; make a new one on the next tracked call.
extern "C" fn after_fork_child() {
    let w = WRITER.get();
    if w.status == Status::Active {
        unmap(w.header);
    }
    WRITER.set(Writer::FRESH);
    INSIDE.set(false);
    STALLED_AT.set(u64::MAX);
}

/// At thread exit: mark the ring closed and let it go; later calls of this thread pass through.
extern "C" fn thread_exit(_: *mut c_void) {
    let w = WRITER.get();
    if w.status == Status::Active {
        // SAFETY: an Active writer's header is our live mapping.
        unsafe { (*w.header).closed.0.store(1, Ordering::Release) };
        unmap(w.header);
    }
    WRITER.set(Writer::OFF);
}

/// Enter the recording code for one tracked call: the thread's writer, or None when the call
/// must pass through (already inside the shim: a nested call, counted as lost when a ring
/// exists; or recording is off for this thread). A `Some` must be ended with [`leave`].
pub(crate) fn enter() -> Option<Writer> {
    if INSIDE.replace(true) {
        let w = WRITER.get();
        if w.status == Status::Active {
            // SAFETY: an Active writer's header is our live mapping.
            unsafe { (*w.header).lost.0.fetch_add(1, Ordering::Relaxed) };
        }
        return None;
    }
    let mut w = WRITER.get();
    if w.status == Status::Fresh {
        w = open();
        WRITER.set(w);
    }
    if w.status == Status::Active {
        Some(w)
    } else {
        INSIDE.set(false);
        None
    }
}

/// Leave the recording code (see [`enter`]).
pub(crate) fn leave() {
    INSIDE.set(false);
}

impl Writer {
    /// Mark a tracked call in progress since `t_entry` (see [`RingHeader::busy`]).
    pub(crate) fn begin(&self, t_entry: u64) {
        // SAFETY: an Active writer's header is our live mapping. SeqCst: a reader that does not
        // see this store reads its clock before our return stamp.
        unsafe {
            (*self.header)
                .busy
                .0
                .store(t_entry.max(1), Ordering::SeqCst)
        };
    }

    /// End the call marked by [`Writer::begin`].
    pub(crate) fn end(&self) {
        // SAFETY: as in `begin`.
        unsafe { (*self.header).busy.0.store(0, Ordering::Release) };
    }

    /// Append one record, with a copy of the stack from `rec.sp` when `with_stack`; dropped
    /// and counted when the ring is full.
    pub(crate) fn write(&self, mut rec: RecordHeader, with_stack: bool) {
        let sp = rec.sp as usize;
        let stack_len = if with_stack && (self.stack_lo..self.stack_hi).contains(&sp) {
            (self.stack_hi - sp).min(crate::STACK_BYTES.load(Ordering::Relaxed) as usize)
        } else {
            0
        };
        rec.tid = self.tid;
        rec.stack_len = stack_len as u32;
        // SAFETY: an Active writer's header is our live mapping.
        let h = unsafe { &*self.header };
        let need = record_bytes(rec.stack_len);
        let head = h.head.0.load(Ordering::Relaxed);
        if !self.wait_for_room(h, head, need) {
            h.lost.0.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: `rec` is plain data of RECORD_HEADER_BYTES; the stack range [sp, sp +
        // stack_len) lies within this thread's mapped stack, above our own frames.
        unsafe {
            let at = (head & self.mask) as usize;
            if at + RECORD_HEADER_BYTES <= (self.mask + 1) as usize {
                // Positions are multiples of 8 and the data area is page aligned.
                self.data.add(at).cast::<RecordHeader>().write(rec);
            } else {
                self.copy_in(head, (&raw const rec).cast(), RECORD_HEADER_BYTES);
            }
            self.copy_in(
                head + RECORD_HEADER_BYTES as u64,
                sp as *const u8,
                stack_len,
            );
        }
        h.head.0.store(head + need, Ordering::Release);
        let used = (head + need).wrapping_sub(h.tail.0.load(Ordering::Relaxed));
        if used > (self.mask + 1) / 4 {
            self.wake(h);
        }
    }

    /// Tell the reader the ring wants draining, unless it has been told and not yet answered.
    fn wake(&self, h: &RingHeader) {
        if h.wake.0.swap(1, Ordering::Relaxed) == 0 {
            send(&message(MSG_WAKE, self.tid), None, libc::MSG_DONTWAIT);
        }
    }

    /// Whether `need` bytes fit after `head`. When the ring is full, wake the reader and wait
    /// up to [`FULL_WAIT_NS`] for it to make room; a reader that made none in that time is
    /// not waited for again until it moves (records are dropped meanwhile), so a stuck reader
    /// slows the program once, not at every call.
    fn wait_for_room(&self, h: &RingHeader, head: u64, need: u64) -> bool {
        let size = self.mask + 1;
        let fits = |tail: u64| {
            let used = head.wrapping_sub(tail);
            used <= size && size - used >= need
        };
        let mut tail = h.tail.0.load(Ordering::Acquire);
        if fits(tail) {
            return true;
        }
        if STALLED_AT.get() == tail {
            return false;
        }
        self.wake(h);
        let start = monotonic_ns();
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 20_000,
        };
        loop {
            let waited = monotonic_ns() - start;
            if waited >= FULL_WAIT_NS {
                break;
            }
            // Give the reader the CPU at once; after a while, sleep instead of spinning.
            // SAFETY: sched_yield has no arguments; nanosleep reads the timespec (an
            // interruption just ends this pause).
            unsafe {
                if waited < YIELD_NS {
                    libc::sched_yield();
                } else {
                    libc::nanosleep(&pause, null_mut());
                }
            }
            tail = h.tail.0.load(Ordering::Acquire);
            if fits(tail) {
                STALLED_AT.set(u64::MAX);
                return true;
            }
        }
        STALLED_AT.set(tail);
        false
    }

    /// Copy `len` bytes from `src` to ring position `pos`, wrapping at the end of the data.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes, and `len` at most the data size.
    unsafe fn copy_in(&self, pos: u64, src: *const u8, len: usize) {
        let at = (pos & self.mask) as usize;
        let first = len.min((self.mask + 1) as usize - at);
        // SAFETY: both pieces lie inside the data area (`at + first` ≤ size, `len - first` <
        // size), which does not overlap the stack or `rec`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, self.data.add(at), first);
            std::ptr::copy_nonoverlapping(src.add(first), self.data, len - first);
        }
    }
}

/// Make, map and announce this thread's ring; an Off writer if any step fails.
fn open() -> Writer {
    let sock = SOCK.load(Ordering::Relaxed);
    let data_bytes = RING_BYTES.load(Ordering::Relaxed);
    if sock < 0 || data_bytes == 0 {
        return Writer::OFF;
    }
    // SAFETY: plain system calls; the memfd is closed on every path after mapping it, and the
    // mapping is only kept (and used) once it has been announced.
    unsafe {
        let tid = libc::gettid() as u32;
        let pid = libc::getpid() as u32;
        let (stack_lo, stack_hi) = stack_bounds(tid == pid);
        let fd = libc::memfd_create(c"hpcrun-alloc".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return Writer::OFF;
        }
        let total = RING_HEADER_BYTES + data_bytes as usize;
        let map = if libc::ftruncate(fd, total as libc::off_t) == 0 {
            libc::mmap(
                null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        if map == libc::MAP_FAILED {
            libc::close(fd);
            return Writer::OFF;
        }
        let header = map.cast::<RingHeader>();
        header.write(RingHeader {
            magic: RING_MAGIC,
            version: VERSION,
            record_header_bytes: RECORD_HEADER_BYTES as u32,
            data_bytes,
            pid,
            tid,
            ..RingHeader::default()
        });
        let mut msg = message(MSG_RING, tid);
        msg.data_bytes = data_bytes;
        let sent = send(&msg, Some(fd), 0);
        libc::close(fd);
        if !sent {
            unmap(header);
            return Writer::OFF;
        }
        libc::pthread_setspecific(EXIT_KEY, map);
        Writer {
            status: Status::Active,
            header,
            data: map.cast::<u8>().add(RING_HEADER_BYTES),
            mask: data_bytes - 1,
            tid,
            stack_lo,
            stack_hi,
        }
    }
}

fn message(kind: u32, tid: u32) -> Message {
    Message {
        kind,
        version: VERSION,
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() } as u32,
        tid,
        data_bytes: 0,
    }
}

/// Send one message, with descriptor `fd` attached if given; false if it could not be sent.
fn send(msg: &Message, fd: Option<i32>, flags: i32) -> bool {
    let mut iov = libc::iovec {
        iov_base: (msg as *const Message).cast_mut().cast(),
        iov_len: size_of::<Message>(),
    };
    // Room for one SCM_RIGHTS descriptor, 8-aligned.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is "no name, no control".
    let mut hdr: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: `control` is large and aligned enough for one cmsg carrying an int; CMSG_*
        // compute positions inside it.
        unsafe {
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(size_of::<i32>() as u32) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as usize;
            libc::CMSG_DATA(cmsg).cast::<i32>().write_unaligned(fd);
        }
    }
    let sock = SOCK.load(Ordering::Relaxed);
    loop {
        // SAFETY: `hdr` points at live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(sock, &hdr, flags | libc::MSG_NOSIGNAL) };
        // SAFETY: errno is thread-local.
        if n >= 0 || unsafe { *libc::__errno_location() } != libc::EINTR {
            return n == size_of::<Message>() as isize;
        }
    }
}

/// Unmap a ring mapped by [`open`].
fn unmap(header: *mut RingHeader) {
    // SAFETY: `header` is the start of a mapping of header + data bytes.
    unsafe {
        let total = RING_HEADER_BYTES + (*header).data_bytes as usize;
        libc::munmap(header.cast(), total);
    }
}

unsafe extern "C" {
    /// The main thread's stack address at process start (ld.so); above it lie only argv,
    /// the environment and auxv, useless for unwinding.
    static __libc_stack_end: *const c_void;
}

/// The calling thread's stack as `[lo, hi)`: mapped, with its frames below `hi`. `hi` is the
/// start of the thread descriptor (static TLS and the TCB sit above a thread's frames) or, for
/// the main thread, `__libc_stack_end`. Empty if unknown (no stack is copied then).
fn stack_bounds(main_thread: bool) -> (usize, usize) {
    let mut attr = MaybeUninit::<libc::pthread_attr_t>::uninit();
    let (mut addr, mut size) = (null_mut::<c_void>(), 0usize);
    // SAFETY: pthread_getattr_np initialises `attr` when it returns 0 (it may allocate, which
    // passes through: we are inside the shim); getstack reads it; destroy frees it.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return (0, 0);
        }
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        if !ok {
            return (0, 0);
        }
    }
    let lo = addr as usize;
    let top = lo + size;
    let limit = if main_thread {
        // SAFETY: ld.so sets __libc_stack_end before any user code runs.
        unsafe { __libc_stack_end as usize }
    } else {
        // SAFETY: pthread_self has no preconditions.
        unsafe { libc::pthread_self() as usize }
    };
    let hi = if (lo..top).contains(&limit) {
        limit
    } else {
        top
    };
    (lo, hi)
}
