//! One truth in every output (issue 35): the same database read through the flat view's JSON
//! (the reference), its CSV, pprof's own `go tool pprof -top`, speedscope's own importer, the
//! HPCToolkit database as LLNL's hatchet reads it and the HTML report as Chromium shows it must
//! give the same procedures the same exclusive and inclusive shares, inlined code and the
//! `<kernel>` pseudo-procedure included, metric by metric (hatchet reads only the time metric).
//! Two databases: the STL map program (`Mp::add` and the std::map code inlined into its loop)
//! and the three-thread program measured with two events (clock and page faults, whose
//! handler's time is kernel time).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::browser::{chromium, Browser};
use crate::export_support::correlate as correlate_profiles;
use crate::export_support::{
    available, go_available, go_pprof, measure_events, speedscope_import, speedscope_package,
};
use crate::hpctoolkit_db::{hatchet_function, hatchet_python};
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// Per frame name, (exclusive, inclusive) cost of one metric.
type Shares = BTreeMap<String, (u64, u64)>;

/// What the flat view says (see [`flat_truth`]).
struct Truth {
    scopes: Shares,
    frames: Shares,
    /// Per procedure or inlined function, by its name as hatchet shortens it: its exclusive cost
    /// less the code inlined into it (HPCToolkit's function scope), and its inclusive cost. Only
    /// names that one scope of the view has.
    functions: Shares,
    inlined: Vec<String>,
    /// Per frame name, the name as the view gives it (what a user types to search for it).
    names: BTreeMap<String, String>,
    total: u64,
}

/// What the flat view of `db` says for metric `m`: per scope name, its (exclusive, inclusive)
/// cost as the view gives them (hpcviewer's convention: a procedure's exclusive cost holds its
/// loops and inlined code); per frame name, the same as the frame formats count them, where
/// loops and inlined code are frames of their own (a frame's self cost is its exclusive cost
/// less its inner frames'); and the metric's total. Only names that occur once in the view are
/// kept: a name nested in itself would be counted twice by a sum over its nodes.
fn flat_truth(db: &Path, m: usize) -> Truth {
    let json =
        run_ok(
            tool_command("hpcview-rs")
                .arg(db)
                .args(["--flat", "--json", "--threshold", "0"]),
        );
    let view: Value = serde_json::from_str(&json).unwrap();
    let is_frame =
        |n: &Value| ["procedure", "inlined", "loop"].contains(&n["kind"].as_str().unwrap());
    let (mut scopes, mut frames, mut functions) = (Shares::new(), Shares::new(), Shares::new());
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut short_count: BTreeMap<String, usize> = BTreeMap::new();
    let mut names = BTreeMap::new();
    let mut inlined = Vec::new();
    let mut stack = vec![&view["root"]];
    while let Some(n) = stack.pop() {
        stack.extend(n["children"].as_array().into_iter().flatten());
        if !is_frame(n) {
            continue;
        }
        let name = frame_name(n["name"].as_str().unwrap());
        *count.entry(name.clone()).or_default() += 1;
        names.insert(name.clone(), n["name"].as_str().unwrap().to_string());
        if n["kind"] == "inlined" {
            inlined.push(name.clone());
        }
        let (excl, incl) = (
            n["excl"][m].as_u64().unwrap(),
            n["incl"][m].as_u64().unwrap(),
        );
        scopes.insert(name.clone(), (excl, incl));
        // The frames right inside it: below it through statements only.
        let inner = inner_excl(n, m, is_frame);
        frames.insert(name.clone(), (excl - inner, incl));
        if n["kind"] != "loop" {
            let short = hatchet_function(n["name"].as_str().unwrap().trim_start_matches("[I] "));
            *short_count.entry(short.clone()).or_default() += 1;
            let inlined = inner_excl(n, m, |c: &Value| c["kind"] == "inlined");
            functions.insert(short, (excl - inlined, incl));
        }
    }
    for (name, n) in count {
        if n > 1 {
            scopes.remove(&name);
            frames.remove(&name);
        }
    }
    functions.retain(|name, _| short_count[name] == 1);
    let total = view["metrics"][m]["total"].as_u64().unwrap();
    Truth {
        scopes,
        frames,
        functions,
        inlined,
        names,
        total,
    }
}

/// The exclusive cost of metric `m` in the outermost scopes below `n` that `stop` picks.
fn inner_excl(n: &Value, m: usize, stop: impl Fn(&Value) -> bool) -> u64 {
    let mut inner = 0;
    let mut below: Vec<&Value> = n["children"].as_array().into_iter().flatten().collect();
    while let Some(c) = below.pop() {
        match stop(c) {
            true => inner += c["excl"][m].as_u64().unwrap(),
            false => below.extend(c["children"].as_array().into_iter().flatten()),
        }
    }
    inner
}

/// A frame's name as every output spells it: without the views' `[I] ` mark of inlined code,
/// and with C++ template and parameter lists left out (as `go tool pprof` shortens names).
fn frame_name(name: &str) -> String {
    let name = name.trim_start_matches("[I] ");
    if name.starts_with('<') || name.starts_with("loop at ") {
        return name.to_string();
    }
    let mut out = String::new();
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.trim().to_string()
}

/// The frames worth comparing: those with at least 1% of the total, exclusive or inclusive.
fn notable(truth: &Shares, total: u64) -> Vec<(&String, &(u64, u64))> {
    (truth.iter())
        .filter(|(_, &(e, i))| e.max(i) * 100 >= total)
        .collect()
}

/// The CSV flat view's rows as the same shares.
fn csv_shares(db: &Path, m: usize) -> Shares {
    let csv =
        run_ok(
            tool_command("hpcview-rs")
                .arg(db)
                .args(["--flat", "--csv", "--threshold", "0"]),
        );
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (kind, scope) = (col("kind"), col("scope"));
    let (incl, excl) = (6 + 2 * m, 7 + 2 * m);
    let mut shares = Shares::new();
    for line in lines {
        // Scope names may hold commas (C++ signatures), quoted; the costs are the last columns.
        let cells = split_csv(line);
        if ["procedure", "inlined", "loop"].contains(&cells[kind].as_str()) {
            let n = cells.len() - head.len();
            let name = frame_name(&cells[scope]);
            let e = shares.entry(name).or_default();
            e.0 += cells[excl + n].parse::<u64>().unwrap();
            e.1 += cells[incl + n].parse::<u64>().unwrap();
        }
    }
    shares
}

/// A CSV line's cells (RFC 4180 quoting).
fn split_csv(line: &str) -> Vec<String> {
    let (mut cells, mut cell, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

/// `go tool pprof -top` of the pprof export: per function, (flat%, cum%).
fn pprof_percentages(dir: &Path, db: &Path, metric: &str) -> BTreeMap<String, (f64, f64)> {
    let file = dir.join(format!("{metric}.pb.gz"));
    run_ok(tool_command("hpcview-rs").arg(db).arg("--pprof").arg(&file));
    let top = go_pprof(
        &[
            "-top",
            "-nodecount=1000",
            &format!("-sample_index={metric}"),
        ],
        &file,
        dir,
    );
    let mut out = BTreeMap::new();
    for line in top.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 6 || !w[1].ends_with('%') || !w[4].ends_with('%') {
            continue;
        }
        let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().ok();
        let (Some(flat), Some(cum)) = (pct(w[1]), pct(w[4])) else {
            continue;
        };
        let name = w[5..].join(" ");
        let name = name
            .trim_end_matches(" (inline)")
            .trim_end_matches(" (partial-inline)");
        out.insert(frame_name(name), (flat, cum));
    }
    out
}

/// speedscope's importer on the export: per frame name, (self, total) over the profiles of
/// `metric` (one per thread).
fn speedscope_shares(package: &Path, dir: &Path, db: &Path, metric: &str) -> Shares {
    let file = dir.join(format!("{metric}.speedscope.json"));
    run_ok(
        tool_command("hpcview-rs")
            .arg(db)
            .arg("--speedscope")
            .arg(&file),
    );
    let imported = speedscope_import(package, &file);
    let mut shares = Shares::new();
    for p in imported["profiles"].as_array().unwrap() {
        if !p["name"].as_str().unwrap().contains(metric) {
            continue;
        }
        for s in p["stacks"].as_array().unwrap() {
            let frames: Vec<String> = (s[0].as_array().unwrap().iter())
                .map(|f| {
                    let f = f.as_str().unwrap();
                    frame_name(&f[..f.rfind('@').unwrap()])
                })
                .collect();
            let weight = s[1].as_f64().unwrap() as u64;
            if let Some(leaf) = frames.last() {
                shares.entry(leaf.clone()).or_default().0 += weight;
            }
            let mut seen: Vec<&String> = frames.iter().collect();
            seen.sort();
            seen.dedup();
            for f in seen {
                shares.entry(f.clone()).or_default().1 += weight;
            }
        }
    }
    shares
}

/// Per function as hatchet names it, in the HPCToolkit database at `argv[1]`: its exclusive time
/// (its own lines and loops, not the functions inlined into it) summed over its nodes, and its
/// inclusive time over the nodes with no node of the same name above them.
const HATCHET_FUNCTIONS: &str = r#"
import json, math, sys
import hatchet as ht
gf = ht.GraphFrame.from_hpctoolkit_latest(sys.argv[1], exclude_instructions=True)
df = gf.dataframe
num = lambda v: 0.0 if math.isnan(v) else float(v)
out = {}
def walk(node, above):
    name, kind = node.frame["name"], node.frame.get("type")
    if kind == "function":
        e = out.setdefault(name, [0.0, 0.0])
        e[0] += num(df.loc[node]["time"])
        if name not in above:
            e[1] += num(df.loc[node]["time (inc)"])
        above = above | {name}
    for child in node.children:
        walk(child, above)
for root in gf.graph.roots:
    walk(root, frozenset())
print(json.dumps(out))
"#;

/// The names of the top-down view of `db` that occur under `<partial call paths>`, which hatchet
/// does not read (it reads the main entry point only).
fn partial_names(db: &Path) -> Vec<String> {
    let json = run_ok(
        tool_command("hpcview-rs")
            .arg(db)
            .args(["--json", "--threshold", "0"]),
    );
    let view: Value = serde_json::from_str(&json).unwrap();
    let children = |n: &Value| n["children"].as_array().cloned().unwrap_or_default();
    let mut stack: Vec<Value> = children(&view["root"])
        .into_iter()
        .filter(|c| c["name"] == "<partial call paths>")
        .collect();
    let mut names = Vec::new();
    while let Some(n) = stack.pop() {
        names.extend(
            n["name"]
                .as_str()
                .map(|n| hatchet_function(n.trim_start_matches("[I] "))),
        );
        stack.extend(children(&n));
    }
    names
}

/// hatchet on the HPCToolkit database of `db`: each notable function of the time metric (0, in
/// ns) has the flat view's exclusive and inclusive time. Returns how many were compared.
fn check_hatchet(python: &Path, dir: &Path, db: &Path, truth: &Truth) -> usize {
    let hpctoolkit = dir.join(format!(
        "{}.hpctoolkit",
        db.file_stem().unwrap().to_string_lossy()
    ));
    let args = ["--hpctoolkit", "--no-cache", "-o"];
    run_ok(
        tool_command("hpcprof-rs")
            .args(args)
            .arg(&hpctoolkit)
            .arg(db.with_extension("db")),
    );
    let out = run(std::process::Command::new(python)
        .args(["-c", HATCHET_FUNCTIONS])
        .arg(&hpctoolkit));
    assert!(
        out.status.success(),
        "hatchet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: BTreeMap<String, (f64, f64)> = serde_json::from_slice(&out.stdout).unwrap();
    let partial = partial_names(db);
    let mut compared = 0;
    for (name, &(e, i)) in notable(&truth.functions, truth.total) {
        if partial.contains(name) {
            continue;
        }
        let got = theirs
            .get(name)
            .unwrap_or_else(|| panic!("hatchet: no {name} in {theirs:?}"));
        let near = |a: f64, b: u64| (a - b as f64 / 1e9).abs() <= 1e-9 + 1e-9 * a;
        assert!(
            near(got.0, e) && near(got.1, i),
            "hatchet: {name} {got:?} s, the flat view says {e} and {i} ns"
        );
        compared += 1;
    }
    compared
}

/// The HTML report of `db` in Chromium: in its flat view, found with its search box, each
/// notable scope of each metric shows the flat view's inclusive and exclusive shares.
fn check_report(chromium: &Path, dir: &Path, db: &Path, truths: &[Truth]) {
    let html = dir.join(format!(
        "{}.html",
        db.file_stem().unwrap().to_string_lossy()
    ));
    run_ok(tool_command("hpcview-rs").arg(db).arg("--html").arg(&html));
    let mut b = Browser::launch(chromium, dir, 1400, 900);
    b.open(&html, "document.body.dataset.ready === 'true'");
    b.click(".tab[data-view=\"2\"]");
    let pct = |v: u64, t: u64| format!("{:.1}%", v as f64 * 100.0 / t as f64);
    let names: std::collections::BTreeSet<&String> = truths
        .iter()
        .flat_map(|t| notable(&t.scopes, t.total).into_iter().map(|(n, _)| n))
        .filter(|n| truths.iter().all(|t| t.scopes.contains_key(*n)))
        .collect();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        b.eval("document.getElementById('search').value = ''");
        b.type_into("#search", &truths[0].names[name]);
        let rows = b.eval(
            "[...document.querySelectorAll('#tree tbody tr.row.match')].map(r => \
             [r.querySelector('td.name').title || r.querySelector('.label').textContent, \
             [...r.querySelectorAll('td.incl')].map(c => c.textContent), \
             [...r.querySelectorAll('td.excl')].map(c => c.textContent)])",
        );
        let rows: Vec<(String, Vec<String>, Vec<String>)> = serde_json::from_value(rows).unwrap();
        let shown: Vec<_> = rows.iter().filter(|r| frame_name(&r.0) == *name).collect();
        assert_eq!(shown.len(), 1, "the report's flat view, {name}: {rows:?}");
        for (m, t) in truths.iter().enumerate() {
            let (e, i) = t.scopes[name];
            let excl = if e == 0 {
                String::new()
            } else {
                pct(e, t.total)
            };
            assert_eq!(
                (&shown[0].1[m], &shown[0].2[m]),
                (&pct(i, t.total), &excl),
                "the report's flat view, metric {m}: {name}"
            );
        }
    }
}

/// Check every output of `db` (in `dir`) against its flat view, for each of `metrics` (the first
/// a clock, in ns); returns how many inlined frames were compared.
fn one_truth(dir: &Path, db: &Path, metrics: &[&str]) -> usize {
    let mut inlined = 0;
    let package = speedscope_package();
    let go = go_available();
    let mut truths = Vec::new();
    for (m, metric) in metrics.iter().enumerate() {
        let truth = flat_truth(db, m);
        let total = truth.total;
        let csv = csv_shares(db, m);
        for (name, shares) in notable(&truth.scopes, total) {
            assert_eq!(csv.get(name), Some(shares), "CSV, {metric}: {name}");
        }
        let frames = notable(&truth.frames, total);
        inlined += frames
            .iter()
            .filter(|(n, _)| truth.inlined.contains(n))
            .count();
        assert!(frames.len() >= 3, "{metric}: {frames:?}");
        if go {
            let pprof = pprof_percentages(dir, db, metric);
            for (name, &(e, i)) in &frames {
                let want = |v: u64| 100.0 * v as f64 / total as f64;
                let got = pprof
                    .get(*name)
                    .unwrap_or_else(|| panic!("pprof, {metric}: no {name} in {pprof:?}"));
                assert!(
                    (got.0 - want(e)).abs() <= 0.011 && (got.1 - want(i)).abs() <= 0.011,
                    "pprof, {metric}: {name} {got:?}, the flat view says {:.2}% {:.2}%",
                    want(e),
                    want(i)
                );
            }
        } else {
            available("go (go tool pprof)", false);
        }
        match &package {
            Some(package) => {
                let speedscope = speedscope_shares(package, dir, db, metric);
                for (name, shares) in &frames {
                    assert_eq!(
                        speedscope.get(*name),
                        Some(*shares),
                        "speedscope, {metric}: {name}"
                    );
                }
            }
            None => {
                available("the speedscope npm package", false);
            }
        }
        truths.push(truth);
    }
    if let Some(python) = hatchet_python() {
        let compared = check_hatchet(&python, dir, db, &truths[0]);
        assert!(compared >= 3, "hatchet: {compared} functions compared");
    }
    if let Some(chromium) = chromium() {
        check_report(&chromium, dir, db, &truths);
    }
    inlined
}

#[test]
fn every_output_gives_the_inlined_stl_map_program_the_same_shares() {
    let dir = scratch_dir("one_truth_stlmap");
    let exe = compile("stlmap.cc", &dir, "app", &["-O2", "-g"]);
    let profile = measure_events(&exe, &dir, "app", &["cpu-clock@f2000"]);
    let db = correlate_profiles(&[profile], &dir, "app");
    let inlined = one_truth(&dir, &db, &["cpu-clock"]);
    assert!(inlined >= 3, "{inlined} inlined frames compared");
}

#[test]
fn every_output_gives_three_threads_and_their_kernel_time_the_same_shares() {
    let dir = scratch_dir("one_truth_threads");
    let exe = compile(
        "view_threads.c",
        &dir,
        "threads",
        &["-O2", "-g", "-pthread"],
    );
    let profile = measure_events(&exe, &dir, "threads", &["cpu-clock@f2000", "page-faults@1"]);
    let db = correlate_profiles(&[profile], &dir, "threads");
    let _ = one_truth(&dir, &db, &["cpu-clock", "page-faults"]);
}
