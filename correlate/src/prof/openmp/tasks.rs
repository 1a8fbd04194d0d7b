//! Explicit tasks where the program made them: each task's samples, wherever a thread ran it
//! (at a barrier, in a task wait, on another thread), moved under the call that created it, as
//! HPCToolkit places tasks. Runs on the grafted tree, where each region's work is already under
//! its caller.
//!
//! The creation point is read from the tree: a runtime queue that fills makes the creating
//! thread run a task at once, inside its creation call (`... > make_a > GOMP_task > make_a._omp_fn.0`).
//! Each task construct has its own outlined body, so a body seen inside exactly one creation
//! call is moved there from everywhere else. A body seen inside none (its creator never ran one
//! itself) or inside several (a creating function inlined into two places, or tasks that
//! create tasks) stays where it ran, under its region, and is counted in the summary.

use std::collections::BTreeSet;

use crate::db::database::Database;
use crate::db::ids::DbNodeId;
use crate::db::node::{ChildIndex, NodeKind};
use crate::prof::openmp::moving::UNPLACED;
use crate::prof::openmp::runtime;
use crate::prof::openmp::shape::Body;

/// What placing tasks did, in samples of the first metric.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tasks {
    /// Samples in explicit tasks' bodies, wherever they ran.
    pub samples: u64,
    /// Those now under the call that created their task.
    pub at_creation: u64,
}

/// Where the walk over the tree stands at a node.
#[derive(Debug, Clone, Copy)]
struct At {
    /// `None` in the program's code; in the runtime, the program's call into it (`None` inside
    /// it for `<unplaced parallel work>`, whose bodies were entered from no known call).
    runtime: Option<Option<DbNodeId>>,
    /// The innermost body occurrence the node is in.
    body: Option<usize>,
    /// Whether the node is under `<unplaced parallel work>`.
    unplaced: bool,
    /// Whether the node is under `<partial call paths>`: left alone.
    partial: bool,
}

/// A body of the program's code entered from the runtime: a region's or a task's.
struct Occurrence {
    node: DbNodeId,
    /// The program's call into the runtime that ran it (`None`: unplaced).
    entry: Option<DbNodeId>,
    /// The occurrence it is nested in.
    outer: Option<usize>,
    unplaced: bool,
    /// Samples of the first metric in its subtree.
    samples: u64,
}

impl Occurrence {
    /// Whether the runtime ran it inside the call that created it as a task.
    fn at_creation(&self, db: &Database) -> bool {
        let entry = self.entry.filter(|_| !self.unplaced);
        entry.is_some_and(|e| runtime::creates_tasks(&db.nodes[e.index()].name))
    }
}

/// Move every explicit task's samples of `db` under the call that created it, where the tree
/// shows one creation call for its body; `runtime_module[m]` says whether module `m` is an
/// OpenMP runtime. Leaves emptied nodes for [`Database::prune`].
pub(crate) fn place(db: &mut Database, runtime_module: &[bool]) -> Tasks {
    let occurrences = occurrences(db, runtime_module);
    let bodies: Vec<Body> = occurrences.iter().map(|o| Body::of(db, o.node)).collect();
    let task_bodies: BTreeSet<Body> = (occurrences.iter().zip(&bodies))
        .filter(|(o, _)| o.at_creation(db))
        .map(|(_, b)| b.clone())
        .collect();
    let mut mover = Mover::new(db);
    for body in &task_bodies {
        let mine: Vec<usize> = (0..occurrences.len())
            .filter(|&i| &bodies[i] == body)
            .collect();
        let created: Vec<&Occurrence> = (mine.iter().map(|&i| &occurrences[i]))
            .filter(|o| o.at_creation(mover.db))
            .collect();
        let mut entries: Vec<DbNodeId> = created.iter().filter_map(|o| o.entry).collect();
        entries.sort_unstable();
        entries.dedup();
        if entries.len() != 1 {
            continue;
        }
        // Each outermost run of the body (a task's runs inside its own run move with it).
        for &i in &mine {
            let mut outer = occurrences[i].outer;
            while let Some(o) = outer.filter(|&o| &bodies[o] != body) {
                outer = occurrences[o].outer;
            }
            if outer.is_none() {
                mover.move_to(occurrences[i].node, created[0].node);
            }
        }
    }
    let to = mover.destinations();
    db.redirect(&to);
    count(db, runtime_module, &task_bodies)
}

/// The samples of `db`'s tasks (runs of `task_bodies` outside any other task), and those under
/// the call that created them.
fn count(db: &Database, runtime_module: &[bool], task_bodies: &BTreeSet<Body>) -> Tasks {
    let occurrences = occurrences(db, runtime_module);
    let is_task: Vec<bool> = (occurrences.iter())
        .map(|o| task_bodies.contains(&Body::of(db, o.node)))
        .collect();
    let mut tasks = Tasks::default();
    for (o, _) in occurrences.iter().zip(&is_task).filter(|(_, &task)| task) {
        let mut outer = o.outer;
        while let Some(up) = outer.filter(|&up| !is_task[up]) {
            outer = occurrences[up].outer;
        }
        if outer.is_none() {
            tasks.samples += o.samples;
            if o.at_creation(db) {
                tasks.at_creation += o.samples;
            }
        }
    }
    tasks
}

/// The bodies of the program's code that the runtime entered, in node order, each with its
/// subtree's samples.
fn occurrences(db: &Database, runtime_module: &[bool]) -> Vec<Occurrence> {
    let mut found: Vec<Occurrence> = Vec::new();
    let mut at: Vec<At> = Vec::with_capacity(db.nodes.len());
    for (i, node) in db.nodes.iter().enumerate() {
        let id = DbNodeId::from_index(i);
        let above = match i {
            0 => At {
                runtime: None,
                body: None,
                unplaced: false,
                partial: false,
            },
            _ => at[node.parent.index()],
        };
        let mut here = above;
        let module = node.module.map(|m| m.index());
        let in_runtime = module.is_some_and(|m| runtime_module[m]);
        let system = module.is_some_and(|m| runtime::is_system(&db.modules[m].path));
        match node.kind {
            NodeKind::Partial if node.name == UNPLACED => {
                here.runtime = Some(None);
                here.unplaced = true;
            }
            NodeKind::Partial => here.partial = true,
            _ if here.partial || !node.kind.is_frame() || node.kind == NodeKind::Kernel => {}
            _ if in_runtime || (system && above.runtime.is_some()) => {
                here.runtime = Some(above.runtime.unwrap_or(Some(id)));
            }
            _ => {
                here.runtime = None;
                if let Some(entry) = above.runtime {
                    here.body = Some(found.len());
                    found.push(Occurrence {
                        node: id,
                        entry,
                        outer: above.body,
                        unplaced: above.unplaced,
                        samples: 0,
                    });
                }
            }
        }
        if let Some(b) = here.body {
            found[b].samples += node
                .costs
                .iter()
                .map(|(_, mut c)| c.next().map_or(0, |c| c.samples))
                .sum::<u64>();
        }
        at.push(here);
    }
    // Occurrences come after the ones they are nested in: one backward sweep sums subtrees.
    for i in (0..found.len()).rev() {
        if let Some(o) = found[i].outer {
            found[o].samples += found[i].samples;
        }
    }
    found
}

/// The tree being changed: subtrees moved, each node's copy recorded for
/// [`Database::redirect`].
struct Mover<'a> {
    db: &'a mut Database,
    index: ChildIndex,
    /// Per node, where its costs and references go (itself where they stay).
    to: Vec<DbNodeId>,
}

impl<'a> Mover<'a> {
    fn new(db: &'a mut Database) -> Mover<'a> {
        let index = ChildIndex::of(&db.nodes);
        let to = (0..db.nodes.len()).map(DbNodeId::from_index).collect();
        Mover { db, index, to }
    }

    /// Where `node`'s costs go now: itself, or the copy it moved to (and on, where that moved).
    fn resolve(&self, mut node: DbNodeId) -> DbNodeId {
        while self.to[node.index()] != node {
            node = self.to[node.index()];
        }
        node
    }

    /// Move the subtree at `node` (or where it moved) into `into` (or where that moved), a node
    /// of the same procedure called from elsewhere, merging with what is there. Nothing moves
    /// into its own subtree.
    fn move_to(&mut self, node: DbNodeId, into: DbNodeId) {
        let (node, into) = (self.resolve(node), self.resolve(into));
        let mut up = into;
        while up != DbNodeId::ROOT {
            if up == node {
                return;
            }
            up = self.db.nodes[up.index()].parent;
        }
        self.to[node.index()] = into;
        let mut stack = vec![(node, into)];
        while let Some((old, copy)) = stack.pop() {
            // A child that moved elsewhere before stays where it went.
            let children: Vec<DbNodeId> = (self.db.nodes[old.index()].children.iter())
                .copied()
                .filter(|&c| self.to[c.index()] == c)
                .collect();
            for child in children {
                let key = self.db.nodes[child.index()].key();
                let into = self.db.child(&mut self.index, copy, key);
                while self.to.len() < self.db.nodes.len() {
                    self.to.push(DbNodeId::from_index(self.to.len()));
                }
                if into != child {
                    self.to[child.index()] = into;
                }
                stack.push((child, into));
            }
        }
    }

    /// Per node, where its costs and references go in the end.
    fn destinations(&self) -> Vec<DbNodeId> {
        (0..self.to.len())
            .map(|i| self.resolve(DbNodeId::from_index(i)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use profiler::db::{Cost, Sampling};

    use super::*;
    use crate::db::database::{MetricDesc, ModuleDesc, StructureSource, ThreadDesc};
    use crate::db::ids::{DbModuleId, ThreadIdx};
    use crate::db::node::NodeKey;

    /// A tree builder: module 0 is the program, module 1 the runtime.
    struct Tree {
        db: Database,
        index: ChildIndex,
    }

    impl Tree {
        fn new() -> Tree {
            let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000));
            let mut db = Database::new(vec![metric]);
            for path in ["/bin/app", "/usr/lib/libgomp.so.1"] {
                db.modules.push(ModuleDesc {
                    path: path.into(),
                    build_id: None,
                    structure: StructureSource::OnTheFly,
                });
            }
            db.threads.push(ThreadDesc {
                profile: 0,
                pid: 1,
                tid: 1,
                comm: "app".into(),
            });
            Tree {
                db,
                index: ChildIndex::default(),
            }
        }

        /// A frame of `name` in module `module` under `parent`, with `samples` of its own.
        fn frame(&mut self, parent: DbNodeId, name: &str, module: usize, samples: u64) -> DbNodeId {
            let key = NodeKey {
                module: Some(DbModuleId::from_index(module)),
                ..NodeKey::pseudo(NodeKind::Procedure, name)
            };
            let id = self.db.child(&mut self.index, parent, key);
            let cost = Cost {
                samples,
                value: samples,
            };
            if samples > 0 {
                self.db.add_cost(id, ThreadIdx::from_index(0), &[cost]);
            }
            id
        }

        /// Place the tasks (module 1 the runtime) and prune: (task samples, those at their
        /// creation).
        fn place(&mut self) -> (u64, u64) {
            let tasks = place(&mut self.db, &[false, true]);
            self.db.prune();
            (tasks.samples, tasks.at_creation)
        }

        /// The samples of every node named `name`, with its ancestors' names.
        fn at(&self, name: &str) -> Vec<(Vec<&str>, u64)> {
            let mut out = Vec::new();
            for (i, n) in self
                .db
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.name == name)
            {
                let mut path = Vec::new();
                let mut at = DbNodeId::from_index(i);
                while at != DbNodeId::ROOT {
                    at = self.db.nodes[at.index()].parent;
                    path.insert(0, self.db.nodes[at.index()].name.as_str());
                }
                let samples = n.costs.iter().map(|(_, mut c)| c.next().unwrap().samples);
                out.push((path, samples.sum()));
            }
            out
        }
    }

    /// `main > GOMP_parallel > body > make > GOMP_task > task` (1 sample: run at once), the
    /// same task run at the region's barrier (3, one in a function it calls), and 2 unplaced.
    fn region_with_tasks(second_maker: bool) -> (Tree, u64) {
        let mut t = Tree::new();
        let main = t.frame(DbNodeId::ROOT, "main", 0, 0);
        let fork = t.frame(main, "GOMP_parallel", 1, 0);
        let body = t.frame(fork, "f._omp_fn.0", 0, 1);
        let make = t.frame(body, "make", 0, 0);
        let create = t.frame(make, "GOMP_task", 1, 0);
        t.frame(create, "make._omp_fn.1", 0, 1);
        let barrier = t.frame(body, "GOMP_barrier", 1, 0);
        let task = t.frame(barrier, "make._omp_fn.1", 0, 1);
        t.frame(task, "work", 0, 2);
        let unplaced = t.db.child(
            &mut t.index,
            DbNodeId::ROOT,
            NodeKey::pseudo(NodeKind::Partial, UNPLACED),
        );
        t.frame(unplaced, "make._omp_fn.1", 0, 2);
        if second_maker {
            let other = t.frame(main, "other", 0, 0);
            let create = t.frame(other, "GOMP_task", 1, 0);
            t.frame(create, "make._omp_fn.1", 0, 1);
        }
        (t, if second_maker { 7 } else { 6 })
    }

    #[test]
    fn a_tasks_samples_go_under_its_one_creation_call_from_wherever_it_ran() {
        let (mut t, samples) = region_with_tasks(false);
        assert_eq!(t.place(), (samples, samples));
        let path = vec![
            "<program root>",
            "main",
            "GOMP_parallel",
            "f._omp_fn.0",
            "make",
            "GOMP_task",
        ];
        assert_eq!(t.at("make._omp_fn.1"), vec![(path.clone(), 4)]);
        let mut under = path;
        under.push("make._omp_fn.1");
        assert_eq!(t.at("work"), vec![(under, 2)]);
        assert!(t.at(UNPLACED).is_empty() && t.at("GOMP_barrier").is_empty());
        assert_eq!(t.at("f._omp_fn.0")[0].1, 1, "the region's own samples stay");
    }

    #[test]
    fn tasks_made_by_a_task_go_where_it_made_them_whichever_moves_first() {
        // Bodies are handled in name order: the outer task first, then last.
        for (outer, inner) in [("a_outer", "b_inner"), ("z_outer", "b_inner")] {
            let mut t = Tree::new();
            let main = t.frame(DbNodeId::ROOT, "main", 0, 0);
            let fork = t.frame(main, "GOMP_parallel", 1, 0);
            let body = t.frame(fork, "f._omp_fn.0", 0, 0);
            let create = t.frame(body, "GOMP_task", 1, 0);
            t.frame(create, outer, 0, 1);
            let barrier = t.frame(body, "GOMP_barrier", 1, 0);
            let run = t.frame(barrier, outer, 0, 2);
            let create_inner = t.frame(run, "GOMP_task", 1, 0);
            t.frame(create_inner, inner, 0, 1);
            t.frame(barrier, inner, 0, 3);
            assert_eq!(t.place(), (7, 7), "{outer}");
            let path = vec![
                "<program root>",
                "main",
                "GOMP_parallel",
                "f._omp_fn.0",
                "GOMP_task",
            ];
            assert_eq!(t.at(outer), vec![(path.clone(), 3)], "{outer}");
            let mut under = path;
            under.extend([outer, "GOMP_task"]);
            assert_eq!(t.at(inner), vec![(under, 4)], "{outer}");
        }
    }

    #[test]
    fn a_task_made_in_two_places_stays_where_it_ran() {
        let (mut t, samples) = region_with_tasks(true);
        assert_eq!(t.place(), (samples, 2));
        assert_eq!(t.at("make._omp_fn.1").len(), 4);
        assert_eq!(t.at("work")[0].0.last(), Some(&"make._omp_fn.1"));
    }
}
