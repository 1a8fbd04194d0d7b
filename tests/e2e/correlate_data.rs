//! End-to-end tests of the data views (`hpcprof-rs` naming data objects, `hpcview-rs --data`,
//! `--tree`, `--fields`, `--code-data`) on fixtures whose objects are touched a known number of
//! times: every page once under `page-faults@1`, or a known time split under `cpu-clock`.
//! Names are checked against the fixtures' own sources and symbol tables.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::hpcrun_data::measure_faults;
use crate::support::{compile, fixture, run, run_ok, scratch_dir, tool_command};

/// Pages of static array B in `data_touch.c` (A has three times as many).
const NP: u64 = 256;

/// Correlate profile `db` into a database beside it.
pub(crate) fn correlate(db: &Path) -> PathBuf {
    let out = db.with_extension("hpcdb");
    let _ = std::fs::remove_file(&out);
    run_ok(tool_command("hpcprof-rs").arg(db).arg("-o").arg(&out));
    out
}

/// `hpcview-rs DATABASE ARGS --json`, parsed.
pub(crate) fn view_json(database: &Path, args: &[&str]) -> Value {
    let out = run_ok(
        tool_command("hpcview-rs")
            .arg(database)
            .args(args)
            .arg("--json"),
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}"))
}

/// The database of `data_touch.c` (-O2 -g, PIE) under `page-faults@1 --data`, made once.
pub(crate) fn touch_database() -> &'static Path {
    static DB: OnceLock<PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let dir = scratch_dir("correlate-data-touch");
        let exe = compile("data_touch.c", &dir, "touch", &["-O2", "-g"]);
        let db = dir.join("touch.db");
        measure_faults(&exe, &db);
        correlate(&db)
    })
}

/// The objects of `--data --json`.
fn objects(database: &Path) -> Vec<Value> {
    view_json(database, &["--data"])["objects"]
        .as_array()
        .expect("objects")
        .clone()
}

/// First-metric samples of the object named exactly `name` (0 if there is none).
fn samples_of(objects: &[Value], name: &str) -> u64 {
    objects
        .iter()
        .filter(|o| o["name"] == name)
        .map(|o| o["samples"][0].as_u64().unwrap())
        .sum()
}

/// The 1-based line of `fixture_name` holding `text` (exactly one).
pub(crate) fn line_of(fixture_name: &str, text: &str) -> u64 {
    let source = std::fs::read_to_string(fixture(fixture_name)).unwrap();
    let lines: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{text:?} in {fixture_name}: {lines:?}");
    lines[0] as u64
}

#[test]
fn statics_are_named_and_each_fault_lands_on_its_element_from_the_store_line() {
    let database = touch_database();
    let objs = objects(database);
    assert_eq!(
        (samples_of(&objs, "A"), samples_of(&objs, "B")),
        (3 * NP, NP),
        "{objs:#?}"
    );
    // One row per page of A: each was touched at exactly one element, 0x123 into the page.
    let fields = view_json(database, &["--data", "--fields", "A", "--span", "4096"]);
    assert_eq!(fields["split"], "elements", "{fields:#}");
    let touched: Vec<(u64, u64)> = fields["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["samples"][0].as_u64() > Some(0))
        .map(|p| {
            let e = &p["elements"];
            (e[0].as_u64().unwrap(), e[1].as_u64().unwrap())
        })
        .collect();
    assert_eq!(touched.len() as u64, 3 * NP, "{fields:#}");
    for (k, &(lo, hi)) in touched.iter().enumerate() {
        assert_eq!((lo, hi), (k as u64 * 4096 + 0x123, k as u64 * 4096 + 0x123));
    }
    // Below A in the object tree, every sampled line is the store's.
    let store = line_of("data_touch.c", "p[i * PG + 0x123] = 1");
    let tree = view_json(database, &["--data", "--tree"]);
    let a = tree["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "A")
        .expect("A in the object tree");
    let mut lines = Vec::new();
    sampled_lines(a, &mut lines);
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|&l| l == store),
        "lines {lines:?}, store at {store}"
    );
}

/// Lines of the statements with own samples below `node`.
fn sampled_lines(node: &Value, out: &mut Vec<u64>) {
    let children = node["children"].as_array().unwrap();
    let own = node["incl"][0].as_u64().unwrap()
        - children
            .iter()
            .map(|c| c["incl"][0].as_u64().unwrap())
            .sum::<u64>();
    if node["kind"] == "statement" && own > 0 {
        out.push(node["line"].as_u64().unwrap());
    }
    children.iter().for_each(|c| sampled_lines(c, out));
}

#[test]
fn heap_objects_are_named_by_their_distinct_callers_with_the_call_lines() {
    let database = touch_database();
    let objs = objects(database);
    let heap: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "heap").collect();
    let named = |caller: &str| {
        let found: Vec<&&Value> = heap
            .iter()
            .filter(|o| o["name"].as_str().unwrap().contains(caller))
            .collect();
        assert_eq!(found.len(), 1, "{caller}: {heap:#?}");
        found[0]
    };
    let (a, b) = (named("alloc_a"), named("alloc_b"));
    assert_eq!(
        (a["samples"][0].as_u64(), b["samples"][0].as_u64()),
        (Some(2 * NP), Some(NP))
    );
    // Named from the first frame that is not an allocator (xmalloc is folded: its name says
    // it allocates), with the line of each call.
    let via_a = line_of("data_touch.c", "char *alloc_a(long n)");
    let in_main = line_of("data_touch.c", "*h1 = alloc_a(");
    let expected = format!("alloc_a (data_touch.c:{via_a}) < main (:{in_main})");
    assert_eq!(a["name"].as_str().unwrap(), expected);
    assert_eq!(a["blocks"], 1);
    assert_eq!(a["bytes"].as_u64(), Some(2 * NP * 4096));
    assert_eq!(a["alloc_path"][0], "xmalloc");
}

#[test]
fn faults_in_a_local_array_are_named_by_function_and_variable() {
    let database = touch_database();
    let objs = objects(database);
    let lbuf = samples_of(&objs, "deep::lbuf");
    assert!(lbuf >= 60, "deep::lbuf has {lbuf} faults: {objs:#?}");
    // None of fill's faults went to a heap object.
    let tree = view_json(database, &["--data", "--tree"]);
    for o in tree["root"]["children"].as_array().unwrap() {
        let name = o["name"].as_str().unwrap();
        let kind_heap = objs
            .iter()
            .any(|x| x["kind"] == "heap" && name.starts_with(x["name"].as_str().unwrap()));
        assert!(
            !(kind_heap && mentions(o, "fill")),
            "{} reached from fill",
            o["name"]
        );
    }
}

/// Whether a procedure named `name` is below `node`.
fn mentions(node: &Value, name: &str) -> bool {
    node["name"] == name
        || node["children"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| mentions(c, name))
}

#[test]
fn a_reused_address_goes_to_each_owner_by_name() {
    let dir = scratch_dir("correlate-data-reuse");
    let exe = compile("data_reuse.c", &dir, "reuse", &["-O2", "-g"]);
    let db = dir.join("reuse.db");
    measure_faults(&exe, &db);
    let objs = objects(&correlate(&db));
    let owner = |f: &str| -> u64 {
        objs.iter()
            .filter(|o| o["kind"] == "heap" && o["name"].as_str().unwrap().starts_with(f))
            .map(|o| o["samples"][0].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        (owner("first_owner"), owner("second_owner")),
        (128, 256),
        "{objs:#?}"
    );
}

#[test]
fn objects_sum_to_the_data_total_and_code_data_keeps_every_cost() {
    let database = touch_database();
    let data = view_json(database, &["--data"]);
    let total = data["metrics"][0]["samples"].as_u64().unwrap();
    let sum: u64 = data["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["samples"][0].as_u64().unwrap())
        .sum();
    let classes: u64 = data["stats"]["by_class"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!((sum, classes), (total, total), "{data:#}");
    assert!(
        data["objects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "<unknown data>")
            || data["stats"]["by_class"]["unknown"] == 0
    );
    // --code-data hangs objects below the contexts without changing any inclusive cost.
    let plain = view_json(database, &[]);
    let with_data = view_json(database, &["--code-data"]);
    assert_eq!(plain["root"]["incl"], with_data["root"]["incl"]);
    let mut objects_below = 0;
    count_kind(&with_data["root"], "data-object", &mut objects_below);
    assert!(objects_below >= 4, "{objects_below} object leaves");
}

fn count_kind(node: &Value, kind: &str, n: &mut u64) {
    if node["kind"] == kind {
        *n += node["incl"][0].as_u64().unwrap();
    }
    for c in node["children"].as_array().unwrap() {
        count_kind(c, kind, n);
    }
}

/// The database of fixture `source` (-O2 -g) run with `arg` under `cpu-clock@f4000 --data`.
fn clock_database(source: &str, name: &str, arg: &str) -> PathBuf {
    let dir = scratch_dir(&format!("correlate-data-{name}"));
    let exe = compile(source, &dir, name, &["-O2", "-g"]);
    let db = dir.join(format!("{name}.db"));
    let out = run(tool_command("hpcrun-rs")
        .args(["-e", "cpu-clock@f4000", "--data", "-o"])
        .arg(&db)
        .arg(&exe)
        .arg(arg));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    correlate(&db)
}

#[test]
fn the_hot_field_takes_the_time_and_the_receiver_names_the_global() {
    let database = clock_database("data_fields.c", "fields", "800");
    let fields = view_json(&database, &["--data", "--fields", "cells"]);
    let parts = fields["parts"].as_array().unwrap();
    let of = |name: &str| {
        parts
            .iter()
            .filter(|p| p["name"] == name)
            .map(|p| p["samples"][0].as_u64().unwrap())
            .sum::<u64>()
    };
    let total = fields["metrics"][0]["samples"].as_u64().unwrap();
    let hot = of("cells[].hot");
    assert!(total >= 200, "{total} samples in cells");
    assert!(hot * 10 >= total * 9, "hot {hot} of {total}: {fields:#}");
    assert!(
        parts.iter().any(|p| p["name"] == "cells[].cold"),
        "every member listed"
    );
    let objs = objects(&database);
    let grid = objs
        .iter()
        .find(|o| o["kind"] == "heap" && o["name"].as_str().unwrap().starts_with("make_grid"))
        .expect("the grid block");
    assert_eq!(grid["receiver"], "grid", "{grid:#}");
}

#[test]
fn clock_time_splits_between_the_named_arrays_as_the_program_measured() {
    let objs = objects(&clock_database("ea_arrsum.c", "arrsum", "60"));
    let (a, b) = (samples_of(&objs, "A") as f64, samples_of(&objs, "B") as f64);
    let split = a / b.max(1.0);
    assert!((2.6..=3.6).contains(&split), "A:B = {a}:{b} = {split:.2}");
}

#[test]
fn a_database_without_data_says_so_in_one_line() {
    let dir = scratch_dir("correlate-data-none");
    let exe = compile("run_spin.c", &dir, "spin", &["-O2", "-g"]);
    let db = dir.join("spin.db");
    run_ok(tool_command("hpcrun-rs").arg("-o").arg(&db).arg(&exe));
    let database = correlate(&db);
    for args in [&["--data"][..], &["--code-data"][..]] {
        let out = run(tool_command("hpcview-rs").arg(&database).args(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(out.stdout.is_empty());
        assert!(
            stderr.contains("no data samples") && stderr.contains("hpcrun-rs --data"),
            "{stderr}"
        );
    }
}
