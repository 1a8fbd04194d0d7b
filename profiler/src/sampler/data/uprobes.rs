//! Allocation tracking where the shim cannot be preloaded (`--data` on a statically linked
//! command, or attached to a running process with `-p`, as root): uprobes on the program's own
//! allocator, whose hits arrive as samples in the same rings as every other event, so they are
//! merged in time order for free.
//!
//! An entry probe on `malloc`, `calloc`, `realloc`, `memalign`, `aligned_alloc`, `valloc`,
//! `pvalloc` and `posix_memalign` samples the argument registers and the caller's stack (its
//! first word is the return address: the same layout as the shim's records, so allocations are
//! unwound and classified by the same code); a return probe samples `rax`, the block.
//! `posix_memalign` returns its block through its first argument instead: its return probe also
//! copies the top of the stack, where that pointer usually is (a local of the caller), and the
//! recorder reads the block there, exactly as it was when the call returned. A pointer
//! elsewhere (a static, a heap structure) is read from the process's memory when the record is
//! handled, usually within milliseconds: not exact where the program writes it again sooner,
//! and lost where the process has ended by then. `free` needs its
//! entry only. The aligned functions are probed where the module defines them (a function
//! defined under two names, as glibc 2.36's `memalign` and `aligned_alloc`, once).
//!
//! Every call traps, so this costs far more than the shim: about 1 µs per hit where the kernel
//! emulates the probed instruction, 18 µs where it single-steps it; [`placement`] puts each
//! probe on an emulated instruction where that is exact. Through `hpcrun-rs --data` (8 KiB of
//! stack copied at each allocation's entry), a malloc+free pair of 4 KiB costs 3.8-5.2 µs
//! (22.5-26 µs with `free` probed on its first instruction and copying the stack too). Closing
//! a probe's event at the end costs about 0.1 s each (the kernel unregisters it after a grace
//! period): 2.6 s for the 25 events of a 2-CPU run. Since a 2025 kernel change, uprobes
//! need CAP_SYS_ADMIN; other users get a notice instead.

mod placement;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use perf_event_open_sys::bindings as sys;

/// Where the kernel lists the uprobe PMU's type number.
const UPROBE_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";

/// `config` bit of a return probe (`/sys/bus/event_source/devices/uprobe/format/retprobe`).
const RETPROBE: u64 = 1;

/// The registers a probe samples: AX (the result), DX, SI and DI (the arguments), BP, SP, IP.
const PROBE_REGS: u64 = (1 << 0) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);
/// perf's numbers of those registers.
pub(crate) const REG_AX: u64 = 0;
/// See [`REG_AX`].
pub(crate) const REG_DX: u64 = 3;
/// See [`REG_AX`].
pub(crate) const REG_SI: u64 = 4;
/// See [`REG_AX`].
pub(crate) const REG_DI: u64 = 5;

/// Bytes of stack the return probe of `posix_memalign` copies: the out-pointer is read there
/// when it points into them (a local of the caller, within its frame just above).
pub(crate) const OUT_POINTER_STACK: u32 = 2048;

/// Which allocator function a probe is on, and whether at its entry or return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbePoint {
    /// `malloc(size)`, entered.
    MallocEntry,
    /// `calloc(n, size)`, entered.
    CallocEntry,
    /// `realloc(ptr, size)`, entered.
    ReallocEntry,
    /// `memalign(alignment, size)` or `aligned_alloc(alignment, size)`, entered.
    MemalignEntry,
    /// `valloc(size)` or `pvalloc(size)`, entered (the size recorded is the one asked for, as
    /// the shim records it, not pvalloc's rounding up to whole pages).
    VallocEntry,
    /// `posix_memalign(&out, alignment, size)`, entered.
    PosixMemalignEntry,
    /// One of the functions returning its block in `rax` returned.
    Return,
    /// `posix_memalign` returned (0 when the block is in `out`); the probe copies the stack.
    ReturnOut,
    /// `free(ptr)`, entered.
    FreeEntry,
}

/// The functions probed, what their entry is, and whether a module without them has no usable
/// allocator (the others are probed where defined).
const FUNCTIONS: [(&str, ProbePoint, bool); 9] = [
    ("malloc", ProbePoint::MallocEntry, true),
    ("calloc", ProbePoint::CallocEntry, true),
    ("realloc", ProbePoint::ReallocEntry, true),
    ("free", ProbePoint::FreeEntry, true),
    ("memalign", ProbePoint::MemalignEntry, false),
    ("aligned_alloc", ProbePoint::MemalignEntry, false),
    ("valloc", ProbePoint::VallocEntry, false),
    ("pvalloc", ProbePoint::VallocEntry, false),
    ("posix_memalign", ProbePoint::PosixMemalignEntry, false),
];

/// One probe to open: its attribute (pointing at `_path`, which must outlive the opening).
pub(crate) struct Probe {
    /// What it marks.
    pub point: ProbePoint,
    /// The function's name (the first of its names probed).
    #[cfg_attr(not(test), allow(dead_code, reason = "checked by the tests"))]
    pub function: &'static str,
    /// Bytes from the function's first instruction to the probed one (see [`placement`]).
    #[cfg_attr(not(test), allow(dead_code, reason = "checked by the tests"))]
    pub moved: u64,
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
    let mut probes = Vec::new();
    let mut probed: Vec<u64> = Vec::new();
    for (name, entry, required) in FUNCTIONS {
        let Some(site) = probe_site(&elf, name) else {
            if required {
                return Err(format!("no `{name}` symbol"));
            }
            continue;
        };
        if probed.contains(&site.offset) {
            continue; // another name of a function already probed
        }
        probed.push(site.offset);
        let entry_stack = if entry == ProbePoint::FreeEntry {
            0 // a free needs its pointer only
        } else {
            stack_size
        };
        probes.push(probe(pmu, path, &site, name, entry, entry_stack));
        match entry {
            ProbePoint::FreeEntry => {}
            ProbePoint::PosixMemalignEntry => probes.push(probe(
                pmu,
                path,
                &site,
                name,
                ProbePoint::ReturnOut,
                OUT_POINTER_STACK,
            )),
            _ => probes.push(probe(pmu, path, &site, name, ProbePoint::Return, 0)),
        }
    }
    Ok(probes)
}

/// The module of running process `pid` that defines `malloc` (its C library, or the program
/// itself when statically linked), from its mappings.
pub(crate) fn allocator_module(pid: u32) -> Option<std::path::PathBuf> {
    let maps = crate::format::procmaps::read(Some(pid))?;
    let mut paths: Vec<&str> = crate::format::procmaps::lines(&maps)
        .filter(|l| l.executable() && l.path.starts_with('/'))
        .map(|l| l.path)
        .collect();
    paths.dedup();
    paths.into_iter().map(std::path::PathBuf::from).find(|p| {
        std::fs::read(p).is_ok_and(|bytes| {
            object::File::parse(&*bytes).is_ok_and(|elf| file_offset(&elf, "malloc").is_some())
        })
    })
}

/// Where a function is probed: the file offset of the probed instruction, and how far past
/// the function's first instruction it is.
struct ProbeSite {
    offset: u64,
    moved: u64,
}

/// Where to probe function `name`: on the instruction [`placement::probe_offset`] chooses
/// among its first bytes (its entry when they cannot be read).
fn probe_site(elf: &object::File<'_>, name: &str) -> Option<ProbeSite> {
    let sym = function_symbol(elf, name)?;
    let code = sym
        .section_index()
        .and_then(|i| elf.section_by_index(i).ok())
        .and_then(|section| {
            let data = section.data().ok()?;
            let start = usize::try_from(sym.address().checked_sub(section.address())?).ok()?;
            let len = usize::try_from(sym.size()).ok()?.clamp(1, 64);
            data.get(start..(start + len).min(data.len()))
        })
        .unwrap_or_default();
    let moved = placement::probe_offset(code, sym.address());
    Some(ProbeSite {
        offset: segment_offset(elf, sym.address() + moved)?,
        moved,
    })
}

/// The defined function symbol `name`, from the symbol table or the dynamic one.
fn function_symbol<'d, 'f>(
    elf: &'f object::File<'d>,
    name: &str,
) -> Option<object::Symbol<'d, 'f>> {
    elf.symbols()
        .chain(elf.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.is_definition())
}

/// The file offset of function symbol `name`'s first instruction.
fn file_offset(elf: &object::File<'_>, name: &str) -> Option<u64> {
    segment_offset(elf, function_symbol(elf, name)?.address())
}

/// The file offset of link-time address `addr`, through the segment that loads it.
fn segment_offset(elf: &object::File<'_>, addr: u64) -> Option<u64> {
    elf.segments().find_map(|seg| {
        let (file_start, file_size) = seg.file_range();
        let rel = addr.checked_sub(seg.address())?;
        (rel < file_size).then_some(file_start + rel)
    })
}

fn probe(
    pmu: u32,
    path: &Path,
    site: &ProbeSite,
    function: &'static str,
    point: ProbePoint,
    stack_size: u32,
) -> Probe {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
    let mut attr = probe_attr(pmu, site.offset, point, stack_size);
    attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
    Probe {
        point,
        function,
        moved: site.moved,
        attr,
        _path: path,
    }
}

/// The attribute of a probe of kind `point` at file `offset` (its path still to be set in
/// `config1`), copying `stack_size` bytes of stack with each hit.
pub(crate) fn probe_attr(
    pmu: u32,
    offset: u64,
    point: ProbePoint,
    stack_size: u32,
) -> sys::perf_event_attr {
    let returns = matches!(point, ProbePoint::Return | ProbePoint::ReturnOut);
    let mut a = sys::perf_event_attr {
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        type_: pmu,
        config: if returns { RETPROBE } else { 0 },
        ..Default::default()
    };
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
    a
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
        if !std::path::Path::new(UPROBE_TYPE).exists() {
            return;
        }
        let probes = allocator_probes(&module, 1024).unwrap();
        let count = |point| probes.iter().filter(|p| p.point == point).count();
        let entries = probes.len() - count(ProbePoint::Return) - count(ProbePoint::ReturnOut);
        // Every function but free has a return probe; posix_memalign's copies the stack.
        assert_eq!(
            count(ProbePoint::Return) + count(ProbePoint::ReturnOut),
            entries - 1
        );
        assert_eq!(count(ProbePoint::FreeEntry), 1);
        let distinct = |names: &[&str]| {
            let mut at: Vec<u64> = names.iter().filter_map(|n| file_offset(&elf, n)).collect();
            at.sort_unstable();
            at.dedup();
            at.len()
        };
        // glibc: memalign and aligned_alloc may be one function (2.36) or two (2.38).
        let aligned = [
            "memalign",
            "aligned_alloc",
            "valloc",
            "pvalloc",
            "posix_memalign",
        ];
        assert_eq!(entries, 4 + distinct(&aligned));
        for p in &probes {
            let at = unsafe { p.attr.__bindgen_anon_4.config2 };
            let entry = file_offset(&elf, p.function).unwrap();
            assert_eq!(at, entry + p.moved, "{}", p.function);
            if p.function == "free" && p.point == ProbePoint::FreeEntry {
                assert_eq!(entry, free);
            }
            assert_eq!(
                p.attr.sample_stack_user,
                match p.point {
                    ProbePoint::FreeEntry | ProbePoint::Return => 0,
                    ProbePoint::ReturnOut => OUT_POINTER_STACK,
                    _ => 1024,
                },
                "{:?}",
                p.point
            );
            // A moved probe sits on an instruction the kernel emulates.
            if p.moved > 0 {
                let code = &bytes[usize::try_from(at).unwrap()..][..16];
                let len = iced_x86::Decoder::new(64, code, 0).decode().len();
                assert!(placement::emulated(&code[..len]), "{}", p.function);
            }
        }
    }
}
