//! Inlined code without inline records: alien contexts inferred from procedure bounds and the
//! line map (thesis §3.2-3.3 and Algorithm 4.4), for code whose DWARF unit has no
//! `DW_TAG_inlined_subroutine` records or whose line program has no readable unit at all
//! (`.debug_info` stripped or corrupt).
//!
//! A procedure's *source bounds* are the lines it may span in its file:
//!
//! - with a DWARF descriptor, from its declaration line (tolerance 0) up to the line before
//!   the next procedure of the same file (Procedure Invariant 2);
//! - without one, from the line of its entry, growing as its code is met in address order by
//!   fuzzy matching (a line within 2 below or 100 above the bounds joins them), never past the
//!   next procedure's begin line.
//!
//! Code whose line row names another file, or a line of the procedure's file outside its
//! bounds, is *alien*. Alien code is grouped into contexts by file and by which known
//! procedures' begin lines bracket its line (the thesis's partition-alien-contexts); the pieces
//! of one context, however scattered by the optimizer, form one context (merging broken
//! contexts). Each context becomes an [`InlineCall`] of depth 1 whose callee name is unknown
//! and whose call line is unknown (0), so that the procedure builder places it, and the loops
//! around and inside it, like an inlined call recorded in DWARF.

use crate::binary::FunctionSymbol;
use crate::dwarf::{DwarfInfo, InlineCall};
use crate::plan::{clone_base, ProcPlan};
use fxhash::FxHashMap;
use rayon::prelude::*;
use std::ops::Range;

/// Lines below a descriptor-less procedure's bounds that still join them (Algorithm 4.4).
pub const FUZZY_BELOW: u32 = 2;
/// Lines above a descriptor-less procedure's bounds that still join them (Algorithm 4.4).
pub const FUZZY_ABOVE: u32 = 100;

/// Where a procedure begins in the source.
#[derive(Clone, Copy, Debug)]
struct Begin {
    file: u32,
    line: u32,
    /// From a DWARF descriptor (exact) rather than from the line of its entry (a guess).
    descriptor: bool,
    /// A compiler-made part or copy of another procedure (`f.cold`, `f.part.0`, ...), which
    /// takes that procedure's begin and does not bound others.
    clone: bool,
}

/// Source begin lines of all procedures of a module: each procedure's own, and per file the
/// sorted begin lines that bound and partition it.
pub struct SourceBounds<'s> {
    begins: Vec<Option<Begin>>,
    by_file: FxHashMap<u32, Vec<(u32, usize)>>,
    /// Function symbols sorted by address: their demangled names show scoping (a lambda's
    /// `main::{lambda(int)#1}::operator()` where DWARF says only `operator()`).
    symbols: &'s [FunctionSymbol],
}

impl<'s> SourceBounds<'s> {
    /// Collect the begin lines of `plans` (with `info`'s line table for procedures known only
    /// from symbols); `symbols` sorted by address.
    pub fn new(
        plans: &[ProcPlan],
        symbols: &'s [FunctionSymbol],
        info: &DwarfInfo,
    ) -> SourceBounds<'s> {
        let by_link: FxHashMap<&str, usize> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| (link_name(p), i))
            .collect();
        let own: Vec<Option<Begin>> = plans.par_iter().map(|p| own_begin(p, info)).collect();
        let begins: Vec<Option<Begin>> = plans
            .par_iter()
            .zip(&own)
            .map(|(p, b)| {
                let base = clone_base(link_name(p))
                    .and_then(|n| by_link.get(n).copied())
                    .or_else(|| wrapped_program(plans, p));
                match base.and_then(|i| own[i]) {
                    Some(base) => Some(Begin {
                        clone: true,
                        ..base
                    }),
                    None => *b,
                }
            })
            .collect();
        let mut by_file: FxHashMap<u32, Vec<(u32, usize)>> = FxHashMap::default();
        for (i, b) in begins.iter().enumerate() {
            if let Some(b) = b.filter(|b| !b.clone && b.line > 0) {
                by_file.entry(b.file).or_default().push((b.line, i));
            }
        }
        for lines in by_file.values_mut() {
            lines.sort_unstable();
        }
        SourceBounds {
            begins,
            by_file,
            symbols,
        }
    }

    /// Alien contexts of procedure `plans[index]` (the plans given to [`SourceBounds::new`])
    /// inferred from the line map; empty when its begin is unknown or all its code is native.
    pub fn infer(&self, plans: &[ProcPlan], index: usize, info: &DwarfInfo) -> Vec<InlineCall> {
        let Some(begin) = self.begins[index] else {
            return Vec::new();
        };
        let plan = &plans[index];
        let mut bounds = Bounds::new(begin, self.limit(begin, plans, index));
        let mut contexts: Vec<InlineCall> = Vec::new();
        let mut by_key: FxHashMap<(u32, usize), usize> = FxHashMap::default();
        for r in &plan.ranges {
            for (piece, row) in info.rows_in(r.clone()) {
                if row.line == 0 || (row.file == begin.file && bounds.admit(row.line)) {
                    continue;
                }
                let key = (row.file, self.partition(row.file, row.line));
                let c = *by_key.entry(key).or_insert_with(|| {
                    contexts.push(context(info, begin.file, row.file, row.line));
                    contexts.len() - 1
                });
                add_piece(&mut contexts[c], piece, row.line);
            }
        }
        contexts
    }

    /// The last line `begin`'s procedure may reach: before the next begin line in its file,
    /// not counting its own parts and procedures nested in it (lambdas, local classes).
    fn limit(&self, begin: Begin, plans: &[ProcPlan], index: usize) -> u32 {
        let nested_prefix = format!("{}::", self.scoped_name(&plans[index]));
        self.by_file
            .get(&begin.file)
            .and_then(|lines| {
                lines
                    .iter()
                    .skip(lines.partition_point(|&(l, _)| l <= begin.line))
                    .find(|&&(_, i)| !self.scoped_name(&plans[i]).starts_with(&nested_prefix))
            })
            .map_or(u32::MAX, |&(l, _)| l - 1)
    }

    /// The demangled name of the symbol at `plan`'s entry (which includes enclosing scopes),
    /// else the plan's name.
    fn scoped_name<'a>(&'a self, plan: &'a ProcPlan) -> &'a str {
        let pos = self.symbols.partition_point(|s| s.address < plan.entry);
        match self.symbols.get(pos) {
            Some(s) if s.address == plan.entry => &s.name,
            _ => &plan.name,
        }
    }

    /// Which interval between known begin lines of `file` holds `line`.
    fn partition(&self, file: u32, line: u32) -> usize {
        self.by_file
            .get(&file)
            .map_or(0, |lines| lines.partition_point(|&(l, _)| l <= line))
    }
}

/// Source bounds of one procedure while its code is matched (Algorithm 4.4's `matches` for a
/// procedure scope).
struct Bounds {
    lo: u32,
    hi: u32,
    limit: u32,
    fuzzy: bool,
}

impl Bounds {
    fn new(begin: Begin, limit: u32) -> Bounds {
        Bounds {
            lo: begin.line,
            hi: begin.line,
            limit,
            fuzzy: !begin.descriptor,
        }
    }

    /// Whether `line` of the procedure's file is its own; fuzzy bounds grow to include it.
    fn admit(&mut self, line: u32) -> bool {
        if line > self.limit {
            return false;
        }
        if !self.fuzzy {
            return line >= self.lo;
        }
        let inside = line.saturating_add(FUZZY_BELOW) >= self.lo
            && line <= self.hi.saturating_add(FUZZY_ABOVE);
        if inside {
            self.lo = self.lo.min(line);
            self.hi = self.hi.max(line);
        }
        inside
    }
}

/// A new, empty alien context for code of `file` at `line`, called from `call_file`.
fn context(info: &DwarfInfo, call_file: u32, file: u32, line: u32) -> InlineCall {
    let path = info.files.get(file as usize).map_or("", String::as_str);
    let base = path.rsplit('/').next().unwrap_or(path);
    InlineCall {
        parent: None,
        depth: 1,
        ranges: Vec::new(),
        name: format!("<inlined from {base}>").into(),
        link_name: None,
        file: Some(file),
        line,
        call_file: Some(call_file),
        call_line: 0,
    }
}

fn add_piece(call: &mut InlineCall, piece: Range<u64>, line: u32) {
    call.line = call.line.min(line);
    match call.ranges.last_mut() {
        Some(last) if last.end == piece.start => last.end = piece.end,
        _ => call.ranges.push(piece),
    }
}

/// The program body that `plan` wraps when it is a compiler's `main` around a program of its
/// file (gfortran declares its `main` at a line inside the program): such a wrapper takes the
/// program's begin and does not bound it, or the program's own lines would turn alien.
fn wrapped_program(plans: &[ProcPlan], plan: &ProcPlan) -> Option<usize> {
    if !plan.from_dwarf || plan.main_program || link_name(plan) != "main" {
        return None;
    }
    plans
        .iter()
        .position(|p| p.main_program && p.file.is_some() && p.file == plan.file)
}

fn link_name(plan: &ProcPlan) -> &str {
    plan.link_name.as_deref().unwrap_or(&plan.name)
}

/// A procedure's own begin: its DWARF declaration, or else the first line of its entry's
/// file met from its entry on.
fn own_begin(plan: &ProcPlan, info: &DwarfInfo) -> Option<Begin> {
    if let (true, Some(file), line @ 1..) = (plan.from_dwarf, plan.file, plan.line) {
        return Some(Begin {
            file,
            line,
            descriptor: true,
            clone: false,
        });
    }
    let (file, line) = plan
        .ranges
        .iter()
        .filter(|r| r.end > plan.entry)
        .flat_map(|r| info.rows_in(r.start.max(plan.entry)..r.end))
        .map(|(_, row)| (row.file, row.line))
        .find(|&(_, line)| line > 0)?;
    Some(Begin {
        file,
        line,
        descriptor: false,
        clone: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(line: u32, descriptor: bool) -> Begin {
        Begin {
            file: 0,
            line,
            descriptor,
            clone: false,
        }
    }

    #[test]
    fn descriptor_bounds_are_decl_line_to_next_procedure() {
        let mut b = Bounds::new(begin(20, true), 39);
        assert!(b.admit(20) && b.admit(39) && b.admit(25));
        assert!(!b.admit(19), "before the declaration");
        assert!(!b.admit(40), "at the next procedure");
    }

    #[test]
    fn fuzzy_bounds_grow_by_the_tolerances() {
        let mut b = Bounds::new(begin(100, false), u32::MAX);
        assert!(b.admit(98), "2 below joins");
        assert!(b.admit(96), "and the bounds grew, so 2 below again");
        assert!(!b.admit(93));
        assert!(b.admit(200) && b.admit(300), "100 above, growing");
        assert!(!b.admit(401));
        let mut capped = Bounds::new(begin(100, false), 150);
        assert!(!capped.admit(151), "never past the next procedure");
    }
}
