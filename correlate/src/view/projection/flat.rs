//! The flat view: the static structure (module > file > procedure > inlined code, loops and
//! lines) with costs summed over all calling contexts.

use fxhash::FxHashMap;
use profiler::db::Cost;

use super::keyed::KeyedTree;
use super::{is_zero, node_metrics, walk, Sourced};
use crate::db::database::{Database, Selection};
use crate::db::ids::DbNodeId;
use crate::db::node::NodeKind;
use crate::view::tree::{ViewKind, ViewTree};

/// The flat view: module > file > procedure > inlined code, loops and lines, costs summed over
/// all contexts (see the [crate documentation](crate) for the metrics).
pub fn flat(db: &Database, selection: &Selection) -> ViewTree {
    flat_sourced(db, selection).tree
}

/// [`flat`] with its sources.
pub(super) fn flat_sourced(db: &Database, selection: &Selection) -> Sourced {
    let m = node_metrics(db, selection);
    let mut b = KeyedTree::new(db, ViewKind::Flat, &m);
    // Static position (flat node) of every database node, parents first.
    let mut place: Vec<Option<usize>> = vec![None; db.nodes.len()];
    // Flat nodes each database node enters (the chain a procedure frame opens, or its scope).
    let mut entered: Vec<Vec<usize>> = vec![Vec::new(); db.nodes.len()];
    for (id, node) in db.nodes.iter().enumerate().skip(1) {
        let parent_place = place[node.parent.index()];
        let chain = match (node.kind, parent_place) {
            (NodeKind::Partial, _) => Vec::new(),
            (k, _) if k.is_activation() => flat_chain(&mut b, db, DbNodeId::from_index(id)),
            (_, Some(p)) => vec![b.scope(p, DbNodeId::from_index(id))],
            (_, None) => Vec::new(),
        };
        place[id] = chain.last().copied().or(parent_place);
        entered[id] = chain;
    }
    // Exclusive: what was sampled at a node belongs to its static scope and every enclosing one
    // below the root (the flat tree's ancestors never cross a call).
    for (cost, &at) in m.own.iter().zip(&place) {
        let Some(mut at) = at.filter(|_| !is_zero(cost)) else {
            continue;
        };
        while at != 0 {
            Cost::add_each(&mut b.tree.nodes[at].excl, cost);
            at = b.parent(at);
        }
    }
    // Inclusive: the outermost entry into each flat node on every path.
    let mut active: FxHashMap<usize, u32> = FxHashMap::default();
    walk(db, &mut |id, entering| {
        for &f in &entered[id.index()] {
            let count = active.entry(f).or_insert(0);
            if entering {
                *count += 1;
            } else {
                *count -= 1;
                if *count == 0 {
                    b.add_inclusive(f, id);
                }
            }
        }
    });
    b.finish()
}

/// The flat nodes a procedure-like frame opens: module > file > procedure.
fn flat_chain(b: &mut KeyedTree, db: &Database, id: DbNodeId) -> Vec<usize> {
    let n = &db.nodes[id.index()];
    let file = n.file.map_or("<unknown file>", |f| db.file(f));
    let module = match n.module {
        Some(m) => db.module_path(m),
        // Python functions (named by CPython's perf trampolines) have a source, no module.
        None if file.ends_with(".py") || file.starts_with("<frozen ") => "<python>",
        None => "<unknown module>",
    };
    let m = b.path(0, NodeKind::Module, module);
    let f = b.path(m, NodeKind::File, file);
    let p = b.frame(f, id, None);
    vec![m, f, p]
}
