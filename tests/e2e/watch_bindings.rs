//! `hpcrun-rs --watch`: exact reads and writes by function on a named static, and sampled
//! producer/consumer bindings in the right proportions (`watch_pc.c`: per round `produce`
//! writes buf, `consume1` reads it twice, `consume2` once), also with the consumers in another
//! thread than the producer.

use std::process::Command;

use crate::support::{compile, run, run_ok, scratch_dir, tool};

fn bindings_json(
    dir: &std::path::Path,
    name: &str,
    watch: &str,
    args: &[&str],
) -> serde_json::Value {
    let exe = dir.join("pc");
    let db = dir.join(format!("{name}.db"));
    let hpcdb = dir.join(format!("{name}.hpcdb"));
    run_ok(
        Command::new(tool("hpcrun-rs"))
            .args(["-q", "--watch", watch, "-o"])
            .arg(&db)
            .arg(&exe)
            .args(args),
    );
    run_ok(
        Command::new(tool("hpcprof-rs"))
            .arg(&db)
            .arg("-o")
            .arg(&hpcdb),
    );
    let json = run_ok(
        Command::new(tool("hpcview-rs"))
            .arg(&hpcdb)
            .args(["--bindings", "--json"]),
    );
    serde_json::from_str(&json).unwrap()
}

#[test]
fn watch_var_counts_are_exact_and_sampling_keeps_the_two_to_one() {
    let dir = scratch_dir("watch-bindings");
    compile("watch_pc.c", &dir, "pc", &["-O1", "-g", "-pthread"]);
    let doc = bindings_json(&dir, "exact", "buf", &["1000"]);
    let acc = |f: &str| {
        let a = doc["accesses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["function"] == f)
            .unwrap();
        (a["reads"].as_u64().unwrap(), a["writes"].as_u64().unwrap())
    };
    assert_eq!(
        (acc("produce"), acc("consume1"), acc("consume2")),
        ((0, 1000), (2000, 0), (1000, 0)),
        "{doc}"
    );
    let pairs: Vec<(String, String, f64)> = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["producer"].as_str().unwrap().into(),
                b["consumer"].as_str().unwrap().into(),
                b["bytes"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("produce".into(), "consume1".into(), 16000.0),
            ("produce".into(), "consume2".into(), 8000.0)
        ]
    );
    assert_eq!(doc["lost"], 0);

    // Sampled: whole production epochs keep consume1 : consume2 at 2 : 1; a few hundred reads
    // per pair make +-10% several standard errors wide.
    let doc = bindings_json(&dir, "sampled", "sample@200", &["1000000"]);
    let rows = doc["bindings"].as_array().unwrap();
    assert!(rows.iter().all(|b| b["producer"] == "produce"), "{doc}");
    let ratio = bytes(&doc, "consume1") / bytes(&doc, "consume2");
    assert!((1.8..=2.2).contains(&ratio), "{ratio} {doc}");

    // Bad requests: one line, exit status 2.
    for watch in ["nosuch", "a,b,c,d,e"] {
        let out = run(Command::new(tool("hpcrun-rs"))
            .args(["--watch", watch])
            .arg(dir.join("pc")));
        assert_eq!(out.status.code(), Some(2), "{watch}");
    }
}

/// The estimated bytes of the binding produce -> `consumer` in `doc`.
fn bytes(doc: &serde_json::Value, consumer: &str) -> f64 {
    let rows = doc["bindings"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|b| b["producer"] == "produce" && b["consumer"] == consumer);
    let row = row.unwrap_or_else(|| panic!("no produce -> {consumer} in {doc}"));
    row["bytes"].as_f64().unwrap()
}

/// With the consumers in a second thread (a barrier between the two halves of each round),
/// exact watching counts the same, and sampling, whose watchpoint every thread inherits, sees
/// the bindings across the threads at 2 : 1.
#[test]
fn consumers_in_another_thread_are_seen_exactly_and_sampled() {
    let dir = scratch_dir("watch-threads");
    compile("watch_pc.c", &dir, "pc", &["-O1", "-g", "-pthread"]);
    let doc = bindings_json(&dir, "exact", "buf", &["1000", "threads"]);
    let exact: Vec<(String, f64)> = ["consume1", "consume2"]
        .iter()
        .map(|c| (c.to_string(), bytes(&doc, c)))
        .collect();
    assert_eq!(
        exact,
        [("consume1".into(), 16000.0), ("consume2".into(), 8000.0)],
        "{doc}"
    );
    let doc = bindings_json(&dir, "sampled", "sample@200", &["200000", "threads"]);
    let ratio = bytes(&doc, "consume1") / bytes(&doc, "consume2");
    assert!((1.8..=2.2).contains(&ratio), "{ratio} {doc}");
    assert_eq!(doc["lost"], 0, "{doc}");
}
