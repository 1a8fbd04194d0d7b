//! Building one procedure's scopes: every instruction address of the procedure is assigned to
//! exactly one statement, placed under its inlined-call context and its loop nest.
//!
//! The procedure's code is cut into elementary segments at every boundary of a procedure range,
//! inlined-call range, line-table row and loop block. Each segment has an inline chain
//! (outermost call first), a loop chain (outermost loop first) and a source line. A loop is
//! placed in the deepest inlined context shared by all of its code (the common prefix of its
//! segments' inline chains), so inlined calls and loops interleave in one tree without cycles:
//! the thesis's nesting-cycle correction made exact by DWARF inline records.

use crate::dwarf::{DwarfInfo, InlineCall, NO_FILE};
use fxhash::FxHashMap;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::ops::Range;

/// The inlined calls around a piece of code, outermost first (kept inline: most are short, and a
/// procedure has one per piece of code).
type InlineChain = SmallVec<[u32; 8]>;

/// The loops around a piece of code, outermost first.
type LoopChain = SmallVec<[usize; 4]>;

/// A loop of the procedure, ready for placement.
#[derive(Clone, Debug)]
pub struct LoopDesc {
    /// Enclosing loop.
    pub parent: Option<usize>,
    /// Header address (the loop's `v` byte).
    pub header: u64,
    /// Begin line's file.
    pub file: Option<u32>,
    /// Begin line.
    pub line: u32,
    /// Addresses where control enters the loop from outside, header first: more than one for
    /// an irreducible region.
    pub entries: Vec<u64>,
}

/// Chooses the begin line of a loop (by index) given a line lookup `address -> (file, line)`;
/// the lookup passed in sees lines as they appear in the loop's inlined context.
pub type BeginLine<'a> =
    Box<dyn Fn(usize, &dyn Fn(u64) -> Option<(u32, u32)>) -> Option<(u32, u32)> + 'a>;

/// The loops of a procedure and which code belongs to which innermost loop.
#[derive(Default)]
pub struct LoopNest<'a> {
    /// The loops.
    pub loops: Vec<LoopDesc>,
    /// Disjoint `(start, end, innermost loop)` ranges, sorted.
    pub membership: Vec<(u64, u64, usize)>,
    /// Recomputes a loop's begin line once its context is known (else `LoopDesc` lines stay).
    pub begin_line: Option<BeginLine<'a>>,
    /// Indirect jumps whose targets are unknown (neither a recognised jump table nor a tail
    /// call through the GOT).
    pub unresolved_jumps: usize,
    /// Loops whose several entries all come from copies of one test (see
    /// [`crate::loops::Loop::duplicated_test`]): natural loops, not irreducible ones.
    pub duplicated_tests: usize,
    /// Loops entered also at short blocks that lead straight to their header (see
    /// [`crate::loops::Loop::split_entry`]): natural once those are split, not irreducible.
    pub split_entries: usize,
}

impl LoopNest<'_> {
    /// Outermost-first chain of loops containing `addr`.
    fn chain_at(&self, addr: u64) -> LoopChain {
        let pos = self.membership.partition_point(|m| m.0 <= addr);
        let Some(&(s, e, l)) = pos.checked_sub(1).and_then(|p| self.membership.get(p)) else {
            return LoopChain::new();
        };
        if !(s <= addr && addr < e) {
            return LoopChain::new();
        }
        let mut chain = LoopChain::new();
        chain.push(l);
        while let Some(p) = self.loops[*chain.last().unwrap()].parent {
            if chain.len() > self.loops.len() {
                break;
            }
            chain.push(p);
        }
        chain.reverse();
        chain
    }
}

/// A step from a node to a child in the local tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// An inlined call (index into the procedure's inline list).
    Alien(u32),
    /// A loop (index into [`LoopNest::loops`]).
    Loop(usize),
}

/// A node of a procedure's local tree (node 0 is the procedure itself).
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// How this node was reached from its parent (`None` for the root).
    pub step: Option<Step>,
    /// Parent node.
    pub parent: Option<usize>,
    /// Child nodes in creation order.
    pub children: Vec<usize>,
    /// Statements: (file, line) -> ranges.
    pub stmts: BTreeMap<(u32, u32), Vec<Range<u64>>>,
    /// Whether the node was merged into another and is gone.
    pub dead: bool,
}

/// A procedure's scopes before they join the module tree.
#[derive(Clone, Debug, Default)]
pub struct LocalTree {
    /// Nodes; 0 is the procedure.
    pub nodes: Vec<Node>,
    /// Begin (file, line) of each loop of the [`LoopNest`].
    pub loop_lines: Vec<(Option<u32>, u32)>,
    /// Header address of each loop of the [`LoopNest`].
    pub loop_headers: Vec<u64>,
    /// Entry addresses of each loop of the [`LoopNest`] (several: irreducible).
    pub loop_entries: Vec<Vec<u64>>,
}

impl LocalTree {
    /// Begin (file, line) of node `n` if it is a loop.
    pub fn loop_line(&self, n: usize) -> Option<(Option<u32>, u32)> {
        match self.nodes[n].step {
            Some(Step::Loop(l)) => self.loop_lines.get(l).copied(),
            _ => None,
        }
    }

    fn child(
        &mut self,
        parent: usize,
        step: Step,
        index: &mut FxHashMap<(usize, Step), usize>,
    ) -> usize {
        if let Some(&n) = index.get(&(parent, step)) {
            return n;
        }
        let n = self.nodes.len();
        self.nodes.push(Node {
            step: Some(step),
            parent: Some(parent),
            ..Node::default()
        });
        self.nodes[parent].children.push(n);
        index.insert((parent, step), n);
        n
    }
}

/// Build the local tree of a procedure with code `ranges`, inlined calls `inlines`, line table
/// `dwarf` and loops `nest`. Addresses without line information get line 0 of `default_file`.
pub fn build_local_tree(
    ranges: &[Range<u64>],
    inlines: &[InlineCall],
    dwarf: &DwarfInfo,
    nest: &LoopNest,
    default_file: u32,
) -> LocalTree {
    let segments = segments(ranges, inlines, dwarf, nest);
    let chains: Vec<InlineChain> = segments
        .iter()
        .map(|s| inline_chain(inlines, s.inline))
        .collect();
    let loop_chains: Vec<LoopChain> = segments
        .iter()
        .map(|s| nest.chain_at(s.range.start))
        .collect();
    let placement = loop_placement(nest.loops.len(), &chains, &loop_chains);
    let loop_lines = contextual_loop_lines(nest, &placement, &segments, &chains, inlines, dwarf);

    let mut tree = LocalTree {
        nodes: vec![Node::default()],
        loop_lines,
        loop_headers: nest.loops.iter().map(|l| l.header).collect(),
        loop_entries: nest.loops.iter().map(|l| l.entries.clone()).collect(),
    };
    let mut index = FxHashMap::default();
    let mut rows = dwarf.row_cursor();
    for ((seg, chain), loops) in segments.iter().zip(&chains).zip(&loop_chains) {
        let mut node = 0;
        let mut emitted = 0;
        for &l in loops {
            let target = placement[l].len().max(emitted);
            for &c in &chain[emitted..target] {
                node = tree.child(node, Step::Alien(c), &mut index);
            }
            emitted = target;
            node = tree.child(node, Step::Loop(l), &mut index);
        }
        for &c in &chain[emitted..] {
            node = tree.child(node, Step::Alien(c), &mut index);
        }
        let (file, line) = match rows.row_at(seg.range.start) {
            Some(row) if row.file != NO_FILE => (row.file, row.line),
            _ => (default_file, 0),
        };
        // Segments come in address order: a piece that continues its statement's last one
        // extends it, and most statements end with one range, in a vector of one (pushed piece
        // by piece into a vector of four, then trimmed: 1.5% of libpython's instructions).
        let ranges = (tree.nodes[node].stmts)
            .entry((file, line))
            .or_insert_with(|| Vec::with_capacity(1));
        match ranges.last_mut() {
            Some(last) if last.end == seg.range.start => last.end = seg.range.end,
            _ => ranges.push(seg.range.clone()),
        }
    }
    tree
}

/// Begin lines of the loops, each computed with the lines as seen from its placement context:
/// code inlined deeper than the context counts at the line of its call in the context.
fn contextual_loop_lines(
    nest: &LoopNest,
    placement: &[Vec<u32>],
    segments: &[Segment],
    chains: &[InlineChain],
    inlines: &[InlineCall],
    dwarf: &DwarfInfo,
) -> Vec<(Option<u32>, u32)> {
    nest.loops
        .iter()
        .enumerate()
        .map(|(l, desc)| {
            let Some(choose) = &nest.begin_line else {
                return (desc.file, desc.line);
            };
            let context = &placement[l];
            let line_in_context = |addr: u64| {
                let pos = segments.partition_point(|s| s.range.start <= addr);
                let i = pos
                    .checked_sub(1)
                    .filter(|&i| segments[i].range.contains(&addr))?;
                let chain = &chains[i];
                if !chain.starts_with(context) {
                    return None;
                }
                match chain.get(context.len()) {
                    Some(&deeper) => {
                        let call = &inlines[deeper as usize];
                        Some((call.call_file?, call.call_line))
                    }
                    None => dwarf.row_at(addr).map(|r| (r.file, r.line)),
                }
            };
            match choose(l, &line_in_context) {
                Some((file, line)) => (Some(file), line),
                None => (desc.file, desc.line),
            }
        })
        .collect()
}

struct Segment {
    range: Range<u64>,
    inline: Option<u32>,
}

/// Cut the procedure's code at every boundary and find each piece's innermost inlined call.
fn segments(
    ranges: &[Range<u64>],
    inlines: &[InlineCall],
    dwarf: &DwarfInfo,
    nest: &LoopNest,
) -> Vec<Segment> {
    let mut cuts: Vec<u64> = Vec::new();
    for r in ranges {
        cuts.push(r.start);
        cuts.push(r.end);
        let first = dwarf.first_row_from(r.start);
        cuts.extend(
            dwarf.rows[first..]
                .iter()
                .map(|row| row.address)
                .take_while(|&a| a < r.end),
        );
    }
    let mut events: Vec<(u64, u64, u32, u32)> = Vec::new();
    for (i, call) in inlines.iter().enumerate() {
        for r in &call.ranges {
            events.push((r.start, r.end, call.depth, i as u32));
            cuts.push(r.start);
            cuts.push(r.end);
        }
    }
    for &(s, e, _) in &nest.membership {
        cuts.push(s);
        cuts.push(e);
    }
    cuts.sort_unstable();
    cuts.dedup();
    events.sort_unstable();

    let mut out = Vec::new();
    let mut active: Vec<(u64, u32, u32)> = Vec::new();
    let mut next_event = 0;
    let mut range_idx = 0;
    for w in cuts.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        while range_idx < ranges.len() && ranges[range_idx].end <= lo {
            range_idx += 1;
        }
        let Some(r) = ranges.get(range_idx) else {
            break;
        };
        if lo < r.start {
            continue;
        }
        while next_event < events.len() && events[next_event].0 <= lo {
            let (_, end, depth, i) = events[next_event];
            active.push((end, depth, i));
            next_event += 1;
        }
        active.retain(|&(end, _, _)| end > lo);
        let inline = active
            .iter()
            .max_by_key(|&&(_, depth, i)| (depth, i))
            .map(|&(_, _, i)| i);
        out.push(Segment {
            range: lo..hi,
            inline,
        });
    }
    out
}

/// Outermost-first chain of inlined calls ending at `innermost`.
fn inline_chain(inlines: &[InlineCall], innermost: Option<u32>) -> InlineChain {
    let mut chain = InlineChain::new();
    let mut cur = innermost;
    while let Some(c) = cur {
        if chain.len() > inlines.len() {
            break;
        }
        chain.push(c);
        cur = inlines[c as usize].parent;
    }
    chain.reverse();
    chain
}

/// For each loop, the inline chain it is placed under: the common prefix of the inline chains
/// of all code in it (nested loops included).
fn loop_placement(n: usize, chains: &[InlineChain], loop_chains: &[LoopChain]) -> Vec<Vec<u32>> {
    let mut prefix: Vec<Option<Vec<u32>>> = vec![None; n];
    for (chain, loops) in chains.iter().zip(loop_chains) {
        for &l in loops {
            match &mut prefix[l] {
                None => prefix[l] = Some(chain.to_vec()),
                Some(p) => {
                    let common = p.iter().zip(chain).take_while(|(a, b)| a == b).count();
                    p.truncate(common);
                }
            }
        }
    }
    prefix.into_iter().map(Option::unwrap_or_default).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_placed_under_common_inline_prefix() {
        let chains: Vec<InlineChain> = [&[0, 1][..], &[0, 1, 2], &[0, 3]]
            .map(InlineChain::from_slice)
            .into();
        let loops: Vec<LoopChain> = [&[0][..], &[0, 1], &[0]].map(LoopChain::from_slice).into();
        let p = loop_placement(2, &chains, &loops);
        assert_eq!(p[0], vec![0]);
        assert_eq!(p[1], vec![0, 1, 2]);
    }
}
