//! Loop recovery for one procedure: decode its code, build the CFG ([`crate::cfg`]), find the
//! loop nesting forest ([`crate::loops`]) and give each loop its header address and its begin
//! line (bbranch-max-fuzzy over the line table).

use crate::binary::{bytes_from, CodeSection};
use crate::cfg::{Cfg, CfgEnv, CodeRange, Terminator};
use crate::dwarf::DwarfInfo;
use crate::landing::ExceptionTables;
use crate::loops::{LoopForest, LOOP_BEGIN_TOLERANCE};
use crate::noreturn::NoReturns;
use crate::plan::ProcPlan;
use crate::procedure::{LoopDesc, LoopNest};
use fxhash::FxHashMap;

/// What loop recovery needs to know about the whole binary.
pub struct LoopEnv<'a, 'd> {
    /// Executable sections.
    pub code: &'a [CodeSection<'d>],
    /// All sections with file contents (for jump tables).
    pub data: &'a [CodeSection<'d>],
    /// Which functions have exception tables (landing pads).
    pub exceptions: &'a ExceptionTables,
    /// Functions that never return, by name or by analysis.
    pub noreturn: &'a NoReturns<'a, 'd>,
    /// The link name of the function symbol at each entry address (to match a procedure's
    /// unit's `DW_AT_noreturn` declarations).
    pub link_names: &'a FxHashMap<u64, &'a str>,
}

impl<'d> LoopEnv<'_, 'd> {
    fn read(&self, addr: u64, len: usize) -> Option<&'d [u8]> {
        let s = self.data.iter().find(|s| s.contains(addr))?;
        s.slice(addr, addr.checked_add(len as u64)?)
    }
}

/// The loops of procedure `plan`, and a note if part of its code was not in the file.
pub fn find_loops<'i>(
    plan: &ProcPlan,
    info: &'i DwarfInfo,
    env: &LoopEnv<'_, '_>,
) -> (LoopNest<'i>, Option<String>) {
    let mut ranges = Vec::new();
    let mut missing = false;
    for r in &plan.ranges {
        match env.code.iter().find_map(|c| c.slice(r.start, r.end)) {
            Some(bytes) => ranges.push(CodeRange {
                start: r.start,
                bytes,
            }),
            None => missing = true,
        }
    }
    // The CFG starts at the first range: put the one holding the entry first.
    if let Some(i) = ranges
        .iter()
        .position(|r| r.start <= plan.entry && plan.entry < r.start + r.bytes.len() as u64)
    {
        ranges.swap(0, i);
    }
    let note = missing.then(|| {
        format!(
            "{}: part of its code is not in the file; loops may be missing",
            plan.name
        )
    });
    if ranges.is_empty() {
        return (LoopNest::default(), note);
    }
    let is_noreturn = |a: u64| {
        env.noreturn.contains(a)
            || plan
                .noreturn_callees
                .contains(a, env.link_names.get(&a).copied())
    };
    let read_data = |a: u64, n: usize| env.read(a, n);
    let landing_pads: Vec<_> = ranges
        .iter()
        .flat_map(|r| env.exceptions.pads(r.start, |a| bytes_from(env.data, a)))
        .collect();
    let cfg_env = CfgEnv {
        is_noreturn: &is_noreturn,
        read_data: &read_data,
        landing_pads: &landing_pads,
    };
    let Some(cfg) = Cfg::build_if_cyclic(&ranges, &cfg_env) else {
        // No loop is possible, and no indirect jump is left unresolved.
        return (LoopNest::default(), note);
    };
    let forest = LoopForest::build(&cfg);
    let mut nest = describe(&cfg, &forest, info);
    nest.begin_line = Some(Box::new(move |l, line_of| {
        let id = crate::loops::LoopId(l as u32);
        let begin = forest.begin_line(&cfg, id, line_of, LOOP_BEGIN_TOLERANCE)?;
        Some((begin.file, begin.line))
    }));
    (nest, note)
}

/// Turn the forest into [`LoopNest`]: headers, begin lines, block membership.
fn describe<'i>(cfg: &Cfg, forest: &LoopForest, info: &DwarfInfo) -> LoopNest<'i> {
    let line_of = |a: u64| info.row_at(a).map(|r| (r.file, r.line));
    let loops = (0..forest.loops.len())
        .map(|i| {
            let id = crate::loops::LoopId(i as u32);
            let lp = forest.get(id);
            let begin = forest.begin_line(cfg, id, &line_of, LOOP_BEGIN_TOLERANCE);
            LoopDesc {
                parent: lp.parent.map(|p| p.index()),
                header: cfg.block(lp.header).start,
                file: begin.map(|b| b.file),
                line: begin.map_or(0, |b| b.line),
                entries: if lp.irreducible {
                    lp.entries.iter().map(|&b| cfg.block(b).start).collect()
                } else {
                    vec![cfg.block(lp.header).start]
                },
            }
        })
        .collect();
    let mut membership: Vec<(u64, u64, usize)> = (0..cfg.blocks.len())
        .filter_map(|b| {
            let id = crate::cfg::BlockId(b as u32);
            let l = forest.innermost(id)?;
            let block = cfg.block(id);
            Some((block.start, block.end, l.index()))
        })
        .collect();
    membership.sort_unstable();
    let unresolved_jumps = cfg
        .blocks
        .iter()
        .filter(|b| b.terminator == Terminator::IndirectJump)
        .count();
    LoopNest {
        loops,
        membership,
        begin_line: None,
        unresolved_jumps,
        duplicated_tests: forest.loops.iter().filter(|l| l.duplicated_test).count(),
        split_entries: forest.loops.iter().filter(|l| l.split_entry).count(),
    }
}
