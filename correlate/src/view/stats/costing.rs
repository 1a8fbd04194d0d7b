//! One group's inclusive cost in every scope of a view, from the database nodes the group has
//! costs at and the view's sources, in integers: the work of a group is the part of the tree
//! it reached, not the whole tree, and no view is built per group.

use crate::db::database::Database;
use crate::db::ids::{DbNodeId, ThreadIdx};

/// Per database node, the scopes its inclusive cost goes into (a scope once per source: a
/// view node can add up the same database node more than once).
pub(super) struct Targets {
    /// Where each node's scopes start in `scopes` (one more entry than nodes).
    start: Vec<usize>,
    scopes: Vec<u32>,
}

impl Targets {
    /// The targets of a view's `sources` (view node, database node), `scope_of` each view
    /// node's scope, for a database of `nodes` nodes.
    pub(super) fn new(nodes: usize, sources: &[(usize, DbNodeId)], scope_of: &[usize]) -> Targets {
        let mut start = vec![0; nodes + 1];
        for (_, n) in sources {
            start[n.index() + 1] += 1;
        }
        for i in 0..nodes {
            start[i + 1] += start[i];
        }
        let mut next = start.clone();
        let mut scopes = vec![0; sources.len()];
        for &(v, n) in sources {
            scopes[next[n.index()]] = scope_of[v] as u32;
            next[n.index()] += 1;
        }
        Targets { start, scopes }
    }

    fn of(&self, node: usize) -> &[u32] {
        &self.scopes[self.start[node]..self.start[node + 1]]
    }
}

/// Every group's non-zero self costs of one metric: (database node, value), group by group.
pub(super) struct GroupCosts {
    /// Where each group's entries start (one more entry than groups).
    start: Vec<usize>,
    nodes: Vec<u32>,
    values: Vec<u64>,
}

impl GroupCosts {
    /// The costs of metric `metric` of `db` for the groups whose threads are `members`.
    pub(super) fn new(db: &Database, members: &[Vec<ThreadIdx>], metric: usize) -> GroupCosts {
        let mut group_of = vec![usize::MAX; db.threads.len()];
        for (g, threads) in members.iter().enumerate() {
            for t in threads {
                group_of[t.index()] = g;
            }
        }
        // Each node's (group, value), once to count, once to place.
        let each = |visit: &mut dyn FnMut(usize, usize, u64)| {
            for (n, node) in db.nodes.iter().enumerate() {
                for (thread, mut costs) in node.costs.iter() {
                    let value = costs.nth(metric).map_or(0, |c| c.value);
                    match group_of.get(thread.index()) {
                        Some(&g) if g != usize::MAX && value > 0 => visit(g, n, value),
                        _ => {}
                    }
                }
            }
        };
        let mut start = vec![0; members.len() + 1];
        each(&mut |g, _, _| start[g + 1] += 1);
        for g in 0..members.len() {
            start[g + 1] += start[g];
        }
        let mut next = start.clone();
        let mut nodes = vec![0; start[members.len()]];
        let mut values = vec![0; nodes.len()];
        each(&mut |g, n, value| {
            nodes[next[g]] = n as u32;
            values[next[g]] = value;
            next[g] += 1;
        });
        GroupCosts {
            start,
            nodes,
            values,
        }
    }
}

/// The work space of [`Costing::group`], reused from group to group.
pub(super) struct Costing {
    /// Per database node, the group's inclusive value (zero outside `reached`).
    inclusive: Vec<u64>,
    /// Per database node, whether the group reached it (it or a descendant has a cost).
    is_reached: Vec<bool>,
    reached: Vec<u32>,
    /// Per scope, the group's value (zero outside `scopes`).
    value: Vec<u64>,
    scopes: Vec<u32>,
}

impl Costing {
    /// Work space for `db` and a view of `scopes` scopes.
    pub(super) fn new(db: &Database, scopes: usize) -> Costing {
        Costing {
            inclusive: vec![0; db.nodes.len()],
            is_reached: vec![false; db.nodes.len()],
            reached: Vec::new(),
            value: vec![0; scopes],
            scopes: Vec::new(),
        }
    }

    /// Call `each(scope, value)` for every scope where group `g` of `costs` has a non-zero
    /// inclusive value (sums saturate, as the views' do).
    pub(super) fn group(
        &mut self,
        db: &Database,
        targets: &Targets,
        costs: &GroupCosts,
        g: usize,
        mut each: impl FnMut(usize, u64),
    ) {
        let range = costs.start[g]..costs.start[g + 1];
        for (&n, &value) in costs.nodes[range.clone()].iter().zip(&costs.values[range]) {
            let n = n as usize;
            self.inclusive[n] = self.inclusive[n].saturating_add(value);
            self.reach(db, n);
        }
        // Children have larger ids than their parents: folding in descending order adds each
        // node's complete subtree to its parent.
        self.reached.sort_unstable_by(|a, b| b.cmp(a));
        for &n in &self.reached {
            let (n, parent) = (n as usize, db.nodes[n as usize].parent.index());
            if n != 0 {
                self.inclusive[parent] = self.inclusive[parent].saturating_add(self.inclusive[n]);
            }
            let value = std::mem::take(&mut self.inclusive[n]);
            self.is_reached[n] = false;
            for &s in targets.of(n).iter().filter(|_| value > 0) {
                let v = &mut self.value[s as usize];
                if *v == 0 {
                    self.scopes.push(s);
                }
                *v = v.saturating_add(value);
            }
        }
        self.reached.clear();
        for s in self.scopes.drain(..) {
            each(s as usize, std::mem::take(&mut self.value[s as usize]));
        }
    }

    /// Mark node `n` and its ancestors as reached, up to the first one already marked.
    fn reach(&mut self, db: &Database, mut n: usize) {
        while !self.is_reached[n] {
            self.is_reached[n] = true;
            self.reached.push(n as u32);
            if n == 0 {
                break;
            }
            n = db.nodes[n].parent.index();
        }
    }
}
