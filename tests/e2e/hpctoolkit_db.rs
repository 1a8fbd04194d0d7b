//! HPCToolkit databases (v4) both ways, checked with a reader no one here wrote: LLNL's hatchet
//! (`llnl-hatchet` from PyPI, installed by `scripts/install-hatchet` into target/hatchet-venv).
//! hatchet must load what `hpcprof-rs --hpctoolkit` writes and find, node for node, the
//! inclusive time our `hpcview-rs --json` shows; `hpcview-rs` must show HPCToolkit's own
//! databases as hatchet shows them; and a database written as HPCToolkit's format and read back
//! must give the same views as the original, its traces (`trace.db`) and its copied sources
//! (`src/`) included. No reader of `trace.db` but HPCToolkit's own viewer is installable here, so
//! ours is checked on the traces HPCToolkit wrote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::correlate_prof_common::{correlate, hpcprof};
use crate::correlate_view_support::run_view;
use crate::support::{compile, run, run_ok, scratch_dir, tool, tool_command, workspace_root};

/// HPCToolkit's own databases (written by its hpcprof), shared with the project.
const SHARED: &str = "/work/shared/hpctoolkit-databases";

/// Print every node of hatchet's tree as `[path of names, inclusive time or null]`, depth first.
const HATCHET_DUMP: &str = r#"
import json, math, sys
import hatchet as ht
gf = ht.GraphFrame.from_hpctoolkit_latest(sys.argv[1], exclude_instructions=True)
df = gf.dataframe
rows = []
def walk(node, path):
    path = path + [node.frame["name"]]
    inc = df.loc[node]["time (inc)"]
    rows.append([path, None if math.isnan(inc) else float(inc)])
    for child in node.children:
        walk(child, path)
for root in gf.graph.roots:
    walk(root, [])
print(json.dumps(rows))
"#;

/// A node as hatchet names it, with its inclusive time in seconds.
pub(crate) type Row = (Vec<String>, f64);

/// The hatchet venv's Python, or `None` (with the reason printed) when it is not installed and
/// this is not CI, where its absence fails the test.
pub(crate) fn hatchet_python() -> Option<PathBuf> {
    let python = workspace_root().join("target/hatchet-venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let why = "hatchet is not installed (run scripts/install-hatchet)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// hatchet's tree of the database in `dir`: nodes with a time, sorted.
pub(crate) fn hatchet_rows(python: &Path, dir: &Path) -> Vec<Row> {
    let out = run(Command::new(python).args(["-c", HATCHET_DUMP]).arg(dir));
    assert!(
        out.status.success(),
        "hatchet could not read {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(Vec<String>, Option<f64>)> =
        serde_json::from_slice(&out.stdout).expect("hatchet dump is JSON");
    let mut rows: Vec<Row> = rows
        .into_iter()
        .filter_map(|(path, t)| t.filter(|&t| t > 0.0).map(|t| (path, t)))
        .collect();
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

/// A function name as hatchet shortens it (at the first ` [`, `.`, `@`, `(` or `<` that does
/// not start it).
pub(crate) fn hatchet_function(name: &str) -> String {
    let mut name = name.to_string();
    for cut in [" [", ".", "@", "(", "<"] {
        if let Some(i) = name.find(cut).filter(|&i| i > 0) {
            name.truncate(i);
        }
    }
    format!("function: {name}")
}

/// Our `--json` top-down view as hatchet would name its nodes: procedures as functions, loops
/// and statements as `loop FILE:LINE` and `line FILE:LINE`, and an inlined frame below the
/// line context of its call site (where HPCToolkit puts it; one per call site, its time the
/// sum of the frames inlined there). `<partial call paths>` is left out (hatchet reads only the
/// main entry point); times in seconds from metric 0 in ns. Sorted.
fn our_rows(view: &Value) -> Vec<Row> {
    let root = &view["root"];
    let partial: f64 = children(root)
        .filter(|c| c["name"] == "<partial call paths>")
        .map(incl)
        .sum();
    let mut rows = vec![(vec!["entry".to_string()], incl(root) - partial)];
    let mut sites = BTreeMap::new();
    for child in children(root).filter(|c| c["name"] != "<partial call paths>") {
        walk(child, root, &["entry".to_string()], &mut rows, &mut sites);
    }
    rows.extend(sites.into_iter().map(|((path, _), t)| (path, t)));
    rows.retain(|r| r.1 > 0.0);
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

fn walk(
    node: &Value,
    parent: &Value,
    path: &[String],
    rows: &mut Vec<Row>,
    sites: &mut BTreeMap<(Vec<String>, usize), f64>,
) {
    let location = |file: &Value, line: &Value| {
        format!(
            "{}:{}",
            file.as_str().unwrap_or(""),
            line.as_u64().unwrap_or(0)
        )
    };
    let mut path = path.to_vec();
    let name = node["name"].as_str().unwrap();
    let label = match node["kind"].as_str().unwrap() {
        "loop" => format!("loop {}", location(&node["file"], &node["line"])),
        "statement" => format!("line {}", location(&node["file"], &node["line"])),
        "inlined" => {
            let site = location(&node["call_file"], &node["call_line"]);
            let at_site =
                parent["kind"] == "statement" && location(&parent["file"], &parent["line"]) == site;
            if node["call_file"].is_string() && !at_site {
                path.push(format!("line {site}"));
                // One line per call site in this parent (siblings alike in name stay apart).
                let parent_id = parent as *const Value as usize;
                *sites.entry((path.clone(), parent_id)).or_default() += incl(node);
            }
            hatchet_function(name)
        }
        _ => hatchet_function(name),
    };
    path.push(label);
    rows.push((path.clone(), incl(node)));
    for child in children(node) {
        walk(child, node, &path, rows, sites);
    }
}

fn children(node: &Value) -> impl Iterator<Item = &Value> {
    node["children"].as_array().into_iter().flatten()
}

/// Inclusive value of metric 0, ns -> s.
fn incl(node: &Value) -> f64 {
    node["incl"][0].as_f64().unwrap() / 1e9
}

/// Whether two sorted row lists name the same nodes with the same times (to 1 ns).
fn assert_same_rows(ours: &[Row], theirs: &[Row], what: &str) {
    let names = |rows: &[Row]| rows.iter().map(|r| r.0.join(" / ")).collect::<Vec<_>>();
    assert_eq!(names(ours), names(theirs), "{what}: the same nodes");
    for (a, b) in ours.iter().zip(theirs) {
        assert!(
            (a.1 - b.1).abs() < 1e-9,
            "{what}: {:?} {} vs {}",
            a.0,
            a.1,
            b.1
        );
    }
}

/// The fixture measured (cpu-clock at 1 kHz), correlated into `p.hpcdb` and written as an
/// HPCToolkit database `p.d`.
/// The fixture measured (traced, so that trace.db is written and hatchet reads a database
/// that has one) into `p.db` in the test's scratch directory: (directory, profile).
fn measure_fixture(test: &str) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let exe = compile("hpctoolkit_db.c", &dir, "fx", &["-O2", "-g", "-pthread"]);
    // Traced, so that trace.db is written (and hatchet reads a database that has one).
    let profile = dir.join("p.db");
    let args = ["-q", "-t", "-e", "cpu-clock@f1000", "-o"];
    run_ok(tool_command("hpcrun-rs").args(args).arg(&profile).arg(&exe));
    (dir, profile)
}

fn measured(test: &str) -> (PathBuf, PathBuf) {
    let (dir, profile) = measure_fixture(test);
    correlate(&dir, &[&profile], "p");
    let hpctoolkit = dir.join("p.d");
    let o = hpcprof(
        &dir,
        &[&profile],
        &["--hpctoolkit", "-o", hpctoolkit.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (dir.join("p.hpcdb"), hpctoolkit)
}

#[test]
fn hatchet_reads_our_database_with_our_inclusive_times() {
    let Some(python) = hatchet_python() else {
        return;
    };
    let (hpcdb, hpctoolkit) = measured("hpctoolkit_db_hatchet");
    let view = run_view(&tool("hpcview-rs"), &hpcdb, &["--json"]).json();
    let ours = our_rows(&view);
    let theirs = hatchet_rows(&python, &hpctoolkit);
    // The fixture's shapes are there: the inlined call (below its call-site line), loops.
    let has = |rows: &[Row], f: &dyn Fn(&[String]) -> bool| rows.iter().any(|r| f(&r.0));
    let inlined = |p: &[String]| {
        p.ends_with(&["function: inlined_work".to_string()]) && p[p.len() - 2].starts_with("line ")
    };
    assert!(
        has(&theirs, &inlined),
        "hatchet sees the inlined call: {theirs:?}"
    );
    assert!(has(&theirs, &|p| p.last().unwrap().starts_with("loop ")));
    assert!(has(&theirs, &|p| p.last().unwrap() == "function: worker"));
    assert_same_rows(&ours, &theirs, "hatchet on hpcprof-rs --hpctoolkit");
}

#[test]
fn our_database_read_back_gives_the_same_views() {
    let (hpcdb, hpctoolkit) = measured("hpctoolkit_db_round_trip");
    let hpcview = tool("hpcview-rs");
    let tid = {
        let view = run_view(&hpcview, &hpcdb, &["--threshold", "0"]);
        assert!(view.stdout.contains("[I] inlined_work"), "{}", view.stdout);
        let db = correlate::Database::read(&hpcdb).unwrap();
        assert_eq!(db.threads.len(), 2, "the fixture runs two threads");
        db.threads[1].tid.to_string()
    };
    let views: [&[&str]; 7] = [
        &["--threshold", "0"],
        &["--callers", "--threshold", "0"],
        &["--flat", "--threshold", "0"],
        &["--thread", &tid, "--threshold", "0"],
        &["--folded"],
        &["--timeline"],
        &["--slices"],
    ];
    for args in views {
        let a = run_view(&hpcview, &hpcdb, args).stdout;
        let b = run_view(&hpcview, &hpctoolkit, args).stdout;
        assert_eq!(lanes(&a), lanes(&b), "hpcview-rs {args:?}");
    }
    // The sources are copied into src/ under their absolute paths, and read from there.
    let copies = format!("{}/src", hpctoolkit.display());
    for args in [
        &[][..],
        &["--callers"],
        &["--flat"],
        &["--timeline"],
        &["--slices"],
    ] {
        let args = [args, &["--json"]].concat();
        let mut a = run_view(&hpcview, &hpcdb, &args).json();
        let b = run_view(&hpcview, &hpctoolkit, &args).json().to_string();
        let mut b: Value = serde_json::from_str(&b.replace(&copies, "")).unwrap();
        // HPCToolkit's format has no place for the end line of a procedure or loop, nor for a
        // thread's process id and command (lane labels).
        for key in ["end_line", "pid", "comm"] {
            strip(&mut a, key);
        }
        for key in ["pid", "comm"] {
            strip(&mut b, key);
        }
        assert_eq!(a, b, "hpcview-rs {args:?}");
    }
    let db = correlate::Database::read(&hpcdb).unwrap();
    let source = db.files.iter().find(|f| f.ends_with("hpctoolkit_db.c"));
    let source = source.expect("the fixture's source file");
    let copy = std::fs::read(format!("{copies}{source}")).expect("a copy of the source");
    assert_eq!(copy, std::fs::read(source).unwrap());
}

/// HPCToolkit's own traced database: four threads of 166 samples (the 167 elements of each
/// trace.db line less its one "not running" element), and the first thread's samples at the
/// line contexts its context ids name in meta.db (ids 1-4: loops.c lines 1005, 24, 18, 38;
/// counted in the raw file with Python's struct module: 52, 38, 32 and 44 elements).
#[test]
fn hpctoolkit_traces_are_read_with_their_contexts() {
    let dir = Path::new(SHARED).join("loops-cputime-t.d");
    let db = correlate::hpctoolkit::read_database(&dir).unwrap();
    let lanes: Vec<(u32, usize)> = db
        .traces
        .threads
        .iter()
        .map(|t| (t.thread, t.decode(db.nodes.len()).unwrap().len()))
        .collect();
    assert_eq!(lanes, [(0, 166), (1, 166), (2, 166), (3, 166)]);
    let mut lines = BTreeMap::new();
    for (_, node) in db.traces.threads[0].decode(db.nodes.len()).unwrap() {
        let label = db.label(correlate::DbNodeId::from_index(node as usize));
        *lines.entry(label).or_insert(0) += 1;
    }
    let expected = [(1005, 52), (18, 32), (24, 38), (38, 44)];
    let expected: BTreeMap<String, i32> = expected
        .iter()
        .map(|(line, n)| (format!("loops.c: {line}"), *n))
        .collect();
    assert_eq!(lines, expected);
    let run = run_view(&tool("hpcview-rs"), &dir, &["--timeline"]);
    assert!(
        run.stderr.contains("4 threads, 664 samples"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stdout.lines().filter(|l| l.starts_with("0/")).count(),
        4
    );
}

/// A view's text with the timeline's lane labels (process, thread, command: HPCToolkit's
/// format keeps only the thread) left out: each line from its first `|`, or without its indent.
fn lanes(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.find('|').map_or(l.trim_start(), |i| &l[i..]))
        .collect()
}

/// Remove every `key` from the objects in `v`.
fn strip(v: &mut Value, key: &str) {
    match v {
        Value::Object(m) => {
            m.remove(key);
            m.values_mut().for_each(|x| strip(x, key));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| strip(x, key)),
        _ => {}
    }
}

#[test]
fn hpcview_shows_hpctoolkit_databases_as_hatchet_does() {
    let Some(python) = hatchet_python() else {
        return;
    };
    let hpcview = tool("hpcview-rs");
    // small.d has one entry point: the same tree exactly.
    let small = Path::new(SHARED).join("small.d");
    let ours = our_rows(&run_view(&hpcview, &small, &["--json"]).json());
    assert_same_rows(&ours, &hatchet_rows(&python, &small), "small.d");
    assert_eq!(ours.len(), 11, "{ours:?}");
    // loops-cputime-t.d also has OpenMP threads under an "application thread" entry, which
    // hatchet leaves out: its tree is a part of ours, node for node; our total is the summary
    // profile's (ctxId 0, which our reader does not use).
    let loops = Path::new(SHARED).join("loops-cputime-t.d");
    let view = run_view(&hpcview, &loops, &["--json"]).json();
    let mut ours = our_rows(&view);
    let theirs = hatchet_rows(&python, &loops);
    assert!(theirs.len() > 40, "{theirs:?}");
    let entry = (incl(&view["root"]) - 3.973308).abs();
    assert!(entry < 1e-6, "total {}", incl(&view["root"]));
    for row in theirs.iter().filter(|r| r.0.len() > 1) {
        let i = ours
            .iter()
            .position(|o| o.0 == row.0 && (o.1 - row.1).abs() < 1e-9)
            .unwrap_or_else(|| panic!("hatchet's {row:?} is not in our view"));
        ours.remove(i);
    }
}

#[test]
fn hpcview_reads_an_hpctoolkit_database_with_two_metrics() {
    // hatchet cannot read loops-perf.d (no time metric by its names); its totals are known from
    // the summary profile: perf::task-clock 3.6e9, perf::cpu-clock 3.95e9 (ns, event units).
    let loops = Path::new(SHARED).join("loops-perf.d");
    let view = run_view(&tool("hpcview-rs"), &loops, &["--json"]).json();
    let metrics: Vec<(&str, u64)> = view["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["total"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        metrics,
        [
            ("perf::task-clock", 3_600_000_000),
            ("perf::cpu-clock", 3_950_000_000)
        ]
    );
}

#[test]
fn a_foreign_or_linked_output_directory_is_refused() {
    let (dir, profile) = measure_fixture("hpctoolkit_db_refused");
    let out = dir.join("out.d");
    let write = |to: &Path| {
        hpcprof(
            &dir,
            &[&profile],
            &["--hpctoolkit", "-o", to.to_str().unwrap()],
        )
    };
    assert!(write(&out).status.success());
    assert!(write(&out).status.success(), "our own database is replaced");
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = write(&out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("holds other files"), "{err}");
    let link = dir.join("link.d");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let o = write(&link);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    let theirs = dir.join("theirs.d");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::copy(
        Path::new(SHARED).join("small.d/meta.db"),
        theirs.join("meta.db"),
    )
    .unwrap();
    let o = write(&theirs);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did not write"));
    // A directory holding only someone's `src/` is not ours to replace: refused, untouched.
    let sources = dir.join("sources.d");
    std::fs::create_dir_all(sources.join("src")).unwrap();
    std::fs::write(sources.join("src/mine.c"), "int x;").unwrap();
    let o = write(&sources);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did not write"));
    assert_eq!(
        std::fs::read_to_string(sources.join("src/mine.c")).unwrap(),
        "int x;"
    );
    // Our own database's `src/` is replaced whole, a planted symlink in it removed, not followed.
    let outside = dir.join("outside.c");
    std::fs::write(&outside, "kept").unwrap();
    let planted = out.join("src/planted.c");
    std::fs::remove_file(out.join("notes.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, &planted).unwrap();
    assert!(write(&out).status.success());
    assert!(std::fs::symlink_metadata(&planted).is_err());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
}

#[test]
fn a_damaged_hpctoolkit_database_is_one_line_and_exit_2() {
    let dir = scratch_dir("hpctoolkit_db_damaged").join("small.d");
    std::fs::create_dir(&dir).unwrap();
    for name in ["meta.db", "profile.db", "cct.db"] {
        std::fs::copy(Path::new(SHARED).join("small.d").join(name), dir.join(name)).unwrap();
    }
    let profile = std::fs::read(dir.join("profile.db")).unwrap();
    std::fs::write(dir.join("profile.db"), &profile[..profile.len() / 2]).unwrap();
    let o = run(tool_command("hpcview-rs").arg(&dir));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let expected = format!(
        "hpcview-rs: error: {}: corrupt HPCToolkit database at offset 0x330: missing footer (truncated?)\n",
        dir.join("profile.db").display()
    );
    assert_eq!(err, expected);
    std::fs::remove_file(dir.join("meta.db")).unwrap();
    let o = run(tool_command("hpcview-rs").arg(&dir));
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("a directory without meta.db"), "{err}");
}
