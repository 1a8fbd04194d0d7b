//! Derived metrics (`hpcview-rs --metric 'NAME = FORMULA'`): a formula over two sampled
//! metrics, computed per scope. The fixture's two loops fault at different rates per CPU
//! second; each measures its own faults (getrusage) and CPU time (its own count of perf's
//! cpu-clock, or its thread's clock where it may not count it), the oracle for the formula's
//! value at each loop's procedure.

use serde_json::Value;

use crate::support::{compile, json_node as node, run, run_ok, sampled_in_full, scratch_dir};
use crate::support::{tool_command, Sampled};

/// Faults per CPU millisecond, as the formula computes them.
const FORMULA: &str = "fpms = page-faults / (cpu-clock / 1e6)";

/// The faults fixture built in `dir` and measured there with `cpu-clock@f4000` and
/// `page-faults@1` into `profile.db`; what it printed (each loop's own counters).
pub(crate) fn measure_faults(dir: &std::path::Path) -> String {
    sample_faults(dir, &["-e", "cpu-clock@f4000", "-e", "page-faults@1"]).stdout
}

/// The faults fixture built in `dir` and measured there with hpcrun-rs options `events` into
/// `profile.db` ([`sampled_in_full`]).
fn sample_faults(dir: &std::path::Path, events: &[&str]) -> Sampled {
    compile("derived_faults.c", dir, "faults", &["-O2", "-g"]);
    let measure = |db: &std::path::Path| {
        run(tool_command("hpcrun-rs")
            .args(events)
            .arg("-o")
            .arg(db)
            .arg("./faults")
            .current_dir(dir))
    };
    sampled_in_full(&dir.join("profile.db"), measure)
}

/// The top-down `--json` view of database `db` (in `dir`), every scope, with [`FORMULA`].
fn view_with_formula(dir: &std::path::Path, db: &str) -> Value {
    let json = run_ok(
        tool_command("hpcview-rs")
            .args([db, "--json", "--threshold", "0", "--metric", FORMULA])
            .current_dir(dir),
    );
    serde_json::from_str(&json).unwrap()
}

/// (faults, CPU ns) that the fixture printed for `who` ("dense faults N cpu-ns M clock-ns
/// K"). The CPU time is K, its own count of the cpu-clock hpcrun-rs samples, where it could
/// count it: on a virtual machine the thread's clock M leaves out what the host stole while the
/// thread was on the CPU, which cpu-clock counts. (A run that lost samples, or during which
/// the host stole more than a little, is measured again: see [`sampled_in_full`].)
fn oracle(stdout: &str, who: &str) -> (f64, f64) {
    let line = (stdout.lines())
        .find(|l| l.starts_with(&format!("{who} faults ")))
        .unwrap_or_else(|| panic!("no line for {who} in:\n{stdout}"));
    let words: Vec<&str> = line.split(' ').collect();
    let number = |i: usize| -> f64 { words[i].parse().unwrap() };
    let ns = match number(6) {
        counted if counted >= 0.0 => counted,
        _ => number(4),
    };
    (number(2), ns)
}

#[test]
fn a_formula_over_two_metrics_gives_each_loops_rate_as_its_clocks_say() {
    let (dir, _, _) = formula_gives_each_loops_rate(
        "derived_metrics",
        &["-e", "cpu-clock@f4000", "-e", "page-faults@1"],
    );
    report_computes_the_formula_per_row(&dir);
}

/// The HTML report computes the formula per row in the page: in Chromium, the rows shown at
/// load (the root, main, the hot loop's procedure) show the values `--json` gives, and no value
/// where it has none (no exclusive CPU time, a division by zero).
fn report_computes_the_formula_per_row(dir: &std::path::Path) {
    let Some(chromium) = crate::browser::chromium() else {
        return;
    };
    run_ok(
        tool_command("hpcview-rs")
            .args([
                "profile.hpcdb",
                "--html",
                "report.html",
                "--metric",
                FORMULA,
            ])
            .current_dir(dir),
    );
    let view = view_with_formula(dir, "profile.hpcdb");
    let mut b = crate::browser::Browser::launch(&chromium, dir, 1400, 900);
    b.open(
        &dir.join("report.html"),
        "document.body.dataset.ready === 'true'",
    );
    let head = b.eval(
        "[...document.querySelectorAll('#tree thead th.derived')].map(t => [t.textContent, t.title])",
    );
    assert_eq!(
        head,
        serde_json::json!([["fpms (I)", FORMULA], ["fpms (E)", FORMULA]])
    );
    let shown = b.eval(
        "Object.fromEntries([...document.querySelectorAll('#tree tbody tr.row')].map(r => \
         [r.querySelector('.label').textContent, \
          [...r.querySelectorAll('td.derived')].map(c => c.textContent)]))",
    );
    let root = view["root"]["name"].as_str().unwrap();
    for who in [root, "main", "sparse"] {
        let n = node(&view["root"], who).unwrap_or_else(|| panic!("no {who} in --json"));
        for (k, key) in [(0, "derived_incl"), (1, "derived_excl")] {
            let cell = shown[who][k]
                .as_str()
                .unwrap_or_else(|| panic!("no row {who} in the report: {shown}"));
            match n[key][0].as_f64() {
                Some(want) => {
                    let got: f64 = cell.parse().unwrap_or(f64::NAN);
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{who} {key}: the report shows '{cell}', --json {want}"
                    );
                }
                None => assert_eq!(cell, "", "{who} {key}: no value in --json"),
            }
        }
    }
    assert!(
        shown[root][1] == "",
        "the root has no exclusive CPU time: {shown}"
    );
}

/// The same with the faults counted in a group read with each clock sample: every fault is
/// counted (no sampling of its own), and goes to the context of the clock sample that follows
/// it in its thread.
#[test]
fn a_group_read_with_each_sample_gives_each_loops_rate_as_its_clocks_say() {
    let (dir, stdout, stderr) =
        formula_gives_each_loops_rate("event_group", &["-e", "{cpu-clock@f4000,page-faults}"]);
    assert!(
        stderr.contains("page-faults counted and read with each cpu-clock sample"),
        "{stderr}"
    );
    // The faults are counted, not sampled: they come with the clock's samples (those that
    // carried some), and every fault of a loop is there, but for those after its thread's last
    // sample in it, which go to the next sample's context: at most one clock period's worth
    // (0.25 ms of CPU, some 90 faults in the dense loop, 2% of the sparse loop's).
    let json = run_ok(
        tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--json", "--threshold", "0"])
            .current_dir(&dir),
    );
    let view: Value = serde_json::from_str(&json).unwrap();
    let metrics = view["metrics"].as_array().unwrap();
    let samples = |m: usize| metrics[m]["samples"].as_u64().unwrap();
    assert!(samples(1) <= samples(0), "{metrics:?}");
    // The views say so: the member is counted and read with the leader's samples, not sampled.
    assert_eq!(metrics[1]["read_with"], "cpu-clock", "{metrics:?}");
    assert!(metrics[0].get("read_with").is_none(), "{metrics:?}");
    let text = run_ok(
        tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--flat"])
            .current_dir(&dir),
    );
    let said = text
        .lines()
        .find(|l| l.starts_with("page-faults: "))
        .unwrap_or_default();
    let read = format!(" counted, read with {} cpu-clock samples", samples(1));
    assert!(said.ends_with(&read), "{said}");
    for (who, within) in [("dense", 0.02), ("sparse", 0.05)] {
        let (want, _) = oracle(&stdout, who);
        let got = node(&view["root"], who).unwrap()["incl"][1]
            .as_f64()
            .unwrap();
        assert!(
            (got - want).abs() <= within * want,
            "{who}: {got} faults in the profile, the loop counted {want}"
        );
    }
}

/// Measure the fixture with `events`, correlate, and check the formula at each loop against
/// the fixture's own counters; returns the directory and hpcrun-rs's stdout and stderr.
fn formula_gives_each_loops_rate(
    name: &str,
    events: &[&str],
) -> (std::path::PathBuf, String, String) {
    let dir = scratch_dir(name);
    let Sampled { stdout, stderr, .. } = sample_faults(&dir, events);
    run_ok(
        tool_command("hpcprof-rs")
            .arg("profile.db")
            .current_dir(&dir),
    );
    let view = view_with_formula(&dir, "profile.hpcdb");
    assert_eq!(view["derived"][0]["name"], "fpms");
    let names: Vec<&str> = (view["metrics"].as_array().unwrap().iter())
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["cpu-clock", "page-faults"],
        "a formula's inputs are shown"
    );
    let mut rates = Vec::new();
    for who in ["dense", "sparse"] {
        let (faults, ns) = oracle(&stdout, who);
        let want = faults / (ns / 1e6);
        let n = node(&view["root"], who).unwrap_or_else(|| panic!("no {who} in the view"));
        let got = n["derived_incl"][0].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 0.05 * want,
            "{who}: {got:.2} faults per CPU ms in the view, its own counters say {want:.2}; \
             hpcrun-rs said:\n{stderr}"
        );
        rates.push(got);
    }
    assert!(rates[0] > 5.0 * rates[1], "the loops differ: {rates:?}");
    // The text view shows the formula and its columns; a scope without CPU time has no rate
    // (a division by zero is left empty, not shown as a number).
    let text = run_ok(
        tool_command("hpcview-rs")
            .args([
                "profile.hpcdb",
                "--flat",
                "--threshold",
                "0",
                "--metric",
                FORMULA,
            ])
            .current_dir(&dir),
    );
    assert!(text.contains(FORMULA), "{text}");
    let csv = run_ok(
        tool_command("hpcview-rs")
            .args([
                "profile.hpcdb",
                "--csv",
                "--metric",
                "cpu-clock",
                "--metric",
                FORMULA,
            ])
            .current_dir(&dir),
    );
    let head = csv.lines().next().unwrap();
    assert!(head.ends_with("fpms (I),fpms (E)"), "{head}");
    let zero_cpu = (csv.lines().skip(1))
        .filter(|l| l.split(',').nth_back(5) == Some("0"))
        .collect::<Vec<_>>();
    for line in zero_cpu {
        assert!(line.ends_with(','), "no CPU time, no rate: {line}");
    }
    (dir, stdout, stderr)
}

/// Evaluate root metric `argv[2]`'s inclusive formula in the metric taxonomy of the HPCToolkit
/// database `argv[1]` (`metrics/default.yaml`, METRICS.yaml's notation: flow sequences of
/// operands and operators, `*` and `/` before `+` and `-`; inputs by metric name and scope) on
/// the values hatchet reads at each function node; prints `{function: value}` where it is a
/// number (a division by zero is none).
const TAXONOMY_EVAL: &str = r#"
import json, math, sys, yaml
import hatchet as ht
db, name = sys.argv[1], sys.argv[2]
tax = yaml.safe_load(open(db + "/metrics/default.yaml"))
formula = next(r for r in tax["roots"] if r["name"] == name)["variants"]["Sum"]["formula"]["inclusive"]
def inputs(e):
    if isinstance(e, dict): return [e["metric"]]
    if isinstance(e, list): return [m for x in e for m in inputs(x)]
    return []
column = lambda m: "time" if m == "CPUTIME (sec)" else m
used = sorted({column(m) for m in inputs(formula)})
gf = ht.GraphFrame.from_hpctoolkit_latest(db, exclude_instructions=True, metric_names=used, metric_scopes=["i"])
def value(e, row):
    if isinstance(e, dict):
        assert e["scope"] == "execution", e
        return float(row[column(e["metric"]) + " (inc)"])
    if isinstance(e, (int, float)): return float(e)
    items = [x if isinstance(x, str) else value(x, row) for x in e]
    terms = [items[0]]
    for op, v in zip(items[1::2], items[2::2]):
        if op == "*": terms[-1] *= v
        elif op == "/": terms[-1] /= v
        elif op in "+-": terms += [op, v]
        else: raise ValueError(op)
    total = terms[0]
    for op, v in zip(terms[1::2], terms[2::2]):
        total = total + v if op == "+" else total - v
    return total
out = {}
for node, row in gf.dataframe.iterrows():
    v = value(formula, row)
    if row["name"].startswith("function: ") and math.isfinite(v):
        out[row["name"][len("function: "):]] = v
print(json.dumps(out))
"#;

/// The HPCToolkit database carries the formula in its metric taxonomy, for hpcviewer: read
/// there and evaluated on the numbers hatchet (LLNL's reader) takes from the database, it gives
/// each loop's rate as hpcview-rs computes it from the same database, and as the fixture's own
/// counters say.
#[test]
fn the_hpctoolkit_database_carries_the_formula_for_hpcviewer() {
    let Some(python) = crate::hpctoolkit_db::hatchet_python() else {
        return;
    };
    let dir = scratch_dir("derived_metrics_hpctoolkit");
    let stdout = measure_faults(&dir);
    run_ok(
        tool_command("hpcprof-rs")
            .args([
                "profile.db",
                "--hpctoolkit",
                "-o",
                "app.d",
                "--metric",
                FORMULA,
            ])
            .current_dir(&dir),
    );
    let out = run(std::process::Command::new(&python)
        .args(["-c", TAXONOMY_EVAL, "app.d", "fpms"])
        .current_dir(&dir));
    assert!(out.status.success(), "{out:?}");
    let taxonomy: Value = serde_json::from_slice(&out.stdout).unwrap();
    let view = view_with_formula(&dir, "app.d");
    for who in ["dense", "sparse"] {
        let theirs = taxonomy[who].as_f64().unwrap();
        let ours = node(&view["root"], who).unwrap()["derived_incl"][0]
            .as_f64()
            .unwrap();
        assert!(
            (theirs - ours).abs() <= 1e-6 * ours,
            "{who}: the taxonomy's formula gives {theirs} on hatchet's numbers, hpcview-rs {ours}"
        );
        let (faults, ns) = oracle(&stdout, who);
        let want = faults / (ns / 1e6);
        assert!(
            (ours - want).abs() <= 0.05 * want,
            "{who}: {ours:.2} faults per CPU ms, its own counters say {want:.2}"
        );
    }
}

#[test]
fn a_bad_formula_is_refused_with_what_is_wrong() {
    let dir = scratch_dir("derived_metrics_bad");
    compile("derived_faults.c", &dir, "faults", &["-O2", "-g"]);
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "./faults"])
            .current_dir(&dir),
    );
    run_ok(
        tool_command("hpcprof-rs")
            .arg("profile.db")
            .current_dir(&dir),
    );
    for (formula, says) in [
        ("r = page-faults / cpu-clock", "'page-faults'"),
        ("r = (cpu-clock", "expected ')'"),
        ("ipc", "'ipc' is instructions / cycles"),
        ("flops", "no metric 'flops'"),
    ] {
        let out = run(tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--metric", formula])
            .current_dir(&dir));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{formula}: {err}");
        assert!(err.contains(says), "{formula}: {err}");
    }
    // hpcprof-rs refuses them the same way for an HPCToolkit database, and writes none.
    let out = run(tool_command("hpcprof-rs")
        .args(["profile.db", "--hpctoolkit", "-o", "app.d"])
        .args(["--metric", "r = page-faults / cpu-clock"])
        .current_dir(&dir));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'page-faults'"), "{err}");
    assert!(!dir.join("app.d/meta.db").exists());
}
