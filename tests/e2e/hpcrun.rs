//! End-to-end tests of `hpcrun-rs` on fixture programs with known cost splits, compiled at test
//! time without frame pointers, so every path must come from DWARF CFI unwinding.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::symbols::{Namer, SymbolTable};
use crate::support::{as_user, compile, run, scratch_dir, tool, tool_command};
use crate::support::{sampled_in_full, work_clocks};
use crate::support::{world_dir, NOBODY};
use profiler::db::Profile;

/// Flags of the fixtures: optimised, without frame pointers (unwinding uses DWARF CFI).
pub(crate) const CFLAGS: &[&str] = &["-O2", "-g", "-fomit-frame-pointer"];

/// Run `hpcrun-rs ARGS` with output `db`; returns (exit status, stderr).
pub(crate) fn hpcrun(db: &Path, args: &[&str]) -> (i32, String) {
    let out = hpcrun_output(db, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `hpcrun-rs ARGS` with output `db`; all it and the command printed.
fn hpcrun_output(db: &Path, args: &[&str]) -> std::process::Output {
    run(tool_command("hpcrun-rs").arg("-o").arg(db).args(args))
}

fn profile_of(
    dir: &Path,
    name: &str,
    extra_flags: &[&str],
    args: &[&str],
    events: &[&str],
) -> (Profile, PathBuf, String) {
    let mut flags = CFLAGS.to_vec();
    flags.extend_from_slice(extra_flags);
    let exe = compile(&format!("{name}.c"), dir, name, &flags);
    let db = dir.join(format!("{name}.db"));
    let mut all: Vec<&str> = events.iter().flat_map(|e| ["-e", e]).collect();
    let exe_s = exe.to_str().unwrap().to_string();
    all.push(&exe_s);
    all.extend_from_slice(args);
    let out = hpcrun_output(&db, &all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        Profile::read(&db).expect("profile.db readable"),
        exe,
        stdout,
    )
}

fn share(part: u64, whole: u64) -> f64 {
    part as f64 / whole.max(1) as f64
}

#[test]
fn leaf_samples_split_between_its_callers_as_their_clocks_say() {
    let dir = scratch_dir("hpcrun-callers");
    let (profile, _, stdout) = profile_of(&dir, "run_callers", &[], &[], &["cpu-clock@f4000"]);
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
    // Designed 2:1; the oracle is the CPU time each caller took by the program's own clock.
    let clocks = work_clocks(&stdout);
    let want = clocks["caller_a"] / (clocks["caller_a"] + clocks["caller_b"]);
    let a = share(via_a, via_a + via_b);
    assert!(
        (a - want).abs() <= 0.05,
        "caller_a share {a:.3} ({via_a} vs {via_b}), its clock's {want:.3}"
    );
}

#[test]
fn three_threads_get_three_one_two_shares() {
    let dir = scratch_dir("hpcrun-threads");
    let mut flags = CFLAGS.to_vec();
    flags.push("-pthread");
    let exe = compile("run_threads.c", &dir, "run_threads", &flags);
    let db = dir.join("run_threads.db");
    let sampled = sampled_in_full(&db, |db| {
        run(tool_command("hpcrun-rs")
            .args(["-e", "cpu-clock@f2000", "-o"])
            .arg(db)
            .arg(&exe))
    });
    let (profile, stdout) = (sampled.profile, sampled.stdout);
    let mut per_thread: Vec<u64> = profile
        .threads
        .iter()
        .map(|t| t.cct.total(0).samples)
        .filter(|&s| s > 50)
        .collect();
    assert_eq!(per_thread.len(), 3, "threads with samples: {per_thread:?}");
    per_thread.sort_unstable();
    // Given 1:2:3 units; the oracle is the CPU time each thread's clock says it got.
    let mut clocks: Vec<f64> = work_clocks(&stdout).into_values().collect();
    assert_eq!(clocks.len(), 3, "{stdout}");
    clocks.sort_by(f64::total_cmp);
    let total: u64 = per_thread.iter().sum();
    let clock_total: f64 = clocks.iter().sum();
    for (got, clock) in per_thread.iter().zip(&clocks) {
        let (s, want) = (share(*got, total), clock / clock_total);
        assert!(
            (s - want).abs() <= 0.05,
            "thread share {s:.3}, its clock's {want:.3} ({per_thread:?}, {clocks:?})"
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
    let exe = compile(
        "run_dlopen.c",
        &dir,
        "run_dlopen",
        &[CFLAGS, &["-ldl"]].concat(),
    );
    let db = dir.join("run_dlopen.db");
    let sampled = sampled_in_full(&db, |db| {
        run(tool_command("hpcrun-rs")
            .args(["-e", "cpu-clock@f2000", "-o"])
            .arg(db)
            .arg(&exe)
            .args([lib.to_str().unwrap(), "100", "10"]))
    });
    let (profile, out, summary) = (sampled.profile, sampled.stdout, sampled.stderr);
    let clocks = work_clocks(&out);
    let truth = clocks["lib"] / (clocks["lib"] + clocks["main"]);
    let module_of = |name: &str| {
        (profile.modules.iter())
            .position(|m| m.path.ends_with(name))
            .map(profiler::db::ProfileModuleId::from_index)
            .expect("a module")
    };
    let (module, program) = (module_of("libdlwork.so"), module_of("run_dlopen"));
    let range = SymbolTable::read(lib.to_str().unwrap())
        .range("work_in_lib")
        .unwrap();
    let main_range = SymbolTable::read(exe.to_str().unwrap())
        .range("work_in_main")
        .unwrap();
    let (mut in_lib, mut in_fn, mut in_main, mut total) = (0u64, 0u64, 0u64, 0u64);
    for t in &profile.threads {
        for node in &t.cct.nodes {
            let samples = node.costs[0].value;
            total += samples;
            // A sample in the kernel (a timer tick, a fault) while the library ran is the
            // library's time on its thread's clock too: it counts at the user frame above it.
            let user = match node.frame {
                profiler::db::Frame::Kernel => &t.cct.nodes[node.parent.index()],
                _ => node,
            };
            if let profiler::db::Frame::Code {
                module: m,
                addr,
                kind: profiler::db::AddrKind::Ip,
            } = user.frame
            {
                if m == module {
                    in_lib += samples;
                    in_fn += samples * range.contains(&addr.0) as u64;
                }
                if m == program && main_range.contains(&addr.0) {
                    in_main += samples;
                }
            }
        }
    }
    // The library's share of the two timed parts against their clocks': a share of all
    // samples also counts start-up and exit, which a loaded machine stretched (58.8% against
    // the clocks' 65.2% once), and the library's time alone against its clock counts the
    // virtual machine's stolen time, which the sampling clock runs through and the thread's
    // clock does not (372 ms sampled against a clock of 343 ms once). Kernel-mode samples count
    // (a loaded run put 7% of its time there).
    let got = share(in_lib, in_lib + in_main);
    assert!(
        (got - truth).abs() <= 0.05,
        "library share {got:.3} of the timed parts ({:.1} and {:.1} ms sampled of {:.1} ms), \
         its clocks' {truth:.3} ({clocks:?}); hpcrun-rs said:\n{summary}",
        in_lib as f64 / 1e6,
        in_main as f64 / 1e6,
        total as f64 / 1e6,
    );
    assert_eq!(
        in_fn, in_lib,
        "every library sample is inside work_in_lib {range:x?}"
    );
}

/// The leaf functions (`module:function`) of every sampled path of every thread.
fn leaf_names(profile: &Profile) -> std::collections::BTreeSet<String> {
    let mut namer = Namer::new(profile);
    let mut leaves = std::collections::BTreeSet::new();
    for t in &profile.threads {
        for (frames, _) in namer.paths(&t.cct) {
            leaves.extend(frames.last().cloned());
        }
    }
    leaves
}

#[test]
fn fork_and_exec_both_processes_are_profiled() {
    let dir = scratch_dir("hpcrun-fork");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let spin = spin.to_str().unwrap();
    for mode in [&[][..], &["vfork"][..]] {
        let mut args = mode.to_vec();
        args.extend([spin, "300000000"]);
        let (profile, _, _) = profile_of(&dir, "run_fork", &[], &args, &["cpu-clock"]);
        let pids: std::collections::BTreeSet<u32> = profile.threads.iter().map(|t| t.pid).collect();
        assert!(
            pids.len() >= 2,
            "{mode:?}: processes with samples: {pids:?}"
        );
        let leaves = leaf_names(&profile);
        assert!(
            leaves.contains("run_fork:parent_work"),
            "{mode:?}: {leaves:?}"
        );
        assert!(leaves.contains("run_spin:spin"), "{mode:?}: {leaves:?}");
    }
}

#[test]
fn attaching_to_a_running_process_follows_it_until_it_exits() {
    let dir = scratch_dir("hpcrun-attach");
    let exe = compile(
        "run_threads.c",
        &dir,
        "run_threads",
        &["-O2", "-g", "-pthread"],
    );
    let hpcrun = tool("hpcrun-rs"); // built before the target starts its clock
    let mut target = Command::new(&exe).arg("300000000").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let db = dir.join("attach.db");
    let out = run(Command::new(hpcrun)
        .arg("-o")
        .arg(&db)
        .arg("-p")
        .arg(target.id().to_string()));
    let _ = target.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = Profile::read(&db).unwrap();
    let busy = profile
        .threads
        .iter()
        .filter(|t| t.cct.total(0).samples > 20)
        .count();
    assert_eq!(busy, 3, "worker threads seen: {busy}");
    assert!(profile.threads.iter().all(|t| t.pid == target.id()));
    assert!(leaf_names(&profile).contains("run_threads:work"));
    // Pseudo-mappings such as [vsyscall] hold nothing to name: not modules.
    let pseudo: Vec<&str> = profile
        .modules
        .iter()
        .map(|m| m.path.as_str())
        .filter(|p| p.starts_with('[') && *p != "[vdso]")
        .collect();
    assert!(pseudo.is_empty(), "{pseudo:?}");
    // The summary gives the attached process's CPU time, not a child's (none).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cpu: f64 = stderr
        .split("; the process ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no attached CPU time in:\n{stderr}"));
    let samples = profile
        .threads
        .iter()
        .map(|t| t.cct.total(0).samples)
        .sum::<u64>();
    let sampled_s = samples as f64 / 1000.0;
    assert!(
        (cpu - sampled_s).abs() <= 0.25 * sampled_s.max(0.2),
        "CPU {cpu} s against {samples} samples at 1 kHz"
    );
}

#[test]
fn terminating_signals_are_forwarded_and_the_profile_is_still_written() {
    let dir = scratch_dir("hpcrun-signals");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    // SIGTERM as before; USR1/USR2 are what batch systems send as warnings; ALRM and XCPU
    // terminate by default too. Each must reach the command, and the profile be written.
    for (name, number) in [
        ("TERM", 15),
        ("USR1", 10),
        ("USR2", 12),
        ("ALRM", 14),
        ("XCPU", 24),
    ] {
        let db = dir.join(format!("{name}.db"));
        let child = tool_command("hpcrun-rs")
            .arg("-o")
            .arg(&db)
            .arg(&spin)
            .arg("100000000000")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + number), "{name}: {stderr}");
        let profile = Profile::read(&db).unwrap();
        assert!(profile.stats.samples > 50, "{name}: {stderr}");
    }
}

#[test]
fn a_killed_hpcrun_leaves_no_orphan() {
    let dir = scratch_dir("hpcrun-pdeathsig");
    let spin = compile("run_spin.c", &dir, "run_spin_orphan", CFLAGS);
    let mut hpcrun = tool_command("hpcrun-rs")
        .arg("-q")
        .arg("-o")
        .arg(dir.join("orphan.db"))
        .arg(&spin)
        .arg("100000000000")
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    hpcrun.kill().unwrap();
    hpcrun.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Running or sleeping (a zombie waiting for init to reap it is gone).
    let alive = run(Command::new("pgrep").args(["-r", "R,S,D,T", "-f", "run_spin_orphan"]));
    assert!(
        !alive.status.success(),
        "the command outlived hpcrun-rs: pid {}",
        String::from_utf8_lossy(&alive.stdout)
    );
}

#[test]
fn several_events_are_metrics_weighted_by_their_periods() {
    let dir = scratch_dir("hpcrun-events");
    let events = ["cpu-clock", "page-faults@50"];
    let (profile, _, _) = profile_of(&dir, "run_qsort", &[], &["1000000"], &events);
    let names: Vec<&str> = profile.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["cpu-clock", "page-faults"]);
    assert_eq!(profile.events[0].unit, "ns");
    let total = |i| {
        profile.threads.iter().fold((0u64, 0u64), |(s, v), t| {
            let c = t.cct.total(i);
            (s + c.samples, v + c.value)
        })
    };
    // Clock samples at 1000 Hz are weighted by their periods in ns: about 1 ms each.
    let (clock_samples, clock_ns) = total(0);
    let mean = clock_ns as f64 / clock_samples as f64;
    assert!(
        (0.8e6..1.25e6).contains(&mean),
        "mean cpu-clock period {mean} ns"
    );
    // Fixed-period samples weigh exactly their period; the program faults in at least 16 MB.
    let (fault_samples, faults) = total(1);
    assert_eq!(faults, 50 * fault_samples);
    assert!(faults > 3900, "page faults: {faults}");
}

#[test]
fn deep_recursion_completes_and_counts_partial_paths() {
    let dir = scratch_dir("hpcrun-recursion");
    let (profile, _, _) = profile_of(&dir, "run_recursion", &[], &[], &["cpu-clock"]);
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
    let (profile, _, _) = profile_of(&dir, "run_qsort", &[], &[], &["cpu-clock@f2000"]);
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
    // A mistyped option before the command is a usage error naming it, not a command.
    let (status, stderr) = hpcrun(&db, &["--dat", "true"]);
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.contains("'--dat'") && !stderr.contains("not found"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing written");
    // Options after the command are the command's own.
    let (status, stderr) = hpcrun(&db, &["-q", "/bin/sh", "-c", "exit 3"]);
    assert_eq!(status, 3, "{stderr}");
    assert!(db.exists());
}

#[test]
fn output_errors_change_neither_the_status_nor_the_profile() {
    let dir = scratch_dir("hpcrun-output-errors");
    let db = dir.join("full.db");
    // A full stderr: the summary cannot be written, the command's status stands.
    let out = run(tool_command("hpcrun-rs")
        .arg("-o")
        .arg(&db)
        .args(["/bin/sh", "-c", "exit 5"])
        .stderr(std::fs::File::create("/dev/full").unwrap()));
    assert_eq!(out.status.code(), Some(5));
    assert!(Profile::read(&db).is_ok());
    // A reader gone before --show and -L write (a pipe whose read end is closed): no panic.
    for args in [vec!["--show", db.to_str().unwrap()], vec!["-L"]] {
        let script = "import os, subprocess, sys\n\
                      r, w = os.pipe(); os.close(r)\n\
                      p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE)\n\
                      sys.stderr.buffer.write(p.stderr); sys.exit(p.returncode)";
        let out = run(Command::new("python3")
            .args(["-c", script])
            .arg(tool("hpcrun-rs"))
            .args(&args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn start_up_paths_in_the_dynamic_loader_reach_the_root() {
    // The loader's `_start` has no unwind information: paths through it end at the return into
    // the entry point's first call, which is the root, not a partial path.
    let dir = scratch_dir("hpcrun-ldso");
    let exe = compile("run_callers.c", &dir, "run_callers", CFLAGS);
    let db = dir.join("start.db");
    let (mut in_loader, mut partial) = (0, 0);
    let mut partial_paths = Vec::new();
    for _ in 0..5 {
        let (status, stderr) = hpcrun(&db, &["-e", "cpu-clock@f20000", exe.to_str().unwrap(), "1"]);
        assert_eq!(status, 0, "{stderr}");
        let profile = Profile::read(&db).unwrap();
        let mut namer = Namer::new(&profile);
        for t in &profile.threads {
            for (frames, samples) in namer.paths(&t.cct) {
                if frames.iter().any(|f| f.starts_with("ld-linux")) {
                    in_loader += samples;
                    if frames[0] == "<partial call paths>" {
                        partial += samples;
                        partial_paths.push(format!("{samples}: {}", frames.join(" > ")));
                    }
                }
            }
        }
    }
    assert!(in_loader >= 20, "only {in_loader} samples in the loader");
    assert!(
        partial * 10 <= in_loader,
        "{partial} of {in_loader} loader samples partial:\n{}",
        partial_paths.join("\n")
    );
}

#[test]
fn works_for_an_unprivileged_user() {
    if !is_root() {
        return; // already unprivileged: every other test covers this path
    }
    // Work in a world-accessible directory: the checkout may sit below directories that
    // `nobody` cannot enter.
    let (dir, hpcrun) = world_dir("hpcrun-nobody");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let db = dir.join("nobody.db");
    let out = run(as_user(NOBODY, &hpcrun)
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
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the tests run as root.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn stacks_deeper_than_the_copy_are_completed_from_the_previous_path() {
    let dir = scratch_dir("hpcrun-grow");
    let exe = compile("run_grow.c", &dir, "run_grow", CFLAGS);
    let db = dir.join("grow.db");
    let (status, stderr) = hpcrun(&db, &["--stack-size", "2048", exe.to_str().unwrap()]);
    assert_eq!(status, 0, "{stderr}");
    let profile = Profile::read(&db).unwrap();
    let total = profile.stats.samples;
    assert!(
        profile.stats.stitched as f64 > 0.5 * total as f64,
        "stitched {} of {total}",
        profile.stats.stitched
    );
    let mut namer = Namer::new(&profile);
    let (mut checked, mut deepest) = (0u64, 0usize);
    for t in &profile.threads {
        for (frames, samples) in namer.paths(&t.cct) {
            if frames[0] == "<partial call paths>" || !frames.last().unwrap().ends_with(":work") {
                continue;
            }
            // main > grow_even > grow_odd > grow_even > ... > work: a completion at the wrong
            // frame would put two levels of the same parity next to each other.
            let main = frames
                .iter()
                .position(|f| f == "run_grow:main")
                .expect("main on the path");
            let levels = &frames[main + 1..frames.len() - 1];
            for (depth, f) in levels.iter().enumerate() {
                let want = if depth % 2 == 0 {
                    "run_grow:grow_even"
                } else {
                    "run_grow:grow_odd"
                };
                assert_eq!(f, want, "level {depth} of {frames:?}");
            }
            deepest = deepest.max(levels.len());
            checked += samples;
        }
    }
    assert!(
        checked as f64 > 0.9 * total as f64,
        "complete paths {checked} of {total}"
    );
    assert!(deepest >= 25, "deepest completed path has {deepest} levels");
}

#[test]
fn attaching_to_another_users_process_is_refused_clearly() {
    if !is_root() {
        return; // needs a process of another user: root's
    }
    let (dir, hpcrun) = world_dir("hpcrun-attach-nobody");
    let spin = compile("run_spin.c", &dir, "run_spin", CFLAGS);
    let mut target = Command::new(&spin).arg("100000000000").spawn().unwrap();
    let out = run(as_user(NOBODY, &hpcrun)
        .arg("-o")
        .arg(dir.join("x.db"))
        .arg("-p")
        .arg(target.id().to_string()));
    let _ = target.kill();
    let _ = target.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("belongs to another user"), "{stderr}");
    assert!(!dir.join("x.db").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
