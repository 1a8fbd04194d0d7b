//! `hpcrun-rs --bundle`: copy the binaries a profile names, and the separate debug files found
//! for them, into the measurement's module store ([`crate::bundle`] says where and how it is
//! laid out), so that the profile correlates on another machine as on this one.
//!
//! Each copy is checked against the identity the profile recorded (build-id, else content
//! checksum): a file changed since it was mapped is not bundled but named. Copies are written
//! atomically and never over an existing one, so the processes of a job can fill one store
//! at once.

use crate::bundle;
use crate::db::{ModuleInfo, Profile};
use crate::debugfiles::{self, DEBUGINFO, EXECUTABLE};
use crate::envelope::{read_file, write_atomically, EnvelopeError, Replace};
use crate::sampler::unwinding::loadmap::ModuleFiles;
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What [`bundle()`] did, for the run's summary.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Bundled {
    /// The store.
    pub store: PathBuf,
    /// Binaries in the store for this profile (copied now or by an earlier run).
    pub modules: usize,
    /// Their debug files (separate and supplementary).
    pub debug_files: usize,
    /// Perf maps and jitdumps copied.
    pub jit_files: usize,
    /// Bytes copied by this run.
    pub bytes: u64,
    /// Modules left out, each with why.
    pub left_out: Vec<String>,
}

impl Bundled {
    /// The summary's lines: what went where, then what was left out.
    pub fn lines(&self) -> Vec<String> {
        let jit = match self.jit_files {
            0 => String::new(),
            n => format!(", {n} JIT maps and dumps,"),
        };
        let mut lines = vec![format!(
            "bundled {} modules{jit} and {} debug files into {} ({:.1} MB copied)",
            self.modules,
            self.debug_files,
            self.store.display(),
            self.bytes as f64 / 1e6
        )];
        lines.extend(self.left_out.iter().map(|w| format!("not bundled: {w}")));
        lines
    }
}

/// Copy every module of `profile` into `store`: the file the process mapped where the run
/// read it (`files`; in a container, its own file, not the one at the same path here), else
/// the file at its path; then the files naming its JIT-compiled code.
pub fn bundle(profile: &Profile, files: &ModuleFiles, store: &Path) -> Bundled {
    let mut done = Bundled {
        store: store.to_path_buf(),
        ..Bundled::default()
    };
    for (i, m) in profile.modules.iter().enumerate() {
        if bundle::jitdump_pid(&m.path).is_some() {
            continue; // not code: a JIT's record of what it compiled, copied below
        }
        let bytes = match files.bytes(i) {
            Some(bytes) => Ok(Cow::Borrowed(bytes)),
            None => module_bytes(m).map(Cow::Owned),
        };
        match bytes.and_then(|bytes| bundle_module(m, &bytes, store, &mut done)) {
            Ok(()) => done.modules += 1,
            Err(why) => done.left_out.push(format!("{}: {why}", m.path)),
        }
    }
    bundle_jit_files(profile, store, &mut done);
    done
}

/// Copy each process's perf map and jitdump of this run (regular files owned by this user or
/// root, last written since it started) into its `jit/` directory in `store`, keeping the time
/// they were last written.
fn bundle_jit_files(profile: &Profile, store: &Path, done: &mut Bundled) {
    let dumps = (profile.modules.iter())
        .filter_map(|m| Some((bundle::jitdump_pid(&m.path)?, PathBuf::from(&m.path))));
    let maps = (profile.processes.iter()).map(|p| (p.pid, bundle::perf_map(p.pid)));
    for (pid, path) in maps.chain(dumps) {
        let Some(name) = path.file_name() else {
            continue;
        };
        let target = bundle::jit_dir(store, profile.start_ns, pid).join(name);
        match copy_jit_file(&path, &target, profile.start_ns) {
            Ok(0) => {}
            Ok(bytes) => {
                done.bytes += bytes;
                done.jit_files += 1;
            }
            Err(why) => done.left_out.push(format!("{}: {why}", path.display())),
        }
    }
}

/// Copy the JIT file at `path` to `target` with its modification time, if it is this run's
/// (see [`bundle_jit_files`]); the bytes copied, 0 where there is no such file.
fn copy_jit_file(path: &Path, target: &Path, run_start_ns: u64) -> Result<u64, String> {
    let Ok(mut file) = crate::envelope::open_regular(path) else {
        return Ok(0);
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    // The run ends now: the end bound cannot refuse a file written before this moment.
    match bundle::jit_distrust(&meta, (run_start_ns, u64::MAX)) {
        Some(why @ bundle::JitDistrust::Owner(_)) => return Err(why.to_string()),
        Some(bundle::JitDistrust::Stale) => return Ok(0), // another process's, before this run
        None => {}
    }
    // The file judged above, not whatever the path names by now.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| e.to_string())?;
    let copied = place(target, &bytes)?;
    if copied > 0 {
        use std::os::unix::fs::OpenOptionsExt;
        let modified = meta.modified().map_err(|e| e.to_string())?;
        let out = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(target)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        out.set_modified(modified).map_err(|e| e.to_string())?;
    }
    Ok(copied)
}

/// Copy module `m`, whose file holds `bytes`, and its debug files, counting them into `done`.
fn bundle_module(
    m: &ModuleInfo,
    bytes: &[u8],
    store: &Path,
    done: &mut Bundled,
) -> Result<(), String> {
    let key = bundle::key(m.build_id.as_deref(), m.checksum)
        .ok_or("it has no build-id and no checksum to find it by")?;
    let file = object::File::parse(bytes).map_err(|e| format!("not ELF ({e})"))?;
    if file.build_id().ok().flatten() != m.build_id.as_deref() {
        return Err("it changed since it was mapped (another build-id)".into());
    }
    if m.build_id.is_none() && m.checksum != Some(crate::db::file_checksum(bytes)) {
        return Err("it changed since it was mapped (other contents)".into());
    }
    let entry = store.join(&key);
    done.bytes += place(&entry.join(EXECUTABLE), bytes)?;
    let path = Path::new(&m.path);
    let debug = (!has_debug_lines(&file))
        .then(|| separate_debug_file(path, &file))
        .flatten();
    let dwarf_holder = match &debug {
        Some((debug_path, debug_bytes)) => {
            done.bytes += place(&entry.join(DEBUGINFO), debug_bytes)?;
            done.debug_files += 1;
            Some((debug_path.clone(), debug_bytes.as_slice()))
        }
        None => has_debug_lines(&file).then(|| (path.to_path_buf(), bytes)),
    };
    if let Some((holder, holder_bytes)) = dwarf_holder {
        if let Some((id, sup)) = supplementary_file(&holder, holder_bytes) {
            done.bytes += place(&store.join(debugfiles::hex(&id)).join(DEBUGINFO), &sup)?;
            done.debug_files += 1;
        }
        for (found, stored) in split_dwarf_files(path, holder_bytes) {
            let bytes = read_file(&found).map_err(|e| e.to_string())?;
            done.bytes += place(&entry.join(stored), &bytes)?;
            done.debug_files += 1;
        }
    }
    Ok(())
}

/// The split DWARF files (`-gsplit-dwarf`) of the binary at `binary`, whose skeleton units are
/// in `holder` (its DWARF): each `.dwo` found, and `BINARY.dwp`, with the name each takes in
/// the binary's store entry, where the correlator looks for them beside `executable` (a
/// relative name as the skeleton states it, else the file name).
fn split_dwarf_files(binary: &Path, holder: &[u8]) -> Vec<(PathBuf, PathBuf)> {
    let Ok(file) = object::File::parse(holder) else {
        return Vec::new();
    };
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        let data = file.section_by_name(id.name());
        Ok(data
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or_default())
    };
    let Ok(sections) = gimli::DwarfSections::load(load) else {
        return Vec::new();
    };
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut out = Vec::new();
    for link in debugfiles::dwo_links(&dwarf) {
        let Some(found) = debugfiles::dwo_candidates(binary, &link).into_iter().next() else {
            continue;
        };
        // A relative name that stays inside the entry, else the file name alone.
        let inside = link.name.is_relative()
            && (link.name.components()).all(|c| matches!(c, std::path::Component::Normal(_)));
        let stored = match inside {
            true => link.name.clone(),
            false => PathBuf::from(found.file_name().unwrap_or_default()),
        };
        out.push((found, stored));
    }
    let package = debugfiles::dwo_package(binary);
    if package.is_file() {
        out.push((package, debugfiles::dwo_package(Path::new(EXECUTABLE))));
    }
    out
}

/// The bytes of module `m`: its file, or this machine's vDSO for `[vdso]` (the kernel maps one
/// image into every process; its build-id is checked by the caller).
fn module_bytes(m: &ModuleInfo) -> Result<Vec<u8>, String> {
    if m.path == "[vdso]" {
        return crate::vdso::own_vdso().ok_or_else(|| "no vDSO image to copy".to_string());
    }
    if m.path.starts_with('[') {
        return Err("not a file".into());
    }
    read_file(Path::new(&m.path)).map_err(|e| e.to_string())
}

/// Put `bytes` at `path` unless a copy is there already (from an earlier run or another
/// process of the job); the bytes written.
fn place(path: &Path, bytes: &[u8]) -> Result<u64, String> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(0);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    match write_atomically(path, bytes, Replace::Refused) {
        Ok(()) => Ok(bytes.len() as u64),
        Err(EnvelopeError::Exists { .. }) => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `file` has line tables of its own (else a separate debug file holds them).
fn has_debug_lines(file: &object::File<'_>) -> bool {
    [".debug_info", ".debug_line"]
        .iter()
        .any(|n| file.section_by_name(n).is_some_and(|s| s.size() > 0))
}

/// The separate debug file of the binary at `path` (parsed as `file`): the first candidate
/// with line tables and, where both have one, the same build-id.
fn separate_debug_file(path: &Path, file: &object::File<'_>) -> Option<(PathBuf, Vec<u8>)> {
    let link = file.gnu_debuglink().ok().flatten().map(|(name, _)| name);
    let id = file.build_id().ok().flatten();
    debugfiles::candidates(path, link, id)
        .into_iter()
        .find_map(|candidate| {
            let bytes = read_file(&candidate).ok()?;
            let debug = object::File::parse(bytes.as_slice()).ok()?;
            let theirs = debug.build_id().ok().flatten();
            let belongs = id.is_none() || theirs.is_none() || theirs == id;
            (belongs && has_debug_lines(&debug)).then_some(())?;
            Some((candidate, bytes))
        })
}

/// The dwz supplementary file that the DWARF in `bytes` (the file at `path`) names, with its
/// build-id (the store keys it by that), if it names one and it is found.
fn supplementary_file(path: &Path, bytes: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let file = object::File::parse(bytes).ok()?;
    let (name, id) = file.gnu_debugaltlink().ok().flatten()?;
    let link = Path::new(std::ffi::OsStr::from_bytes(name));
    debugfiles::supplementary_candidates(path, link, Some(id))
        .into_iter()
        .find_map(|candidate| {
            let sup = read_file(&candidate).ok()?;
            let parsed = object::File::parse(sup.as_slice()).ok()?;
            (parsed.build_id().ok().flatten() == Some(id)).then_some(())?;
            Some((id.to_vec(), sup))
        })
}
