//! OpenMP programs (gcc, libgomp): hpcprof-rs grafts each worker thread's share of a parallel
//! region under the master's call that ran it, and measures the runtime's waiting as the
//! `omp-idle` metric. The oracles are the fixtures' own thread clocks (each thread's CPU time in
//! the region per caller, in its work and in its wait), never the designed split: two threads
//! on two loaded cores do not get the designed ratio.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{compile, run, run_ok, scratch_dir, tool_command, work_clocks};

/// Samples per second: a region change is ambiguous for at most a quarter millisecond.
const EVENT: &str = "cpu-clock@f4000";

/// What one measured fixture gave: its directory, the program's stdout, and hpcprof-rs's
/// summary.
struct Measured {
    dir: PathBuf,
    stdout: String,
    summary: String,
}

/// Compile fixture `name` (`omp_NAME.c`), measure it with hpcrun-rs under `wait_policy`
/// (`OMP_WAIT_POLICY`) and correlate it with hpcprof-rs (and `extra` arguments) into
/// `NAME.hpcdb`.
fn measure(test: &str, name: &str, wait_policy: &str, extra: &[&str]) -> Measured {
    let dir = scratch_dir(test);
    compile(&format!("{name}.c"), &dir, name, &["-O2", "-g", "-fopenmp"]);
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args([
                "-q",
                "-e",
                EVENT,
                "-o",
                &format!("{name}.db"),
                &format!("./{name}"),
            ])
            .env("OMP_WAIT_POLICY", wait_policy)
            .current_dir(&dir),
    );
    let out = run(tool_command("hpcprof-rs")
        .arg(format!("{name}.db"))
        .args(extra)
        .current_dir(&dir));
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{summary}");
    Measured {
        dir,
        stdout,
        summary,
    }
}

/// The top-down view of `db` as JSON (every scope).
fn top_down(db: &Path) -> Value {
    let out = run_ok(
        tool_command("hpcview-rs")
            .arg(db)
            .args(["--json", "--threshold", "0"]),
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}"))
}

/// Every node named `name` in the tree under `node`, with the names of its ancestors.
fn find<'a>(
    node: &'a Value,
    name: &str,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, &'a Value)>,
) {
    if node["name"] == name {
        out.push((path.clone(), node));
    }
    path.push(node["name"].as_str().unwrap_or("").to_string());
    for child in node["children"].as_array().into_iter().flatten() {
        find(child, name, path, out);
    }
    path.pop();
}

/// The nodes named `name` in the view, each with its ancestors' names.
fn nodes<'a>(view: &'a Value, name: &str) -> Vec<(Vec<String>, &'a Value)> {
    let mut out = Vec::new();
    find(&view["root"], name, &mut Vec::new(), &mut out);
    out
}

/// The nodes named `name` outside `<unplaced parallel work>`, each with its ancestors' names.
fn placed<'a>(view: &'a Value, name: &str) -> Vec<(Vec<String>, &'a Value)> {
    let mut found = nodes(view, name);
    found.retain(|(path, _)| !path.iter().any(|n| n == "<unplaced parallel work>"));
    found
}

/// The inclusive cost of metric `m` summed over the nodes named `name`.
fn inclusive(view: &Value, name: &str, m: usize) -> f64 {
    nodes(view, name)
        .iter()
        .map(|(_, n)| n["incl"][m].as_f64().unwrap())
        .sum()
}

/// The numbers of hpcprof-rs's OpenMP line: (regions, worker samples placed, worker samples in
/// bodies, waiting samples blamed, waiting samples).
fn grafting(summary: &str) -> [u64; 5] {
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("OpenMP:"))
        .unwrap_or_else(|| panic!("no OpenMP line in:\n{summary}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    [numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]]
}

/// Whether any worker thread's start is left in the view, other than the runtime's own (the
/// threads' start-up, under 1% of the run).
fn assert_no_worker_paths(view: &Value, total: f64) {
    let starts: f64 = inclusive(view, "start_thread", 0);
    assert!(
        starts <= 0.01 * total,
        "{starts} of {total} still under start_thread"
    );
}

#[test]
fn worker_samples_split_between_the_callers_as_their_clocks_say() {
    let m = measure("openmp_callers", "omp_callers", "passive", &[]);
    let [regions, placed, bodies, _, _] = grafting(&m.summary);
    assert_eq!(
        regions, 2,
        "solve's region under each caller: {}",
        m.summary
    );
    assert!(bodies > 500, "{}", m.summary);
    assert!(
        placed as f64 >= 0.99 * bodies as f64,
        "at least 99% of the worker samples placed: {}",
        m.summary
    );
    let view = top_down(&m.dir.join("omp_callers.hpcdb"));
    let total = view["metrics"][0]["total"].as_f64().unwrap();
    assert_no_worker_paths(&view, total);
    // Each caller's region, both threads' shares, under the caller: the split the threads'
    // clocks say.
    let (a, b) = (
        inclusive(&view, "caller_a", 0),
        inclusive(&view, "caller_b", 0),
    );
    let clocks = work_clocks(&m.stdout);
    let want = clocks["caller_a"] / (clocks["caller_a"] + clocks["caller_b"]);
    let got = a / (a + b);
    assert!(
        (got - want).abs() <= 0.03,
        "caller_a has {:.1}% of the callers' time, its clocks say {:.1}%",
        100.0 * got,
        100.0 * want
    );
    assert!((a + b) >= 0.95 * total, "{a} + {b} of {total}");
    // The body appears under each caller's call to the runtime, nowhere else but among the
    // few unplaced samples.
    let placed_bodies = nodes(&view, "solve._omp_fn.0");
    let placed_bodies = placed_bodies
        .iter()
        .filter(|(p, _)| !p.iter().any(|n| n == "<unplaced parallel work>"));
    for (path, _) in placed_bodies {
        assert!(path.iter().any(|p| p == "GOMP_parallel"), "{path:?}");
        assert!(path.iter().any(|p| p.starts_with("caller_")), "{path:?}");
    }
}

#[test]
fn without_grafting_the_workers_stay_where_they_were_sampled() {
    let m = measure("openmp_no_graft", "omp_callers", "passive", &["--no-graft"]);
    assert!(!m.summary.contains("OpenMP:"), "{}", m.summary);
    let view = top_down(&m.dir.join("omp_callers.hpcdb"));
    let total = view["metrics"][0]["total"].as_f64().unwrap();
    assert_eq!(view["metrics"].as_array().unwrap().len(), 1, "no omp-idle");
    let starts = inclusive(&view, "start_thread", 0);
    assert!(
        starts >= 0.2 * total,
        "{starts} of {total} under start_thread"
    );
}

#[test]
fn waiting_at_an_imbalanced_barrier_is_idle_time_within_3_points() {
    let m = measure("openmp_idle", "omp_idle", "active", &[]);
    let view = top_down(&m.dir.join("omp_idle.hpcdb"));
    let metrics = view["metrics"].as_array().unwrap();
    assert_eq!(metrics[1]["name"], "omp-idle", "{view}");
    let (total, idle) = (
        metrics[0]["total"].as_f64().unwrap(),
        metrics[1]["total"].as_f64().unwrap(),
    );
    let clocks = work_clocks(&m.stdout);
    let wait_clock = |t: u32| {
        let line = m
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("thread {t} wait-cpu-ns ")));
        let ns: f64 = line.unwrap().rsplit(' ').next().unwrap().parse().unwrap();
        ns / 1e9
    };
    let waited = wait_clock(0) + wait_clock(1);
    let worked = clocks["thread 0"] + clocks["thread 1"];
    let want = waited / (waited + worked);
    let got = idle / total;
    assert!(
        (got - want).abs() <= 0.03,
        "omp-idle is {:.1}% of the time, the threads' clocks say they waited {:.1}%",
        100.0 * got,
        100.0 * want
    );
    // The wait is the region's: under main's call to the runtime.
    let region = inclusive(&view, "GOMP_parallel", 1);
    assert!(
        region >= 0.95 * idle,
        "{region} of {idle} idle under the region"
    );
    assert_no_worker_paths(&view, total);
}

#[test]
fn nested_regions_and_tasks_land_under_their_callers() {
    for (test, name, under) in [
        ("openmp_nested", "omp_nested", "main"),
        ("openmp_tasks", "omp_tasks", "spawn"),
    ] {
        let m = measure(test, name, "passive", &[]);
        let [_, grafted, bodies, _, _] = grafting(&m.summary);
        assert!(
            grafted as f64 >= 0.99 * bodies as f64,
            "{name}: {}",
            m.summary
        );
        let view = top_down(&m.dir.join(format!("{name}.hpcdb")));
        let total = view["metrics"][0]["total"].as_f64().unwrap();
        assert_no_worker_paths(&view, total);
        let work = if name == "omp_nested" {
            "inner_work"
        } else {
            "task_work"
        };
        let inside = inclusive(&view, under, 0);
        assert!(
            inside >= 0.97 * total,
            "{name}: {inside} of {total} under {under}"
        );
        for (path, _) in placed(&view, work) {
            assert!(path.iter().any(|p| p == under), "{name}: {path:?}");
        }
    }
}
