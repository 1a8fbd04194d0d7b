//! The kernel's per-CPU sample ring buffer, emptied into a spool of our own.
//!
//! A ring is one metadata page followed by `2^n` data pages, mapped read-write so the kernel
//! honours `data_tail` and never overwrites records we have not read (it counts them as lost
//! instead). Copying what the kernel wrote into the ring's spool hands the space back at once,
//! so a burst of samples (a page-fault storm with an 8 KiB stack copy each) only has to outrun a
//! memory copy, not the unwinding of every sample. A [`Copier`] thread does that copy as soon
//! as a ring wakes it, while the reader unwinds what is already spooled; [`Ring::fill`] takes
//! the spool over, and records are then read from it at a private cursor.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use linux_perf_event_reader::RawData;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::sampler::capture::hold;

/// One record's header and body.
#[derive(Debug, Clone, Copy)]
pub struct RingRecord<'a> {
    /// `perf_event_header.type`.
    pub record_type: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The body after the 8-byte header.
    pub data: RawData<'a>,
}

/// The kernel's side of a ring: the mapping, its descriptor, and the records copied out of it
/// and not yet taken by the reader. Shared by the reader and the [`Copier`].
struct Mapped {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    spool: Mutex<Vec<u8>>,
    /// Whether a [`Copier`] copies this ring out: the reader then asks it to
    /// ([`Copier::flush`]) rather than copy under the spool's lock itself.
    copied: AtomicBool,
    fd: OwnedFd,
}

// SAFETY: the mapping lives as long as this value; the data area is only read, and the tail
// only written, with the spool's lock held.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

const PAGE: usize = 4096;

/// The most a spool holds (bytes): past it the ring is left to fill, and the kernel counts what
/// it cannot write as lost, so a reader that falls behind for good does not grow without bound.
const SPOOL_LIMIT: usize = 64 << 20;

impl Mapped {
    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base.as_ptr().cast()
    }

    /// Copy every record the kernel has written into the spool and give the ring's space back
    /// (unless the spool is full: then the ring keeps them until a later copy).
    fn copy_out(&self) {
        let mut spool = self.spool.lock().unwrap_or_else(|e| e.into_inner());
        if spool.len() >= SPOOL_LIMIT {
            return;
        }
        // SAFETY: data_head and data_tail are naturally aligned u64s in the mapped metadata
        // page; the tail is ours to write (under the lock), the head the kernel's.
        let (head, tail) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_tail)),
            )
        };
        let from = tail.load(Ordering::Relaxed);
        let len = head
            .load(Ordering::Acquire)
            .saturating_sub(from)
            .min(self.data_size as u64) as usize;
        if len == 0 {
            return;
        }
        // SAFETY: the data area is mapped for this value's lifetime; the kernel only writes
        // past data_head, which we never read beyond.
        let data = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset), self.data_size)
        };
        let start = (from % self.data_size as u64) as usize;
        let first = len.min(data.len() - start);
        spool.extend_from_slice(&data[start..start + first]);
        spool.extend_from_slice(&data[..len - first]);
        tail.store(from + len as u64, Ordering::Release);
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `Ring::map` mapped.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// The most of each buffer written in advance (bytes), so that memory use stays a small multiple
/// of the rings' however many CPUs there are.
const PRE_TOUCHED: usize = 2 << 20;

/// An empty buffer whose first `bytes` are written once, so that the copies of a burst do not
/// first have to fault its pages in (each a trap into the kernel, dearer still in a VM).
fn touched(bytes: usize) -> Vec<u8> {
    let mut buffer = vec![1u8; bytes];
    buffer.clear();
    buffer
}

/// A mapped ring buffer of one perf event (other events may be redirected into it), with the
/// records taken from its spool and not yet all read.
pub struct Ring {
    mapped: Arc<Mapped>,
    /// Records taken from the spool.
    records: Vec<u8>,
    /// Read position in `records`.
    cursor: usize,
    /// An empty buffer swapped for the spool when taking it, so that the spool's lock is not
    /// held for a second copy.
    spare: Vec<u8>,
}

impl Ring {
    /// Map `data_pages` (a power of two) data pages for `fd`.
    pub fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
        debug_assert!(data_pages.is_power_of_two());
        let map_len = (data_pages + 1) * PAGE;
        // SAFETY: a fresh shared mapping of a perf fd; the kernel validates the length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let meta = base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the metadata page is mapped; data_offset/size exist since Linux 4.1.
        let (mut data_offset, mut data_size) =
            unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        if data_size == 0 {
            data_offset = PAGE;
            data_size = data_pages * PAGE;
        }
        let mapped = Mapped {
            base,
            map_len,
            data_offset,
            data_size,
            spool: Mutex::new(touched(data_size.min(PRE_TOUCHED))),
            copied: AtomicBool::new(false),
            fd,
        };
        Ok(Ring {
            mapped: Arc::new(mapped),
            records: touched(data_size.min(PRE_TOUCHED)),
            cursor: 0,
            spare: touched(data_size.min(PRE_TOUCHED)),
        })
    }

    /// The event descriptor that owns the ring.
    pub fn fd(&self) -> &OwnedFd {
        &self.mapped.fd
    }

    /// Copy what the kernel has written into the spool (unless a [`Copier`] does: see
    /// [`Copier::flush`]), and take the spool over for reading.
    pub fn fill(&mut self) {
        if !self.mapped.copied.load(Ordering::Acquire) {
            self.mapped.copy_out();
        }
        {
            let mut spool = self.mapped.spool.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *spool, &mut self.spare);
        }
        if self.cursor == self.records.len() {
            self.records.clear();
            self.cursor = 0;
            std::mem::swap(&mut self.records, &mut self.spare);
        } else {
            self.records.extend_from_slice(&self.spare);
            self.spare.clear();
        }
    }

    /// The record at the cursor, if a whole one has been taken.
    pub fn peek(&self) -> Option<RingRecord<'_>> {
        let rest = &self.records[self.cursor..];
        let header = rest.get(..8)?;
        let record_type = u32::from_le_bytes(header[0..4].try_into().ok()?);
        let misc = u16::from_le_bytes(header[4..6].try_into().ok()?);
        let size = u16::from_le_bytes(header[6..8].try_into().ok()?) as usize;
        let body = rest.get(8..size.max(8))?;
        Some(RingRecord {
            record_type,
            misc,
            data: RawData::Single(body),
        })
    }

    /// Step the cursor over the record [`Ring::peek`] returned.
    pub fn advance(&mut self) {
        let size = match self.records.get(self.cursor + 6..self.cursor + 8) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => 0,
        };
        self.cursor = (self.cursor + size.max(8)).min(self.records.len());
    }

    /// Forget the records stepped over, keeping the memory for the next fill.
    pub fn release(&mut self) {
        self.records.drain(..self.cursor);
        self.cursor = 0;
    }
}

/// A thread that copies the rings out as soon as the kernel wakes it (a quarter of a ring
/// written), at a real-time priority above the reader's where permitted, so that no ring fills
/// while the reader unwinds: it does nothing but copy, then says so on its notice pipe. It alone polls the
/// rings (the kernel hands a ring's wake-up to one poller only). Stopped (and joined) when
/// dropped.
pub struct Copier {
    mapped: Vec<Arc<Mapped>>,
    stop: Arc<AtomicBool>,
    wake: OwnedFd,
    notices: OwnedFd,
    hung: Arc<AtomicBool>,
    flushes: Arc<Flushes>,
    held: Arc<Held>,
    realtime: bool,
    thread: Option<JoinHandle<()>>,
}

/// The command the tripwires stop ([`hold`]), which the copier lets go on after each copy.
#[derive(Default)]
struct Held {
    /// Its pid; 0 while nothing is held.
    owner: AtomicI32,
    /// The copies after which it was let go.
    holds: AtomicU64,
}

/// The reader's requests for a copy of everything written so far, and the copier's answers.
#[derive(Default)]
struct Flushes {
    asked: AtomicU64,
    done: Mutex<u64>,
    answered: Condvar,
}

impl Copier {
    /// Start copying `rings`.
    pub fn start(rings: &[Ring]) -> io::Result<Copier> {
        let mapped: Vec<Arc<Mapped>> = rings.iter().map(|r| Arc::clone(&r.mapped)).collect();
        let (wait, wake) = nix::unistd::pipe()?;
        let (notices, notify) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK)?;
        let stop = Arc::new(AtomicBool::new(false));
        let hung = Arc::new(AtomicBool::new(false));
        let flushes = Arc::new(Flushes::default());
        let held = Arc::new(Held::default());
        let (ready, started) = std::sync::mpsc::channel();
        let thread = {
            let shared = Shared {
                mapped: mapped.clone(),
                stop: Arc::clone(&stop),
                hung: Arc::clone(&hung),
                flushes: Arc::clone(&flushes),
                held: Arc::clone(&held),
            };
            std::thread::Builder::new()
                .name("hpcrun-copier".into())
                .spawn(move || {
                    use crate::sampler::capture::priority;
                    let realtime = priority::set_realtime(priority::COPIER);
                    if !realtime {
                        priority::short_slice();
                    }
                    let _ = ready.send(realtime);
                    copy_until_stopped(&shared, &wait, &notify)
                })?
        };
        // The command starts once this returns: the copier must already be on the CPU (a new
        // thread of ordinary priority waits its turn on a busy machine).
        let realtime = started.recv().unwrap_or(false);
        mapped
            .iter()
            .for_each(|m| m.copied.store(true, Ordering::Release));
        Ok(Copier {
            mapped,
            stop,
            wake,
            notices,
            hung,
            flushes,
            held,
            realtime,
            thread: Some(thread),
        })
    }

    /// Whether the copier runs at real-time priority.
    pub fn realtime(&self) -> bool {
        self.realtime
    }

    /// Let process `owner` go on whenever the copier finds it stopped after a copy: its
    /// tripwires stop it every so many samples ([`hold`]).
    pub(crate) fn hold(&self, owner: Pid) {
        self.held.owner.store(owner.as_raw(), Ordering::Release);
    }

    /// The process held, if any.
    pub(crate) fn holding(&self) -> Option<Pid> {
        let owner = self.held.owner.load(Ordering::Acquire);
        (owner != 0).then(|| Pid::from_raw(owner))
    }

    /// How many times the held process was let go after a copy.
    pub(crate) fn holds(&self) -> u64 {
        self.held.holds.load(Ordering::Acquire)
    }

    /// Readable once the copier has copied something since [`Copier::take_notices`].
    pub fn notices(&self) -> &OwnedFd {
        &self.notices
    }

    /// Empty the notice pipe.
    pub fn take_notices(&self) {
        let mut buf = [0u8; 64];
        while matches!(nix::unistd::read(&self.notices, &mut buf), Ok(n) if n > 0) {}
    }

    /// Whether every ring has hung up (its events' tasks are all gone).
    pub fn all_hung(&self) -> bool {
        self.hung.load(Ordering::Acquire)
    }

    /// Have the copier copy everything written so far, and wait until it has: the records up
    /// to now are then in the spools, to meet the allocation records in time order.
    pub fn flush(&self) {
        let ticket = self.flushes.asked.fetch_add(1, Ordering::AcqRel) + 1;
        let _ = nix::unistd::write(&self.wake, &[0]);
        let done = self.flushes.done.lock().unwrap_or_else(|e| e.into_inner());
        let _done = self.flushes.answered.wait_while(done, |d| *d < ticket);
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = nix::unistd::write(&self.wake, &[1]);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(owner) = self.holding() {
            hold::resume(owner);
        }
        self.mapped
            .iter()
            .for_each(|m| m.copied.store(false, Ordering::Release));
    }
}

/// What the copier thread shares with its [`Copier`].
struct Shared {
    mapped: Vec<Arc<Mapped>>,
    stop: Arc<AtomicBool>,
    hung: Arc<AtomicBool>,
    flushes: Arc<Flushes>,
    held: Arc<Held>,
}

/// The copier's loop: wait for a ring's wake-up, a flush (or 10 ms), copy every ring out,
/// answer the flushes asked before the copy, notify the reader; let the held command go on
/// once its samples are copied (a tripwire's wake-up comes a moment before its stop, so a few
/// turns after a wake-up come after 1 ms).
fn copy_until_stopped(shared: &Shared, wait: &OwnedFd, notify: &OwnedFd) {
    let mapped = &shared.mapped;
    let mut hung = vec![false; mapped.len()];
    let mut byte = [0u8; 64];
    let mut soon = 0u8;
    while !shared.stop.load(Ordering::Acquire) {
        let live: Vec<usize> = (0..mapped.len()).filter(|&i| !hung[i]).collect();
        let mut fds: Vec<PollFd> = vec![PollFd::new(wait.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            live.iter()
                .map(|&i| PollFd::new(mapped[i].fd.as_fd(), PollFlags::POLLIN)),
        );
        let _ = poll(
            &mut fds,
            PollTimeout::from(if soon > 0 { 1u16 } else { 10 }),
        );
        if fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            let _ = nix::unistd::read(wait, &mut byte);
        }
        // Woken by a ring (not by a flush, which the reader waits for anyway).
        let mut woken = false;
        for (k, &i) in live.iter().enumerate() {
            let revents = fds[k + 1].revents().unwrap_or(PollFlags::empty());
            hung[i] |= revents.contains(PollFlags::POLLHUP);
            woken |= revents.contains(PollFlags::POLLIN);
        }
        shared
            .hung
            .store(hung.iter().all(|&h| h), Ordering::Release);
        let asked = shared.flushes.asked.load(Ordering::Acquire);
        mapped.iter().for_each(|m| m.copy_out());
        *shared
            .flushes
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = asked;
        shared.flushes.answered.notify_all();
        let owner = shared.held.owner.load(Ordering::Acquire);
        if owner != 0 {
            soon = if woken { 3 } else { soon.saturating_sub(1) };
            if hold::is_stopped(Pid::from_raw(owner)) {
                hold::resume(Pid::from_raw(owner));
                shared.held.holds.fetch_add(1, Ordering::AcqRel);
            }
        }
        if woken {
            let _ = nix::unistd::write(notify, &[1]);
        }
    }
    // A flush asked while stopping is answered too.
    *shared
        .flushes
        .done
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = u64::MAX;
    shared.flushes.answered.notify_all();
}
