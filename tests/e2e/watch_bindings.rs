//! `hpcrun-rs --watch`: exact reads and writes by function on a named static, and sampled
//! producer/consumer bindings in the right proportions (`watch_pc.c`: per round `produce`
//! writes buf, `consume1` reads it twice, `consume2` once), also with the consumers in another
//! thread than the producer, through a heap buffer with `--data`, and through a stack array.

use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

fn bindings_json(
    dir: &std::path::Path,
    name: &str,
    watch: &str,
    args: &[&str],
) -> serde_json::Value {
    bindings_json_with(dir, name, &[], watch, args)
}

/// [`bindings_json`] with more hpcrun-rs options (`flags`).
fn bindings_json_with(
    dir: &std::path::Path,
    name: &str,
    flags: &[&str],
    watch: &str,
    args: &[&str],
) -> serde_json::Value {
    let exe = dir.join("pc");
    let db = dir.join(format!("{name}.db"));
    let hpcdb = dir.join(format!("{name}.hpcdb"));
    let hpcrun = || {
        let mut c = tool_command("hpcrun-rs");
        c.args(flags)
            .args(["-q", "--watch", watch, "-o"])
            .arg(&db)
            .arg(&exe)
            .args(args);
        c
    };
    // Once in a while on this VM (1 run under a loaded suite; none in about 900 other runs)
    // the kernel delivers a watchpoint trap to the program as SIGTRAP, which kills it
    // (hpcrun-rs exits 128 + 5 and says so): run it once more then. A second one fails.
    let first = run(&mut hpcrun());
    if first.status.code() == Some(128 + 5) {
        eprintln!("{name}: the command was killed by SIGTRAP; running it again");
        run_ok(&mut hpcrun());
    } else {
        let stderr = String::from_utf8_lossy(&first.stderr);
        assert!(first.status.success(), "{:?}: {stderr}", first.status);
    }
    run_ok(tool_command("hpcprof-rs").arg(&db).arg("-o").arg(&hpcdb));
    let json = run_ok(
        tool_command("hpcview-rs")
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
    assert_no_consumer_produces(&doc);
    let ratio = bytes(&doc, "consume1") / bytes(&doc, "consume2");
    assert!((1.8..=2.2).contains(&ratio), "{ratio} {doc}");

    // Bad requests: one line, exit status 2.
    for watch in ["nosuch", "a,b,c,d,e"] {
        let out = run(tool_command("hpcrun-rs")
            .args(["--watch", watch])
            .arg(dir.join("pc")));
        assert_eq!(out.status.code(), Some(2), "{watch}");
    }
}

/// The binding produce -> `consumer` through the buffer in `doc`.
fn row<'a>(doc: &'a serde_json::Value, consumer: &str) -> &'a serde_json::Value {
    let rows = doc["bindings"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|b| b["producer"] == "produce" && b["consumer"] == consumer);
    row.unwrap_or_else(|| panic!("no produce -> {consumer} in {doc}"))
}

/// The estimated bytes of the binding produce -> `consumer` in `doc`.
fn bytes(doc: &serde_json::Value, consumer: &str) -> f64 {
    row(doc, consumer)["bytes"].as_f64().unwrap()
}

/// No binding has a consumer as its producer (sampled stack words also bind the callers that
/// push return addresses to the callees that pop them: `main -> produce`).
fn assert_no_consumer_produces(doc: &serde_json::Value) {
    let rows = doc["bindings"].as_array().unwrap();
    let consumers = ["consume1", "consume2"];
    assert!(
        rows.iter()
            .all(|b| !consumers.iter().any(|c| b["producer"] == *c)),
        "{doc}"
    );
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

/// With `--data` the live heap blocks are targets too: the buffer as a 4096-byte heap block
/// shows the same 2 : 1, and its pairs' unique addresses estimate the block's 4096 bytes
/// (about 250 windows, half of them on the heap: one standard error is about 270 bytes; low
/// by the share of windows the program spends off the CPU, which other tests cause).
/// Without `--data` only static data is watched, through which this run passes nothing from
/// `produce` to the consumers.
#[test]
fn heap_blocks_are_watched_with_data() {
    let dir = scratch_dir("watch-heap");
    compile("watch_pc.c", &dir, "pc", &["-O1", "-g", "-pthread"]);
    let doc = bindings_json_with(
        &dir,
        "heap",
        &["--data"],
        "sample@200",
        &["2000000", "heap"],
    );
    let how = doc["how"][0].as_str().unwrap();
    assert!(how.contains("on the heap)"), "{doc}");
    let ratio = bytes(&doc, "consume1") / bytes(&doc, "consume2");
    assert!((1.8..=2.2).contains(&ratio), "{ratio} {doc}");
    assert_no_consumer_produces(&doc);
    for c in ["consume1", "consume2"] {
        let addresses = row(&doc, c)["addresses"].as_f64().unwrap();
        assert!((2048.0..=5120.0).contains(&addresses), "{doc}");
    }

    let doc = bindings_json(&dir, "static", "sample@200", &["1000000", "heap"]);
    let how = doc["how"][0].as_str().unwrap();
    assert!(!how.contains("heap"), "{doc}");
    let rows = doc["bindings"].as_array().unwrap();
    assert!(rows.iter().all(|b| b["producer"] != "produce"), "{doc}");
}

/// The buffer as an array in a stack frame: the threads' stacks are targets, the pairs come
/// out at 2 : 1 marked as through the stack, and `--no-stack` (QUAD's option) drops them.
#[test]
fn stack_arrays_are_watched_and_no_stack_drops_them() {
    let dir = scratch_dir("watch-stack");
    compile("watch_pc.c", &dir, "pc", &["-O1", "-g", "-pthread"]);
    let doc = bindings_json(&dir, "stack", "sample@200", &["2000000", "stack"]);
    for c in ["consume1", "consume2"] {
        assert_eq!(row(&doc, c)["stack"], true, "{doc}");
    }
    assert_no_consumer_produces(&doc);
    let ratio = bytes(&doc, "consume1") / bytes(&doc, "consume2");
    assert!((1.8..=2.2).contains(&ratio), "{ratio} {doc}");
    let json = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("stack.hpcdb"))
            .args(["--bindings", "--no-stack", "--json"]),
    );
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = doc["bindings"].as_array().unwrap();
    assert!(rows.iter().all(|b| b["stack"] == false), "{doc}");
    assert!(rows.iter().all(|b| b["producer"] != "produce"), "{doc}");
}

/// A consumer in a shared library is named from the library's symbols (the library is read
/// the first time a trap lands in it), and its reads are decoded there: exact counts as with
/// the consumer in the executable.
#[test]
fn a_consumer_in_a_shared_library_is_named_from_its_symbols() {
    let dir = scratch_dir("watch-library");
    let lib = compile(
        "watch_pc_lib.c",
        &dir,
        "libpc.so",
        &["-O1", "-g", "-shared", "-fPIC"],
    );
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    compile(
        "watch_pc.c",
        &dir,
        "pc",
        &[
            "-O1",
            "-g",
            "-pthread",
            "-DCONSUME2_IN_LIBRARY",
            "-Wl,--no-as-needed",
            lib.to_str().unwrap(),
            &rpath,
        ],
    );
    let doc = bindings_json(&dir, "exact", "buf", &["1000"]);
    let accesses: Vec<(String, u64, u64)> = (doc["accesses"].as_array().unwrap().iter())
        .map(|a| {
            (
                a["function"].as_str().unwrap().to_string(),
                a["reads"].as_u64().unwrap(),
                a["writes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        accesses,
        [
            ("consume1".into(), 2000, 0),
            ("consume2".into(), 1000, 0),
            ("produce".into(), 0, 1000)
        ],
        "{doc}"
    );
    assert_eq!(bytes(&doc, "consume2"), 8000.0, "{doc}");
}
