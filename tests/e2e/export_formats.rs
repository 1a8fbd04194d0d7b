//! `hpcview-rs --speedscope` and `--pprof` on the STL map program (-O2: loops, `Mp::add`
//! inlined into the second loop at line 19, the std::map code inlined into it), read back by
//! readers we did not write: speedscope's own importer (its npm package, under node),
//! `protoc --decode` with pprof's own `profile.proto`, and pprof itself (`go tool pprof`). Both must give the database's total,
//! the same stacks as `--folded`, and the inlined chain `main` > `loop at stlmap.cc: 18` >
//! `[I] Mp::add(int, double)` as frames named like the views' labels (pprof: by its plain
//! name, which pprof marks `(inline)` itself). A three-thread program
//! measured with two events checks one speedscope profile per thread and metric, and one
//! pprof sample type per metric with per-thread labels, against the per-thread views.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::correlate_view_support::{folded_lines, run_view};
use crate::export_support::{
    available, correlate, go_available, go_pprof, measure_and_correlate, measure_events,
    protoc_available, protoc_decode, speedscope_import, speedscope_package, Message,
};
use crate::support::{compile, run, scratch_dir, tool, tool_command};
use object::Object;

const ADD: &str = "[I] Mp::add(int, double)";
/// The same function in pprof, which marks inlined frames itself.
const PPROF_ADD: &str = "Mp::add(int, double)";
const LOOP: &str = "loop at stlmap.cc: 18";

/// The STL map program measured and correlated: (scratch dir, executable, database).
fn stlmap(test: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch_dir(test);
    let exe = compile(
        "stlmap.cc",
        &dir,
        "app",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let db = measure_and_correlate(&exe, &dir, "app");
    (dir, exe, db)
}

/// The database's one thread id and its total cpu-clock ns, from `--json`.
/// `hpcview-rs --pprof` of database `db`, written in `dir`: the file, and what protoc decodes.
fn pprof_of(dir: &Path, db: &Path) -> (PathBuf, Message) {
    let file = dir.join("app.pb.gz");
    run_view(
        &tool("hpcview-rs"),
        db,
        &["--pprof", file.to_str().unwrap()],
    );
    let decoded = protoc_decode(&file);
    (file, decoded)
}

fn thread_and_total(db: &Path) -> (u64, u64) {
    let json = run_view(&tool("hpcview-rs"), db, &["--json"]).json();
    let total = json["metrics"][0]["total"].as_u64().expect("total");
    let d = correlate::Database::read(db).expect("database");
    assert_eq!(d.threads.len(), 1, "one thread");
    (d.threads[0].tid.into(), total)
}

/// A speedscope frame (`name@file:line`) as `--folded` names it.
fn folded_frame(frame: &str) -> String {
    let name = &frame[..frame.rfind('@').expect("name@file:line")];
    match name.strip_prefix("[I] ") {
        Some(inlined) => format!("{inlined}_[i]"),
        None if name == "<kernel>" => format!("{name}_[k]"),
        None => name.to_string(),
    }
}

#[test]
fn export_speedscope_is_accepted_by_speedscopes_importer() {
    let Some(package) = speedscope_package() else {
        available("the speedscope npm package", false);
        return;
    };
    let (dir, _, db) = stlmap("export_speedscope");
    let (tid, total) = thread_and_total(&db);
    let file = dir.join("app.speedscope.json");
    let out = run_view(
        &tool("hpcview-rs"),
        &db,
        &["--speedscope", file.to_str().unwrap()],
    );
    assert!(out.stderr.contains("(1 profiles,"), "{}", out.stderr);

    let imported = speedscope_import(&package, &file);
    assert_eq!(imported["name"], "app.hpcdb");
    let profiles = imported["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 1, "one thread x one metric");
    let p = &profiles[0];
    assert_eq!(p["name"], format!("cpu-clock: thread {tid} (app)"));
    assert_eq!(p["unit"], "nanoseconds");
    assert_eq!(
        p["total"].as_u64(),
        Some(total),
        "speedscope's total is the database's"
    );

    // The same paths as --folded (speedscope keeps a frame's file and line besides).
    let stacks: Vec<(Vec<String>, u64)> = p["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let frames = s[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string());
            (frames.collect(), s[1].as_u64().unwrap())
        })
        .collect();
    let mut imported_paths: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, weight) in &stacks {
        let path: Vec<String> = frames.iter().map(|f| folded_frame(f)).collect();
        *imported_paths.entry(path.join(";")).or_default() += weight;
    }
    let folded = run_view(&tool("hpcview-rs"), &db, &["--folded"]);
    let folded: BTreeMap<String, u64> = folded_lines(&folded.stdout).into_iter().collect();
    assert_eq!(
        imported_paths.keys().collect::<Vec<_>>(),
        folded.keys().collect::<Vec<_>>(),
        "speedscope's stacks are --folded's paths"
    );

    // The inlined chain, as frames with their source positions, carries most of the time.
    let chain: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames.windows(3).any(|w| {
                w[0].starts_with("main@")
                    && w[1].starts_with(&format!("{LOOP}@"))
                    && w[1].ends_with("stlmap.cc:18")
                    && w[2].starts_with(&format!("{ADD}@"))
                    && w[2].ends_with("stlmap.cc:9")
            })
        })
        .map(|(_, w)| w)
        .sum();
    assert!(
        chain * 2 > total,
        "main > {LOOP} > {ADD}: {chain} of {total} ns"
    );
}

/// Function `id` of a decoded profile as (name, system name, file, start line).
fn function(p: &Message, strings: &[&str], id: i64) -> (String, String, String, i64) {
    let f = p
        .all("function")
        .into_iter()
        .find(|f| f.int("id") == id)
        .expect("function id");
    let s = |field| strings[f.int(field) as usize].to_string();
    (
        s("name"),
        s("system_name"),
        s("filename"),
        f.int("start_line"),
    )
}

#[test]
fn export_pprof_decodes_with_pprofs_schema() {
    if !available("protoc and pprof's profile.proto", protoc_available()) {
        return;
    }
    let (dir, exe, db) = stlmap("export_pprof");
    let (tid, total) = thread_and_total(&db);
    let (file, p) = pprof_of(&dir, &db);
    let strings = p.scalars("string_table");
    assert_eq!(strings[0], "", "string 0 is empty");
    let types = p.all("sample_type");
    assert_eq!(types.len(), 1, "one sample type per metric");
    let name = |m: &Message, field| strings[m.int(field) as usize];
    assert_eq!(
        (name(types[0], "type"), name(types[0], "unit")),
        ("cpu-clock", "nanoseconds")
    );
    assert_eq!(p.int("period"), 250_000, "4 kHz");

    let samples = p.all("sample");
    let sum: i64 = samples.iter().map(|s| s.int("value")).sum();
    assert_eq!(sum as u64, total, "the samples sum to the database's total");
    for s in &samples {
        let labels: HashMap<&str, i64> = s
            .all("label")
            .iter()
            .map(|l| (name(l, "key"), l.int("num")))
            .collect();
        assert_eq!(labels.get("thread_id"), Some(&(tid as i64)));
    }

    // The executable's mapping carries its build-id.
    let bytes = std::fs::read(&exe).unwrap();
    let build_id = object::File::parse(&*bytes)
        .unwrap()
        .build_id()
        .unwrap()
        .expect("build-id");
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let mapping = p
        .all("mapping")
        .into_iter()
        .find(|m| name(m, "filename") == exe.to_str().unwrap())
        .expect("a mapping for the executable");
    assert_eq!(name(mapping, "build_id"), hex);

    // A location of main's frame holds the inlined Mp::add and the loop, innermost first, at
    // the lines where each holds the next: the call of add at line 19.
    let chains: Vec<Vec<(String, i64)>> = p
        .all("location")
        .iter()
        .map(|l| {
            l.all("line")
                .iter()
                .map(|line| {
                    (
                        function(&p, &strings, line.int("function_id")).0,
                        line.int("line"),
                    )
                })
                .collect()
        })
        .collect();
    let outer = |c: &[(String, i64)]| {
        c.len() >= 3
            && c[c.len() - 3..].iter().map(|(n, l)| (n.as_str(), *l)).eq([
                (PPROF_ADD, c[c.len() - 3].1),
                (LOOP, 19),
                ("main", 19),
            ])
    };
    assert!(
        chains.iter().any(|c| outer(c)),
        "no location ends with {PPROF_ADD}, {LOOP}, main at line 19"
    );
    let add_id = p
        .all("function")
        .into_iter()
        .find(|f| name(f, "name") == PPROF_ADD)
        .expect("the inlined Mp::add")
        .int("id");
    let (_, system, source, line) = function(&p, &strings, add_id);
    assert_eq!(system, "Mp::add(int, double)");
    assert!(
        source.ends_with("tests/fixtures/stlmap.cc") && line == 9,
        "{source}:{line}"
    );

    // pprof itself: the type, the build-id, and the chain as inlined frames of main's frame.
    if !available("go (for go tool pprof)", go_available()) {
        return;
    }
    let traces = go_pprof(&["-traces"], &file, &dir);
    assert!(traces.contains("Type: cpu-clock\n"), "{traces}");
    assert!(traces.contains(&format!("Build ID: {hex}\n")), "{traces}");
    let lines: Vec<&str> = traces.lines().map(str::trim).collect();
    // pprof's own convention: its demangler drops the parameters, it marks inlined frames.
    let chain = [
        "Mp::add (inline)".to_string(),
        format!("{LOOP} (inline)"),
        "main".to_string(),
    ];
    assert!(
        lines
            .windows(3)
            .any(|w| w.iter().zip(&chain).all(|(l, c)| l.ends_with(c.as_str()))),
        "pprof shows no Mp::add > {LOOP} > main: {traces}"
    );
    assert!(
        !traces.contains("[I] "),
        "no label prefix beside pprof's (inline)"
    );
}

#[test]
fn export_files_are_never_replaced_unless_asked() {
    let (dir, _, db) = stlmap("export_replace");
    let file = dir.join("out.json");
    std::fs::write(&file, "keep").unwrap();
    let refused = run(tool_command("hpcview-rs")
        .arg(&db)
        .arg("--speedscope")
        .arg(&file));
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("already exists") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    // A symlink planted at the name is replaced as a directory entry, never written through.
    let target = dir.join("target.txt");
    std::fs::write(&target, "target").unwrap();
    let link = dir.join("link.pb.gz");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let replaced = run(tool_command("hpcview-rs")
        .arg(&db)
        .arg("--pprof")
        .arg(&link)
        .arg("--replace"));
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "target");
    let written = std::fs::read(&link).unwrap();
    assert_eq!(written[..2], [0x1f, 0x8b], "gzip");
    assert!(!std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn export_keeps_every_thread_and_metric() {
    let dir = scratch_dir("export_threads");
    // The main thread spins one unit itself: otherwise on a fast machine it may start and
    // join its workers within one sampling period and have no sample at all.
    let flags = ["-O2", "-g", "-pthread", "-DMAIN_UNITS=1"];
    let exe = compile("view_threads.c", &dir, "app", &flags);
    let events = ["cpu-clock@f2000", "task-clock@f2000"];
    let db = correlate(&[measure_events(&exe, &dir, "app", &events)], &dir, "app");
    let threads = correlate::Database::read(&db).unwrap().threads;
    assert_eq!(threads.len(), 4, "main and three workers");
    // Per thread, per metric: the total of `--thread TID --json`.
    let mut totals: HashMap<(u64, String), u64> = HashMap::new();
    for t in &threads {
        let json = run_view(
            &tool("hpcview-rs"),
            &db,
            &["--json", "--thread", &t.tid.to_string()],
        )
        .json();
        for m in json["metrics"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap().to_string();
            totals.insert((t.tid.into(), name), m["total"].as_u64().unwrap());
        }
    }
    assert!(
        totals.values().filter(|&&v| v > 0).count() >= 6,
        "the workers have samples: {totals:?}"
    );

    if let Some(package) = speedscope_package() {
        let file = dir.join("app.speedscope.json");
        run_view(
            &tool("hpcview-rs"),
            &db,
            &["--speedscope", file.to_str().unwrap()],
        );
        let imported = speedscope_import(&package, &file);
        let profiles = imported["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 8, "4 threads x 2 metrics");
        for ((tid, metric), total) in &totals {
            let name = format!("{metric}: thread {tid} (app)");
            let p = profiles
                .iter()
                .find(|p| p["name"] == name.as_str())
                .expect(&name);
            assert_eq!(p["total"].as_u64(), Some(*total), "{name}");
        }
    } else {
        available("the speedscope npm package", false);
    }

    if !available("protoc and pprof's profile.proto", protoc_available()) {
        return;
    }
    let (_, p) = pprof_of(&dir, &db);
    let strings = p.scalars("string_table");
    let types: Vec<&str> = p
        .all("sample_type")
        .iter()
        .map(|t| strings[t.int("type") as usize])
        .collect();
    assert_eq!(types, ["cpu-clock", "task-clock"]);
    let mut sums: HashMap<(u64, String), u64> = HashMap::new();
    for s in p.all("sample") {
        let tid = s
            .all("label")
            .iter()
            .find(|l| strings[l.int("key") as usize] == "thread_id")
            .expect("thread_id")
            .int("num");
        for (value, metric) in s.scalars("value").iter().zip(&types) {
            *sums.entry((tid as u64, metric.to_string())).or_default() +=
                value.parse::<u64>().unwrap();
        }
    }
    sums.retain(|_, v| *v > 0);
    totals.retain(|_, v| *v > 0);
    assert_eq!(
        sums, totals,
        "pprof's per-thread sums are the per-thread views' totals"
    );
}
