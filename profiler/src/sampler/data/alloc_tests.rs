//! Reading the shim's rings: records written here the way the shim writes them, announced over
//! the tracker's own socket.

use super::*;

/// A ring written by the test, as the shim would.
struct FakeRing {
    map: memmap2::MmapRaw,
    data_bytes: u64,
}

impl FakeRing {
    /// A ring of `data_bytes` for thread `tid` of `pid`, its positions starting at `start`,
    /// announced to `tracker`.
    fn announce(tracker: &AllocTracker, pid: u32, tid: u32, data_bytes: u64, start: u64) -> Self {
        // SAFETY: memfd_create returns a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"test-ring".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` is new and ours.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(RING_HEADER_BYTES as u64 + data_bytes).unwrap();
        let map = memmap2::MmapOptions::new()
            .len(RING_HEADER_BYTES + data_bytes as usize)
            .map_raw(&file)
            .unwrap();
        let header = RingHeader {
            magic: RING_MAGIC,
            version: VERSION,
            record_header_bytes: RECORD_HEADER_BYTES as u32,
            data_bytes,
            pid,
            tid,
            ..RingHeader::default()
        };
        header.head.0.store(start, Ordering::Relaxed);
        header.tail.0.store(start, Ordering::Relaxed);
        // SAFETY: the mapping is larger than a RingHeader and page aligned.
        unsafe { map.as_mut_ptr().cast::<RingHeader>().write(header) };
        let msg = Message {
            kind: MSG_RING,
            version: VERSION,
            pid,
            tid,
            data_bytes,
        };
        send(tracker, &msg, Some(file.as_raw_fd()));
        FakeRing { map, data_bytes }
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: the mapping starts with the header written in `announce`.
        unsafe { &*self.map.as_ptr().cast::<RingHeader>() }
    }

    /// Append a record with `stack` and publish it.
    fn push(&self, rec: RecordHeader, stack: &[u8]) {
        let h = self.header();
        let head = h.head.0.load(Ordering::Relaxed);
        let rec = RecordHeader {
            stack_len: stack.len() as u32,
            ..rec
        };
        // SAFETY: RecordHeader is plain data.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const rec).cast::<u8>(), RECORD_HEADER_BYTES)
        };
        self.copy_in(head, bytes);
        self.copy_in(head + RECORD_HEADER_BYTES as u64, stack);
        h.head
            .0
            .store(head + record_bytes(stack.len() as u32), Ordering::Release);
    }

    fn copy_in(&self, pos: u64, bytes: &[u8]) {
        for (k, b) in bytes.iter().enumerate() {
            let at = RING_HEADER_BYTES + ((pos + k as u64) % self.data_bytes) as usize;
            // SAFETY: `at` is inside the mapping.
            unsafe { self.map.as_mut_ptr().add(at).write(*b) };
        }
    }
}

/// Send `msg` (and `fd`) to the tracker as the shim does.
fn send(tracker: &AllocTracker, msg: &Message, fd: Option<i32>) {
    let mut iov = libc::iovec {
        iov_base: (msg as *const Message).cast_mut().cast(),
        iov_len: size_of::<Message>(),
    };
    let mut control = [0u64; 4];
    // SAFETY: zeroed msghdr is empty; the cmsg is built inside `control`.
    unsafe {
        let mut hdr: libc::msghdr = MaybeUninit::zeroed().assume_init();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if let Some(fd) = fd {
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
            libc::CMSG_DATA(cmsg).cast::<i32>().write_unaligned(fd);
        }
        let n = libc::sendmsg(tracker.fds_to_keep()[0].as_raw_fd(), &hdr, 0);
        assert_eq!(n, size_of::<Message>() as isize);
    }
}

fn tracker() -> AllocTracker {
    AllocTracker::with_shim("/opt/hpc/libhpcrun_alloc.so".into(), 4096, 8192).unwrap()
}

fn record(op: u32, t: u64, ptr: u64) -> RecordHeader {
    RecordHeader {
        op,
        tid: 7,
        t_entry: t - 5,
        t_return: t,
        ptr,
        size: if op == OP_FREE { 0 } else { 4096 },
        ip: 0x401234,
        sp: 0x7ffd_0000,
        bp: 0x7ffd_0100,
        ..RecordHeader::default()
    }
}

#[test]
fn records_of_all_rings_come_out_in_time_order_with_their_fields() {
    let mut tracker = tracker();
    let a = FakeRing::announce(&tracker, 100, 100, 1 << 16, 0);
    let b = FakeRing::announce(&tracker, 100, 101, 1 << 16, 0);
    a.push(record(OP_ALLOC, 10, 0xa0), &[1, 2, 3]);
    a.push(record(OP_FREE, 30, 0xa0), &[]);
    b.push(record(OP_ALLOC, 20, 0xb0), &[9; 16]);
    b.push(
        RecordHeader {
            old_ptr: 0xb0,
            ..record(OP_REALLOC, 40, 0xc0)
        },
        &[],
    );
    let mut out = Vec::new();
    tracker.drain(u64::MAX, &mut out);
    let order: Vec<(u64, AllocOp)> = out.iter().map(|e| (e.t_return, e.op)).collect();
    assert_eq!(
        order,
        [
            (10, AllocOp::Alloc),
            (20, AllocOp::Alloc),
            (30, AllocOp::Free),
            (40, AllocOp::Realloc)
        ]
    );
    assert_eq!(
        out[0],
        AllocEvent {
            pid: 100,
            tid: 7,
            op: AllocOp::Alloc,
            t_entry: 5,
            t_return: 10,
            ptr: 0xa0,
            size: 4096,
            old_ptr: 0,
            ip: 0x401234,
            sp: 0x7ffd_0000,
            bp: 0x7ffd_0100,
            stack: vec![1, 2, 3],
        }
    );
    assert_eq!(out[1].stack, [9; 16]);
    assert_eq!((out[3].ptr, out[3].old_ptr), (0xc0, 0xb0));
    assert_eq!(tracker.threads(), [(100, 100), (100, 101)]);
    assert_eq!(tracker.lost(), 0);
    // Everything read was handed back to the writers.
    assert_eq!(a.header().tail.0.load(Ordering::Relaxed), 168);
}

#[test]
fn a_record_wrapping_the_end_of_the_ring_is_read_whole() {
    let mut tracker = tracker();
    let size = 1 << 12;
    let ring = FakeRing::announce(&tracker, 1, 1, size, 3 * size - 40);
    let stack: Vec<u8> = (0..200).collect();
    ring.push(record(OP_ALLOC, 10, 0x10), &stack);
    ring.push(record(OP_FREE, 11, 0x10), &[]);
    let mut out = Vec::new();
    tracker.drain(u64::MAX, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].stack, stack);
    assert_eq!((out[1].op, out[1].ptr), (AllocOp::Free, 0x10));
}

#[test]
fn a_cutoff_and_a_call_in_progress_hold_back_later_records() {
    let mut tracker = tracker();
    let t0 = monotonic_ns();
    let a = FakeRing::announce(&tracker, 1, 1, 1 << 16, 0);
    let b = FakeRing::announce(&tracker, 1, 2, 1 << 16, 0);
    a.push(record(OP_ALLOC, t0 - 300, 1), &[]);
    a.push(record(OP_ALLOC, t0 - 100, 2), &[]);
    b.push(record(OP_ALLOC, t0 - 200, 3), &[]);
    let mut out = Vec::new();
    assert_eq!(tracker.drain(t0 - 250, &mut out), t0 - 250);
    assert_eq!(out.iter().map(|e| e.ptr).collect::<Vec<_>>(), [1]);
    // Thread 2 entered a call at t0 - 150: nothing after it may come out yet, from any ring.
    b.header().busy.0.store(t0 - 150, Ordering::SeqCst);
    assert_eq!(tracker.drain(monotonic_ns(), &mut out), t0 - 151);
    assert_eq!(out.iter().map(|e| e.ptr).collect::<Vec<_>>(), [1, 3]);
    b.push(record(OP_ALLOC, t0 - 120, 4), &[]);
    b.header().busy.0.store(0, Ordering::SeqCst);
    tracker.drain(monotonic_ns(), &mut out);
    assert_eq!(out.iter().map(|e| e.ptr).collect::<Vec<_>>(), [1, 3, 4, 2]);
}

#[test]
fn a_stale_mark_of_a_dead_thread_holds_back_nothing() {
    let mut tracker = tracker();
    let t0 = monotonic_ns();
    let a = FakeRing::announce(&tracker, 1, 1, 1 << 16, 0);
    a.header()
        .busy
        .0
        .store(t0 - 2 * STALE_BUSY_NS, Ordering::SeqCst);
    a.push(record(OP_ALLOC, t0 - 10, 1), &[]);
    let mut out = Vec::new();
    tracker.drain(monotonic_ns(), &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn a_corrupt_ring_is_dropped_and_counted_while_the_others_go_on() {
    let mut tracker = tracker();
    let bad = FakeRing::announce(&tracker, 1, 1, 1 << 16, 0);
    let good = FakeRing::announce(&tracker, 1, 2, 1 << 16, 0);
    bad.push(record(9, 10, 1), &[]);
    good.push(record(OP_ALLOC, 20, 2), &[]);
    let mut out = Vec::new();
    tracker.drain(u64::MAX, &mut out);
    assert_eq!(out.iter().map(|e| e.ptr).collect::<Vec<_>>(), [2]);
    assert_eq!(tracker.lost(), 1);
    assert_eq!(tracker.rings.len(), 1);
    // A head beyond a full ring's worth of data is corrupt too.
    good.header().head.0.store(1 << 20, Ordering::Release);
    tracker.drain(u64::MAX, &mut out);
    assert_eq!((tracker.lost(), tracker.rings.len()), (2, 0));
}

#[test]
fn a_closed_ring_is_let_go_once_read_and_its_losses_are_kept() {
    let mut tracker = tracker();
    let ring = FakeRing::announce(&tracker, 1, 1, 1 << 16, 0);
    ring.push(record(OP_ALLOC, 10, 1), &[]);
    ring.header().lost.0.store(3, Ordering::Relaxed);
    ring.header().closed.0.store(1, Ordering::Release);
    let mut out = Vec::new();
    tracker.drain(u64::MAX, &mut out);
    assert_eq!((out.len(), tracker.rings.len(), tracker.lost()), (1, 0, 3));
    assert_eq!(tracker.threads(), [(1, 1)]);
}

#[test]
fn messages_without_a_valid_ring_are_ignored() {
    let mut tracker = tracker();
    let wake = Message {
        kind: MSG_WAKE,
        version: VERSION,
        ..Message::default()
    };
    send(&tracker, &wake, None);
    // A descriptor that is no ring (bad magic).
    // SAFETY: memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"not-a-ring".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: `fd` is new and ours.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(RING_HEADER_BYTES as u64 + 4096).unwrap();
    let msg = Message {
        kind: MSG_RING,
        version: VERSION,
        pid: 1,
        tid: 1,
        data_bytes: 4096,
    };
    send(&tracker, &msg, Some(fd));
    let mut out = Vec::new();
    tracker.drain(u64::MAX, &mut out);
    assert!(out.is_empty());
    assert!(tracker.threads().is_empty());
}

#[test]
fn the_command_gets_the_shim_preloaded_first_and_its_settings() {
    let tracker = tracker();
    let env = tracker.child_env();
    let get = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.to_str().unwrap().to_string())
            .unwrap()
    };
    assert!(get("LD_PRELOAD").starts_with("/opt/hpc/libhpcrun_alloc.so"));
    assert_eq!(
        get(ENV_FD),
        tracker.fds_to_keep()[0].as_raw_fd().to_string()
    );
    assert_eq!(get(ENV_MIN), "4096");
    assert_eq!(get(ENV_STACK), "8192");
    let ring: u64 = get(ENV_RING).parse().unwrap();
    assert!(ring.is_power_of_two() && ring >= 64 * record_bytes(8192));
}
