//! Line programs: rows, file tables, and the programs of `.debug_line` that no readable unit
//! refers to (read by walking the section from one program header to the next).

use super::{LineRow, RawRow, RawRows, Slice, UnitOutput};
use gimli::AttributeValue;
use std::collections::HashSet;
use std::ops::Range;

/// The line rows of a program (program-local files; an end of sequence marked
/// [`RawRow::END`]), dropping sequences outside the code.
pub(super) fn read_rows(
    program: gimli::IncompleteLineProgram<Slice<'_>>,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<RawRows> {
    let mut rows_out = Vec::new();
    let mut sequence: RawRows = Vec::new();
    let mut rows = program.rows();
    while let Some((_, row)) = rows.next_row()? {
        let line = row
            .line()
            .map_or(0, |l| l.get().min(u32::MAX as u64) as u32);
        let file = if row.end_sequence() {
            RawRow::END
        } else {
            // A (corrupt) index at the marker's value names no file, as any index past the
            // program's table does.
            row.file_index().min(u64::from(RawRow::END) - 1) as u32
        };
        sequence.push(LineRow {
            address: row.address(),
            file,
            line,
        });
        if row.end_sequence() {
            if sequence.first().is_some_and(|s| in_code(s.address)) {
                rows_out.append(&mut sequence);
            }
            sequence.clear();
        }
    }
    Ok(rows_out)
}

/// Full paths of the files of `unit`'s line program, indexed by DWARF file index (empty
/// without a program).
pub(crate) fn unit_files<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
) -> Vec<String> {
    let Some(program) = &unit.line_program else {
        return Vec::new();
    };
    let strings = |v| unit_string(dwarf, unit, v);
    file_table(&strings, &comp_dir(unit), program.header())
}

/// Full path of file `index` of `unit`'s line program, if it has one: the file a declaration
/// in that unit names with `DW_AT_decl_file`.
pub(super) fn unit_file<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
    index: u64,
) -> Option<String> {
    let header = unit.line_program.as_ref()?.header();
    let file = header.file(index)?;
    let strings = |v| unit_string(dwarf, unit, v);
    Some(file_path(&strings, &comp_dir(unit), header, file))
}

fn unit_string<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
    value: AttributeValue<Slice<'d>>,
) -> Option<String> {
    dwarf
        .attr_string(unit, value)
        .ok()
        .map(|s| s.to_string_lossy().into_owned())
}

fn comp_dir(unit: &gimli::Unit<Slice<'_>>) -> String {
    unit.comp_dir
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Full paths of a line program's files, indexed by DWARF file index; `string` resolves the
/// header's string attributes, `comp_dir` is the unit's directory ("" if unknown).
fn file_table<'d>(
    string: &dyn Fn(AttributeValue<Slice<'d>>) -> Option<String>,
    comp_dir: &str,
    header: &gimli::LineProgramHeader<Slice<'d>>,
) -> Vec<String> {
    // DWARF 5 numbers files from 0, earlier versions from 1 (index 0 unused).
    let base = if header.version() >= 5 { 0 } else { 1 };
    let mut out = vec![String::new(); base];
    out.extend(
        header
            .file_names()
            .iter()
            .map(|file| file_path(string, comp_dir, header, file)),
    );
    out
}

/// Full path of one entry of a line program's file table.
fn file_path<'d>(
    string: &dyn Fn(AttributeValue<Slice<'d>>) -> Option<String>,
    comp_dir: &str,
    header: &gimli::LineProgramHeader<Slice<'d>>,
    file: &gimli::FileEntry<Slice<'d>>,
) -> String {
    let name = string(file.path_name()).unwrap_or_default();
    let dir = file.directory(header).and_then(string).unwrap_or_default();
    join_path(comp_dir, &dir, &name)
}

/// `name` if absolute, else `dir/name` with `dir` made absolute against `comp_dir`.
fn join_path(comp_dir: &str, dir: &str, name: &str) -> String {
    if name.starts_with('/') {
        return name.to_string();
    }
    let dir = if dir.starts_with('/') || comp_dir.is_empty() {
        dir.to_string()
    } else if dir.is_empty() {
        comp_dir.to_string()
    } else {
        format!("{comp_dir}/{dir}")
    };
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{}/{name}", dir.trim_end_matches('/'))
    }
}

/// The line programs of `.debug_line` that no read unit refers to (offsets not in `used`),
/// found by walking the section header by header. A header that cannot be parsed ends the
/// walk (the next one cannot be found); a program whose rows are corrupt is skipped.
pub(super) fn unitless_line_programs<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    used: &HashSet<usize>,
    in_code: &dyn Fn(u64) -> bool,
    skipped: &mut Vec<String>,
) -> Vec<UnitOutput> {
    use gimli::Section;
    let size = dwarf.debug_line.reader().len();
    let mut out = Vec::new();
    let mut offset = 0usize;
    while offset < size {
        // Without a unit the address size is unknown; DWARF 5 headers state it, and x86-64
        // code uses 8 in any case.
        let program = match dwarf
            .debug_line
            .program(gimli::DebugLineOffset(offset), 8, None, None)
        {
            Ok(p) => p,
            Err(e) => {
                skipped.push(format!(
                    "line program at .debug_line+{offset:#x}: {e}; the rest of .debug_line is not read"
                ));
                break;
            }
        };
        let header = program.header();
        let next = offset
            .saturating_add(header.unit_length())
            .saturating_add(header.format().initial_length_size() as usize);
        if !used.contains(&offset) {
            out.extend(unitless_program(dwarf, program, offset, in_code, skipped));
        }
        offset = next;
    }
    out
}

/// The files and rows of the line program at `.debug_line+offset`, read without its unit;
/// `None` if it has no rows in the code (or they are corrupt: reported in `skipped`).
pub(super) fn unitless_program<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    program: gimli::IncompleteLineProgram<Slice<'d>>,
    offset: usize,
    in_code: &dyn Fn(u64) -> bool,
    skipped: &mut Vec<String>,
) -> Option<UnitOutput> {
    let header = program.header();
    let strings = |v| unitless_string(dwarf, v);
    // DWARF 5 states the unit's directory as directory 0; earlier versions only in the unit,
    // so their relative paths stay relative.
    let comp_dir = (header.version() >= 5)
        .then(|| header.directory(0).and_then(strings))
        .flatten()
        .unwrap_or_default();
    let files = file_table(&strings, &comp_dir, header);
    match read_rows(program, in_code) {
        Ok(rows) if !rows.is_empty() => Some(UnitOutput {
            files,
            rows,
            procs: Vec::new(),
            line_offset: Some(offset),
        }),
        Ok(_) => None,
        Err(e) => {
            skipped.push(format!("line program at .debug_line+{offset:#x}: {e}"));
            None
        }
    }
}

/// A string attribute of a line program header read without a unit (no `.debug_str_offsets`
/// base is known, so only inline strings and direct section references resolve).
fn unitless_string<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    value: AttributeValue<Slice<'d>>,
) -> Option<String> {
    let s = match value {
        AttributeValue::String(s) => s,
        AttributeValue::DebugLineStrRef(o) => dwarf.debug_line_str.get_str(o).ok()?,
        AttributeValue::DebugStrRef(o) => dwarf.debug_str.get_str(o).ok()?,
        _ => return None,
    };
    Some(s.to_string_lossy().into_owned())
}

/// The address ranges of the sequences in `programs`' rows, sorted and coalesced.
pub(super) fn sequence_ranges<'a>(programs: impl Iterator<Item = &'a RawRows>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for rows in programs {
        let mut start = None;
        for row in rows {
            let address = row.address;
            match (start, RawRow::is_end(row)) {
                (None, false) => start = Some(address),
                (Some(s), true) => {
                    out.push(s..address);
                    start = None;
                }
                _ => {}
            }
        }
    }
    crate::ranges::normalize_ranges(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_like_compilers_mean() {
        assert_eq!(join_path("/b", "src", "a.c"), "/b/src/a.c");
        assert_eq!(
            join_path("/b", "/usr/include", "stdio.h"),
            "/usr/include/stdio.h"
        );
        assert_eq!(join_path("/b", "", "a.c"), "/b/a.c");
        assert_eq!(join_path("/b", "x", "/abs/a.c"), "/abs/a.c");
    }
}
