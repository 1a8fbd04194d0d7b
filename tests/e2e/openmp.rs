//! OpenMP programs (gcc with libgomp, and clang with LLVM's libomp where it is installed, as
//! `scripts/test` does): hpcprof-rs grafts each worker thread's share of a parallel
//! region under the master's call that ran it, and measures the runtime's waiting as the
//! `omp-idle` metric. The oracles are the fixtures' own thread clocks (each thread's CPU time in
//! the region per caller, in its work and in its wait), never the designed split: two threads
//! on two loaded cores do not get the designed ratio.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::hpctoolkit_db::{hatchet_python, hatchet_rows};
use crate::support::{compile_with, run, run_ok, scratch_dir, tool_command, work_clocks};

/// Samples per second: a region change is ambiguous for at most a quarter millisecond.
const EVENT: &str = "cpu-clock@f4000";

/// A compiler and what its OpenMP programs look like.
struct Toolchain {
    /// The C compiler.
    cc: &'static str,
    /// The name of `solve`'s outlined region body.
    body: &'static str,
    /// The runtime entry that starts a parallel region.
    fork: &'static str,
    /// The runtime entry that creates an explicit task.
    task: &'static str,
}

/// gcc with libgomp, and clang with libomp where LLVM's OpenMP runtime is installed (under
/// `CI=true` it must be: `scripts/test` installs it).
fn toolchains() -> Vec<Toolchain> {
    let mut list = vec![Toolchain {
        cc: "gcc",
        body: "solve._omp_fn.0",
        fork: "GOMP_parallel",
        task: "GOMP_task",
    }];
    let libomp = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name().to_string_lossy().starts_with("llvm-")
                && e.path().join("lib/libomp.so").exists()
        });
    assert!(
        libomp || std::env::var("CI").as_deref() != Ok("true"),
        "LLVM's OpenMP runtime (libomp-dev) is missing: scripts/test installs it"
    );
    if libomp {
        list.push(Toolchain {
            cc: "clang",
            body: ".omp_outlined.",
            fork: "__kmpc_fork_call",
            task: "__kmpc_omp_task",
        });
    }
    list
}

/// What one measured fixture gave: its directory, the program's stdout, and hpcprof-rs's
/// summary.
struct Measured {
    dir: PathBuf,
    stdout: String,
    summary: String,
}

/// Compile fixture `name` (`NAME.c`) with `cc`, measure it with hpcrun-rs under `wait_policy`
/// (`OMP_WAIT_POLICY`) and correlate it with hpcprof-rs (and `extra` arguments) into
/// `NAME.hpcdb`.
fn measure(cc: &str, test: &str, name: &str, wait_policy: &str, extra: &[&str]) -> Measured {
    measure_with(cc, test, name, wait_policy, &[], extra)
}

/// [`measure`], with hpcrun-rs given the arguments `record` too (beside `-e EVENT`).
fn measure_with(
    cc: &str,
    test: &str,
    name: &str,
    wait_policy: &str,
    record: &[&str],
    extra: &[&str],
) -> Measured {
    let dir = scratch_dir(&format!("{test}_{cc}"));
    let source = format!("{name}.c");
    compile_with(cc, &[&source], &dir, name, &["-O2", "-g", "-fopenmp"]);
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", EVENT, "-o", &format!("{name}.db")])
            .args(record)
            .arg(format!("./{name}"))
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

/// The sum over the fixture's two threads of the clock `what` they printed ("thread T WHAT N").
fn both_threads(stdout: &str, what: &str) -> f64 {
    (0..2)
        .map(|t| {
            let prefix = format!("thread {t} {what} ");
            let line = stdout.lines().find(|l| l.starts_with(&prefix));
            let n = line.unwrap_or_else(|| panic!("no {prefix}in:\n{stdout}"));
            n.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
        })
        .sum()
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

/// The nodes with a child named `name` (the call sites of a procedure).
fn call_sites<'a>(view: &'a Value, name: &str) -> Vec<&'a Value> {
    fn walk<'a>(node: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
        let children = node["children"].as_array().into_iter().flatten();
        if children.clone().any(|c| c["name"] == name) {
            out.push(node);
        }
        children.for_each(|c| walk(c, name, out));
    }
    let mut out = Vec::new();
    walk(&view["root"], name, &mut out);
    out
}

/// The inclusive cost of metric `m` summed over the nodes named `name`.
fn inclusive(view: &Value, name: &str, m: usize) -> f64 {
    nodes(view, name)
        .iter()
        .map(|(_, n)| n["incl"][m].as_f64().unwrap())
        .sum()
}

/// hpcprof-rs's OpenMP line in its summary.
fn openmp_line(summary: &str) -> &str {
    (summary.lines())
        .find(|l| l.trim_start().starts_with("OpenMP:"))
        .unwrap_or_else(|| panic!("no OpenMP line in:\n{summary}"))
}

/// The whole numbers in `text`, in order.
fn numbers_in(text: &str) -> Vec<u64> {
    (text.split(|c: char| !c.is_ascii_digit()))
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The numbers of hpcprof-rs's OpenMP line: (regions, worker samples placed, worker samples in
/// bodies, waiting samples blamed, waiting samples).
fn grafting(summary: &str) -> [u64; 5] {
    let numbers = numbers_in(openmp_line(summary));
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

/// The checks of a fixture whose region in `solve` runs under `caller_a` and `caller_b`: no
/// worker path left, each caller's region (both threads' shares) under the caller in the split
/// the threads' clocks say (within 3 points), and the body only under a caller's call to the
/// runtime. Returns the two callers' inclusive times.
fn callers_split_as_their_clocks_say(tc: &Toolchain, m: &Measured, view: &Value) -> (f64, f64) {
    let total = view["metrics"][0]["total"].as_f64().unwrap();
    assert_no_worker_paths(view, total);
    let (a, b) = (
        inclusive(view, "caller_a", 0),
        inclusive(view, "caller_b", 0),
    );
    let clocks = work_clocks(&m.stdout);
    let want = clocks["caller_a"] / (clocks["caller_a"] + clocks["caller_b"]);
    let got = a / (a + b);
    assert!(
        (got - want).abs() <= 0.03,
        "{}: caller_a has {:.1}% of the callers' time, its clocks say {:.1}%",
        tc.cc,
        100.0 * got,
        100.0 * want
    );
    for (path, _) in placed(view, tc.body) {
        assert!(path.iter().any(|p| p == tc.fork), "{path:?}");
        assert!(path.iter().any(|p| p.starts_with("caller_")), "{path:?}");
    }
    (a, b)
}

#[test]
fn worker_samples_split_between_the_callers_as_their_clocks_say() {
    for tc in toolchains() {
        // Spinning at the regions' ends (active), the master keeps taking samples there: asleep
        // (passive) on a loaded machine, it can take none for several milliseconds around the
        // change from caller_a's region to caller_b's, and the worker's samples of that time
        // are unplaced (up to 1.4% in runs beside a build).
        let m = measure(tc.cc, "openmp_callers", "omp_callers", "active", &[]);
        let [regions, grafted, bodies, _, _] = grafting(&m.summary);
        assert_eq!(
            regions, 2,
            "{}: a region under each caller: {}",
            tc.cc, m.summary
        );
        assert!(bodies > 500, "{}", m.summary);
        assert!(
            grafted as f64 >= 0.99 * bodies as f64,
            "{}: at least 99% of the worker samples placed: {}",
            tc.cc,
            m.summary
        );
        let view = top_down(&m.dir.join("omp_callers.hpcdb"));
        let total = view["metrics"][0]["total"].as_f64().unwrap();
        let (a, b) = callers_split_as_their_clocks_say(&tc, &m, &view);
        assert!((a + b) >= 0.95 * total, "{a} + {b} of {total}");
        if tc.cc == "gcc" {
            hatchet_sees_the_callers(&m, a, b);
        }
    }
}

/// The grafted tree in HPCToolkit's format, read by hatchet: each caller with the inclusive
/// time of our view (`a`, `b`, ns).
fn hatchet_sees_the_callers(m: &Measured, a: f64, b: f64) {
    let Some(python) = hatchet_python() else {
        return;
    };
    let out = m.dir.join("omp.d");
    run_ok(
        tool_command("hpcprof-rs")
            .args(["--hpctoolkit", "-o"])
            .arg(&out)
            .arg(m.dir.join("omp_callers.db")),
    );
    let rows = hatchet_rows(&python, &out);
    for (name, ours) in [("caller_a", a), ("caller_b", b)] {
        let function = format!("function: {name}");
        let theirs: f64 = (rows.iter())
            .filter(|(path, _)| path.last() == Some(&function))
            .map(|(_, t)| t)
            .sum();
        assert!(
            (theirs - ours / 1e9).abs() <= 1e-6 * theirs.max(1e-9),
            "hatchet: {name} {theirs} s, ours {} s",
            ours / 1e9
        );
    }
}

#[test]
fn without_grafting_the_workers_stay_where_they_were_sampled() {
    let m = measure(
        "gcc",
        "openmp_no_graft",
        "omp_callers",
        "passive",
        &["--no-graft"],
    );
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
    for tc in toolchains() {
        let m = measure(tc.cc, "openmp_idle", "omp_idle", "active", &[]);
        let view = top_down(&m.dir.join("omp_idle.hpcdb"));
        let metrics = view["metrics"].as_array().unwrap();
        assert_eq!(metrics[1]["name"], "omp-idle", "{view}");
        assert_eq!(metrics[2]["name"], "omp-overhead", "{view}");
        let (total, idle, overhead) = (
            metrics[0]["total"].as_f64().unwrap(),
            metrics[1]["total"].as_f64().unwrap(),
            metrics[2]["total"].as_f64().unwrap(),
        );
        // The region hands out no work: the runtime's time is all waiting.
        assert!(
            overhead <= 0.02 * total,
            "{}: overhead {overhead} of {total}",
            tc.cc
        );
        let clocks = work_clocks(&m.stdout);
        let waited = both_threads(&m.stdout, "wait-cpu-ns") / 1e9;
        let worked = clocks["thread 0"] + clocks["thread 1"];
        let want = waited / (waited + worked);
        let got = idle / total;
        assert!(
            (got - want).abs() <= 0.03,
            "{}: omp-idle is {:.1}% of the time, the threads' clocks say they waited {:.1}%",
            tc.cc,
            100.0 * got,
            100.0 * want
        );
        // The wait is the region's: under main's call site of the region (the runtime's entry,
        // or its tail after the body returned), within 5% or ten samples.
        let site = call_sites(&view, tc.fork);
        let region: f64 = site.iter().map(|n| n["incl"][1].as_f64().unwrap()).sum();
        let slack = (0.05 * idle).max(10.0 * metrics[1]["period"].as_f64().unwrap());
        assert!(
            region >= idle - slack,
            "{}: {region} of {idle} idle under the region",
            tc.cc
        );
        assert_no_worker_paths(&view, total);
    }
}

#[test]
fn with_off_cpu_time_waiting_asleep_is_idle_time_too() {
    if !crate::hpcrun::is_root() {
        eprintln!("skipped: off-cpu needs kernel sampling (root here)");
        return;
    }
    for tc in toolchains() {
        let record = ["--off-cpu"];
        let m = measure_with(
            tc.cc,
            "openmp_idle_asleep",
            "omp_idle",
            "passive",
            &record,
            &[],
        );
        let view = top_down(&m.dir.join("omp_idle.hpcdb"));
        let metrics = view["metrics"].as_array().unwrap();
        let idle = metrics.iter().find(|x| x["name"] == "omp-idle").unwrap();
        let idle = idle["total"].as_f64().unwrap();
        let wall = both_threads(&m.stdout, "wait-wall-ns");
        // The clocks time the barrier; the runtime also waits where they cannot: for the
        // `critical` section around the printing, at the region's implicit barrier, and the
        // worker asleep in the thread pool until the process exits (a few ms, more on a busy
        // machine: 12 ms seen once). So the barrier's wait must all be idle time, and the
        // rest is bounded.
        assert!(
            idle >= 0.95 * wall - 2e6 && idle <= 1.1 * wall + 20e6,
            "{}: omp-idle {:.1} ms, the threads waited {:.1} ms at the barrier by their clocks",
            tc.cc,
            idle / 1e6,
            wall / 1e6
        );
    }
}

#[test]
fn nested_regions_land_under_their_callers() {
    for tc in toolchains() {
        // The callers each fixture's work must run under, outermost first (nested regions:
        // the inner teams' work under outer()'s region, which is under main's).
        for (test, name, callers, work) in [(
            "openmp_nested",
            "omp_nested",
            &["main", "outer"][..],
            "inner_work",
        )] {
            let m = measure(tc.cc, test, name, "passive", &[]);
            let [_, grafted, bodies, _, _] = grafting(&m.summary);
            let cc = tc.cc;
            assert!(
                grafted as f64 >= 0.99 * bodies as f64,
                "{cc} {name}: {}",
                m.summary
            );
            let view = top_down(&m.dir.join(format!("{name}.hpcdb")));
            let total = view["metrics"][0]["total"].as_f64().unwrap();
            assert_no_worker_paths(&view, total);
            let under = callers[callers.len() - 1];
            let inside = inclusive(&view, under, 0);
            assert!(
                inside >= 0.97 * total,
                "{cc} {name}: {inside} of {total} under {under}"
            );
            let work_nodes = placed(&view, work);
            assert!(!work_nodes.is_empty(), "{cc} {name}: no {work}");
            for (path, _) in work_nodes {
                let mut names = path.iter();
                assert!(
                    callers.iter().all(|c| names.any(|p| p == c)),
                    "{cc} {name}: {work} not under {callers:?}: {path:?}"
                );
            }
        }
    }
}

#[test]
fn tasks_land_under_the_call_that_created_them_split_as_their_clocks_say() {
    // One thread of spawn()'s region runs make_a, which creates a share of tasks, then make_b,
    // three shares; both threads run them, at the region's end or inside the creating call.
    for tc in toolchains() {
        let m = measure(tc.cc, "openmp_task_sites", "omp_tasks", "passive", &[]);
        let cc = tc.cc;
        let [_, grafted, bodies, _, _] = grafting(&m.summary);
        assert!(
            grafted as f64 >= 0.99 * bodies as f64,
            "{cc}: {}",
            m.summary
        );
        let [at_creation, tasks] = task_counts(&m.summary);
        assert!(
            tasks > 0 && at_creation as f64 >= 0.99 * tasks as f64,
            "{cc}: {}",
            m.summary
        );
        let view = top_down(&m.dir.join("omp_tasks.hpcdb"));
        let total = view["metrics"][0]["total"].as_f64().unwrap();
        assert_no_worker_paths(&view, total);
        let spawn = inclusive(&view, "spawn", 0);
        assert!(
            spawn >= 0.97 * total,
            "{cc}: {spawn} of {total} under spawn"
        );
        // Every task's work under its maker's call to the runtime that created it.
        let work = placed(&view, "task_work");
        assert!(!work.is_empty(), "{cc}: no task_work");
        for (path, _) in &work {
            let maker = path.iter().position(|p| p == "make_a" || p == "make_b");
            let creation = path.iter().position(|p| p == tc.task);
            assert!(
                matches!((maker, creation), (Some(m), Some(c)) if m < c),
                "{cc}: task_work not under its maker's {}: {path:?}",
                tc.task
            );
        }
        let clocks = work_clocks(&m.stdout);
        let want = clocks["make_a"] / (clocks["make_a"] + clocks["make_b"]);
        let (a, b) = (inclusive(&view, "make_a", 0), inclusive(&view, "make_b", 0));
        let got = a / (a + b);
        assert!(
            (got - want).abs() <= 0.03,
            "{cc}: make_a's tasks have {:.1}% of the makers' time, their clocks say {:.1}%",
            100.0 * got,
            100.0 * want
        );
    }
}

/// The task numbers of hpcprof-rs's OpenMP line: (task samples under the call that created
/// them, task samples).
fn task_counts(summary: &str) -> [u64; 2] {
    let line = openmp_line(summary);
    let numbers = numbers_in(line.rsplit(';').next().unwrap_or_default());
    assert_eq!(numbers.len(), 2, "{line}");
    [numbers[0], numbers[1]]
}

#[test]
fn with_libomp_the_runtimes_own_events_place_a_lopsided_regions_worker_samples() {
    // clang's programs with LLVM's libomp load hpcrun-rs's OpenMP tool, which records when
    // each region and each thread's share of it ran: the worker's samples while the master
    // sleeps at the region's end (its next samples in the other caller's region) are placed
    // by the region they ran in. gcc's libgomp has no tools interface.
    let Some(tc) = toolchains().into_iter().find(|t| t.cc == "clang") else {
        return;
    };
    let m = measure(tc.cc, "openmp_lopsided", "omp_lopsided", "passive", &[]);
    let [_, grafted, bodies, _, _] = grafting(&m.summary);
    assert!(bodies > 300, "{}", m.summary);
    assert!(
        grafted as f64 >= 0.99 * bodies as f64,
        "at least 99% of the worker samples placed: {}",
        m.summary
    );
    let view = top_down(&m.dir.join("omp_lopsided.hpcdb"));
    callers_split_as_their_clocks_say(&tc, &m, &view);
    // The same run without the tool (`OMP_TOOL=disabled`, which the runtime honours): the
    // samples alone leave most of the worker's time unplaced, as they must.
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", EVENT, "-o", "untooled.db", "./omp_lopsided"])
            .env("OMP_WAIT_POLICY", "passive")
            .env("OMP_TOOL", "disabled")
            .current_dir(&m.dir),
    );
    assert!(stdout.contains("caller_a work-cpu-ns"), "{stdout}");
    let out = run(tool_command("hpcprof-rs")
        .arg("untooled.db")
        .current_dir(&m.dir));
    let summary = String::from_utf8_lossy(&out.stderr);
    let [_, grafted, bodies, _, _] = grafting(&summary);
    assert!(
        (grafted as f64) < 0.9 * bodies as f64,
        "without the tool's events the lopsided regions cannot all be placed: {summary}"
    );
}
