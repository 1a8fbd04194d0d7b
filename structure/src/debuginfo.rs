//! Finding a binary's DWARF: in the binary, in a separate debug file (`.gnu_debuglink`, the
//! build-id tree under `/usr/lib/debug`), and in the supplementary file that DWARF may share
//! entries and strings with (`dwz`'s `.gnu_debugaltlink`, DWARF 5's `.debug_sup`), then
//! loading its sections for gimli.
//!
//! A supplementary file that is named but cannot be found is reported; the DWARF still reads,
//! but names and declarations that live only there stay unknown.

use crate::analysis::DebugSource;
use crate::binary::{self, LoadedFile};
use crate::dwarf::{dwarf_from, SectionBytes, Slice};
use crate::error::StructureError;
use object::Object;
use rayon::prelude::*;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The files holding a binary's debug information besides the binary itself, loaded.
pub(crate) struct DebugFiles {
    /// The binary.
    binary: PathBuf,
    /// The separate debug file, when the binary has no line tables of its own.
    separate: Option<LoadedFile>,
    /// The supplementary file of whichever file holds the DWARF.
    sup: Option<LoadedFile>,
    /// Where the DWARF is.
    pub source: DebugSource,
    /// What could not be found or read, one line each.
    pub notes: Vec<String>,
}

/// The (decompressed) DWARF sections of a binary and of its supplementary file.
pub(crate) struct DebugSections<'d> {
    main: SectionBytes<'d>,
    sup: Option<SectionBytes<'d>>,
    /// The sections skipped (implausibly compressed, or corrupt), one line each.
    pub notes: Vec<String>,
}

impl DebugFiles {
    /// Find the debug files of `binary` (parsed as `file`; `own_dwarf`: the same file, or the
    /// part of it holding its debug sections, [`crate::parts`]).
    pub(crate) fn open(
        binary: &Path,
        file: &object::File<'_>,
        own_dwarf: &object::File<'_>,
    ) -> DebugFiles {
        let mut notes = Vec::new();
        let embedded = binary::has_debug_lines(file);
        let separate = if embedded {
            None
        } else {
            open_separate_debug(binary, file, &mut notes)
        };
        let source = match (&separate, embedded) {
            (Some(m), _) => DebugSource::Separate(m.path.clone()),
            (None, true) => DebugSource::Embedded,
            (None, false) => DebugSource::None,
        };
        let sup = match &separate {
            Some(m) => m
                .parse()
                .ok()
                .and_then(|f| open_supplementary(&m.path, &f, &mut notes)),
            None if embedded => open_supplementary(binary, own_dwarf, &mut notes),
            None => None,
        };
        DebugFiles {
            binary: binary.to_path_buf(),
            separate,
            sup,
            source,
            notes,
        }
    }

    /// Whether [`DebugFiles::sections`] reads the binary's section `name` where the DWARF is
    /// in the binary (the section names that [`crate::parts`] is to read apart).
    pub(crate) fn reads_section(name: &str) -> bool {
        name == ".gnu_debugaltlink"
            || name == ".debug_sup"
            || gimli_section_ids().iter().any(|id| id.name() == name)
    }

    /// The separate debug file, parsed, if there is one.
    pub(crate) fn separate_file(&self) -> Result<Option<object::File<'_>>, StructureError> {
        self.separate.as_ref().map(LoadedFile::parse).transpose()
    }

    /// The DWARF sections of the file holding `file`'s DWARF (`file` itself or the separate
    /// debug file) and of the supplementary file; empty if there is no DWARF. Location lists
    /// are left out: the program structure never reads them.
    pub(crate) fn sections<'d>(
        &'d self,
        file: &object::File<'d>,
    ) -> Result<DebugSections<'d>, StructureError> {
        self.sections_among(file, &gimli_section_ids())
    }

    /// [`DebugFiles::sections`] with the location lists too (`.debug_loc`, `.debug_loclists`):
    /// what reading variables ([`crate::DataLayout`]) needs.
    pub(crate) fn sections_with_locations<'d>(
        &'d self,
        file: &object::File<'d>,
    ) -> Result<DebugSections<'d>, StructureError> {
        let mut ids = gimli_section_ids().to_vec();
        ids.extend([gimli::SectionId::DebugLoc, gimli::SectionId::DebugLocLists]);
        self.sections_among(file, &ids)
    }

    /// Sections `ids` of the file holding the DWARF and of the supplementary file.
    fn sections_among<'d>(
        &'d self,
        file: &object::File<'d>,
        ids: &[gimli::SectionId],
    ) -> Result<DebugSections<'d>, StructureError> {
        let mut notes = Vec::new();
        let main = match (&self.separate, &self.source) {
            (Some(m), _) => dwarf_sections(&m.parse()?, &m.path, ids, &mut notes),
            (None, DebugSource::Embedded) => dwarf_sections(file, &self.binary, ids, &mut notes),
            _ => HashMap::new(),
        };
        let sup = match &self.sup {
            Some(m) => Some(dwarf_sections(&m.parse()?, &m.path, ids, &mut notes)),
            None => None,
        };
        Ok(DebugSections { main, sup, notes })
    }
}

impl DebugSections<'_> {
    /// No sections: DWARF that reads as empty.
    pub(crate) fn none() -> DebugSections<'static> {
        DebugSections {
            main: HashMap::new(),
            sup: None,
            notes: Vec::new(),
        }
    }

    /// A gimli view of the sections, with the supplementary file's attached.
    pub(crate) fn dwarf(&self) -> gimli::Dwarf<Slice<'_>> {
        let mut dwarf = dwarf_from(&self.main);
        if let Some(sup) = &self.sup {
            dwarf.set_sup(dwarf_from(sup));
        }
        dwarf
    }
}

/// Map the first usable separate debug file of `binary` (installed, else from a debuginfod
/// server where `DEBUGINFOD_URLS` names one): one that parses, holds DWARF and
/// belongs to `binary` (see [`stale_debug_file`]); a candidate that does not belong is
/// noted, naming both files, and passed over.
fn open_separate_debug(
    binary: &Path,
    file: &object::File<'_>,
    notes: &mut Vec<String>,
) -> Option<LoadedFile> {
    let installed = binary::debug_file_candidates(binary, file);
    installed
        .into_iter()
        .find_map(|candidate| open_if_binarys(binary, file, &candidate, notes))
        .or_else(|| {
            // None installed: a debuginfod server's, where the environment names any.
            let id = file.build_id().ok().flatten()?;
            let fetched = crate::debuginfod::debuginfo(binary, id, notes)?;
            open_if_binarys(binary, file, &fetched, notes)
        })
}

/// The debug file at `candidate`, if it has line tables and belongs to `binary` (else noted).
fn open_if_binarys(
    binary: &Path,
    file: &object::File<'_>,
    candidate: &Path,
    notes: &mut Vec<String>,
) -> Option<LoadedFile> {
    let loaded = open_debug_file(candidate, &binary::has_debug_lines, notes)?;
    match stale_debug_file(file, &loaded) {
        None => Some(loaded),
        Some(why) => {
            notes.push(format!(
                "debug file {} does not belong to {} ({why}): not used",
                candidate.display(),
                binary.display()
            ));
            None
        }
    }
}

/// Why the separate debug file `debug` is not `binary`'s, if it is not, as gdb judges: where
/// both have a GNU build-id they differ, or `debug` carries the name `binary`'s
/// `.gnu_debuglink` gives and its CRC32 is not the one stated there (a debug file left from
/// another build supplies wrong lines).
fn stale_debug_file(binary: &object::File<'_>, debug: &LoadedFile) -> Option<String> {
    let hex = profiler::debugfiles::hex;
    let ours = binary.build_id().ok().flatten();
    let theirs = debug.parse().ok()?.build_id().ok().flatten();
    if let (Some(a), Some(b)) = (ours, theirs) {
        if a != b {
            return Some(format!("build-id {} is not {}", hex(b), hex(a)));
        }
    }
    let (name, crc) = binary.gnu_debuglink().ok().flatten()?;
    let named = debug.path.file_name()? == std::ffi::OsStr::from_bytes(name);
    let actual = crc32fast::hash(debug.bytes());
    (named && actual != crc).then(|| format!("CRC32 {actual:08x} is not {crc:08x}"))
}

/// Map the supplementary file that the DWARF in `file` (found at `path`) refers to, if it
/// names one; a named file that cannot be found is noted.
fn open_supplementary(
    path: &Path,
    file: &object::File<'_>,
    notes: &mut Vec<String>,
) -> Option<LoadedFile> {
    let link = binary::supplementary_link(file)?;
    // The build-id the link states, where both state one, tells a stale file from the right one.
    let matches = |f: &object::File<'_>| {
        let id = f.build_id().ok().flatten();
        binary::has_dwarf(f)
            && (link.build_id.is_none() || id.is_none() || id == link.build_id.as_deref())
    };
    let found = binary::supplementary_candidates(path, &link)
        .into_iter()
        .find_map(|candidate| open_debug_file(&candidate, &matches, notes));
    if found.is_none() {
        notes.push(format!(
            "supplementary debug file {} of {} not found: names declared only there are unknown",
            link.path.display(),
            path.display()
        ));
    }
    found
}

/// Map `candidate` if it parses and `usable` accepts it; note why not otherwise.
fn open_debug_file(
    candidate: &Path,
    usable: &dyn Fn(&object::File<'_>) -> bool,
    notes: &mut Vec<String>,
) -> Option<LoadedFile> {
    let loaded = match LoadedFile::open(candidate) {
        Ok(m) => m,
        Err(e) => {
            notes.push(format!("debug file {e}"));
            return None;
        }
    };
    match loaded.parse() {
        Ok(f) if usable(&f) => Some(loaded),
        Ok(_) => {
            notes.push(format!("{}: no DWARF in debug file", candidate.display()));
            None
        }
        Err(e) => {
            notes.push(format!("debug file {e}"));
            None
        }
    }
}

/// DWARF sections `ids` of `file` (at `path`), decompressed in parallel; what is skipped is
/// noted in `notes`.
fn dwarf_sections<'d>(
    file: &object::File<'d>,
    path: &Path,
    ids: &[gimli::SectionId],
    notes: &mut Vec<String>,
) -> SectionBytes<'d> {
    let (sections, skipped) = load_sections(file, path, ids, |id| Some(id.name()));
    notes.extend(skipped);
    sections
}

/// Sections `ids` of `file` (at `path`), found by the names `name` gives them, decompressed in
/// parallel, and a note for each section skipped (see [`binary::section_data`]): it reads as
/// absent.
pub(crate) fn load_sections<'d>(
    file: &object::File<'d>,
    path: &Path,
    ids: &[gimli::SectionId],
    name: fn(gimli::SectionId) -> Option<&'static str>,
) -> (SectionBytes<'d>, Vec<String>) {
    let loaded: Vec<_> = ids
        .par_iter()
        .filter_map(|&id| Some((id, binary::section_data(file, name(id)?))))
        .collect();
    let mut notes = Vec::new();
    let mut sections = SectionBytes::new();
    for (id, data) in loaded {
        match data {
            Ok(bytes) => {
                sections.insert(id, bytes);
            }
            Err(why) => notes.push(format!("{}: {why}", path.display())),
        }
    }
    (sections, notes)
}

/// The sections the structure analysis uses: locations (`.debug_loc*`, large) are never read
/// there, so they are not decompressed (variables ask for them too).
fn gimli_section_ids() -> [gimli::SectionId; 10] {
    use gimli::SectionId::*;
    [
        DebugAbbrev,
        DebugAddr,
        DebugInfo,
        DebugLine,
        DebugLineStr,
        DebugRanges,
        DebugRngLists,
        DebugStr,
        DebugStrOffsets,
        DebugTypes,
    ]
}
