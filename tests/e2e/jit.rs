//! Code compiled at run time: hpcprof-rs names the addresses no module covers by the perf map
//! the program wrote (`/tmp/perf-PID.map`) or by its jitdump (`/tmp/jit-PID.dump`, found among
//! the profile's modules), and hpcrun-rs's paths continue through that code to its native
//! caller. The fixture (`jit_loop.c`) copies a counting loop into anonymous executable memory
//! and names it one way or the other; a map owned by another user, or last written before the
//! run (a process of the same id, earlier), is refused.

use std::os::unix::fs::chown;
use std::path::PathBuf;

use serde_json::Value;

use crate::correlate_view_support::labels::text_rows;
use crate::hpcrun::is_root;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command, work_clocks};

/// The map the fixture wrote, named on its stdout (`map PATH result N`); removed when dropped.
struct MapFile(PathBuf);

impl Drop for MapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Every node named `name` in a view's tree, with its ancestors' names.
fn find(node: &Value, name: &str, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Value)>) {
    if node["name"] == name {
        out.push((path.clone(), node.clone()));
    }
    path.push(node["name"].as_str().unwrap_or("").to_string());
    for child in node["children"].as_array().into_iter().flatten() {
        find(child, name, path, out);
    }
    path.pop();
}

/// Measure the fixture naming its code `how` (`map` or `dump`), correlate it into `jit.hpcdb`
/// and check that the code is named `name` by the file it wrote, with at least 95% of the
/// samples, on a path from main through run_jit; the file, removed when dropped.
fn named(dir: &std::path::Path, how: &str, name: &str) -> MapFile {
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args([
                "-q",
                "-e",
                "cpu-clock@f2000",
                "-o",
                "jit.db",
                "./jit",
                "2000000000",
                how,
            ])
            .current_dir(dir),
    );
    let map = MapFile(PathBuf::from(
        stdout.split_whitespace().nth(1).expect("the map's path"),
    ));
    let out = run(tool_command("hpcprof-rs")
        .args(["jit.db", "-o", &format!("{how}.hpcdb")])
        .current_dir(dir));
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{summary}");
    // The loop's few instructions: one address or several, as the samples fell.
    let by = format!(" addresses named by {}", map.0.display());
    let named = (summary.lines())
        .filter_map(|l| l.trim().strip_prefix("JIT code: ")?.strip_suffix(&by))
        .filter_map(|n| n.parse::<u32>().ok())
        .next();
    assert!(named.is_some_and(|n| (1..=8).contains(&n)), "{summary}");
    assert!(!summary.contains("<unknown procedure>"), "{summary}");
    assert!(!summary.contains("warning"), "{summary}");
    let view: Value = serde_json::from_str(&run_ok(
        tool_command("hpcview-rs")
            .args([&format!("{how}.hpcdb"), "--json", "--threshold", "0"])
            .current_dir(dir),
    ))
    .unwrap();
    let total = view["metrics"][0]["total"].as_f64().unwrap();
    let mut found = Vec::new();
    find(&view["root"], name, &mut Vec::new(), &mut found);
    assert_eq!(found.len(), 1, "{how}: {view}");
    let (path, node) = &found[0];
    // The loop's time as its own thread clock says (on a busy machine the rest of the run,
    // start-up and exit, took 8.5% of a fresh run's samples once).
    let own = node["incl"][0].as_f64().unwrap();
    let want = work_clocks(&stdout)["loop"] * 1e9;
    assert!(
        (own - want).abs() <= 0.05 * want,
        "{name} has {:.1} ms of {:.1}, its clock says {:.1} ms",
        own / 1e6,
        total / 1e6,
        want / 1e6
    );
    // Unwound through the JIT code's frame pointer to the native code that called it.
    assert!(path.iter().any(|p| p == "run_jit"), "{path:?}");
    assert!(path.iter().any(|p| p == "main"), "{path:?}");
    map
}

#[test]
fn jit_code_is_named_by_its_perf_map_or_jitdump_and_paths_reach_its_caller() {
    let dir = scratch_dir("jit_map");
    compile("jit_loop.c", &dir, "jit", &["-O2", "-g"]);
    drop(named(&dir, "dump", "jit_dumped"));
    let map = named(&dir, "map", "jit_loop");

    // A map last written long before the run is another process's (of the same id): refused.
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    let file = std::fs::File::options().write(true).open(&map.0).unwrap();
    file.set_modified(old).unwrap();
    drop(file);
    let out = run(tool_command("hpcprof-rs")
        .args(["jit.db", "-o", "stale.hpcdb"])
        .current_dir(&dir));
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{summary}");
    assert!(
        summary.contains("last written outside the run"),
        "{summary}"
    );
    assert!(summary.contains("in <unknown procedure>"), "{summary}");

    // The same map owned by someone else is refused, with a warning: no name taken from it
    // (giving a file away takes root).
    if !is_root() {
        eprintln!("skipped the refused map: not root");
        return;
    }
    chown(&map.0, Some(65534), None).unwrap();
    let out = run(tool_command("hpcprof-rs")
        .args(["jit.db", "-o", "refused.hpcdb"])
        .current_dir(&dir));
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{summary}");
    let refused = format!(
        "warning: JIT map {} not used: owned by user 65534",
        map.0.display()
    );
    assert!(summary.contains(&refused), "{summary}");
    assert!(summary.contains("in <unknown procedure>"), "{summary}");
}

/// The fixture (`./jit` in `dir`) run `N` times in mode `how`, measured into `HOW.db` and
/// correlated: its stdout, the file it named its code in (removed when dropped), and the view
/// `view` asks for (`--flat`, or none: top-down) as JSON.
fn measured_view(
    dir: &std::path::Path,
    how: &str,
    n: &str,
    view: &[&str],
) -> (String, MapFile, Value) {
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock@f2000", "-o", &format!("{how}.db")])
            .args(["./jit", n, how])
            .current_dir(dir),
    );
    let file = MapFile(PathBuf::from(
        stdout.split_whitespace().nth(1).expect("the file's path"),
    ));
    let db = format!("{how}.hpcdb");
    run_ok(
        tool_command("hpcprof-rs")
            .args([&format!("{how}.db"), "-o", &db])
            .current_dir(dir),
    );
    let json = run_ok(
        tool_command("hpcview-rs")
            .arg(&db)
            .args(view)
            .args(["--json", "--threshold", "0"])
            .current_dir(dir),
    );
    (stdout, file, serde_json::from_str(&json).unwrap())
}

/// JIT code that keeps no frame pointer is unwound by the unwinding-info record its jitdump
/// gives before the code-load record (hpcrun-rs reads the dump as the program writes it); the
/// same code without that record has no way back to its caller, and its path is partial.
#[test]
fn jit_code_without_a_frame_pointer_is_unwound_by_its_jitdumps_records() {
    let dir = scratch_dir("jit_unwind");
    compile("jit_loop.c", &dir, "jit", &["-O2", "-g"]);
    drop(named(&dir, "unwind", "jit_unwound"));
    let (_, _dump, view) = measured_view(&dir, "bare", "300000000", &[]);
    let mut found = Vec::new();
    find(&view["root"], "jit_unwound", &mut Vec::new(), &mut found);
    assert!(!found.is_empty(), "{view}");
    for (path, _) in found {
        assert!(
            path.iter().any(|p| p == "<partial call paths>")
                && !path
                    .iter()
                    .any(|p| p == "run_jit" || p.contains("[unmapped]")),
            "without its unwinding record, nothing taken for its caller: {path:?}"
        );
    }
}

/// Code a JIT replaced at the same address is named by the load in effect when each sample was
/// taken: the fixture loads its loop as `jit_first`, runs it, loads it again where it was as
/// `jit_second` and runs it half as long; each name gets its own run's time by the thread's
/// clock (named by the last load alone, `jit_second` would take both).
#[test]
fn replaced_jit_code_is_named_by_the_load_in_effect_at_each_sample() {
    let dir = scratch_dir("jit_replace");
    compile("jit_loop.c", &dir, "jit", &["-O2", "-g"]);
    let (stdout, _dump, flat) = measured_view(&dir, "replace", "1000000000", &["--flat"]);
    let clocks = work_clocks(&stdout);
    let sampled = |name: &str| {
        let mut found = Vec::new();
        find(&flat["root"], name, &mut Vec::new(), &mut found);
        assert_eq!(found.len(), 1, "{name}: {flat}");
        found[0].1["incl"][0].as_f64().unwrap()
    };
    let (first, second) = (sampled("jit_first"), sampled("jit_second"));
    // Shares of the two runs, not times against the clocks: the sampling clock runs through
    // time the virtual machine's host takes, the thread's clock does not.
    let got = first / (first + second);
    let want = clocks["first"] / (clocks["first"] + clocks["second"]);
    assert!(
        (got - want).abs() <= 0.05,
        "jit_first has {got:.3} of the two runs' samples, their clocks say {want:.3} ({clocks:?})"
    );
}

#[test]
fn a_bundled_measurement_carries_its_perf_map_and_jitdump() {
    let dir = scratch_dir("jit_bundle");
    compile("jit_loop.c", &dir, "jit", &["-O2", "-g"]);
    for (how, name) in [("map", "jit_loop"), ("dump", "jit_dumped")] {
        let run_dir = format!("run-{how}/");
        let stdout = run_ok(
            tool_command("hpcrun-rs")
                .args(["-q", "-e", "cpu-clock", "--bundle", "-o", &run_dir])
                .args(["./jit", "300000000", how])
                .current_dir(&dir),
        );
        let file = MapFile(PathBuf::from(
            stdout.split_whitespace().nth(1).expect("the file's path"),
        ));
        let correlate = |out: &str| {
            let _ = std::fs::remove_file(dir.join(out));
            run_ok(
                tool_command("hpcprof-rs")
                    .args([&run_dir, "-o", out])
                    .current_dir(&dir),
            );
            std::fs::read(dir.join(out)).unwrap()
        };
        let here = correlate("here.hpcdb");
        // The JIT's file is gone (another machine, /tmp cleaned): the copy names the code.
        drop(file);
        let there = correlate("there.hpcdb");
        assert!(
            here == there,
            "{how}: the database differs without the original file"
        );
        let view = run_ok(tool_command("hpcview-rs").arg(dir.join("there.hpcdb")));
        assert!(view.contains(name), "{how}: {view}");
    }
}

/// `javac` and `java`, or `None` (with the reason printed) where they are missing and the run is
/// not CI's, which must have them (`scripts/test` installs openjdk-17-jdk-headless).
fn java_tools() -> Option<()> {
    let found = ["javac", "java"].iter().all(|t| {
        std::process::Command::new(t)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !found {
        let why = "javac or java is missing (apt-get install openjdk-17-jdk-headless)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
    }
    found.then_some(())
}

/// Measure `JavaWork` (compiled into `dir`) with `java_flag` (`auto` or `off`) and correlate it
/// into `NAME.hpcdb`: its stdout, the correlation's summary and the perf map it named code by.
fn measure_java(
    dir: &std::path::Path,
    java_flag: &str,
    name: &str,
) -> (String, String, Option<MapFile>) {
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock@f2000", "--java", java_flag])
            .args([
                "-o",
                &format!("{name}.db"),
                "java",
                "-cp",
                ".",
                "JavaWork",
                "60",
            ])
            .current_dir(dir),
    );
    let out = run(tool_command("hpcprof-rs")
        .args([&format!("{name}.db"), "-o", &format!("{name}.hpcdb")])
        .current_dir(dir));
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{summary}");
    let map = (summary.lines())
        .find_map(|l| {
            l.trim()
                .strip_prefix("JIT code: ")?
                .split(" named by ")
                .nth(1)
        })
        .map(|p| MapFile(PathBuf::from(p)));
    (stdout, summary, map)
}

/// A Java program: hpcrun-rs asks the JVM for a perf map of its compiled code and for frame
/// pointers in it, so hpcprof-rs names the methods, with the time their thread's clock gives
/// them, on paths through the JVM's native frames (no partial paths); with `--java off` the
/// JVM writes no map and the methods stay unnamed.
#[test]
fn java_methods_are_named_by_the_jvms_perf_map_on_whole_paths() {
    if java_tools().is_none() {
        return;
    }
    let dir = scratch_dir("jit_java");
    let source = crate::support::workspace_root().join("tests/fixtures/JavaWork.java");
    run_ok(
        std::process::Command::new("javac")
            .arg("-d")
            .arg(&dir)
            .arg(source),
    );
    let (stdout, summary, map) = measure_java(&dir, "auto", "java");
    assert!(map.is_some(), "no perf map named code: {summary}");
    let view = |args: &[&str]| {
        run_ok(
            tool_command("hpcview-rs")
                .arg("java.hpcdb")
                .args(args)
                .current_dir(&dir),
        )
    };
    // The flat view holds each method once (fib's recursion nests deeper than a JSON reader
    // goes); the top-down text view gives every path.
    let flat: Value =
        serde_json::from_str(&view(&["--flat", "--json", "--threshold", "0"])).unwrap();
    let rows = text_rows(&view(&["--threshold", "0"]));
    let clocks = work_clocks(&stdout);
    for (method, who) in [
        ("long JavaWork.fib(int)", "fib"),
        ("long JavaWork.sumSquares(int)", "sumSquares"),
    ] {
        let mut found = Vec::new();
        find(&flat["root"], method, &mut Vec::new(), &mut found);
        assert_eq!(
            found.len(),
            1,
            "{method} named once in the flat view: {summary}"
        );
        let own = found[0].1["incl"][0].as_f64().unwrap();
        let want = clocks[who] * 1e9;
        assert!(
            (own - want).abs() <= 0.07 * want + 10e6,
            "{method}: {:.1} ms in the profile, its thread's clock says {:.1} ms",
            own / 1e6,
            want / 1e6
        );
        // Every path to it comes from the JVM's launcher thread, none is partial.
        let mut above: Vec<&str> = Vec::new();
        let mut paths = 0;
        for (depth, label) in &rows {
            above.truncate(*depth);
            if label.starts_with(method) && !above.iter().any(|a| a.starts_with(method)) {
                paths += 1;
                assert!(
                    above.contains(&"JavaMain") && !above.iter().any(|a| a.contains("partial")),
                    "{method}: {above:?}"
                );
            }
            above.push(label);
        }
        assert!(paths >= 1, "{method}: no path in the top-down view");
    }
    let (_, summary, map) = measure_java(&dir, "off", "plain");
    assert!(map.is_none(), "{summary}");
    let view = run_ok(tool_command("hpcview-rs").arg(dir.join("plain.hpcdb")));
    assert!(!view.contains("JavaWork."), "{view}");
}
