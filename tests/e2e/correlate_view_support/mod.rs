//! Shared checks for the `hpcview-rs` tests: running the tool, reading its text rows, the JSON
//! contract, view consistency, folded-stack format and flame-graph rendering.

pub mod labels;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use correlate::{NodeKind, ViewKind, ViewNode, ViewTree};
use serde_json::Value;

use crate::support::{compile, run_ok, scratch_dir, tool_command};

/// One `hpcview-rs` run.
pub struct ViewRun {
    pub stdout: String,
    pub stderr: String,
}

/// Compile fixture `source` as `name` with `flags` in test `test`'s scratch directory, measure
/// `name ARGS` with `hpcrun-rs -e cpu-clock@f4000` (a few hundred samples per tenth of a second
/// of CPU time) and correlate it without the structure cache; returns the scratch directory and
/// the database (`NAME.hpcdb`). The program's output is kept in `NAME.stdout`.
pub fn measured_database(
    test: &str,
    source: &str,
    name: &str,
    flags: &[&str],
    args: &[&str],
) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let exe = compile(source, &dir, name, flags);
    let profile = dir.join(format!("{name}.db"));
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock@f4000", "-o"])
            .arg(&profile)
            .arg(&exe)
            .args(args),
    );
    std::fs::write(dir.join(format!("{name}.stdout")), stdout).unwrap();
    let db = dir.join(format!("{name}.hpcdb"));
    run_ok(
        tool_command("hpcprof-rs")
            .arg("--no-cache")
            .arg(&profile)
            .arg("-o")
            .arg(&db),
    );
    (dir, db)
}

/// Run `hpcview` on `db` with `args`; it must succeed.
pub fn run_view(hpcview: &Path, db: &Path, args: &[&str]) -> ViewRun {
    let out = Command::new(hpcview)
        .arg(db)
        .args(args)
        .output()
        .expect("run hpcview-rs");
    let run = ViewRun {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.success(),
        "hpcview-rs {args:?} failed: {}",
        run.stderr
    );
    run
}

impl ViewRun {
    /// The text view's rows as (depth, label), read from the indentation under the `scope`
    /// heading.
    pub fn rows(&self) -> Vec<(usize, String)> {
        labels::text_rows(&self.stdout)
    }

    /// The first text row whose label is exactly `label`.
    pub fn row(&self, label: &str) -> Option<String> {
        let rows = self.rows();
        let i = rows.iter().position(|(_, l)| l == label)?;
        self.stdout
            .lines()
            .filter(|l| l.trim_end().ends_with(label))
            .nth(rows[..i].iter().filter(|(_, l)| l.ends_with(label)).count())
            .map(str::to_string)
    }

    /// stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).expect("hpcview-rs --json prints JSON")
    }
}

const KINDS: &[&str] = &[
    "root",
    "procedure",
    "inlined",
    "loop",
    "statement",
    "module",
    "file",
    "unknown",
];
const FIELDS: &[&str] = &[
    "kind",
    "name",
    "incl",
    "excl",
    "children",
    "module",
    "file",
    "line",
    "end_line",
    "call_file",
    "call_line",
];

/// `hpcview-rs` names every node of every view of `db` alike in its text view (all rows, full
/// names) and its JSON (see [`labels::assert_labels_agree`]).
pub fn check_labels_cli(hpcview: &Path, db: &Path) {
    for view in [&[][..], &["--callers"], &["--flat"]] {
        let text = run_view(
            hpcview,
            db,
            &[view, &["--threshold", "0", "--full-names"]].concat(),
        );
        let json = run_view(hpcview, db, &[view, &["--json"]].concat());
        labels::assert_labels_agree(&text.stdout, &json.stdout);
    }
}

/// Check the `--json` contract of DESIGN.md: top-level `metrics`, `view`, `root`; every node with
/// a known `kind`, a `name`, `incl`/`excl` arrays of one integer per metric, `children` sorted by
/// inclusive cost, optional location fields of the right types, and nothing else.
pub fn check_schema(json: &Value, view: &str) {
    assert_eq!(json["view"], view);
    let metrics = json["metrics"].as_array().expect("metrics array");
    assert!(!metrics.is_empty());
    for m in metrics {
        assert!(m["name"].is_string() && m["unit"].is_string(), "{m}");
        assert!(m["period"].is_u64() || m["period"].is_null(), "{m}");
        assert!(m["total"].is_u64() && m["samples"].is_u64(), "{m}");
    }
    assert_eq!(json["root"]["kind"], "root");
    check_node(&json["root"], metrics.len());
}

fn check_node(node: &Value, metrics: usize) {
    let obj = node.as_object().expect("node is an object");
    for key in obj.keys() {
        assert!(
            FIELDS.contains(&key.as_str()),
            "unexpected field {key} in {node}"
        );
    }
    assert!(
        KINDS.contains(&node["kind"].as_str().expect("kind")),
        "{node}"
    );
    assert!(node["name"].is_string());
    for key in ["incl", "excl"] {
        let arr = node[key].as_array().expect("incl/excl arrays");
        assert_eq!(arr.len(), metrics);
        assert!(arr.iter().all(Value::is_u64), "{node}");
    }
    for key in ["module", "file", "call_file"] {
        assert!(
            node.get(key).is_none_or(Value::is_string),
            "{key} in {node}"
        );
    }
    for key in ["line", "end_line", "call_line"] {
        assert!(node.get(key).is_none_or(Value::is_u64), "{key} in {node}");
    }
    let children = node["children"].as_array().expect("children array");
    let incl: Vec<u64> = children
        .iter()
        .map(|c| c["incl"][0].as_u64().unwrap())
        .collect();
    assert!(
        incl.windows(2).all(|w| w[0] >= w[1]),
        "children sorted by inclusive cost: {incl:?}"
    );
    for child in children {
        check_node(child, metrics);
    }
}

/// The consistency rules every view must keep, for every metric:
/// top-down: a node's inclusive = what was sampled at it + its children's inclusive, and the
/// root's inclusive = the metric total; flat: the modules' totals (the cost of their code, i.e.
/// their exclusive values; inclusive values overlap when modules call each other, as `_start`
/// in the executable calls libc, which calls `main`) sum to the total;
/// callers: the top-level exclusive values sum to the total. In all views exclusive <= inclusive.
///
/// In the callers view an inlined function is a top-level entry of its own *and*, by DESIGN.md's
/// definition, part of its host procedure's exclusive cost; so the sum runs over the procedure
/// entries (procedures, unknown procedures, the kernel), and each inlined entry must fit within
/// the total.
pub fn check_consistency(view: &ViewTree) {
    for (m, metric) in view.metrics.iter().enumerate() {
        let incl = |n: &ViewNode| n.incl[m].value;
        let excl = |n: &ViewNode| n.excl[m].value;
        assert_eq!(incl(view.root()), metric.total, "root inclusive = total");
        for n in &view.nodes {
            assert!(
                excl(n) <= incl(n),
                "{} view: excl {} > incl {} at {:?} {}",
                view.view.name(),
                excl(n),
                incl(n),
                n.kind,
                n.name
            );
        }
        let top: Vec<&ViewNode> = view.children(0).map(|(_, c)| c).collect();
        match view.view {
            ViewKind::TopDown => check_top_down(view, m),
            ViewKind::Flat => {
                assert!(top.iter().all(|c| c.kind == NodeKind::Module));
                let sum: u64 = top.iter().map(|c| excl(c)).sum();
                assert_eq!(sum, metric.total, "flat: module totals sum to the total");
                assert!(top.iter().all(|c| incl(c) <= metric.total));
            }
            ViewKind::Callers => {
                let (inlined, procedures): (Vec<&ViewNode>, Vec<&ViewNode>) =
                    top.iter().partition(|c| c.kind == NodeKind::Inlined);
                let sum: u64 = procedures.iter().map(|c| excl(c)).sum();
                assert_eq!(
                    sum, metric.total,
                    "callers: top-level exclusive sums to the total"
                );
                assert!(inlined.iter().all(|c| excl(c) <= metric.total));
            }
        }
    }
}

/// Top-down: at every node, inclusive = what was sampled there + the children's inclusive.
fn check_top_down(view: &ViewTree, m: usize) {
    for (id, node) in view.nodes.iter().enumerate() {
        let children: u64 = view.children(id).map(|(_, c)| c.incl[m].value).sum();
        assert_eq!(
            node.incl[m].value,
            node.own[m].value + children,
            "top-down: inclusive = own + children at {}",
            node.name
        );
    }
}

/// Parse folded-stack output, checking every line's form: non-empty frames joined by `;`, one
/// space, a positive integer count; no path twice.
pub fn folded_lines(text: &str) -> Vec<(String, u64)> {
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .map(|line| {
            let (path, count) = line.rsplit_once(' ').expect("`path count`");
            let count: u64 = count
                .parse()
                .unwrap_or_else(|_| panic!("count in {line:?}"));
            assert!(count > 0, "{line}");
            assert!(
                path.split(';').all(|f| !f.is_empty() && f.trim() == f),
                "frames in {line:?}"
            );
            assert!(seen.insert(path.to_string()), "path twice: {path}");
            (path.to_string(), count)
        })
        .collect()
}

/// The `inferno-flamegraph` binary: on PATH or in `~/.cargo/bin` (CI installs it with
/// `cargo install inferno`).
pub fn inferno() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin"));
    on_path
        .into_iter()
        .chain(home)
        .map(|d| d.join("inferno-flamegraph"))
        .find(|p| p.is_file())
        .expect("inferno-flamegraph not found: install it with `cargo install inferno`")
}

/// Render `folded` with inferno-flamegraph into `svg`; returns the SVG text.
pub fn inferno_svg(folded: &str, svg: &Path) -> String {
    let mut child = Command::new(inferno())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start inferno-flamegraph");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(folded.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "inferno-flamegraph failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(svg, &out.stdout).unwrap();
    let text = String::from_utf8(out.stdout).expect("SVG is UTF-8");
    assert!(text.contains("<svg"), "inferno wrote an SVG");
    text
}

/// Depth-first search of a `--json` view for the first node satisfying `pred`.
pub fn find<'a>(node: &'a Value, pred: &dyn Fn(&Value) -> bool) -> Option<&'a Value> {
    if pred(node) {
        return Some(node);
    }
    node["children"]
        .as_array()?
        .iter()
        .find_map(|c| find(c, pred))
}
