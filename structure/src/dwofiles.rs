//! Finding the files of split DWARF (`gcc`/`clang -gsplit-dwarf`): the `.dwo` file of each
//! skeleton unit, or the `.dwp` package that `dwp`/`llvm-dwp` merged them into, as gdb and the
//! addr2line crate find them.
//!
//! A skeleton unit names its `.dwo` with `DW_AT_dwo_name` (`DW_AT_GNU_dwo_name` before DWARF
//! 5), relative to its `DW_AT_comp_dir`. The package `<binary>.dwp` beside the binary is looked
//! at first; then the named path; then, for a build tree that was moved, the same name beside
//! the binary. A file is only taken if it holds a unit with the skeleton's DWO id, so a stale
//! `.dwo` from another build is refused. What cannot be found is noted once per file: the
//! skeleton's line rows still read, and its procedures are named from the symbol table.

use crate::binary::LoadedFile;
use crate::debuginfo::load_sections;
use crate::dwarf::{SectionBytes, Slice, SplitDwarf};
use crate::error::StructureError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The split DWARF files of a binary, loaded.
#[derive(Default)]
pub(crate) struct DwoFiles {
    /// `.dwo` files, with the DWO id of the unit each holds.
    files: Vec<(u64, LoadedFile)>,
    /// The `.dwp` package, if there is one.
    package: Option<LoadedFile>,
    /// What could not be found or was refused, one line each.
    pub notes: Vec<String>,
}

/// The (decompressed) sections of a binary's split DWARF files.
pub(crate) struct DwoSections<'d> {
    files: Vec<(u64, SectionBytes<'d>)>,
    package: Option<SectionBytes<'d>>,
    /// The sections skipped (implausibly compressed, or corrupt), one line each.
    pub notes: Vec<String>,
}

/// A skeleton unit: the DWO id and file name of its split unit.
struct Skeleton {
    id: gimli::DwoId,
    /// `DW_AT_dwo_name`.
    name: PathBuf,
    /// `DW_AT_comp_dir`, the directory `name` is relative to.
    comp_dir: PathBuf,
}

impl DwoFiles {
    /// Find the split DWARF files of the skeleton units in `dwarf`, the DWARF of `binary`.
    pub(crate) fn open(binary: &Path, dwarf: &gimli::Dwarf<Slice<'_>>) -> DwoFiles {
        let skeletons = skeletons(dwarf);
        if skeletons.is_empty() {
            return DwoFiles::default();
        }
        let mut found = DwoFiles {
            package: open_package(binary),
            ..DwoFiles::default()
        };
        let in_package = found.package_ids(&skeletons, dwarf);
        if in_package.is_none() {
            let package = found.package.take().map(|p| p.path.display().to_string());
            found
                .notes
                .extend(package.map(|p| format!("split DWARF package {p}: unreadable")));
        }
        let in_package = in_package.unwrap_or_default();
        for s in skeletons.iter().filter(|s| !in_package.contains(&s.id.0)) {
            if found.files.iter().any(|(id, _)| *id == s.id.0) {
                continue;
            }
            match find_dwo(binary, s, dwarf) {
                Ok(loaded) => found.files.push((s.id.0, loaded)),
                Err(note) => found.notes.push(note),
            }
        }
        found
    }

    /// The DWO ids of `skeletons` whose split units the package holds (none without a
    /// package); `None` if the package is unreadable.
    fn package_ids(
        &self,
        skeletons: &[Skeleton],
        dwarf: &gimli::Dwarf<Slice<'_>>,
    ) -> Option<Vec<u64>> {
        let Some(package) = &self.package else {
            return Some(Vec::new());
        };
        let (sections, _) = dwo_sections(package).ok()?;
        let split = SplitDwarf::new(HashMap::new(), Some(&sections)).ok()?;
        let held = skeletons.iter().filter(|s| split.holds(dwarf, s.id));
        Some(held.map(|s| s.id.0).collect())
    }

    /// The sections of the files found (all of which parsed when they were found).
    pub(crate) fn sections(&self) -> DwoSections<'_> {
        let mut notes = Vec::new();
        let mut files = Vec::new();
        for (id, m) in &self.files {
            if let Ok((sections, skipped)) = dwo_sections(m) {
                files.push((*id, sections));
                notes.extend(skipped);
            }
        }
        let package = self.package.as_ref().and_then(|m| {
            let (sections, skipped) = dwo_sections(m).ok()?;
            notes.extend(skipped);
            Some(sections)
        });
        DwoSections {
            files,
            package,
            notes,
        }
    }
}

impl DwoSections<'_> {
    /// The split units, for the DWARF reader.
    pub(crate) fn split(&self) -> SplitDwarf<'_> {
        let files = self.files.iter().map(|(id, s)| (*id, s)).collect();
        // The package's index read when the package was found.
        SplitDwarf::new(files, self.package.as_ref()).unwrap_or_default()
    }
}

/// The skeleton units of `dwarf`. DWARF 5 marks them in the unit header; a GNU (version 4)
/// skeleton is a compilation unit with a `DW_AT_GNU_dwo_id`, parsed only where the module has
/// the `.debug_addr` that such units need.
fn skeletons(dwarf: &gimli::Dwarf<Slice<'_>>) -> Vec<Skeleton> {
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
        let Ok(name) = dwarf.attr_string(&unit, name) else {
            continue;
        };
        out.push(Skeleton {
            id,
            name: PathBuf::from(name.to_string_lossy().into_owned()),
            comp_dir: PathBuf::from(
                unit.comp_dir
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        });
    }
    out
}

/// `<binary>.dwp`, loaded, if it exists and parses.
fn open_package(binary: &Path) -> Option<LoadedFile> {
    let mut path = binary.as_os_str().to_owned();
    path.push(".dwp");
    let loaded = LoadedFile::open(Path::new(&path)).ok()?;
    loaded.parse().is_ok().then_some(loaded)
}

/// The `.dwo` file of `skeleton`, loaded; else the note saying why not.
fn find_dwo(
    binary: &Path,
    skeleton: &Skeleton,
    parent: &gimli::Dwarf<Slice<'_>>,
) -> Result<LoadedFile, String> {
    let mut stale = None;
    for candidate in dwo_candidates(binary, skeleton) {
        let Ok(loaded) = LoadedFile::open(&candidate) else {
            continue;
        };
        let holds = dwo_sections(&loaded).is_ok_and(|(sections, _)| {
            let files = HashMap::from([(skeleton.id.0, &sections)]);
            SplitDwarf::new(files, None).is_ok_and(|s| s.holds(parent, skeleton.id))
        });
        if holds {
            return Ok(loaded);
        }
        stale.get_or_insert(candidate);
    }
    let name = skeleton.name.display();
    Err(match stale {
        Some(path) => format!(
            "split DWARF file {}: not the unit the binary expects (DWO id {:#x}; stale?): its procedures are named from the symbol table",
            path.display(),
            skeleton.id.0
        ),
        None => format!(
            "split DWARF file {name} (compilation directory {}) not found: its procedures are named from the symbol table",
            skeleton.comp_dir.display()
        ),
    })
}

/// Where the `.dwo` of `skeleton` may be: its name (against its compilation directory if
/// relative), then beside the binary under that relative name and under its file name.
fn dwo_candidates(binary: &Path, skeleton: &Skeleton) -> Vec<PathBuf> {
    let dir = binary.parent().unwrap_or(Path::new("."));
    let mut out = vec![skeleton.comp_dir.join(&skeleton.name)];
    if skeleton.name.is_relative() {
        out.push(dir.join(&skeleton.name));
    }
    out.extend(skeleton.name.file_name().map(|n| dir.join(n)));
    out.dedup();
    out.retain(|p| p.is_file());
    out
}

/// The sections of the `.dwo` or `.dwp` file `loaded` that the reader uses, and notes on those
/// skipped.
fn dwo_sections(loaded: &LoadedFile) -> Result<(SectionBytes<'_>, Vec<String>), StructureError> {
    let file = loaded.parse()?;
    let ids = dwo_section_ids();
    Ok(load_sections(
        &file,
        &loaded.path,
        &ids,
        gimli::SectionId::dwo_name,
    ))
}

/// The sections of a `.dwo` or `.dwp` file that the reader uses, and those that a package's
/// index gives each unit a contribution to (gimli checks every contribution against its
/// section; they are loaded, not copied, unless compressed).
fn dwo_section_ids() -> [gimli::SectionId; 13] {
    use gimli::SectionId::*;
    [
        DebugAbbrev,
        DebugCuIndex,
        DebugInfo,
        DebugLine,
        DebugLoc,
        DebugLocLists,
        DebugMacinfo,
        DebugMacro,
        DebugRngLists,
        DebugStr,
        DebugStrOffsets,
        DebugTuIndex,
        DebugTypes,
    ]
}
