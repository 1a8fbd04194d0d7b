//! Loop nesting forests of control-flow graphs, irreducible loops included.
//!
//! [`LoopForest::build`] runs Havlak's algorithm ("Nesting of reducible and irreducible loops",
//! TOPLAS 1997) over a [`Cfg`]: one depth-first numbering, then the blocks are visited in
//! reverse preorder and each loop header collects its body by walking predecessors backwards,
//! with a union-find structure collapsing inner loops into their headers. A body block with a
//! predecessor outside the header's depth-first subtree makes the loop irreducible; that
//! predecessor is passed up to the enclosing loop, as Havlak prescribes. The cost is near-linear
//! in the number of edges (times the nesting depth for irreducible regions), recursion-free, and
//! it terminates on any graph.
//!
//! Blocks that cannot be reached from the procedure's entry (code behind an unresolved indirect
//! jump, landing pads) are analysed too: each block not yet numbered becomes the root of a further
//! depth-first tree, in address order. An edge from such a later tree into an earlier one can
//! never close a cycle (nothing in the earlier tree reaches the later one), so it is not an entry
//! of any loop: code reached only through an unknown jump may form loops of its own, but it never
//! makes a loop of the code around it irreducible.
//!
//! Where the blocks alone make a loop irreducible, the procedure is analysed again with
//! *dispatch nodes*: one virtual node for each set of blocks that several blocks branch to
//! (copies of one test: LLVM's tail duplication and gcc's jump threading leave one before the
//! loop and one at its bottom), which those blocks branch through instead (module `graph`). A
//! loop all of whose entries come through one dispatch node is natural, its test duplicated
//! ([`Loop::duplicated_test`]). Where a loop is still irreducible and one of its entries is a
//! short block whose one successor is another entry (a tail gcc's cross-jumping merged with the
//! code before the loop), the procedure is analysed a third time with the edges from outside
//! into that block moved to its successor, as if it were split ([`Loop::split_entry`]); the
//! others stay irreducible.
//!
//! Each [`Loop`] reports its header, its entry blocks (several for an irreducible loop), all its
//! blocks, the blocks it owns directly (not in an inner loop), its parent and children, its depth
//! (1 for outermost loops) and the sources of its back edges.

mod graph;
mod lines;

/// The most instructions a merged tail has (see [`graph::Skip`]): gcc's cross-jumping merges a
/// few (an increment, a constant loaded, a jump).
const MERGED_TAIL: usize = 3;

use crate::cfg::{BlockId, Cfg};
use graph::{Dfs, Graph, Havlak, NodeKind};

pub use lines::{BackwardBranch, LoopLine, LOOP_BEGIN_TOLERANCE};

/// Index of a loop in [`LoopForest::loops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoopId(pub u32);

impl LoopId {
    /// The loop's position in [`LoopForest::loops`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One loop of the nesting forest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    /// The header: the first block of the loop reached by the depth-first search (where that is
    /// a dispatch node, the first block of the loop it leads to); for a reducible loop, the
    /// block that dominates the loop, or that the duplicated test leads to first.
    pub header: BlockId,
    /// Blocks entered from outside the loop (or the procedure entry), header first, then by
    /// address. One entry for a reducible loop, except where the loop's test was duplicated.
    pub entries: Vec<BlockId>,
    /// True when the loop has more than one entry, not all reached through one dispatch node
    /// (see the module's documentation): control really enters the cycle at several places.
    pub irreducible: bool,
    /// True when the loop has several entries, all reached from blocks that branch through one
    /// dispatch node (see the module's documentation): a natural loop whose test the compiler
    /// duplicated.
    pub duplicated_test: bool,
    /// True when the loop has several entries, every one but the header a short block (at most
    /// three instructions, no call) whose one successor is the header: natural once
    /// such a block is split for the paths from outside (node splitting), each then entering
    /// where the block leads. gcc's cross-jumping makes these, merging the same few
    /// instructions before a loop and at the end of its body into one block (see
    /// `graph::Skip`).
    pub split_entry: bool,
    /// All blocks of the loop, inner loops' blocks included, sorted by address.
    pub blocks: Vec<BlockId>,
    /// Blocks of this loop that are in no inner loop (the header among them), sorted.
    pub own_blocks: Vec<BlockId>,
    /// The innermost enclosing loop.
    pub parent: Option<LoopId>,
    /// Loops nested directly inside, sorted by header address.
    pub children: Vec<LoopId>,
    /// Nesting depth: 1 for an outermost loop.
    pub depth: u32,
    /// Blocks of the loop with an edge to one of its entries (the latches), sorted.
    pub back_edge_sources: Vec<BlockId>,
}

/// The loops of one procedure and, for each block, its innermost loop.
#[derive(Clone, Debug, Default)]
pub struct LoopForest {
    /// All loops, sorted by header address (a parent's header may come after its child's).
    pub loops: Vec<Loop>,
    /// Outermost loops, sorted by header address.
    pub roots: Vec<LoopId>,
    /// Innermost loop of each block, indexed by [`BlockId`].
    innermost: Vec<Option<LoopId>>,
    /// Preorder number of each loop in the loop tree (children visited in `children` order).
    tree_pre: Vec<u32>,
    /// Highest preorder number in each loop's subtree: `m` is inside `l` iff
    /// `tree_pre[l] <= tree_pre[m] <= tree_last[l]`.
    tree_last: Vec<u32>,
}

impl LoopForest {
    /// Compute the loop nesting forest of `cfg`.
    pub fn build(cfg: &Cfg) -> LoopForest {
        // Dispatch nodes only where the blocks alone make a loop irreducible: every other
        // procedure is analysed on its blocks as they are.
        let mut graph = Graph::new(cfg, false, &[]);
        let mut dfs = Dfs::new(&graph);
        let mut havlak = Havlak::run(&graph, &dfs);
        if !havlak.kind.contains(&NodeKind::Irreducible) {
            return LoopForest::finish(cfg, &graph, &dfs, havlak);
        }
        graph = Graph::new(cfg, true, &[]);
        dfs = Dfs::new(&graph);
        havlak = Havlak::run(&graph, &dfs);
        let forest = LoopForest::finish(cfg, &graph, &dfs, havlak);
        // Still irreducible: once more with the edges into merged tails moved.
        let skips = forest.merged_tails(cfg);
        if skips.is_empty() {
            return forest;
        }
        graph = Graph::new(cfg, true, &skips);
        dfs = Dfs::new(&graph);
        havlak = Havlak::run(&graph, &dfs);
        LoopForest::finish(cfg, &graph, &dfs, havlak)
    }

    /// The forest of Havlak's result on `graph`, numbered by `dfs`, with every field filled.
    fn finish(cfg: &Cfg, graph: &Graph, dfs: &Dfs, havlak: Havlak) -> LoopForest {
        let mut forest = LoopForest::from_havlak(graph, dfs, havlak);
        forest.link_tree();
        forest.place_absorbed(cfg, graph);
        forest.collect_blocks(cfg.len());
        forest.find_entries(cfg, graph, dfs);
        forest.innermost.truncate(cfg.len());
        forest
    }

    /// The edges into merged tails of the irreducible loops (see [`graph::Skip`]): an entry of
    /// at most [`MERGED_TAIL`] instructions, no call among them, whose one successor is another
    /// entry, and each edge into it from outside the loop.
    fn merged_tails(&self, cfg: &Cfg) -> Vec<graph::Skip> {
        let mut skips = Vec::new();
        for (i, l) in self.loops.iter().enumerate().filter(|(_, l)| l.irreducible) {
            for &b in &l.entries {
                let block = cfg.block(b);
                let [next] = block.succs.as_slice() else {
                    continue;
                };
                let short = cfg.instructions(b).len() <= MERGED_TAIL;
                let calls = cfg
                    .calls
                    .iter()
                    .any(|c| block.start <= c.addr && c.addr < block.end);
                if !short || calls || next.to == b || !l.entries.contains(&next.to) {
                    continue;
                }
                let outside = block
                    .preds
                    .iter()
                    .filter(|&&p| !self.contains(LoopId(i as u32), p));
                skips.extend(outside.map(|p| (p.0, b.0, next.to.0)));
            }
        }
        skips.sort_unstable();
        skips.dedup_by_key(|&mut (from, block, _)| (from, block));
        skips
    }

    /// The loops Havlak's algorithm found (each headed by a block: a dispatch node stands for
    /// the first block it leads to), in address order of their headers, with their parents and
    /// each node's innermost loop.
    fn from_havlak(graph: &Graph, dfs: &Dfs, mut havlak: Havlak) -> LoopForest {
        let n = dfs.node.len();
        let mut real_header = vec![u32::MAX; n];
        for w in (0..n).filter(|&w| havlak.kind[w] != NodeKind::NonHeader) {
            real_header[w] = first_block_of(graph, dfs, &havlak, w);
        }
        merge_same_headers(&mut havlak, &real_header);
        let mut headers: Vec<usize> = (0..n)
            .filter(|&w| havlak.kind[w] != NodeKind::NonHeader)
            .collect();
        headers.sort_unstable_by_key(|&w| (real_header[w], w));
        let mut loop_of_header = vec![u32::MAX; n];
        for (i, &w) in headers.iter().enumerate() {
            loop_of_header[w] = i as u32;
        }
        let loop_at = |h: u32| LoopId(loop_of_header[h as usize]);
        let loops = headers
            .iter()
            .map(|&w| Loop {
                header: BlockId(real_header[w]),
                entries: Vec::new(),
                irreducible: false,
                duplicated_test: false,
                split_entry: false,
                blocks: Vec::new(),
                own_blocks: Vec::new(),
                parent: havlak.header[w].map(loop_at),
                children: Vec::new(),
                depth: 0,
                back_edge_sources: Vec::new(),
            })
            .collect();
        let mut innermost = vec![None; graph.len()];
        for (w, &v) in dfs.node.iter().enumerate() {
            innermost[v as usize] = if loop_of_header[w] != u32::MAX {
                Some(LoopId(loop_of_header[w]))
            } else {
                havlak.header[w].map(loop_at)
            };
        }
        LoopForest {
            loops,
            roots: Vec::new(),
            innermost,
            tree_pre: Vec::new(),
            tree_last: Vec::new(),
        }
    }

    /// Put each block absorbed into a dispatch node (see [`Graph`]) in the innermost loop around
    /// that node that control reaches it from: the test at a loop's bottom in the loop, its copy
    /// before the loop outside.
    /// Needs the loop tree linked ([`LoopForest::link_tree`]).
    fn place_absorbed(&mut self, cfg: &Cfg, graph: &Graph) {
        for b in 0..cfg.len() as u32 {
            let Some(v) = graph.absorbed_into(b) else {
                continue;
            };
            let preds = &cfg.block(BlockId(b)).preds;
            let mut l = self.innermost[v as usize];
            while let Some(m) = l {
                if preds.iter().any(|&p| self.contains(m, p)) {
                    break;
                }
                l = self.loops[m.index()].parent;
            }
            self.innermost[b as usize] = l;
        }
    }

    /// Fill `children`, `roots` and `depth` from the `parent` links.
    fn link_tree(&mut self) {
        for i in 0..self.loops.len() {
            match self.loops[i].parent {
                Some(p) => self.loops[p.index()].children.push(LoopId(i as u32)),
                None => self.roots.push(LoopId(i as u32)),
            }
        }
        let n = self.loops.len();
        self.tree_pre = vec![0; n];
        self.tree_last = vec![0; n];
        let mut counter = 0;
        // (loop, index of the next child to visit)
        let mut stack: Vec<(LoopId, usize)> = Vec::new();
        for &root in &self.roots {
            self.tree_pre[root.index()] = counter;
            self.loops[root.index()].depth = 1;
            counter += 1;
            stack.push((root, 0));
            while let Some(&mut (l, ref mut next)) = stack.last_mut() {
                if let Some(&c) = self.loops[l.index()].children.get(*next) {
                    *next += 1;
                    self.tree_pre[c.index()] = counter;
                    self.loops[c.index()].depth = self.loops[l.index()].depth + 1;
                    counter += 1;
                    stack.push((c, 0));
                } else {
                    self.tree_last[l.index()] = counter - 1;
                    stack.pop();
                }
            }
        }
    }

    /// The child of loop `l` that contains block `b`, if `b` is in `l` but not in its own
    /// blocks.
    pub fn child_containing(&self, l: LoopId, b: BlockId) -> Option<LoopId> {
        let m = self.innermost(b)?;
        if m == l || !self.contains(l, b) {
            return None;
        }
        let pre = self.tree_pre[m.index()];
        let children = &self.loops[l.index()].children;
        let i = children.partition_point(|c| self.tree_pre[c.index()] <= pre);
        Some(children[i - 1])
    }

    /// Fill `blocks` and `own_blocks` (address order, since block ids follow addresses).
    fn collect_blocks(&mut self, n_blocks: usize) {
        for b in 0..n_blocks {
            let block = BlockId(b as u32);
            let mut up = self.innermost[b];
            if let Some(l) = up {
                self.loops[l.index()].own_blocks.push(block);
            }
            while let Some(l) = up {
                self.loops[l.index()].blocks.push(block);
                up = self.loops[l.index()].parent;
            }
        }
    }

    /// Fill `entries`, `irreducible`, `duplicated_test`, `split_entry` and `back_edge_sources`.
    fn find_entries(&mut self, cfg: &Cfg, graph: &Graph, dfs: &Dfs) {
        for i in 0..self.loops.len() {
            let id = LoopId(i as u32);
            let header = self.loops[i].header;
            // Edges from outside the loop into it (`None` from: the procedure's entry), each
            // where the graph enters (past a split block).
            let mut entering: Vec<(Option<BlockId>, BlockId)> = Vec::new();
            let mut entries: Vec<BlockId> = Vec::new();
            for &b in &self.loops[i].blocks {
                let w = dfs.number[b.index()] as usize;
                // An absorbed test is a root only because edges into it were moved.
                if dfs.is_root[w] && graph.absorbed_into(b.0).is_none() {
                    entering.push((None, b));
                    entries.push(b);
                }
                for &p in &cfg.block(b).preds {
                    let v = dfs.number[p.index()] as usize;
                    if !self.contains(id, p) && !dfs.enters_from_later_tree(v, w) {
                        entering.push((Some(p), BlockId(graph.entered_at(p.0, b.0))));
                        entries.push(b);
                    }
                }
            }
            let mut entered: Vec<BlockId> = entering.iter().map(|&(_, b)| b).collect();
            entered.sort_unstable();
            entered.dedup();
            let split = entered.len() == 1 && entered[0] == header;
            entries.sort_unstable();
            entries.dedup();
            entries.retain(|&b| b != header);
            entries.insert(0, header);
            // Several entries, all reached from blocks that branch through one dispatch node:
            // copies of one test.
            let through = |(p, e): (Option<BlockId>, BlockId)| {
                if let Some(v) = graph.absorbed_into(e.0) {
                    return Some(graph.test_of(cfg, v));
                }
                let out = graph.succs(p?.0);
                (out.len() == 1 && graph.is_dispatch(out[0])).then(|| graph.test_of(cfg, out[0]))
            };
            let first = entering.first().and_then(|&edge| through(edge));
            let one_test = first.is_some() && entering.iter().all(|&edge| through(edge) == first);
            let mut latches: Vec<BlockId> = entries
                .iter()
                .flat_map(|&e| cfg.block(e).preds.iter().copied())
                .filter(|&p| self.contains(id, p))
                .collect();
            latches.sort_unstable();
            latches.dedup();
            let l = &mut self.loops[i];
            l.irreducible = entries.len() > 1 && !one_test && !split;
            l.duplicated_test = entries.len() > 1 && one_test;
            l.split_entry = entries.len() > 1 && !one_test && split;
            l.entries = entries;
            l.back_edge_sources = latches;
        }
    }

    /// The innermost loop containing block `b`.
    pub fn innermost(&self, b: BlockId) -> Option<LoopId> {
        self.innermost.get(b.index()).copied().flatten()
    }

    /// True if block `b` belongs to loop `l` (directly or through an inner loop).
    pub fn contains(&self, l: LoopId, b: BlockId) -> bool {
        self.contains_node(l, b.0)
    }

    /// [`LoopForest::contains`] for a node of the [`Graph`] (a block or a dispatch node), while
    /// the forest is built.
    fn contains_node(&self, l: LoopId, v: u32) -> bool {
        self.innermost
            .get(v as usize)
            .copied()
            .flatten()
            .is_some_and(|m| {
                let pre = self.tree_pre[m.index()];
                self.tree_pre[l.index()] <= pre && pre <= self.tree_last[l.index()]
            })
    }

    /// Loop nesting depth of block `b`: 0 outside any loop.
    pub fn depth_of(&self, b: BlockId) -> u32 {
        self.innermost(b).map_or(0, |l| self.get(l).depth)
    }

    /// One loop.
    pub fn get(&self, id: LoopId) -> &Loop {
        &self.loops[id.index()]
    }

    /// Number of loops.
    pub fn len(&self) -> usize {
        self.loops.len()
    }

    /// True when the procedure has no loop.
    pub fn is_empty(&self) -> bool {
        self.loops.is_empty()
    }
}

/// The block that stands for header `w` (preorder number): the header itself, or for a dispatch
/// node the lowest block of the loop it leads to.
fn first_block_of(graph: &Graph, dfs: &Dfs, havlak: &Havlak, w: usize) -> u32 {
    let v = dfs.node[w];
    if !graph.is_dispatch(v) {
        return v;
    }
    let in_loop = |s: u32| {
        let mut x = dfs.number[s as usize];
        while let Some(h) = havlak.header[x as usize] {
            if h as usize == w {
                return true;
            }
            x = h;
        }
        false
    };
    // The blocks the dispatch node leads to, through the dispatch nodes it leads to.
    let mut seen = vec![v];
    let mut next = 0;
    let mut best = None;
    while let Some(&x) = seen.get(next) {
        next += 1;
        for &s in graph.succs(x) {
            if seen.contains(&s) || !in_loop(s) {
                continue;
            }
            if graph.is_dispatch(s) {
                seen.push(s);
            } else {
                best = Some(best.map_or(s, |b: u32| b.min(s)));
            }
        }
    }
    best.unwrap_or(v)
}

/// Where a loop headed by a dispatch node has a child headed by the block the dispatch node
/// stands for, the two are one loop of the machine code (one header address): the child's blocks
/// join the parent. One pass in preorder, where every header comes before what it encloses.
fn merge_same_headers(havlak: &mut Havlak, real_header: &[u32]) {
    // The header each merged header's blocks now belong to.
    let mut into: Vec<Option<u32>> = vec![None; havlak.kind.len()];
    for w in 0..havlak.kind.len() {
        let Some(h) = havlak.header[w] else {
            continue;
        };
        let h = into[h as usize].unwrap_or(h);
        havlak.header[w] = Some(h);
        if havlak.kind[w] != NodeKind::NonHeader && real_header[w] == real_header[h as usize] {
            havlak.kind[w] = NodeKind::NonHeader;
            into[w] = Some(h);
        }
    }
}
