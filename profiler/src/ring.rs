//! The kernel's per-CPU sample ring buffer, read without copying.
//!
//! A ring is one metadata page followed by `2^n` data pages, mapped read-write so the kernel
//! honours `data_tail` and never overwrites records we have not read (it counts them as lost
//! instead). Records are read at a private cursor; [`Ring::release`] hands the space back.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use linux_perf_event_reader::RawData;
use perf_event_open_sys::bindings::perf_event_mmap_page;

/// One record's header and body, as it sits in the ring (possibly split at the wrap point).
#[derive(Debug, Clone, Copy)]
pub struct RingRecord<'a> {
    /// `perf_event_header.type`.
    pub record_type: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The body after the 8-byte header.
    pub data: RawData<'a>,
}

/// A mapped ring buffer of one perf event (other events may be redirected into it).
pub struct Ring {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    cursor: u64,
    head: u64,
    fd: OwnedFd,
}

// The mapping is owned by this value and only touched through `&mut self` or the kernel.
unsafe impl Send for Ring {}

const PAGE: usize = 4096;

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
        let mut ring = Ring {
            base,
            map_len,
            data_offset,
            data_size,
            cursor: 0,
            head: 0,
            fd,
        };
        ring.cursor = ring.tail_word().load(Ordering::Acquire);
        Ok(ring)
    }

    fn head_word(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: data_head is a naturally aligned u64 in the mapped metadata page.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)) }
    }

    fn tail_word(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: as for `head_word`.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)) }
    }

    fn data(&self) -> &[u8] {
        // SAFETY: the data area is mapped for the ring's lifetime; the kernel only writes past
        // `data_head`, which we never read beyond.
        unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset), self.data_size)
        }
    }

    /// The event descriptor that owns the ring.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Take a snapshot of how far the kernel has written; [`Ring::peek`] reads up to it.
    pub fn snapshot(&mut self) {
        self.head = self.head_word().load(Ordering::Acquire);
    }

    /// The record at the cursor, if the snapshot holds one.
    pub fn peek(&self) -> Option<RingRecord<'_>> {
        if self.cursor + 8 > self.head {
            return None;
        }
        let data = self.data();
        let header = self.bytes_at(self.cursor, 8);
        let header = header.as_slice();
        let record_type = u32::from_le_bytes(header[0..4].try_into().ok()?);
        let misc = u16::from_le_bytes(header[4..6].try_into().ok()?);
        let size = u16::from_le_bytes(header[6..8].try_into().ok()?) as u64;
        if size < 8 || self.cursor + size > self.head || size as usize > data.len() {
            return None;
        }
        Some(RingRecord {
            record_type,
            misc,
            data: self.bytes_at(self.cursor + 8, size as usize - 8),
        })
    }

    /// Step the cursor over the record [`Ring::peek`] returned.
    pub fn advance(&mut self) {
        let header = self.bytes_at(self.cursor, 8).as_slice();
        let size = u16::from_le_bytes([header[6], header[7]]) as u64;
        self.cursor += size.max(8);
    }

    /// Give the space of every record stepped over back to the kernel.
    pub fn release(&mut self) {
        self.tail_word().store(self.cursor, Ordering::Release);
    }

    /// `len` bytes starting at ring position `pos`, split in two where they wrap.
    fn bytes_at(&self, pos: u64, len: usize) -> RawData<'_> {
        let data = self.data();
        let start = (pos % self.data_size as u64) as usize;
        let end = start + len;
        if end <= data.len() {
            RawData::Single(&data[start..end])
        } else {
            RawData::Split(&data[start..], &data[..end - data.len()])
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}
