//! Reading a module's DWARF unit by unit, on demand: what a focused analysis reads.

#[cfg(doc)]
use super::read_dwarf;
use super::units::DebugUnits;
use super::{entries, lines, merge_with_unitless, unit_error, DwarfInfo, ProcPlan, Slice};
use super::{SplitDwarf, UnitOutput};
use rayon::prelude::*;
use std::collections::HashSet;
use std::ops::Range;

/// The DWARF of a module, read unit by unit on demand.
///
/// Building it indexes every unit by the address ranges of its root entry (`DW_AT_low_pc` /
/// `DW_AT_high_pc` or `DW_AT_ranges`, which DWARF requires of every unit with code), which
/// costs only the unit headers and root entries. [`UnitsOnDemand::read_covering`] then reads
/// the entries and line programs of just the units whose ranges meet a region, and
/// [`UnitsOnDemand::info`] merges what was read exactly as [`read_dwarf`] merges all units
/// (same unit order, so rows at one address resolve the same way). Line programs without a
/// unit are always read: their code has no unit to be found by. A unit whose root entry names
/// no ranges holds no code and is never read for itself, though the names and declarations of
/// inlined code are still looked up in it (and in the supplementary file) as in [`read_dwarf`].
pub struct UnitsOnDemand<'a, 'd> {
    units: DebugUnits<'a, 'd>,
    indexed: Vec<IndexedUnit>,
    unitless: Vec<UnitOutput>,
    skipped: Vec<String>,
}

/// One readable unit of [`UnitsOnDemand`].
struct IndexedUnit {
    /// Its index among the module's units.
    index: usize,
    /// Its code ranges, sorted and coalesced.
    ranges: Vec<Range<u64>>,
    /// Its output once read, or `None` before (or if reading failed: `tried` is then set).
    output: Option<UnitOutput>,
    tried: bool,
}

impl<'a, 'd> UnitsOnDemand<'a, 'd> {
    /// Index the units of `dwarf` (in parallel) and read its line programs without a unit;
    /// skeleton units will read their entries from their split units in `split`.
    pub fn new(
        dwarf: &'a gimli::Dwarf<Slice<'d>>,
        split: &'a SplitDwarf<'d>,
        in_code: &(dyn Fn(u64) -> bool + Sync),
    ) -> UnitsOnDemand<'a, 'd> {
        let mut skipped = Vec::new();
        let units = DebugUnits::new(dwarf, split, &mut skipped);
        let results: Vec<gimli::Result<IndexedUnit>> = (0..units.main().len())
            .into_par_iter()
            .map(|index| {
                let unit = units.main_unit(index)?;
                Ok(IndexedUnit {
                    index,
                    ranges: root_ranges(dwarf, unit, in_code)?,
                    output: None,
                    tried: false,
                })
            })
            .collect();
        let mut indexed = Vec::with_capacity(results.len());
        let mut used = HashSet::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(u) => {
                    let unit = units.main_unit(index).ok();
                    let program = unit.and_then(|u| u.line_program.as_ref());
                    used.extend(program.map(|p| p.header().offset().0));
                    indexed.push(u);
                }
                Err(e) => skipped.push(unit_error(units.main().header(index), &e)),
            }
        }
        let unitless = lines::unitless_line_programs(dwarf, &used, in_code, &mut skipped);
        UnitsOnDemand {
            units,
            indexed,
            unitless,
            skipped,
        }
    }

    /// Whether the module has no units and no line programs at all.
    pub fn is_empty(&self) -> bool {
        self.indexed.is_empty() && self.unitless.is_empty()
    }

    /// Read (in parallel) every unit not read yet whose ranges meet `region` (sorted,
    /// disjoint). Returns whether any unit was read.
    pub fn read_covering(
        &mut self,
        region: &[Range<u64>],
        in_code: &(dyn Fn(u64) -> bool + Sync),
    ) -> bool {
        let units = &self.units;
        let fresh: Vec<(usize, gimli::Result<UnitOutput>)> = self
            .indexed
            .par_iter()
            .enumerate()
            .filter(|(_, u)| !u.tried && crate::ranges::ranges_meet(region, &u.ranges))
            .map(|(i, u)| (i, entries::read_unit(units, u.index, in_code)))
            .collect();
        let any = !fresh.is_empty();
        for (i, result) in fresh {
            let u = &mut self.indexed[i];
            u.tried = true;
            match result {
                Ok(out) => u.output = Some(out),
                Err(e) => {
                    let index = u.index;
                    self.skipped
                        .push(unit_error(self.units.main().header(index), &e));
                    self.read_line_program_alone(index, in_code);
                }
            }
        }
        any
    }

    /// Read the line program of unit `index`, whose entries are corrupt, as a line program
    /// without a unit: what [`read_dwarf`] does with it.
    fn read_line_program_alone(&mut self, index: usize, in_code: &dyn Fn(u64) -> bool) {
        let dwarf = self.units.dwarf();
        let Some(offset) = self
            .units
            .main_unit(index)
            .ok()
            .and_then(|u| u.line_program.as_ref())
            .map(|p| p.header().offset())
        else {
            return;
        };
        let program = match dwarf.debug_line.program(offset, 8, None, None) {
            Ok(p) => p,
            Err(e) => {
                let at = offset.0;
                self.skipped
                    .push(format!("line program at .debug_line+{at:#x}: {e}"));
                return;
            }
        };
        let read = lines::unitless_program(dwarf, program, offset.0, in_code, &mut self.skipped);
        if let Some(out) = read {
            let at = self
                .unitless
                .partition_point(|o| o.line_offset < out.line_offset);
            self.unitless.insert(at, out);
        }
    }

    /// The procedures of the units read so far.
    pub fn procs(&self) -> impl Iterator<Item = &ProcPlan> + use<'_, 'a, 'd> {
        self.indexed
            .iter()
            .filter_map(|u| u.output.as_ref())
            .flat_map(|o| &o.procs)
    }

    /// The code ranges of every unit whose line program names one of `files` (full paths):
    /// the units that may hold procedures declared in those files.
    pub fn ranges_of_units_naming(&self, files: &HashSet<String>) -> Vec<Range<u64>> {
        let units = &self.units;
        let names_one = |u: &IndexedUnit| {
            units.main_unit(u.index).is_ok_and(|unit| {
                lines::unit_files(units.dwarf(), unit)
                    .iter()
                    .any(|f| files.contains(f))
            })
        };
        let ranges: Vec<Range<u64>> = self
            .indexed
            .par_iter()
            .filter(|u| names_one(u))
            .flat_map_iter(|u| u.ranges.iter().cloned())
            .collect();
        crate::ranges::normalize_ranges(ranges)
    }

    /// Everything read so far, merged as [`read_dwarf`] merges all units.
    pub fn info(&self) -> DwarfInfo {
        let outputs: Vec<UnitOutput> = self
            .indexed
            .iter()
            .filter_map(|u| u.output.clone())
            .collect();
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
    Ok(crate::ranges::normalize_ranges(out))
}
