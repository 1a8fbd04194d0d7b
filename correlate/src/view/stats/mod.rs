//! Statistics across ranks (profiles) or threads for every scope of a view: where the work is
//! unevenly spread, the first thing a parallel program's user looks for.
//!
//! For each scope of a view (top-down, callers or flat; statements are left out, their loop or
//! procedure already shows them) and one metric, the inclusive cost in each group (a profile
//! with all its threads, or one thread) gives: sum, mean, minimum and maximum with the group
//! that holds them, standard deviation, coefficient of variation (stddev / mean), and the
//! imbalance, `max - mean`: what the slowest group spends beyond the average, the time the
//! others would wait for it at the next synchronisation. A group that never reached a scope
//! counts as 0.
//!
//! The scopes are those of the view of all threads, known by their path from the root, so the
//! statistics are of exactly the scopes the view shows: in the flat view a procedure that two
//! threads reach through different calling contexts (an OpenMP worker and the master) is one
//! scope. The view is projected once, with its sources (which database nodes' inclusive costs
//! each view node adds up: every view's inclusive costs are such sums); a group's value in each
//! scope is then the sum of its inclusive costs at those database nodes, computed over the part
//! of the tree the group reached (`costing.rs`), not by projecting the view again for it.
//! Values are folded into running statistics group by group, zeros for the groups a scope
//! misses added in one step, so memory is one entry per scope, whatever the number of groups.

mod costing;

use fxhash::FxHashMap;
use serde::Serialize;

use crate::db::database::{Database, Selection};
use crate::db::ids::ThreadIdx;
use crate::db::node::NodeKind;
use crate::view::projection;
use crate::view::tree::{ViewKind, ViewNode, ViewTree};
use costing::{Costing, GroupCosts, Targets};

/// What the statistics are taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    /// Each profile (an MPI rank, or one process run) with all its threads.
    Ranks,
    /// Each measured thread.
    Threads,
}

/// One group statistics are taken over: a profile or a thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// How to call it: `rank 3`, `profile 2`, `thread 4711`, `thread 4711 (rank 3)`.
    pub name: String,
    /// Its profile's rank, when the run was under a launcher.
    pub rank: Option<u32>,
    /// Index of its profile in [`Database::profiles`].
    pub profile: u32,
    /// Its process id and OS thread id (statistics over threads only; the process's first
    /// thread has `tid == pid`).
    pub pid: Option<u32>,
    /// See [`Group::pid`].
    pub tid: Option<u32>,
}

/// The statistics of one scope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeStats {
    /// The scope's label (hpcviewer's naming).
    pub scope: String,
    /// The frames and loops above it, outermost first, joined by ` > `.
    pub context: String,
    /// Sum over the groups, in the metric's unit.
    pub sum: u64,
    /// Mean over the groups.
    pub mean: f64,
    /// Smallest value.
    pub min: u64,
    /// Index (in [`StatsTable::groups`]) of the first group holding `min`.
    pub min_at: usize,
    /// Largest value.
    pub max: u64,
    /// Index of the first group holding `max`.
    pub max_at: usize,
    /// Population standard deviation.
    pub stddev: f64,
    /// Coefficient of variation, `stddev / mean` (0 when the mean is 0).
    pub cv: f64,
    /// `max - mean`, in the metric's unit: what the slowest group spends beyond the average.
    pub imbalance: f64,
}

/// Statistics of every scope with a cost, most imbalanced first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsTable {
    /// The view whose scopes they are.
    pub view: ViewKind,
    /// What they are taken over.
    pub over: Over,
    /// The metric's name.
    pub metric: String,
    /// The metric's unit.
    pub unit: String,
    /// The groups.
    pub groups: Vec<Group>,
    /// One row per scope with a non-zero sum, by imbalance (then sum) descending, then in the
    /// view's order (depth-first, display order).
    pub rows: Vec<ScopeStats>,
}

/// Running statistics of one scope over the groups folded in so far.
#[derive(Debug, Clone, Copy, Default)]
struct Running {
    /// Groups folded in (those without the scope as zeros).
    n: u64,
    sum: u64,
    mean: f64,
    /// Sum of squared differences from the mean (Welford's method).
    m2: f64,
    min: (u64, usize),
    max: (u64, usize),
}

impl Running {
    /// Fold in groups `self.n .. group` as zeros (they did not reach the scope), then
    /// `value` for `group` (a zero as if the group had not reached it, so that the result
    /// does not depend on which zeros are given).
    fn add(&mut self, value: u64, group: usize) {
        if value == 0 {
            return self.zeros_until(group + 1);
        }
        self.zeros_until(group);
        if self.n == 0 || value < self.min.0 {
            self.min = (value, group);
        }
        if self.n == 0 || value > self.max.0 {
            self.max = (value, group);
        }
        self.n += 1;
        self.sum = self.sum.saturating_add(value);
        let delta = value as f64 - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (value as f64 - self.mean);
    }

    /// Fold in zeros for groups `self.n .. end` at once (Chan et al.'s pairwise update).
    fn zeros_until(&mut self, end: usize) {
        let k = end as u64 - self.n;
        if k == 0 {
            return;
        }
        let first = self.n as usize;
        if self.n == 0 || self.min.0 > 0 {
            self.min = (0, first);
        }
        if self.n == 0 {
            self.max = (0, first);
        }
        let n = self.n + k;
        let delta = -self.mean;
        self.m2 += delta * delta * (self.n as f64) * (k as f64) / n as f64;
        self.mean += delta * k as f64 / n as f64;
        self.n = n;
    }
}

/// One scope met in some group's view.
struct Scope {
    label: String,
    /// The labels of the rows above it, outermost first, joined by ` > `.
    context: String,
    /// What its children's context is: its own with its label appended if it is a row.
    below: String,
    /// Whether it gets a row (statements only name a path: a call site above a callee).
    row: bool,
    running: Running,
}

/// The scopes met so far, each known by its parent scope and its key among the siblings.
#[derive(Default)]
struct Scopes {
    index: FxHashMap<(usize, String), usize>,
    list: Vec<Scope>,
}

impl Scopes {
    /// The scopes of `view`, in its order (depth-first, display order), and each of its
    /// nodes' scope.
    fn of(view: &ViewTree) -> (Scopes, Vec<usize>) {
        let mut scopes = Scopes::default();
        let mut scope_of = vec![0; view.nodes.len()];
        let mut stack = vec![(0usize, usize::MAX)];
        while let Some((id, parent)) = stack.pop() {
            let at = scopes.get(parent, &view.nodes[id]);
            scope_of[id] = at;
            stack.extend(view.nodes[id].children.iter().rev().map(|&c| (c, at)));
        }
        (scopes, scope_of)
    }

    /// The scope of view node `node` below scope `parent` (`usize::MAX` for the root).
    fn get(&mut self, parent: usize, node: &ViewNode) -> usize {
        let list = &mut self.list;
        *self.index.entry((parent, key(node))).or_insert_with(|| {
            let context = list.get(parent).map_or(String::new(), |p| p.below.clone());
            let row = has_row(node.kind);
            let below = match (parent == usize::MAX, row, context.is_empty()) {
                (true, _, _) | (_, false, _) => context.clone(),
                (_, true, true) => node.label(),
                (_, true, false) => format!("{context} > {}", node.label()),
            };
            list.push(Scope {
                label: node.label(),
                context,
                below,
                row,
                running: Running::default(),
            });
            list.len() - 1
        })
    }
}

/// The statistics of metric `metric` of `db`, per scope of view `kind`, over `over`.
pub fn scope_stats(db: &Database, kind: ViewKind, metric: usize, over: Over) -> StatsTable {
    let (groups, members) = groups(db, over);
    let view = projection::sourced(db, kind, &Selection::All);
    let (mut scopes, scope_of) = Scopes::of(&view.tree);
    let targets = Targets::new(db.nodes.len(), &view.sources, &scope_of);
    drop(view);
    let costs = GroupCosts::new(db, &members, metric);
    let mut costing = Costing::new(db, scopes.list.len());
    for g in 0..groups.len() {
        costing.group(db, &targets, &costs, g, |s, value| {
            scopes.list[s].running.add(value, g);
        });
    }
    for s in &mut scopes.list {
        s.running.zeros_until(groups.len());
    }
    let desc = &db.metrics[metric];
    StatsTable {
        view: kind,
        over,
        metric: desc.name.clone(),
        unit: desc.unit.clone(),
        groups,
        rows: rows(scopes.list),
    }
}

/// What tells a scope from its siblings: kind, label, where it is and its call site.
fn key(node: &ViewNode) -> String {
    format!(
        "{:?}|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
        node.kind,
        node.label(),
        node.module,
        node.file,
        node.line,
        node.call_file,
        node.call_line
    )
}

/// The groups of `over`, and the database threads of each.
fn groups(db: &Database, over: Over) -> (Vec<Group>, Vec<Vec<ThreadIdx>>) {
    let rank = |profile: u32| db.jobs.get(profile as usize).and_then(|j| j.rank);
    let threads = (0..db.threads.len()).map(ThreadIdx::from_index);
    match over {
        Over::Ranks => {
            let groups = (0..db.profiles.len() as u32)
                .map(|p| Group {
                    name: rank(p).map_or(format!("profile {p}"), |r| format!("rank {r}")),
                    rank: rank(p),
                    profile: p,
                    pid: None,
                    tid: None,
                })
                .collect();
            let mut members = vec![Vec::new(); db.profiles.len()];
            for t in threads {
                members[db.threads[t.index()].profile as usize].push(t);
            }
            (groups, members)
        }
        Over::Threads => {
            let groups = db
                .threads
                .iter()
                .map(|t| Group {
                    name: match rank(t.profile) {
                        Some(r) => format!("thread {} (rank {r})", t.tid),
                        None => format!("thread {}", t.tid),
                    },
                    rank: rank(t.profile),
                    profile: t.profile,
                    pid: Some(t.pid),
                    tid: Some(t.tid),
                })
                .collect();
            (groups, threads.map(|t| vec![t]).collect())
        }
    }
}

/// Whether a node of this kind gets a row.
fn has_row(kind: NodeKind) -> bool {
    !matches!(kind, NodeKind::Statement | NodeKind::DataObject)
}

/// The rows of the scopes with a cost, by imbalance, then sum, descending.
fn rows(scopes: Vec<Scope>) -> Vec<ScopeStats> {
    let mut rows: Vec<ScopeStats> = scopes
        .into_iter()
        .filter(|s| s.row && s.running.sum > 0)
        .map(|s| {
            let r = s.running;
            let stddev = (r.m2 / r.n as f64).max(0.0).sqrt();
            ScopeStats {
                scope: s.label,
                context: s.context,
                sum: r.sum,
                mean: r.mean,
                min: r.min.0,
                min_at: r.min.1,
                max: r.max.0,
                max_at: r.max.1,
                stddev,
                cv: if r.mean > 0.0 { stddev / r.mean } else { 0.0 },
                imbalance: r.max.0 as f64 - r.mean,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.imbalance.total_cmp(&a.imbalance).then(b.sum.cmp(&a.sum)));
    rows
}

#[cfg(test)]
mod tests;
