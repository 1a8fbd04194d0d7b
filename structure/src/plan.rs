//! Procedures to build: DWARF's procedures reconciled with the symbol table into disjoint
//! code ranges. DWARF ranges are clipped where they run into another function's entry (the
//! thesis's "lying liars", §4.3); code that only the symbol table names becomes a procedure of
//! its own.

use crate::binary::{CodeSection, FunctionSymbol};
use crate::demangle::demangle;
use crate::dwarf::DwarfInfo;
use crate::dwarf::NoReturn;
pub(crate) use crate::dwarf::ProcPlan;
use crate::ranges::{gaps, normalize_ranges};
use fxhash::FxHashMap;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Whether a procedure's inlined code must be inferred: its DWARF unit has no inline records,
/// or it has no DWARF descriptor and its lines come from a line program without a unit.
pub(crate) fn lacks_inline_records(plan: &ProcPlan, info: &DwarfInfo) -> bool {
    if plan.from_dwarf {
        !plan.unit_has_inlines
    } else {
        info.is_unitless(plan.entry)
    }
}

/// The mangled link name of the function symbol at `entry`, without a clone suffix
/// (`.isra.0`, `.cold`, ...). GCC gives no `DW_AT_linkage_name` to some template instances (those
/// with a lambda among their arguments); the symbol table names them in full, as binutils reads
/// them.
fn mangled_symbol_at(symbols: &[FunctionSymbol], entry: u64) -> Option<&str> {
    let s = symbols.get(symbols.partition_point(|s| s.address < entry))?;
    let link = clone_base(&s.link_name).unwrap_or(&s.link_name);
    (s.address == entry && (link.starts_with("_Z") || link.starts_with("_R"))).then_some(link)
}

/// Reconcile DWARF procedures with function symbols into disjoint procedures.
pub(crate) fn plan_procedures(
    mut procs: Vec<ProcPlan>,
    symbols: &[FunctionSymbol],
    code: &[CodeSection<'_>],
) -> Vec<ProcPlan> {
    procs.sort_by_key(|p| p.entry);
    procs.dedup_by_key(|p| p.entry);
    let dwarf_entries: std::collections::BTreeSet<u64> = procs.iter().map(|p| p.entry).collect();
    let by_link_name: FxHashMap<&str, u64> = symbols
        .iter()
        .map(|s| (s.link_name.as_str(), s.address))
        .collect();
    let mut claimed: BTreeMap<u64, u64> = BTreeMap::new();
    let mut plans = Vec::new();
    for p in procs {
        let mut ranges = Vec::new();
        for r in normalize_ranges(p.ranges.clone()) {
            let end = symbols
                .iter()
                .skip(symbols.partition_point(|s| s.address <= r.start))
                .take_while(|s| s.address < r.end)
                .find(|s| dwarf_entries.contains(&s.address) && s.address != p.entry)
                .map_or(r.end, |s| s.address);
            ranges.extend(unclaimed(&claimed, r.start..end));
        }
        if ranges.is_empty() {
            continue;
        }
        let entry = by_link_name
            .get(p.link_name.as_deref().unwrap_or(&p.name))
            .copied()
            .filter(|a| ranges.iter().any(|r| r.contains(a)))
            .unwrap_or(p.entry);
        let entry = if ranges.iter().any(|r| r.contains(&entry)) {
            entry
        } else {
            ranges[0].start
        };
        for r in &ranges {
            claimed.insert(r.start, r.end);
        }
        let (name, link_name) = match (p.link_name, mangled_symbol_at(symbols, p.entry)) {
            (None, Some(link)) => (demangle(link), Some(link.to_string())),
            (link_name, _) => (p.name, link_name),
        };
        plans.push(ProcPlan {
            ranges,
            entry,
            name,
            link_name,
            ..p
        });
    }
    // The symbols come in address order, so what they claim lies below the end of the last
    // range claimed: a symbol inside it is claimed, and a symbol past it can only meet code of
    // DWARF's procedures.
    let from_dwarf: Vec<Range<u64>> = claimed.into_iter().map(|(s, e)| s..e).collect();
    let no_callees = Arc::<NoReturn>::default();
    let mut claimed_to = 0;
    for (i, s) in symbols.iter().enumerate() {
        if s.address < claimed_to || covers(&from_dwarf, s.address) {
            continue;
        }
        let ranges = outside(&from_dwarf, symbol_extent(symbols, i, code));
        let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
            continue;
        };
        if first.start != s.address {
            continue;
        }
        claimed_to = last.end;
        plans.push(ProcPlan {
            ranges,
            entry: s.address,
            link_name: (s.link_name != s.name).then(|| s.link_name.clone()),
            name: s.name.clone(),
            file: None,
            line: 0,
            inlines: Vec::new(),
            unit_has_inlines: false,
            from_dwarf: false,
            main_program: false,
            noreturn_callees: Arc::clone(&no_callees),
        });
    }
    plans.sort_by_key(|p| p.entry);
    plans
}

/// The code that symbol `symbols[i]` names: its size if known, else up to the next symbol,
/// never past its section.
pub(crate) fn symbol_extent(
    symbols: &[FunctionSymbol],
    i: usize,
    code: &[CodeSection<'_>],
) -> Range<u64> {
    let s = &symbols[i];
    let section_end = code
        .iter()
        .find(|c| c.contains(s.address))
        .map_or(s.address, |c| c.address + c.bytes.len() as u64);
    let end = if s.size > 0 {
        s.address.saturating_add(s.size).min(section_end)
    } else {
        symbols
            .get(i + 1)
            .map_or(section_end, |n| n.address.min(section_end))
    };
    s.address..end
}

/// Whether one of `ranges` (sorted, disjoint) holds `addr`.
fn covers(ranges: &[Range<u64>], addr: u64) -> bool {
    let i = ranges.partition_point(|r| r.start <= addr);
    i.checked_sub(1).is_some_and(|i| addr < ranges[i].end)
}

/// The parts of `r` outside `ranges` (sorted, disjoint).
fn outside(ranges: &[Range<u64>], r: Range<u64>) -> Vec<Range<u64>> {
    let first = ranges.partition_point(|c| c.end <= r.start);
    let end = r.end;
    let covering = ranges[first..].iter().take_while(|c| c.start < end);
    gaps(r, covering.cloned())
}

/// The parts of `r` not covered by `claimed`.
fn unclaimed(claimed: &BTreeMap<u64, u64>, r: Range<u64>) -> Vec<Range<u64>> {
    let from = claimed
        .range(..=r.start)
        .next_back()
        .map_or(r.start, |(&s, _)| s);
    gaps(r.clone(), claimed.range(from..r.end).map(|(&s, &e)| s..e))
}

/// The procedure a compiler-made part or copy belongs to: `f` for `f.cold`, `f.part.0`,
/// `f.constprop.0`, `f.isra.0`, ...
pub(crate) fn clone_base(link_name: &str) -> Option<&str> {
    let (base, _) = link_name.split_once('.')?;
    (!base.is_empty()).then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiler_made_parts_name_their_procedure() {
        assert_eq!(clone_base("work.cold"), Some("work"));
        assert_eq!(clone_base("_Z3fooi.part.0"), Some("_Z3fooi"));
        assert_eq!(clone_base("main"), None);
        assert_eq!(clone_base(".hidden"), None);
    }

    #[test]
    fn symbols_get_the_code_outside_dwarfs_procedures() {
        let claimed = [0x10..0x20, 0x30..0x40];
        assert_eq!(
            outside(&claimed, 0x0..0x50),
            vec![0x0..0x10, 0x20..0x30, 0x40..0x50]
        );
        assert_eq!(outside(&claimed, 0x18..0x34), vec![0x20..0x30]);
        assert_eq!(outside(&claimed, 0x12..0x1f), Vec::<Range<u64>>::new());
        assert!(covers(&claimed, 0x10) && covers(&claimed, 0x3f));
        assert!(!covers(&claimed, 0x20) && !covers(&claimed, 0xf) && !covers(&claimed, 0x40));
    }
}
