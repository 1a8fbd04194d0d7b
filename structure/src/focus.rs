//! Focused analysis: the structure of only the procedures that hold a given set of addresses.
//!
//! A profile touches a few dozen procedures of a large library; analysing all of it (every
//! DWARF unit, every procedure's control flow) costs far more than those procedures do.
//! [`analyze_focused`] reads only the DWARF units whose address ranges meet the procedures in
//! question and decodes only those procedures, and still gives, for every asked address, the
//! same procedure, inline chain (with call sites), loops and line as [`analyze_file`]: its
//! [`ScopeTree`] holds those procedures built exactly as a whole-module analysis builds them.
//!
//! ## Why the answer is the same
//!
//! A procedure's scopes depend on its own code ranges, the line rows inside them, its inline
//! records and (for code without inline records) the source bounds of the procedures of its
//! files. Its code ranges in turn depend on the procedures and symbols whose ranges overlap it
//! (a DWARF range is clipped where another procedure's entry or claim begins: the thesis's
//! "lying liars"), transitively. So the analysed *region* grows from the asked addresses to a
//! fixed point: the units whose ranges meet the region are read; every DWARF procedure and
//! every symbol's extent that meets the region joins it with all its ranges; repeat until
//! nothing changes. Procedures are then reconciled as in the whole-module analysis, over the
//! units read, and those holding an asked address are built. Where one of them lacks inline
//! records (its inlined code is inferred from the line map, [`crate::aliens`]), the region
//! also takes in every unit whose line table names one of its files, and the symbols of
//! compiler-made parts' base procedures, so that the source bounds it is inferred with are
//! the module's.
//!
//! The names and declarations of a unit's procedures and inlined calls are looked up wherever
//! their DIEs point, in units that are not otherwise read (abstract instances of another
//! codegen unit or LTO partition, dwz's supplementary file), exactly as in a whole-module
//! analysis, so a focused tree names inlined code as the whole-module tree does.
//!
//! What it relies on: every unit with code states its ranges on its root entry (DWARF
//! requires it), and a unit's line rows lie inside those ranges. The agreement is checked by
//! tests over libc, libstdc++ and an `-O3` C++ program, address by address.
//!
//! ## Coverage
//!
//! [`Analysis::coverage`] says which addresses the tree answers for ([`Coverage::covers`]):
//! the analysed procedures' code and every asked address (an address in no procedure is
//! answered too: by no scope, as the whole-module tree would). A caller caching trees can
//! reuse one for any later set of addresses it covers.

use crate::analysis::{Coverage, Heuristics};
use crate::binary::{CodeSection, FunctionSymbol};
use crate::dwarf::{DwarfInfo, UnitsOnDemand};
use crate::plan::{clone_base, lacks_inline_records, plan_procedures, symbol_extent, ProcPlan};
use crate::ranges::{normalize_ranges, ranges_meet};
use profiler::addr::Svma;
use std::collections::HashSet;
use std::ops::Range;

#[cfg(doc)]
use crate::{
    analysis::Analysis, analyze::analyze_file, analyze::analyze_focused, scope::ScopeTree,
};

/// The procedures to build for a focused analysis.
pub(crate) struct Selection {
    /// Every procedure of the analysed region, reconciled (sorted by entry): the context that
    /// source bounds are computed over.
    pub plans: Vec<ProcPlan>,
    /// Indices in `plans` of the procedures holding an asked address.
    pub selected: Vec<usize>,
    /// The debug information of the units read.
    pub info: DwarfInfo,
    /// What the tree will answer for.
    pub coverage: Coverage,
}

/// Choose and reconcile the procedures holding `addresses`, reading only the units needed.
pub(crate) fn select(
    units: &mut UnitsOnDemand<'_, '_>,
    symbols: &[FunctionSymbol],
    code: &[CodeSection<'_>],
    addresses: &[Svma],
    heuristics: &Heuristics,
    in_code: &(dyn Fn(u64) -> bool + Sync),
) -> Selection {
    let mut targets: Vec<u64> = addresses.iter().map(|a| a.0).collect();
    targets.sort_unstable();
    targets.dedup();
    let extents: Vec<Range<u64>> = (0..symbols.len())
        .map(|i| symbol_extent(symbols, i, code))
        .collect();
    let mut seeds: Vec<Range<u64>> = targets.iter().map(|&a| a..a.saturating_add(1)).collect();
    loop {
        let region = close_region(units, &extents, seeds.clone(), in_code);
        let mut info = units.info();
        let procs = std::mem::take(&mut info.procs);
        let plans: Vec<ProcPlan> = plan_procedures(procs, symbols, code)
            .into_iter()
            .filter(|p| ranges_meet(&region, &p.ranges))
            .collect();
        let selected: Vec<usize> = (0..plans.len())
            .filter(|&i| holds_any(&plans[i].ranges, &targets))
            .collect();
        let inferring: Vec<&ProcPlan> = selected
            .iter()
            .map(|&i| &plans[i])
            .filter(|p| heuristics.line_map_aliens && lacks_inline_records(p, &info))
            .collect();
        if !inferring.is_empty() {
            let extra = bounds_context(units, symbols, &inferring, &plans, &info);
            if !within(&region, &extra) {
                seeds.extend(extra);
                continue;
            }
        }
        let mut covered: Vec<Range<u64>> = selected
            .iter()
            .flat_map(|&i| plans[i].ranges.iter().cloned())
            .collect();
        covered.extend(targets.iter().map(|&a| a..a.saturating_add(1)));
        return Selection {
            plans,
            selected,
            info,
            coverage: Coverage::Ranges(normalize_ranges(covered)),
        };
    }
}

/// Whether every range of `ranges` lies inside `region` (sorted, disjoint).
fn within(region: &[Range<u64>], ranges: &[Range<u64>]) -> bool {
    ranges.iter().all(|r| {
        let i = region.partition_point(|g| g.end <= r.start);
        r.is_empty()
            || region
                .get(i)
                .is_some_and(|g| g.start <= r.start && r.end <= g.end)
    })
}

/// Grow `seeds` to the fixed point described in the module documentation: read the units
/// meeting the region, add the DWARF procedures and symbol extents meeting it, repeat.
fn close_region(
    units: &mut UnitsOnDemand<'_, '_>,
    extents: &[Range<u64>],
    seeds: Vec<Range<u64>>,
    in_code: &(dyn Fn(u64) -> bool + Sync),
) -> Vec<Range<u64>> {
    let mut region = normalize_ranges(seeds);
    loop {
        let read = units.read_covering(&region, in_code);
        let mut grown = region.clone();
        for e in extents {
            if ranges_meet(&region, std::slice::from_ref(e)) {
                grown.push(e.clone());
            }
        }
        for p in units.procs() {
            if ranges_meet(&region, &p.ranges) {
                grown.extend(p.ranges.iter().cloned());
            }
        }
        let grown = normalize_ranges(grown);
        if grown == region && !read {
            return region;
        }
        region = grown;
    }
}

/// The region that makes the source bounds of `inferring` (procedures whose inlined code is
/// inferred) the module's: the code of every unit naming a file their lines use, and the
/// entries of the procedures that compiler-made parts (`f.part.0`, `f.cold`) among `plans`
/// take their begin line from.
fn bounds_context(
    units: &UnitsOnDemand<'_, '_>,
    symbols: &[FunctionSymbol],
    inferring: &[&ProcPlan],
    plans: &[ProcPlan],
    info: &DwarfInfo,
) -> Vec<Range<u64>> {
    let mut files: HashSet<String> = HashSet::new();
    for plan in inferring {
        files.extend(plan.file.and_then(|f| info.files.get(f as usize)).cloned());
        for r in &plan.ranges {
            for (_, row) in info.rows_in(r.clone()) {
                files.extend(info.files.get(row.file as usize).cloned());
            }
        }
    }
    let mut extra = units.ranges_of_units_naming(&files);
    let bases: HashSet<&str> = plans
        .iter()
        .filter_map(|p| clone_base(p.link_name.as_deref().unwrap_or(&p.name)))
        .collect();
    extra.extend(
        symbols
            .iter()
            .filter(|s| bases.contains(s.link_name.as_str()))
            .map(|s| s.address..s.address + 1),
    );
    extra
}

/// Whether any of the sorted `targets` lies in `ranges`.
fn holds_any(ranges: &[Range<u64>], targets: &[u64]) -> bool {
    ranges.iter().any(|r| {
        let i = targets.partition_point(|&a| a < r.start);
        targets.get(i).is_some_and(|&a| a < r.end)
    })
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn coverage_of_ranges_and_module() {
        let c = Coverage::Ranges(vec![0x10..0x20, 0x30..0x31]);
        assert!(c.covers(Svma(0x10)) && c.covers(Svma(0x1f)) && c.covers(Svma(0x30)));
        assert!(!c.covers(Svma(0x20)) && !c.covers(Svma(0x31)) && !c.covers(Svma(0x0f)));
        assert!(Coverage::Module.covers(Svma(u64::MAX)));
    }

    #[test]
    fn within_needs_whole_ranges() {
        let region = [0x10..0x20, 0x30..0x40];
        assert!(within(&region, &[0x10..0x20, 0x35..0x36]));
        assert!(!within(&region, &[0x18..0x31]));
        assert!(!within(&region, &[0x40..0x41]));
    }

    #[test]
    fn targets_held_by_ranges() {
        let targets = [0x5, 0x25];
        assert!(holds_any(&[0x0..0x6], &targets));
        assert!(holds_any(&[0x10..0x20, 0x20..0x26], &targets));
        assert!(!holds_any(&[0x6..0x25], &targets));
    }
}
