//! `hpcview-rs --footprint`: distinct pages per procedure and samples by region, exact under
//! `page-faults@1 --data` on a fixture whose functions touch known pages (`footprint.c`).

use correlate::{footprint, Database, FootprintRow};

use crate::correlate_data::correlate;
use crate::hpcrun_data::measure_faults;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

#[test]
fn pages_and_regions_per_procedure_are_exact_under_page_faults() {
    let dir = scratch_dir("memory-footprint");
    let flags = ["-O2", "-g", "-fno-stack-clash-protection"];
    let exe = compile("footprint.c", &dir, "footprint", &flags);
    let db_path = dir.join("fp.db");
    measure_faults(&exe, &db_path);
    let hpcdb = correlate(&db_path);
    let db = Database::read(&hpcdb).unwrap();
    let rows = footprint(&db, 12);
    let row = |name: &str| -> &FootprintRow {
        let found = rows.iter().find(|r| r.procedure == name);
        found.unwrap_or_else(|| panic!("no {name} in {rows:?}"))
    };
    // Regions: stack, heap, static, other.
    assert_eq!(
        (row("touch_a").units, row("touch_a").by_region),
        (768, [0, 0, 768, 0])
    );
    assert_eq!(
        (row("touch_b").units, row("touch_b").by_region),
        (256, [0, 0, 256, 0])
    );
    // The heap block's first page was touched by malloc's header, not by mixed.
    assert_eq!(
        (row("mixed").units, row("mixed").by_region),
        (111, [16, 63, 32, 0])
    );
    // Ranked by pages, touch_a first; the text says the same.
    assert_eq!(rows[0].procedure, "touch_a");
    let text = run_ok(tool_command("hpcview-rs").arg(&hpcdb).arg("--footprint"));
    let first: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        first,
        ["768", "768", "0", "0", "768", "0", "touch_a"],
        "{text}"
    );
    let json = run_ok(
        tool_command("hpcview-rs")
            .arg(&hpcdb)
            .args(["--footprint", "--json"]),
    );
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = doc["procedures"].as_array().unwrap();
    let mixed = rows
        .iter()
        .find(|r| r["procedure"] == "mixed")
        .expect("mixed in the JSON");
    let got: Vec<u64> = ["pages", "stack", "heap", "static", "other"]
        .iter()
        .map(|k| mixed[*k].as_u64().unwrap())
        .collect();
    assert_eq!(got, [111, 16, 63, 32, 0]);
    // Lines: one 64-byte line per page touched here, so the same counts.
    assert_eq!(
        footprint(&db, 6)
            .iter()
            .find(|r| r.procedure == "mixed")
            .unwrap()
            .units,
        111
    );

    // A database without data samples is refused in one line, exit status 2.
    let plain = dir.join("plain.db");
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "-o"])
            .arg(&plain)
            .arg(&exe),
    );
    let out = run(tool_command("hpcview-rs")
        .arg(correlate(&plain))
        .arg("--footprint"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("has no data samples (measure with `hpcrun-rs --data`)"),
        "{stderr}"
    );
}
