//! The data views as projections of a database's data section and its enriched tree:
//!
//! - [`objects`]: every data object with its cost, size and blocks, ranked (`--data`);
//! - [`object_tree`]: each object, and below it the calling contexts that touched it, top-down
//!   (`--data --tree`, HPCToolkit's data-centric layout);
//! - [`code_data`]: the code views (top-down, callers, flat) with the objects each context
//!   touched as leaves below it (`--code-data`, SIGMA's function x data table).
//!
//! The last two build a database of their own and hand it to the code projections, so their
//! costs follow exactly the same rules as every other view.

use fxhash::FxHashMap;
use profiler::db::Cost;

use crate::db::data::{DataAccess, DataObjectId};
use crate::db::database::{Database, Selection};
use crate::db::ids::DbNodeId;
use crate::db::node::{ChildIndex, NodeKey, NodeKind};
use crate::view::tree::{MetricInfo, ViewKind, ViewTree};

/// One object of the `--data` view.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRow {
    /// The object.
    pub object: DataObjectId,
    /// Its cost per metric: the data samples that touched it.
    pub costs: Vec<Cost>,
    /// Heap objects: blocks allocated (in the selected threads).
    pub blocks: u64,
    /// Heap objects: bytes allocated.
    pub bytes: u64,
}

/// The `--data` view: objects ranked by their cost of the first metric, then by bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectTable {
    /// The metrics; totals are the data samples' (every object, `<unknown data>` included).
    pub metrics: Vec<MetricInfo>,
    /// The objects with a cost or an allocation in the selection.
    pub rows: Vec<ObjectRow>,
}

impl ObjectTable {
    /// Keep only the metrics at `indices`, in that order, and rank again by the first.
    pub fn select_metrics(&mut self, indices: &[usize]) {
        self.metrics = pick(&self.metrics, indices);
        for r in &mut self.rows {
            r.costs = pick(&r.costs, indices);
        }
        rank(&mut self.rows);
    }
}

/// The items of `all` at `indices`, in that order.
pub(crate) fn pick<T: Clone>(all: &[T], indices: &[usize]) -> Vec<T> {
    indices.iter().map(|&i| all[i].clone()).collect()
}

/// Objects by the first metric's cost, then bytes allocated, then first met.
fn rank(rows: &mut [ObjectRow]) {
    rows.sort_by(|a, b| {
        let first = |r: &ObjectRow| r.costs.first().map_or(0, |c| c.value);
        first(b)
            .cmp(&first(a))
            .then(b.bytes.cmp(&a.bytes))
            .then(a.object.cmp(&b.object))
    });
}

/// The accesses of the selected threads.
pub(crate) fn selected<'d>(
    db: &'d Database,
    selection: &'d Selection,
) -> impl Iterator<Item = &'d DataAccess> + 'd {
    db.data
        .accesses
        .iter()
        .filter(move |a| selection.includes(a.thread))
}

/// The metrics of a data view whose costs sum to `totals`.
pub(crate) fn metric_infos(db: &Database, totals: &[Cost]) -> Vec<MetricInfo> {
    db.metrics
        .iter()
        .zip(totals)
        .map(|(desc, &total)| MetricInfo::of(desc, total))
        .collect()
}

/// Every object touched or allocated in the selection, ranked.
pub fn objects(db: &Database, selection: &Selection) -> ObjectTable {
    let metrics = db.metrics.len();
    let mut rows: Vec<ObjectRow> = (0..db.data.objects.len())
        .map(|i| ObjectRow {
            object: DataObjectId::from_index(i),
            costs: vec![Cost::default(); metrics],
            blocks: 0,
            bytes: 0,
        })
        .collect();
    let mut totals = vec![Cost::default(); metrics];
    for a in selected(db, selection) {
        Cost::add_each(&mut rows[a.object.index()].costs, &a.costs);
        Cost::add_each(&mut totals, &a.costs);
    }
    for s in db
        .data
        .sites
        .iter()
        .filter(|s| selection.includes(s.thread))
    {
        let row = &mut rows[s.object.index()];
        row.blocks = row.blocks.saturating_add(s.counts.calls);
        row.bytes = row.bytes.saturating_add(s.counts.bytes);
    }
    rows.retain(|r| r.blocks > 0 || r.costs.iter().any(|c| c.samples > 0));
    rank(&mut rows);
    ObjectTable {
        metrics: metric_infos(db, &totals),
        rows,
    }
}

/// The key of object `id` as a node of a data view's tree.
fn object_key(db: &Database, id: DataObjectId) -> NodeKey {
    let o = db.data.object(id);
    NodeKey {
        module: o.module,
        file: o.file,
        line: o.line,
        ..NodeKey::pseudo(NodeKind::DataObject, o.label())
    }
}

/// A database with `db`'s tables and an empty tree, to build a data view's tree in.
fn empty_like(db: &Database) -> Database {
    let mut out = Database::new(db.metrics.clone());
    out.modules = db.modules.clone();
    out.files = db.files.clone();
    out.threads = db.threads.clone();
    out
}

/// Each object (top level, ranked), and below it, top-down, the calling contexts of the
/// selected threads that touched it. The root's total is the data samples' total.
pub fn object_tree(db: &Database, selection: &Selection) -> ViewTree {
    let mut tree = empty_like(db);
    let mut index = ChildIndex::default();
    // (object, database node) -> its copy below that object.
    let mut copies: FxHashMap<(DataObjectId, DbNodeId), DbNodeId> = FxHashMap::default();
    for a in selected(db, selection) {
        let top = tree.child(&mut index, DbNodeId::ROOT, object_key(db, a.object));
        let mut path = Vec::new();
        let mut id = a.node;
        while id != DbNodeId::ROOT && !copies.contains_key(&(a.object, id)) {
            path.push(id);
            id = db.nodes[id.index()].parent;
        }
        let mut at = copies.get(&(a.object, id)).copied().unwrap_or(top);
        for &n in path.iter().rev() {
            at = tree.child(&mut index, at, db.nodes[n.index()].key());
            copies.insert((a.object, n), at);
        }
        tree.add_cost(at, a.thread, &a.costs);
    }
    tree.compute_totals();
    ViewTree::from_database(&tree, ViewKind::TopDown, selection)
}

/// The code view `view` with, below every context that touched data, one leaf per object it
/// touched holding those samples (taken from the context's own cost, or from its `<kernel>`
/// child for a touch the kernel made on its behalf, so every inclusive cost is the code view's).
pub fn code_data(db: &Database, view: ViewKind, selection: &Selection) -> ViewTree {
    let mut tree = db.clone();
    let mut index = ChildIndex::default();
    for a in &db.data.accesses {
        let leaf = tree.child(&mut index, a.node, object_key(db, a.object));
        tree.add_cost(leaf, a.thread, &a.costs);
        let kernel = db.nodes[a.node.index()]
            .children
            .iter()
            .copied()
            .find(|&c| db.nodes[c.index()].kind == NodeKind::Kernel);
        let mut left = a.costs.clone();
        for from in std::iter::once(a.node).chain(kernel) {
            take(&mut tree, from, a.thread, &mut left);
        }
    }
    ViewTree::from_database(&tree, view, selection)
}

/// Take up to `left` from node `id`'s own cost in `thread`, reducing `left` by what was taken.
fn take(tree: &mut Database, id: DbNodeId, thread: crate::db::ids::ThreadIdx, left: &mut [Cost]) {
    tree.nodes[id.index()].costs.update(thread, |own| {
        for (c, l) in own.iter_mut().zip(left.iter_mut()) {
            let samples = c.samples.min(l.samples);
            let value = c.value.min(l.value);
            c.samples -= samples;
            c.value -= value;
            l.samples -= samples;
            l.value -= value;
        }
    });
}
