//! Reading DWARF: procedures (`DW_TAG_subprogram`), their trees of inlined calls
//! (`DW_TAG_inlined_subroutine`) and the line table, one compilation unit at a time and in
//! parallel. A unit that fails to parse is dropped and reported; the others are unaffected.
//!
//! Line programs that no readable unit refers to (`.debug_info` stripped, or the unit corrupt)
//! are still read, by walking `.debug_line` from one program header to the next: their code
//! then has lines but no procedures or inline records from DWARF, and [`crate::aliens`] infers
//! its inlined code from the line map.

use crate::demangle::demangle;
use gimli::{AttributeValue, EndianSlice, LittleEndian};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

/// The reader type over memory-mapped (or decompressed) section bytes.
pub type Slice<'d> = EndianSlice<'d, LittleEndian>;

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
    /// Callee's readable name.
    pub name: String,
    /// Callee's link name, when known and different.
    pub link_name: Option<String>,
    /// Callee's declaration file.
    pub file: Option<u32>,
    /// Callee's declaration line.
    pub line: u32,
    /// File of the call site.
    pub call_file: Option<u32>,
    /// Line of the call site.
    pub call_line: u32,
}

/// A concrete procedure from `DW_TAG_subprogram`.
#[derive(Clone, Debug)]
pub struct DwarfProc {
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
    /// Whether the unit it comes from had any inline records at all.
    pub unit_has_inlines: bool,
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
    pub procs: Vec<DwarfProc>,
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

/// Rows of a line program: `(address, file, line, end_of_sequence)` with program-local files.
type RawRows = Vec<(u64, u32, u32, bool)>;

/// What one unit (or one line program without a unit) yields, with unit-local file indices.
#[derive(Clone)]
struct UnitOutput {
    files: Vec<String>,
    rows: RawRows,
    procs: Vec<DwarfProc>,
    /// Offset of its line program in `.debug_line`, if it has one.
    line_offset: Option<usize>,
}

/// Read all units of `dwarf`; `in_code` says whether an address lies in an executable section
/// (code at other addresses was discarded by the linker and is ignored).
pub fn read_dwarf(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    in_code: &(dyn Fn(u64) -> bool + Sync),
) -> DwarfInfo {
    let mut skipped = Vec::new();
    let headers = unit_headers(dwarf, &mut skipped);
    let mut outputs: Vec<UnitOutput> = Vec::with_capacity(headers.len());
    for (h, result) in headers.iter().zip(
        headers
            .par_iter()
            .map(|h| read_unit(dwarf, *h, in_code))
            .collect::<Vec<_>>(),
    ) {
        match result {
            Ok(out) => outputs.push(out),
            Err(e) => skipped.push(unit_error(h, &e)),
        }
    }
    let units = outputs.len();
    let used: HashSet<usize> = outputs.iter().filter_map(|o| o.line_offset).collect();
    let unitless = unitless_line_programs(dwarf, &used, in_code, &mut skipped);
    merge_with_unitless(outputs, unitless, skipped, units)
}

/// The headers of all units of `.debug_info`; a header that cannot be read ends the list.
fn unit_headers<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    skipped: &mut Vec<String>,
) -> Vec<gimli::UnitHeader<Slice<'d>>> {
    let mut headers = Vec::new();
    let mut iter = dwarf.units();
    loop {
        match iter.next() {
            Ok(Some(h)) => headers.push(h),
            Ok(None) => break,
            Err(e) => {
                skipped.push(format!(
                    "DWARF unit headers unreadable after unit {}: {e}",
                    headers.len()
                ));
                break;
            }
        }
    }
    headers
}

/// The message for a unit that could not be read.
fn unit_error(header: &gimli::UnitHeader<Slice<'_>>, e: &gimli::Error) -> String {
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
    let unitless_code = sequence_ranges(unitless.iter().map(|o| &o.rows));
    outputs.extend(unitless);
    let mut info = merge_units(outputs, skipped, units);
    info.unitless_programs = unitless_programs;
    info.unitless_code = unitless_code;
    info
}

/// The DWARF of a module, read unit by unit on demand.
///
/// Building it indexes every unit by the address ranges of its root entry (`DW_AT_low_pc` /
/// `DW_AT_high_pc` or `DW_AT_ranges`, which DWARF requires of every unit with code), which
/// costs only the unit headers and root entries. [`UnitsOnDemand::read_covering`] then reads
/// the entries and line programs of just the units whose ranges meet a region, and
/// [`UnitsOnDemand::info`] merges what was read exactly as [`read_dwarf`] merges all units
/// (same unit order, so rows at one address resolve the same way). Line programs without a
/// unit are always read: their code has no unit to be found by. A unit whose root entry names
/// no ranges holds no code and is never read.
pub struct UnitsOnDemand<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    units: Vec<IndexedUnit<'d>>,
    unitless: Vec<UnitOutput>,
    skipped: Vec<String>,
}

/// One unit of [`UnitsOnDemand`].
struct IndexedUnit<'d> {
    header: gimli::UnitHeader<Slice<'d>>,
    unit: gimli::Unit<Slice<'d>>,
    /// Its code ranges, sorted and coalesced.
    ranges: Vec<Range<u64>>,
    /// Its output once read, or `None` before (or if reading failed: `tried` is then set).
    output: Option<UnitOutput>,
    tried: bool,
}

impl<'a, 'd> UnitsOnDemand<'a, 'd> {
    /// Index the units of `dwarf` (in parallel) and read its line programs without a unit.
    pub fn new(
        dwarf: &'a gimli::Dwarf<Slice<'d>>,
        in_code: &(dyn Fn(u64) -> bool + Sync),
    ) -> UnitsOnDemand<'a, 'd> {
        let mut skipped = Vec::new();
        let headers = unit_headers(dwarf, &mut skipped);
        let indexed: Vec<gimli::Result<IndexedUnit<'d>>> = headers
            .par_iter()
            .map(|&header| {
                let unit = dwarf.unit(header)?;
                let ranges = root_ranges(dwarf, &unit, in_code)?;
                Ok(IndexedUnit {
                    header,
                    unit,
                    ranges,
                    output: None,
                    tried: false,
                })
            })
            .collect();
        let mut units = Vec::with_capacity(indexed.len());
        for (h, result) in headers.iter().zip(indexed) {
            match result {
                Ok(u) => units.push(u),
                Err(e) => skipped.push(unit_error(h, &e)),
            }
        }
        let used: HashSet<usize> = units
            .iter()
            .filter_map(|u| u.unit.line_program.as_ref())
            .map(|p| p.header().offset().0)
            .collect();
        let unitless = unitless_line_programs(dwarf, &used, in_code, &mut skipped);
        UnitsOnDemand {
            dwarf,
            units,
            unitless,
            skipped,
        }
    }

    /// Whether the module has no units and no line programs at all.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty() && self.unitless.is_empty()
    }

    /// Read (in parallel) every unit not read yet whose ranges meet `region` (sorted,
    /// disjoint). Returns whether any unit was read.
    pub fn read_covering(
        &mut self,
        region: &[Range<u64>],
        in_code: &(dyn Fn(u64) -> bool + Sync),
    ) -> bool {
        let dwarf = self.dwarf;
        let fresh: Vec<(usize, gimli::Result<UnitOutput>)> = self
            .units
            .par_iter()
            .enumerate()
            .filter(|(_, u)| !u.tried && crate::scope::ranges_meet(region, &u.ranges))
            .map(|(i, u)| (i, read_parsed_unit(dwarf, &u.unit, in_code)))
            .collect();
        let any = !fresh.is_empty();
        for (i, result) in fresh {
            let u = &mut self.units[i];
            u.tried = true;
            match result {
                Ok(out) => u.output = Some(out),
                Err(e) => {
                    self.skipped.push(unit_error(&u.header, &e));
                    self.read_line_program_alone(i, in_code);
                }
            }
        }
        any
    }

    /// Read the line program of unit `i`, whose entries are corrupt, as a line program without
    /// a unit: what [`read_dwarf`] does with it.
    fn read_line_program_alone(&mut self, i: usize, in_code: &dyn Fn(u64) -> bool) {
        let Some(offset) = self.units[i]
            .unit
            .line_program
            .as_ref()
            .map(|p| p.header().offset())
        else {
            return;
        };
        let program = match self.dwarf.debug_line.program(offset, 8, None, None) {
            Ok(p) => p,
            Err(e) => {
                let at = offset.0;
                self.skipped
                    .push(format!("line program at .debug_line+{at:#x}: {e}"));
                return;
            }
        };
        let read = unitless_program(self.dwarf, program, offset.0, in_code, &mut self.skipped);
        if let Some(out) = read {
            let at = self
                .unitless
                .partition_point(|o| o.line_offset < out.line_offset);
            self.unitless.insert(at, out);
        }
    }

    /// The procedures of the units read so far.
    pub fn procs(&self) -> impl Iterator<Item = &DwarfProc> + use<'_, 'a, 'd> {
        self.units
            .iter()
            .filter_map(|u| u.output.as_ref())
            .flat_map(|o| &o.procs)
    }

    /// The code ranges of every unit whose line program names one of `files` (full paths):
    /// the units that may hold procedures declared in those files.
    pub fn ranges_of_units_naming(&self, files: &HashSet<String>) -> Vec<Range<u64>> {
        let dwarf = self.dwarf;
        let ranges: Vec<Range<u64>> = self
            .units
            .par_iter()
            .filter(|u| unit_files(dwarf, &u.unit).iter().any(|f| files.contains(f)))
            .flat_map_iter(|u| u.ranges.iter().cloned())
            .collect();
        crate::scope::normalize_ranges(ranges)
    }

    /// Everything read so far, merged as [`read_dwarf`] merges all units.
    pub fn info(&self) -> DwarfInfo {
        let outputs: Vec<UnitOutput> = self.units.iter().filter_map(|u| u.output.clone()).collect();
        let units = outputs.len();
        merge_with_unitless(outputs, self.unitless.clone(), self.skipped.clone(), units)
    }
}

/// The code ranges of a unit's root entry, sorted and coalesced (empty without range
/// attributes).
fn root_ranges<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<Vec<Range<u64>>> {
    let mut out = Vec::new();
    let mut iter = dwarf.unit_ranges(unit)?;
    while let Some(r) = iter.next()? {
        if r.begin < r.end && in_code(r.begin) {
            out.push(r.begin..r.end);
        }
    }
    Ok(crate::scope::normalize_ranges(out))
}

/// The line programs of `.debug_line` that no read unit refers to (offsets not in `used`),
/// found by walking the section header by header. A header that cannot be parsed ends the
/// walk (the next one cannot be found); a program whose rows are corrupt is skipped.
fn unitless_line_programs<'d>(
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
fn unitless_program<'d>(
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
fn sequence_ranges<'a>(programs: impl Iterator<Item = &'a RawRows>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for rows in programs {
        let mut start = None;
        for &(address, _, _, end) in rows {
            match (start, end) {
                (None, false) => start = Some(address),
                (Some(s), true) => {
                    out.push(s..address);
                    start = None;
                }
                _ => {}
            }
        }
    }
    crate::scope::normalize_ranges(out)
}

/// Combine per-unit outputs: intern files globally, remap indices, merge line rows.
fn merge_units(outputs: Vec<UnitOutput>, skipped: Vec<String>, units: usize) -> DwarfInfo {
    let mut info = DwarfInfo::default();
    let mut file_ids: HashMap<String, u32> = HashMap::new();
    let mut rows: RawRows = Vec::new();
    for out in outputs {
        let map: Vec<u32> = out
            .files
            .into_iter()
            .map(|f| {
                *file_ids.entry(f).or_insert_with_key(|k| {
                    info.files.push(k.clone());
                    (info.files.len() - 1) as u32
                })
            })
            .collect();
        let remap = |f: Option<u32>| f.and_then(|f| map.get(f as usize).copied());
        rows.extend(out.rows.into_iter().map(|(a, f, l, end)| {
            let f = if end {
                NO_FILE
            } else {
                remap(Some(f)).unwrap_or(NO_FILE)
            };
            (a, f, l, end)
        }));
        for mut p in out.procs {
            p.file = remap(p.file);
            for c in &mut p.inlines {
                c.file = remap(c.file);
                c.call_file = remap(c.call_file);
            }
            info.procs.push(p);
        }
    }
    // Rows at the same address: a real row beats an end-of-sequence marker; among real rows the
    // last one wins (the same choice as the addr2line crate).
    rows.sort_by_key(|&(a, _, _, end)| (a, !end));
    let mut merged: Vec<LineRow> = Vec::with_capacity(rows.len());
    for (address, file, line, _) in rows {
        match merged.last_mut() {
            Some(last) if last.address == address => {
                *last = LineRow {
                    address,
                    file,
                    line,
                }
            }
            _ => merged.push(LineRow {
                address,
                file,
                line,
            }),
        }
    }
    info.rows = merged;
    info.skipped = skipped;
    info.units = units;
    info
}

/// Name and declaration of a DIE, following `DW_AT_abstract_origin` / `DW_AT_specification`.
#[derive(Clone, Default)]
struct Decl {
    name: Option<String>,
    link_name: Option<String>,
    file: Option<u32>,
    line: u32,
}

impl Decl {
    fn display_name(&self) -> String {
        match (&self.link_name, &self.name) {
            (Some(l), _) => demangle(l),
            (None, Some(n)) => n.clone(),
            (None, None) => "<unknown>".to_string(),
        }
    }

    fn link_if_different(&self, display: &str) -> Option<String> {
        self.link_name.clone().filter(|l| l != display)
    }
}

struct UnitReader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    unit: &'a gimli::Unit<Slice<'d>>,
    decls: HashMap<usize, Decl>,
}

impl<'a, 'd> UnitReader<'a, 'd> {
    fn string(&self, value: AttributeValue<Slice<'d>>) -> Option<String> {
        let s = self.dwarf.attr_string(self.unit, value).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    /// The declaration info of the DIE at `offset`, following origins up to a few levels.
    fn decl_at(&mut self, offset: gimli::UnitOffset, depth: u32) -> Decl {
        if let Some(d) = self.decls.get(&offset.0) {
            return d.clone();
        }
        let decl = match self.unit.entry(offset) {
            Ok(entry) => self.decl_of(&entry, depth),
            Err(_) => Decl::default(),
        };
        self.decls.insert(offset.0, decl.clone());
        decl
    }

    fn decl_of(&mut self, entry: &gimli::DebuggingInformationEntry<Slice<'d>>, depth: u32) -> Decl {
        let mut d = Decl::default();
        let mut origin = None;
        for attr in entry.attrs() {
            match attr.name() {
                gimli::DW_AT_name => d.name = self.string(attr.value()),
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    d.link_name = self.string(attr.value())
                }
                gimli::DW_AT_decl_file => d.file = attr.udata_value().map(|v| v as u32),
                gimli::DW_AT_decl_line => d.line = attr.udata_value().unwrap_or(0) as u32,
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                    origin = Some(attr.value())
                }
                _ => {}
            }
        }
        if let (Some(AttributeValue::UnitRef(o)), true) = (origin, depth < 8) {
            let from = self.decl_at(o, depth + 1);
            d.name = d.name.or(from.name);
            d.link_name = d.link_name.or(from.link_name);
            if d.file.is_none() {
                d.file = from.file;
                d.line = from.line;
            }
        }
        d
    }

    fn ranges(
        &self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        in_code: &dyn Fn(u64) -> bool,
    ) -> gimli::Result<Vec<Range<u64>>> {
        let mut out = Vec::new();
        let mut iter = self.dwarf.die_ranges(self.unit, entry)?;
        while let Some(r) = iter.next()? {
            if r.begin < r.end && in_code(r.begin) {
                out.push(r.begin..r.end);
            }
        }
        Ok(out)
    }
}

/// Context of an open DIE during the walk.
#[derive(Clone, Copy)]
enum Open {
    /// Not inside concrete code.
    Nothing,
    /// Inside procedure `procs[.0]`, inlined call `.1` (if any).
    Code(usize, Option<u32>),
}

fn read_unit<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    header: gimli::UnitHeader<Slice<'d>>,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<UnitOutput> {
    read_parsed_unit(dwarf, &dwarf.unit(header)?, in_code)
}

/// [`read_unit`] for a unit whose header and root are already parsed.
fn read_parsed_unit<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<UnitOutput> {
    let line_offset = unit.line_program.as_ref().map(|p| p.header().offset().0);
    let (files, rows) = match &unit.line_program {
        Some(program) => (
            unit_files(dwarf, unit),
            read_rows(program.clone(), in_code)?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut reader = UnitReader {
        dwarf,
        unit,
        decls: HashMap::new(),
    };
    let mut procs: Vec<DwarfProc> = Vec::new();
    let mut stack: Vec<(isize, Open)> = Vec::new();
    let mut any_inline = false;
    let mut unit_noreturn = NoReturn::default();
    let mut cursor = unit.entries();
    while let Some(entry) = cursor.next_dfs()? {
        let depth = entry.depth();
        while stack.last().is_some_and(|&(d, _)| d >= depth) {
            stack.pop();
        }
        let context = stack.last().map_or(Open::Nothing, |&(_, o)| o);
        let open = match entry.tag() {
            gimli::DW_TAG_subprogram => {
                let noreturn =
                    entry.attr_value(gimli::DW_AT_noreturn) == Some(AttributeValue::Flag(true));
                if noreturn {
                    let decl = reader.decl_of(entry, 0);
                    unit_noreturn.names.extend(decl.link_name.or(decl.name));
                }
                let ranges = reader.ranges(entry, in_code)?;
                if ranges.is_empty() {
                    Open::Nothing
                } else {
                    let decl = reader.decl_of(entry, 0);
                    let entry_pc = entry_pc(dwarf, unit, entry)
                        .filter(|pc| ranges.iter().any(|r| r.contains(pc)));
                    let name = decl.display_name();
                    procs.push(DwarfProc {
                        entry: entry_pc.unwrap_or(ranges[0].start),
                        ranges,
                        link_name: decl.link_if_different(&name),
                        name,
                        file: decl.file,
                        line: decl.line,
                        inlines: Vec::new(),
                        unit_has_inlines: false,
                        noreturn_callees: Arc::default(),
                    });
                    if noreturn {
                        unit_noreturn.entries.push(procs[procs.len() - 1].entry);
                    }
                    Open::Code(procs.len() - 1, None)
                }
            }
            gimli::DW_TAG_inlined_subroutine => match context {
                Open::Code(p, parent) => {
                    any_inline = true;
                    let ranges = reader.ranges(entry, in_code)?;
                    let decl = reader.decl_of(entry, 0);
                    let call_file = entry
                        .attr(gimli::DW_AT_call_file)
                        .and_then(|a| a.udata_value())
                        .map(|v| v as u32);
                    let call_line = entry
                        .attr(gimli::DW_AT_call_line)
                        .and_then(|a| a.udata_value())
                        .unwrap_or(0) as u32;
                    let depth = parent.map_or(1, |q| procs[p].inlines[q as usize].depth + 1);
                    let name = decl.display_name();
                    procs[p].inlines.push(InlineCall {
                        parent,
                        depth,
                        ranges,
                        link_name: decl.link_if_different(&name),
                        name,
                        file: decl.file,
                        line: decl.line,
                        call_file,
                        call_line,
                    });
                    Open::Code(p, Some((procs[p].inlines.len() - 1) as u32))
                }
                Open::Nothing => Open::Nothing,
            },
            _ => context,
        };
        if entry.has_children() {
            stack.push((depth, open));
        }
    }
    let noreturn_callees = Arc::new(unit_noreturn);
    for p in &mut procs {
        p.unit_has_inlines = any_inline;
        p.noreturn_callees = noreturn_callees.clone();
    }
    Ok(UnitOutput {
        files,
        rows,
        procs,
        line_offset,
    })
}

/// Full paths of the files of `unit`'s line program (empty without one).
fn unit_files<'d>(dwarf: &gimli::Dwarf<Slice<'d>>, unit: &gimli::Unit<Slice<'d>>) -> Vec<String> {
    let Some(program) = &unit.line_program else {
        return Vec::new();
    };
    let strings = |v| {
        dwarf
            .attr_string(unit, v)
            .ok()
            .map(|s| s.to_string_lossy().into_owned())
    };
    let comp_dir = unit
        .comp_dir
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    file_table(&strings, &comp_dir, program.header())
}

fn entry_pc(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    entry: &gimli::DebuggingInformationEntry<Slice<'_>>,
) -> Option<u64> {
    let attr = entry
        .attr(gimli::DW_AT_entry_pc)
        .or_else(|| entry.attr(gimli::DW_AT_low_pc))?;
    dwarf.attr_address(unit, attr.value()).ok().flatten()
}

/// The line rows `(address, file, line, end_of_sequence)` of a program, dropping sequences
/// outside the code.
fn read_rows(
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
        sequence.push((
            row.address(),
            row.file_index() as u32,
            line,
            row.end_sequence(),
        ));
        if row.end_sequence() {
            if sequence.first().is_some_and(|s| in_code(s.0)) {
                rows_out.append(&mut sequence);
            }
            sequence.clear();
        }
    }
    Ok(rows_out)
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
    for file in header.file_names() {
        let name = string(file.path_name()).unwrap_or_default();
        let dir = file.directory(header).and_then(string).unwrap_or_default();
        out.push(join_path(comp_dir, &dir, &name));
    }
    out
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
