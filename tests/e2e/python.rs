//! Python functions in the calling context: hpcrun-rs turns on CPython's perf trampolines
//! (3.12 and later) and unwinds through them, hpcprof-rs names each Python function there and
//! leaves the interpreter's call machinery out. The fixture (`py_callback.py` with
//! `py_callback.c`) has Python call C through ctypes, C call back into Python, and that call C
//! again, from two Python callers whose split the program's own thread clocks give, on two
//! Python threads; a thread started in C runs no Python at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::export_support::{available, go_available, go_pprof};
use crate::support::{compile, fixture, run, run_ok, scratch_dir, tool_command, work_clocks};

/// The CPython interpreters of these versions installed with pyenv, by version.
fn pyenv_pythons(versions: &[&str]) -> Vec<(String, PathBuf)> {
    let root = PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".pyenv/versions");
    let mut found = Vec::new();
    for version in versions {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                name.starts_with(&format!("{version}."))
            })
            .collect();
        dirs.sort();
        if let Some(python) = dirs.last().map(|d| d.join(format!("bin/python{version}"))) {
            if python.is_file() {
                found.push((version.to_string(), python));
            }
        }
    }
    found
}

/// One measurement of the fixture by `python`: the program's clocks (s, by caller), the
/// correlation's summary, and the folded paths (frames outermost first, with their samples).
struct Measured {
    clocks: BTreeMap<String, f64>,
    summary: String,
    paths: Vec<(Vec<String>, u64)>,
}

/// `python` running fixture `script` with `args` in `dir`, measured with `event` into
/// `name.db` and correlated.
fn measure(
    dir: &Path,
    python: &Path,
    name: &str,
    event: &str,
    (script, args): (&str, &[&str]),
) -> Measured {
    let db = format!("{name}.db");
    let measured = run(tool_command("hpcrun-rs")
        .args(["-e", event, "-o", &db])
        .arg(python)
        .arg(fixture(script))
        .args(args)
        .current_dir(dir));
    let recorded = String::from_utf8_lossy(&measured.stderr);
    assert!(measured.status.success(), "{recorded}");
    let stdout = String::from_utf8_lossy(&measured.stdout).into_owned();
    let out = run(tool_command("hpcprof-rs").arg(&db).current_dir(dir));
    // hpcrun-rs's summary first: what it said of the frame reader explains a failure.
    let summary = format!("{recorded}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{summary}");
    remove_maps(&summary);
    let folded = run_ok(
        tool_command("hpcview-rs")
            .args([&format!("{name}.hpcdb"), "--folded"])
            .current_dir(dir),
    );
    Measured {
        clocks: work_clocks(&stdout),
        summary,
        paths: parse_folded(&folded),
    }
}

/// Remove the interpreters' perf maps a correlation's summary names: the test's own.
fn remove_maps(summary: &str) {
    for line in summary.lines() {
        if let Some(map) = line.split(" named by ").nth(1) {
            let _ = std::fs::remove_file(map.trim());
        }
    }
}

/// `hpcview-rs --folded`'s paths: frames outermost first, with their samples.
fn parse_folded(folded: &str) -> Vec<(Vec<String>, u64)> {
    (folded.lines())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(stack, n)| {
            let frames = stack.split(';').map(str::to_string).collect();
            (frames, n.parse().unwrap())
        })
        .collect()
}

/// Whether `path` holds `frame`.
fn has(path: &[String], frame: &str) -> bool {
    path.iter().any(|f| f == frame)
}

#[test]
fn python_callers_sit_above_the_c_loop_as_their_clocks_split_it() {
    // As root, hpcrun-rs reads the frames in the kernel (3.11 on, with lines); otherwise it
    // falls back to CPython's perf trampolines (3.12 on, no lines).
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let versions: &[&str] = match root {
        true => &["3.11", "3.12", "3.13"],
        false => &["3.12", "3.13"],
    };
    let pythons = pyenv_pythons(versions);
    if pythons.is_empty() {
        eprintln!("skipped: no CPython {versions:?} under ~/.pyenv/versions");
        return;
    }
    let dir = scratch_dir("python_callback");
    compile(
        "py_callback.c",
        &dir,
        "libpycb.so",
        &["-O2", "-g", "-shared", "-fPIC", "-pthread"],
    );
    for (version, python) in pythons {
        let callback = ("py_callback.py", &["./libpycb.so", "20", "1000000"][..]);
        let m = measure(
            &dir,
            &python,
            &format!("py{version}"),
            "cpu-clock@f4000",
            callback,
        );
        assert!(
            m.summary.contains("samples with their Python functions"),
            "{version}: {}",
            m.summary
        );
        // Each Python thread's C-loop samples under its own chain, split as its clocks say:
        // the main thread's below <module> > main, the second's below Thread.run.
        let main_thread = |p: &[String]| p[0] == "_start";
        check_thread(
            &version,
            &m,
            "main",
            &["<module>", "main"],
            &main_thread,
            "",
        );
        let second = |p: &[String]| has(p, "Thread.run") && p[0] != "_start";
        check_thread(&version, &m, "second", &["Thread.run"], &second, "thread-");
        if version == "3.12" {
            pprof_names_python_functions(&dir);
        }
        if root {
            lines_are_the_calls_of_the_source(&version, &dir.join(format!("py{version}.hpcdb")));
        }
        // The native-only thread: its own paths, no Python in them, its clock's time.
        let native: Vec<&(Vec<String>, u64)> = m
            .paths
            .iter()
            .filter(|(p, _)| has(p, "native_main"))
            .collect();
        assert!(native
            .iter()
            .all(|(p, _)| !has(p, "<module>") && !has(p, "inner") && p[0] == "__clone3"));
        let seconds = native.iter().map(|(_, n)| n).sum::<u64>() as f64 / 4000.0;
        assert!(
            (seconds - m.clocks["native"]).abs() <= 0.1 * m.clocks["native"],
            "{version}: native thread {seconds:.3} s sampled, {:.3} s by its clock",
            m.clocks["native"]
        );
    }
}

/// The C loop's samples of one Python thread (`thread` picks its paths): at least 99% under
/// the whole chain `above > work > light|heavy > ... c_call_back ... > inner > ... > c_spin`
/// with none of the interpreter's call machinery left in it, and split between `light` and
/// `heavy` within 3 points of that thread's clocks (`{prefix}light`, `{prefix}heavy`).
fn check_thread(
    version: &str,
    m: &Measured,
    name: &str,
    above: &[&str],
    thread: &dyn Fn(&[String]) -> bool,
    prefix: &str,
) {
    let spin: Vec<&(Vec<String>, u64)> = (m.paths.iter())
        .filter(|(p, _)| has(p, "c_spin") && thread(p))
        .collect();
    let total: u64 = spin.iter().map(|(_, n)| n).sum();
    let right = |p: &[String]| {
        let at = |f: &str| p.iter().position(|x| x == f);
        let mut chain: Vec<Option<usize>> = above.iter().map(|f| at(f)).collect();
        chain.push(at("work"));
        chain.push(at("light").or(at("heavy")));
        chain.extend([at("c_call_back"), at("inner"), at("c_spin")]);
        let in_order = chain.iter().all(Option::is_some) && chain.windows(2).all(|w| w[0] < w[1]);
        let machinery =
            |f: &String| f.starts_with("_PyEval_EvalFrame") || f == "PyObject_Vectorcall";
        in_order && !p.iter().any(machinery)
    };
    let good: u64 = spin.iter().filter(|(p, _)| right(p)).map(|(_, n)| n).sum();
    assert!(
        total >= 300,
        "{version} {name}: only {total} samples in c_spin"
    );
    assert!(
        good as f64 >= 0.99 * total as f64,
        "{version} {name}: {good} of {total} C-loop samples under their Python callers; \
         first: {:?}",
        spin.iter().find(|(p, _)| !right(p))
    );
    let under = |who: &str| -> f64 {
        let n: u64 = (spin.iter())
            .filter(|(p, _)| has(p, who))
            .map(|(_, n)| n)
            .sum();
        n as f64
    };
    let share = under("light") / (under("light") + under("heavy"));
    let (light, heavy) = (
        m.clocks[&format!("{prefix}light")],
        m.clocks[&format!("{prefix}heavy")],
    );
    let want = light / (light + heavy);
    assert!(
        (share - want).abs() <= 0.03,
        "{version} {name}: light has {:.1}% of the C loop's samples, its clock {:.1}%",
        100.0 * share,
        100.0 * want
    );
}

/// The Python lines of the C loop's callers are the lines of their calls in the fixture's
/// source (found in its text): at least 99% of `inner`'s, `light`'s and `heavy`'s samples, and
/// of `work`'s, at the lines that call on towards the C loop.
fn lines_are_the_calls_of_the_source(version: &str, db: &Path) {
    let source = std::fs::read_to_string(fixture("py_callback.py")).unwrap();
    let line_of = |after: &str, text: &str| -> u64 {
        let lines: Vec<&str> = source.lines().collect();
        let from = lines.iter().position(|l| l.starts_with(after)).unwrap();
        let at = (from..lines.len())
            .find(|&i| lines[i].trim() == text)
            .unwrap();
        at as u64 + 1
    };
    let expected = [
        ("inner", vec![line_of("def inner", "return lib.c_spin(n)")]),
        (
            "light",
            vec![line_of("def light", "return lib.c_call_back(callback, n)")],
        ),
        (
            "heavy",
            vec![line_of("def heavy", "return lib.c_call_back(callback, n)")],
        ),
        (
            "work",
            vec![
                line_of("def work", "light(n)"),
                line_of("def work", "heavy(n)"),
            ],
        ),
    ];
    let view: serde_json::Value =
        serde_json::from_str(&run_ok(tool_command("hpcview-rs").arg(db).args([
            "--flat",
            "--json",
            "--threshold",
            "0",
        ])))
        .unwrap();
    // The flat view: each function once, its lines below it, over every calling context.
    for (function, lines) in expected {
        let (mut all, mut right) = (0.0, 0.0);
        let mut stack = vec![&view["root"]];
        while let Some(node) = stack.pop() {
            let children = node["children"].as_array().into_iter().flatten();
            if node["kind"] == "procedure" && node["name"] == function {
                for c in children.clone().filter(|c| c["kind"] == "statement") {
                    let n = c["incl"][0].as_f64().unwrap();
                    all += n;
                    if lines.contains(&c["line"].as_u64().unwrap_or(0)) {
                        right += n;
                    }
                }
            }
            stack.extend(children);
        }
        assert!(
            all > 0.0 && right >= 0.99 * all,
            "{version}: {function}: {right} of {all} ns at lines {lines:?}"
        );
    }
}

/// pprof itself, in its default mode, names the Python functions of `py3.12.hpcdb` in `dir` as
/// the views do, `<module>` included (its demangler erased names in angle brackets).
fn pprof_names_python_functions(dir: &Path) {
    if !available("go (for go tool pprof)", go_available()) {
        return;
    }
    run_ok(
        tool_command("hpcview-rs")
            .args(["py3.12.hpcdb", "--pprof", "py.pb.gz"])
            .current_dir(dir),
    );
    let top = go_pprof(&["-top", "-nodecount=1000"], &dir.join("py.pb.gz"), dir);
    let names: Vec<&str> = (top.lines())
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    for f in [
        "<module>", "main", "work", "light", "heavy", "inner", "c_spin",
    ] {
        assert!(names.contains(&f), "pprof -top lacks {f}:\n{top}");
    }
    assert!(!names.contains(&"<unknown>"), "{top}");
}

/// The children's fib samples: below the pool's worker and child_work; and how many.
fn fib_samples(paths: &[(Vec<String>, u64)]) -> (Vec<&(Vec<String>, u64)>, u64) {
    let work: Vec<&(Vec<String>, u64)> = (paths.iter())
        .filter(|(p, _)| has(p, "child_work") && has(p, "fib"))
        .collect();
    let total = work.iter().map(|(_, n)| n).sum();
    (work, total)
}

#[test]
fn forked_children_name_the_python_functions_their_parent_compiled() {
    let Some((_, python)) = pyenv_pythons(&["3.12"]).pop() else {
        eprintln!("skipped: no CPython 3.12 under ~/.pyenv/versions");
        return;
    };
    let dir = scratch_dir("python_fork");
    // Measured again once where the children's fib has fewer than 100 samples with their
    // Python frames (287 here, and 97 in one loaded CI run, its other children's samples
    // without any Python name: not explained yet); the summaries show what happened.
    let fork = ("py_fork.py", &[][..]);
    let mut m = measure(&dir, &python, "fork1", "cpu-clock@f2000", fork);
    if fib_samples(&m.paths).1 < 100 {
        eprintln!(
            "few samples in the children's fib, measuring again:\n{}",
            m.summary
        );
        m = measure(&dir, &python, "fork2", "cpu-clock@f2000", fork);
    }
    let (work, total) = fib_samples(&m.paths);
    assert!(
        total >= 100,
        "only {total} samples in the children's fib:\n{}\n{:?}",
        m.summary,
        m.paths
    );
    let named: u64 = (work.iter())
        .filter(|(p, _)| {
            has(p, "<module>") && has(p, "worker") && !p.iter().any(|f| f.contains("[unmapped]"))
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        named as f64 >= 0.98 * total as f64,
        "{named} of {total} samples of the children's fib with every Python frame named"
    );
}
