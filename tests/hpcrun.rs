//! End-to-end tests of `hpcrun-rs` on fixture programs with known cost splits, compiled at test
//! time without frame pointers, so every path must come from DWARF CFI unwinding.

use std::path::{Path, PathBuf};
use std::process::Command;

use hpctoolkit_tests::symbols::{Namer, SymbolTable};
use hpctoolkit_tests::{compile, run, scratch_dir, tool};
use profiler::db::Profile;

const CFLAGS: &[&str] = &["-O2", "-g", "-fomit-frame-pointer"];

/// Run `hpcrun-rs ARGS` with output `db`; returns (exit status, stderr).
fn hpcrun(db: &Path, args: &[&str]) -> (i32, String) {
    let out = run(Command::new(tool("hpcrun-rs")).arg("-o").arg(db).args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn profile_of(
    dir: &Path,
    name: &str,
    extra_flags: &[&str],
    args: &[&str],
    events: &[&str],
) -> (Profile, PathBuf) {
    let mut flags = CFLAGS.to_vec();
    flags.extend_from_slice(extra_flags);
    let exe = compile(&format!("{name}.c"), dir, name, &flags);
    let db = dir.join(format!("{name}.db"));
    let mut all: Vec<&str> = events.iter().flat_map(|e| ["-e", e]).collect();
    let exe_s = exe.to_str().unwrap().to_string();
    all.push(&exe_s);
    all.extend_from_slice(args);
    let (status, stderr) = hpcrun(&db, &all);
    assert_eq!(status, 0, "hpcrun-rs failed:\n{stderr}");
    (Profile::read(&db).expect("profile.db readable"), exe)
}

fn share(part: u64, whole: u64) -> f64 {
    part as f64 / whole.max(1) as f64
}

#[test]
fn leaf_samples_split_two_to_one_between_its_callers() {
    let dir = scratch_dir("hpcrun-callers");
    let (profile, _) = profile_of(&dir, "run_callers", &[], &[], &["cpu-clock@f4000"]);
    let mut namer = Namer::new(&profile);
    let (mut via_a, mut via_b) = (0u64, 0u64);
    for t in &profile.threads {
        for (frames, samples) in namer.paths(&t.cct) {
            if frames.last().is_some_and(|f| f.ends_with(":leaf")) {
                let caller = &frames[frames.len() - 2];
                assert!(frames.iter().any(|f| f.ends_with(":main")), "{frames:?}");
                if caller.ends_with(":caller_a") {
                    via_a += samples;
                } else if caller.ends_with(":caller_b") {
                    via_b += samples;
                } else {
                    panic!("leaf reached from {caller}: {frames:?}");
                }
            }
        }
    }
    assert!(
        via_a + via_b > 1000,
        "too few leaf samples: {via_a} + {via_b}"
    );
    let a = share(via_a, via_a + via_b);
    assert!(
        (a - 2.0 / 3.0).abs() <= 0.05 * 2.0 / 3.0,
        "caller_a share {a:.3} ({via_a} vs {via_b})"
    );
}

#[test]
fn three_threads_get_three_one_two_shares() {
    let dir = scratch_dir("hpcrun-threads");
    let (profile, _) = profile_of(
        &dir,
        "run_threads",
        &["-pthread"],
        &[],
        &["cpu-clock@f2000"],
    );
    let mut per_thread: Vec<u64> = profile
        .threads
        .iter()
        .map(|t| t.cct.total(0).samples)
        .filter(|&s| s > 50)
        .collect();
    assert_eq!(per_thread.len(), 3, "threads with samples: {per_thread:?}");
    per_thread.sort_unstable();
    let total: u64 = per_thread.iter().sum();
    for (got, want) in per_thread.iter().zip([1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]) {
        let s = share(*got, total);
        assert!(
            (s - want).abs() <= 0.05,
            "thread share {s:.3}, expected {want:.3} ({per_thread:?})"
        );
    }
}

#[test]
fn samples_land_in_a_dlopened_library_at_its_function_offsets() {
    let dir = scratch_dir("hpcrun-dlopen");
    let lib = compile(
        "run_dlwork.c",
        &dir,
        "libdlwork.so",
        &["-O2", "-g", "-shared", "-fPIC"],
    );
    let (profile, _) = profile_of(
        &dir,
        "run_dlopen",
        &["-ldl"],
        &[lib.to_str().unwrap()],
        &["cpu-clock@f2000"],
    );
    let module = profile
        .modules
        .iter()
        .position(|m| m.path.ends_with("libdlwork.so"))
        .expect("the dlopened library is a module") as u32;
    let range = SymbolTable::read(lib.to_str().unwrap())
        .range("work_in_lib")
        .unwrap();
    let (mut in_lib, mut in_fn, mut total) = (0u64, 0u64, 0u64);
    for t in &profile.threads {
        for node in &t.cct.nodes {
            let samples = node.costs[0].samples;
            total += samples;
            if let profiler::db::Frame::Code {
                module: m,
                addr,
                kind: profiler::db::AddrKind::Ip,
            } = node.frame
            {
                if m == module {
                    in_lib += samples;
                    in_fn += samples * range.contains(&addr.0) as u64;
                }
            }
        }
    }
    let s = share(in_lib, total);
    assert!((s - 2.0 / 3.0).abs() < 0.1, "library share {s:.3}");
    assert_eq!(
        in_fn, in_lib,
        "every library sample is inside work_in_lib {range:x?}"
    );
}

#[test]
fn fork_and_exec_both_processes_are_profiled() {
    let dir = scratch_dir("hpcrun-fork");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let (profile, _) = profile_of(
        &dir,
        "run_fork",
        &[],
        &[spin.to_str().unwrap(), "300000000"],
        &["cpu-clock"],
    );
    let pids: std::collections::BTreeSet<u32> = profile.threads.iter().map(|t| t.pid).collect();
    assert!(pids.len() >= 2, "processes with samples: {pids:?}");
    let mut namer = Namer::new(&profile);
    let mut leaves = std::collections::BTreeSet::new();
    for t in &profile.threads {
        for (frames, _) in namer.paths(&t.cct) {
            leaves.extend(frames.last().cloned());
        }
    }
    assert!(leaves.contains("run_fork:parent_work"), "{leaves:?}");
    assert!(leaves.contains("run_spin:spin"), "{leaves:?}");
}

#[test]
fn deep_recursion_completes_and_counts_partial_paths() {
    let dir = scratch_dir("hpcrun-recursion");
    let (profile, _) = profile_of(&dir, "run_recursion", &[], &[], &["cpu-clock"]);
    let total: u64 = profile.threads.iter().map(|t| t.cct.total(0).samples).sum();
    assert!(total > 200, "samples: {total}");
    assert!(
        profile.stats.partial as f64 > 0.8 * total as f64,
        "partial {} of {total}",
        profile.stats.partial
    );
    let mut namer = Namer::new(&profile);
    let under_partial: u64 = profile
        .threads
        .iter()
        .flat_map(|t| namer.paths(&t.cct))
        .filter(|(f, _)| f[0] == "<partial call paths>" && f.last().unwrap().ends_with(":bottom"))
        .map(|(_, s)| s)
        .sum();
    assert!(
        under_partial as f64 > 0.8 * total as f64,
        "bottom under <partial call paths>: {under_partial}"
    );
}

#[test]
fn a_libc_callback_path_goes_through_qsort_up_to_main() {
    let dir = scratch_dir("hpcrun-qsort");
    let (profile, _) = profile_of(&dir, "run_qsort", &[], &[], &["cpu-clock@f2000"]);
    let mut namer = Namer::new(&profile);
    let (mut good, mut all) = (0u64, 0u64);
    for t in &profile.threads {
        for (frames, samples) in namer.paths(&t.cct) {
            if !frames.last().unwrap().ends_with(":compare") {
                continue;
            }
            all += samples;
            let main = frames.iter().position(|f| f == "run_qsort:main");
            let libc = frames.iter().rposition(|f| f.starts_with("libc.so"));
            if let (Some(m), Some(l)) = (main, libc) {
                good += samples * (m < l && l == frames.len() - 2) as u64;
            }
        }
    }
    assert!(all > 100, "comparator samples: {all}");
    assert!(
        share(good, all) > 0.95,
        "{good} of {all} comparator paths go main > ... > libc > compare"
    );
}

#[test]
fn exit_status_is_the_commands_and_a_crash_still_leaves_a_profile() {
    let dir = scratch_dir("hpcrun-status");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let spin = spin.to_str().unwrap();
    let db = dir.join("status.db");
    let (status, _) = hpcrun(&db, &["-q", spin, "1000000", "3"]);
    assert_eq!(status, 3);
    let (status, stderr) = hpcrun(&db, &[spin, "300000000", "segv"]);
    assert_eq!(status, 128 + 11, "{stderr}");
    assert!(stderr.contains("signal 11"), "{stderr}");
    let profile = Profile::read(&db).unwrap();
    assert!(profile.stats.samples > 50);
    assert!(
        dir.join("status.db.old").exists(),
        "the previous profile was kept"
    );
}

#[test]
fn bad_events_and_missing_commands_are_rejected_without_output() {
    let dir = scratch_dir("hpcrun-errors");
    let db = dir.join("none.db");
    let (status, stderr) = hpcrun(&db, &["-e", "no-such-event", "true"]);
    assert_eq!(status, 2);
    assert!(
        stderr.contains("no-such-event") && stderr.contains("-L"),
        "{stderr}"
    );
    let (status, stderr) = hpcrun(&db, &["/definitely/not/a/command"]);
    assert_eq!(status, 127);
    assert!(stderr.contains("command not found"), "{stderr}");
    let (status, _) = hpcrun(&db, &["-e", "cpu-clock@f999999999", "true"]);
    assert_eq!(status, 2);
    assert!(!db.exists(), "nothing written");
}

#[test]
fn works_for_an_unprivileged_user() {
    if !nix_is_root() {
        return; // already unprivileged: every other test covers this path
    }
    let dir = scratch_dir("hpcrun-nobody");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let db = dir.join("nobody.db");
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(tool("hpcrun-rs"))
        .arg("-o")
        .arg(&db)
        .arg(&spin)
        .arg("300000000"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let profile = Profile::read(&db).unwrap();
    assert!(!profile.kernel_included);
    assert!(stderr.contains("kernel time not included"), "{stderr}");
    assert!(profile.stats.samples > 100, "{stderr}");
    assert_eq!(profile.stats.lost, 0, "{stderr}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}
