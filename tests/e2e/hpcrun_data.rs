//! End-to-end tests of `hpcrun-rs --data` at the level of `profile.db`'s data references, on
//! fixtures whose objects are touched a known number of times (every page once), so page-fault
//! samples give exact counts per object.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSymbol};
use profiler::dataref::DataRef;
use profiler::db::{CctNodeId, Profile, ProfileModuleId};

use crate::hpcrun::is_root;
use crate::support::symbols::Namer;
use crate::support::{as_user, compile, run, scratch_dir, tool_command, world_dir, NOBODY};

/// Pages of static array B in `data_touch.c` (A has three times as many).
const NP: u64 = 256;

/// `hpcrun-rs -e page-faults@1 --data` on `exe` with a ring large enough for the start-up
/// burst of faults; a run that lost records is tried once more, then fails.
pub(crate) fn measure_faults(exe: &Path, db: &Path) -> Profile {
    measure_faults_with(exe, db, &[]).0
}

/// [`measure_faults`] with more hpcrun-rs options `extra`; also returns the program's output.
pub(crate) fn measure_faults_with(exe: &Path, db: &Path, extra: &[&str]) -> (Profile, String) {
    for _ in 0..2 {
        let out = run(tool_command("hpcrun-rs")
            .args(["-e", "page-faults@1", "--data", "--buffer-kib", "32768"])
            .args(extra)
            .arg("-o")
            .arg(db)
            .arg(exe));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
        // Shown with the first test that fails on this measurement (the summary's counts).
        eprintln!("measured {}:\n{stderr}", db.display());
        let profile = Profile::read(db).expect("profile.db readable");
        if profile.stats.lost == 0 {
            return (profile, String::from_utf8_lossy(&out.stdout).into_owned());
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
fn module_of(profile: &Profile, exe: &Path) -> ProfileModuleId {
    let path = exe.to_str().unwrap();
    let i = profile
        .modules
        .iter()
        .position(|m| m.path == path)
        .unwrap_or_else(|| panic!("{path} not among the modules"));
    ProfileModuleId::from_index(i)
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
        assert_eq!(
            static_split(&profile, &exe),
            (3 * NP, NP),
            "{name}: faults in A and B"
        );
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
            let mut node: CctNodeId = cost.node;
            for _ in 0..frame {
                node = thread.cct.nodes[node.index()].parent;
            }
            let holder = namer.frame(&thread.cct.nodes[node.index()].frame);
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
        let out = run(tool_command("hpcrun-rs").args(["-e", event, "true"]));
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

/// Run `exe arg` under `hpcrun-rs -e cpu-clock@f4000 --data` into `db`; the profile and the
/// program's own split of CPU time between its two objects.
fn measure_clock(exe: &Path, db: &Path, arg: &str) -> (Profile, f64) {
    let out = run(tool_command("hpcrun-rs")
        .args(["-e", "cpu-clock@f4000", "--data", "-o"])
        .arg(db)
        .arg(exe)
        .arg(arg));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
    (Profile::read(db).unwrap(), printed_split(&stderr))
}

/// Check the clock samples in `function`: at least 200, 90% of them with a data address, 90%
/// of those in one of the two objects (`which` says which one a reference is in: `Some(true)`
/// the first, `Some(false)` the second), split between them within 20% of `truth`.
fn assert_time_split(
    profile: &Profile,
    function: &str,
    truth: f64,
    which: impl Fn(&DataRef) -> Option<bool>,
) {
    let mut namer = Namer::new(profile);
    let suffix = format!(":{function}");
    let (mut first, mut second, mut inside, mut resolved) = (0u64, 0u64, 0u64, 0u64);
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        let nodes: std::collections::HashSet<usize> = (0..thread.cct.nodes.len())
            .filter(|&i| namer.frame(&thread.cct.nodes[i].frame).ends_with(&suffix))
            .collect();
        inside += nodes
            .iter()
            .map(|&i| thread.cct.nodes[i].costs[0].samples)
            .sum::<u64>();
        for cost in data
            .costs
            .iter()
            .filter(|c| nodes.contains(&c.node.index()))
        {
            let samples = cost.costs[0].samples;
            resolved += samples;
            match which(&cost.data) {
                Some(true) => first += samples,
                Some(false) => second += samples,
                None => {}
            }
        }
    }
    assert!(inside >= 200, "only {inside} samples in {function}");
    assert!(
        resolved * 10 >= inside * 9,
        "{resolved} of {inside} samples resolved"
    );
    assert!(
        first + second >= resolved * 9 / 10,
        "{first} + {second} of {resolved}"
    );
    let split = first as f64 / second.max(1) as f64;
    assert!(
        (split / truth - 1.0).abs() <= 0.2,
        "samples {first}:{second} = {split:.2}, the program's own CPU time split {truth:.2}"
    );
}

#[test]
fn clock_samples_split_time_between_arrays_by_their_data_addresses() {
    let dir = scratch_dir("hpcrun-data-ea");
    let exe = compile("ea_arrsum.c", &dir, "arrsum", &["-O2", "-g"]);
    let (profile, truth) = measure_clock(&exe, &dir.join("arrsum.db"), "60");
    let module = module_of(&profile, &exe);
    let (a, b) = (data_symbol(&exe, "A"), data_symbol(&exe, "B"));
    assert_time_split(&profile, "sum", truth, |data| match *data {
        DataRef::Static { module: m, addr } if m == module && a.contains(&addr.0) => Some(true),
        DataRef::Static { module: m, addr } if m == module && b.contains(&addr.0) => Some(false),
        _ => None,
    });
}

/// The named frames of the path from the root to `node` (innermost last).
fn path_names(namer: &mut Namer, cct: &profiler::db::Cct, mut node: CctNodeId) -> Vec<String> {
    let mut names = Vec::new();
    while node != CctNodeId::ROOT {
        let n = &cct.nodes[node.index()];
        names.push(namer.frame(&n.frame));
        node = n.parent;
    }
    names.reverse();
    names
}

/// Page faults per heap allocation site, keyed by the site's path below `main` (innermost
/// last, as `function` names), with the faults taken inside the allocation call counted apart.
fn heap_faults(profile: &Profile) -> std::collections::BTreeMap<Vec<String>, (u64, u64)> {
    let mut namer = Namer::new(profile);
    let mut by_site = std::collections::BTreeMap::new();
    for data in &profile.data.threads {
        for cost in &data.costs {
            let DataRef::Heap {
                tid,
                site,
                during_alloc,
                ..
            } = cost.data
            else {
                continue;
            };
            let owner = profile.threads.iter().find(|t| t.tid == tid).unwrap();
            let path: Vec<String> = path_names(&mut namer, &owner.cct, site)
                .into_iter()
                .skip_while(|f| !f.ends_with(":main"))
                .map(|f| f.rsplit(':').next().unwrap().to_string())
                .collect();
            let entry: &mut (u64, u64) = by_site.entry(path).or_default();
            entry.0 += cost.costs[0].samples;
            entry.1 += during_alloc as u64 * cost.costs[0].samples;
        }
    }
    by_site
}

#[test]
fn heap_faults_go_to_blocks_by_full_allocation_context_faults_inside_malloc_included() {
    let dir = scratch_dir("hpcrun-data-heap");
    let exe = compile("data_touch.c", &dir, "heap", &["-O2", "-g"]);
    let profile = measure_faults(&exe, &dir.join("heap.db"));
    let sites = heap_faults(&profile);
    let via = |f: &str| {
        let path: Vec<String> = ["main", f, "xmalloc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sites.get(&path).copied().unwrap_or_default()
    };
    // Every page once; the first page of each block is touched by malloc itself (its header)
    // before the block is returned.
    let (a, b) = (via("alloc_a"), via("alloc_b"));
    assert_eq!((a.0, b.0), (2 * NP, NP), "faults per site: {sites:?}");
    assert!(
        a.1 >= 1 && b.1 >= 1,
        "no fault inside malloc attributed: {sites:?}"
    );
    assert_eq!(profile.data.stats.alloc_lost, 0);
    let blocks: Vec<_> = profile
        .data
        .threads
        .iter()
        .flat_map(|t| &t.allocs)
        .collect();
    assert!(
        blocks
            .iter()
            .filter(|s| s.counts.calls == 1 && s.counts.frees == 1)
            .count()
            >= 2,
        "{blocks:?}"
    );
}

#[test]
fn a_touch_belongs_to_the_block_that_lived_at_the_address_at_that_moment() {
    let dir = scratch_dir("hpcrun-data-reuse");
    let exe = compile("data_reuse.c", &dir, "reuse", &["-O2", "-g"]);
    let db = dir.join("reuse.db");
    let out = run(tool_command("hpcrun-rs")
        .args([
            "-e",
            "page-faults@1",
            "--data",
            "--buffer-kib",
            "32768",
            "-o",
        ])
        .arg(&db)
        .arg(&exe));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let addrs: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .collect();
    assert_eq!(addrs.len(), 2, "{printed}");
    assert_eq!(
        addrs[0], addrs[1],
        "the allocator did not reuse the address"
    );
    let profile = Profile::read(&db).unwrap();
    assert_eq!(profile.stats.lost, 0);
    let sites = heap_faults(&profile);
    let owner = |f: &str| {
        let key = vec!["main".to_string(), f.to_string()];
        sites.get(&key).map_or(0, |s| s.0)
    };
    // Half of the first block's 256 pages, then all of the second's.
    assert_eq!(
        (owner("first_owner"), owner("second_owner")),
        (128, 256),
        "{sites:?}"
    );
}

/// `hpcrun-rs -e EVENT --data exe COUNTS` into `db`, the program writing its own counts of
/// what it allocated to `counts`; the profile and hpcrun-rs's stderr.
fn measure_counting(exe: &Path, db: &Path, counts: &Path, event: &str) -> (Profile, String) {
    let out = run(tool_command("hpcrun-rs")
        .args(["-e", event, "--data", "-o"])
        .arg(db)
        .arg(exe)
        .arg(counts));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (Profile::read(db).unwrap(), stderr)
}

#[test]
fn allocation_sites_count_each_threads_blocks_exactly_as_the_program_does() {
    let dir = scratch_dir("hpcrun-data-threads");
    let exe = compile(
        "alloc_threads.c",
        &dir,
        "threads",
        &["-O2", "-g", "-pthread"],
    );
    let counts = dir.join("counts.txt");
    let (profile, _) = measure_counting(&exe, &dir.join("threads.db"), &counts, "cpu-clock@f1000");
    assert_eq!(profile.data.stats.alloc_lost, 0);
    // The program's own counts: "PID TID FUNCTION OP COUNT".
    let mut expected = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(&counts).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f[2].starts_with("work_") && f[3] == "alloc" {
            expected.insert(
                (f[1].parse::<u32>().unwrap(), f[2].to_string()),
                f[4].parse::<u64>().unwrap(),
            );
        }
    }
    assert_eq!(expected.len(), 3, "{expected:?}");
    let mut namer = Namer::new(&profile);
    let mut found = std::collections::BTreeMap::new();
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        for site in &data.allocs {
            let leaf = namer.frame(&thread.cct.nodes[site.node.index()].frame);
            let function = leaf.rsplit(':').next().unwrap().to_string();
            if function.starts_with("work_") {
                *found.entry((thread.tid, function)).or_insert(0) += site.counts.calls;
            }
        }
    }
    assert_eq!(
        found, expected,
        "allocation sites against the program's own counts"
    );
}

/// (in A, in B) page faults of `profile`'s static references into `exe`'s arrays A and B of
/// `data_touch.c`, each checked to be at the one byte of its page the program writes.
fn static_split(profile: &Profile, exe: &Path) -> (u64, u64) {
    let module = module_of(profile, exe);
    let (a, b) = (data_symbol(exe, "A"), data_symbol(exe, "B"));
    let mut split = (0, 0);
    for cost in profile.data.threads.iter().flat_map(|t| &t.costs) {
        if let DataRef::Static { module: m, addr } = cost.data {
            let inside = m == module && (a.contains(&addr.0) || b.contains(&addr.0));
            assert!(
                !inside || addr.0 & 0xfff == 0x123,
                "a fault off the written byte"
            );
            if m == module && a.contains(&addr.0) {
                split.0 += cost.costs[0].samples;
            } else if m == module && b.contains(&addr.0) {
                split.1 += cost.costs[0].samples;
            }
        }
    }
    split
}

#[test]
fn a_static_binary_is_probed_as_root_and_gets_one_notice_as_nobody() {
    // A world-accessible directory: `nobody` must run the tools and write the profile.
    let (dir, hpcrun) = world_dir("hpcrun-data-static");
    let exe = compile("data_touch.c", &dir, "static", &["-O2", "-g", "-static"]);
    let root = is_root();
    let users: &[&[&str]] = if root { &[&[], NOBODY] } else { &[&[]] };
    for (i, user) in users.iter().enumerate() {
        let db = dir.join(format!("static{i}.db"));
        let mut cmd = as_user(user, &hpcrun);
        // Privileged runs get a ring large enough for the burst of faults and probe hits;
        // an unprivileged ring is small, so its samples copy little stack (statics need none).
        let ring: &[&str] = if root && user.is_empty() {
            &["--buffer-kib", "32768"]
        } else {
            &["--stack-size", "64"]
        };
        let out = run(cmd
            .args(["-e", "page-faults@1", "--data", "-o"])
            .arg(&db)
            .args(ring)
            .arg(&exe));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {stderr}");
        let notices = stderr
            .lines()
            .filter(|l| l.contains("statically linked"))
            .count();
        let profile = Profile::read(&db).unwrap();
        assert_eq!(profile.stats.lost, 0, "{user:?}: {stderr}");
        assert_eq!(static_split(&profile, &exe), (3 * NP, NP), "{user:?}");
        if root && user.is_empty() {
            // uprobes on the program's own malloc and free: the same blocks as the shim gives.
            assert_eq!(notices, 0, "{stderr}");
            let sites = heap_faults(&profile);
            let via = |f: &str| {
                let path: Vec<String> = ["main", f, "xmalloc"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                sites.get(&path).map_or(0, |s| s.0)
            };
            assert_eq!((via("alloc_a"), via("alloc_b")), (2 * NP, NP), "{sites:?}");
        } else {
            assert_eq!(notices, 1, "{user:?}: {stderr}");
            assert!(profile.data.stats.heap_unavailable.is_some());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
#[test]
fn clock_samples_split_time_between_heap_blocks_by_their_allocation_paths() {
    let dir = scratch_dir("hpcrun-data-ea-heap");
    let exe = compile("ea_listwalk.c", &dir, "listwalk", &["-O2", "-g"]);
    let (profile, truth) = measure_clock(&exe, &dir.join("listwalk.db"), "4");
    // pool_l1 and pool_l2 tail-call malloc, so their sites are told apart by their blocks'
    // sizes: 3 * 2^19 and 2^19 nodes of 64 bytes.
    let bytes = |tid: u32, site: CctNodeId| {
        let (_, data) = profile
            .threads
            .iter()
            .zip(&profile.data.threads)
            .find(|(t, _)| t.tid == tid)?;
        Some(data.allocs.iter().find(|a| a.node == site)?.counts.bytes)
    };
    assert_time_split(&profile, "walk", truth, |data| match *data {
        DataRef::Heap { tid, site, .. } => match bytes(tid, site)? {
            b if b == 3 << 25 => Some(true),
            b if b == 1 << 25 => Some(false),
            _ => None,
        },
        _ => None,
    });
}

#[test]
fn a_process_attached_to_is_probed_as_root() {
    let root = is_root();
    if !root {
        return; // uprobes need CAP_SYS_ADMIN: the static-binary test covers the notice
    }
    let dir = scratch_dir("hpcrun-data-attach");
    let exe = compile("data_attach.c", &dir, "attach", &["-O2", "-g"]);
    let go = dir.join("go");
    let mut target = Command::new(&exe).arg(&go).spawn().unwrap();
    // Attach to a running program, as users do: once its C library is mapped.
    let maps = format!("/proc/{}/maps", target.id());
    while !std::fs::read_to_string(&maps).is_ok_and(|m| m.contains("libc")) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let db = dir.join("attach.db");
    // Held while the copier catches up: on a loaded machine even its real-time priority is
    // throttled (77 records were lost once here without), and an attached process is held too.
    let mut hpcrun = tool_command("hpcrun-rs")
        .args([
            "-e",
            "page-faults@1",
            "--data",
            "--buffer-kib",
            "32768",
            "--backpressure",
            "on",
            "-o",
        ])
        .arg(&db)
        .arg("-p")
        .arg(target.id().to_string())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Let the events and probes open before the program allocates: hpcrun-rs says when they
    // are (a fixed wait was too short on a loaded machine).
    let mut err = BufReader::new(hpcrun.stderr.take().unwrap());
    let mut stderr = String::new();
    while !stderr.contains("sampling process") {
        if err.read_line(&mut stderr).unwrap() == 0 {
            break;
        }
    }
    std::fs::write(&go, "").unwrap();
    assert!(target.wait().unwrap().success());
    err.read_to_string(&mut stderr).unwrap();
    assert!(hpcrun.wait().unwrap().success(), "{stderr}");
    let profile = Profile::read(&db).unwrap();
    assert_eq!(profile.stats.lost, 0, "{stderr}");
    assert!(stderr.contains("the measured program was held"), "{stderr}");
    assert_eq!(profile.data.stats.heap_unavailable, None, "{stderr}");
    let sites = heap_faults(&profile);
    let grab = sites.get(&vec!["main".to_string(), "grab".to_string()]);
    // 20 blocks of 256 pages, each written once.
    assert_eq!(grab.map(|s| s.0), Some(20 * 256), "{sites:?}");
}

#[test]
fn every_allocation_function_of_a_static_binary_is_probed_exactly_as_root() {
    if !is_root() {
        return; // uprobes need CAP_SYS_ADMIN: the static-binary test covers the notice
    }
    let dir = scratch_dir("hpcrun-data-aligned");
    let exe = compile(
        "alloc_aligned.c",
        &dir,
        "aligned",
        &["-O2", "-g", "-static"],
    );
    let counts = dir.join("counts.txt");
    let (profile, stderr) =
        measure_counting(&exe, &dir.join("aligned.db"), &counts, "cpu-clock@f100");
    assert_eq!(profile.stats.lost, 0, "{stderr}");
    assert_eq!(profile.data.stats.heap_unavailable, None, "{stderr}");
    // The program's own counts: "FUNCTION BLOCKS BYTES"; all of a function's blocks are live
    // at once, then freed.
    let mut expected = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(&counts).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        expected.insert(f[0].to_string(), (n(1), n(2), n(1), n(2), 0));
    }
    assert_eq!(expected.len(), 10, "{expected:?}");
    // `via_posix_memalign_helper` allocates through its helper `pm`.
    let helper = expected.remove("via_posix_memalign_helper").unwrap();
    expected.insert("pm".to_string(), helper);
    // Per site under a `via_` function, keyed by the function making the call: blocks, bytes
    // asked for, frees matched to a block and peak live bytes (both wrong if a block's address
    // was), bytes live at the end. A call the allocator makes itself (glibc's posix_memalign calling malloc)
    // would show up as a site in the C library.
    let mut namer = Namer::new(&profile);
    let mut found = std::collections::BTreeMap::new();
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        for site in &data.allocs {
            let path: Vec<String> = path_names(&mut namer, &thread.cct, site.node)
                .iter()
                .map(|f| f.rsplit(':').next().unwrap().to_string())
                .collect();
            if !path.iter().any(|f| f.starts_with("via_")) {
                continue; // the C library's own blocks (stdio's buffer)
            }
            let caller = path.last().unwrap().clone();
            let e: &mut (u64, u64, u64, u64, u64) = found.entry(caller).or_default();
            *e = (
                e.0 + site.counts.calls,
                e.1 + site.counts.bytes,
                e.2 + site.counts.frees,
                e.3 + site.counts.peak_live,
                e.4 + site.counts.live_at_end,
            );
        }
    }
    assert_eq!(
        found, expected,
        "allocation sites against the program's own counts"
    );
}

/// A burst of 1,200 first-touch faults in about 10 ms (`fault_burst.c`), each a sample with an
/// 8 KiB stack copy, at default settings: nothing lost, run after run. As root, the ring copier
/// has real-time priority and empties the rings while the reader unwinds; as an ordinary user
/// (`nobody` when the tests run as root) it may wait for a CPU, and the command is held while
/// it copies (`--backpressure auto`): the summary says how often.
#[test]
fn a_fault_burst_loses_nothing_at_default_settings() {
    let (dir, hpcrun) = world_dir("hpcrun-data-burst");
    let exe = compile("fault_burst.c", &dir, "burst", &["-O2", "-g"]);
    let users: &[&[&str]] = if is_root() { &[&[], NOBODY] } else { &[&[]] };
    for user in users {
        let ordinary = !user.is_empty() || !is_root();
        for round in 0..5 {
            let db = dir.join(format!("burst{}-{round}.db", user.len()));
            let out = run(as_user(user, &hpcrun)
                .args(["-e", "page-faults@1", "--data", "-o"])
                .arg(&db)
                .arg(&exe));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{user:?}: {stderr}");
            let profile = Profile::read(&db).expect("profile.db readable");
            assert_eq!(profile.stats.lost, 0, "{user:?} run {round}: {stderr}");
            assert!(
                profile.stats.samples >= 1200,
                "{user:?} run {round}: {stderr}"
            );
            let held = stderr.contains("the measured program was held");
            assert_eq!(held, ordinary, "{user:?} run {round}: {stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
