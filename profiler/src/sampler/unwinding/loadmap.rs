//! Load maps: which module each runtime address of a process belongs to, and the one place
//! where runtime addresses ([`Avma`]) become link-time addresses ([`Svma`]).

use std::path::PathBuf;
use std::sync::Arc;

use framehop::x86_64::UnwinderX86_64;
use framehop::{Module, Unwinder};
use fxhash::FxHashMap;

use crate::format::addr::{Avma, Svma};
use crate::format::dataref::MappingKind;
use crate::format::db::{ModuleInfo, ProfileModuleId};
use crate::format::vdso::own_vdso;
use crate::sampler::unwinding::image::{Image, SectionBytes};
use crate::sampler::unwinding::jitcode::JitDump;
use crate::sampler::unwinding::namespaces::{self, Seen};

/// The framehop unwinder type used for every process.
pub type ProcessUnwinder = UnwinderX86_64<SectionBytes>;

/// The files of a run's modules, by module id: what the processes mapped (read through their
/// own view of the file tree), kept after the registry is turned into the profile's table.
pub struct ModuleFiles(Vec<Option<Arc<Image>>>);

impl ModuleFiles {
    /// The bytes of module `index` (its position in the profile's module table), if its file
    /// could be read during the run.
    pub fn bytes(&self, index: usize) -> Option<&[u8]> {
        self.0.get(index)?.as_deref().map(Image::bytes)
    }
}

/// A module file's key: its path, and the mount namespace it was seen in where that is not
/// ours (the same path there may be another file).
type FileKey = (String, Option<u64>);

/// Every module seen in the run, each file read once.
#[derive(Default)]
pub struct ModuleRegistry {
    infos: Vec<ModuleInfo>,
    /// The image of each module, by id (`None` where it could not be read).
    images: Vec<Option<Arc<Image>>>,
    /// By path, and mount namespace where the process that mapped it is not in ours.
    by_path: FxHashMap<FileKey, (ProfileModuleId, Option<Arc<Image>>)>,
    /// Modules that could not be read, with the reason (reported in the summary).
    pub unreadable: Vec<(String, String)>,
}

impl ModuleRegistry {
    /// Whether any module seen so far is an OpenMP runtime ([`crate::format::openmp`]).
    pub(crate) fn has_openmp_runtime(&self) -> bool {
        self.by_path
            .keys()
            .any(|(p, _)| crate::format::openmp::is_runtime(p))
    }

    /// The module that process `pid` mapped at `path`, reading its image the first time: the
    /// file the process sees there, which in another mount namespace (a container) is not
    /// necessarily ours.
    pub fn get(&mut self, path: &str, pid: u32) -> (ProfileModuleId, Option<Arc<Image>>) {
        let seen = match path.starts_with('[') {
            true => Seen::Here(PathBuf::from(path)),
            false => namespaces::seen_by(pid, path),
        };
        let (file, namespace) = match seen {
            Seen::Here(file) => (file, None),
            Seen::Elsewhere { namespace, path } => (path, Some(namespace)),
        };
        let key = (path.to_string(), namespace);
        if let Some((id, image)) = self.by_path.get(&key) {
            return (*id, image.clone());
        }
        let image = match path {
            "[vdso]" => own_vdso().and_then(|b| Image::from_vec(b).ok()),
            _ if path.starts_with('[') => None,
            _ => match Image::open(&file) {
                Ok(image) => Some(image),
                Err(e) => {
                    self.unreadable.push((path.to_string(), e.to_string()));
                    None
                }
            },
        }
        .map(Arc::new);
        let id = ProfileModuleId::from_index(self.infos.len());
        let build_id = image.as_ref().and_then(|i| i.build_id.clone());
        // Only a file without a build-id needs its bytes summed to be recognised later.
        let checksum = image
            .as_ref()
            .filter(|_| build_id.is_none())
            .map(|i| i.checksum());
        self.infos.push(ModuleInfo {
            path: path.to_string(),
            build_id,
            checksum,
        });
        self.by_path.insert(key, (id, image.clone()));
        self.images.push(image.clone());
        (id, image)
    }

    /// The image of module `id`, if it could be read.
    pub(crate) fn image(&self, id: ProfileModuleId) -> Option<&Image> {
        self.images.get(id.index())?.as_deref()
    }

    /// The files of every module, as the processes mapped them, for `hpcrun-rs --bundle`.
    pub fn files(&self) -> ModuleFiles {
        ModuleFiles(self.images.clone())
    }

    /// The module table for `profile.db`.
    pub fn into_infos(self) -> Vec<ModuleInfo> {
        self.infos
    }
}

/// One executable mapping of a module into a process.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    module: ProfileModuleId,
    /// `avma - svma` for every address of the mapping.
    bias: u64,
    /// The module's ELF entry point, link-time.
    entry: Option<u64>,
}

/// Bytes after an entry point within which the entry code makes its calls. The kernel starts a
/// process there with nothing above it on the stack, and the dynamic loader's entry code
/// (`_start` in ld.so) has no unwind information: a path whose outermost return address is
/// this close after an entry point has reached the thread's root. glibc's loader calls
/// `_dl_start` at once and `_dl_init` (the libraries' initialisers) 0x2b bytes in.
const ENTRY_CALL_WINDOW: u64 = 64;

/// A new executable mapping, as the kernel reported it (`PERF_RECORD_MMAP2` or `/proc/PID/maps`).
#[derive(Debug, Clone, Copy)]
pub struct MapEvent<'a> {
    /// First runtime address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of the first byte.
    pub pgoff: u64,
    /// The mapped file (or `[vdso]`, `//anon`, ...), as the process sees it.
    pub path: &'a str,
    /// The process that mapped it.
    pub pid: u32,
}

/// Runtime addresses holding a module's static data (a non-executable `PT_LOAD` segment,
/// `.bss` included), known from the module's executable mapping and its load bias.
#[derive(Debug, Clone, Copy)]
struct StaticRange {
    start: u64,
    end: u64,
    module: ProfileModuleId,
    bias: u64,
}

/// How the kernel names the allocation shim's ring mappings (its memfds).
const SHIM_RINGS: &str = "/memfd:hpcrun-alloc";

/// A non-executable mapping (`--data` asks the kernel for these), by kind.
#[derive(Debug, Clone, Copy)]
struct DataMapping {
    start: u64,
    end: u64,
    kind: MappingKind,
}

/// A process's address space: its executable mappings and the unwinder that knows them.
#[derive(Clone, Default)]
pub struct AddressSpace {
    mappings: Vec<Mapping>,
    statics: Vec<StaticRange>,
    data_mappings: Vec<DataMapping>,
    /// The jitdumps the process mapped, whose unwinding records framehop is given on demand.
    jitdumps: Vec<JitDump>,
    /// Executable memory of no file (JIT code, trampolines): where a return address may also
    /// point.
    anonymous_code: Vec<std::ops::Range<u64>>,
    /// framehop's view of the same mappings.
    pub unwinder: ProcessUnwinder,
}

impl AddressSpace {
    /// Record a new executable mapping, replacing whatever it overlaps (the kernel sends no
    /// unmap records). Anonymous mappings and kernel pseudo-mappings other than `[vdso]` have
    /// no module: their addresses stay unmapped, but are known to be code.
    pub fn map(&mut self, ev: MapEvent<'_>, modules: &mut ModuleRegistry) {
        if ev.len == 0 {
            return;
        }
        let anonymous = ev.path.is_empty() || ev.path.starts_with("//anon");
        if anonymous || (ev.path.starts_with('[') && ev.path != "[vdso]") {
            // JIT code, `[vsyscall]`, `[uprobes]`, `[anon:...]`: no file to unwind through or
            // name code with; their addresses stay unmapped, but are code.
            self.anonymous_code
                .push(ev.start..ev.start.saturating_add(ev.len));
            return;
        }
        let end = ev.start.saturating_add(ev.len);
        self.unmap(ev.start, end);
        if crate::format::bundle::jitdump_pid(ev.path).is_some() {
            self.jitdumps
                .push(JitDump::new(match namespaces::seen_by(ev.pid, ev.path) {
                    Seen::Here(file) | Seen::Elsewhere { path: file, .. } => file,
                }));
        }
        let (module, image) = modules.get(ev.path, ev.pid);
        let svma_start = image
            .as_ref()
            .and_then(|i| i.svma_of_mapping(ev.pgoff, ev.len))
            .unwrap_or(ev.pgoff);
        let bias = ev.start.wrapping_sub(svma_start);
        let pos = self.mappings.partition_point(|m| m.start < ev.start);
        self.mappings.insert(
            pos,
            Mapping {
                start: ev.start,
                end,
                module,
                bias,
                entry: image.as_ref().and_then(|i| i.entry),
            },
        );
        if let Some(image) = image {
            self.statics.retain(|r| r.module != module);
            self.statics
                .extend(image.data_segments().map(|range| StaticRange {
                    start: range.start.wrapping_add(bias),
                    end: range.end.wrapping_add(bias),
                    module,
                    bias,
                }));
            let name = ev.path.to_string();
            self.unwinder
                .add_module(Module::new(name, ev.start..end, bias, image.unwind_info()));
        }
    }

    fn unmap(&mut self, start: u64, end: u64) {
        let unwinder = &mut self.unwinder;
        self.mappings.retain(|m| {
            let overlaps = m.start < end && start < m.end;
            if overlaps {
                unwinder.remove_module(m.start);
            }
            !overlaps
        });
    }

    /// The mapping holding runtime address `avma`, and the address's link-time address in it.
    fn mapping_of(&self, avma: Avma) -> Option<(&Mapping, Svma)> {
        let i = self.mappings.partition_point(|m| m.start <= avma.0);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (avma.0 < m.end).then(|| (m, Svma(avma.0.wrapping_sub(m.bias))))
    }

    /// Whether `avma` is in executable memory the process mapped (a module or anonymous
    /// code): where a return address can point. A frame-pointer step through code without
    /// unwind information may read any data as a return address; one outside the code is no
    /// caller.
    /// True while nothing is mapped (a process known only from a sample, before its fork or
    /// its mappings are seen).
    pub(crate) fn is_empty(&self) -> bool {
        self.mappings.is_empty() && self.data_mappings.is_empty()
    }

    pub(crate) fn is_code(&self, avma: u64) -> bool {
        self.mapping_of(Avma(avma)).is_some()
            || self.anonymous_code.iter().any(|r| r.contains(&avma))
    }

    /// Whether JIT code at `avma` (in no mapping) may be unwound by records its jitdumps have
    /// not given yet: the process mapped a jitdump, and none covers the address so far.
    pub(crate) fn may_learn_jit(&self, avma: u64) -> bool {
        !self.jitdumps.is_empty()
            && self.mapping_of(Avma(avma)).is_none()
            && !self.jitdumps.iter().any(|j| j.covers(avma))
    }

    /// Whether the process mapped a jitdump.
    pub(crate) fn has_jitdump(&self) -> bool {
        !self.jitdumps.is_empty()
    }

    /// The load of the process's jitdump whose code was at `avma` at `time` (see
    /// [`JitDump::load_at`]), as far as the dump has been read ([`AddressSpace::learn_jit`]).
    pub(crate) fn jit_load(&self, avma: u64, time: u64) -> Option<u32> {
        if self.jitdumps.is_empty() || self.mapping_of(Avma(avma)).is_some() {
            return None;
        }
        self.jitdumps.iter().find_map(|d| d.load_at(avma, time))
    }

    /// Give framehop the JIT code its jitdumps described since the last call; whether any was
    /// new.
    pub(crate) fn learn_jit(&mut self) -> bool {
        let mut learned = false;
        for dump in &mut self.jitdumps {
            for (module, replaced) in dump.take_new() {
                for start in replaced {
                    self.unwinder.remove_module(start);
                }
                self.unwinder.add_module(module);
                learned = true;
            }
        }
        learned
    }

    /// The module and link-time address of a runtime address, if it is mapped.
    pub fn resolve(&self, avma: Avma) -> Option<(ProfileModuleId, Svma)> {
        self.mapping_of(avma).map(|(m, svma)| (m.module, svma))
    }

    /// The module whose static data holds runtime address `avma`, and the address at link
    /// time.
    pub(crate) fn static_at(&self, avma: Avma) -> Option<(ProfileModuleId, Svma)> {
        self.statics
            .iter()
            .find(|r| r.start <= avma.0 && avma.0 < r.end)
            .map(|r| (r.module, Svma(avma.0.wrapping_sub(r.bias))))
    }

    /// Record a non-executable mapping (`PERF_RECORD_MMAP2` with `mmap_data`), replacing what
    /// it overlaps.
    pub(crate) fn map_data(&mut self, start: u64, len: u64, path: &str) {
        let end = start.saturating_add(len);
        let kind = match path {
            "[heap]" => MappingKind::Brk,
            "[stack]" => MappingKind::Stack,
            p if p.starts_with(SHIM_RINGS) => MappingKind::Profiler,
            p if p.is_empty() || p.starts_with("//anon") || p.starts_with('[') => {
                MappingKind::Anonymous
            }
            _ => MappingKind::File,
        };
        self.data_mappings
            .retain(|m| !(m.start < end && start < m.end));
        self.data_mappings.push(DataMapping { start, end, kind });
    }

    /// The kind of the non-executable mapping holding runtime address `avma`, if one does.
    pub(crate) fn mapping_kind(&self, avma: Avma) -> Option<MappingKind> {
        self.data_mappings
            .iter()
            .find(|m| m.start <= avma.0 && avma.0 < m.end)
            .map(|m| m.kind)
    }

    /// Whether return address `ra` is the return from a call of a module's entry code
    /// (see [`ENTRY_CALL_WINDOW`]): the outermost frame of a process's main thread.
    pub(crate) fn is_entry_return(&self, ra: Avma) -> bool {
        self.mapping_of(ra).is_some_and(|(m, svma)| {
            m.entry
                .is_some_and(|e| svma.0 > e && svma.0 <= e + ENTRY_CALL_WINDOW)
        })
    }

    /// Whether instruction address `ip` is a module's entry point: where the kernel starts a
    /// process, with nothing above it (a sample taken as `exec` returns to user space).
    pub(crate) fn is_entry_point(&self, ip: Avma) -> bool {
        self.mapping_of(ip)
            .is_some_and(|(m, svma)| m.entry == Some(svma.0))
    }

    /// Populate from `/proc/PID/maps` (for what was mapped before sampling started).
    pub fn load_proc_maps(&mut self, pid: u32, modules: &mut ModuleRegistry) {
        let Some(text) = crate::format::procmaps::read(Some(pid)) else {
            return;
        };
        for line in text.lines() {
            if let Some(ev) = parse_maps_line(line, pid) {
                self.map(ev, modules);
            }
        }
    }
}

/// One executable line of `/proc/PID/maps`.
fn parse_maps_line(line: &str, pid: u32) -> Option<MapEvent<'_>> {
    let line = crate::format::procmaps::parse(line).filter(|l| l.executable())?;
    Some(MapEvent {
        start: line.start,
        len: line.end - line.start,
        pgoff: line.offset,
        path: line.path,
        pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_mappings_are_classified_by_name_and_replace_what_they_overlap() {
        let mut space = AddressSpace::default();
        space.map_data(0x1000, 0x1000, "[heap]");
        space.map_data(0x3000, 0x1000, "/memfd:hpcrun-alloc (deleted)");
        space.map_data(0x5000, 0x2000, "//anon");
        space.map_data(0x8000, 0x1000, "/data/file");
        let kind = |space: &AddressSpace, a| space.mapping_kind(Avma(a));
        assert_eq!(kind(&space, 0x1fff), Some(MappingKind::Brk));
        assert_eq!(kind(&space, 0x2000), None);
        assert_eq!(kind(&space, 0x3000), Some(MappingKind::Profiler));
        assert_eq!(kind(&space, 0x6000), Some(MappingKind::Anonymous));
        assert_eq!(kind(&space, 0x8000), Some(MappingKind::File));
        space.map_data(0x5800, 0x1000, "[stack]");
        assert_eq!(kind(&space, 0x5000), None, "the overlapped mapping is gone");
        assert_eq!(kind(&space, 0x5800), Some(MappingKind::Stack));
    }

    #[test]
    fn return_addresses_may_point_into_modules_and_anonymous_code_only() {
        let mut modules = ModuleRegistry::default();
        let mut space = AddressSpace::default();
        space.load_proc_maps(std::process::id(), &mut modules);
        assert!(space.is_code(libc::getpid as *const () as u64), "libc");
        let jit = |start| MapEvent {
            start,
            len: 0x1000,
            pgoff: 0,
            path: "//anon",
            pid: 1,
        };
        space.map(jit(0x7000_0000), &mut modules);
        assert!(
            space.is_code(0x7000_0ff8),
            "anonymous executable memory: JIT code"
        );
        assert!(!space.is_code(0x7000_1000));
        let data = [0u64; 4];
        assert!(!space.is_code(data.as_ptr() as u64), "the stack is no code");
    }

    #[test]
    fn the_loaders_entry_code_is_where_paths_begin() {
        // Our own process was started by the dynamic loader: its entry point (where the kernel
        // starts a process) and the returns from the calls its entry code makes are roots.
        let mut modules = ModuleRegistry::default();
        let mut space = AddressSpace::default();
        space.load_proc_maps(std::process::id(), &mut modules);
        // SAFETY: getauxval reads the auxiliary vector the kernel gave the process.
        let base = unsafe { libc::getauxval(libc::AT_BASE) };
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let loader = (maps.lines())
            .find_map(|l| {
                l.split_whitespace()
                    .nth(5)
                    .filter(|p| p.contains("ld-linux"))
            })
            .expect("a dynamically linked test binary");
        use object::Object;
        let bytes = std::fs::read(loader).unwrap();
        let entry = base + object::File::parse(&*bytes).unwrap().entry();
        assert!(space.is_entry_point(Avma(entry)));
        assert!(!space.is_entry_point(Avma(entry + 3)));
        assert!(
            !space.is_entry_return(Avma(entry)),
            "a return is after a call"
        );
        for ra in [entry + 8, entry + 0x30] {
            assert!(space.is_entry_return(Avma(ra)), "{:#x}", ra - entry);
        }
        assert!(!space.is_entry_return(Avma(entry + ENTRY_CALL_WINDOW + 1)));
    }

    #[test]
    fn maps_lines_keep_only_executable_mappings() {
        let ev = parse_maps_line(
            "7f1c2a428000-7f1c2a5bd000 r-xp 00028000 fe:01 1835128   /usr/lib/x86_64-linux-gnu/libc.so.6",
            7,
        )
        .unwrap();
        assert_eq!(ev.start, 0x7f1c2a428000);
        assert_eq!(ev.len, 0x7f1c2a5bd000 - 0x7f1c2a428000);
        assert_eq!(ev.pgoff, 0x28000);
        assert_eq!(ev.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(ev.pid, 7);
        assert!(parse_maps_line(
            "7f1c2a400000-7f1c2a428000 r--p 00000000 fe:01 1835128 /x",
            7
        )
        .is_none());
    }

    #[test]
    fn resolves_addresses_through_the_load_bias_of_our_own_libc() {
        // Our own process maps libc like any other: resolving its code must land inside the
        // file's own .text link-time range.
        let mut modules = ModuleRegistry::default();
        let mut space = AddressSpace::default();
        space.load_proc_maps(std::process::id(), &mut modules);
        let addr = libc::getpid as *const () as u64;
        let (module, svma) = space.resolve(Avma(addr)).expect("libc code is mapped");
        let infos = modules.into_infos();
        let path = &infos[module.index()].path;
        assert!(path.contains("libc"), "{path}");
        let data = std::fs::read(path).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        use object::{Object, ObjectSymbol};
        let sym = obj
            .dynamic_symbols()
            .find(|s| s.name() == Ok("getpid"))
            .expect("getpid symbol");
        assert_eq!(svma.0, sym.address());
    }
}
