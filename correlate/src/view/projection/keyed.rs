//! The views whose nodes merge many database nodes (callers, flat): a [`ViewTree`] under
//! construction whose nodes are found by (parent, identity).

use std::collections::hash_map::Entry;

use fxhash::FxHashMap;
use profiler::db::Cost;

use super::{scope_node, NodeMetrics, Sourced};
use crate::db::database::Database;
use crate::db::ids::{DbFileId, DbModuleId, DbNodeId};
use crate::db::node::NodeKind;
use crate::view::tree::{ViewKind, ViewNode, ViewTree};

/// A call site: file and line in the caller.
pub(super) type Site = (Option<DbFileId>, Option<u32>);

/// Merge identity of a view node under its parent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ViewKey {
    kind: NodeKind,
    name: String,
    module: Option<DbModuleId>,
    file: Option<DbFileId>,
    line: Option<u32>,
    /// The call site: of an inlined scope (flat view), or in a caller (callers view).
    site: Option<Site>,
}

impl ViewKey {
    /// Identity of the procedure of frame `id` in the callers and flat views: merged over
    /// contexts by kind, name, module, file and line (inlined instances merge regardless of
    /// their call site).
    pub(super) fn procedure(db: &Database, id: DbNodeId) -> ViewKey {
        let n = &db.nodes[id.index()];
        ViewKey {
            kind: n.kind,
            name: n.name.clone(),
            module: n.module,
            file: n.file,
            line: n.line,
            site: None,
        }
    }

    /// Identity of a lexical scope (inlined frame, loop, statement) inside its flat parent.
    fn scope(db: &Database, id: DbNodeId) -> ViewKey {
        let n = &db.nodes[id.index()];
        ViewKey {
            site: Some((n.call_file, n.call_line)),
            ..ViewKey::procedure(db, id)
        }
    }

    /// Identity of a module or file node: its path.
    fn path(kind: NodeKind, path: &str) -> ViewKey {
        ViewKey {
            kind,
            name: path.to_string(),
            module: None,
            file: None,
            line: None,
            site: None,
        }
    }
}

/// A view tree under construction whose nodes are found by (parent, key).
pub(super) struct KeyedTree<'a> {
    db: &'a Database,
    m: &'a NodeMetrics,
    /// The tree so far.
    pub(super) tree: ViewTree,
    /// Parent of every node so far.
    parents: Vec<usize>,
    /// The inclusive costs added so far: (view node, database node).
    sources: Vec<(usize, DbNodeId)>,
    index: FxHashMap<(usize, ViewKey), usize>,
}

impl<'a> KeyedTree<'a> {
    /// A `view` of `db` holding only the root, whose inclusive cost is the selection's total.
    pub(super) fn new(db: &'a Database, view: ViewKind, m: &'a NodeMetrics) -> Self {
        let root = ViewNode {
            incl: m.incl[0].clone(),
            ..scope_node(db, DbNodeId::ROOT)
        };
        KeyedTree {
            db,
            m,
            tree: ViewTree::new(view, m.infos(db), root),
            parents: vec![0],
            sources: vec![(0, DbNodeId::ROOT)],
            index: FxHashMap::default(),
        }
    }

    /// The child of `parent` for the procedure of frame `id`. In the callers view, `site` is
    /// the call site in this caller that leads to `parent` (the callee): callers reached
    /// through different call sites are different nodes.
    pub(super) fn frame(&mut self, parent: usize, id: DbNodeId, site: Option<Site>) -> usize {
        let key = ViewKey {
            site,
            ..ViewKey::procedure(self.db, id)
        };
        self.child(parent, key, |db| {
            let (file, line) = site.unwrap_or((None, None));
            ViewNode {
                call_file: file.map(|f| db.file(f).to_string()),
                call_line: line,
                ..scope_node(db, id)
            }
        })
    }

    /// The child of `parent` for the lexical scope (inlined frame, loop, statement) `id`.
    pub(super) fn scope(&mut self, parent: usize, id: DbNodeId) -> usize {
        let key = ViewKey::scope(self.db, id);
        self.child(parent, key, |db| scope_node(db, id))
    }

    /// The child of `parent` for the module or file (`kind`) at `path`.
    pub(super) fn path(&mut self, parent: usize, kind: NodeKind, path: &str) -> usize {
        self.child(parent, ViewKey::path(kind, path), |db| ViewNode {
            file: (kind == NodeKind::File).then(|| path.to_string()),
            ..ViewNode::new(kind, path, db.metrics.len())
        })
    }

    /// The child of `parent` with `key`, made by `make` if new.
    fn child(
        &mut self,
        parent: usize,
        key: ViewKey,
        make: impl FnOnce(&Database) -> ViewNode,
    ) -> usize {
        match self.index.entry((parent, key)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let id = self.tree.push(parent, make(self.db));
                self.parents.push(parent);
                *e.insert(id)
            }
        }
    }

    /// Add database node `from`'s inclusive and exclusive costs to view node `to`.
    pub(super) fn add(&mut self, to: usize, from: DbNodeId) {
        self.add_inclusive(to, from);
        Cost::add_each(&mut self.tree.nodes[to].excl, &self.m.excl[from.index()]);
    }

    /// Add database node `from`'s inclusive cost to view node `to`.
    pub(super) fn add_inclusive(&mut self, to: usize, from: DbNodeId) {
        Cost::add_each(&mut self.tree.nodes[to].incl, &self.m.incl[from.index()]);
        self.sources.push((to, from));
    }

    /// The parent of view node `id`.
    pub(super) fn parent(&self, id: usize) -> usize {
        self.parents[id]
    }

    /// The finished view, in display order, with its sources.
    pub(super) fn finish(mut self) -> Sourced {
        self.tree.sort();
        Sourced {
            tree: self.tree,
            sources: self.sources,
        }
    }
}
