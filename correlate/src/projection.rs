//! The three views as projections of the one enriched tree, with all metrics computed here so
//! that `hpcview-rs` only presents them.
//!
//! Definitions (costs in event units, per metric; [`Cost::samples`] alongside):
//!
//! - **inclusive** of a node: the self costs of its whole subtree.
//! - **exclusive** of a procedure, inlined frame or loop: the self costs of its subtree without
//!   crossing a call edge (into a procedure frame, unknown procedure or the kernel), i.e. its
//!   own code, including code inlined into it and its loops. Exclusive of a statement, an
//!   unknown procedure or the kernel: its own self cost. Of the roots: zero.
//! - **top-down** ([`top_down`]): the enriched tree itself.
//! - **callers** ([`callers`]): one top entry per procedure (procedure frames, inlined
//!   functions, unknown procedures, the kernel, merged by name, module, file and line over all
//!   contexts); below it the chain of callers of each of its instances, each caller node keyed by
//!   (caller, call site). Every node on the chain of an instance receives that instance's costs.
//! - **flat** ([`flat`]): module > file > procedure > inlined / loops / statements, the static
//!   structure, costs summed over all contexts; calls made from a statement count in that
//!   statement's (and its enclosing scopes') inclusive cost, not in their exclusive cost.
//!
//! Recursion, in the callers and flat views: a scope's inclusive cost counts only the outermost
//! instance on each path (a sample is never counted twice for the same entry); exclusive costs
//! are summed over all instances (they never overlap). Children in every returned tree are
//! sorted by inclusive value of the first metric, descending (ties by label).

use fxhash::FxHashMap;
use profiler::db::Cost;

use crate::database::{base_name, label_for, Database, MetricDesc, NodeId, NodeKind, Selection};

/// Which view a [`ViewTree`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    /// Calling contexts from the root down.
    TopDown,
    /// Procedures, then their callers.
    Callers,
    /// Static structure: module > file > procedure > ...
    Flat,
}

impl ViewKind {
    /// The `view` string of the `hpcview-rs --json` contract.
    pub fn as_str(self) -> &'static str {
        match self {
            ViewKind::TopDown => "top-down",
            ViewKind::Callers => "callers",
            ViewKind::Flat => "flat",
        }
    }
}

/// One node of a view: everything a renderer needs, names and paths already resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewNode {
    /// Kind (flat views add `Module` and `File`).
    pub kind: NodeKind,
    /// Display label (`main`, `[I] Mp::add`, `loop at a.cc: 17`, `a.cc: 17`, a module or file
    /// path, `<partial call paths>`, `<unknown procedure> 0x1234 [libx.so]`).
    pub name: String,
    /// Module path, where known.
    pub module: Option<String>,
    /// Source file path (full), where known.
    pub file: Option<String>,
    /// Begin line, where known.
    pub line: Option<u32>,
    /// End line, where known.
    pub end_line: Option<u32>,
    /// Top-down and flat: for procedure and inlined frames, the call site in the parent.
    /// Callers view: for a caller node, the call site in this caller that led to its parent in
    /// the view (the callee).
    pub call_file: Option<String>,
    /// Line of the call site; see [`ViewNode::call_file`].
    pub call_line: Option<u32>,
    /// Inclusive cost per metric.
    pub incl: Vec<Cost>,
    /// Exclusive cost per metric.
    pub excl: Vec<Cost>,
    /// Children (indices into [`ViewTree::nodes`]), sorted by inclusive cost, descending.
    pub children: Vec<usize>,
    /// The database node this view node shows (top-down view only).
    pub source: Option<NodeId>,
}

/// A view: an arena of [`ViewNode`]s, node 0 the root.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewTree {
    /// Which view.
    pub view: ViewKind,
    /// The metrics; every `incl`/`excl` vector is parallel to this.
    pub metrics: Vec<MetricDesc>,
    /// The nodes; `nodes[0]` is the root.
    pub nodes: Vec<ViewNode>,
}

impl ViewTree {
    /// The root node.
    pub fn root(&self) -> &ViewNode {
        &self.nodes[0]
    }

    /// The children of node `id`, in display order.
    pub fn children(&self, id: usize) -> impl Iterator<Item = (usize, &ViewNode)> {
        self.nodes[id].children.iter().map(|&c| (c, &self.nodes[c]))
    }

    /// Find the first node (depth-first, display order) whose name satisfies `pred`.
    pub fn find(&self, pred: impl Fn(&ViewNode) -> bool) -> Option<usize> {
        let mut stack = vec![0usize];
        while let Some(id) = stack.pop() {
            if pred(&self.nodes[id]) {
                return Some(id);
            }
            stack.extend(self.nodes[id].children.iter().rev());
        }
        None
    }
}

/// Inclusive and exclusive cost of every database node, for the selected threads.
#[derive(Debug, Clone)]
pub struct NodeMetrics {
    /// Inclusive per node, per metric.
    pub incl: Vec<Vec<Cost>>,
    /// Exclusive per node, per metric.
    pub excl: Vec<Vec<Cost>>,
}

/// Compute inclusive and exclusive costs of every node (definitions in the module docs).
pub fn node_metrics(db: &Database, selection: &Selection) -> NodeMetrics {
    let own = db.self_costs(selection);
    let mut incl = own.clone();
    let mut excl = own;
    // Children always have larger ids than their parents: one reverse pass folds subtrees.
    for id in (1..db.nodes.len()).rev() {
        let node = &db.nodes[id];
        let parent = node.parent as usize;
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
    NodeMetrics { incl, excl }
}

/// The top-down (calling context) view. Nodes with no cost in the selection are left out.
pub fn top_down(db: &Database, selection: &Selection) -> ViewTree {
    let m = node_metrics(db, selection);
    let mut tree = new_tree(db, ViewKind::TopDown, db_view_node(db, 0, &m));
    let mut stack = vec![(0 as NodeId, 0usize)];
    while let Some((id, vid)) = stack.pop() {
        for &c in &db.nodes[id as usize].children {
            if is_zero(&m.incl[c as usize]) {
                continue;
            }
            let cv = tree.nodes.len();
            tree.nodes.push(db_view_node(db, c, &m));
            tree.nodes[vid].children.push(cv);
            stack.push((c, cv));
        }
    }
    sort_children(&mut tree);
    tree
}

/// The callers (bottom-up) view; see the module docs.
pub fn callers(db: &Database, selection: &Selection) -> ViewTree {
    let m = node_metrics(db, selection);
    let mut b = KeyedTree::new(db, ViewKind::Callers, &m);
    let frames = frame_parents(db);
    let outermost = outermost_instances(db, |id| {
        let n = &db.nodes[id as usize];
        n.kind.is_frame().then(|| procedure_key(db, id, n.kind))
    });
    for (id, node) in db.nodes.iter().enumerate() {
        if !node.kind.is_frame() || is_zero(&m.incl[id]) {
            continue;
        }
        let key = procedure_key(db, id as NodeId, node.kind);
        if !outermost[id] {
            // A nested recursive instance: its inclusive cost is already counted; its exclusive
            // cost is new unless it is inlined into an instance of itself within one activation
            // (then that instance's exclusive already holds it).
            if !inlined_into_itself(db, &frames, id as NodeId, &key) {
                let top = b.child(0, key, id as NodeId, None);
                Cost::add_each(&mut b.tree.nodes[top].excl, &m.excl[id]);
            }
            continue;
        }
        let top = b.child(0, key, id as NodeId, None);
        b.add(top, id);
        let (mut callee, mut at) = (id as NodeId, top);
        while let Some(caller) = frames[callee as usize] {
            let site = call_site(db, callee);
            let key = (
                procedure_key(db, caller, db.nodes[caller as usize].kind),
                site,
            );
            at = b.child(at, key.0, caller, Some(site));
            b.add(at, id);
            callee = caller;
        }
    }
    b.finish()
}

/// The flat view; see the module docs.
pub fn flat(db: &Database, selection: &Selection) -> ViewTree {
    let m = node_metrics(db, selection);
    let mut b = KeyedTree::new(db, ViewKind::Flat, &m);
    // Static position (flat node) of every database node, parents first.
    let mut place: Vec<Option<usize>> = vec![None; db.nodes.len()];
    // Flat nodes each database node enters (the chain a procedure frame opens, or its scope).
    let mut entered: Vec<Vec<usize>> = vec![Vec::new(); db.nodes.len()];
    for (id, node) in db.nodes.iter().enumerate().skip(1) {
        let parent_place = place[node.parent as usize];
        let chain = match (node.kind, parent_place) {
            (NodeKind::Partial, _) => Vec::new(),
            (k, _) if k.is_activation() => flat_chain(&mut b, db, id as NodeId),
            (_, Some(p)) => vec![b.child(p, scope_key(db, id as NodeId), id as NodeId, None)],
            (_, None) => Vec::new(),
        };
        place[id] = chain.last().copied().or(parent_place);
        entered[id] = chain;
    }
    // Exclusive: what was sampled at a node belongs to its static scope and every enclosing one
    // (the flat tree's ancestors never cross a call).
    let parents = b.parents();
    let own = db.self_costs(selection);
    for (id, cost) in own.iter().enumerate() {
        if let (false, Some(mut at)) = (is_zero(cost), place[id]) {
            loop {
                Cost::add_each(&mut b.tree.nodes[at].excl, cost);
                if at == 0 {
                    break;
                }
                at = parents[at];
            }
        }
    }
    // Inclusive: the outermost entry into each flat node on every path.
    let mut active: FxHashMap<usize, u32> = FxHashMap::default();
    walk(db, &mut |id, entering| {
        for &f in &entered[id as usize] {
            let count = active.entry(f).or_insert(0);
            if entering {
                *count += 1;
            } else {
                *count -= 1;
                if *count == 0 {
                    Cost::add_each(&mut b.tree.nodes[f].incl, &m.incl[id as usize]);
                }
            }
        }
    });
    let root_incl = m.incl[0].clone();
    b.tree.nodes[0].incl = root_incl;
    b.tree.nodes[0].excl = vec![Cost::default(); db.metrics.len()];
    b.finish()
}

/// The flat nodes a procedure-like frame opens: module > file > procedure.
fn flat_chain(b: &mut KeyedTree, db: &Database, id: NodeId) -> Vec<usize> {
    let n = &db.nodes[id as usize];
    let module = ViewKey::named(
        NodeKind::Module,
        n.module.map_or("<unknown module>", |m| db.module_path(m)),
    );
    let m = b.child(0, module, id, None);
    let file = ViewKey::named(
        NodeKind::File,
        n.file.map_or("<unknown file>", |f| db.file(f)),
    );
    let f = b.child(m, file, id, None);
    let p = b.child(f, procedure_key(db, id, n.kind), id, None);
    vec![m, f, p]
}

/// Depth-first walk calling `visit(node, true)` on entry and `visit(node, false)` on exit.
fn walk(db: &Database, visit: &mut impl FnMut(NodeId, bool)) {
    let mut stack = vec![(0 as NodeId, false)];
    while let Some((id, done)) = stack.pop() {
        if done {
            visit(id, false);
            continue;
        }
        visit(id, true);
        stack.push((id, true));
        for &c in db.nodes[id as usize].children.iter().rev() {
            stack.push((c, false));
        }
    }
}

/// For every node, whether no ancestor has the same key (`key` returns `None` for nodes that
/// take no part).
fn outermost_instances<K: std::hash::Hash + Eq>(
    db: &Database,
    key: impl Fn(NodeId) -> Option<K>,
) -> Vec<bool> {
    let mut out = vec![true; db.nodes.len()];
    let mut active: FxHashMap<K, u32> = FxHashMap::default();
    walk(db, &mut |id, entering| {
        let Some(k) = key(id) else { return };
        let count = active.entry(k).or_insert(0);
        if entering {
            out[id as usize] = *count == 0;
            *count += 1;
        } else {
            *count -= 1;
        }
    });
    out
}

/// The nearest frame ancestor of every node (`None` when only roots are above).
fn frame_parents(db: &Database) -> Vec<Option<NodeId>> {
    let mut nearest_frame: Vec<Option<NodeId>> = vec![None; db.nodes.len()];
    let mut out = vec![None; db.nodes.len()];
    for (id, node) in db.nodes.iter().enumerate().skip(1) {
        let p = node.parent as usize;
        out[id] = nearest_frame[p];
        nearest_frame[id] = if node.kind.is_frame() {
            Some(id as NodeId)
        } else {
            nearest_frame[p]
        };
    }
    out
}

/// Whether frame `id` lies, without an intervening call, inside a frame with the same key (a
/// function inlined into itself, as recursive templates are).
fn inlined_into_itself(
    db: &Database,
    frames: &[Option<NodeId>],
    id: NodeId,
    key: &ViewKey,
) -> bool {
    let mut at = id;
    while !db.nodes[at as usize].kind.is_activation() {
        let Some(parent) = frames[at as usize] else {
            return false;
        };
        if procedure_key(db, parent, db.nodes[parent as usize].kind) == *key {
            return true;
        }
        at = parent;
    }
    false
}

/// The call site (file, line) in the caller leading to frame `id`.
fn call_site(db: &Database, id: NodeId) -> (Option<u32>, Option<u32>) {
    let n = &db.nodes[id as usize];
    (n.call_file, n.call_line)
}

/// Identity of a procedure in the callers and flat views: merged over contexts by kind, name,
/// module, file and line (inlined instances merge regardless of their call site).
fn procedure_key(db: &Database, id: NodeId, kind: NodeKind) -> ViewKey {
    let n = &db.nodes[id as usize];
    ViewKey {
        kind,
        name: n.name.clone(),
        module: n.module,
        file: n.file,
        line: n.line,
        site: None,
    }
}

/// Identity of a lexical scope (inlined frame, loop, statement) inside its flat parent.
fn scope_key(db: &Database, id: NodeId) -> ViewKey {
    let n = &db.nodes[id as usize];
    ViewKey {
        kind: n.kind,
        name: n.name.clone(),
        module: n.module,
        file: n.file,
        line: n.line,
        site: Some((n.call_file, n.call_line)),
    }
}

/// Merge identity of a view node under its parent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ViewKey {
    kind: NodeKind,
    name: String,
    module: Option<u32>,
    file: Option<u32>,
    line: Option<u32>,
    /// The call site: of an inlined scope (flat view), or in a caller (callers view).
    site: Option<(Option<u32>, Option<u32>)>,
}

impl ViewKey {
    /// The key of a module or file node, identified by its path alone.
    fn named(kind: NodeKind, name: &str) -> ViewKey {
        ViewKey {
            kind,
            name: name.to_string(),
            module: None,
            file: None,
            line: None,
            site: None,
        }
    }
}

/// A view tree under construction whose nodes are found by (parent, key).
struct KeyedTree<'a> {
    db: &'a Database,
    m: &'a NodeMetrics,
    tree: ViewTree,
    index: FxHashMap<(usize, ViewKey), usize>,
}

impl<'a> KeyedTree<'a> {
    fn new(db: &'a Database, view: ViewKind, m: &'a NodeMetrics) -> Self {
        let mut root = db_view_node(db, 0, m);
        root.source = None;
        if view == ViewKind::Callers {
            root.excl = vec![Cost::default(); db.metrics.len()];
        }
        KeyedTree {
            db,
            m,
            tree: new_tree(db, view, root),
            index: FxHashMap::default(),
        }
    }

    /// The child of `parent` with `key`, created from database node `like` if new. For callers
    /// nodes, `site` is the call site in this caller that leads to the parent.
    fn child(
        &mut self,
        parent: usize,
        key: ViewKey,
        like: NodeId,
        site: Option<(Option<u32>, Option<u32>)>,
    ) -> usize {
        let key = match site {
            Some(s) => ViewKey {
                site: Some(s),
                ..key
            },
            None => key,
        };
        if let Some(&id) = self.index.get(&(parent, key.clone())) {
            return id;
        }
        let db = self.db;
        let zero = vec![Cost::default(); db.metrics.len()];
        let mut node = db_view_node(db, like, self.m);
        node.source = None;
        node.incl = zero.clone();
        node.excl = zero;
        match key.kind {
            NodeKind::Module | NodeKind::File => {
                node.kind = key.kind;
                node.name = key.name.clone();
                node.module = None;
                node.line = None;
                node.end_line = None;
                node.file = (key.kind == NodeKind::File).then(|| key.name.clone());
                node.call_file = None;
                node.call_line = None;
            }
            _ if self.tree.view == ViewKind::Callers => {
                let (file, line) = site.unwrap_or((None, None));
                node.call_file = file.map(|f| db.file(f).to_string());
                node.call_line = line;
            }
            NodeKind::Procedure | NodeKind::Unknown | NodeKind::Kernel => {
                node.call_file = None;
                node.call_line = None;
            }
            _ => {}
        }
        let id = self.tree.nodes.len();
        self.tree.nodes.push(node);
        self.tree.nodes[parent].children.push(id);
        self.index.insert((parent, key), id);
        id
    }

    /// Add database node `from`'s inclusive and exclusive costs to view node `to`.
    fn add(&mut self, to: usize, from: usize) {
        Cost::add_each(&mut self.tree.nodes[to].incl, &self.m.incl[from]);
        Cost::add_each(&mut self.tree.nodes[to].excl, &self.m.excl[from]);
    }

    /// Parent of every view node built so far.
    fn parents(&self) -> Vec<usize> {
        let mut parents = vec![0; self.tree.nodes.len()];
        for (id, n) in self.tree.nodes.iter().enumerate() {
            for &c in &n.children {
                parents[c] = id;
            }
        }
        parents
    }

    fn finish(mut self) -> ViewTree {
        if self.tree.view == ViewKind::Callers {
            let total = self.m.incl[0].clone();
            self.tree.nodes[0].incl = total;
        }
        sort_children(&mut self.tree);
        self.tree
    }
}

fn new_tree(db: &Database, view: ViewKind, root: ViewNode) -> ViewTree {
    ViewTree {
        view,
        metrics: db.metrics.clone(),
        nodes: vec![root],
    }
}

/// A view node showing database node `id` with its top-down metrics.
fn db_view_node(db: &Database, id: NodeId, m: &NodeMetrics) -> ViewNode {
    let n = &db.nodes[id as usize];
    let file = n.file.map(|f| db.file(f).to_string());
    ViewNode {
        kind: n.kind,
        name: label_for(n.kind, &n.name, file.as_deref().map(base_name), n.line),
        module: n.module.map(|m| db.module_path(m).to_string()),
        file,
        line: n.line,
        end_line: n.end_line,
        call_file: n.call_file.map(|f| db.file(f).to_string()),
        call_line: n.call_line,
        incl: m.incl[id as usize].clone(),
        excl: m.excl[id as usize].clone(),
        children: Vec::new(),
        source: Some(id),
    }
}

fn is_zero(costs: &[Cost]) -> bool {
    costs.iter().all(|c| c.samples == 0 && c.value == 0)
}

/// Sort every node's children by inclusive value of metric 0 (then samples), descending, ties
/// by name.
fn sort_children(tree: &mut ViewTree) {
    let rank = |n: &ViewNode| n.incl.first().map_or((0, 0), |c| (c.value, c.samples));
    for id in 0..tree.nodes.len() {
        let mut children = std::mem::take(&mut tree.nodes[id].children);
        children.sort_by(|&a, &b| {
            let (na, nb) = (&tree.nodes[a], &tree.nodes[b]);
            rank(nb).cmp(&rank(na)).then_with(|| na.name.cmp(&nb.name))
        });
        tree.nodes[id].children = children;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::{ChildIndex, ModuleDesc, NodeKey, StructureSource, ThreadDesc};
    use profiler::db::Sampling;

    /// A small database: `main` with a loop and two calls to `f`, one of which recurses.
    struct Fixture {
        db: Database,
        index: ChildIndex,
    }

    impl Fixture {
        fn new() -> Fixture {
            let mut db = Database::new(vec![MetricDesc {
                name: "cpu-clock".into(),
                unit: "ns".into(),
                sampling: Sampling::Period(10),
                total: Cost::default(),
            }]);
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

        fn add(&mut self, parent: NodeId, kind: NodeKind, name: &str, line: u32) -> NodeId {
            let key = NodeKey {
                kind,
                name: name.into(),
                module: Some(0),
                file: Some(0),
                line: Some(line),
                end_line: None,
                call_file: None,
                call_line: None,
            };
            self.db.child(&mut self.index, parent, key)
        }

        fn call(&mut self, site: NodeId, name: &str) -> NodeId {
            let line = self.db.nodes[site as usize].line;
            let key = NodeKey {
                kind: NodeKind::Procedure,
                name: name.into(),
                module: Some(0),
                file: Some(0),
                line: Some(if name == "f" { 19 } else { 1 }),
                end_line: None,
                call_file: Some(0),
                call_line: line,
            };
            self.db.child(&mut self.index, site, key)
        }

        fn sample(&mut self, at: NodeId, thread: u32, samples: u64) {
            let cost = Cost {
                samples,
                value: samples * 10,
            };
            self.db.add_cost(at, thread, &[cost]);
        }
    }

    fn build() -> Database {
        let mut fx = Fixture::new();
        let main = fx.call(0, "main");
        let lp = fx.add(main, NodeKind::Loop, "", 5);
        let s6 = fx.add(lp, NodeKind::Statement, "", 6);
        fx.sample(s6, 0, 1);
        let s7 = fx.add(lp, NodeKind::Statement, "", 7);
        let f7 = fx.call(s7, "f");
        let f7s = fx.add(f7, NodeKind::Statement, "", 20);
        fx.sample(f7s, 0, 3);
        let s9 = fx.add(main, NodeKind::Statement, "", 9);
        let f9 = fx.call(s9, "f");
        let f9s = fx.add(f9, NodeKind::Statement, "", 20);
        fx.sample(f9s, 1, 6);
        let s21 = fx.add(f9, NodeKind::Statement, "", 21);
        let inner = fx.call(s21, "f");
        let inner_s = fx.add(inner, NodeKind::Statement, "", 20);
        fx.sample(inner_s, 1, 2);
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
