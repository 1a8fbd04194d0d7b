//! The eBPF program that reads Python's frames at each sample (`bpf/python_stack.bpf.c`, built
//! by `build.rs`), loaded with aya, attached to the sampling events, told each Python process's
//! layout, and its records read back from its ring.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use aya::programs::PerfEvent;

use crate::sampler::python::layout::CONFIG_SIZE;

/// The compiled program (empty where clang was missing at build time).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/python_stack.bpf.o"));

/// The program's most frames per record (`MAX_FRAMES`).
const MAX_FRAMES: usize = 128;

/// One interpreter frame as the program read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PyFrame {
    /// Its code object; 0 for an activation's entry frame (3.12 on).
    pub code: u64,
    /// Its instruction pointer; bit 0 set on an activation's first frame (3.11).
    pub instr: u64,
    /// The code object's `co_qualname` and `co_firstlineno` then: the same code object, read
    /// later, still has them.
    pub name: u64,
    /// See [`PyFrame::name`].
    pub first_line: u32,
}

/// What the program wrote at one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PyRecord {
    /// When (CLOCK_MONOTONIC ns, the samples' clock), just before the sample's own time.
    pub time: u64,
    /// The process and thread.
    pub pid: u32,
    /// See [`PyRecord::pid`].
    pub tid: u32,
    /// The thread's interpreter frames, innermost first.
    pub frames: Vec<PyFrame>,
    /// Whether the chain went on past the program's limit, or (`2`) the thread's state was
    /// not found.
    pub truncated: u32,
}

impl PyRecord {
    /// The record in `bytes` as the program writes it, if whole.
    pub(crate) fn parse(bytes: &[u8]) -> Option<PyRecord> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        let n = (u32_at(16)? as usize).min(MAX_FRAMES);
        if bytes.len() < 24 + 32 * n {
            return None;
        }
        let frames = (0..n)
            .map(|i| {
                let at = 24 + 32 * i;
                Some(PyFrame {
                    code: u64_at(at)?,
                    instr: u64_at(at + 8)?,
                    name: u64_at(at + 16)?,
                    first_line: u32_at(at + 24)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PyRecord {
            time: u64_at(0)?,
            pid: u32_at(8)?,
            tid: u32_at(12)?,
            frames,
            truncated: u32_at(20)?,
        })
    }
}

/// The program's map of processes to their interpreters' layouts.
pub(crate) type Configs = BpfHashMap<MapData, u32, [u8; CONFIG_SIZE]>;

/// The loaded program.
pub(crate) struct PyFrames {
    ebpf: aya::Ebpf,
}

impl PyFrames {
    /// Load the program into the kernel, with its map of processes and its ring; why not
    /// (built without clang, not root, refused).
    pub(crate) fn load() -> Result<(PyFrames, Configs, RingBuf<MapData>), String> {
        if OBJECT.is_empty() {
            return Err(
                "hpcrun-rs was built without clang, which compiles its eBPF program".into(),
            );
        }
        // The ELF reader wants the object aligned as its headers are.
        let mut words = vec![0u64; OBJECT.len().div_ceil(8)];
        let aligned: &mut [u8] = bytemuck_bytes(&mut words);
        aligned[..OBJECT.len()].copy_from_slice(OBJECT);
        let refused = |e: &dyn std::fmt::Display| {
            let root = nix::unistd::geteuid().is_root();
            match root {
                true => format!("the kernel refused hpcrun-rs's eBPF program ({e})"),
                false => {
                    format!("loading an eBPF program needs root (CAP_BPF and CAP_PERFMON): {e}")
                }
            }
        };
        let mut ebpf = aya::Ebpf::load(&aligned[..OBJECT.len()]).map_err(|e| refused(&e))?;
        let program: &mut PerfEvent = (ebpf.program_mut("python_stack"))
            .ok_or("the eBPF object has no python_stack program")?
            .try_into()
            .map_err(|e| refused(&e))?;
        program.load().map_err(|e| refused(&e))?;
        let map = ebpf
            .take_map("stacks")
            .ok_or("the eBPF object has no ring")?;
        let ring = RingBuf::try_from(map).map_err(|e| refused(&e))?;
        let map = (ebpf.take_map("configs")).ok_or("the eBPF object has no configs")?;
        let configs = BpfHashMap::try_from(map).map_err(|e| refused(&e))?;
        Ok((PyFrames { ebpf }, configs, ring))
    }

    /// Run the program at every sample of the event `event`.
    pub(crate) fn attach(&mut self, event: &OwnedFd) -> std::io::Result<()> {
        let program: &mut PerfEvent = (self.ebpf.program_mut("python_stack"))
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| std::io::Error::other("no program"))?;
        let fd = program.fd().map_err(std::io::Error::other)?;
        let prog = fd.as_fd().as_raw_fd();
        // SAFETY: an ioctl on an open perf event with a loaded program's descriptor.
        let rc = unsafe { perf_event_open_sys::ioctls::SET_BPF(event.as_raw_fd(), prog as u32) };
        match rc {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

/// `words` as bytes.
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: u64 has no padding and any byte pattern is a valid u64; the slice covers exactly
    // the words' memory and borrows them mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_cut_one_is_refused() {
        let mut bytes = Vec::new();
        bytes.extend(77u64.to_le_bytes());
        bytes.extend(5u32.to_le_bytes());
        bytes.extend(6u32.to_le_bytes());
        bytes.extend(2u32.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        for v in [0x10u64, 0x11, 0x500, 7, 0, 0, 0, 0] {
            bytes.extend(v.to_le_bytes());
        }
        let r = PyRecord::parse(&bytes).unwrap();
        assert_eq!((r.time, r.pid, r.tid), (77, 5, 6));
        let frame = |code, instr, name, first_line| PyFrame {
            code,
            instr,
            name,
            first_line,
        };
        assert_eq!(r.frames, [frame(0x10, 0x11, 0x500, 7), frame(0, 0, 0, 0)]);
        assert!(PyRecord::parse(&bytes[..bytes.len() - 1]).is_none());
    }
}
