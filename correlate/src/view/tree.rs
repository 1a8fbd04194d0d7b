//! The view model: one view of a database (top-down, callers or flat) as a tree of scopes with
//! their costs, built directly by the projections ([`crate::top_down`], [`crate::callers`],
//! [`crate::flat`]) and printed by every renderer (text, JSON, folded stacks, source), so the
//! outputs cannot disagree about what a view contains.
//!
//! A [`ViewTree`] is an arena of [`ViewNode`]s, node 0 the program root, children listed by
//! index in display order (inclusive cost of the first metric, descending). Each node carries
//! what `hpcview-rs --json` prints (kind, name, location, call site, inclusive and exclusive
//! cost per metric; see [`crate::json`]) and, in the top-down view, what was sampled directly at
//! it ([`ViewNode::own`]), which folded stacks count and which lets tests check
//! `incl == own + sum(children incl)` at every node.

use std::cmp::Ordering;

use profiler::db::{Cost, Sampling};

use crate::view::formula::Derived;
use serde::Serialize;

use crate::db::database::{Database, MetricDesc};
use crate::db::label;
use crate::db::node::NodeKind;

/// Which of hpcviewer's three views a tree is. Serialized as `"top-down"`, `"callers"`, `"flat"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ViewKind {
    /// Calling contexts, from the program root down.
    #[serde(rename = "top-down")]
    TopDown,
    /// Bottom-up: each procedure, then who called it.
    #[serde(rename = "callers")]
    Callers,
    /// Static structure: module > file > procedure > loops, inlined code and lines.
    #[serde(rename = "flat")]
    Flat,
}

impl ViewKind {
    /// The name used in headers and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ViewKind::TopDown => "top-down",
            ViewKind::Callers => "callers",
            ViewKind::Flat => "flat",
        }
    }
}

/// One metric (sampled event) of a view: what its numbers mean and what they add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricInfo {
    /// The event's name, e.g. `cpu-clock`.
    pub name: String,
    /// Unit of the values: `ns` for clocks, `events` otherwise.
    pub unit: String,
    /// Events per sample: the fixed period, or for a clock sampled at a frequency its period in
    /// ns (1e9 / frequency); `null` for other events sampled at a frequency (the kernel varies
    /// their period).
    pub period: Option<u64>,
    /// The metric's total over the view, in `unit` (the root's inclusive value).
    pub total: u64,
    /// The number of samples behind `total`.
    pub samples: u64,
    /// For an event group's member: the metric whose samples read it (it is counted, not
    /// sampled; `samples` are those of the leader that carried some of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_with: Option<String>,
}

impl MetricInfo {
    /// The view's description of database metric `desc` whose total in the view is `total`.
    pub(crate) fn of(desc: &MetricDesc, total: Cost) -> MetricInfo {
        MetricInfo {
            name: desc.name.clone(),
            unit: desc.unit.clone(),
            period: match desc.sampling {
                Sampling::Period(p) => Some(p),
                // The kernel turns a clock's frequency into a fixed period in ns.
                Sampling::Frequency(hz) if desc.unit == "ns" && hz > 0 => Some(1_000_000_000 / hz),
                Sampling::Frequency(_) => None,
            },
            total: total.value,
            samples: total.samples,
            read_with: None,
        }
    }

    /// [`MetricInfo::of`] for metric `m` of `db`, with the metric whose samples read it, if any.
    pub(crate) fn of_metric(db: &Database, m: usize, total: Cost) -> MetricInfo {
        MetricInfo {
            read_with: leader_of(db, m),
            ..MetricInfo::of(&db.metrics[m], total)
        }
    }
}

/// The name of the metric whose samples read metric `m` of `db` (an event group's member), if
/// any.
pub(crate) fn leader_of(db: &Database, m: usize) -> Option<String> {
    let leader = (db.read_with.iter()).find(|&&(member, _)| member as usize == m);
    leader.map(|&(_, l)| db.metrics[l as usize].name.clone())
}

/// One row of a view: a scope with its costs and its children.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewNode {
    /// What the scope is (the flat view adds `Module` and `File`).
    pub kind: NodeKind,
    /// The scope's name, by hpcviewer's rules: a procedure's name (also for inlined code),
    /// `loop at a.cc: 17`, `a.cc: 17`, a module or file path, or a placeholder such as
    /// `<partial call paths>`. [`ViewNode::label`] is what people read.
    pub name: String,
    /// Path of the load module the scope belongs to, where known.
    pub module: Option<String>,
    /// Source file of the scope (full path), where known.
    pub file: Option<String>,
    /// First source line of the scope (a loop's header, a procedure's declaration), where known.
    pub line: Option<u32>,
    /// Last source line of the scope, where known.
    pub end_line: Option<u32>,
    /// Top-down and flat: for procedure and inlined frames, the call site in the parent.
    /// Callers view: for a caller node, the call site in this caller that led to its parent in
    /// the view (the callee).
    pub call_file: Option<String>,
    /// Line of the call site; see [`ViewNode::call_file`].
    pub call_line: Option<u32>,
    /// Inclusive cost per metric: everything at or below this scope.
    pub incl: Vec<Cost>,
    /// Exclusive cost per metric (see DESIGN.md: a procedure's own code including its loops and
    /// inlined code; a loop's or line's cost in that scope itself).
    pub excl: Vec<Cost>,
    /// What was sampled directly at this node, per metric: top-down view only (zero in the
    /// callers and flat views, whose nodes merge many contexts).
    pub own: Vec<Cost>,
    /// Children (indices into [`ViewTree::nodes`]), in display order.
    pub children: Vec<usize>,
}

impl ViewNode {
    /// A node of `kind` named `name` with zero costs for `metrics` metrics and no location.
    pub fn new(kind: NodeKind, name: impl Into<String>, metrics: usize) -> ViewNode {
        let zero = vec![Cost::default(); metrics];
        ViewNode {
            kind,
            name: name.into(),
            module: None,
            file: None,
            line: None,
            end_line: None,
            call_file: None,
            call_line: None,
            incl: zero.clone(),
            excl: zero.clone(),
            own: zero,
            children: Vec::new(),
        }
    }

    /// The label people read: `[I] name` for inlined code, a module's or file's base name, the
    /// name otherwise (as the text view prints it with `--full-names`).
    pub fn label(&self) -> String {
        self.label_within(None)
    }

    /// [`ViewNode::label`] with procedure names shortened to `width` characters, if given.
    pub(crate) fn label_within(&self, width: Option<usize>) -> String {
        label::display(self.kind, &self.name, width)
    }

    /// The call site recorded with the node, as `file: line`.
    pub(crate) fn call_site(&self) -> Option<String> {
        label::call_site(self.call_file.as_deref(), self.call_line)
    }
}

/// A complete view: its metrics, which view it is, and its tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewTree {
    /// Which view this is.
    pub view: ViewKind,
    /// The metrics, in the order of every node's `incl`, `excl` and `own`.
    pub metrics: Vec<MetricInfo>,
    /// The nodes; `nodes[0]` is the program root.
    pub nodes: Vec<ViewNode>,
    /// Metrics computed from `metrics` by formula (`--metric 'NAME = FORMULA'`), shown after
    /// them; each formula reads `metrics` by position.
    pub derived: Vec<Derived>,
}

impl ViewTree {
    /// A tree holding only `root`.
    pub(crate) fn new(view: ViewKind, metrics: Vec<MetricInfo>, root: ViewNode) -> ViewTree {
        ViewTree {
            view,
            metrics,
            nodes: vec![root],
            derived: Vec::new(),
        }
    }

    /// Add `node` as the last child of `parent`; returns its index.
    pub(crate) fn push(&mut self, parent: usize, node: ViewNode) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        self.nodes[parent].children.push(id);
        id
    }

    /// The root node.
    pub fn root(&self) -> &ViewNode {
        &self.nodes[0]
    }

    /// The children of node `id`, in display order.
    pub fn children(&self, id: usize) -> impl Iterator<Item = (usize, &ViewNode)> {
        self.nodes[id].children.iter().map(|&c| (c, &self.nodes[c]))
    }

    /// The first node (depth-first, display order) satisfying `pred`.
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

    /// Keep only the metrics at `indices`, in that order, everywhere in the view; the first of
    /// them then orders the children.
    pub fn select_metrics(&mut self, indices: &[usize]) {
        if indices.iter().copied().eq(0..self.metrics.len()) {
            return;
        }
        let pick = |costs: &[Cost]| indices.iter().map(|&i| costs[i]).collect();
        self.metrics = indices.iter().map(|&i| self.metrics[i].clone()).collect();
        for n in &mut self.nodes {
            n.incl = pick(&n.incl);
            n.excl = pick(&n.excl);
            n.own = pick(&n.own);
        }
        self.sort();
    }

    /// Put every node's children in display order (see [`ViewTree::display_order`]).
    pub(crate) fn sort(&mut self) {
        for id in 0..self.nodes.len() {
            let mut children = std::mem::take(&mut self.nodes[id].children);
            children.sort_by(|&a, &b| self.display_order(&self.nodes[a], &self.nodes[b]));
            self.nodes[id].children = children;
        }
    }

    /// The order of siblings: inclusive value of the first metric, descending; ties by name,
    /// begin line, samples (descending), label, then call site, module and file, so that output
    /// is deterministic (not dependent on the order the nodes were made in).
    fn display_order(&self, a: &ViewNode, b: &ViewNode) -> Ordering {
        let first = |n: &ViewNode| n.incl.first().copied().unwrap_or_default();
        let (ca, cb) = (first(a), first(b));
        cb.value
            .cmp(&ca.value)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.line.cmp(&b.line))
            .then_with(|| cb.samples.cmp(&ca.samples))
            .then_with(|| a.label().cmp(&b.label()))
            .then_with(|| (&a.call_file, a.call_line).cmp(&(&b.call_file, b.call_line)))
            .then_with(|| (&a.module, &a.file).cmp(&(&b.module, &b.file)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A cost of `value` samples and `value` in all (the view and shaping tests add these up).
    pub(crate) fn cost(value: u64) -> Cost {
        Cost {
            samples: value,
            value,
        }
    }

    fn node(kind: NodeKind, name: &str, incl: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.incl[0] = cost(incl);
        n
    }

    fn tree(root: ViewNode) -> ViewTree {
        ViewTree::new(ViewKind::TopDown, Vec::new(), root)
    }

    #[test]
    fn sorting_orders_every_level_by_inclusive_descending() {
        let mut t = tree(node(NodeKind::Root, "<program root>", 10));
        let a = t.push(0, node(NodeKind::Procedure, "a", 3));
        t.push(a, node(NodeKind::Statement, "s1", 1));
        t.push(a, node(NodeKind::Statement, "s2", 2));
        t.push(0, node(NodeKind::Procedure, "b", 7));
        t.sort();
        let names: Vec<_> = t.children(0).map(|(_, c)| c.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(t.children(a).next().unwrap().1.name, "s2");
    }

    #[test]
    fn selecting_metrics_reorders_every_array() {
        let mut n = ViewNode::new(NodeKind::Procedure, "f", 3);
        n.incl = [1, 2, 3].map(cost).to_vec();
        n.excl = [4, 5, 6].map(cost).to_vec();
        let info = |name: &str| MetricInfo {
            name: name.into(),
            unit: "events".into(),
            period: None,
            total: 0,
            samples: 0,
            read_with: None,
        };
        let mut t = ViewTree::new(
            ViewKind::Flat,
            vec![info("a"), info("b"), info("c")],
            n.clone(),
        );
        t.push(0, n);
        t.select_metrics(&[2, 0]);
        assert_eq!(t.nodes[0].incl, [cost(3), cost(1)]);
        assert_eq!(t.nodes[1].excl, [cost(6), cost(4)]);
        assert_eq!(t.metrics[0].name, "c");
    }

    #[test]
    fn labels_mark_inlined_code_and_shorten_paths() {
        let inlined = ViewNode::new(NodeKind::Inlined, "Mp::add", 1);
        assert_eq!(inlined.label(), "[I] Mp::add");
        let module = ViewNode::new(NodeKind::Module, "/usr/lib/libm.so.6", 1);
        assert_eq!(module.label(), "libm.so.6");
        let mut f = ViewNode::new(NodeKind::Procedure, "f", 1);
        assert_eq!(f.call_site(), None);
        f.call_file = Some("/a/b/main.c".into());
        f.call_line = Some(12);
        assert_eq!(f.call_site().unwrap(), "main.c: 12");
    }
}
