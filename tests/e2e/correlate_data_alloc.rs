//! End-to-end tests of `hpcview-rs --alloc` (allocation sites), `--dhat` (the DHAT file for
//! dh_view.html) and `--delinquent` (instructions ranked by data cost, and their CSV record).
//! Oracles: the allocation fixture's own accounting, heaptrack's when it is installed, the
//! fixtures' sources, `objdump` and `nm`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use profiler::db::Profile;
use serde_json::Value;

use crate::correlate_data::{correlate, line_of, touch_database, view_json};
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// Operations of `alloc_sites.c`: 3 in 4 allocate through make_small, 1 in 4 through make_big.
const OPERATIONS: &str = "100000";

/// Pages of static array B in `data_touch.c` (A has three times as many).
const NP: u64 = 256;

/// One allocation site as `alloc_sites.c` counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Own {
    calls: u64,
    bytes: u64,
    peak_live: u64,
    live_at_end: u64,
}

/// The allocation fixture measured with every block tracked, correlated once: its scratch
/// directory, executable, database and own accounting by site (`make_small`, `make_big`).
struct AllocRun {
    dir: PathBuf,
    exe: PathBuf,
    database: PathBuf,
    own: BTreeMap<String, Own>,
}

fn alloc_run() -> &'static AllocRun {
    static RUN: OnceLock<AllocRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = scratch_dir("correlate-data-alloc");
        let exe = compile("alloc_sites.c", &dir, "alloc_sites", &["-O2", "-g"]);
        let db = dir.join("alloc.db");
        let out = run(tool_command("hpcrun-rs")
            .args(["-e", "cpu-clock@f1000", "--data", "--alloc-min", "0", "-o"])
            .arg(&db)
            .arg(&exe)
            .arg(OPERATIONS));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
        let profile = Profile::read(&db).expect("profile.db readable");
        assert_eq!(profile.data.stats.alloc_lost, 0, "{stderr}");
        let own = own_accounting(&String::from_utf8_lossy(&out.stdout));
        AllocRun {
            database: correlate(&db),
            dir,
            exe,
            own,
        }
    })
}

/// The fixture's `SITE calls bytes peak_live live_at_end` lines.
fn own_accounting(stdout: &str) -> BTreeMap<String, Own> {
    let own: BTreeMap<String, Own> = stdout
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            let site = Own {
                calls: n(1),
                bytes: n(2),
                peak_live: n(3),
                live_at_end: n(4),
            };
            (f[0].to_string(), site)
        })
        .collect();
    assert_eq!(own.len(), 2, "{stdout}");
    assert_eq!(
        (own["make_small"].calls, own["make_big"].calls),
        (75_000, 25_000)
    );
    let leaked: Vec<u64> = own
        .values()
        .map(|s| s.live_at_end)
        .filter(|&b| b > 0)
        .collect();
    assert_eq!(leaked.len(), 1, "one block leaks: {own:?}");
    own
}

/// The entry of `items` whose innermost frame (as `frames` gives it) is in `function`.
fn site_of<'v>(items: &'v [Value], function: &str, frames: impl Fn(&Value) -> String) -> &'v Value {
    let prefix = format!("{function} (");
    let found: Vec<&Value> = items
        .iter()
        .filter(|v| frames(v).starts_with(&prefix))
        .collect();
    assert_eq!(found.len(), 1, "sites of {function}: {items:#?}");
    found[0]
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Whether `a` is within `pct` percent of `b`.
fn within(a: u64, b: u64, pct: f64) -> bool {
    (a as f64 - b as f64).abs() <= b as f64 * pct / 100.0
}

#[test]
fn allocation_sites_count_as_the_program_and_heaptrack_do() {
    let run = alloc_run();
    let doc = view_json(&run.database, &["--alloc"]);
    assert_eq!(doc["view"], "alloc");
    assert_eq!(doc["lost"], 0);
    let sites = doc["sites"].as_array().expect("sites");
    let bytes: Vec<u64> = sites.iter().map(|s| u(&s["bytes"])).collect();
    assert!(
        bytes.windows(2).all(|w| w[0] >= w[1]),
        "ranked by bytes: {bytes:?}"
    );
    for (function, own) in &run.own {
        let site = site_of(sites, function, |s| s["frames"][0].as_str().unwrap().into());
        let peak = u(&site["peak_live"]);
        eprintln!(
            "{function}: calls {} bytes {} peak {peak} live at end {}; the program: {own:?}",
            site["calls"], site["bytes"], site["live_at_end"]
        );
        assert_eq!(
            (u(&site["calls"]), u(&site["bytes"])),
            (own.calls, own.bytes)
        );
        assert!(
            within(peak, own.peak_live, 1.0),
            "{function}: peak {peak}, {own:?}"
        );
        assert_eq!(u(&site["live_at_end"]), own.live_at_end, "{function}");
        let leaked = u64::from(own.live_at_end > 0);
        assert_eq!(u(&site["blocks_at_end"]), leaked, "{function}");
        assert_eq!(site["object"]["kind"], "heap");
    }
    compare_with_heaptrack(run, sites);
}

/// Calls, peaks and leaks of `sites` against heaptrack's for the same program, if installed.
/// heaptrack reports a site's bytes at the moment of the global peak, not the site's own
/// maximum: every site's peak is at least that, and the site holding most of the global peak
/// (make_big, at its maximum then) must agree within 1%.
fn compare_with_heaptrack(run: &AllocRun, sites: &[Value]) {
    if Command::new("heaptrack").arg("--version").output().is_err() {
        eprintln!("heaptrack is not installed: the comparison with it is skipped");
        return;
    }
    let data = run.dir.join("heaptrack.data");
    let out = run_ok(
        Command::new("heaptrack")
            .arg("-o")
            .arg(&data)
            .arg(&run.exe)
            .arg(OPERATIONS)
            .current_dir(&run.dir),
    );
    let file = std::fs::read_dir(&run.dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("heaptrack.data")
        })
        .unwrap_or_else(|| panic!("no heaptrack data file:\n{out}"));
    let printed = run_ok(
        Command::new("heaptrack_print")
            .arg("-f")
            .arg(&file)
            .args(["-p", "0", "-a", "1", "-T", "0", "-l", "1"]),
    );
    let calls = heaptrack_sites(
        &printed,
        "calls to allocation functions with",
        "peak consumption from",
    );
    let leaks = heaptrack_sites(&printed, "leaked over", "calls from");
    let top = calls
        .iter()
        .filter(|(f, _)| run.own.contains_key(*f))
        .max_by_key(|(_, (_, peak))| *peak)
        .map(|(f, _)| f.clone())
        .expect("heaptrack lists the fixture's sites");
    for function in run.own.keys() {
        let site = site_of(sites, function, |s| s["frames"][0].as_str().unwrap().into());
        let (their_calls, their_peak) = calls[function];
        let peak = u(&site["peak_live"]);
        eprintln!(
            "{function}: heaptrack calls {their_calls}, peak at the global peak {their_peak}"
        );
        assert_eq!(u(&site["calls"]), their_calls, "{function}");
        // heaptrack prints three significant digits.
        assert!(
            peak as f64 >= their_peak as f64 * 0.99,
            "{function}: {peak} < {their_peak}"
        );
        if *function == top {
            assert!(
                within(peak, their_peak, 1.0),
                "{function}: {peak} vs {their_peak}"
            );
        }
        let their_leak = leaks.get(function).map_or(0, |l| l.0);
        assert_eq!(
            u(&site["live_at_end"]),
            their_leak,
            "{function}: leaked bytes"
        );
    }
}

/// heaptrack_print's `NUMBER MIDDLE VALUE TAIL` lines, each followed by the site's function:
/// function -> (first number, second number), sizes in bytes.
fn heaptrack_sites(printed: &str, middle: &str, tail: &str) -> BTreeMap<String, (u64, u64)> {
    let lines: Vec<&str> = printed.lines().collect();
    let mut sites = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((first, rest)) = line.split_once(&format!(" {middle} ")) else {
            continue;
        };
        let Some(second) = rest.strip_suffix(&format!(" {tail}")) else {
            continue;
        };
        let function = lines.get(i + 1).map_or("", |l| l.trim()).to_string();
        sites
            .entry(function)
            .or_insert((heaptrack_size(first), heaptrack_size(second)));
    }
    sites
}

/// A count or size as heaptrack prints it: `841B`, `4.10K`, `4.96M` (powers of 1000).
fn heaptrack_size(text: &str) -> u64 {
    let text = text.trim_end_matches('B');
    let (number, scale) = match text.chars().last() {
        Some('K') => (&text[..text.len() - 1], 1e3),
        Some('M') => (&text[..text.len() - 1], 1e6),
        Some('G') => (&text[..text.len() - 1], 1e9),
        _ => (text, 1.0),
    };
    let value: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("heaptrack size {text:?}"));
    (value * scale).round() as u64
}

/// The fields `dh_view.html` requires of a heap-mode file and of each of its program points.
const DHAT_FIELDS: [&str; 14] = [
    "dhatFileVersion",
    "mode",
    "verb",
    "bklt",
    "bkacc",
    "tu",
    "Mtu",
    "cmd",
    "pid",
    "te",
    "pps",
    "ftbl",
    "tg",
    "tuth",
];
const DHAT_PP_FIELDS: [&str; 10] = [
    "tb", "tbk", "fs", "mb", "mbk", "gb", "gbk", "eb", "ebk", "tl",
];

/// `hpcview-rs --alloc --dhat FILE` on the allocation database: (exit status, stderr).
fn write_dhat(file: &Path) -> (Option<i32>, String) {
    let out = run(tool_command("hpcview-rs")
        .arg(&alloc_run().database)
        .args(["--alloc", "--dhat"])
        .arg(file));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_dhat_file_holds_the_same_sites_and_is_never_written_over() {
    let run = alloc_run();
    let file = run.dir.join("alloc.dhat");
    let _ = std::fs::remove_file(&file);
    let (status, stderr) = write_dhat(&file);
    assert_eq!(status, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    let dhat: Value = serde_json::from_str(&text).expect("DHAT file is JSON");
    for field in DHAT_FIELDS {
        assert!(dhat.get(field).is_some(), "no {field}");
    }
    assert_eq!(
        (&dhat["dhatFileVersion"], &dhat["mode"]),
        (&2.into(), &"heap".into())
    );
    assert_eq!(
        (&dhat["bklt"], &dhat["bkacc"]),
        (&true.into(), &false.into())
    );
    let ftbl: Vec<String> = dhat["ftbl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ftbl[0], "[root]");
    let pps = dhat["pps"].as_array().unwrap();
    let mut locations: Vec<&Value> = pps.iter().map(|pp| &pp["fs"]).collect();
    locations.sort_by_key(|fs| fs.to_string());
    locations.dedup();
    assert_eq!(
        locations.len(),
        pps.len(),
        "dh_view refuses a repeated location"
    );
    for pp in pps {
        for field in DHAT_PP_FIELDS {
            assert!(pp.get(field).is_some(), "no {field} in {pp}");
        }
        assert!(pp["fs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| (u(i) as usize) < ftbl.len()));
    }
    let innermost = |pp: &Value| {
        pp["fs"][0]
            .as_u64()
            .map_or(String::new(), |i| ftbl[i as usize].clone())
    };
    for (function, own) in &run.own {
        let pp = site_of(pps, function, innermost);
        assert_eq!(
            (u(&pp["tbk"]), u(&pp["tb"])),
            (own.calls, own.bytes),
            "{function}"
        );
        assert!(within(u(&pp["mb"]), own.peak_live, 1.0), "{function}: {pp}");
        assert_eq!(u(&pp["eb"]), own.live_at_end, "{function}");
        assert_eq!(u(&pp["ebk"]), u64::from(own.live_at_end > 0), "{function}");
    }

    // An existing file, or a link, is refused before anything is printed, and left alone.
    let (status, stderr) = write_dhat(&file);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let target = run.dir.join("elsewhere");
    std::fs::write(&target, "kept").unwrap();
    let link = run.dir.join("link.dhat");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (status, stderr) = write_dhat(&link);
    assert_eq!(status, Some(2), "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
}

/// The address of the `movb $0x1,0x123(...)` store in `touch` by `objdump -d`.
fn touch_store(exe: &Path) -> u64 {
    let listing = run_ok(Command::new("objdump").arg("-d").arg(exe));
    let body = listing
        .split("<touch>:\n")
        .nth(1)
        .expect("touch in the listing");
    let line = body
        .lines()
        .take_while(|l| !l.is_empty())
        .find(|l| l.contains("movb") && l.contains("$0x1,0x123("))
        .unwrap_or_else(|| panic!("no store in touch:\n{body}"));
    u64::from_str_radix(line.trim().split(':').next().unwrap(), 16).unwrap()
}

/// The address of data symbol `name` by `nm`.
fn nm_address(exe: &Path, name: &str) -> u64 {
    let symbols = run_ok(Command::new("nm").arg(exe));
    let line = symbols
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))
        .unwrap_or_else(|| panic!("{name} not in nm's list"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

#[test]
fn the_store_in_touch_leads_the_delinquent_instructions_with_each_object_it_wrote() {
    let database = touch_database();
    let exe = database.with_file_name("touch");
    let store = touch_store(&exe);
    let line = line_of("data_touch.c", "p[i * PG + 0x123] = 1");
    let doc = view_json(database, &["--delinquent"]);
    assert_eq!(doc["view"], "delinquent");
    let rows = doc["rows"].as_array().expect("rows");
    let total: u64 = rows.iter().map(|r| u(&r["samples"][0])).sum();
    assert_eq!(
        total,
        u(&doc["metrics"][0]["samples"]),
        "rows sum to the data samples"
    );
    // A, B and the two heap blocks are written by the one store, each page once; the first
    // page of each block is touched by malloc itself.
    let top = &rows[..4];
    let mut by_name = BTreeMap::new();
    for row in top {
        assert_eq!(u(&row["address"]), store, "{row}");
        assert_eq!(
            (&row["op"], &row["procedure"]),
            (&"store".into(), &"touch".into()),
            "{row}"
        );
        assert_eq!(u(&row["line"]), line, "{row}");
        assert!(row["file"].as_str().unwrap().ends_with("data_touch.c"));
        assert!(row["loop"]
            .as_str()
            .unwrap()
            .starts_with("loop at data_touch.c"));
        by_name.insert(
            row["object"]["name"].as_str().unwrap().to_string(),
            u(&row["samples"][0]),
        );
    }
    let heap = |caller: &str| {
        let found: Vec<u64> = by_name
            .iter()
            .filter(|(name, _)| name.contains(caller))
            .map(|(_, &n)| n)
            .collect();
        assert_eq!(found.len(), 1, "{caller} among {by_name:?}");
        found[0]
    };
    assert!(
        (2 * NP - 2..=2 * NP).contains(&heap("alloc_a")),
        "{by_name:?}"
    );
    assert!((NP - 2..=NP).contains(&heap("alloc_b")), "{by_name:?}");
    assert_eq!(
        (by_name.get("A"), by_name.get("B")),
        (Some(&(3 * NP)), Some(&NP))
    );

    let csv = run_ok(
        tool_command("hpcview-rs")
            .arg(database)
            .args(["--delinquent", "--csv"]),
    );
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("file,function,line,operation,object_id,object_start,object_size,"),
        "{header}"
    );
    let a = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f[7] == "A")
        .expect("a record for A");
    assert!(a[0].ends_with("data_touch.c"), "{a:?}");
    assert_eq!(
        (a[1], a[2], a[3]),
        ("touch", line.to_string().as_str(), "store")
    );
    let a_row = top.iter().find(|r| r["object"]["name"] == "A").unwrap();
    assert_eq!(a[4], a_row["object"]["id"].to_string());
    assert_eq!(a[5], format!("{:#x}", nm_address(&exe, "A")));
    assert_eq!(a[6], (3 * NP * 4096).to_string());
    assert_eq!(a[8], format!("{store:#x}"));
}

#[test]
fn without_data_samples_the_views_say_so_in_one_line() {
    let dir = scratch_dir("correlate-data-alloc-none");
    let exe = compile("alloc_sites.c", &dir, "alloc_sites", &["-O2", "-g"]);
    let db = dir.join("plain.db");
    run_ok(
        tool_command("hpcrun-rs")
            .arg("-o")
            .arg(&db)
            .arg(&exe)
            .arg("1000"),
    );
    let database = correlate(&db);
    for view in ["--alloc", "--delinquent"] {
        let out = run(tool_command("hpcview-rs").arg(&database).arg(view));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{view}: {stderr}");
        assert!(out.stdout.is_empty(), "{view}");
        assert_eq!(stderr.lines().count(), 1, "{view}: {stderr}");
        assert!(stderr.contains("hpcrun-rs --data"), "{view}: {stderr}");
    }
}
