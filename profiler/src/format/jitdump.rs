//! perf's jitdump format, as JITs write it to tell profilers what they compiled (`jit-PID.dump`:
//! CPython 3.13's `-X perf_jit`, V8's `--perf-prof`, Java agents): a header, then records, each
//! `id, size, time` and a body. hpcrun-rs reads the unwinding-info records while the program
//! runs; hpcprof-rs names the code of the code-load and code-move records.

/// The first four bytes of a jitdump written on a little-endian machine ("JiTD").
pub const MAGIC: u32 = 0x4A69_5444;
/// Record id: a function's code loaded (address, size, index, name, code).
pub const CODE_LOAD: u32 = 0;
/// Record id: a function's code moved (old and new address, size, index).
pub const CODE_MOVE: u32 = 1;
/// Record id: the unwinding information (eh_frame, eh_frame_hdr) of the next code loaded.
pub const UNWINDING_INFO: u32 = 4;
/// Bytes of every record's prefix: id, size, time.
const PREFIX: usize = 16;

/// One whole record: its id and its body (what follows the prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'b> {
    /// [`CODE_LOAD`], [`CODE_MOVE`], [`UNWINDING_INFO`] or another.
    pub id: u32,
    /// When it was written, in the JIT's clock (CLOCK_MONOTONIC ns, the samples' clock, unless
    /// the header's flags say the processor's time-stamp counter).
    pub time: u64,
    /// The record's bytes after its prefix.
    pub body: &'b [u8],
}

/// The header's flag saying that record times are the processor's time-stamp counter, not
/// CLOCK_MONOTONIC.
pub const ARCH_TIMESTAMP: u64 = 1;

/// Whether the record times of a jitdump whose bytes begin with `bytes` are CLOCK_MONOTONIC
/// ns (the header's flags at offset 32 do not say the time-stamp counter).
pub fn monotonic_times(bytes: &[u8]) -> bool {
    u64_at(bytes, 32).is_some_and(|flags| flags & ARCH_TIMESTAMP == 0)
}

/// Where the records of a jitdump's bytes begin (after its header); `None` where the bytes are
/// no jitdump.
pub fn first_record(bytes: &[u8]) -> Option<usize> {
    if u32_at(bytes, 0)? != MAGIC {
        return None;
    }
    Some(u32_at(bytes, 8)? as usize).filter(|&at| at <= bytes.len())
}

/// The whole records of `bytes` from offset `at`, and the offset after the last of them (a
/// record still being written, or a malformed one, ends them).
pub fn records(bytes: &[u8], mut at: usize) -> (Vec<Record<'_>>, usize) {
    let mut out = Vec::new();
    while let (Some(id), Some(size)) = (u32_at(bytes, at), u32_at(bytes, at + 4)) {
        let size = size as usize;
        let Some(body) = bytes.get(at + PREFIX..at + size).filter(|_| size >= PREFIX) else {
            break;
        };
        let time = u64_at(bytes, at + 8).unwrap_or(0);
        out.push(Record { id, time, body });
        at += size;
    }
    (out, at)
}

/// The little-endian `u32` at `at`, if the bytes reach that far.
pub fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The little-endian `u64` at `at`, if the bytes reach that far.
pub fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_records_are_read_and_a_partial_one_waits() {
        let mut bytes = MAGIC.to_le_bytes().to_vec();
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(40u32.to_le_bytes());
        bytes.resize(40, 0);
        for (id, body) in [(CODE_LOAD, 8usize), (7, 0)] {
            bytes.extend(id.to_le_bytes());
            bytes.extend(((PREFIX + body) as u32).to_le_bytes());
            bytes.extend(0u64.to_le_bytes());
            bytes.extend(vec![0xab; body]);
        }
        let whole = bytes.len();
        bytes.extend(UNWINDING_INFO.to_le_bytes());
        bytes.extend(64u32.to_le_bytes()); // its body is not there yet
        let at = first_record(&bytes).unwrap();
        assert_eq!(at, 40);
        let (records, end) = records(&bytes, at);
        assert_eq!(records.len(), 2);
        assert_eq!(
            (records[0].id, records[0].body),
            (CODE_LOAD, &[0xab; 8][..])
        );
        assert_eq!((records[1].id, records[1].body.len()), (7, 0));
        assert_eq!(end, whole);
        assert_eq!(first_record(b"not a dump"), None);
    }
}
