//! The whole pipeline on real programs: fixtures compiled at -O2 -g without frame pointers,
//! measured by `hpcrun-rs`, correlated by `hpcprof-rs`, read back with `hpcview-rs` in all three
//! views and all output formats. The programs have designed cost splits (2:1 between two callers,
//! 3:1:2 between three threads), checked against their own clocks, and known structure (the STL
//! map program's loops and inlined frames); sampling noise is allowed for with tolerances, never
//! with retries.

use std::path::{Path, PathBuf};

use crate::correlate_view_support::{
    check_consistency, check_labels_cli, check_schema, find, folded_lines, inferno_svg,
    measured_database, run_view, ViewRun,
};
use crate::support::{tool, work_clocks};
use correlate::{Database, Selection, ViewKind, ViewTree};
use serde_json::Value;

/// Compile `source`, measure it with `args` at 4 kHz, correlate: returns the scratch directory and the
/// database.
fn pipeline(test: &str, source: &str, extra_flags: &[&str], args: &[&str]) -> (PathBuf, PathBuf) {
    let mut flags = vec!["-O2", "-g", "-fomit-frame-pointer"];
    flags.extend_from_slice(extra_flags);
    measured_database(test, source, "app", &flags, args)
}

fn view(db: &Path, args: &[&str]) -> ViewRun {
    run_view(&tool("hpcview-rs"), db, args)
}

/// `a / b` is within `tolerance` (relative) of `expected`.
fn ratio_near(a: u64, b: u64, expected: f64, tolerance: f64) -> bool {
    b > 0 && ((a as f64 / b as f64) / expected - 1.0).abs() <= tolerance
}

fn children(node: &Value) -> &Vec<Value> {
    node["children"].as_array().expect("children")
}

fn incl(node: &Value) -> u64 {
    node["incl"][0].as_u64().expect("incl")
}

/// Every view of `db` keeps the consistency rules, its JSON keeps the contract, and its text
/// and JSON name every scope alike.
fn check_all_views(db_path: &Path) {
    check_labels_cli(&tool("hpcview-rs"), db_path);
    let db = Database::read(db_path).expect("read database");
    for kind in [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat] {
        check_consistency(&ViewTree::from_database(&db, kind, &Selection::All));
    }
    for (args, kind) in [
        (&["--json"][..], "top-down"),
        (&["--json", "--callers"][..], "callers"),
        (&["--json", "--flat"][..], "flat"),
    ] {
        check_schema(&view(db_path, args).json(), kind);
    }
}

/// Folded output is well formed, sums to the samples, and inferno renders it.
fn check_folded(dir: &Path, db: &Path) -> Vec<(String, u64)> {
    let out = view(db, &["--folded"]);
    let lines = folded_lines(&out.stdout);
    let json = view(db, &["--json"]).json();
    let samples = json["metrics"][0]["samples"].as_u64().unwrap();
    assert_eq!(lines.iter().map(|(_, c)| c).sum::<u64>(), samples);
    inferno_svg(&out.stdout, &dir.join("app.svg"));
    lines
}

#[test]
fn two_callers_split_as_their_clocks_say() {
    let (dir, db) = pipeline("view_pipe_callers", "view_callers.c", &[], &["30000000"]);
    check_all_views(&db);
    // Designed 2:1; the oracle is the CPU time each caller took by the program's own clock.
    let clocks = work_clocks(&std::fs::read_to_string(dir.join("app.stdout")).unwrap());
    let want = clocks["from_a"] / clocks["from_b"];

    // Callers view: work is called from from_a (line 21) and from_b (line 26).
    let json = view(&db, &["--callers", "--json"]).json();
    let work = children(&json["root"])
        .iter()
        .find(|n| n["name"] == "work")
        .expect("work is a top-level procedure");
    let by_caller = |name: &str| {
        children(work)
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} calls work: {work}"))
    };
    let (a, b) = (by_caller("from_a"), by_caller("from_b"));
    assert_eq!(
        (a["call_line"].as_u64(), b["call_line"].as_u64()),
        (Some(21), Some(26))
    );
    assert!(
        ratio_near(incl(a), incl(b), want, 0.15),
        "split {} vs {}, their clocks {want:.2}:1",
        incl(a),
        incl(b)
    );

    // Top-down text: main's loop, then from_a above from_b, each calling work with its loop.
    let text = view(&db, &["--threshold", "0"]);
    let labels: Vec<String> = text.rows().into_iter().map(|(_, l)| l).collect();
    let pos = |label: &str| {
        labels
            .iter()
            .position(|l| l == label)
            .unwrap_or_else(|| panic!("no row {label:?}:\n{}", text.stdout))
    };
    let main_loop = pos("loop at view_callers.c: 39");
    let main = labels
        .iter()
        .position(|l| l == "main" || l.starts_with("main  ("));
    assert!(main.is_some_and(|m| m < main_loop), "{}", text.stdout);
    let (from_a, from_b) = (
        pos("from_a  (view_callers.c: 40)"),
        pos("from_b  (view_callers.c: 41)"),
    );
    assert!(main_loop < from_a && from_a < from_b, "{}", text.stdout);
    assert!(labels[from_a..from_b]
        .iter()
        .any(|l| l == "work  (view_callers.c: 21)"));
    assert!(labels[from_a..from_b]
        .iter()
        .any(|l| l == "loop at view_callers.c: 15"));

    // Flat view: work's file and the loop inside it.
    let flat = view(&db, &["--flat", "--json"]).json();
    let lp = find(&flat["root"], &|n| n["kind"] == "loop" && n["line"] == 15).expect("loop");
    assert!(lp["file"].as_str().unwrap().ends_with("view_callers.c"));

    let lines = check_folded(&dir, &db);
    let through = |caller: &str| -> u64 {
        lines
            .iter()
            .filter(|(p, _)| p.contains(&format!(";{caller};work;loop at view_callers.c: 15")))
            .map(|(_, c)| c)
            .sum()
    };
    let (a, b) = (through("from_a"), through("from_b"));
    assert!(
        ratio_near(a, b, want, 0.15),
        "folded: {a} vs {b}, their clocks {want:.2}:1"
    );
}

#[test]
fn three_threads_split_three_one_two() {
    let (dir, db_path) = pipeline("view_pipe_threads", "view_threads.c", &["-pthread"], &[]);
    check_all_views(&db_path);
    let db = Database::read(&db_path).unwrap();
    let mut by_entry = std::collections::BTreeMap::new();
    for t in &db.threads {
        let json = view(&db_path, &["--json", "--thread", &t.tid.to_string()]).json();
        let entry = ["thread_three", "thread_one", "thread_two"]
            .into_iter()
            .find(|name| find(&json["root"], &|n| n["name"] == *name).is_some());
        if let Some(entry) = entry {
            by_entry.insert(entry, json["root"]["incl"][0].as_u64().unwrap());
        }
    }
    // Given 3:1:2 units; the oracle is the CPU time each thread's clock says it got.
    let clocks = work_clocks(&std::fs::read_to_string(dir.join("app.stdout")).unwrap());
    for (a, b) in [("thread_three", "thread_one"), ("thread_two", "thread_one")] {
        let want = clocks[a] / clocks[b];
        assert!(
            ratio_near(by_entry[a], by_entry[b], want, 0.15),
            "{a}:{b} {} vs {}, their clocks {want:.2}:1",
            by_entry[a],
            by_entry[b]
        );
    }
    // The text view restricted to one thread shows only that thread's entry.
    let tid = db
        .threads
        .iter()
        .map(|t| t.tid.to_string())
        .find(|tid| {
            view(&db_path, &["--thread", tid])
                .stdout
                .contains("thread_one")
        })
        .expect("a thread running thread_one");
    let text = view(&db_path, &["--thread", &tid, "--threshold", "0"]).stdout;
    assert!(
        !text.contains("thread_three") && !text.contains("thread_two"),
        "{text}"
    );
    check_folded(&dir, &db_path);
}

#[test]
fn stl_map_loops_and_inlined_frames() {
    let (dir, db) = pipeline("view_pipe_stlmap", "stlmap.cc", &[], &["400000"]);
    check_all_views(&db);
    let text = view(&db, &[]);
    let labels: Vec<String> = text.rows().into_iter().map(|(_, l)| l).collect();
    // Both insertion loops of main, the second (8x the iterations) above the first.
    let second = labels.iter().position(|l| l == "loop at stlmap.cc: 18");
    let first = labels.iter().position(|l| l == "loop at stlmap.cc: 16");
    assert!(second.is_some(), "second loop shown:\n{}", text.stdout);
    if let (Some(s), Some(f)) = (second, first) {
        assert!(s < f, "{}", text.stdout);
    }
    // Mp::add inlined into the loop body, called at line 19.
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("[I] Mp::add") && l.ends_with("(stlmap.cc: 19)")),
        "{}",
        text.stdout
    );
    let json = view(&db, &["--json"]).json();
    let lp = find(&json["root"], &|n| n["kind"] == "loop" && n["line"] == 18).unwrap();
    let add = find(lp, &|n| {
        n["kind"] == "inlined" && n["name"].as_str().unwrap().contains("Mp::add")
    })
    .expect("inlined Mp::add under the loop");
    assert_eq!(add["call_line"], 19);
    assert!(
        incl(lp) * 2 > incl(&json["root"]),
        "the second loop is most of the time"
    );
    let lines = check_folded(&dir, &db);
    assert!(
        lines
            .iter()
            .any(|(p, _)| p.contains(";loop at stlmap.cc: 18;") && p.contains("_[i]")),
        "loops and inlined frames in the folded stacks"
    );
}

#[test]
fn module_without_dwarf_is_named_alike_in_every_output() {
    // -g0 after -g: no debug information at all, so loops and lines have no source position.
    let (dir, db) = pipeline(
        "view_pipe_nodwarf",
        "view_callers.c",
        &["-g0"],
        &["30000000"],
    );
    check_all_views(&db);
    let text = view(&db, &["--threshold", "0"]);
    let labels: Vec<String> = text.rows().into_iter().map(|(_, l)| l).collect();
    assert!(
        labels.iter().any(|l| l == "loop at [app]"),
        "{}",
        text.stdout
    );
    let json = view(&db, &["--json"]).json();
    let lp = find(&json["root"], &|n| {
        n["kind"] == "loop" && n["module"].as_str().is_some_and(|m| m.ends_with("/app"))
    })
    .expect("a loop of the program");
    assert_eq!(lp["name"], "loop at [app]");
    assert!(lp.get("line").is_none(), "no line without DWARF: {lp}");
    let lines = check_folded(&dir, &db);
    assert!(
        lines.iter().any(|(p, _)| p.contains(";work;loop at [app]")),
        "{lines:?}"
    );
}
