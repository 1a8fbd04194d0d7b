//! End-to-end tests of `hpcrun-rs --data` at the level of `profile.db`'s data references, on
//! fixtures whose objects are touched a known number of times (every page once), so page-fault
//! samples give exact counts per object.

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSymbol};
use profiler::dataref::DataRef;
use profiler::db::{NodeId, Profile};

use crate::support::symbols::Namer;
use crate::support::{compile, run, scratch_dir, tool};

/// Pages of static array B in `data_touch.c` (A has three times as many).
const NP: u64 = 256;

/// `hpcrun-rs -e page-faults@1 --data` on `exe` with a ring large enough for the start-up
/// burst of faults; a run that lost records is tried once more, then fails.
fn measure_faults(exe: &Path, db: &Path) -> Profile {
    for _ in 0..2 {
        let out = run(Command::new(tool("hpcrun-rs"))
            .args([
                "-e",
                "page-faults@1",
                "--data",
                "--buffer-kib",
                "32768",
                "-o",
            ])
            .arg(db)
            .arg(exe));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
        let profile = Profile::read(db).expect("profile.db readable");
        if profile.stats.lost == 0 {
            return profile;
        }
        eprintln!("lost {} records, measuring again", profile.stats.lost);
    }
    panic!("hpcrun-rs lost records twice in a row");
}

/// The link-time address range of data symbol `name` in `exe`.
fn data_symbol(exe: &Path, name: &str) -> std::ops::Range<u64> {
    let bytes = std::fs::read(exe).expect("read fixture");
    let obj = object::File::parse(&*bytes).expect("ELF");
    let sym = obj
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    sym.address()..sym.address() + sym.size()
}

/// Index of `exe` in the profile's modules.
fn module_of(profile: &Profile, exe: &Path) -> u32 {
    let path = exe.to_str().unwrap();
    profile
        .modules
        .iter()
        .position(|m| m.path == path)
        .unwrap_or_else(|| panic!("{path} not among the modules")) as u32
}

#[test]
fn page_faults_split_statics_exactly_in_pie_and_non_pie_builds() {
    let dir = scratch_dir("hpcrun-data-statics");
    for (name, flags) in [
        ("pie", ["-fPIE", "-pie"]),
        ("nopie", ["-fno-PIE", "-no-pie"]),
    ] {
        let exe = compile(
            "data_touch.c",
            &dir,
            name,
            &[&["-O2", "-g"][..], &flags].concat(),
        );
        let profile = measure_faults(&exe, &dir.join(format!("{name}.db")));
        let module = module_of(&profile, &exe);
        let (a, b) = (data_symbol(&exe, "A"), data_symbol(&exe, "B"));
        let (mut in_a, mut in_b) = (0u64, 0u64);
        for cost in profile.data.threads.iter().flat_map(|t| &t.costs) {
            let DataRef::Static { module: m, addr } = cost.data else {
                continue;
            };
            let samples = cost.costs[0].samples;
            if m == module && (a.contains(&addr.0) || b.contains(&addr.0)) {
                assert_eq!(
                    addr.0 & 0xfff,
                    0x123,
                    "{name}: a fault off the written byte"
                );
                if a.contains(&addr.0) {
                    in_a += samples;
                } else {
                    in_b += samples;
                }
            }
        }
        assert_eq!((in_a, in_b), (3 * NP, NP), "{name}: faults in A and B");
    }
}

#[test]
fn a_large_local_array_is_placed_in_its_own_frame() {
    let dir = scratch_dir("hpcrun-data-stack");
    let exe = compile(
        "data_touch.c",
        &dir,
        "stack",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let profile = measure_faults(&exe, &dir.join("stack.db"));
    let mut namer = Namer::new(&profile);
    let mut in_deep = 0;
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        for cost in &data.costs {
            let DataRef::Stack { frame, cfa_offset } = cost.data else {
                continue;
            };
            // The frame'th ancestor of the accessing context is the frame holding the data.
            let mut node: NodeId = cost.node;
            for _ in 0..frame {
                node = thread.cct.nodes[node as usize].parent;
            }
            let holder = namer.frame(&thread.cct.nodes[node as usize].frame);
            if holder.ends_with(":deep") {
                assert!(
                    (-(256 * 1024 + 64)..0).contains(&cfa_offset),
                    "offset {cfa_offset} outside deep's frame"
                );
                in_deep += cost.costs[0].samples;
            }
        }
    }
    // 64 pages of the 256 KiB array; the lowest may share a page already touched.
    assert!(
        in_deep >= 60,
        "only {in_deep} faults placed in deep's frame"
    );
}

#[test]
fn every_data_sample_lands_in_exactly_one_class() {
    let dir = scratch_dir("hpcrun-data-invariant");
    let exe = compile("data_touch.c", &dir, "inv", &["-O2", "-g"]);
    let profile = measure_faults(&exe, &dir.join("inv.db"));
    let samples: u64 = profile.threads.iter().map(|t| t.cct.total(0).samples).sum();
    let data = &profile.data;
    assert_eq!(data.total(0).samples, samples, "data costs against samples");
    assert_eq!(data.stats.by_class.iter().sum::<u64>(), samples, "classes");
    let stack = data.stats.by_class[2];
    let statics = data.stats.by_class[1];
    assert!(
        statics >= 4 * NP && stack >= 60,
        "classes {:?}",
        data.stats.by_class
    );
}

#[test]
fn precise_memory_events_exit_2_naming_the_sources_that_work() {
    for event in ["mem", "mem-loads@1000", "mem-stores"] {
        let out = run(Command::new(tool("hpcrun-rs")).args(["-e", event, "true"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{event}: {stderr}");
        assert!(stderr.contains("page-faults --data"), "{event}: {stderr}");
        assert!(stderr.contains("cpu-clock --data"), "{event}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{event}: {stderr}");
    }
}

/// The `T <seconds in A> <seconds in B>` line `ea_arrsum.c` prints: its own measurement of the
/// CPU time each sweep took.
fn printed_split(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("T "))
        .expect("T line");
    let t: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    t[0] / t[1]
}

#[test]
fn clock_samples_split_time_between_arrays_by_their_data_addresses() {
    let dir = scratch_dir("hpcrun-data-ea");
    let exe = compile("ea_arrsum.c", &dir, "arrsum", &["-O2", "-g"]);
    let db = dir.join("arrsum.db");
    let out = run(Command::new(tool("hpcrun-rs"))
        .args(["-e", "cpu-clock@f4000", "--data", "-o"])
        .arg(&db)
        .arg(&exe)
        .arg("60"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
    let truth = printed_split(&stderr);
    let profile = Profile::read(&db).unwrap();
    let module = module_of(&profile, &exe);
    let (a, b) = (data_symbol(&exe, "A"), data_symbol(&exe, "B"));
    let mut namer = Namer::new(&profile);
    let (mut in_a, mut in_b, mut in_sum, mut resolved) = (0u64, 0u64, 0u64, 0u64);
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        let in_sum_node = |n: NodeId, namer: &mut Namer| {
            namer
                .frame(&thread.cct.nodes[n as usize].frame)
                .ends_with(":sum")
        };
        for (i, node) in thread.cct.nodes.iter().enumerate() {
            if in_sum_node(i as NodeId, &mut namer) {
                in_sum += node.costs[0].samples;
            }
        }
        for cost in &data.costs {
            if !in_sum_node(cost.node, &mut namer) {
                continue;
            }
            let samples = cost.costs[0].samples;
            resolved += samples;
            if let DataRef::Static { module: m, addr } = cost.data {
                if m == module && a.contains(&addr.0) {
                    in_a += samples;
                } else if m == module && b.contains(&addr.0) {
                    in_b += samples;
                }
            }
        }
    }
    assert!(in_sum >= 200, "only {in_sum} samples in sum");
    assert!(
        resolved * 10 >= in_sum * 9,
        "{resolved} of {in_sum} samples in sum resolved"
    );
    let split = in_a as f64 / in_b.max(1) as f64;
    assert!(
        (split / truth - 1.0).abs() <= 0.2,
        "samples A:B {in_a}:{in_b} = {split:.2}, the program's own CPU time split {truth:.2}"
    );
}
