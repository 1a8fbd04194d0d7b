//! Where a loop begins in the source: its backward branches and the begin-line heuristic.

use super::{LoopForest, LoopId};
use crate::cfg::{BlockId, Cfg, EdgeKind, Terminator};

/// Begin-line tolerance of the thesis's bbranch-max-fuzzy heuristic (§3.4, Algorithm 4.4): a
/// loop's begin line may move up to this many lines above the line of its backward branch.
pub const LOOP_BEGIN_TOLERANCE: u32 = 5;

/// The source line chosen for a loop by [`LoopForest::begin_line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopLine {
    /// File id, as returned by the caller's line lookup.
    pub file: u32,
    /// The loop's begin line after fuzzy widening.
    pub line: u32,
    /// Address of the instruction whose line anchored the choice (the backward branch, or the
    /// header's first instruction when the loop has none); the caller uses it to decide the
    /// loop's procedure or inline context (Algorithm 4.2).
    pub anchor: u64,
    /// The anchor's own line, before widening.
    pub anchor_line: u32,
}

/// A branch closing a loop iteration, as found by [`LoopForest::backward_branches`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardBranch {
    /// Address of the branch instruction (the last of its block).
    pub addr: u64,
    /// It jumps to an entry of the loop (the header, for a reducible loop).
    pub to_entry: bool,
    /// It is a conditional branch (typically the loop test).
    pub conditional: bool,
}

impl LoopForest {
    /// Estimate the source begin line of loop `id` with the bbranch-max-fuzzy heuristic.
    ///
    /// `line_of` maps an instruction address to `(file id, line)` (the innermost line-table
    /// row; `None` or line 0 for code without a line).
    ///
    /// 1. Anchor: the loop's *backward branch* (see [`LoopForest::backward_branches`]).
    ///    Compilers give the loop test the loop's line (`for`/`while`), so among several
    ///    backward branches those jumping to the header are preferred (a `break` out of a
    ///    `switch` jumps back to the latch, not the header), then conditional ones (the test
    ///    rather than a `goto`-like jump), then the highest address (the loop bottom). Without
    ///    a backward branch with a line, the last instructions of the back-edge sources are
    ///    tried, then the header's instructions.
    /// 2. Fuzzy widening: the loop's code in the anchor's file with lines below the anchor's
    ///    is examined from the highest line down; the begin line moves to each such line that
    ///    lies within `tolerance` lines of the current begin line, and stops at the first gap
    ///    wider than that. This reaches back from a bottom test (`do ... while`, or a loop test
    ///    the compiler attributed to the last body statement) to the first body lines, without
    ///    pulling the loop up to distant code (code inlined from earlier in the file).
    ///    The thesis uses `tolerance` = [`LOOP_BEGIN_TOLERANCE`].
    ///
    /// Returns `None` when no instruction of the loop has a line.
    pub fn begin_line(
        &self,
        cfg: &Cfg,
        id: LoopId,
        line_of: &dyn Fn(u64) -> Option<(u32, u32)>,
        tolerance: u32,
    ) -> Option<LoopLine> {
        let lp = self.get(id);
        let known = |addr: u64| line_of(addr).filter(|&(_, line)| line > 0);
        let header_insns = cfg.instructions(lp.header).iter().copied();
        let latch_branches = lp
            .back_edge_sources
            .iter()
            .rev()
            .map(|&b| cfg.block(b).last_insn);
        let mut branches = self.backward_branches(cfg, id);
        branches.sort_by_key(|b| (b.to_entry, b.conditional, b.addr));
        let (anchor, (file, anchor_line)) = branches
            .iter()
            .rev()
            .map(|b| b.addr)
            .chain(latch_branches)
            .chain(header_insns)
            .find_map(|a| Some((a, known(a)?)))?;
        let mut below: Vec<u32> = lp
            .blocks
            .iter()
            .flat_map(|&b| cfg.instructions(b).iter())
            .filter_map(|&a| known(a))
            .filter(|&(f, line)| f == file && line < anchor_line)
            .map(|(_, line)| line)
            .collect();
        below.sort_unstable_by(|a, b| b.cmp(a));
        let mut line = anchor_line;
        for l in below {
            if line - l > tolerance {
                break;
            }
            line = line.min(l);
        }
        Some(LoopLine {
            file,
            line,
            anchor,
            anchor_line,
        })
    }

    /// The loop's backward branches in address order: branch instructions (jumps, taken arms,
    /// table entries) of the loop whose target block is in the loop at a lower or equal
    /// address, excluding branches internal to one inner loop.
    pub fn backward_branches(&self, cfg: &Cfg, id: LoopId) -> Vec<BackwardBranch> {
        let lp = self.get(id);
        let inner = |b: BlockId| self.child_containing(id, b);
        let mut out: Vec<BackwardBranch> = Vec::new();
        for &b in &lp.blocks {
            let block = cfg.block(b);
            let backward = block.succs.iter().filter(|e| {
                e.kind != EdgeKind::FallThrough
                    && e.kind != EdgeKind::NotTaken
                    && cfg.block(e.to).start <= block.last_insn
                    && self.contains(id, e.to)
                    && (inner(b).is_none() || inner(b) != inner(e.to))
            });
            let mut found = false;
            let mut to_entry = false;
            for e in backward {
                found = true;
                to_entry |= lp.entries.contains(&e.to);
            }
            if found {
                out.push(BackwardBranch {
                    addr: block.last_insn,
                    to_entry,
                    conditional: block.terminator == Terminator::Branch,
                });
            }
        }
        out
    }
}
