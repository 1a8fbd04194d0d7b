//! The presentation tree: one view of a database (top-down, callers or flat), ready to print.
//!
//! Every renderer (text, JSON, folded stacks, source) works on a [`ViewTree`], so the three
//! output formats cannot disagree about what a view contains. The tree's serialized form *is* the
//! `hpcview-rs --json` contract of DESIGN.md: `metrics`, `view`, and a `root` node whose nodes carry
//! `kind`, `name`, `incl`/`excl` (one number per metric, in event units), `children` sorted by
//! inclusive cost, and, where known, `module`, `file`, `line`, `end_line`, `call_file` and
//! `call_line`.
//!
//! Besides the serialized fields each node keeps what was sampled *directly* at it
//! ([`ViewNode::own`]: value and sample count per metric). That is what folded stacks count and
//! what lets tests check `incl == own + sum(children incl)` at every node.

use serde::{Deserialize, Serialize};

use profiler::db::{Cost, Sampling};

use crate::database::{self, Database, Selection};
use crate::projection;

/// What a scope in a view is. Serialized in lower case (`"procedure"`, `"loop"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// The program root: the whole run.
    Root,
    /// A procedure frame (top-down), a procedure (callers, flat) or a calling procedure (callers).
    Procedure,
    /// Code inlined into its parent, with the call site in `call_file`/`call_line`.
    Inlined,
    /// A loop, `line` being its header's source line.
    Loop,
    /// A source line: where samples landed or where a call was made.
    Statement,
    /// A load module (flat view).
    Module,
    /// A source file (flat view).
    File,
    /// Something without structure: an unknown procedure, `<partial call paths>`, the kernel.
    Unknown,
}

/// Which of hpcviewer's three views a tree is. Serialized as `"top-down"`, `"callers"`, `"flat"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// What was sampled directly at one node for one metric (not through any child).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Own {
    /// Summed value, in the metric's unit.
    pub value: u64,
    /// Number of samples.
    pub samples: u64,
}

/// One row of a view: a scope with its costs and its children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewNode {
    /// What the scope is.
    pub kind: NodeKind,
    /// Procedure name, file or module path, or a placeholder such as `<partial call paths>`.
    pub name: String,
    /// Path of the load module the scope belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Source file of the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// First source line of the scope (a loop's header, a procedure's declaration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Last source line of the scope, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
    /// File of the call site in the parent (procedure and inlined nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_file: Option<String>,
    /// Line of the call site in the parent (procedure and inlined nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_line: Option<u32>,
    /// Inclusive cost per metric: everything at or below this scope.
    pub incl: Vec<u64>,
    /// Exclusive cost per metric (see DESIGN.md: a procedure's own code including its loops and
    /// inlined code; a loop's or line's cost in that scope itself).
    pub excl: Vec<u64>,
    /// What was sampled directly at this node, per metric; not part of the JSON contract.
    #[serde(skip)]
    pub own: Vec<Own>,
    /// Child scopes, sorted by inclusive cost of the first metric, descending.
    pub children: Vec<ViewNode>,
}

/// A complete view: its metrics, which view it is, and its tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewTree {
    /// The metrics, in the order of every node's `incl` and `excl` arrays.
    pub metrics: Vec<MetricInfo>,
    /// Which view this is.
    pub view: ViewKind,
    /// The program root.
    pub root: ViewNode,
}

impl ViewNode {
    /// A node of `kind` named `name` with zero costs for `metrics` metrics and no location.
    pub fn new(kind: NodeKind, name: impl Into<String>, metrics: usize) -> Self {
        ViewNode {
            kind,
            name: name.into(),
            module: None,
            file: None,
            line: None,
            end_line: None,
            call_file: None,
            call_line: None,
            incl: vec![0; metrics],
            excl: vec![0; metrics],
            own: vec![Own::default(); metrics],
            children: Vec::new(),
        }
    }

    /// The label hpcviewer gives an unknown procedure: `<unknown procedure> 0xADDR [module]`.
    pub fn unknown_procedure_name(addr: u64, module: Option<&str>) -> String {
        match module {
            Some(m) => format!("<unknown procedure> {addr:#x} [{}]", base_name(m)),
            None => format!("<unknown procedure> {addr:#x}"),
        }
    }

    /// Sort every level's children by inclusive cost of metric `metric`, descending; ties are
    /// broken by name and then line so that output is deterministic.
    pub fn sort_by_inclusive(&mut self, metric: usize) {
        let key = |n: &ViewNode| n.incl.get(metric).copied().unwrap_or(0);
        self.children.sort_by(|a, b| {
            key(b)
                .cmp(&key(a))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.line.cmp(&b.line))
        });
        for child in &mut self.children {
            child.sort_by_inclusive(metric);
        }
    }

    /// Keep only the metrics at `indices` (in that order) in this node and all below.
    pub fn select_metrics(&mut self, indices: &[usize]) {
        self.incl = indices.iter().map(|&i| self.incl[i]).collect();
        self.excl = indices.iter().map(|&i| self.excl[i]).collect();
        if !self.own.is_empty() {
            self.own = indices.iter().map(|&i| self.own[i]).collect();
        }
        for child in &mut self.children {
            child.select_metrics(indices);
        }
    }

    /// Sum of the children's inclusive values for metric `metric`.
    pub fn children_inclusive(&self, metric: usize) -> u64 {
        self.children.iter().map(|c| c.incl[metric]).sum()
    }

    /// Number of nodes in this subtree, this one included.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(ViewNode::count).sum::<usize>()
    }

    /// Visit this node and every node below it, depth first, parents before children.
    pub fn walk<'a>(&'a self, visit: &mut impl FnMut(&'a ViewNode)) {
        visit(self);
        for child in &self.children {
            child.walk(visit);
        }
    }
}

impl ViewTree {
    /// Keep only the metrics at `indices`, in that order, everywhere in the view.
    pub fn select_metrics(&mut self, indices: &[usize]) {
        self.metrics = indices.iter().map(|&i| self.metrics[i].clone()).collect();
        self.root.select_metrics(indices);
    }

    /// Sort the whole tree by the first metric's inclusive cost (the order every view shows).
    pub fn sort(&mut self) {
        self.root.sort_by_inclusive(0);
    }

    /// Index of the metric named `name`, if the view has it.
    pub fn metric_index(&self, name: &str) -> Option<usize> {
        self.metrics.iter().position(|m| m.name == name)
    }
}

impl ViewTree {
    /// Present one of the database's views: `view` as computed by [`crate::projection`] for
    /// the threads in `selection`. Top-down nodes also get their directly sampled costs
    /// ([`ViewNode::own`]); the callers and flat views, whose nodes merge many contexts, leave
    /// `own` empty. Metric totals are those of the selection (the root's inclusive cost).
    pub fn from_database(db: &Database, view: ViewKind, selection: &Selection) -> ViewTree {
        let tree = match view {
            ViewKind::TopDown => projection::top_down(db, selection),
            ViewKind::Callers => projection::callers(db, selection),
            ViewKind::Flat => projection::flat(db, selection),
        };
        let own = (view == ViewKind::TopDown).then(|| db.self_costs(selection));
        let root = convert(&tree, 0, own.as_deref());
        let metrics = db
            .metrics
            .iter()
            .zip(&tree.root().incl)
            .map(|(m, total)| MetricInfo {
                name: m.name.clone(),
                unit: m.unit.clone(),
                period: match m.sampling {
                    Sampling::Period(p) => Some(p),
                    // The kernel turns a clock's frequency into a fixed period in ns.
                    Sampling::Frequency(hz) if m.unit == "ns" && hz > 0 => Some(1_000_000_000 / hz),
                    Sampling::Frequency(_) => None,
                },
                total: total.value,
                samples: total.samples,
            })
            .collect();
        let mut out = ViewTree {
            metrics,
            view,
            root,
        };
        out.sort();
        out
    }
}

/// The presentation node for node `id` of a projected view, with its subtree. `self_costs`
/// holds the database's per-node self costs when the view is top-down.
fn convert(tree: &projection::ViewTree, id: usize, self_costs: Option<&[Vec<Cost>]>) -> ViewNode {
    let n = &tree.nodes[id];
    let (kind, name) = kind_and_name(n);
    let values = |costs: &[Cost]| costs.iter().map(|c| c.value).collect();
    let own = match (self_costs, n.source) {
        (Some(costs), Some(src)) => costs[src as usize]
            .iter()
            .map(|c| Own {
                value: c.value,
                samples: c.samples,
            })
            .collect(),
        _ => Vec::new(),
    };
    ViewNode {
        kind,
        name,
        module: n.module.clone(),
        file: n.file.clone(),
        line: n.line,
        end_line: n.end_line,
        call_file: n.call_file.clone(),
        call_line: n.call_line,
        incl: values(&n.incl),
        excl: values(&n.excl),
        own,
        children: n
            .children
            .iter()
            .map(|&c| convert(tree, c, self_costs))
            .collect(),
    }
}

/// The presentation kind and name of a projected node. Procedures and inlined code are named by
/// their procedure (the `[I] ` mark is the renderers' business), `<partial call paths>` is an
/// `unknown` scope (it has no structure), and `<kernel>` a procedure.
fn kind_and_name(n: &projection::ViewNode) -> (NodeKind, String) {
    use database::NodeKind as Db;
    let kind = match n.kind {
        Db::Root => NodeKind::Root,
        Db::Procedure | Db::Kernel => NodeKind::Procedure,
        Db::Inlined => NodeKind::Inlined,
        Db::Loop => NodeKind::Loop,
        Db::Statement => NodeKind::Statement,
        Db::Module => NodeKind::Module,
        Db::File => NodeKind::File,
        Db::Partial | Db::Unknown => NodeKind::Unknown,
    };
    let name = match n.kind {
        Db::Inlined => n.name.strip_prefix(INLINE_LABEL).unwrap_or(&n.name),
        _ => &n.name,
    };
    (kind, name.to_string())
}

/// The prefix the database's labels give inlined code.
const INLINE_LABEL: &str = "[I] ";

/// The last component of a path (`/usr/lib/libc.so.6` -> `libc.so.6`); the whole string when it
/// has no `/`.
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: NodeKind, name: &str, incl: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.incl[0] = incl;
        n
    }

    #[test]
    fn sorting_orders_every_level_by_inclusive_descending() {
        let mut root = node(NodeKind::Root, "<program root>", 10);
        let mut a = node(NodeKind::Procedure, "a", 3);
        a.children = vec![
            node(NodeKind::Statement, "s1", 1),
            node(NodeKind::Statement, "s2", 2),
        ];
        root.children = vec![a, node(NodeKind::Procedure, "b", 7)];
        root.sort_by_inclusive(0);
        let names: Vec<_> = root.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(root.children[1].children[0].name, "s2");
    }

    #[test]
    fn json_uses_the_contract_names_and_omits_unknown_locations() {
        let mut n = node(NodeKind::Loop, "loop", 5);
        n.file = Some("/src/app.cc".into());
        n.line = Some(19);
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["kind"], "loop");
        assert_eq!(v["line"], 19);
        assert!(v.get("call_line").is_none());
        assert!(v.get("own").is_none());
        let view = serde_json::to_value(ViewKind::TopDown).unwrap();
        assert_eq!(view, "top-down");
    }

    #[test]
    fn selecting_metrics_reorders_every_array() {
        let mut n = ViewNode::new(NodeKind::Procedure, "f", 3);
        n.incl = vec![1, 2, 3];
        n.excl = vec![4, 5, 6];
        n.children.push(n.clone());
        n.select_metrics(&[2, 0]);
        assert_eq!(n.incl, [3, 1]);
        assert_eq!(n.children[0].excl, [6, 4]);
    }

    #[test]
    fn unknown_procedures_are_labelled_like_hpcviewer() {
        let name = ViewNode::unknown_procedure_name(0x1a2b, Some("/usr/lib/libm.so.6"));
        assert_eq!(name, "<unknown procedure> 0x1a2b [libm.so.6]");
    }
}
