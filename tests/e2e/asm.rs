//! `hpcview-rs --asm PROCEDURE`: a procedure's machine code with its instructions' costs. The
//! fixture's `touch` writes one byte per page (each write a page fault) inside loops nested
//! three deep; its instructions are checked against objdump's, their costs against the flat
//! view's exclusive cost of `touch`, and the faults against the instruction that writes.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{json_node as node, marker, run, run_ok, scratch_dir, tool_command};

/// The instructions' start addresses objdump lists between `from` and `to` in `binary`.
fn objdump_addresses(binary: &str, from: u64, to: u64, dir: &std::path::Path) -> BTreeSet<u64> {
    let out = run_ok(
        std::process::Command::new("objdump")
            .args(["-d", &format!("--start-address={from:#x}")])
            .arg(format!("--stop-address={to:#x}"))
            .arg(binary)
            .current_dir(dir),
    );
    // An instruction's line is `ADDR:<tab>BYTES<tab>MNEMONIC ...`; a long one's bytes go on
    // in a line without the mnemonic.
    (out.lines())
        .filter(|l| l.split('\t').count() >= 3)
        .filter_map(|l| u64::from_str_radix(l.split(':').next()?.trim(), 16).ok())
        .collect()
}

#[test]
fn a_procedures_instructions_carry_its_exclusive_cost_on_its_machine_code() {
    let dir = scratch_dir("asm");
    crate::derived_metrics::measure_faults(&dir);
    run_ok(
        tool_command("hpcprof-rs")
            .arg("profile.db")
            .current_dir(&dir),
    );
    let asm: Value = serde_json::from_str(&run_ok(
        tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--asm", "touch", "--json"])
            .current_dir(&dir),
    ))
    .unwrap();
    let flat: Value = serde_json::from_str(&run_ok(
        tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--flat", "--json", "--threshold", "0"])
            .current_dir(&dir),
    ))
    .unwrap();
    let instructions: Vec<&Value> = (asm["lines"].as_array().unwrap().iter())
        .filter_map(|l| l.get("instruction"))
        .collect();
    let sum = |field: &str, m: usize| -> u64 {
        (instructions.iter())
            .map(|i| i[field][m].as_u64().unwrap())
            .sum()
    };
    // The user-mode costs on its instructions are exactly its exclusive cost (no inlined code
    // of `touch` was sampled), metric by metric.
    let touch = node(&flat["root"], "touch").expect("touch in the flat view");
    for m in 0..2 {
        assert_eq!(
            sum("costs", m),
            touch["excl"][m].as_u64().unwrap(),
            "metric {m}"
        );
        assert_eq!(asm["own"][m], touch["excl"][m], "metric {m}");
    }
    // Every instruction objdump finds in its code, at the same addresses.
    let ours: BTreeSet<u64> = instructions
        .iter()
        .map(|i| i["address"].as_u64().unwrap())
        .collect();
    let (first, last) = (*ours.first().unwrap(), *ours.last().unwrap());
    let theirs = objdump_addresses("./faults", first, last + 1, &dir);
    assert_eq!(ours, theirs);
    // Its three loops, each closed by a back edge named for its line.
    assert_eq!(asm["loops"], 3);
    for line in ["rounds", "pages", "work"].map(|m| marker("derived_faults.c", m)) {
        let edge = format!("back edge of the loop at derived_faults.c: {line}");
        assert!(
            instructions.iter().any(|i| i["jump"] == edge.as_str()),
            "no {edge}"
        );
    }
    // The faults (in the kernel's handler below the instruction, or at it) are at the byte
    // store marked @store, which touches each page first.
    let faults = |i: &&&Value| i["costs"][1].as_u64().unwrap() + i["kernel"][1].as_u64().unwrap();
    let store = instructions.iter().max_by_key(faults).unwrap();
    let text = store["text"].as_str().unwrap();
    // AT&T syntax: the destination, a memory operand, comes last.
    assert!(text.starts_with("mov ") && text.ends_with(')'), "{store}");
    let all = sum("costs", 1) + sum("kernel", 1);
    assert!(
        faults(&store) as f64 >= 0.9 * all as f64,
        "{store} of {all}"
    );
    // The text form marks the hottest instructions and says where samples land.
    let text = run_ok(
        tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--asm", "touch"])
            .current_dir(&dir),
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with(">> ")).count(),
        3,
        "{text}"
    );
    assert!(text.contains("a fault names the instruction that touched the page"));
    // Faults counted in a group land where the clock's samples do, and the listing says so.
    run_ok(
        tool_command("hpcrun-rs")
            .args([
                "-q",
                "-o",
                "group.db",
                "-e",
                "{cpu-clock@f4000,page-faults}",
                "./faults",
            ])
            .current_dir(&dir),
    );
    run_ok(tool_command("hpcprof-rs").arg("group.db").current_dir(&dir));
    let grouped = run_ok(
        tool_command("hpcview-rs")
            .args(["group.hpcdb", "--asm", "touch"])
            .current_dir(&dir),
    );
    assert!(
        grouped.contains("counted, and read with each cpu-clock sample"),
        "{grouped}"
    );
    assert!(!grouped.contains("a fault names"), "{grouped}");
    report_lists_the_same_code(&dir, &instructions, &asm);
    // A name that is not there, or names several procedures, is refused (status 2).
    for (name, says) in [("nosuch", "no procedure named"), ("s", "names")] {
        let out = run(tool_command("hpcview-rs")
            .args(["profile.hpcdb", "--asm", name])
            .current_dir(&dir));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

/// The HTML report's machine-code pane, read in Chromium, lists `touch` (among the hottest
/// procedures) with the instructions of `--asm touch --json` (`asm`, whose instructions are
/// `instructions`), in order, each with the same shares of the run, and marks three.
fn report_lists_the_same_code(dir: &std::path::Path, instructions: &[&Value], asm: &Value) {
    let Some(chromium) = crate::browser::chromium() else {
        return;
    };
    let out = run(tool_command("hpcview-rs")
        .args(["profile.hpcdb", "--html", "report.html"])
        .current_dir(dir));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("the machine code of"),
        "{err}"
    );
    let mut b = crate::browser::Browser::launch(&chromium, dir, 1400, 900);
    b.open(
        &dir.join("report.html"),
        "document.body.dataset.ready === 'true'",
    );
    b.click(".tab[data-pane='asm']");
    let chosen = b.eval(
        "(() => { const c = document.getElementById('asm-procedure'); \
         const o = [...c.options].find((o) => o.text === 'touch'); if (!o) return false; \
         c.value = o.value; c.dispatchEvent(new Event('change')); return true; })()",
    );
    assert_eq!(chosen, Value::Bool(true), "touch is not among the listings");
    let rows = b.eval(
        "[...document.querySelectorAll('#asm tbody tr[data-address]')].map((r) => \
         [Number(r.dataset.address), r.cells[0].textContent, r.cells[1].textContent, \
          r.cells[2].textContent])",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), instructions.len());
    let total = asm["run_totals"][0].as_u64().unwrap() as f64;
    let share = |v: u64| match v {
        0 => String::new(),
        v => format!("{:.1}%", v as f64 * 100.0 / total),
    };
    for (row, i) in rows.iter().zip(instructions) {
        assert_eq!(row[0], i["address"]);
        assert_eq!(
            row[2],
            share(i["costs"][0].as_u64().unwrap()).as_str(),
            "{i}"
        );
        assert_eq!(
            row[3],
            share(i["kernel"][0].as_u64().unwrap()).as_str(),
            "{i}"
        );
    }
    let marked = rows.iter().filter(|r| r[1] == ">>").count();
    assert_eq!(marked, 3, "{rows:?}");
}
