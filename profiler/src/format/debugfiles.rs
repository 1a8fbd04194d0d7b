//! Where a binary's separate debug files may be: what `hpcstruct-rs` searches when a binary
//! has no line tables of its own, and what `hpcrun-rs --bundle` copies with a binary, from one
//! list so that the two never disagree.
//!
//! The places are gdb's: the name `.gnu_debuglink` gives, beside the binary, in `.debug/`
//! beside it and under `/usr/lib/debug/` followed by the binary's directory; then the
//! build-id tree, `/usr/lib/debug/.build-id/xx/yyyy.debug`. A binary named `executable` in
//! elfutils' debuginfod cache layout (a `--bundle` store is one) has its debug file beside it,
//! named `debuginfo`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The name of a binary in elfutils' debuginfod cache layout (`BUILDID/executable`).
pub const EXECUTABLE: &str = "executable";

/// The name of a debug file in elfutils' debuginfod cache layout (`BUILDID/debuginfo`).
pub const DEBUGINFO: &str = "debuginfo";

/// The root of the build-id tree of installed debug files.
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// A build-id in lower-case hex, the form every layout above names it by.
pub fn hex(build_id: &[u8]) -> String {
    build_id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Existing candidate debug files of the binary at `binary`, whose `.gnu_debuglink` names
/// `debuglink` and whose GNU build-id is `build_id`, most specific first. The caller checks
/// that a candidate belongs to the binary (build-id, or the link's CRC).
pub fn candidates(
    binary: &Path,
    debuglink: Option<&[u8]>,
    build_id: Option<&[u8]>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let dir = binary.parent().unwrap_or(Path::new("."));
    if binary.file_name() == Some(OsStr::new(EXECUTABLE)) {
        out.push(dir.join(DEBUGINFO));
    }
    if let Some(name) = debuglink {
        let name = OsStr::from_bytes(name);
        out.push(dir.join(name));
        out.push(dir.join(".debug").join(name));
        let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let rel = abs.strip_prefix("/").unwrap_or(&abs);
        out.push(Path::new(DEBUG_ROOT).join(rel).join(name));
    }
    out.extend(build_id.and_then(by_build_id));
    out.retain(|p| p != binary && p.is_file());
    out
}

/// Existing candidates for the supplementary debug file (dwz's `.gnu_debugaltlink`) that the
/// file at `linking` names `link`, with build-id `build_id` where the link states one: the path
/// as stated (relative to `linking`'s directory), the same build-id's `debuginfo` where
/// `linking` sits in a debuginfod cache layout, then the build-id tree.
pub fn supplementary_candidates(
    linking: &Path,
    link: &Path,
    build_id: Option<&[u8]>,
) -> Vec<PathBuf> {
    let dir = linking.parent().unwrap_or(Path::new("."));
    let mut out = vec![dir.join(link)];
    let in_layout = [EXECUTABLE, DEBUGINFO]
        .iter()
        .any(|n| linking.file_name() == Some(OsStr::new(n)));
    if let (true, Some(id), Some(store)) = (in_layout, build_id, dir.parent()) {
        out.push(store.join(hex(id)).join(DEBUGINFO));
    }
    out.extend(build_id.and_then(by_build_id));
    out.retain(|p| p.is_file());
    out
}

/// A skeleton unit's link to its split unit (`-gsplit-dwarf`): the split unit's DWO id and the
/// `.dwo` file that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwoLink {
    /// The split unit's DWO id.
    pub id: u64,
    /// `DW_AT_dwo_name` (`DW_AT_GNU_dwo_name` before DWARF 5).
    pub name: PathBuf,
    /// `DW_AT_comp_dir`, the directory `name` is relative to.
    pub comp_dir: PathBuf,
}

/// The links of the skeleton units of `dwarf`. DWARF 5 marks skeletons in the unit header; a
/// GNU (version 4) skeleton is a compilation unit with a `DW_AT_GNU_dwo_id`, parsed only where
/// the module has the `.debug_addr` that such units need.
pub fn dwo_links<R: gimli::Reader>(dwarf: &gimli::Dwarf<R>) -> Vec<DwoLink> {
    use gimli::Section;
    let gnu_possible = !dwarf.debug_addr.reader().is_empty();
    let mut out = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let maybe = match header.type_() {
            gimli::UnitType::Skeleton(_) => true,
            gimli::UnitType::Compilation => gnu_possible && header.version() < 5,
            _ => false,
        };
        let Some(unit) = maybe.then(|| dwarf.unit(header).ok()).flatten() else {
            continue;
        };
        let (Some(id), Ok(Some(name))) = (unit.dwo_id, unit.dwo_name()) else {
            continue;
        };
        let Some(name) = dwarf
            .attr_string(&unit, name)
            .ok()
            .and_then(|n| n.to_string_lossy().ok().map(|n| n.into_owned()))
        else {
            continue;
        };
        let comp_dir = (unit.comp_dir.as_ref())
            .and_then(|d| d.to_string_lossy().ok().map(|d| d.into_owned()))
            .unwrap_or_default();
        out.push(DwoLink {
            id: id.0,
            name: PathBuf::from(name),
            comp_dir: PathBuf::from(comp_dir),
        });
    }
    out
}

/// Existing files where the `.dwo` of `link` (of the binary at `binary`) may be, as gdb and the
/// addr2line crate look: its name (against its compilation directory if relative), then beside
/// the binary under that relative name and under its file name (a build tree that was moved,
/// a `--bundle` store).
pub fn dwo_candidates(binary: &Path, link: &DwoLink) -> Vec<PathBuf> {
    let dir = binary.parent().unwrap_or(Path::new("."));
    let mut out = vec![link.comp_dir.join(&link.name)];
    if link.name.is_relative() {
        out.push(dir.join(&link.name));
    }
    out.extend(link.name.file_name().map(|n| dir.join(n)));
    out.dedup();
    out.retain(|p| p.is_file());
    out
}

/// Where the split DWARF package (`dwp`, `llvm-dwp`) of the binary at `binary` is:
/// `BINARY.dwp` beside it.
pub fn dwo_package(binary: &Path) -> PathBuf {
    let mut path = binary.as_os_str().to_owned();
    path.push(".dwp");
    PathBuf::from(path)
}

/// `/usr/lib/debug/.build-id/xx/yyyy.debug` for build-id `id`.
fn by_build_id(id: &[u8]) -> Option<PathBuf> {
    let hex = hex(id);
    (hex.len() > 2).then(|| {
        Path::new(DEBUG_ROOT)
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debug_file_is_looked_for_beside_its_binary_then_by_build_id() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("app");
        std::fs::write(&bin, b"x").unwrap();
        std::fs::write(dir.path().join("app.debug"), b"x").unwrap();
        let found = candidates(&bin, Some(b"app.debug"), Some(&[0xab, 0xcd, 0xef]));
        assert_eq!(found, vec![dir.path().join("app.debug")]);
        assert!(candidates(&bin, Some(b"other.debug"), None).is_empty());
        assert_eq!(
            by_build_id(&[0xab, 0xcd, 0xef]).unwrap(),
            Path::new("/usr/lib/debug/.build-id/ab/cdef.debug")
        );
    }

    #[test]
    fn the_debuginfod_layout_keeps_the_debug_file_beside_the_executable() {
        let store = tempfile::tempdir().unwrap();
        let entry = store.path().join("abcd");
        std::fs::create_dir(&entry).unwrap();
        for name in [EXECUTABLE, DEBUGINFO] {
            std::fs::write(entry.join(name), b"x").unwrap();
        }
        let bin = entry.join(EXECUTABLE);
        assert_eq!(candidates(&bin, None, None), vec![entry.join(DEBUGINFO)]);
        let sup = store.path().join("1234");
        std::fs::create_dir(&sup).unwrap();
        std::fs::write(sup.join(DEBUGINFO), b"x").unwrap();
        let found =
            supplementary_candidates(&bin, Path::new("/nowhere/x.dwz"), Some(&[0x12, 0x34]));
        assert_eq!(found, vec![sup.join(DEBUGINFO)]);
    }
}
