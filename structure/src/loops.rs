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
//! Each [`Loop`] reports its header, its entry blocks (several for an irreducible loop), all its
//! blocks, the blocks it owns directly (not in an inner loop), its parent and children, its depth
//! (1 for outermost loops) and the sources of its back edges.

use crate::cfg::{BlockId, Cfg, EdgeKind, Terminator};
use smallvec::SmallVec;

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
    /// The header: the first block of the loop reached by the depth-first search; for a
    /// reducible loop, the block that dominates the loop.
    pub header: BlockId,
    /// Blocks entered from outside the loop (or the procedure entry), header first, then by
    /// address. One entry for a reducible loop.
    pub entries: Vec<BlockId>,
    /// True when the loop has more than one entry.
    pub irreducible: bool,
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

/// What Havlak's algorithm found out about one block, in preorder numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeKind {
    NonHeader,
    SelfLoop,
    Reducible,
    Irreducible,
}

/// Depth-first numbering of a CFG: preorder numbers and subtree extents.
struct Dfs {
    /// Block at each preorder number.
    node: Vec<BlockId>,
    /// Preorder number of each block.
    number: Vec<u32>,
    /// Highest preorder number in each node's subtree (by preorder number).
    last: Vec<u32>,
    /// True at the preorder numbers of the depth-first roots.
    is_root: Vec<bool>,
    /// The depth-first tree (0 for the entry's) of each node, by preorder number.
    tree: Vec<u32>,
}

impl Dfs {
    /// Number every block: first the tree from `entry`, then one tree per block still unnumbered.
    fn new(cfg: &Cfg) -> Dfs {
        let n = cfg.len();
        let mut dfs = Dfs {
            node: Vec::with_capacity(n),
            number: vec![u32::MAX; n],
            last: vec![0; n],
            is_root: vec![false; n],
            tree: Vec::with_capacity(n),
        };
        let roots = cfg.entry.into_iter().chain((0..n as u32).map(BlockId));
        let mut stack: Vec<(BlockId, usize)> = Vec::new();
        let mut tree = 0;
        for root in roots {
            if dfs.number[root.index()] != u32::MAX {
                continue;
            }
            dfs.is_root[dfs.node.len()] = true;
            dfs.visit(root, tree, &mut stack);
            while let Some(&mut (b, ref mut next)) = stack.last_mut() {
                let succs = &cfg.block(b).succs;
                if let Some(edge) = succs.get(*next) {
                    *next += 1;
                    if dfs.number[edge.to.index()] == u32::MAX {
                        dfs.visit(edge.to, tree, &mut stack);
                    }
                } else {
                    let w = dfs.number[b.index()] as usize;
                    dfs.last[w] = dfs.node.len() as u32 - 1;
                    stack.pop();
                }
            }
            tree += 1;
        }
        dfs
    }

    fn visit(&mut self, b: BlockId, tree: u32, stack: &mut Vec<(BlockId, usize)>) {
        self.number[b.index()] = self.node.len() as u32;
        self.node.push(b);
        self.tree.push(tree);
        stack.push((b, 0));
    }

    /// True if preorder node `w` is an ancestor of (or equal to) `v`.
    fn is_ancestor(&self, w: usize, v: usize) -> bool {
        w <= v && v <= self.last[w] as usize
    }

    /// True if the edge from preorder node `v` to `w` comes from a later depth-first tree: it
    /// closes no cycle and enters no loop (see the module's documentation).
    fn enters_from_later_tree(&self, v: usize, w: usize) -> bool {
        self.tree[v] > self.tree[w]
    }
}

/// Union-find over preorder numbers with path halving; `union(x, w)` makes `w` the root.
struct UnionFind {
    parent: Vec<u32>,
}

impl UnionFind {
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] as usize != x {
            let grand = self.parent[self.parent[x] as usize];
            self.parent[x] = grand;
            x = grand as usize;
        }
        x
    }
}

/// Havlak's result in preorder numbers: each node's kind and innermost enclosing header.
struct Havlak {
    kind: Vec<NodeKind>,
    header: Vec<Option<u32>>,
}

impl Havlak {
    fn run(cfg: &Cfg, dfs: &Dfs) -> Havlak {
        let n = dfs.node.len();
        let mut back_preds: Vec<SmallVec<[u32; 2]>> = vec![SmallVec::new(); n];
        let mut non_back_preds: Vec<SmallVec<[u32; 2]>> = vec![SmallVec::new(); n];
        for (w, &b) in dfs.node.iter().enumerate() {
            for &p in &cfg.block(b).preds {
                let v = dfs.number[p.index()];
                if dfs.enters_from_later_tree(v as usize, w) {
                    continue;
                }
                if dfs.is_ancestor(w, v as usize) {
                    back_preds[w].push(v);
                } else {
                    non_back_preds[w].push(v);
                }
            }
        }
        let mut result = Havlak {
            kind: vec![NodeKind::NonHeader; n],
            header: vec![None; n],
        };
        let mut uf = UnionFind {
            parent: (0..n as u32).collect(),
        };
        // `in_body[x] == w` marks x as collected into the body of header w.
        let mut in_body = vec![u32::MAX; n];
        let mut body: Vec<usize> = Vec::new();
        let mut worklist: Vec<usize> = Vec::new();
        let mut escaping: Vec<u32> = Vec::new();
        for w in (0..n).rev() {
            body.clear();
            for &v in &back_preds[w] {
                if v as usize == w {
                    result.kind[w] = NodeKind::SelfLoop;
                    continue;
                }
                let r = uf.find(v as usize);
                if in_body[r] != w as u32 {
                    in_body[r] = w as u32;
                    body.push(r);
                }
            }
            if body.is_empty() {
                continue;
            }
            result.kind[w] = NodeKind::Reducible;
            worklist.extend_from_slice(&body);
            while let Some(x) = worklist.pop() {
                for &y in &non_back_preds[x] {
                    let r = uf.find(y as usize);
                    if !dfs.is_ancestor(w, r) {
                        // Entered from outside w's subtree: irreducible; the enclosing loop
                        // must see this edge as entering w.
                        result.kind[w] = NodeKind::Irreducible;
                        escaping.push(r as u32);
                    } else if r != w && in_body[r] != w as u32 {
                        in_body[r] = w as u32;
                        body.push(r);
                        worklist.push(r);
                    }
                }
            }
            escaping.sort_unstable();
            escaping.dedup();
            non_back_preds[w].extend(escaping.drain(..));
            for &x in &body {
                result.header[x] = Some(w as u32);
                uf.parent[x] = w as u32;
            }
        }
        result
    }
}

impl LoopForest {
    /// Compute the loop nesting forest of `cfg`.
    pub fn build(cfg: &Cfg) -> LoopForest {
        let dfs = Dfs::new(cfg);
        let havlak = Havlak::run(cfg, &dfs);
        let mut forest = LoopForest {
            loops: Vec::new(),
            roots: Vec::new(),
            innermost: vec![None; cfg.len()],
            tree_pre: Vec::new(),
            tree_last: Vec::new(),
        };
        // Loops are created in address order of their headers.
        let mut headers: Vec<usize> = (0..dfs.node.len())
            .filter(|&w| havlak.kind[w] != NodeKind::NonHeader)
            .collect();
        headers.sort_unstable_by_key(|&w| dfs.node[w]);
        let mut loop_of_header = vec![u32::MAX; dfs.node.len()];
        for (i, &w) in headers.iter().enumerate() {
            loop_of_header[w] = i as u32;
        }
        for &w in &headers {
            forest.loops.push(Loop {
                header: dfs.node[w],
                entries: Vec::new(),
                irreducible: false,
                blocks: Vec::new(),
                own_blocks: Vec::new(),
                parent: havlak.header[w].map(|h| LoopId(loop_of_header[h as usize])),
                children: Vec::new(),
                depth: 0,
                back_edge_sources: Vec::new(),
            });
        }
        for (w, &b) in dfs.node.iter().enumerate() {
            forest.innermost[b.index()] = if loop_of_header[w] != u32::MAX {
                Some(LoopId(loop_of_header[w]))
            } else {
                havlak.header[w].map(|h| LoopId(loop_of_header[h as usize]))
            };
        }
        forest.link_tree();
        forest.collect_blocks(cfg.len());
        forest.find_entries(cfg, &dfs);
        forest
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

    /// Fill `entries`, `irreducible` and `back_edge_sources`.
    fn find_entries(&mut self, cfg: &Cfg, dfs: &Dfs) {
        for i in 0..self.loops.len() {
            let id = LoopId(i as u32);
            let header = self.loops[i].header;
            let mut entries: Vec<BlockId> = self.loops[i]
                .blocks
                .iter()
                .copied()
                .filter(|&b| {
                    let w = dfs.number[b.index()] as usize;
                    dfs.is_root[w]
                        || cfg.block(b).preds.iter().any(|&p| {
                            let v = dfs.number[p.index()] as usize;
                            !self.contains(id, p) && !dfs.enters_from_later_tree(v, w)
                        })
                })
                .collect();
            entries.retain(|&b| b != header);
            entries.insert(0, header);
            let mut latches: Vec<BlockId> = entries
                .iter()
                .flat_map(|&e| cfg.block(e).preds.iter().copied())
                .filter(|&p| self.contains(id, p))
                .collect();
            latches.sort_unstable();
            latches.dedup();
            let l = &mut self.loops[i];
            l.irreducible = entries.len() > 1;
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
        self.innermost(b).is_some_and(|m| {
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
