//! How `--data` follows heap blocks: the allocation shim preloaded into a dynamically linked
//! command, uprobes on the allocator of a static one or of a process attached to (root only),
//! or why neither can be done.

use std::ffi::OsString;
use std::path::Path;

use object::read::elf::ProgramHeader as _;

use crate::sampler::data::alloc::AllocTracker;
use crate::sampler::data::uprobes::{allocator_module, allocator_probes, Probe};

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
