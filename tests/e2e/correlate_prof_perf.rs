//! The flat view of a mixed workload agrees with `perf report --no-children --sort sym` on the
//! same workload: per-procedure exclusive shares within a total variation distance of 0.15.
//! perf and hpcrun-rs measure two runs, whose shares differ by what the machine did meanwhile:
//! 0.100 in one quiet run on this project's 2-core VM (`sin` 8% in one run, 16% in the other),
//! so the bound leaves room for that; a misattributed procedure moves far more.

use std::collections::BTreeMap;
use std::process::Command;

use crate::correlate_prof_common::{bare, correlate, measure};
use crate::support::{compile, run_ok, scratch_dir};
use correlate::{flat, NodeKind, Selection};

/// `arith.constprop.0(long)` -> `arith`: the name without parameters or GCC clone suffixes.
fn normal(name: &str) -> String {
    let name = bare(name);
    match name.find('.') {
        Some(0) | None => name.to_string(),
        Some(i) => name[..i].to_string(),
    }
}

/// Normalise a name -> weight map into shares summing to 1.
fn shares(weights: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let total: f64 = weights.values().sum();
    weights.into_iter().map(|(k, v)| (k, v / total)).collect()
}

fn total_variation(p: &BTreeMap<String, f64>, q: &BTreeMap<String, f64>) -> f64 {
    let keys: std::collections::BTreeSet<&String> = p.keys().chain(q.keys()).collect();
    keys.into_iter()
        .map(|k| (p.get(k).unwrap_or(&0.0) - q.get(k).unwrap_or(&0.0)).abs())
        .sum::<f64>()
        / 2.0
}

/// User-space symbol shares from `perf report --no-children --sort sym`.
fn perf_shares(report: &str) -> BTreeMap<String, f64> {
    let mut weights = BTreeMap::new();
    for line in report.lines() {
        let mut parts = line.split_whitespace();
        let (Some(pct), Some("[.]")) = (parts.next(), parts.next()) else {
            continue;
        };
        let name: Vec<&str> = parts.collect();
        let pct: f64 = pct.trim_end_matches('%').parse().unwrap_or(0.0);
        *weights.entry(normal(&name.join(" "))).or_insert(0.0) += pct;
    }
    shares(weights)
}

#[test]
fn flat_view_agrees_with_perf() {
    let dir = scratch_dir("correlate_prof_perf");
    let bin = compile(
        "prof_mixed.c",
        &dir,
        "mixed",
        &["-O2", "-g", "-Wl,--no-as-needed", "-lm"],
    );
    let perf_data = dir.join("perf.data");
    run_ok(
        Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-F", "1000", "-o"])
            .arg(&perf_data)
            .arg(&bin)
            .arg("3"),
    );
    let report = run_ok(
        Command::new("perf")
            .args([
                "report",
                "--no-children",
                "--sort",
                "sym",
                "--stdio",
                "-q",
                "-i",
            ])
            .arg(&perf_data),
    );
    let theirs = perf_shares(&report);

    let profile = measure(&bin, &["3"], &dir, "mixed");
    let db = correlate(&dir, &[&profile], "mixed");
    let t = flat(&db, &Selection::All);
    let mut weights = BTreeMap::new();
    for n in &t.nodes {
        let name = match n.kind {
            NodeKind::Procedure => normal(&n.name),
            NodeKind::Unknown => "<unknown>".to_string(),
            _ => continue, // <kernel> is left out, as perf's [k] lines are
        };
        *weights.entry(name).or_insert(0.0) += n.excl[0].value as f64;
    }
    let ours = shares(weights);
    let tvd = total_variation(&ours, &theirs);
    eprintln!("total variation distance vs perf: {tvd:.3}");
    assert!(
        tvd <= 0.15,
        "total variation distance {tvd:.3} > 0.15\nours:  {ours:?}\nperf: {theirs:?}"
    );
    // arith is about 5% of the run: visible in ours, and as large as perf says.
    let arith = |m: &BTreeMap<String, f64>| m.get("arith").copied().unwrap_or(0.0);
    assert!(
        arith(&ours) > 0.02 && (arith(&ours) - arith(&theirs)).abs() < 0.03,
        "arith: ours {:.3}, perf {:.3}: {ours:?}",
        arith(&ours),
        arith(&theirs)
    );
}
