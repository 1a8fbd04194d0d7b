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
use profiler::debugfiles::{dwo_candidates, dwo_links, dwo_package, DwoLink};
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The split DWARF files of a binary: its `.dwp` package, read when found, and the places
/// where each skeleton unit's `.dwo` file may be, read when [`DwoFiles::sections`] first needs
/// them. It owns the bytes that the sections borrow.
#[derive(Default)]
pub(crate) struct DwoFiles {
    /// The skeleton units, each with the regular files where its `.dwo` may be.
    skeletons: Vec<(Skeleton, Vec<Candidate>)>,
    /// `<binary>.dwp`, if it exists and parses.
    package: Option<LoadedFile>,
}

/// A path where a `.dwo` file may be, and the file once read (`None` if it could not be).
struct Candidate {
    path: PathBuf,
    file: OnceCell<Option<LoadedFile>>,
}

/// The (decompressed) sections of a binary's split DWARF files, each loaded once: those of a
/// file are kept from the check that accepted it.
pub(crate) struct DwoSections<'d> {
    files: Vec<(u64, SectionBytes<'d>)>,
    package: Option<SectionBytes<'d>>,
    /// What could not be found or was refused, and the sections skipped (implausibly
    /// compressed, or corrupt), one line each.
    pub notes: Vec<String>,
}

/// A skeleton unit: the DWO id and file name of its split unit.
type Skeleton = DwoLink;

impl DwoFiles {
    /// Find the split DWARF files of the skeleton units in `dwarf`, the DWARF of `binary`.
    pub(crate) fn find(binary: &Path, dwarf: &gimli::Dwarf<Slice<'_>>) -> DwoFiles {
        let skeletons = dwo_links(dwarf);
        if skeletons.is_empty() {
            return DwoFiles::default();
        }
        DwoFiles {
            package: open_package(binary),
            skeletons: skeletons
                .into_iter()
                .map(|s| {
                    let candidate = |path| Candidate {
                        path,
                        file: OnceCell::new(),
                    };
                    let candidates = dwo_candidates(binary, &s);
                    (s, candidates.into_iter().map(candidate).collect())
                })
                .collect(),
        }
    }

    /// The sections of the package and of the `.dwo` files of the skeleton units of `dwarf`
    /// that it does not hold, each file checked to hold the unit its skeleton expects. A
    /// package whose index is unreadable is not used; a skeleton unit whose split unit is
    /// nowhere is noted.
    pub(crate) fn sections(&self, dwarf: &gimli::Dwarf<Slice<'_>>) -> DwoSections<'_> {
        let mut found = DwoSections {
            files: Vec::new(),
            package: None,
            notes: Vec::new(),
        };
        let mut in_package = Vec::new();
        if let Some(package) = &self.package {
            match package_sections(package, &self.skeletons, dwarf) {
                Some((sections, skipped, held)) => {
                    found.package = Some(sections);
                    found.notes.extend(skipped);
                    in_package = held;
                }
                None => found.notes.push(format!(
                    "split DWARF package {}: unreadable",
                    package.path.display()
                )),
            }
        }
        for (s, candidates) in &self.skeletons {
            let id = s.id;
            if in_package.contains(&id) || found.files.iter().any(|(f, _)| *f == id) {
                continue;
            }
            match find_dwo(s, candidates, dwarf) {
                Ok((sections, skipped)) => {
                    found.files.push((id, sections));
                    found.notes.extend(skipped);
                }
                Err(note) => found.notes.push(note),
            }
        }
        found
    }
}

impl DwoSections<'_> {
    /// The split units, for the DWARF reader.
    pub(crate) fn split(&self) -> SplitDwarf<'_> {
        let files = self.files.iter().map(|(id, s)| (*id, s)).collect();
        // The package's index was read when the package was checked: it parses.
        SplitDwarf::new(files, self.package.as_ref()).unwrap_or_default()
    }
}

/// The sections of `package`, the notes on those skipped, and the DWO ids of `skeletons` whose
/// split units it holds; `None` if it is unreadable.
fn package_sections<'d>(
    package: &'d LoadedFile,
    skeletons: &[(Skeleton, Vec<Candidate>)],
    dwarf: &gimli::Dwarf<Slice<'_>>,
) -> Option<(SectionBytes<'d>, Vec<String>, Vec<u64>)> {
    let (sections, skipped) = dwo_sections(package).ok()?;
    let split = SplitDwarf::new(HashMap::new(), Some(&sections)).ok()?;
    let held = skeletons
        .iter()
        .filter(|(s, _)| split.holds(dwarf, gimli::DwoId(s.id)));
    let held = held.map(|(s, _)| s.id).collect();
    Some((sections, skipped, held))
}

/// `<binary>.dwp`, loaded, if it exists and parses.
fn open_package(binary: &Path) -> Option<LoadedFile> {
    let loaded = LoadedFile::open(&dwo_package(binary)).ok()?;
    loaded.parse().is_ok().then_some(loaded)
}

/// The sections of the `.dwo` file of `skeleton` (a unit of `parent`), found among
/// `candidates`, and the notes on those skipped; else the note saying why there are none.
fn find_dwo<'d>(
    skeleton: &Skeleton,
    candidates: &'d [Candidate],
    parent: &gimli::Dwarf<Slice<'_>>,
) -> Result<(SectionBytes<'d>, Vec<String>), String> {
    let mut stale = None;
    for candidate in candidates {
        let read = candidate
            .file
            .get_or_init(|| LoadedFile::open(&candidate.path).ok());
        let Some(loaded) = read else {
            continue;
        };
        if let Ok((sections, skipped)) = dwo_sections(loaded) {
            let files = HashMap::from([(skeleton.id, &sections)]);
            let holds = SplitDwarf::new(files, None)
                .is_ok_and(|s| s.holds(parent, gimli::DwoId(skeleton.id)));
            if holds {
                return Ok((sections, skipped));
            }
        }
        stale.get_or_insert(&candidate.path);
    }
    let name = skeleton.name.display();
    Err(match stale {
        Some(path) => format!(
            "split DWARF file {}: not the unit the binary expects (DWO id {:#x}; stale?): its procedures are named from the symbol table",
            path.display(),
            skeleton.id
        ),
        None => format!(
            "split DWARF file {name} (compilation directory {}) not found: its procedures are named from the symbol table",
            skeleton.comp_dir.display()
        ),
    })
}

/// The sections of the `.dwo` or `.dwp` file `loaded` that the reader uses, and notes on those
/// skipped.
fn dwo_sections(loaded: &LoadedFile) -> Result<(SectionBytes<'_>, Vec<String>), StructureError> {
    #[cfg(test)]
    SECTION_LOADS.with(|n| n.set(n.get() + 1));
    let file = loaded.parse()?;
    let ids = dwo_section_ids();
    Ok(load_sections(
        &file,
        &loaded.path,
        &ids,
        gimli::SectionId::dwo_name,
    ))
}

#[cfg(test)]
thread_local! {
    /// How many times this thread loaded the sections of a split DWARF file.
    static SECTION_LOADS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debuginfo::DebugFiles;
    use std::process::Command;

    /// A program of two compilation units, built with `-gsplit-dwarf` in a new directory: one
    /// `.dwo` file per unit there.
    fn split_program() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.c"), "int f(int x) { return x * 3; }\n").unwrap();
        std::fs::write(
            dir.path().join("b.c"),
            "int f(int);\nint main(int c, char **v) { (void)v; return f(c); }\n",
        )
        .unwrap();
        for unit in ["a", "b"] {
            let status = Command::new("gcc")
                .current_dir(dir.path())
                .args(["-O1", "-g", "-gdwarf-4", "-gsplit-dwarf", "-c"])
                .arg(format!("{unit}.c"))
                .status()
                .unwrap();
            assert!(status.success());
        }
        let status = Command::new("gcc")
            .current_dir(dir.path())
            .args(["a.o", "b.o", "-o", "prog"])
            .status()
            .unwrap();
        assert!(status.success());
        let exe = dir.path().join("prog");
        (dir, exe)
    }

    /// The number of split DWARF files whose sections the analysis of `exe` loads, and the
    /// number of times it loads them.
    fn loads(exe: &Path) -> (usize, usize) {
        let loaded = LoadedFile::open(exe).unwrap();
        let file = loaded.parse().unwrap();
        let debug_files = DebugFiles::open(exe, &file, &file);
        let sections = debug_files.sections(&file).unwrap();
        let dwarf = sections.dwarf();
        SECTION_LOADS.with(|n| n.set(0));
        let dwo_files = DwoFiles::find(exe, &dwarf);
        let dwo_sections = dwo_files.sections(&dwarf);
        assert!(dwo_sections.notes.is_empty(), "{:?}", dwo_sections.notes);
        let files = dwo_sections.files.len() + usize::from(dwo_sections.package.is_some());
        (files, SECTION_LOADS.with(|n| n.get()))
    }

    #[test]
    fn each_split_file_is_loaded_once() {
        let (dir, exe) = split_program();
        assert_eq!(loads(&exe), (2, 2), ".dwo files");
        let status = Command::new("dwp")
            .current_dir(dir.path())
            .args(["-e", "prog", "-o", "prog.dwp"])
            .status()
            .unwrap();
        assert!(status.success());
        for unit in ["a", "b"] {
            std::fs::remove_file(dir.path().join(format!("{unit}.dwo"))).unwrap();
        }
        assert_eq!(loads(&exe), (1, 1), ".dwp package");
    }
}
