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
//! The view is projected once per group (its threads as the selection) and its scopes matched
//! across groups by their path from the root, so the statistics are of exactly the scopes the
//! view shows: in the flat view a procedure that two threads reach through different calling
//! contexts (an OpenMP worker and the master) is one scope. Values are folded into running
//! statistics group by group, zeros for the groups a scope misses added in one step, so memory
//! is one entry per scope, whatever the number of groups.

use fxhash::FxHashMap;
use profiler::db::Cost;
use serde::Serialize;

use crate::database::{Database, Selection};
use crate::ids::ThreadIdx;
use crate::node::NodeKind;
use crate::node_costs::NodeCosts;
use crate::view::{ViewKind, ViewNode, ViewTree};

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
    /// One row per scope with a non-zero sum, by imbalance (then sum) descending.
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
    /// `value` for `group`.
    fn add(&mut self, value: u64, group: usize) {
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
    let mut scopes = Scopes::default();
    let mut costs = GroupCosts::new(db, &members);
    // One group's value per scope (two sibling nodes may share a scope's key).
    let mut values: FxHashMap<usize, u64> = FxHashMap::default();
    for g in 0..groups.len() {
        let view = ViewTree::from_database(costs.only(db, g), kind, &Selection::All);
        let mut stack = vec![(0usize, usize::MAX)];
        while let Some((id, parent)) = stack.pop() {
            let node = &view.nodes[id];
            let at = scopes.get(parent, node);
            let value = values.entry(at).or_default();
            *value = value.saturating_add(node.incl.get(metric).map_or(0, |c| c.value));
            stack.extend(view.children(id).map(|(child, _)| (child, at)));
        }
        for (at, value) in values.drain() {
            scopes.list[at].running.add(value, g);
        }
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

/// The database's tree holding one group's costs at a time. Selecting a group's threads in
/// the full database would visit every node's costs of every thread for each group (groups
/// squared); instead each group's costs are listed once and put into a copy of the tree
/// without costs in turn.
struct GroupCosts {
    tree: Database,
    /// Per group, its (node, thread) entries.
    entries: Vec<Vec<(usize, ThreadIdx)>>,
    /// Nodes holding the current group's costs.
    filled: Vec<usize>,
}

impl GroupCosts {
    fn new(db: &Database, members: &[Vec<ThreadIdx>]) -> GroupCosts {
        let mut group_of = vec![0; db.threads.len()];
        for (g, threads) in members.iter().enumerate() {
            for t in threads {
                group_of[t.index()] = g;
            }
        }
        let mut entries = vec![Vec::new(); members.len()];
        for (i, node) in db.nodes.iter().enumerate() {
            for (thread, _) in node.costs.iter() {
                entries[group_of[thread.index()]].push((i, thread));
            }
        }
        let mut tree = Database::new(db.metrics.clone());
        tree.modules = db.modules.clone();
        tree.files = db.files.clone();
        tree.threads = db.threads.clone();
        tree.nodes = db.nodes.clone();
        for node in &mut tree.nodes {
            node.costs = NodeCosts::default();
        }
        GroupCosts {
            tree,
            entries,
            filled: Vec::new(),
        }
    }

    /// The tree with group `g`'s costs of `db` only.
    fn only(&mut self, db: &Database, g: usize) -> &Database {
        for &i in &self.filled {
            self.tree.nodes[i].costs.clear();
        }
        self.filled.clear();
        for &(i, thread) in &self.entries[g] {
            let entry = db.nodes[i].costs.iter().find(|(t, _)| *t == thread);
            let costs: Vec<Cost> = entry.map(|(_, c)| c.collect()).unwrap_or_default();
            self.tree.nodes[i].costs.add(thread, &costs);
            self.filled.push(i);
        }
        &self.tree
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
mod tests {
    use super::*;
    use crate::database::{MetricDesc, ThreadDesc};
    use crate::ids::DbNodeId;
    use crate::node::{ChildIndex, NodeKey};
    use profiler::db::{Cost, Sampling};
    use profiler::job::JobPlace;

    /// main > work, four ranks of one thread each: rank r spends 10 in main itself and
    /// 100 * (r + 1) in work.
    fn four_ranks() -> Database {
        let mut db = Database::new(vec![MetricDesc::new(
            "cpu-clock",
            "ns",
            Sampling::Period(1),
        )]);
        let mut index = ChildIndex::default();
        let main = db.child(
            &mut index,
            DbNodeId::ROOT,
            NodeKey::pseudo(NodeKind::Procedure, "main"),
        );
        let work = db.child(
            &mut index,
            main,
            NodeKey::pseudo(NodeKind::Procedure, "work"),
        );
        for r in 0..4u32 {
            db.profiles.push(format!("app-{r}.db"));
            db.jobs.push(JobPlace {
                rank: Some(3 - r),
                job: None,
            });
            db.threads.push(ThreadDesc {
                profile: r,
                pid: 100 + r,
                tid: 100 + r,
                comm: "app".into(),
            });
            let t = ThreadIdx::from_index(r as usize);
            db.add_cost(
                main,
                t,
                &[Cost {
                    samples: 1,
                    value: 10,
                }],
            );
            let value = 100 * (r as u64 + 1);
            db.add_cost(work, t, &[Cost { samples: 1, value }]);
        }
        db
    }

    #[test]
    fn ranks_give_exact_statistics_and_the_slowest_rank() {
        let table = scope_stats(&four_ranks(), ViewKind::TopDown, 0, Over::Ranks);
        let names: Vec<&str> = table.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["rank 3", "rank 2", "rank 1", "rank 0"]);
        let work = table.rows.iter().find(|r| r.scope == "work").unwrap();
        assert_eq!((work.sum, work.min, work.max), (1000, 100, 400));
        assert_eq!((work.mean, work.min_at, work.max_at), (250.0, 0, 3));
        // Values 100, 200, 300, 400: population variance 12,500.
        assert!((work.stddev - 12_500f64.sqrt()).abs() < 1e-9);
        assert!((work.cv - 12_500f64.sqrt() / 250.0).abs() < 1e-12);
        assert_eq!(work.imbalance, 150.0);
        assert_eq!(work.context, "main");
        assert_eq!(table.groups[work.max_at].rank, Some(0));
        // main holds work: same imbalance, larger sum, so it sorts first; the root is last
        // among equals only by sum (it is larger): root, main, work.
        let order: Vec<&str> = table.rows.iter().map(|r| r.scope.as_str()).collect();
        assert_eq!(order, ["<program root>", "main", "work"]);
    }

    #[test]
    fn zeros_folded_in_at_once_give_the_statistics_of_the_full_list() {
        // Groups 0, 1, 4 and 6 miss the scope: zeros before, between and after the values.
        let values = [0u64, 0, 7, 3, 0, 9, 0];
        let mut r = Running::default();
        for (g, &v) in values.iter().enumerate().filter(|(_, v)| **v > 0) {
            r.add(v, g);
        }
        r.zeros_until(values.len());
        let n = values.len() as f64;
        let mean = values.iter().sum::<u64>() as f64 / n;
        let var = values
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        assert_eq!((r.n, r.sum, r.min, r.max), (7, 19, (0, 0), (9, 5)));
        assert!((r.mean - mean).abs() < 1e-12);
        assert!((r.m2 / n - var).abs() < 1e-12);
    }

    #[test]
    fn a_group_that_never_reached_a_scope_counts_as_zero() {
        let mut db = four_ranks();
        let extra = ThreadIdx::from_index(db.threads.len());
        db.threads.push(ThreadDesc {
            profile: 0,
            pid: 100,
            tid: 999,
            comm: "helper".into(),
        });
        db.add_cost(
            DbNodeId::from_index(1),
            extra,
            &[Cost {
                samples: 1,
                value: 5,
            }],
        );
        let table = scope_stats(&db, ViewKind::TopDown, 0, Over::Threads);
        assert_eq!(table.groups.len(), 5);
        assert_eq!(table.groups[4].name, "thread 999 (rank 3)");
        let work = table.rows.iter().find(|r| r.scope == "work").unwrap();
        assert_eq!((work.min, work.min_at, work.mean), (0, 4, 200.0));
        let by_rank = scope_stats(&db, ViewKind::TopDown, 0, Over::Ranks);
        let main = by_rank.rows.iter().find(|r| r.scope == "main").unwrap();
        assert_eq!((main.min, main.max), (110 + 5, 410));
    }
}
