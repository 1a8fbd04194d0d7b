//! The OpenMP tool's records (crate `hpcrun-ompt`, `libhpcrun_ompt.so`, which LLVM's and
//! Intel's OpenMP runtimes load through `OMP_TOOL_LIBRARIES`), as `hpcrun-rs` reads them.
//!
//! `hpcrun-rs` creates a memfd and passes it to the command by number in [`ENV_FD`]
//! (inherited across `fork` and `exec`). Each thread keeps its records in memory and appends
//! them to that file in chunks, one `write` each (the kernel serialises writes to one open
//! file, so chunks of different threads and processes never interleave): a [`ChunkHeader`],
//! then `count` [`Record`]s. A thread writes a chunk when its buffer fills, when it ends, and
//! when the runtime shuts down. Times are CLOCK_MONOTONIC ns, the clock of the perf samples.

/// Descriptor number of the file the tool appends its chunks to.
pub const ENV_FD: &str = "HPCRUN_OMPT_FD";

/// `ChunkHeader::magic`: "HPCOMPT2" (the records' layout is in the last digit).
pub const CHUNK_MAGIC: u64 = u64::from_le_bytes(*b"HPCOMPT2");

/// Bytes of a [`ChunkHeader`].
pub const CHUNK_HEADER_BYTES: usize = 24;
/// Bytes of a [`Record`].
pub const RECORD_BYTES: usize = 40;

/// `Record::kind`: a parallel region starts on its encountering thread (`region` the new
/// region's id, `other` the enclosing region's id, 0 for none, `codeptr` the return address of
/// the program's call to the runtime that started it).
pub const PARALLEL_BEGIN: u32 = 1;
/// `Record::kind`: the region `region` ends on its encountering thread.
pub const PARALLEL_END: u32 = 2;
/// `Record::kind`: this thread starts its implicit task of region `region` (`index`: its
/// number in the team; the encountering thread's own task, number 0, is not recorded: it
/// begins and ends with the region).
pub const TASK_BEGIN: u32 = 3;
/// `Record::kind`: this thread ends its implicit task of region `region`.
pub const TASK_END: u32 = 4;

/// What precedes a thread's records in the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// [`CHUNK_MAGIC`].
    pub magic: u64,
    /// Process and thread (kernel ids) the records are of.
    pub pid: u32,
    /// See [`ChunkHeader::pid`].
    pub tid: u32,
    /// Number of records that follow.
    pub count: u32,
    /// Records this thread could not keep (its buffer could not be written), so far.
    pub lost: u32,
}

/// One event of one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// [`PARALLEL_BEGIN`], [`PARALLEL_END`], [`TASK_BEGIN`] or [`TASK_END`].
    pub kind: u32,
    /// The thread's number in the team ([`TASK_BEGIN`]), else 0.
    pub index: u32,
    /// CLOCK_MONOTONIC ns.
    pub time: u64,
    /// The region's id: unique within the process, never 0.
    pub region: u64,
    /// [`PARALLEL_BEGIN`]: the enclosing region's id (0: none); others: 0.
    pub other: u64,
    /// [`PARALLEL_BEGIN`]: the return address of the program's call that started the region
    /// (0: not given); others: 0.
    pub codeptr: u64,
}

impl ChunkHeader {
    /// The header as it is written.
    pub fn to_bytes(self) -> [u8; CHUNK_HEADER_BYTES] {
        let mut b = [0; CHUNK_HEADER_BYTES];
        b[..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.tid.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..24].copy_from_slice(&self.lost.to_le_bytes());
        b
    }

    /// The header at the front of `b`, if `b` is long enough.
    pub fn from_bytes(b: &[u8]) -> Option<ChunkHeader> {
        let b: &[u8; CHUNK_HEADER_BYTES] = b.get(..CHUNK_HEADER_BYTES)?.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(ChunkHeader {
            magic: u64::from_le_bytes(b[..8].try_into().ok()?),
            pid: u32_at(8),
            tid: u32_at(12),
            count: u32_at(16),
            lost: u32_at(20),
        })
    }
}

impl Record {
    /// The record as it is written.
    pub fn to_bytes(self) -> [u8; RECORD_BYTES] {
        let mut b = [0; RECORD_BYTES];
        b[..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.index.to_le_bytes());
        b[8..16].copy_from_slice(&self.time.to_le_bytes());
        b[16..24].copy_from_slice(&self.region.to_le_bytes());
        b[24..32].copy_from_slice(&self.other.to_le_bytes());
        b[32..40].copy_from_slice(&self.codeptr.to_le_bytes());
        b
    }

    /// The record at the front of `b`, if `b` is long enough.
    pub fn from_bytes(b: &[u8]) -> Option<Record> {
        let b: &[u8; RECORD_BYTES] = b.get(..RECORD_BYTES)?.try_into().ok()?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Record {
            kind: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            index: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            time: u64_at(8),
            region: u64_at(16),
            other: u64_at(24),
            codeptr: u64_at(32),
        })
    }
}
