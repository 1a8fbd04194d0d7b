//! Changes to a finished database's shape that keep every reference in it consistent: a metric
//! added after the costs were merged ([`Database::add_metric`]), and the nodes left without
//! costs or references dropped ([`Database::prune`]) once costs have moved elsewhere (OpenMP
//! grafting, `crate::prof::openmp`).

use profiler::db::Cost;

use crate::db::database::{Database, MetricDesc};
use crate::db::ids::DbNodeId;

impl Database {
    /// Add metric `desc` after the others, zero everywhere; returns its index. Every node's,
    /// data access's and sampled instruction's costs grow by one, so the file stays consistent.
    pub(crate) fn add_metric(&mut self, desc: MetricDesc) -> usize {
        self.metrics.push(desc);
        let width = self.metrics.len();
        for node in &mut self.nodes {
            node.costs.widen(width);
        }
        for access in &mut self.data.accesses {
            access.costs.resize(width, Cost::default());
        }
        for e in &mut self.instructions.entries {
            e.costs.resize(width, Cost::default());
            e.kernel.resize(width, Cost::default());
        }
        width - 1
    }

    /// Drop the nodes that hold no cost in their subtree and that nothing refers to (a trace
    /// sample, a data access, a heap object's allocation site), renumbering the rest in their
    /// order (parents still before children) and every reference with them.
    pub(crate) fn prune(&mut self) {
        let keep = self.needed_nodes();
        let mut new_id = vec![None; self.nodes.len()];
        let mut next = 0usize;
        for (i, slot) in new_id.iter_mut().enumerate() {
            if keep[i] {
                *slot = Some(DbNodeId::from_index(next));
                next += 1;
            }
        }
        let map = |id: DbNodeId| new_id[id.index()].expect("a kept node's references are kept");
        let old = std::mem::take(&mut self.nodes);
        for (i, mut node) in old.into_iter().enumerate() {
            if !keep[i] {
                continue;
            }
            node.parent = if i == 0 {
                DbNodeId::ROOT
            } else {
                map(node.parent)
            };
            node.children = (node.children.iter())
                .filter(|c| keep[c.index()])
                .map(|&c| map(c))
                .collect();
            self.nodes.push(node);
        }
        self.remap_references(new_id.len(), map);
    }

    /// Move the costs of every node `i` where `to[i]` is another node to that node, with every
    /// reference to it (trace samples, data accesses, allocation sites); `to` has one entry per
    /// node. The emptied nodes are left for [`Database::prune`].
    pub(crate) fn redirect(&mut self, to: &[DbNodeId]) {
        let moved = |id: DbNodeId| to.get(id.index()).copied().unwrap_or(id);
        for (i, &dest) in to.iter().enumerate() {
            if dest.index() != i {
                for (thread, costs) in self.nodes[i].costs.take() {
                    self.add_cost(dest, thread, &costs);
                }
            }
        }
        self.remap_references(self.nodes.len(), moved);
    }

    /// Every reference to a node (trace samples, data accesses, allocation sites) through
    /// `map`; the traces refer to `contexts` nodes.
    fn remap_references(&mut self, contexts: usize, map: impl Fn(DbNodeId) -> DbNodeId) {
        for trace in &mut self.traces.threads {
            let remapped = trace.remap(trace.thread, contexts, |c| {
                map(DbNodeId::from_index(c as usize)).index() as u32
            });
            *trace = remapped.expect("the database's traces decode");
        }
        for access in &mut self.data.accesses {
            access.node = map(access.node);
        }
        for object in &mut self.data.objects {
            object.site = object.site.map(&map);
        }
    }

    /// Per node, whether [`Database::prune`] keeps it: the root, nodes with costs in their
    /// subtree, nodes referred to, and the ancestors of all of these.
    fn needed_nodes(&self) -> Vec<bool> {
        let mut keep: Vec<bool> = (self.nodes.iter())
            .map(|n| {
                n.costs
                    .iter()
                    .any(|(_, mut c)| c.any(|c| c != Cost::default()))
            })
            .collect();
        keep[0] = true;
        let contexts = self.nodes.len();
        for trace in &self.traces.threads {
            for (_, c) in trace.decode(contexts).unwrap_or_default() {
                keep[c as usize] = true;
            }
        }
        for access in &self.data.accesses {
            keep[access.node.index()] = true;
        }
        for site in self.data.objects.iter().filter_map(|o| o.site) {
            keep[site.index()] = true;
        }
        // Children come after their parents: one backward sweep marks every ancestor.
        for i in (1..self.nodes.len()).rev() {
            if keep[i] {
                keep[self.nodes[i].parent.index()] = true;
            }
        }
        keep
    }
}
