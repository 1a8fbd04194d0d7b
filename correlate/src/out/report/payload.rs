//! The data a report carries: the three views of a database, per-thread costs where there are
//! several threads, the per-line costs and text of the source files, and the data objects and
//! timeline and memory map where the database has them (`panes`), serialized as the JSON
//! that the page's script reads (`report.js` documents the field names it uses).

use std::collections::{BTreeMap, HashMap};

use fxhash::FxHashMap;
use std::fs;

use rayon::prelude::*;
use serde::Serialize;

use super::panes::{memmap_svg, object_rows, timeline_svg, ObjectData};
use crate::db::database::{Database, Selection};
use crate::db::ids::ThreadIdx;
use crate::db::node::NodeKind;
use crate::out::render::json::contract_kind;
use crate::out::render::printable;
use crate::out::render::source::{add_line_costs, LineCost};
use crate::view::asm::{hottest, AsmView};
use crate::view::formula::Derived;
use crate::view::tree::{MetricInfo, ViewKind, ViewNode, ViewTree};

/// Procedure names are shortened to this many characters, as in the text view.
const NAME_WIDTH: usize = 70;

/// Limits on the source text a report embeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// A file larger than this many bytes is not embedded.
    pub file_bytes: u64,
    /// Files are embedded until their total would pass this many bytes.
    pub total_bytes: u64,
}

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits {
            file_bytes: 1 << 20,
            total_bytes: 16 << 20,
        }
    }
}

/// Everything the page shows.
#[derive(Serialize)]
pub(crate) struct Payload {
    /// The measured command line.
    pub(crate) command: String,
    pub(crate) metrics: Vec<MetricInfo>,
    /// The derived metrics, computed by the page from each row's metric values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) derived: Vec<DerivedData>,
    /// One label per thread (`tid 123 name`), in the order of the nodes' `th` entries.
    pub(crate) threads: Vec<String>,
    /// Scopes per view.
    pub(crate) scopes: Vec<usize>,
    /// The views, each written in an element of its own (parsed when first shown).
    #[serde(skip)]
    pub(crate) views: Vec<ViewData>,
    pub(crate) files: Vec<SourceFile>,
    /// The data objects' pane (`hpcrun-rs --data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) objects: Option<Vec<ObjectData>>,
    /// The timeline pane's picture (`hpcrun-rs -t`), SVG markup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeline: Option<String>,
    /// The memory map pane's picture (`hpcrun-rs -t --data`), SVG markup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) memmap: Option<String>,
    /// The machine-code pane's listings (`hpcview-rs --asm`'s, as `--json` writes them) of the
    /// hottest procedures whose binaries are here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) asm: Vec<AsmView>,
}

/// Procedures whose machine code a report embeds, at most.
const LISTINGS: usize = 8;
/// The least share of the first metric a procedure's instructions must hold to be listed.
const LISTED_SHARE: f64 = 0.01;

/// A derived metric: its name, its formula as written, and the formula as the page's script
/// evaluates it ([`Derived::script_tree`]).
#[derive(Serialize)]
pub(crate) struct DerivedData {
    name: String,
    formula: String,
    expr: serde_json::Value,
}

/// One view's nodes; node 0 is the root.
#[derive(Serialize)]
pub(crate) struct ViewData {
    pub(crate) name: &'static str,
    pub(crate) nodes: Vec<NodeData>,
}

/// One scope, with short field names: a report holds hundreds of thousands of them.
#[derive(Serialize)]
pub(crate) struct NodeData {
    /// Kind: procedure, inlined, loop, statement, module, file, kernel, unknown, root.
    k: &'static str,
    /// The label, as the text view prints it.
    n: String,
    /// The full label, where the text view shortens it.
    #[serde(skip_serializing_if = "Option::is_none")]
    full: Option<String>,
    /// Call site, `file: line` (procedures and inlined code).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    /// Source file (index into `files`) and line that the source pane shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    f: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    l: Option<u32>,
    /// Inclusive and exclusive values per metric.
    i: Vec<u64>,
    e: Vec<u64>,
    /// Children, in display order.
    c: Vec<usize>,
    /// Per thread with a cost here: `[thread, incl..., excl...]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    th: Vec<Vec<u64>>,
}

/// One source file the views name: its per-line costs (as `hpcview-rs --source`) and its text.
#[derive(Serialize)]
pub(crate) struct SourceFile {
    pub(crate) path: String,
    /// Line number to `[incl..., excl...]` per metric.
    lines: BTreeMap<u32, Vec<u64>>,
    /// The file's text, if embedded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    /// Why the text is not embedded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
}

/// The payload of `db` restricted to the metrics at `metrics`, with the `derived` ones (read
/// against the names of those).
pub(crate) fn build(
    db: &Database,
    metrics: &[usize],
    derived: &[Derived],
    limits: SourceLimits,
) -> Payload {
    let view = |kind| {
        let mut v = ViewTree::from_database(db, kind, &Selection::All);
        v.select_metrics(metrics);
        v
    };
    let trees = [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat].map(view);
    let mut files = FileTable::default();
    let mut views: Vec<ViewData> = trees.iter().map(|t| view_data(t, &mut files)).collect();
    if db.threads.len() > 1 {
        for (tree, data) in trees.iter().zip(&mut views) {
            add_thread_costs(db, metrics, tree, data);
        }
    }
    Payload {
        command: db.command.join(" "),
        metrics: trees[0].metrics.clone(),
        derived: (derived.iter())
            .map(|d| DerivedData {
                name: d.name.clone(),
                formula: d.formula.clone(),
                expr: d.script_tree(),
            })
            .collect(),
        threads: db
            .threads
            .iter()
            .map(|t| format!("tid {} {}", t.tid, printable(&t.comm)))
            .collect(),
        scopes: views.iter().map(|v| v.nodes.len()).collect(),
        views,
        files: files.sources(&trees[2], limits),
        objects: object_rows(db, metrics),
        timeline: timeline_svg(db),
        memmap: memmap_svg(db),
        asm: hottest(db, LISTINGS, LISTED_SHARE),
    }
}

/// File paths, numbered in the order first met.
#[derive(Default)]
struct FileTable {
    paths: Vec<String>,
    index: HashMap<String, usize>,
}

impl FileTable {
    fn id(&mut self, path: &str) -> usize {
        if let Some(&id) = self.index.get(path) {
            return id;
        }
        self.paths.push(path.to_string());
        self.index.insert(path.to_string(), self.paths.len() - 1);
        self.paths.len() - 1
    }

    /// Each file's line costs from `flat` (the view `--source` reads) and, within `limits`,
    /// its text.
    fn sources(self, flat: &ViewTree, limits: SourceLimits) -> Vec<SourceFile> {
        let mut budget = limits.total_bytes;
        self.paths
            .into_iter()
            .map(|path| {
                let mut costs = BTreeMap::new();
                add_line_costs(flat, &path, &mut costs);
                let lines = costs
                    .into_iter()
                    .map(|(line, LineCost { incl, excl })| (line, [incl, excl].concat()))
                    .collect();
                let (text, skipped) = match source_text(&path, limits.file_bytes, budget) {
                    Ok(text) => {
                        budget -= text.len() as u64;
                        (Some(text), None)
                    }
                    Err(why) => (None, Some(why)),
                };
                SourceFile {
                    path,
                    lines,
                    text,
                    skipped,
                }
            })
            .collect()
    }
}

/// The text of the file at `path` if it exists, is UTF-8 and fits in `limit` and `budget`
/// bytes; otherwise why not.
fn source_text(path: &str, limit: u64, budget: u64) -> Result<String, String> {
    let meta = fs::metadata(path).map_err(|_| "not found on the machine that made the report")?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > limit {
        return Err(format!("{} bytes, over the {limit}-byte limit", meta.len()));
    }
    if meta.len() > budget {
        return Err("the report's source budget is spent".into());
    }
    fs::read_to_string(path).map_err(|e| format!("unreadable: {e}"))
}

/// The page's nodes of `tree`, naming their files in `files`.
fn view_data(tree: &ViewTree, files: &mut FileTable) -> ViewData {
    let nodes = tree.nodes.iter().map(|n| node_data(n, files)).collect();
    ViewData {
        name: tree.view.name(),
        nodes,
    }
}

fn node_data(n: &ViewNode, files: &mut FileTable) -> NodeData {
    let label = printable(&n.label_within(Some(NAME_WIDTH))).into_owned();
    let full = printable(&n.label()).into_owned();
    let (file, line) = match n.kind {
        NodeKind::Inlined => (n.call_file.as_deref(), n.call_line),
        _ => (n.file.as_deref(), n.line),
    };
    let framed = matches!(
        n.kind,
        NodeKind::Procedure | NodeKind::Kernel | NodeKind::Inlined
    );
    NodeData {
        k: kind_name(n.kind),
        full: (full != label).then_some(full),
        n: label,
        s: framed.then(|| n.call_site()).flatten(),
        f: file.map(|f| files.id(f)),
        l: line,
        i: n.incl.iter().map(|c| c.value).collect(),
        e: n.excl.iter().map(|c| c.value).collect(),
        c: n.children.clone(),
        th: Vec::new(),
    }
}

/// The kind names the page colours by: the JSON contract's, with the kernel apart.
fn kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Kernel => "kernel",
        kind => contract_kind(kind),
    }
}

/// A node's identity among its siblings, to find it again in one thread's view.
fn sibling_key(n: &ViewNode) -> (NodeKind, &str, Option<u32>, Option<&str>, Option<u32>) {
    (n.kind, &n.name, n.line, n.call_file.as_deref(), n.call_line)
}

/// Add each thread's costs to the nodes of `data` (the view `tree` of all threads): the view of
/// that thread alone (projected in parallel), matched node by node along the path from the root.
fn add_thread_costs(db: &Database, metrics: &[usize], tree: &ViewTree, data: &mut ViewData) {
    let mut child_of = FxHashMap::default();
    for (id, n) in tree.nodes.iter().enumerate() {
        for &c in &n.children {
            child_of.insert((id, sibling_key(&tree.nodes[c])), c);
        }
    }
    let per_thread: Vec<ViewTree> = (0..db.threads.len())
        .into_par_iter()
        .map(|t| {
            let only = Selection::Threads(vec![ThreadIdx(t as u32)]);
            let mut one = ViewTree::from_database(db, tree.view, &only);
            one.select_metrics(metrics);
            one
        })
        .collect();
    for (t, one) in per_thread.iter().enumerate() {
        let mut stack = vec![(0usize, 0usize)];
        while let Some((mine, all)) = stack.pop() {
            let n = &one.nodes[mine];
            let mut row = vec![t as u64];
            row.extend(n.incl.iter().chain(&n.excl).map(|c| c.value));
            data.nodes[all].th.push(row);
            for &c in &n.children {
                if let Some(&a) = child_of.get(&(all, sibling_key(&one.nodes[c]))) {
                    stack.push((c, a));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_embedded_within_the_limits_and_skipped_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.c");
        let big = dir.path().join("big.c");
        fs::write(&small, "int main;\n").unwrap();
        fs::write(&big, "x".repeat(100)).unwrap();
        let text =
            |p: &std::path::Path, limit, budget| source_text(p.to_str().unwrap(), limit, budget);
        assert_eq!(text(&small, 50, 1000).unwrap(), "int main;\n");
        assert_eq!(
            text(&big, 50, 1000).unwrap_err(),
            "100 bytes, over the 50-byte limit"
        );
        assert_eq!(
            text(&small, 50, 5).unwrap_err(),
            "the report's source budget is spent"
        );
        let missing = dir.path().join("gone.c");
        assert_eq!(
            text(&missing, 50, 1000).unwrap_err(),
            "not found on the machine that made the report"
        );
        assert_eq!(
            text(dir.path(), 50, 1000).unwrap_err(),
            "not a regular file"
        );
    }
}
