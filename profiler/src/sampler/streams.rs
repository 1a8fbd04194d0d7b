//! The record streams of one run and their merge into one time order: the perf rings (one
//! per CPU) and, with `--data`, the allocation tracker's rings. A mapping reported on one CPU
//! must be known before a sample taken on another, and a heap block must be live exactly
//! between its allocation and its free, so every record reaches the recorder in the order of
//! its timestamp (CLOCK_MONOTONIC on both sides).

use std::ffi::OsString;
use std::path::Path;

use object::read::elf::ProgramHeader as _;

use crate::sampler::capture::ring::Ring;
use crate::sampler::data::alloc::{AllocEvent, AllocTracker};
use crate::sampler::data::uprobes::{allocator_module, allocator_probes, Probe};
use crate::sampler::record::recorder::Recorder;

/// The kernel's CLOCK_MONOTONIC in ns, the clock the samples are stamped with.
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(u64::MAX)
}

/// Hand the recorder every record that is out of every stream: all of them once the command
/// has ended (`last`), otherwise up to now, or up to the start of an allocation call still in
/// progress (its record, stamped when it returns, comes later and must not be overtaken).
pub(crate) fn drain(
    rings: &mut [Ring],
    tracker: Option<&mut AllocTracker>,
    recorder: &mut Recorder,
    last: bool,
) {
    let now = if last { u64::MAX } else { monotonic_ns() };
    let mut allocs: Vec<AllocEvent> = Vec::new();
    let cutoff = match tracker {
        Some(t) => t.drain(now, &mut allocs),
        None => now,
    };
    rings.iter_mut().for_each(Ring::fill);
    let mut allocs = allocs.into_iter().peekable();
    loop {
        let mut best: Option<(usize, u64)> = None;
        for (i, ring) in rings.iter().enumerate() {
            if let Some(rec) = ring.peek() {
                let ts = recorder.timestamp(&rec);
                if ts <= cutoff && best.is_none_or(|(_, b)| ts < b) {
                    best = Some((i, ts));
                }
            }
        }
        match (best, allocs.peek()) {
            (Some((_, ts)), Some(a)) if a.t_return <= ts => {
                recorder.allocation(a);
                allocs.next();
            }
            (None, Some(a)) => {
                recorder.allocation(a);
                allocs.next();
            }
            (Some((i, _)), _) => {
                if let Some(rec) = rings[i].peek() {
                    recorder.handle(&rec);
                }
                rings[i].advance();
            }
            (None, None) => break,
        }
    }
    for ring in rings.iter_mut() {
        ring.release();
    }
}

/// How `--data` follows heap blocks for a launched command.
pub(crate) enum HeapSource {
    /// The allocation shim, preloaded into the command.
    Shim(AllocTracker),
    /// Uprobes on a statically linked command's own allocator (root only).
    Probes(Vec<Probe>),
}

/// What `--data` can do about heap blocks for the command `argv` (the program at `program`):
/// preload the shim, or probe a static program's allocator as root; else why heap blocks cannot
/// be tracked (the run goes on without them; statics and stack are still attributed).
pub(crate) fn heap_tracking(
    argv: &[OsString],
    program: &Path,
    min_size: u64,
) -> Result<HeapSource, String> {
    if !is_static(program) {
        let tracker = AllocTracker::new(min_size, ALLOC_STACK_BYTES).map_err(|e| e.to_string())?;
        return Ok(HeapSource::Shim(tracker));
    }
    let name = argv[0].to_string_lossy();
    if !nix::unistd::geteuid().is_root() {
        return Err(format!(
            "{name} is statically linked, so the allocation shim cannot be preloaded, and \
             uprobes on its allocator need CAP_SYS_ADMIN (run as root)"
        ));
    }
    let probes = allocator_probes(program, ALLOC_STACK_BYTES).map_err(|why| {
        format!("{name} is statically linked and its allocator cannot be probed: {why}")
    })?;
    Ok(HeapSource::Probes(probes))
}

/// How `--data` follows heap blocks of a process attached to (`-p PID`): uprobes on the
/// allocator it maps, as root (blocks allocated before the attach stay unknown); else why not.
pub(crate) fn heap_tracking_attached(pid: u32) -> Result<Vec<Probe>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "the allocation shim cannot be preloaded into a running process, and \
                    uprobes on its allocator need CAP_SYS_ADMIN (run as root)"
                .to_string(),
        );
    }
    let module = allocator_module(pid).ok_or("no mapped module of the process defines malloc")?;
    allocator_probes(&module, ALLOC_STACK_BYTES).map_err(|why| {
        format!(
            "{}: its allocator cannot be probed: {why}",
            module.display()
        )
    })
}

/// Bytes of the caller's stack the shim copies at each tracked allocation, for its calling
/// context (the copy stops at the thread's stack end, usually far sooner).
const ALLOC_STACK_BYTES: u32 = 8192;

/// Whether the ELF program at `path` has no program interpreter (no dynamic loader to
/// preload a library into). Unreadable files count as dynamic: exec will say what is wrong.
fn is_static(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    object::File::parse(&*bytes)
        .map(|f| match f {
            object::File::Elf64(elf) => !elf
                .elf_program_headers()
                .iter()
                .any(|ph| ph.p_type(elf.endian()) == object::elf::PT_INTERP),
            other => other.format() != object::BinaryFormat::Elf,
        })
        .unwrap_or(false)
}
