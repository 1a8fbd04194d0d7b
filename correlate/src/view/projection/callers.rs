//! The callers (bottom-up) view: each procedure, then the chains of its callers.

use fxhash::FxHashMap;
use profiler::db::Cost;

use super::keyed::{KeyedTree, Site, ViewKey};
use super::{is_zero, node_metrics, walk, Sourced};
use crate::db::database::{Database, Selection};
use crate::db::ids::DbNodeId;
use crate::view::tree::{ViewKind, ViewTree};

/// The callers (bottom-up) view: one top entry per procedure, then the chains of callers of its
/// instances (see the [crate documentation](crate) for the metrics).
pub fn callers(db: &Database, selection: &Selection) -> ViewTree {
    callers_sourced(db, selection).tree
}

/// [`callers`] with its sources.
pub(super) fn callers_sourced(db: &Database, selection: &Selection) -> Sourced {
    let m = node_metrics(db, selection);
    let mut b = KeyedTree::new(db, ViewKind::Callers, &m);
    let frames = frame_parents(db);
    let outermost = outermost_instances(db, |id| {
        db.nodes[id.index()]
            .kind
            .is_frame()
            .then(|| ViewKey::procedure(db, id))
    });
    for (i, node) in db.nodes.iter().enumerate() {
        if !node.kind.is_frame() || is_zero(&m.incl[i]) {
            continue;
        }
        let id = DbNodeId::from_index(i);
        if !outermost[i] {
            // A nested recursive instance: its inclusive cost is already counted; its exclusive
            // cost is new unless it is inlined into an instance of itself within one activation
            // (then that instance's exclusive already holds it).
            if !inlined_into_itself(db, &frames, id) {
                let top = b.frame(0, id, None);
                Cost::add_each(&mut b.tree.nodes[top].excl, &m.excl[i]);
            }
            continue;
        }
        let top = b.frame(0, id, None);
        b.add(top, id);
        let (mut callee, mut at) = (id, top);
        while let Some(caller) = frames[callee.index()] {
            at = b.frame(at, caller, Some(call_site(db, callee)));
            b.add(at, id);
            callee = caller;
        }
    }
    b.finish()
}

/// For every node, whether no ancestor has the same key (`key` returns `None` for nodes that
/// take no part).
fn outermost_instances<K: std::hash::Hash + Eq>(
    db: &Database,
    key: impl Fn(DbNodeId) -> Option<K>,
) -> Vec<bool> {
    let mut out = vec![true; db.nodes.len()];
    let mut active: FxHashMap<K, u32> = FxHashMap::default();
    walk(db, &mut |id, entering| {
        let Some(k) = key(id) else { return };
        let count = active.entry(k).or_insert(0);
        if entering {
            out[id.index()] = *count == 0;
            *count += 1;
        } else {
            *count -= 1;
        }
    });
    out
}

/// The nearest frame ancestor of every node (`None` when only roots are above).
fn frame_parents(db: &Database) -> Vec<Option<DbNodeId>> {
    let mut nearest_frame: Vec<Option<DbNodeId>> = vec![None; db.nodes.len()];
    let mut out = vec![None; db.nodes.len()];
    for (id, node) in db.nodes.iter().enumerate().skip(1) {
        let p = node.parent.index();
        out[id] = nearest_frame[p];
        nearest_frame[id] = if node.kind.is_frame() {
            Some(DbNodeId::from_index(id))
        } else {
            nearest_frame[p]
        };
    }
    out
}

/// Whether frame `id` lies, without an intervening call, inside a frame of the same procedure
/// (a function inlined into itself, as recursive templates are).
fn inlined_into_itself(db: &Database, frames: &[Option<DbNodeId>], id: DbNodeId) -> bool {
    let key = ViewKey::procedure(db, id);
    let mut at = id;
    while !db.nodes[at.index()].kind.is_activation() {
        let Some(parent) = frames[at.index()] else {
            return false;
        };
        if ViewKey::procedure(db, parent) == key {
            return true;
        }
        at = parent;
    }
    false
}

/// The call site in the caller leading to frame `id`.
fn call_site(db: &Database, id: DbNodeId) -> Site {
    let n = &db.nodes[id.index()];
    (n.call_file, n.call_line)
}
