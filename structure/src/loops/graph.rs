//! The graph Havlak's algorithm runs on, its depth-first numbering, and the algorithm itself.
//!
//! **Duplicated tests.** Compilers copy a loop's test into the blocks that reach it: LLVM's
//! tail duplication during block placement and gcc's jump threading leave one copy before the
//! loop and one at the bottom of its body, each branching to the same blocks (the first body
//! block and the code after the test's other arm); a `switch` dispatched from two places gets two
//! jump tables with the same targets. No block then dominates the cycle: the machine code's loop
//! has two entries, although the source loop, and the compiler's own loop until that late pass,
//! was natural. So the graph has, besides one node per basic block, one *dispatch node* for each
//! set of two or more successors that several blocks branch to: each such block branches to the
//! set's dispatch node instead, and the dispatch node to the set. Every path of the graph is a
//! path of the procedure and the reverse (a dispatch node stands only where each of its
//! predecessors branches to each of its successors), so the same cycles exist; what changes is
//! dominance: the dispatch node is the one entry of a loop whose machine code has two.
//!
//! Blocks that only pass control on (`nop`s, a direct `jmp`) are looked through when successor
//! sets are compared; a dispatch node also branches to the pass-through blocks its predecessors
//! went through, so that they stay in the loop they belong to. A block of the set that only
//! tests (`cmp`/`test` and the conditional branch: gcc's loop test at the bottom, jumped to from
//! before the loop while a copy of it falls into the body) is the test itself: the edges into it
//! go to the dispatch node, and it belongs to the dispatch node's loop.

use crate::cfg::{BlockId, Cfg};
use fxhash::FxHashMap;
use smallvec::SmallVec;

/// Successor or predecessor lists of the graph's nodes while dispatch nodes are made.
type Adjacency = Vec<SmallVec<[u32; 2]>>;

/// Adjacency lists of all nodes in two arrays (one allocation each, whatever the size).
struct Lists {
    /// Where each node's list starts in `to`; one more entry than nodes.
    start: Vec<u32>,
    to: Vec<u32>,
}

impl Lists {
    /// The lists `of(v)` of nodes `0..n`.
    fn new<I: IntoIterator<Item = u32>>(n: usize, mut of: impl FnMut(usize) -> I) -> Lists {
        let mut start = Vec::with_capacity(n + 1);
        let mut to = Vec::with_capacity(2 * n);
        for v in 0..n {
            start.push(to.len() as u32);
            to.extend(of(v));
        }
        start.push(to.len() as u32);
        Lists { start, to }
    }

    /// The reverse lists: for each node, the nodes whose lists hold it.
    fn reversed(&self) -> Lists {
        let n = self.start.len() - 1;
        let mut count = vec![0u32; n + 1];
        for &t in &self.to {
            count[t as usize + 1] += 1;
        }
        for v in 0..n {
            count[v + 1] += count[v];
        }
        let mut fill = count.clone();
        let mut to = vec![0; self.to.len()];
        for v in 0..n {
            for &t in self.of(v as u32) {
                to[fill[t as usize] as usize] = v as u32;
                fill[t as usize] += 1;
            }
        }
        Lists { start: count, to }
    }

    fn of(&self, v: u32) -> &[u32] {
        &self.to[self.start[v as usize] as usize..self.start[v as usize + 1] as usize]
    }
}

/// A procedure's blocks (nodes `0..blocks`, numbered as [`BlockId`]s) and its dispatch nodes
/// (`blocks..`), with their edges.
pub(super) struct Graph {
    succs: Lists,
    preds: Lists,
    pub(super) entry: Option<u32>,
    /// Number of nodes that are basic blocks; the rest are dispatch nodes.
    pub(super) blocks: usize,
    /// For each block that only tests and that its dispatch node replaced as the target of
    /// every edge into it (see [`Graph::new`]), that node; `u32::MAX` for the others.
    absorbed: Vec<u32>,
    /// The edges moved past a merged tail (see [`Skip`]), sorted.
    skips: Vec<Skip>,
}

/// An edge from a block outside a loop into a short block of it whose one successor is another
/// entry of the loop, taken as an edge to that successor: `(from, block, to)`. gcc's
/// cross-jumping merges the same few instructions at the end of the code before a loop and at
/// the end of its body (a pointer's increment, a constant loaded) into one block, which the code
/// before the loop then enters; the loop of the source was entered at the block after them. As
/// if the code before the loop kept its own copy of them, the cycle keeps the block, and the
/// edge from outside goes where the copy would have led.
pub(super) type Skip = (u32, u32, u32);

impl Graph {
    /// The graph of `cfg`, with dispatch nodes where blocks share their successors if
    /// `dispatch`, and with the edges `skips` moved (see [`Skip`]).
    pub(super) fn new(cfg: &Cfg, dispatch: bool, skips: &[Skip]) -> Graph {
        let n = cfg.len();
        let block_succs = |b: usize| cfg.blocks[b].succs.iter().map(|e| e.to.0);
        if !dispatch {
            let succs = Lists::new(n, block_succs);
            return Graph {
                preds: succs.reversed(),
                succs,
                entry: cfg.entry.map(|b| b.0),
                blocks: n,
                absorbed: Vec::new(),
                skips: Vec::new(),
            };
        }
        let mut succs: Adjacency = (0..n).map(|b| block_succs(b).collect()).collect();
        for &(from, block, to) in skips {
            let out = &mut succs[from as usize];
            out.retain(|s| *s != block);
            if !out.contains(&to) {
                out.push(to);
            }
        }
        // Blocks by the set of places they lead to, pass-through blocks looked through.
        let mut by_targets: FxHashMap<SmallVec<[u32; 4]>, SmallVec<[u32; 2]>> =
            FxHashMap::default();
        for (b, out) in succs.iter().enumerate() {
            if out.len() < 2 {
                continue;
            }
            let mut key: SmallVec<[u32; 4]> = out.iter().map(|&s| beyond(cfg, s)).collect();
            key.sort_unstable();
            key.dedup();
            if key.len() >= 2 {
                by_targets.entry(key).or_default().push(b as u32);
            }
        }
        let mut absorbed = vec![u32::MAX; n];
        let mut shared: Vec<_> = by_targets
            .into_iter()
            .filter(|(_, members)| members.len() >= 2)
            .collect();
        // Dispatch nodes numbered in the order of their first member, whatever the hashing.
        shared.sort_unstable_by_key(|(_, members)| members[0]);
        for (targets, members) in shared {
            let node = succs.len() as u32;
            let mut out: SmallVec<[u32; 2]> = targets.iter().copied().collect();
            let copies = copies_of_one_test(cfg, &members);
            for (i, &m) in members.iter().enumerate() {
                out.extend(
                    succs[m as usize]
                        .iter()
                        .copied()
                        .filter(|&s| beyond(cfg, s) != s),
                );
                succs[m as usize] = SmallVec::from_slice(&[node]);
                let test = cfg.block(BlockId(m)).only_tests || copies[i];
                if test && !targets.contains(&m) && cfg.entry != Some(BlockId(m)) {
                    absorbed[m as usize] = node;
                }
            }
            out.sort_unstable();
            out.dedup();
            succs.push(out);
        }
        // A block that only tests and branches to its dispatch node's successors is one more
        // copy of the test: edges into it go to the dispatch node itself.
        for out in succs.iter_mut() {
            let mut changed = false;
            for s in out.iter_mut() {
                if let Some(&node) = absorbed.get(*s as usize).filter(|&&v| v != u32::MAX) {
                    *s = node;
                    changed = true;
                }
            }
            if changed {
                out.sort_unstable();
                out.dedup();
            }
        }
        let succs = Lists::new(succs.len(), |v| succs[v].iter().copied());
        Graph {
            preds: succs.reversed(),
            succs,
            entry: cfg.entry.map(|b| b.0),
            blocks: n,
            absorbed,
            skips: skips.to_vec(),
        }
    }

    /// Where the edge from block `from` to block `to` enters in this graph: `to`, or the block
    /// after it where the edge was moved past a merged tail (see [`Skip`]).
    pub(super) fn entered_at(&self, from: u32, to: u32) -> u32 {
        match self
            .skips
            .binary_search_by_key(&(from, to), |&(f, b, _)| (f, b))
        {
            Ok(i) => self.skips[i].2,
            Err(_) => to,
        }
    }

    /// The dispatch node that block `b` was absorbed into, if any.
    pub(super) fn absorbed_into(&self, b: u32) -> Option<u32> {
        self.absorbed
            .get(b as usize)
            .copied()
            .filter(|&v| v != u32::MAX)
    }

    /// The test that dispatch node `v` of `cfg`'s graph stands for: `v`, or where all its
    /// successors lead to one other dispatch node (its tested blocks absorbed there), that
    /// node's test.
    pub(super) fn test_of(&self, cfg: &Cfg, mut v: u32) -> u32 {
        for _ in 0..8 {
            let mut ends = self.succs(v).iter().map(|&s| self.beyond_pass(cfg, s));
            let Some(first) = ends.next() else { break };
            if first == v || !self.is_dispatch(first) || !ends.all(|e| e == first) {
                break;
            }
            v = first;
        }
        v
    }

    /// Node `s`, or where `s` is a block that only passes control on, the node it leads to in
    /// this graph (where the block it jumps to may have been absorbed).
    fn beyond_pass(&self, cfg: &Cfg, s: u32) -> u32 {
        match self.succs(s) {
            [only] if !self.is_dispatch(s) && cfg.block(BlockId(s)).passes_through => *only,
            _ => s,
        }
    }

    /// Number of nodes.
    pub(super) fn len(&self) -> usize {
        self.succs.start.len() - 1
    }

    /// The nodes node `v` has an edge to.
    pub(super) fn succs(&self, v: u32) -> &[u32] {
        self.succs.of(v)
    }

    /// The nodes with an edge to node `v`.
    pub(super) fn preds(&self, v: u32) -> &[u32] {
        self.preds.of(v)
    }

    /// True for a dispatch node.
    pub(super) fn is_dispatch(&self, v: u32) -> bool {
        v as usize >= self.blocks
    }
}

/// For each of `members` (blocks with the same successors), whether another member makes the
/// same choice ([`crate::cfg::BasicBlock::test_choice`]): copies of one test, which compute the
/// same choice between the same places.
fn copies_of_one_test(cfg: &Cfg, members: &[u32]) -> SmallVec<[bool; 4]> {
    let choices: SmallVec<[_; 4]> = (members.iter())
        .map(|&m| cfg.block(BlockId(m)).test_choice(|b| beyond(cfg, b.0)))
        .collect();
    (choices.iter().enumerate())
        .map(|(i, c)| c.is_some() && (choices.iter().enumerate()).any(|(j, o)| j != i && o == c))
        .collect()
}

/// Where control goes from block `b` once the blocks that only pass it on are skipped (at most
/// a few, so a cycle of jumps ends).
fn beyond(cfg: &Cfg, mut b: u32) -> u32 {
    for _ in 0..4 {
        let block = cfg.block(BlockId(b));
        match block.succs.as_slice() {
            [only] if block.passes_through => b = only.to.0,
            _ => break,
        }
    }
    b
}

/// What Havlak's algorithm found out about one node, in preorder numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeKind {
    NonHeader,
    SelfLoop,
    Reducible,
    Irreducible,
}

/// Depth-first numbering of a [`Graph`]: preorder numbers and subtree extents.
pub(super) struct Dfs {
    /// Node at each preorder number.
    pub(super) node: Vec<u32>,
    /// Preorder number of each node.
    pub(super) number: Vec<u32>,
    /// Highest preorder number in each node's subtree (by preorder number).
    last: Vec<u32>,
    /// True at the preorder numbers of the depth-first roots.
    pub(super) is_root: Vec<bool>,
    /// The depth-first tree (0 for the entry's) of each node, by preorder number.
    tree: Vec<u32>,
}

impl Dfs {
    /// Number every node: first the tree from the entry, then one tree per block still
    /// unnumbered, in address order (a dispatch node is reached from its blocks).
    pub(super) fn new(g: &Graph) -> Dfs {
        let n = g.len();
        let mut dfs = Dfs {
            node: Vec::with_capacity(n),
            number: vec![u32::MAX; n],
            last: vec![0; n],
            is_root: vec![false; n],
            tree: Vec::with_capacity(n),
        };
        let roots = g.entry.into_iter().chain(0..g.blocks as u32);
        let mut stack: Vec<(u32, usize)> = Vec::new();
        let mut tree = 0;
        for root in roots {
            if dfs.number[root as usize] != u32::MAX {
                continue;
            }
            dfs.is_root[dfs.node.len()] = true;
            dfs.visit(root, tree, &mut stack);
            while let Some(&mut (v, ref mut next)) = stack.last_mut() {
                if let Some(&s) = g.succs(v).get(*next) {
                    *next += 1;
                    if dfs.number[s as usize] == u32::MAX {
                        dfs.visit(s, tree, &mut stack);
                    }
                } else {
                    let w = dfs.number[v as usize] as usize;
                    dfs.last[w] = dfs.node.len() as u32 - 1;
                    stack.pop();
                }
            }
            tree += 1;
        }
        dfs
    }

    fn visit(&mut self, v: u32, tree: u32, stack: &mut Vec<(u32, usize)>) {
        self.number[v as usize] = self.node.len() as u32;
        self.node.push(v);
        self.tree.push(tree);
        stack.push((v, 0));
    }

    /// True if preorder node `w` is an ancestor of (or equal to) `v`.
    pub(super) fn is_ancestor(&self, w: usize, v: usize) -> bool {
        w <= v && v <= self.last[w] as usize
    }

    /// True if the edge from preorder node `v` to `w` comes from a later depth-first tree: it
    /// closes no cycle and enters no loop (see the module's documentation).
    pub(super) fn enters_from_later_tree(&self, v: usize, w: usize) -> bool {
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
pub(super) struct Havlak {
    pub(super) kind: Vec<NodeKind>,
    pub(super) header: Vec<Option<u32>>,
}

impl Havlak {
    pub(super) fn run(g: &Graph, dfs: &Dfs) -> Havlak {
        let n = dfs.node.len();
        let mut back_preds: Vec<SmallVec<[u32; 2]>> = vec![SmallVec::new(); n];
        let mut non_back_preds: Vec<SmallVec<[u32; 2]>> = vec![SmallVec::new(); n];
        for (w, &b) in dfs.node.iter().enumerate() {
            for &p in g.preds(b) {
                let v = dfs.number[p as usize];
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
