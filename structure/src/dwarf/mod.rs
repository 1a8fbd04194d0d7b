//! Reading DWARF: procedures (`DW_TAG_subprogram`), their trees of inlined calls
//! (`DW_TAG_inlined_subroutine`) and the line table, one compilation unit at a time and in
//! parallel. A unit that fails to parse is dropped and reported; the others are unaffected.
//!
//! The names and declaration files of procedures and inlined calls are found by following
//! `DW_AT_abstract_origin` and `DW_AT_specification` wherever they lead: within the unit, into
//! other units of the module (rustc's ThinLTO, GCC's LTO) and into the supplementary file that
//! `dwz` or DWARF 5 splits common entries into (modules `origins` and `units`).
//!
//! Line programs that no readable unit refers to (`.debug_info` stripped, or the unit corrupt)
//! are still read, by walking `.debug_line` from one program header to the next: their code
//! then has lines but no procedures or inline records from DWARF, and [`crate::aliens`] infers
//! its inlined code from the line map.
//!
//! Modules: `entries` walks one unit's entries, `origins` resolves names and declarations,
//! `units` finds units by offset, `lines` reads line programs, `on_demand` reads units for a
//! focused analysis ([`UnitsOnDemand`]).

mod entries;
mod lines;
mod on_demand;
mod origins;
mod scopes;
mod split;
mod units;

pub use on_demand::UnitsOnDemand;
pub use split::SplitDwarf;

pub(crate) use lines::unit_files;
pub(crate) use origins::Declarations;
pub(crate) use units::{DebugUnits, Section, UnitId};

use gimli::{EndianSlice, LittleEndian};
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

/// The reader type over section bytes read into memory (or decompressed).
pub type Slice<'d> = EndianSlice<'d, LittleEndian>;

/// The (decompressed) bytes of a file's DWARF sections.
pub(crate) type SectionBytes<'d> = HashMap<gimli::SectionId, Cow<'d, [u8]>>;

/// Section `id` of `sections` as a gimli reader (empty if absent).
pub(crate) fn section_slice<'s>(sections: &'s SectionBytes<'_>, id: gimli::SectionId) -> Slice<'s> {
    let data: &[u8] = sections.get(&id).map_or(&[], |c| c.as_ref());
    EndianSlice::new(data, LittleEndian)
}

/// A gimli view of `sections` (absent sections read as empty).
pub(crate) fn dwarf_from<'s>(sections: &'s SectionBytes<'_>) -> gimli::Dwarf<Slice<'s>> {
    gimli::Dwarf::load(|id| Ok::<_, std::convert::Infallible>(section_slice(sections, id)))
        .unwrap_or_else(|never| match never {})
}

/// A row of the merged line table: from `address` up to the next row, code belongs to `line` of
/// `file` (`file == NO_FILE` marks an address range without line information).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRow {
    /// First address covered.
    pub address: u64,
    /// Index in [`DwarfInfo::files`], or [`NO_FILE`].
    pub file: u32,
    /// Line (0 = unknown).
    pub line: u32,
}

/// File index meaning "no line information".
pub const NO_FILE: u32 = u32::MAX;

/// One inlined call inside a procedure (flattened: parents precede children).
#[derive(Clone, Debug)]
pub struct InlineCall {
    /// Enclosing inlined call, `None` when directly in the procedure.
    pub parent: Option<u32>,
    /// Nesting depth, 1 for calls directly in the procedure.
    pub depth: u32,
    /// Code ranges of the inlined body.
    pub ranges: Vec<Range<u64>>,
    /// Callee's readable name (shared with every other call of the same callee in its unit).
    pub name: Arc<str>,
    /// Callee's link name, when known and different.
    pub link_name: Option<Arc<str>>,
    /// Callee's declaration file.
    pub file: Option<u32>,
    /// Callee's declaration line.
    pub line: u32,
    /// File of the call site.
    pub call_file: Option<u32>,
    /// Line of the call site.
    pub call_line: u32,
}

/// One procedure to build: a concrete `DW_TAG_subprogram`, or (`from_dwarf` false) a function
/// that only the symbol table names. [`crate::plan`] reconciles the two kinds into disjoint
/// procedures.
#[derive(Clone, Debug)]
pub struct ProcPlan {
    /// All its code ranges.
    pub ranges: Vec<Range<u64>>,
    /// Entry address (`DW_AT_entry_pc`, `DW_AT_low_pc` or the first range).
    pub entry: u64,
    /// Readable name.
    pub name: String,
    /// Link name, when known and different.
    pub link_name: Option<String>,
    /// Declaration file.
    pub file: Option<u32>,
    /// Declaration line.
    pub line: u32,
    /// Inlined calls, parents before children.
    pub inlines: Vec<InlineCall>,
    /// Whether the unit it comes from had any inline records at all (if not, inlined code is
    /// inferred from the line map).
    pub unit_has_inlines: bool,
    /// Whether it came from DWARF (else from the symbol table only).
    pub from_dwarf: bool,
    /// Whether DWARF marks it a program's main body (`DW_AT_main_subprogram`: a Fortran
    /// `program`, gfortran's `MAIN__`), which the compiler's own `main` wraps.
    pub main_program: bool,
    /// The functions its unit declares never to return: calls to them end a block.
    pub noreturn_callees: Arc<NoReturn>,
}

/// The functions one unit declares never to return (`DW_AT_noreturn`). Taken per unit, so that
/// a whole-module and a focused analysis of a procedure see the same set.
#[derive(Debug, Default)]
pub struct NoReturn {
    /// Link names (else names) of declarations and definitions, to match symbols.
    pub names: Vec<String>,
    /// Entry addresses of the unit's own definitions (which may have no symbol).
    pub entries: Vec<u64>,
}

impl NoReturn {
    /// Whether a call to `target`, whose symbol (if any) has link name `link_name`, never
    /// returns by this unit's declarations.
    pub fn contains(&self, target: u64, link_name: Option<&str>) -> bool {
        self.entries.contains(&target)
            || link_name.is_some_and(|n| self.names.iter().any(|c| c == n))
    }
}

/// Everything read from the DWARF of one module.
#[derive(Default)]
pub struct DwarfInfo {
    /// Source-file paths; indices are the `file` fields above.
    pub files: Vec<String>,
    /// Merged line table sorted by address, one row per address.
    pub rows: Vec<LineRow>,
    /// Concrete procedures.
    pub procs: Vec<ProcPlan>,
    /// What could not be read (a unit, a line program), one message each, naming the section
    /// offset.
    pub skipped: Vec<String>,
    /// Number of units read.
    pub units: usize,
    /// Line programs read without a unit (no `.debug_info`, or their unit unreadable).
    pub unitless_programs: usize,
    /// Address ranges (sorted) covered by the sequences of those line programs: code with lines
    /// but without procedure or inline records.
    pub unitless_code: Vec<Range<u64>>,
}

impl DwarfInfo {
    /// The line row covering `addr`, if any.
    pub fn row_at(&self, addr: u64) -> Option<&LineRow> {
        let pos = self.rows.partition_point(|r| r.address <= addr);
        let row = self.rows.get(pos.checked_sub(1)?)?;
        (row.file != NO_FILE).then_some(row)
    }

    /// [`DwarfInfo::row_at`] for addresses asked mostly in ascending order.
    pub fn row_cursor(&self) -> RowCursor<'_> {
        RowCursor {
            rows: &self.rows,
            next: 0,
        }
    }

    /// Index of the first row whose address is >= `addr`.
    pub fn first_row_from(&self, addr: u64) -> usize {
        self.rows.partition_point(|r| r.address < addr)
    }

    /// The pieces of `range` with one line row each: `(sub-range, row)`, in address order,
    /// skipping parts without line information.
    pub fn rows_in(&self, range: Range<u64>) -> impl Iterator<Item = (Range<u64>, LineRow)> + '_ {
        let first = self
            .rows
            .partition_point(|r| r.address <= range.start)
            .saturating_sub(1);
        self.rows[first..]
            .iter()
            .zip(
                self.rows[first..]
                    .iter()
                    .skip(1)
                    .map(|r| r.address)
                    .chain([u64::MAX]),
            )
            .take_while(move |(row, _)| row.address < range.end)
            .filter_map(move |(row, next)| {
                let lo = row.address.max(range.start);
                let hi = next.min(range.end);
                (lo < hi && row.file != NO_FILE).then_some((lo..hi, *row))
            })
    }

    /// Whether `addr` lies in code whose line program has no readable unit.
    pub fn is_unitless(&self, addr: u64) -> bool {
        let pos = self.unitless_code.partition_point(|r| r.start <= addr);
        pos.checked_sub(1)
            .is_some_and(|i| self.unitless_code[i].contains(&addr))
    }
}

/// Answers [`DwarfInfo::row_at`] by stepping on from the row of the address asked before, for
/// addresses asked in ascending order (a procedure's statements, one row each: a binary search
/// of the whole table for each was 3.5% of libpython's instructions); any other order is
/// answered by a search.
pub struct RowCursor<'a> {
    rows: &'a [LineRow],
    /// Index of the first row past the address asked before.
    next: usize,
}

impl RowCursor<'_> {
    /// Rows stepped over before the rest is searched.
    const STEPS: usize = 8;

    /// The line row covering `addr`, if any.
    pub fn row_at(&mut self, addr: u64) -> Option<&LineRow> {
        let rows = self.rows;
        if self.next > 0 && rows[self.next - 1].address > addr {
            self.next = rows.partition_point(|r| r.address <= addr);
        } else {
            let stop = rows.len().min(self.next + Self::STEPS);
            while self.next < stop && rows[self.next].address <= addr {
                self.next += 1;
            }
            if self.next == stop {
                self.next += rows[stop..].partition_point(|r| r.address <= addr);
            }
        }
        let row = rows.get(self.next.checked_sub(1)?)?;
        (row.file != NO_FILE).then_some(row)
    }
}

/// Rows of a line program with program-local files, each end of sequence a row whose file is
/// [`RawRow::END`] (16 bytes a row: libpython has 1.6 million).
type RawRows = Vec<LineRow>;

/// What marks an end of sequence among a program's rows.
struct RawRow;

impl RawRow {
    /// The file of a row that ends a sequence (a row's own index is kept below it).
    const END: u32 = NO_FILE;

    /// Whether `row` ends a sequence.
    fn is_end(row: &LineRow) -> bool {
        row.file == Self::END
    }
}

/// What one unit (or one line program without a unit) yields, with unit-local file indices.
#[derive(Clone)]
struct UnitOutput {
    files: Vec<String>,
    rows: RawRows,
    procs: Vec<ProcPlan>,
    /// Offset of its line program in `.debug_line`, if it has one.
    line_offset: Option<usize>,
}

/// Read all units of `dwarf`, the entries of skeleton units from their split units in `split`;
/// `in_code` says whether an address lies in an executable section (code at other addresses
/// was discarded by the linker and is ignored).
pub fn read_dwarf<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    split: &SplitDwarf<'d>,
    in_code: &(dyn Fn(u64) -> bool + Sync),
) -> DwarfInfo {
    let mut skipped = Vec::new();
    let units = DebugUnits::new(dwarf, split, &mut skipped);
    let count = units.main().len();
    let results: Vec<gimli::Result<UnitOutput>> = (0..count)
        .into_par_iter()
        .map(|i| entries::read_unit(&units, i, in_code))
        .collect();
    let mut outputs: Vec<UnitOutput> = Vec::with_capacity(count);
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(out) => outputs.push(out),
            Err(e) => skipped.push(unit_error(units.main().header(i), &e)),
        }
    }
    let read = outputs.len();
    let used: HashSet<usize> = outputs.iter().filter_map(|o| o.line_offset).collect();
    let unitless = lines::unitless_line_programs(dwarf, &used, in_code, &mut skipped);
    merge_with_unitless(outputs, unitless, skipped, read)
}

/// The rows of all units (in unit order) as one table sorted by address, one row an address.
/// Rows at the same address: a real row beats an end-of-sequence marker; among real rows the
/// last one wins, in unit order (the same choice as the addr2line crate).
///
/// Each unit's rows are sorted (stably) and thinned to one an address on their own, in
/// parallel; the thinned rows, in unit order, are then sorted stably again and thinned, so that
/// of two units' rows at an address the later unit's is the last one there. Sorting all rows
/// at once would hold twice as many, with a scratch buffer as large (libpython: 826k rows, 366k
/// kept; 40 MB at once instead of 12).
fn merge_rows(mut units: Vec<RawRows>) -> Vec<LineRow> {
    units.par_iter_mut().for_each(|rows| {
        sort_and_thin(rows);
        rows.shrink_to_fit();
    });
    let mut merged: Vec<LineRow> = Vec::with_capacity(units.iter().map(Vec::len).sum());
    for rows in units {
        // Each unit's rows are freed as soon as they are moved: they are not held twice.
        merged.extend(rows);
    }
    // Runs already sorted (a unit's rows each): the stable sort merges them, in parallel.
    merged.par_sort_by_key(row_key);
    thin(&mut merged);
    merged.shrink_to_fit();
    merged
}

/// Sort `rows` stably by address, ends of sequences before real rows at one address, and keep
/// the last row at each address.
fn sort_and_thin(rows: &mut RawRows) {
    rows.sort_by_key(row_key);
    thin(rows);
}

/// How rows are sorted: by address, ends of sequences before real rows at one address.
fn row_key(row: &LineRow) -> (u64, bool) {
    (row.address, !RawRow::is_end(row))
}

/// Keep the last of sorted `rows` at each address.
fn thin(rows: &mut RawRows) {
    rows.dedup_by(|later, earlier| {
        let same = later.address == earlier.address;
        if same {
            *earlier = *later;
        }
        same
    });
}

/// The message for a unit that could not be read.
pub(crate) fn unit_error(header: &gimli::UnitHeader<Slice<'_>>, e: &gimli::Error) -> String {
    let offset = header.debug_info_offset().map_or(0, |o| o.0);
    format!("DWARF unit at .debug_info+{offset:#x}: {e}")
}

/// Merge the outputs of units (in unit order) and of line programs without a unit.
fn merge_with_unitless(
    mut outputs: Vec<UnitOutput>,
    unitless: Vec<UnitOutput>,
    skipped: Vec<String>,
    units: usize,
) -> DwarfInfo {
    let unitless_programs = unitless.len();
    let unitless_code = lines::sequence_ranges(unitless.iter().map(|o| &o.rows));
    outputs.extend(unitless);
    let mut info = merge_units(outputs, skipped, units);
    info.unitless_programs = unitless_programs;
    info.unitless_code = unitless_code;
    info
}

/// Combine per-unit outputs: intern files globally, remap indices, merge line rows.
fn merge_units(mut outputs: Vec<UnitOutput>, skipped: Vec<String>, units: usize) -> DwarfInfo {
    let mut info = DwarfInfo::default();
    let mut file_ids: HashMap<String, u32> = HashMap::new();
    let maps: Vec<Vec<u32>> = (outputs.iter_mut())
        .map(|out| {
            (std::mem::take(&mut out.files).into_iter())
                .map(|f| {
                    *file_ids.entry(f).or_insert_with_key(|k| {
                        info.files.push(k.clone());
                        (info.files.len() - 1) as u32
                    })
                })
                .collect()
        })
        .collect();
    // Rows take the module's file indices in place, each unit on its own; an end of sequence
    // keeps its marker, and a row of a file the table lacks is told apart from it until the
    // rows are sorted.
    const MISSING: u32 = RawRow::END - 1;
    (outputs.par_iter_mut().zip(&maps)).for_each(|(out, map)| {
        for row in &mut out.rows {
            if !RawRow::is_end(row) {
                row.file = map.get(row.file as usize).copied().unwrap_or(MISSING);
            }
        }
    });
    let mut unit_rows = Vec::with_capacity(outputs.len());
    for (out, map) in outputs.into_iter().zip(&maps) {
        unit_rows.push(out.rows);
        let remap = |f: Option<u32>| f.and_then(|f| map.get(f as usize).copied());
        for mut p in out.procs {
            p.file = remap(p.file);
            for c in &mut p.inlines {
                c.file = remap(c.file);
                c.call_file = remap(c.call_file);
            }
            info.procs.push(p);
        }
    }
    let mut rows = merge_rows(unit_rows);
    for row in &mut rows {
        if row.file == MISSING {
            row.file = NO_FILE;
        }
    }
    info.rows = rows;
    info.skipped = skipped;
    info.units = units;
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(address: u64, file: u32, line: u32) -> LineRow {
        LineRow {
            address,
            file,
            line,
        }
    }

    /// What sorting all rows at once (stably, ends of sequences before real rows at an
    /// address) and keeping the last row at each address gives.
    fn sorted_whole(units: &[RawRows]) -> Vec<LineRow> {
        let mut all: Vec<LineRow> = units.concat();
        all.sort_by_key(|r| (r.address, !RawRow::is_end(r)));
        let mut out: Vec<LineRow> = Vec::new();
        for r in all {
            match out.last_mut() {
                Some(last) if last.address == r.address => *last = r,
                _ => out.push(r),
            }
        }
        out
    }

    #[test]
    fn a_cursor_answers_as_a_search_in_any_order() {
        let rows: Vec<LineRow> = (0..100u32)
            .map(|i| {
                row(
                    u64::from(i) * 4,
                    if i % 7 == 3 { NO_FILE } else { i % 5 },
                    i,
                )
            })
            .collect();
        let info = DwarfInfo {
            rows,
            ..DwarfInfo::default()
        };
        let mut cursor = info.row_cursor();
        // Ascending with small and large steps, then back, then past the end.
        let asked = [0, 1, 5, 13, 14, 80, 81, 399, 200, 2, 3, 1000, 396, 397];
        for addr in asked {
            assert_eq!(cursor.row_at(addr), info.row_at(addr), "at {addr}");
        }
    }

    #[test]
    fn merged_rows_are_those_of_one_sort_of_all() {
        let end = RawRow::END;
        let units = vec![
            // Two sequences out of order, a duplicate address, an end shared with the next
            // unit's first row.
            vec![
                row(0x40, 1, 4),
                row(0x48, end, 0),
                row(0x10, 1, 1),
                row(0x10, 1, 2),
                row(0x20, end, 0),
            ],
            vec![row(0x20, 2, 7), row(0x30, 2, 8), row(0x38, end, 0)],
            // Apart from the others.
            vec![row(0x100, 3, 1), row(0x110, end, 0)],
            // Meets the first unit's second sequence: of two real rows at 0x40 the later
            // unit's wins; its end at 0x44 falls inside the first unit's row.
            vec![row(0x40, 4, 9), row(0x44, end, 0)],
            Vec::new(),
        ];
        let merged = merge_rows(units.clone());
        assert_eq!(merged, sorted_whole(&units));
        assert_eq!(
            merged.iter().find(|r| r.address == 0x40),
            Some(&row(0x40, 4, 9))
        );
        assert_eq!(
            merged.iter().find(|r| r.address == 0x20),
            Some(&row(0x20, 2, 7))
        );
        assert_eq!(
            merged.iter().find(|r| r.address == 0x10),
            Some(&row(0x10, 1, 2))
        );
    }
}
