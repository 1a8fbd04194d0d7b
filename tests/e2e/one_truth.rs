//! One truth in every output (issue 35): the same database read through the flat view's JSON
//! (the reference), its CSV, pprof's own `go tool pprof -top` and speedscope's own importer must
//! give the same procedures the same exclusive and inclusive shares, inlined code and the
//! `<kernel>` pseudo-procedure included, metric by metric. Two databases: the STL map program
//! (`Mp::add` and the std::map code inlined into its loop) and the three-thread program measured
//! with two events (clock and page faults, whose handler's time is kernel time).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::export_support::correlate as correlate_profiles;
use crate::export_support::{
    available, go_available, go_pprof, measure_events, speedscope_import, speedscope_package,
};
use crate::support::{compile, run_ok, scratch_dir, tool_command};

/// Per frame name, (exclusive, inclusive) cost of one metric.
type Shares = BTreeMap<String, (u64, u64)>;

/// What the flat view says (see [`flat_truth`]).
struct Truth {
    scopes: Shares,
    frames: Shares,
    inlined: Vec<String>,
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
    let (mut scopes, mut frames) = (Shares::new(), Shares::new());
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut inlined = Vec::new();
    let mut stack = vec![&view["root"]];
    while let Some(n) = stack.pop() {
        stack.extend(n["children"].as_array().into_iter().flatten());
        if !is_frame(n) {
            continue;
        }
        let name = frame_name(n["name"].as_str().unwrap());
        *count.entry(name.clone()).or_default() += 1;
        if n["kind"] == "inlined" {
            inlined.push(name.clone());
        }
        let (excl, incl) = (
            n["excl"][m].as_u64().unwrap(),
            n["incl"][m].as_u64().unwrap(),
        );
        scopes.insert(name.clone(), (excl, incl));
        // The frames right inside it: below it through statements only.
        let mut inner = 0;
        let mut below: Vec<&Value> = n["children"].as_array().into_iter().flatten().collect();
        while let Some(c) = below.pop() {
            match is_frame(c) {
                true => inner += c["excl"][m].as_u64().unwrap(),
                false => below.extend(c["children"].as_array().into_iter().flatten()),
            }
        }
        frames.insert(name, (excl - inner, incl));
    }
    for (name, n) in count {
        if n > 1 {
            scopes.remove(&name);
            frames.remove(&name);
        }
    }
    let total = view["metrics"][m]["total"].as_u64().unwrap();
    Truth {
        scopes,
        frames,
        inlined,
        total,
    }
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

/// Check every output of `db` (in `dir`) against its flat view, for each of `metrics`; returns
/// how many inlined frames were compared.
fn one_truth(dir: &Path, db: &Path, metrics: &[&str]) -> usize {
    let mut inlined = 0;
    let package = speedscope_package();
    let go = go_available();
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
