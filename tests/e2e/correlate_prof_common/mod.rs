//! Helpers shared by the `correlate_prof_*` tests: measure a fixture with `hpcrun-rs`,
//! correlate with `hpcprof-rs` (with a private structure cache), load the database.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{run, run_ok, tool_command};
use correlate::{Database, ViewNode, ViewTree};

use crate::correlate_view_support::labels;

/// Run `bin args` under `hpcrun-rs` at 1 kHz cpu-clock, writing `dir/NAME.db`.
pub fn measure(bin: &Path, args: &[&str], dir: &Path, name: &str) -> PathBuf {
    measure_with("cpu-clock@f1000", bin, args, dir, name)
}

/// Run `bin args` under `hpcrun-rs -e EVENT`, writing `dir/NAME.db` (and the program's standard
/// output to `dir/NAME.stdout`).
pub fn measure_with(event: &str, bin: &Path, args: &[&str], dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(format!("{name}.db"));
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", event, "-o"])
            .arg(&out)
            .arg(bin)
            .args(args)
            .current_dir(dir),
    );
    std::fs::write(dir.join(format!("{name}.stdout")), stdout).unwrap();
    out
}

/// Run `hpcprof-rs` on `inputs` with extra `args`; the structure cache lives in `dir/cache`.
pub fn hpcprof(dir: &Path, inputs: &[&Path], args: &[&str]) -> Output {
    run(tool_command("hpcprof-rs")
        .args(inputs)
        .args(args)
        .env("XDG_CACHE_HOME", dir.join("cache")))
}

/// Correlate `inputs` into `dir/NAME.hpcdb` (must succeed) and load it; every view of it must
/// name its scopes alike in text and JSON.
pub fn correlate(dir: &Path, inputs: &[&Path], name: &str) -> Database {
    let out = dir.join(format!("{name}.hpcdb"));
    let o = hpcprof(dir, inputs, &["-o", out.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "hpcprof-rs failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let db = Database::read(&out).expect("database readable");
    labels::check_labels(&db);
    db
}

/// Metric-0 sample count of a cost vector.
pub fn samples(n: &ViewNode) -> u64 {
    n.incl[0].samples
}

/// Nodes of a view tree satisfying `pred`, depth-first.
pub fn all(tree: &ViewTree, pred: impl Fn(&ViewNode) -> bool) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![0usize];
    while let Some(id) = stack.pop() {
        if pred(&tree.nodes[id]) {
            out.push(id);
        }
        stack.extend(tree.nodes[id].children.iter().rev());
    }
    out
}

/// The first descendant of `from` (excluding it) satisfying `pred`, depth-first.
pub fn below(tree: &ViewTree, from: usize, pred: impl Fn(&ViewNode) -> bool) -> Option<usize> {
    let mut stack: Vec<usize> = tree.nodes[from].children.iter().rev().copied().collect();
    while let Some(id) = stack.pop() {
        if pred(&tree.nodes[id]) {
            return Some(id);
        }
        stack.extend(tree.nodes[id].children.iter().rev());
    }
    None
}

/// A procedure name without its parameter list (`Mp::add(int, double)` -> `Mp::add`).
pub fn bare(name: &str) -> &str {
    name.split('(').next().unwrap_or(name).trim()
}

/// An indented text rendering of the subtree at `from` (samples, kind, label, line), down to
/// `depth` levels, for assertion messages.
pub fn dump(tree: &ViewTree, from: usize, depth: usize) -> String {
    let mut out = String::new();
    let mut stack = vec![(from, 0usize)];
    while let Some((id, level)) = stack.pop() {
        let n = &tree.nodes[id];
        out.push_str(&format!(
            "{:indent$}{} {:?} {} (line {:?}, call {:?})\n",
            "",
            samples(n),
            n.kind,
            n.name,
            n.line,
            n.call_line,
            indent = level * 2
        ));
        if level < depth {
            stack.extend(n.children.iter().rev().map(|&c| (c, level + 1)));
        }
    }
    out
}
