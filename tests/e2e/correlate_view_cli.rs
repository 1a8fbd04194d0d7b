//! `hpcview-rs` over a database built by hand with known costs, so every number is checked
//! exactly: a 2:1 split between two call sites of `work`, a 3:1:2 split between three threads,
//! a loop, an inlined frame, partial paths and an unknown procedure. The same checks run on real
//! profiles in `correlate_view_pipeline.rs`; here they pin the presentation down precisely.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::correlate_view_support::labels::check_labels;
use crate::correlate_view_support::{
    check_consistency, check_labels_cli, check_schema, folded_lines, inferno_svg, run_view, ViewRun,
};
use crate::support::{run_ok, scratch_dir, tool, tool_command};
use correlate::{
    ChildIndex, Database, DbFileId, DbModuleId, DbNodeId, MetricDesc, ModuleDesc, NodeKey,
    NodeKind, Selection, StructureSource, ThreadDesc, ThreadIdx, ViewKind, ViewTree,
};
use profiler::db::{Cost, Sampling};

/// Sampling period of the hand-built metric (ns per sample).
const PERIOD: u64 = 1_000_000;

/// The source of the hand-built program, written beside the database for `--source`.
const SOURCE: &str = "\
#include \"helper.h\"
int work(int n) {
  int s = 0;
  s += helper(n);
  return s * 3;
}

int main(void) {
  int t = 0;
  for (int i = 0; i < 100; i++)
    t += work(i);
  t += work(7);
  return t;
}
";

struct Builder {
    db: Database,
    index: ChildIndex,
    file: u32,
    header: u32,
}

impl Builder {
    fn new(source_path: &str) -> Builder {
        let mut db = Database::new(vec![MetricDesc {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            sampling: Sampling::Period(PERIOD),
            total: Cost::default(),
        }]);
        db.modules.push(ModuleDesc {
            path: "/opt/app/bin/app".into(),
            build_id: None,
            structure: StructureSource::OnTheFly,
        });
        db.modules.push(ModuleDesc {
            path: "/usr/lib/libx.so".into(),
            build_id: None,
            structure: StructureSource::None("no symbols".into()),
        });
        db.files = vec![source_path.to_string(), "/opt/app/src/helper.h".into()];
        for tid in [101, 102, 103] {
            db.threads.push(ThreadDesc {
                profile: 0,
                pid: 101,
                tid,
                comm: "app".into(),
            });
        }
        Builder {
            db,
            index: ChildIndex::default(),
            file: 0,
            header: 1,
        }
    }

    fn add(&mut self, parent: DbNodeId, key: NodeKey) -> DbNodeId {
        self.db.child(&mut self.index, parent, key)
    }

    fn scope(&mut self, parent: DbNodeId, kind: NodeKind, file: u32, line: u32) -> DbNodeId {
        let key = key(kind, "", Some(file), Some(line), None);
        self.add(parent, key)
    }

    fn frame(
        &mut self,
        parent: DbNodeId,
        kind: NodeKind,
        name: &str,
        decl: u32,
        site: u32,
    ) -> DbNodeId {
        let file = if kind == NodeKind::Inlined {
            self.header
        } else {
            self.file
        };
        let key = key(kind, name, Some(file), Some(decl), Some((self.file, site)));
        self.add(parent, key)
    }

    /// `samples` samples in each of the three threads, scaled 3:1:2.
    fn sample(&mut self, at: DbNodeId, samples: u64) {
        for (thread, weight) in [(0, 3), (1, 1), (2, 2)] {
            let n = samples * weight;
            let cost = Cost {
                samples: n,
                value: n * PERIOD,
            };
            self.db.add_cost(at, ThreadIdx(thread), &[cost]);
        }
    }
}

fn key(
    kind: NodeKind,
    name: &str,
    file: Option<u32>,
    line: Option<u32>,
    site: Option<(u32, u32)>,
) -> NodeKey {
    NodeKey {
        kind,
        name: name.into(),
        module: Some(DbModuleId(0)),
        file: file.map(DbFileId),
        line,
        end_line: None,
        call_file: site.map(|s| DbFileId(s.0)),
        call_line: site.map(|s| s.1),
    }
}

/// The database: per thread-weight unit,
/// main > loop 10 > line 11 > work > { [I] helper > helper.h: 5 (10), app.c: 5 (6) }
/// main > line 12 > work > { [I] helper > helper.h: 5 (5), app.c: 5 (3) }
/// main > line 9 (2); <partial call paths> > <unknown procedure> (1).
/// With thread weights 3 + 1 + 2 = 6: 27 * 6 = 162 samples; work at line 11 : at line 12 = 2 : 1.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let source = dir.join("app.c");
    std::fs::write(&source, SOURCE).unwrap();
    let mut b = Builder::new(source.to_str().unwrap());
    let main = b.frame(DbNodeId::ROOT, NodeKind::Procedure, "main", 8, 0);
    b.db.nodes[main.index()].call_file = None;
    b.db.nodes[main.index()].call_line = None;
    let lp = b.scope(main, NodeKind::Loop, b.file, 10);
    let site11 = b.scope(lp, NodeKind::Statement, b.file, 11);
    let site12 = b.scope(main, NodeKind::Statement, b.file, 12);
    for (site, scale) in [(site11, 2), (site12, 1)] {
        let work = b.frame(
            site,
            NodeKind::Procedure,
            "work",
            2,
            if scale == 2 { 11 } else { 12 },
        );
        let inl = b.frame(work, NodeKind::Inlined, "helper", 3, 4);
        let inner = b.scope(inl, NodeKind::Statement, b.header, 5);
        b.sample(inner, 5 * scale);
        let ret = b.scope(work, NodeKind::Statement, b.file, 5);
        b.sample(ret, 3 * scale);
    }
    let line9 = b.scope(main, NodeKind::Statement, b.file, 9);
    b.sample(line9, 2);
    let partial = b.add(
        DbNodeId::ROOT,
        key(NodeKind::Partial, "<partial call paths>", None, None, None),
    );
    let mut unknown = key(
        NodeKind::Unknown,
        "<unknown procedure> 0x1234 [libx.so]",
        None,
        None,
        None,
    );
    unknown.module = Some(DbModuleId(1));
    let unknown = b.add(partial, unknown);
    b.sample(unknown, 1);
    b.db.compute_totals();
    let path = dir.join("app.hpcdb");
    b.db.write_new(&path).unwrap();
    (path, source)
}

/// A database of the scopes whose labels are easy to get wrong, per thread-weight unit:
/// main > app.c (no line) (1)
/// main > app.c: 12 > x_work in libx.so without DWARF (file `[libx.so]`, no lines)
///      > loop > statement (4) > <kernel> (1)
/// main > [I] <inline> (anonymous, from app.c: 13) > loop at line 4 > unknown file: 3 (2)
///                                                 > loop, no position > statement (1)
/// main > [I] helper called at line 14 of an unknown file > helper.h: 5 (1)
/// <partial call paths> > <unknown procedure> (1).
fn build_unusual(dir: &Path) -> PathBuf {
    let mut b = Builder::new(dir.join("app.c").to_str().unwrap());
    b.db.files.push("[libx.so]".into());
    let nodwarf = |kind, name: &str, site| NodeKey {
        module: Some(DbModuleId(1)),
        ..key(kind, name, Some(2), None, site)
    };
    let main = b.add(
        DbNodeId::ROOT,
        key(NodeKind::Procedure, "main", Some(0), Some(8), None),
    );
    let no_line = b.add(main, key(NodeKind::Statement, "", Some(0), None, None));
    b.sample(no_line, 1);
    let site = b.scope(main, NodeKind::Statement, 0, 12);
    let x_work = b.add(site, nodwarf(NodeKind::Procedure, "x_work", Some((0, 12))));
    let lp = b.add(x_work, nodwarf(NodeKind::Loop, "", None));
    let body = b.add(lp, nodwarf(NodeKind::Statement, "", None));
    b.sample(body, 4);
    let kernel = b.add(body, NodeKey::pseudo(NodeKind::Kernel, "<kernel>"));
    b.sample(kernel, 1);
    let anonymous = key(
        NodeKind::Inlined,
        "<inline>",
        Some(1),
        Some(7),
        Some((0, 13)),
    );
    let anonymous = b.add(main, anonymous);
    let by_line = b.add(anonymous, key(NodeKind::Loop, "", None, Some(4), None));
    let by_line = b.add(by_line, key(NodeKind::Statement, "", None, Some(3), None));
    b.sample(by_line, 2);
    let nowhere = b.add(anonymous, key(NodeKind::Loop, "", None, None, None));
    let nowhere = b.add(nowhere, key(NodeKind::Statement, "", None, None, None));
    b.sample(nowhere, 1);
    let siteless = NodeKey {
        call_line: Some(14),
        ..key(NodeKind::Inlined, "helper", Some(1), Some(3), None)
    };
    let siteless = b.add(main, siteless);
    let inner = b.scope(siteless, NodeKind::Statement, 1, 5);
    b.sample(inner, 1);
    let partial = key(NodeKind::Partial, "<partial call paths>", None, None, None);
    let partial = b.add(DbNodeId::ROOT, partial);
    let unknown = NodeKey {
        module: Some(DbModuleId(1)),
        ..key(
            NodeKind::Unknown,
            "<unknown procedure> 0x1234 [libx.so]",
            None,
            None,
            None,
        )
    };
    let unknown = b.add(partial, unknown);
    b.sample(unknown, 1);
    b.db.compute_totals();
    let path = dir.join("unusual.hpcdb");
    b.db.write_new(&path).unwrap();
    path
}

const TOTAL_SAMPLES: u64 = 27 * 6;

fn setup(test: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let (db, source) = build(&dir);
    (dir, db, source)
}

fn view(db: &Path, args: &[&str]) -> ViewRun {
    run_view(&tool("hpcview-rs"), db, args)
}

#[test]
fn text_top_down_shows_the_expected_rows_in_order() {
    let (_dir, db, _) = setup("view_cli_text");
    let out = view(db.as_path(), &["--threshold", "0"]);
    let rows = out.rows();
    let labels: Vec<&str> = rows.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        labels,
        [
            "<program root>",
            "main",
            "loop at app.c: 10",
            "app.c: 11",
            "work  (app.c: 11)",
            "[I] helper  (app.c: 4)",
            "helper.h: 5",
            "app.c: 5",
            "app.c: 12",
            "work  (app.c: 12)",
            "[I] helper  (app.c: 4)",
            "helper.h: 5",
            "app.c: 5",
            "app.c: 9",
            "<partial call paths>",
            "<unknown procedure> 0x1234 [libx.so]",
        ],
        "{}",
        out.stdout
    );
    // Indentation follows depth.
    assert_eq!(rows[6].0, 6, "{}", out.stdout);
    // main: 26 of 27 units inclusive; work from line 11: 16 of 27, exclusive all of it (inlined
    // code counts in its caller's exclusive cost).
    let line = |label: &str| out.row(label).unwrap();
    assert!(line("main").starts_with("  96.3%"), "{}", out.stdout);
    assert!(
        line("work  (app.c: 11)").contains("59.3%  59.3%"),
        "{}",
        out.stdout
    );
    assert!(
        line("work  (app.c: 12)").contains("29.6%  29.6%"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("16 rows"), "{}", out.stderr);
}

#[test]
fn text_folds_small_rows_and_keeps_the_hot_path() {
    let (_dir, db, _) = setup("view_cli_fold");
    // line 9 (2 units = 7.4%) and the partial paths (3.7%) fall below 8%.
    let out = view(&db, &["--threshold", "8"]);
    assert!(!out.stdout.contains("app.c: 9"), "{}", out.stdout);
    let more = out.row("(1 more)").expect("a (1 more) row under main");
    assert!(more.contains("7.4%"), "{}", out.stdout);
    assert!(out.row("(1 more)").is_some());
    // Depth 1 shows main only, plus the hot path to the helper's line in full.
    let out = view(&db, &["--depth", "1"]);
    let labels: Vec<String> = out.rows().into_iter().map(|(_, l)| l).collect();
    assert!(
        labels.contains(&"helper.h: 5".to_string()),
        "{}",
        out.stdout
    );
    assert!(!labels.contains(&"app.c: 12".to_string()), "{}", out.stdout);
    assert!(!out.stdout.contains('\x1b'), "no colour in a pipe");
    let coloured = view(&db, &["--color", "always"]);
    assert!(
        coloured.stdout.contains("\x1b[1;31mmain"),
        "hot path in colour"
    );
}

#[test]
fn json_holds_the_contract_and_the_known_splits_in_all_views() {
    let (_dir, db, _) = setup("view_cli_json");
    for (flag, kind) in [
        ("", "top-down"),
        ("--callers", "callers"),
        ("--flat", "flat"),
    ] {
        let args: Vec<&str> = [flag, "--json"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let json = view(&db, &args).json();
        check_schema(&json, kind);
        assert_eq!(json["metrics"][0]["samples"], TOTAL_SAMPLES);
        assert_eq!(json["metrics"][0]["total"], TOTAL_SAMPLES * PERIOD);
        assert_eq!(json["metrics"][0]["period"], PERIOD);
        assert_eq!(json["root"]["incl"][0], TOTAL_SAMPLES * PERIOD);
    }
    // Callers: work is called from main at lines 11 and 12, 2:1.
    let json = view(&db, &["--callers", "--json"]).json();
    let top = json["root"]["children"].as_array().unwrap();
    let work = top.iter().find(|n| n["name"] == "work").unwrap();
    let callers: Vec<(u64, u64)> = work["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["name"], "main");
            (
                c["call_line"].as_u64().unwrap(),
                c["incl"][0].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(callers, [(11, 16 * 6 * PERIOD), (12, 8 * 6 * PERIOD)]);
    let helper = top.iter().find(|n| n["name"] == "helper").unwrap();
    assert_eq!(helper["kind"], "inlined");
    assert_eq!(helper["incl"][0], 15 * 6 * PERIOD);
    // Flat: the inlined helper appears under work with its call site.
    let json = view(&db, &["--flat", "--json"]).json();
    let module = &json["root"]["children"][0];
    assert_eq!(module["kind"], "module");
    assert_eq!(module["name"], "/opt/app/bin/app");
    let file = &module["children"][0];
    let work = file["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "work")
        .unwrap();
    assert_eq!(work["incl"][0], 24 * 6 * PERIOD);
    let inl = &work["children"][0];
    assert_eq!(
        (inl["kind"].as_str(), inl["call_line"].as_u64()),
        (Some("inlined"), Some(4))
    );
}

#[test]
fn threads_split_three_one_two() {
    let (_dir, db, _) = setup("view_cli_threads");
    let totals: Vec<u64> = ["101", "102", "103"]
        .iter()
        .map(|tid| {
            let json = view(&db, &["--json", "--thread", tid]).json();
            json["root"]["incl"][0].as_u64().unwrap() / PERIOD
        })
        .collect();
    assert_eq!(totals, [27 * 3, 27, 27 * 2]);
    let two = view(&db, &["--json", "--thread", "101", "--thread", "103"]).json();
    assert_eq!(two["metrics"][0]["samples"], 27 * 5);
}

#[test]
fn values_are_consistent_in_every_view() {
    let (_dir, db_path, _) = setup("view_cli_consistency");
    let db = Database::read(&db_path).unwrap();
    for kind in [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat] {
        let v = ViewTree::from_database(&db, kind, &Selection::All);
        check_consistency(&v);
    }
}

#[test]
fn text_and_json_name_every_scope_alike() {
    let (dir, db, _) = setup("view_cli_labels");
    let unusual = build_unusual(&dir);
    for path in [&db, &unusual] {
        check_labels_cli(&tool("hpcview-rs"), path);
        check_labels(&Database::read(path).unwrap());
    }
    let labels: Vec<String> = view(&unusual, &["--threshold", "0"])
        .rows()
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    for expected in [
        "app.c",
        "x_work  (app.c: 12)",
        "loop at [libx.so]",
        "[libx.so]",
        "<kernel>",
        "[I] inlined from helper.h: 7  (app.c: 13)",
        "loop at line 4",
        "unknown file: 3",
        "loop at unknown file",
        "unknown file",
        "[I] helper  (unknown file: 14)",
        "<partial call paths>",
    ] {
        assert!(
            labels.iter().any(|l| l == expected),
            "{expected}: {labels:?}"
        );
    }
    // The module without DWARF: the JSON names its loop as the text view does (no `: ?`).
    let json = view(&unusual, &["--flat", "--json"]).json();
    let names = serde_json::to_string(&json).unwrap();
    assert!(names.contains(r#""name":"loop at [libx.so]""#), "{names}");
    assert!(!names.contains(": ?"), "{names}");
    let folded = folded_lines(&view(&unusual, &["--folded"]).stdout);
    let get = |path: &str| folded.iter().find(|(p, _)| p == path).map(|(_, c)| *c);
    assert_eq!(get("main;x_work;loop at [libx.so]"), Some(4 * 6));
    assert_eq!(get("main;x_work;loop at [libx.so];<kernel>_[k]"), Some(6));
    assert_eq!(
        get("main;inlined from helper.h: 7_[i];loop at line 4"),
        Some(2 * 6)
    );
}

#[test]
fn folded_stacks_sum_to_the_samples_and_make_a_flame_graph() {
    let (dir, db, _) = setup("view_cli_folded");
    let out = view(&db, &["--folded"]);
    let lines = folded_lines(&out.stdout);
    let sum: u64 = lines.iter().map(|(_, c)| c).sum();
    assert_eq!(sum, TOTAL_SAMPLES);
    let get = |path: &str| lines.iter().find(|(p, _)| p == path).map(|(_, c)| *c);
    assert_eq!(get("main;loop at app.c: 10;work;helper_[i]"), Some(10 * 6));
    assert_eq!(get("main;loop at app.c: 10;work"), Some(6 * 6));
    assert_eq!(get("main;work;helper_[i]"), Some(5 * 6));
    assert_eq!(get("main"), Some(2 * 6));
    assert_eq!(
        get("<partial call paths>;<unknown procedure> 0x1234 [libx.so]"),
        Some(6)
    );
    let svg = inferno_svg(&out.stdout, &dir.join("app.svg"));
    assert!(
        svg.contains("helper_[i]") || svg.contains("helper"),
        "frame names in the SVG"
    );
}

#[test]
fn source_lines_carry_their_costs() {
    let (_dir, db, _) = setup("view_cli_source");
    let out = view(&db, &["--source", "app.c"]);
    let row = |text: &str| {
        out.stdout
            .lines()
            .find(|l| l.ends_with(text))
            .map(str::to_string)
    };
    // Line 11 calls work (16 units of 27, none on the line itself).
    let r11 = row("t += work(i);").expect("line 11 shown");
    assert!(
        r11.trim_start().starts_with("59.3%") && r11.contains("   11  "),
        "{}",
        out.stdout
    );
    let r5 = row("return s * 3;").expect("line 5 shown");
    assert!(r5.contains("33.3%  33.3%"), "{}", out.stdout);
    assert!(row("int t = 0;").is_some(), "line 9 has samples");
    assert!(
        row("int main(void) {").is_none(),
        "untouched lines are left out"
    );
    let ranged = view(&db, &["--source", "app.c:8-9"]);
    let body: Vec<&str> = ranged.stdout.lines().skip(3).collect();
    assert_eq!(body.len(), 2, "{}", ranged.stdout);
    assert!(
        body[0].ends_with("8  int main(void) {"),
        "{}",
        ranged.stdout
    );
}

#[test]
fn bad_input_is_one_line_and_exit_two() {
    let (dir, db, _) = setup("view_cli_errors");
    let hpcview = tool("hpcview-rs");
    let fail = |args: &[&str], dir: &Path, expect: &str| {
        let out = Command::new(&hpcview)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    };
    let db_s = db.to_str().unwrap();
    fail(&["missing.hpcdb"], &dir, "missing.hpcdb");
    std::fs::write(dir.join("garbage.hpcdb"), b"not a database at all").unwrap();
    fail(&["garbage.hpcdb"], &dir, "garbage.hpcdb: not a database");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[8] = 200;
    std::fs::write(dir.join("newer.hpcdb"), &bytes).unwrap();
    fail(&["newer.hpcdb"], &dir, "version 200");
    let bytes = std::fs::read(&db).unwrap();
    std::fs::write(dir.join("cut.hpcdb"), &bytes[..bytes.len() / 2]).unwrap();
    fail(&["cut.hpcdb"], &dir, "truncated or corrupt");
    fail(
        &[db_s, "--metric", "cycles"],
        &dir,
        "no metric 'cycles'; metrics: cpu-clock",
    );
    fail(
        &[db_s, "--thread", "9"],
        &dir,
        "no thread 9; threads: 101 (app)",
    );
    fail(
        &[db_s, "--source", "nothere.c"],
        &dir,
        "no samples in a file matching 'nothere.c'",
    );
    fail(&[db_s, "--threshold", "120"], &dir, "--threshold");
    // Several databases here and none named.
    fail(&[], &dir, "several databases");
    let empty = scratch_dir("view_cli_errors_empty");
    fail(&[], &empty, "no *.hpcdb database");
    // clap's usage errors use exit 2 too.
    let out = Command::new(&hpcview)
        .args([db_s, "--folded", "--flat"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_only_database_here_is_opened_by_default() {
    let (dir, _db, _) = setup("view_cli_default");
    let out = tool_command("hpcview-rs")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("opened ./app.hpcdb"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("<program root>"));
    // And --help reads.
    let help = run_ok(tool_command("hpcview-rs").arg("--help"));
    assert!(
        help.contains("--callers") && help.contains("Exit status"),
        "{help}"
    );
}
