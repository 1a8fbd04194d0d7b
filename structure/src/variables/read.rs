//! Reading a [`DataLayout`] from an ELF file: its DWARF found and loaded as the structure
//! analysis finds it (separate debug files, compressed sections, supplementary files, split
//! DWARF), every unit walked in parallel, the results merged, and the symbol table added.

use super::frames::Frames;
use super::symbols::{data_symbols, merge_statics};
use super::types::TypeArena;
use super::walk::{self, UnitVars};
use super::DataLayout;
use crate::binary::{self, LoadedFile};
use crate::debuginfo::DebugFiles;
use crate::dwarf::{unit_error, DebugUnits};
use crate::dwofiles::DwoFiles;
use crate::error::StructureError;
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::Path;

/// Read the data layout of the ELF file at `path`.
pub(super) fn read(path: &Path) -> Result<DataLayout, StructureError> {
    let loaded = LoadedFile::open(path)?;
    let file = loaded.parse()?;
    let code = binary::code_sections(&file);
    let in_code = |a: u64| code.iter().any(|c| c.contains(a));

    let debug_files = DebugFiles::open(path, &file, &file);
    let separate = debug_files.separate_file()?;
    let mut notes = debug_files.notes.clone();
    let sections = debug_files.sections_with_locations(&file)?;
    let dwarf = sections.dwarf();
    let dwo_files = DwoFiles::find(path, &dwarf);
    let dwo_sections = dwo_files.sections(&dwarf);
    notes.extend(sections.notes.iter().chain(&dwo_sections.notes).cloned());
    let split = dwo_sections.split();
    let units = DebugUnits::new(&dwarf, &split, &mut notes);

    let results: Vec<gimli::Result<UnitVars>> = (0..units.main().len())
        .into_par_iter()
        .map(|i| walk::read_unit(&units, i, &in_code))
        .collect();
    let mut types = TypeArena::default();
    let mut index = HashMap::new();
    let mut statics = Vec::new();
    let mut frames = Vec::new();
    for (i, result) in results.into_iter().enumerate() {
        let unit = match result {
            Ok(unit) => unit,
            Err(e) => {
                notes.push(unit_error(units.main().header(i), &e));
                continue;
            }
        };
        let map = types.absorb(unit.types, &mut index);
        let remap = |t: &mut Option<super::TypeId>| {
            *t = t.and_then(|t| map.get(t.0 as usize).copied());
        };
        for mut s in unit.statics {
            remap(&mut s.ty);
            statics.push(s);
        }
        let mut unit_frames = unit.frames;
        for (_, v) in &mut unit_frames.vars {
            remap(&mut v.ty);
        }
        frames.push(unit_frames);
    }
    let symbols = data_symbols(&file, separate.as_ref());
    Ok(DataLayout {
        statics: merge_statics(statics, symbols),
        frames: Frames::build(frames),
        types,
        notes,
    })
}
