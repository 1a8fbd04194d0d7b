//! Moving the costs of worker threads' samples where [`crate::prof::openmp::placing`] placed
//! them: a body's subtree copied under its region (merging with the master's body there),
//! waiting collapsed into an `<omp idle>` node under the context blamed, and what could not be
//! placed under `<unplaced parallel work>`. Each (node, thread)'s costs are split in proportion
//! to its traced samples' targets; what its trace does not cover is unplaced, except in a body
//! that only one region runs, which needs no time.

use std::collections::BTreeMap;

use fxhash::FxHashMap;
use profiler::db::Cost;

use crate::db::database::Database;
use crate::db::ids::{DbModuleId, DbNodeId};
use crate::db::node::{ChildIndex, NodeKey, NodeKind};
use crate::prof::openmp::placing::{Placements, Target};
use crate::prof::openmp::shape::{Body, Runtime, Shape};

/// The name of the node that holds a worker's waiting.
pub(crate) const IDLE: &str = "<omp idle>";
/// The name of the node that holds what could not be placed.
pub(crate) const UNPLACED: &str = "<unplaced parallel work>";

/// What moving did, in samples of the first metric.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    /// Worker samples in bodies, and those placed under their region.
    pub body_samples: u64,
    /// See [`Moved::body_samples`].
    pub placed_samples: u64,
    /// Worker samples waiting outside a body, and those blamed on a master's context.
    pub waiting_samples: u64,
    /// See [`Moved::waiting_samples`].
    pub blamed_samples: u64,
}

/// The tree being changed, with what finds and makes nodes in it.
pub(crate) struct Mover<'a> {
    db: &'a mut Database,
    shape: &'a Shape,
    index: ChildIndex,
    /// (node, new parent of its body) -> its copy there.
    copies: FxHashMap<(DbNodeId, DbNodeId), DbNodeId>,
    unplaced: Option<DbNodeId>,
    idle_module: Option<DbModuleId>,
    /// The `omp-idle` metric's index (`omp-overhead` follows it).
    idle_metric: usize,
    /// The `off-cpu` metric's index, where it was measured in the first metric's unit: time
    /// the runtime waited asleep is idle time too.
    off_cpu: Option<usize>,
}

impl<'a> Mover<'a> {
    /// A mover for `db` read as `shape`, whose `omp-idle` metric is `idle_metric` (and
    /// `omp-overhead` the next), and whose `<omp idle>` nodes belong to `idle_module` (the
    /// runtime).
    pub(crate) fn new(
        db: &'a mut Database,
        shape: &'a Shape,
        idle_metric: usize,
        idle_module: Option<DbModuleId>,
    ) -> Mover<'a> {
        let unit = &db.metrics[0].unit;
        let off_cpu = (db.metrics.iter().enumerate().skip(1))
            .find(|(_, m)| m.name == profiler::db::OFF_CPU_EVENT && &m.unit == unit)
            .map(|(i, _)| i);
        let index = ChildIndex::of(&db.nodes);
        Mover {
            db,
            shape,
            index,
            copies: FxHashMap::default(),
            unplaced: None,
            idle_module,
            idle_metric,
            off_cpu,
        }
    }

    /// `costs` with the runtime's time at a node counted in its metric `k` too (the first
    /// metric's), and the time it spent off the CPU, where that was measured, as waiting: the
    /// runtime leaves the CPU only to wait (a futex under a barrier, a lock, a task wait).
    fn count_runtime(&self, costs: &mut [Cost], k: usize) {
        costs[k] = costs[0];
        if let Some(off) = self.off_cpu {
            let idle = self.idle_metric;
            let asleep = costs[off];
            costs[idle] += asleep;
        }
    }

    /// Move every worker-side cost of the first `nodes` nodes as `placements` say, mark the
    /// runtime's idle and overhead costs, and rewrite the traces to match.
    pub(crate) fn move_all(&mut self, nodes: usize, placements: &Placements) -> Moved {
        let mut moved = Moved::default();
        for i in 0..nodes {
            let node = DbNodeId::from_index(i);
            let runtime = self.shape.runtime_time(self.db, node);
            let k = runtime.map(|r| self.idle_metric + usize::from(r == Runtime::Overhead));
            match self.shape.is_worker_side(node) {
                true => self.move_node(node, k, placements, &mut moved),
                false => self.mark_runtime_time(node, k),
            }
        }
        self.rewrite_traces(placements);
        moved
    }

    /// Count the first metric's costs at `node` as runtime metric `k` too, where it has one.
    fn mark_runtime_time(&mut self, node: DbNodeId, k: Option<usize>) {
        let Some(k) = k else { return };
        for (thread, mut costs) in self.db.nodes[node.index()].costs.take() {
            self.count_runtime(&mut costs, k);
            self.db.add_cost(node, thread, &costs);
        }
    }

    /// Move worker-side `node`'s costs, per thread, to where its samples were placed (counting
    /// the first metric as runtime metric `k` too, where it has one), and count them in `moved`.
    fn move_node(
        &mut self,
        node: DbNodeId,
        k: Option<usize>,
        placements: &Placements,
        moved: &mut Moved,
    ) {
        let in_body = self.shape.places[node.index()].worker_body.is_some();
        for (thread, mut costs) in self.db.nodes[node.index()].costs.take() {
            if let Some(k) = k {
                self.count_runtime(&mut costs, k);
            }
            let shares = self.shares(node, &costs, placements.counts.get(&(node, thread)));
            let placed: u64 = (shares.iter())
                .filter(|(t, _)| *t != Target::Unplaced)
                .map(|(_, c)| c[0].samples)
                .sum();
            let (all, done) = match in_body {
                true => (&mut moved.body_samples, &mut moved.placed_samples),
                false => (&mut moved.waiting_samples, &mut moved.blamed_samples),
            };
            *all += costs[0].samples;
            *done += placed;
            for (target, part) in shares {
                let dest = self.destination(node, target);
                self.db.add_cost(dest, thread, &part);
            }
        }
    }

    /// `costs` split over the targets of its traced samples (`counts`), in proportion; the
    /// samples no trace covers go to [`Target::Unplaced`], except in a body that only one
    /// region runs.
    fn shares(
        &self,
        node: DbNodeId,
        costs: &[Cost],
        counts: Option<&BTreeMap<Target, u64>>,
    ) -> Vec<(Target, Vec<Cost>)> {
        if let Some(only) = self.only_region(node) {
            return vec![(Target::Region(only), costs.to_vec())];
        }
        let total = costs[0].samples;
        let mut shares: Vec<(Target, u64)> = counts
            .map(|c| c.iter().map(|(&t, &n)| (t, n)).collect())
            .unwrap_or_default();
        let traced: u64 = shares.iter().map(|(_, n)| n).sum();
        if traced < total || total == 0 {
            shares.push((Target::Unplaced, total.saturating_sub(traced)));
        }
        // A damaged trace may claim more samples than the node has: shares of the larger.
        split(costs, &shares, total.max(traced))
    }

    /// The graft point of the one region that runs `node`'s body, if exactly one does.
    fn only_region(&self, node: DbNodeId) -> Option<DbNodeId> {
        let body = self.shape.places[node.index()].worker_body?;
        match self.shape.entries_of.get(&Body::of(self.db, body))?[..] {
            [(_, at)] => Some(at),
            _ => None,
        }
    }

    /// Where the costs of worker-side `node` go for `target`.
    fn destination(&mut self, node: DbNodeId, target: Target) -> DbNodeId {
        let body = self.shape.places[node.index()].worker_body;
        match (target, body) {
            (Target::Region(at), Some(body)) => self.copy(node, body, at),
            (Target::Blame(at), _) => self.idle_under(at),
            (Target::Entry(entry), Some(body)) => {
                let key = self.db.nodes[body.index()].key();
                let at = self.db.child(&mut self.index, entry, key);
                self.copy(node, body, at)
            }
            (_, Some(body)) => {
                let under = self.unplaced();
                let key = self.db.nodes[body.index()].key();
                let at = self.db.child(&mut self.index, under, key);
                self.copy(node, body, at)
            }
            (_, None) => {
                let at = self.unplaced();
                self.idle_under(at)
            }
        }
    }

    /// The copy of `node` (in the body starting at `body`) when the body merges into `at`
    /// (the master's body node of a region, or the unplaced node's copy of the body).
    fn copy(&mut self, node: DbNodeId, body: DbNodeId, at: DbNodeId) -> DbNodeId {
        if node == body {
            return at;
        }
        if let Some(&id) = self.copies.get(&(node, at)) {
            return id;
        }
        let parent = self.copy(self.db.nodes[node.index()].parent, body, at);
        let key = self.db.nodes[node.index()].key();
        let id = self.db.child(&mut self.index, parent, key);
        self.copies.insert((node, at), id);
        id
    }

    /// The `<omp idle>` child of `at`.
    fn idle_under(&mut self, at: DbNodeId) -> DbNodeId {
        let key = NodeKey {
            module: self.idle_module,
            ..NodeKey::pseudo(NodeKind::Procedure, IDLE)
        };
        self.db.child(&mut self.index, at, key)
    }

    /// The `<unplaced parallel work>` child of the root.
    fn unplaced(&mut self) -> DbNodeId {
        if let Some(id) = self.unplaced {
            return id;
        }
        let key = NodeKey::pseudo(NodeKind::Partial, UNPLACED);
        let id = self.db.child(&mut self.index, DbNodeId::ROOT, key);
        self.unplaced = Some(id);
        id
    }

    /// Every trace sample of a worker thread moved to its target's node.
    fn rewrite_traces(&mut self, placements: &Placements) {
        let mut traces = std::mem::take(&mut self.db.traces.threads);
        for (trace, samples) in traces.iter_mut().zip(&placements.per_sample) {
            let mut out = profiler::trace::ThreadTrace::new(trace.thread);
            for &(time, node, ref target) in samples {
                let node = match (target, self.only_region(node)) {
                    (None, _) => node,
                    (Some(_), Some(at)) => self.destination(node, Target::Region(at)),
                    (Some(t), None) => self.destination(node, *t),
                };
                out.push(time, node.index() as u32);
            }
            *trace = out;
        }
        self.db.traces.threads = traces;
    }
}

/// `costs` split by `shares` (target, samples of `total`, which is at least their sum): each
/// metric's samples and value in proportion, the last share taking what rounding left.
fn split(costs: &[Cost], shares: &[(Target, u64)], total: u64) -> Vec<(Target, Vec<Cost>)> {
    let mut left = costs.to_vec();
    let mut out = Vec::with_capacity(shares.len());
    for (i, &(target, n)) in shares.iter().enumerate() {
        let part: Vec<Cost> = if i + 1 == shares.len() {
            std::mem::take(&mut left)
        } else {
            let part: Vec<Cost> = (costs.iter())
                .map(|c| Cost {
                    samples: scale(c.samples, n, total),
                    value: scale(c.value, n, total),
                })
                .collect();
            for (l, p) in left.iter_mut().zip(&part) {
                l.samples = l.samples.saturating_sub(p.samples);
                l.value = l.value.saturating_sub(p.value);
            }
            part
        };
        out.push((target, part));
    }
    out.retain(|(_, c)| c.iter().any(|c| *c != Cost::default()));
    out
}

/// `x * n / total` without overflow (0 when `total` is 0).
fn scale(x: u64, n: u64, total: u64) -> u64 {
    match total {
        0 => 0,
        _ => (u128::from(x) * u128::from(n) / u128::from(total)) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_keeps_every_sample_and_value() {
        let costs = [
            Cost {
                samples: 10,
                value: 10_003,
            },
            Cost {
                samples: 3,
                value: 7,
            },
        ];
        let a = Target::Region(DbNodeId::from_index(4));
        let shares = [(a, 7), (Target::Unplaced, 3)];
        let parts = split(&costs, &shares, 10);
        assert_eq!(
            parts[0].1[0],
            Cost {
                samples: 7,
                value: 7002
            }
        );
        assert_eq!(
            parts[1].1[0],
            Cost {
                samples: 3,
                value: 3001
            }
        );
        let sum: u64 = parts.iter().map(|(_, c)| c[1].value).sum();
        assert_eq!(sum, 7);
    }
}
