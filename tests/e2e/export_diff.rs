//! `hpcview-rs --diff` on two builds of one program that differ in exactly one procedure's
//! work: `grow`'s loop count doubled (`-DGROW_ITERS`), `steady_a` and `steady_b` unchanged,
//! each build in its own directory (so nothing matches by path or address). The diff must rank
//! `grow` first at +100% (± 10), change no other procedure by more than 5%, gate with
//! `--fail-above` (exit 1 on a regression, 0 otherwise, 2 on bad input), and its folded output
//! must carry both runs' samples for a differential flame graph.
//!
//! The machine is shared, and CPU time is what is sampled: the same work can take 10-20% more
//! of it in one run than in another (a virtual CPU's stolen time counts as the task's). So each
//! build runs three times, alternating with the other, at 10 kHz (about 20,000 samples per
//! procedure and build: ±1% sampling error), the procedures take turns every millisecond or
//! so, and the changes are read against the run's own speed: the steady procedures' mean change
//! (which must stay within 15% of none, so a diff normalised by the run's total, -25% for them,
//! still fails).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::correlate_view_support::{inferno_svg, run_view};
use crate::export_support::{correlate, measure_events};
use crate::support::{compile, run, scratch_dir, tool};

/// Base and new builds measured (three runs each, alternating) and correlated: (dir, base
/// database, new database).
fn two_runs() -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir("export_diff");
    let builds = [("base", "800000000L"), ("new", "1600000000L")].map(|(name, iters)| {
        let build = dir.join(name);
        std::fs::create_dir_all(&build).unwrap();
        let define = format!("-DGROW_ITERS={iters}");
        let flags = ["-O2", "-g", "-fomit-frame-pointer", define.as_str()];
        (
            name,
            compile("diff_work.c", &build, "app", &flags),
            Vec::new(),
        )
    });
    let mut builds = builds;
    for round in 0..3 {
        for (name, exe, profiles) in &mut builds {
            let name = format!("{name}{round}");
            profiles.push(measure_events(exe, &dir, &name, &["cpu-clock@f10000"]));
        }
    }
    let [base, new] = builds.map(|(name, _, profiles)| correlate(&profiles, &dir, name));
    (dir, base, new)
}

fn diff(base: &Path, new: &Path, args: &[&str]) -> Output {
    run(Command::new(tool("hpcview-rs"))
        .arg("--diff")
        .arg(base)
        .arg(new)
        .args(args))
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--diff --json prints JSON")
}

/// The procedures holding at least 5% of either run, in the diff's order, with their change.
fn procedures(doc: &Value) -> Vec<(String, f64)> {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "procedure")
        .filter(|r| {
            let share = |side: &Value| side["share_pct"].as_f64().unwrap_or(0.0);
            share(&r["base"]).max(share(&r["new"])) >= 5.0
        })
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["change_pct"].as_f64().unwrap_or(f64::INFINITY),
            )
        })
        .collect()
}

/// Check the procedures' changes (see the module documentation); returns the run's speed.
fn check_ranking(doc: &Value) -> f64 {
    let procs = procedures(doc);
    assert_eq!(procs[0].0, "grow", "grow ranks first: {procs:?}");
    let ratio = |name: &str| {
        let change = procs.iter().find(|(n, _)| n == name);
        1.0 + change
            .unwrap_or_else(|| panic!("{name} matched: {procs:?}"))
            .1
            / 100.0
    };
    let speed = (ratio("steady_a") + ratio("steady_b")) / 2.0;
    assert!((0.85..1.15).contains(&speed), "the run's speed: {procs:?}");
    let grow = (ratio("grow") / speed - 1.0) * 100.0;
    assert!((grow - 100.0).abs() <= 10.0, "grow grew {grow}%: {procs:?}");
    for (name, _) in &procs[1..] {
        let change = (ratio(name) / speed - 1.0) * 100.0;
        assert!(
            change.abs() <= 5.0,
            "{name} changed by {change}%: {procs:?}"
        );
    }
    speed
}

#[test]
fn export_diff_ranks_the_doubled_procedure_and_gates_regressions() {
    let (dir, base, new) = two_runs();
    let mut speed = 1.0;
    for view in [&[][..], &["--flat"][..]] {
        let doc = stdout_json(&diff(&base, &new, &[&["--json"], view].concat()));
        speed = check_ranking(&doc);
        // Nothing unmatched among the procedures: the rebuilt binary's scopes match by name.
        let rows = doc["rows"].as_array().unwrap();
        let grow = rows.iter().find(|r| r["name"] == "grow").unwrap();
        assert!(grow["base"].is_object() && grow["new"].is_object());
        let loop_row = rows.iter().find(|r| {
            r["kind"] == "loop" && r["context"].as_array().unwrap().last() == Some(&"grow".into())
        });
        let change = loop_row.expect("grow's loop")["change_pct"]
            .as_f64()
            .unwrap();
        let change = ((1.0 + change / 100.0) / speed - 1.0) * 100.0;
        assert!((change - 100.0).abs() <= 10.0, "grow's loop grew {change}%");
    }
    // Per total: grow's share goes from about 1/3 to 1/2 of the run.
    let doc = stdout_json(&diff(&base, &new, &["--json", "--per-total", "--flat"]));
    assert_eq!(doc["normalise"], "per-total");
    assert!((doc["base_total"].as_f64().unwrap() - 100.0).abs() < 1e-6);
    let grow = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "grow")
        .unwrap();
    let (b, n) = (
        grow["base"]["excl"].as_f64().unwrap(),
        grow["new"]["excl"].as_f64().unwrap(),
    );
    assert!(
        (25.0..42.0).contains(&b) && (42.0..58.0).contains(&n),
        "grow's share {b}% -> {n}%"
    );

    // The text view: grow's row first.
    let text = diff(&base, &new, &["--flat", "--threshold", "5"]);
    let text = String::from_utf8(text.stdout).unwrap();
    let first = text.lines().nth(4).expect("a first row");
    assert!(
        first.trim_end().ends_with("grow  (in app > diff_work.c)"),
        "{text}"
    );

    // The CI gate: exit 1 on a regression, naming it; 0 below the limit; 0 for the same run.
    let gate = diff(
        &base,
        &new,
        &["--flat", "--threshold", "5", "--fail-above", "50"],
    );
    assert_eq!(gate.status.code(), Some(1));
    let err = String::from_utf8_lossy(&gate.stderr);
    assert!(err.contains("(--fail-above): grow +"), "{err}");
    let pass = diff(
        &base,
        &new,
        &["--flat", "--threshold", "5", "--fail-above", "400"],
    );
    assert_eq!(
        pass.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pass.stderr)
    );
    let same = diff(&base, &base, &["--fail-above", "0", "--threshold", "0"]);
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stderr)
    );

    // Bad input: exit 2 with one line.
    let missing = dir.join("missing.hpcdb");
    for (args, what) in [
        (vec!["--fail-above", "-3"], "--fail-above -3"),
        (vec!["--metric", "cycles"], "no metric 'cycles'"),
    ] {
        let out = diff(&base, &new, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(what) && err.lines().count() == 1, "{err}");
    }
    let out = diff(&base, &missing, &[]);
    assert_eq!(out.status.code(), Some(2));

    // Folded: each run's samples in its column; grow's paths about doubled; inferno draws it.
    let folded = diff(&base, &new, &["--folded"]);
    assert!(folded.status.success());
    let folded = String::from_utf8(folded.stdout).unwrap();
    let samples = |db: &Path| {
        run_view(&tool("hpcview-rs"), db, &["--json"]).json()["metrics"][0]["samples"]
            .as_u64()
            .unwrap()
    };
    let (mut b, mut n, mut grow_b, mut grow_n) = (0, 0, 0, 0);
    for line in folded.lines() {
        let mut parts = line.rsplitn(3, ' ');
        let new_count: u64 = parts.next().unwrap().parse().unwrap();
        let base_count: u64 = parts.next().unwrap().parse().unwrap();
        let path = parts.next().unwrap();
        (b, n) = (b + base_count, n + new_count);
        if path.split(';').any(|f| f == "grow") {
            (grow_b, grow_n) = (grow_b + base_count, grow_n + new_count);
        }
    }
    assert_eq!((b, n), (samples(&base), samples(&new)));
    assert!(
        folded.contains(";grow;loop at diff_work.c: "),
        "loops stay frames: {folded}"
    );
    let ratio = grow_n as f64 / grow_b as f64 / speed;
    assert!(
        (1.8..2.2).contains(&ratio),
        "grow's samples {grow_b} -> {grow_n}"
    );
    let svg = inferno_svg(&folded, &dir.join("diff.svg"));
    assert!(
        svg.contains("grow"),
        "the differential flame graph shows grow"
    );
}
