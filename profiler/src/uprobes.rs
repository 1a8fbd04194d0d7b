//! Allocation tracking where the shim cannot be preloaded (`--data` on a statically linked
//! command, or attached to a running process with `-p`, as root): uprobes on the program's own allocator, whose hits arrive as samples in
//! the same rings as every other event, so they are merged in time order for free.
//!
//! An entry probe on `malloc`, `calloc` and `realloc` samples the argument registers and the
//! caller's stack (its first word is the return address: the same layout as the shim's
//! records, so allocations are unwound and classified by the same code); a return probe
//! samples `rax`, the block. `free` needs its entry only. Every call traps (2-3 µs here, 12 µs
//! where the first instruction must be single-stepped), so this costs far more than the shim.
//! Since a 2025 kernel change, uprobes need CAP_SYS_ADMIN; other users get a notice instead.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol};
use perf_event_open_sys::bindings as sys;

/// Where the kernel lists the uprobe PMU's type number.
const UPROBE_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";

/// `config` bit of a return probe (`/sys/bus/event_source/devices/uprobe/format/retprobe`).
const RETPROBE: u64 = 1;

/// The registers a probe samples: AX (the result), SI and DI (the arguments), BP, SP, IP.
const PROBE_REGS: u64 = (1 << 0) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);
/// perf's numbers of those registers.
pub(crate) const REG_AX: u64 = 0;
/// See [`REG_AX`].
pub(crate) const REG_SI: u64 = 4;
/// See [`REG_AX`].
pub(crate) const REG_DI: u64 = 5;

/// Which allocator function a probe is on, and whether at its entry or return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbePoint {
    /// `malloc(size)`, entered.
    MallocEntry,
    /// `calloc(n, size)`, entered.
    CallocEntry,
    /// `realloc(ptr, size)`, entered.
    ReallocEntry,
    /// One of the three returned its block.
    Return,
    /// `free(ptr)`, entered.
    FreeEntry,
}

/// One probe to open: its attribute (pointing at `_path`, which must outlive the opening).
pub(crate) struct Probe {
    /// What it marks.
    pub point: ProbePoint,
    /// Its attribute, complete but for the run-wide options set by the caller.
    pub attr: sys::perf_event_attr,
    _path: CString,
}

/// The probes on the allocator of the ELF program at `path`, whose user-stack copies at
/// allocation entries are `stack_size` bytes; an error says why there are none.
pub(crate) fn allocator_probes(path: &Path, stack_size: u32) -> Result<Vec<Probe>, String> {
    let pmu: u32 = std::fs::read_to_string(UPROBE_TYPE)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or("the kernel has no uprobe event source")?;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let elf = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let offset = |name: &str| file_offset(&elf, name).ok_or(format!("no `{name}` symbol"));
    let points = [
        ("malloc", ProbePoint::MallocEntry),
        ("calloc", ProbePoint::CallocEntry),
        ("realloc", ProbePoint::ReallocEntry),
        ("free", ProbePoint::FreeEntry),
    ];
    let mut probes = Vec::new();
    for (name, entry) in points {
        let at = offset(name)?;
        probes.push(probe(pmu, path, at, entry, stack_size));
        if entry != ProbePoint::FreeEntry {
            probes.push(probe(pmu, path, at, ProbePoint::Return, 0));
        }
    }
    Ok(probes)
}

/// The module of running process `pid` that defines `malloc` (its C library, or the program
/// itself when statically linked), from its mappings.
pub(crate) fn allocator_module(pid: u32) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut paths: Vec<&str> = maps
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .collect();
    paths.dedup();
    paths.into_iter().map(std::path::PathBuf::from).find(|p| {
        std::fs::read(p).is_ok_and(|bytes| {
            object::File::parse(&*bytes).is_ok_and(|elf| file_offset(&elf, "malloc").is_some())
        })
    })
}

/// The file offset of function symbol `name`'s first instruction.
fn file_offset(elf: &object::File<'_>, name: &str) -> Option<u64> {
    let sym = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.is_definition())?;
    elf.segments().find_map(|seg| {
        let (file_start, file_size) = seg.file_range();
        let rel = sym.address().checked_sub(seg.address())?;
        (rel < file_size).then_some(file_start + rel)
    })
}

fn probe(pmu: u32, path: &Path, offset: u64, point: ProbePoint, stack_size: u32) -> Probe {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
    let mut a = sys::perf_event_attr {
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        type_: pmu,
        config: if point == ProbePoint::Return {
            RETPROBE
        } else {
            0
        },
        ..Default::default()
    };
    a.__bindgen_anon_3.config1 = path.as_ptr() as u64;
    a.__bindgen_anon_4.config2 = offset;
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = (sys::PERF_SAMPLE_IDENTIFIER
        | sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU
        | sys::PERF_SAMPLE_REGS_USER) as u64;
    a.sample_regs_user = PROBE_REGS;
    if stack_size > 0 {
        a.sample_type |= sys::PERF_SAMPLE_STACK_USER as u64;
        a.sample_stack_user = stack_size;
    }
    a.set_inherit(1);
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    Probe {
        point,
        attr: a,
        _path: path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_allocator_is_found_and_probes_point_at_its_functions() {
        let module = allocator_module(std::process::id()).expect("a module defining malloc");
        assert!(
            module.to_string_lossy().contains("libc"),
            "{}",
            module.display()
        );
        let bytes = std::fs::read(&module).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let malloc = file_offset(&elf, "malloc").unwrap();
        let free = file_offset(&elf, "free").unwrap();
        assert_ne!(malloc, free);
        if std::path::Path::new(UPROBE_TYPE).exists() {
            let probes = allocator_probes(&module, 1024).unwrap();
            let points: Vec<ProbePoint> = probes.iter().map(|p| p.point).collect();
            assert_eq!(
                points.iter().filter(|&&p| p == ProbePoint::Return).count(),
                3
            );
            assert!(probes.iter().any(|p| p.point == ProbePoint::FreeEntry
                && unsafe { p.attr.__bindgen_anon_4.config2 } == free));
        }
    }
}
