//! The three views as projections of the one enriched tree, built directly as [`ViewTree`]s
//! with all metrics computed here, so that the renderers only present them.
//!
//! The definitions of the costs and of the three views are in the [crate documentation](crate).
//! [`node_metrics`] computes the costs of every database node and [`top_down`] presents them as
//! they are; the callers and flat views (`callers.rs`, `flat.rs`) merge nodes through a
//! `KeyedTree` (`keyed.rs`).

mod callers;
mod flat;
mod keyed;

use profiler::db::Cost;

use crate::db::database::{Database, Selection};
use crate::db::ids::DbNodeId;
use crate::db::label;
use crate::db::node::NodeKind;
use crate::view::tree::{MetricInfo, ViewKind, ViewNode, ViewTree};

pub use callers::callers;
pub use flat::flat;

/// A view with its sources: every (view node, database node) whose inclusive cost went into
/// the view node's, which is their sum. Inclusive costs are sums of the database nodes' (in
/// every view), so a view's scopes can be costed for any selection from its sources.
pub(crate) struct Sourced {
    /// The view.
    pub(crate) tree: ViewTree,
    /// The sources.
    pub(crate) sources: Vec<(usize, DbNodeId)>,
}

// The projections make the view model; the model does not know them (no import back).
impl ViewTree {
    /// Present one of the database's views: `view` as computed by [`crate::top_down`],
    /// [`crate::callers`] or [`crate::flat`] for the threads in `selection`. Metric totals are
    /// those of the selection.
    pub fn from_database(db: &Database, view: ViewKind, selection: &Selection) -> ViewTree {
        sourced(db, view, selection).tree
    }
}

/// View `kind` of `db` for the threads in `selection`, with its sources.
pub(crate) fn sourced(db: &Database, kind: ViewKind, selection: &Selection) -> Sourced {
    match kind {
        ViewKind::TopDown => top_down_sourced(db, selection),
        ViewKind::Callers => callers::callers_sourced(db, selection),
        ViewKind::Flat => flat::flat_sourced(db, selection),
    }
}

/// Self, inclusive and exclusive cost of every database node, for the selected threads.
#[derive(Debug, Clone)]
pub(crate) struct NodeMetrics {
    /// Self cost (sampled exactly at the node) per node, per metric.
    pub(crate) own: Vec<Vec<Cost>>,
    /// Inclusive per node, per metric.
    pub(crate) incl: Vec<Vec<Cost>>,
    /// Exclusive per node, per metric.
    pub(crate) excl: Vec<Vec<Cost>>,
}

/// Compute self, inclusive and exclusive costs of every node (definitions in the crate docs).
pub(crate) fn node_metrics(db: &Database, selection: &Selection) -> NodeMetrics {
    let own = db.self_costs(selection);
    let mut incl = own.clone();
    let mut excl = own.clone();
    // Children always have larger ids than their parents: one reverse pass folds subtrees.
    for id in (1..db.nodes.len()).rev() {
        let node = &db.nodes[id];
        let parent = node.parent.index();
        let (lo, hi) = incl.split_at_mut(id);
        Cost::add_each(&mut lo[parent], &hi[0]);
        let parent_kind = db.nodes[parent].kind;
        let lexical_parent = matches!(
            parent_kind,
            NodeKind::Procedure | NodeKind::Inlined | NodeKind::Loop
        );
        if lexical_parent && !node.kind.is_activation() {
            let (lo, hi) = excl.split_at_mut(id);
            Cost::add_each(&mut lo[parent], &hi[0]);
        }
    }
    let zero = vec![Cost::default(); db.metrics.len()];
    for (id, node) in db.nodes.iter().enumerate() {
        if matches!(node.kind, NodeKind::Root | NodeKind::Partial) {
            excl[id] = zero.clone();
        }
    }
    NodeMetrics { own, incl, excl }
}

impl NodeMetrics {
    /// The metrics of a view of this selection; their totals are the root's inclusive costs.
    fn infos(&self, db: &Database) -> Vec<MetricInfo> {
        (self.incl[0].iter().enumerate())
            .take(db.metrics.len())
            .map(|(m, &total)| MetricInfo::of_metric(db, m, total))
            .collect()
    }

    /// Database node `id` as a top-down view node, with its costs.
    fn top_down_node(&self, db: &Database, id: DbNodeId) -> ViewNode {
        let i = id.index();
        ViewNode {
            incl: self.incl[i].clone(),
            excl: self.excl[i].clone(),
            own: self.own[i].clone(),
            ..scope_node(db, id)
        }
    }
}

/// The top-down (calling context) view. Nodes with no cost in the selection are left out.
pub fn top_down(db: &Database, selection: &Selection) -> ViewTree {
    top_down_sourced(db, selection).tree
}

/// [`top_down`] with its sources: each view node's database node.
fn top_down_sourced(db: &Database, selection: &Selection) -> Sourced {
    let m = node_metrics(db, selection);
    let root = m.top_down_node(db, DbNodeId::ROOT);
    let mut tree = ViewTree::new(ViewKind::TopDown, m.infos(db), root);
    let mut sources = vec![(0, DbNodeId::ROOT)];
    let mut stack = vec![(DbNodeId::ROOT, 0usize)];
    while let Some((id, at)) = stack.pop() {
        for &c in &db.nodes[id.index()].children {
            if !is_zero(&m.incl[c.index()]) {
                let node = tree.push(at, m.top_down_node(db, c));
                sources.push((node, c));
                stack.push((c, node));
            }
        }
    }
    tree.sort();
    Sourced { tree, sources }
}

/// Database node `id` as a view node with zero costs: its kind, name ([`label::name`]),
/// module, source position and call site.
fn scope_node(db: &Database, id: DbNodeId) -> ViewNode {
    let n = &db.nodes[id.index()];
    let file = n.file.map(|f| db.file(f));
    ViewNode {
        module: n.module.map(|m| db.module_path(m).to_string()),
        file: file.map(str::to_string),
        line: n.line,
        end_line: n.end_line,
        call_file: n.call_file.map(|f| db.file(f).to_string()),
        call_line: n.call_line,
        ..ViewNode::new(
            n.kind,
            label::name(n.kind, &n.name, file, n.line),
            db.metrics.len(),
        )
    }
}

/// Depth-first walk calling `visit(node, true)` on entry and `visit(node, false)` on exit.
fn walk(db: &Database, visit: &mut impl FnMut(DbNodeId, bool)) {
    let mut stack = vec![(DbNodeId::ROOT, false)];
    while let Some((id, done)) = stack.pop() {
        if done {
            visit(id, false);
            continue;
        }
        visit(id, true);
        stack.push((id, true));
        for &c in db.nodes[id.index()].children.iter().rev() {
            stack.push((c, false));
        }
    }
}

fn is_zero(costs: &[Cost]) -> bool {
    costs.iter().all(|c| c.samples == 0 && c.value == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::database::{MetricDesc, ModuleDesc, StructureSource, ThreadDesc};
    use crate::db::ids::{DbFileId, DbModuleId, ThreadIdx};
    use crate::db::node::{ChildIndex, NodeKey};
    use profiler::db::Sampling;

    /// A small database: `main` with a loop and two calls to `f`, one of which recurses.
    struct Fixture {
        db: Database,
        index: ChildIndex,
    }

    impl Fixture {
        fn new() -> Fixture {
            let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Period(10));
            let mut db = Database::new(vec![metric]);
            db.files.push("/src/a.c".into());
            db.modules.push(ModuleDesc {
                path: "/bin/a".into(),
                build_id: None,
                structure: StructureSource::OnTheFly,
            });
            for tid in [7, 8] {
                db.threads.push(ThreadDesc {
                    profile: 0,
                    pid: 7,
                    tid,
                    comm: "a".into(),
                });
            }
            Fixture {
                db,
                index: ChildIndex::default(),
            }
        }

        fn add(&mut self, parent: DbNodeId, kind: NodeKind, name: &str, line: u32) -> DbNodeId {
            let key = NodeKey {
                kind,
                name: name.into(),
                module: Some(DbModuleId(0)),
                file: Some(DbFileId(0)),
                line: Some(line),
                end_line: None,
                call_file: None,
                call_line: None,
            };
            self.db.child(&mut self.index, parent, key)
        }

        fn call(&mut self, site: DbNodeId, name: &str) -> DbNodeId {
            let line = self.db.nodes[site.index()].line;
            let key = NodeKey {
                kind: NodeKind::Procedure,
                name: name.into(),
                module: Some(DbModuleId(0)),
                file: Some(DbFileId(0)),
                line: Some(if name == "f" { 19 } else { 1 }),
                end_line: None,
                call_file: Some(DbFileId(0)),
                call_line: line,
            };
            self.db.child(&mut self.index, site, key)
        }

        /// `f` called from `site`, with `samples` samples in `thread` at its line 20.
        fn call_f(&mut self, site: DbNodeId, thread: u32, samples: u64) -> DbNodeId {
            let f = self.call(site, "f");
            let line = self.add(f, NodeKind::Statement, "", 20);
            self.sample(line, thread, samples);
            f
        }

        fn sample(&mut self, at: DbNodeId, thread: u32, samples: u64) {
            let cost = Cost {
                samples,
                value: samples * 10,
            };
            self.db.add_cost(at, ThreadIdx(thread), &[cost]);
        }
    }

    fn build() -> Database {
        let mut fx = Fixture::new();
        let main = fx.call(DbNodeId::ROOT, "main");
        let lp = fx.add(main, NodeKind::Loop, "", 5);
        let s6 = fx.add(lp, NodeKind::Statement, "", 6);
        fx.sample(s6, 0, 1);
        let s7 = fx.add(lp, NodeKind::Statement, "", 7);
        fx.call_f(s7, 0, 3);
        let s9 = fx.add(main, NodeKind::Statement, "", 9);
        let f9 = fx.call_f(s9, 1, 6);
        let s21 = fx.add(f9, NodeKind::Statement, "", 21);
        fx.call_f(s21, 1, 2);
        fx.db.compute_totals();
        fx.db
    }

    fn samples(c: &[Cost]) -> u64 {
        c[0].samples
    }

    #[test]
    fn top_down_inclusive_and_exclusive() {
        let db = build();
        let t = top_down(&db, &Selection::All);
        assert_eq!(samples(&t.root().incl), 12);
        let main = t.find(|n| n.name == "main").unwrap();
        assert_eq!(samples(&t.nodes[main].incl), 12);
        assert_eq!(
            samples(&t.nodes[main].excl),
            1,
            "the loop's statement, not the calls"
        );
        let lp = t.find(|n| n.name == "loop at a.c: 5").unwrap();
        assert_eq!(samples(&t.nodes[lp].incl), 4);
        assert_eq!(samples(&t.nodes[lp].excl), 1);
        // Children sorted by inclusive cost: the call at line 9 (8 samples) before the loop (4).
        let first = t.nodes[main].children[0];
        assert_eq!(t.nodes[first].name, "a.c: 9");
        assert_eq!(t.nodes[first].incl[0].value, 80);
    }

    #[test]
    fn huge_costs_saturate_in_every_view() {
        let mut fx = Fixture::new();
        let main = fx.call(DbNodeId::ROOT, "main");
        let huge = Cost {
            samples: u64::MAX / 2 + 1,
            value: u64::MAX / 2 + 1,
        };
        for line in [3, 4] {
            let s = fx.add(main, NodeKind::Statement, "", line);
            fx.db.add_cost(s, ThreadIdx(0), &[huge]);
        }
        for view in [top_down, callers, flat] {
            let t = view(&fx.db, &Selection::All);
            assert_eq!(t.root().incl[0].value, u64::MAX, "{:?}", t.view);
            assert_eq!(t.root().incl[0].samples, u64::MAX, "{:?}", t.view);
        }
    }

    #[test]
    fn thread_selection_filters_costs() {
        let db = build();
        let t = top_down(&db, &Selection::Threads(db.threads_with_tid(7)));
        assert_eq!(samples(&t.root().incl), 4);
        assert!(
            t.find(|n| n.name == "a.c: 9").is_none(),
            "zero-cost nodes left out"
        );
    }

    #[test]
    fn callers_apportion_and_count_outermost_recursion_once() {
        let db = build();
        let t = callers(&db, &Selection::All);
        let f = t.children(0).find(|(_, n)| n.name == "f").unwrap().0;
        assert_eq!(
            samples(&t.nodes[f].incl),
            11,
            "3 + 8; the nested f is inside the 8"
        );
        assert_eq!(samples(&t.nodes[f].excl), 11);
        let by_line: Vec<(Option<u32>, u64)> = t
            .children(f)
            .map(|(_, n)| (n.call_line, samples(&n.incl)))
            .collect();
        assert_eq!(by_line, vec![(Some(9), 8), (Some(7), 3)]);
        assert!(t.children(f).all(|(_, n)| n.name == "main"));
    }

    #[test]
    fn flat_sums_static_scopes() {
        let db = build();
        let t = flat(&db, &Selection::All);
        let module = t.nodes[0].children[0];
        assert_eq!(t.nodes[module].name, "/bin/a");
        assert_eq!(samples(&t.nodes[module].incl), 12);
        assert_eq!(samples(&t.nodes[module].excl), 12);
        let file = t.nodes[module].children[0];
        assert_eq!(t.nodes[file].kind, NodeKind::File);
        let procs: Vec<(String, u64, u64)> = t
            .children(file)
            .map(|(_, n)| (n.name.clone(), samples(&n.incl), samples(&n.excl)))
            .collect();
        assert_eq!(
            procs,
            vec![("main".into(), 12, 1), ("f".into(), 11, 11)],
            "recursion counted once"
        );
        let f = t.nodes[file].children[1];
        let line20 = t.children(f).find(|(_, n)| n.name == "a.c: 20").unwrap().1;
        assert_eq!((samples(&line20.incl), samples(&line20.excl)), (11, 11));
    }
}
