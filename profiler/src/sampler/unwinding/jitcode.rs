//! Unwinding through JIT code by the unwinding information its jitdump carries. A JIT that
//! writes a jitdump (perf's format: `jit-PID.dump`, mapped executable so that profilers find it)
//! may precede a function's code-load record with an unwinding-info record: an `.eh_frame` for
//! the code and its `.eh_frame_hdr`, addressed as if they followed the code in memory (V8's
//! `--perf-prof-unwinding-info`, CPython 3.13's `-X perf_jit`). Code that keeps no frame pointer
//! can only be unwound that way. The file grows while the program runs, so it is read on demand:
//! when a walk meets an address no module covers, the records appended since the last read are
//! taken, and each loaded function with unwinding information becomes a framehop module.

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};

use crate::format::jitdump::{
    first_record, monotonic_times, records, u64_at, CODE_LOAD, CODE_MOVE, UNWINDING_INFO,
};
use crate::sampler::unwinding::image::SectionBytes;

/// One process's jitdump, read so far.
#[derive(Debug, Clone)]
pub(crate) struct JitDump {
    /// The file, as hpcrun-rs reads it (through the process's root where it is elsewhere).
    file: PathBuf,
    /// Bytes of the file taken: the header and whole records.
    read_to: u64,
    /// The unwinding data (eh_frame then eh_frame_hdr) and the header's size, waiting for the
    /// code-load record it describes.
    pending: Option<(Vec<u8>, usize)>,
    /// The code ranges given unwinding information so far.
    covered: Vec<Range<u64>>,
    /// Every code-load and code-move record so far, in record order: where the code went and
    /// when (`None`: the dump's times are not the samples' clock).
    loads: Vec<(Option<Range<u64>>, Option<u64>)>,
    /// Whether the dump's record times are CLOCK_MONOTONIC ns.
    monotonic: bool,
}

impl JitDump {
    /// A jitdump to read at `file`.
    pub(crate) fn new(file: PathBuf) -> JitDump {
        JitDump {
            file,
            read_to: 0,
            pending: None,
            covered: Vec::new(),
            loads: Vec::new(),
            monotonic: false,
        }
    }

    /// The load (its number among the code-load and code-move records) whose code was at
    /// `avma` at `time`: of the loads there, the last one made by then (the first, where the
    /// sample came before all of them); `None` where no load covers the address.
    pub(crate) fn load_at(&self, avma: u64, time: u64) -> Option<u32> {
        let mut there = (self.loads.iter().enumerate())
            .filter(|(_, (r, _))| r.as_ref().is_some_and(|r| r.contains(&avma)));
        let first = there.next()?;
        let by_then = |t: &Option<u64>| t.is_some_and(|t| t <= time);
        let last = there.rfind(|(_, (_, t))| by_then(t));
        Some(last.unwrap_or(first).0 as u32)
    }

    /// Whether `avma` is in code this jitdump gave unwinding information for.
    pub(crate) fn covers(&self, avma: u64) -> bool {
        self.covered.iter().any(|r| r.contains(&avma))
    }

    /// The framehop modules of the functions loaded with unwinding information in the records
    /// appended since the last call (none where the file cannot be read or is no jitdump), each
    /// with the start of the modules given before whose code it replaces.
    pub(crate) fn take_new(&mut self) -> Vec<(Module<SectionBytes>, Vec<u64>)> {
        let Some(bytes) = self.appended() else {
            return Vec::new();
        };
        if self.read_to == 0 {
            self.monotonic = monotonic_times(&bytes);
        }
        let at = match self.read_to {
            0 => first_record(&bytes),
            _ => Some(0),
        };
        let Some(at) = at else {
            return Vec::new();
        };
        let (records, end) = records(&bytes, at);
        let mut modules = Vec::new();
        for record in records {
            let time = Some(record.time).filter(|_| self.monotonic);
            match record.id {
                UNWINDING_INFO => self.pending = unwinding_data(record.body),
                CODE_MOVE => self.loads.push((moved_to(record.body), time)),
                CODE_LOAD => {
                    self.loads.push((loaded_at(record.body), time));
                    let unwinding = self.pending.take();
                    let made =
                        unwinding.and_then(|(data, hdr)| self.module(record.body, data, hdr));
                    modules.extend(made);
                }
                _ => {}
            }
        }
        self.read_to += end as u64;
        modules
    }

    /// The file's bytes from where the last read stopped.
    fn appended(&self) -> Option<Vec<u8>> {
        let mut file = std::fs::File::open(&self.file).ok()?;
        file.seek(SeekFrom::Start(self.read_to)).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// The module of the function a code-load record (`body`, after its prefix) loads, unwound
    /// by `data` (eh_frame, then an eh_frame_hdr of `hdr` bytes) placed right after its code.
    fn module(
        &mut self,
        body: &[u8],
        data: Vec<u8>,
        hdr: usize,
    ) -> Option<(Module<SectionBytes>, Vec<u64>)> {
        let (code, size) = (u64_at(body, 16)?, u64_at(body, 24)?);
        let end = code.checked_add(size)?;
        let eh_end = end.checked_add((data.len() - hdr) as u64)?;
        let len = data.len();
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(data);
        let part = |range: Range<usize>| SectionBytes::new(owner.clone(), range);
        let info = ExplicitModuleSectionInfo {
            base_svma: code,
            text_svma: Some(code..end),
            eh_frame_svma: Some(end..eh_end),
            eh_frame: Some(part(0..len - hdr)),
            eh_frame_hdr_svma: Some(eh_end..eh_end + hdr as u64),
            eh_frame_hdr: Some(part(len - hdr..len)),
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let replaced = (self.covered.iter())
            .filter(|r| r.start < end && code < r.end)
            .map(|r| r.start)
            .collect();
        self.covered.retain(|r| r.end <= code || end <= r.start);
        self.covered.push(code..end);
        Some((Module::new("[jit]".into(), code..end, code, info), replaced))
    }
}

/// The code a code-load record's body places: its address and size.
fn loaded_at(body: &[u8]) -> Option<Range<u64>> {
    let (code, size) = (u64_at(body, 16)?, u64_at(body, 24)?);
    Some(code..code.checked_add(size)?)
}

/// Where a code-move record's body moves code to: the new address and size.
fn moved_to(body: &[u8]) -> Option<Range<u64>> {
    let (to, size) = (u64_at(body, 24)?, u64_at(body, 32)?);
    Some(to..to.checked_add(size)?)
}

/// An unwinding-info record's data (`body` after its prefix: unwinding size, eh_frame_hdr
/// size, mapped size, then the data) and the header's size; `None` where the sizes disagree.
fn unwinding_data(body: &[u8]) -> Option<(Vec<u8>, usize)> {
    let (size, hdr) = (u64_at(body, 0)? as usize, u64_at(body, 8)? as usize);
    let data = body.get(24..24usize.checked_add(size)?)?;
    (hdr > 0 && hdr < size).then(|| (data.to_vec(), hdr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::jitdump::MAGIC;

    /// Bytes of every record's prefix: id, size, time.
    const PREFIX: usize = 16;

    /// A record: id, size, time, then `body`.
    fn record(id: u32, body: &[u8]) -> Vec<u8> {
        let mut r = id.to_le_bytes().to_vec();
        r.extend(((PREFIX + body.len()) as u32).to_le_bytes());
        r.extend(7u64.to_le_bytes());
        r.extend(body);
        r
    }

    fn code_load(addr: u64, size: u64) -> Vec<u8> {
        let mut body = vec![0u8; 16];
        body.extend(addr.to_le_bytes());
        body.extend(size.to_le_bytes());
        body.extend(1u64.to_le_bytes());
        body.extend(b"f\0");
        record(CODE_LOAD, &body)
    }

    #[test]
    fn an_address_is_named_by_the_last_load_made_by_the_samples_time() {
        let mut dump = JitDump::new(PathBuf::from("jit-1.dump"));
        dump.loads = vec![
            (Some(0x1000..0x1100), Some(100)),
            (Some(0x2000..0x2100), Some(150)),
            (None, Some(160)),
            (Some(0x1000..0x1040), Some(200)),
        ];
        assert_eq!(dump.load_at(0x1010, 150), Some(0));
        assert_eq!(dump.load_at(0x1010, 250), Some(3), "replaced at 200");
        assert_eq!(dump.load_at(0x1080, 250), Some(0), "outside the new code");
        assert_eq!(
            dump.load_at(0x1010, 50),
            Some(0),
            "before every load: the first"
        );
        assert_eq!(dump.load_at(0x3000, 250), None);
    }

    #[test]
    fn only_code_with_unwinding_information_becomes_a_module_and_records_are_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jit-1.dump");
        let mut bytes = MAGIC.to_le_bytes().to_vec();
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(40u32.to_le_bytes());
        bytes.resize(40, 0);
        bytes.extend(code_load(0x1000, 0x20)); // no unwinding information: no module
        let mut info = Vec::new();
        for v in [12u64, 4, 0] {
            info.extend(v.to_le_bytes());
        }
        info.extend([0xaa; 12]);
        bytes.extend(record(UNWINDING_INFO, &info));
        bytes.extend(code_load(0x2000, 0x10));
        let half = code_load(0x3000, 0x10);
        bytes.extend(&half[..10]); // a record still being written
        std::fs::write(&path, &bytes).unwrap();
        let mut dump = JitDump::new(path.clone());
        let modules = dump.take_new();
        assert_eq!(modules.len(), 1);
        assert_eq!(modules[0].0.avma_range(), 0x2000..0x2010);
        assert!(dump.covers(0x200f) && !dump.covers(0x1000) && !dump.covers(0x2010));
        assert!(dump.take_new().is_empty(), "nothing new");
        // The rest of the record arrives, with an unwinding record before it this time.
        bytes.truncate(bytes.len() - 10);
        bytes.extend(record(UNWINDING_INFO, &info));
        bytes.extend(half);
        std::fs::write(&path, &bytes).unwrap();
        let modules = dump.take_new();
        assert_eq!(modules.len(), 1);
        assert_eq!(modules[0].0.avma_range(), 0x3000..0x3010);
        assert!(modules[0].1.is_empty(), "it replaces nothing");
    }
}
