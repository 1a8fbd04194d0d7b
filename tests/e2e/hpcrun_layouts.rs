//! `hpcrun-rs` over the ELF layouts real binaries have: each linker (BFD, gold, LLD, mold, rustc's
//! default LLD), clang, `-z noseparate-code`, static-pie, and a library linked by LLD and loaded
//! with `dlopen`. LLD, gold and mold share pages between segments in the file and shift each
//! segment's address instead, so a load bias taken from the wrong segment puts every sample a
//! page away from its function. For each layout: almost no partial unwinds on a fixture whose
//! call paths are known, and the leaf's samples inside the leaf as the symbol table says.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::symbols::Namer;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command, work_clocks};
use profiler::db::Profile;

/// Rounds of run_callers: about half a second, a thousand samples at 2 kHz.
/// run_callers' rounds and work per call (both twins): calls of several sampling periods each,
/// so that the calls' rhythm cannot line up with the sampling period and bias the split (with
/// 0.1 ms calls at 2 kHz, caller_a's share came out 0.53-0.59 or 0.73 instead of 0.67 in about
/// one run in four).
const CALLER_ARGS: &[&str] = &["100", "2000000"];

/// Sample `exe args` at 2 kHz into `dir/name.db`; the profile and the program's standard output.
fn measure_with_output(dir: &Path, name: &str, exe: &Path, args: &[&str]) -> (Profile, String) {
    let db = dir.join(format!("{name}.db"));
    let out = run(tool_command("hpcrun-rs")
        .args(["-q", "-e", "cpu-clock@f2000", "-o"])
        .arg(&db)
        .arg(exe)
        .args(args));
    assert!(
        out.status.success(),
        "hpcrun-rs {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (Profile::read(&db).expect("profile.db readable"), stdout)
}

/// Where each sample of `profile` went: (all samples, partial ones, and for each named leaf
/// function, its samples and the callers they came through).
struct Split {
    total: u64,
    partial: u64,
    /// (leaf frame, caller frame, whether `main` is on the path, samples), frames named
    /// `module:function` from the modules' symbol tables.
    leaves: Vec<(String, String, bool, u64)>,
}

fn split(profile: &Profile) -> Split {
    let mut namer = Namer::new(profile);
    let mut s = Split {
        total: 0,
        partial: 0,
        leaves: Vec::new(),
    };
    for t in &profile.threads {
        for (frames, samples) in namer.paths(&t.cct) {
            s.total += samples;
            if frames[0] == "<partial call paths>" {
                s.partial += samples;
            }
            let n = frames.len();
            let caller = if n >= 2 { &frames[n - 2] } else { "" };
            let has_main = frames.iter().any(|f| f.ends_with(":main"));
            s.leaves
                .push((frames[n - 1].clone(), caller.to_string(), has_main, samples));
        }
    }
    s
}

/// Measure run_callers (`exe`, either twin) and check what every layout must pass: partial
/// unwinds at most 1%, at least 80% of the samples in `leaf` (by the symbol table), each of them
/// reached from `caller_a` or `caller_b` under `main`, split between them as the program's own
/// clocks say within 5 points.
fn measure_callers(dir: &Path, exe: &Path, label: &str) {
    let (profile, stdout) = measure_with_output(dir, "run_callers", exe, CALLER_ARGS);
    let s = split(&profile);
    assert!(s.total > 300, "{label}: only {} samples", s.total);
    assert!(
        s.partial * 100 <= s.total,
        "{label}: {} of {} samples partial",
        s.partial,
        s.total
    );
    let (mut via_a, mut via_b) = (0, 0);
    for (leaf, caller, has_main, samples) in &s.leaves {
        if !leaf.ends_with(":leaf") {
            continue;
        }
        assert!(*has_main, "{label}: leaf sample without main: {caller}");
        match caller.rsplit(':').next() {
            Some("caller_a") => via_a += samples,
            Some("caller_b") => via_b += samples,
            _ => panic!("{label}: leaf reached from {caller}"),
        }
    }
    let in_leaf = via_a + via_b;
    assert!(
        in_leaf * 10 >= s.total * 8,
        "{label}: {in_leaf} of {} samples in leaf; leaves: {:?}",
        s.total,
        top_leaves(&s)
    );
    let clocks = work_clocks(&stdout);
    let want = clocks["caller_a"] / (clocks["caller_a"] + clocks["caller_b"]);
    let a = via_a as f64 / in_leaf as f64;
    assert!(
        (a - want).abs() <= 0.05,
        "{label}: caller_a share {a:.3}, its clock's {want:.3}"
    );
}

/// The five leaf functions with most samples (for failure messages).
fn top_leaves(s: &Split) -> Vec<(String, u64)> {
    let mut by_leaf = std::collections::BTreeMap::<String, u64>::new();
    for (leaf, _, _, samples) in &s.leaves {
        *by_leaf.entry(leaf.clone()).or_default() += samples;
    }
    let mut v: Vec<_> = by_leaf.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v.truncate(5);
    v
}

/// The PT_LOAD lines of `readelf -lW exe` (for failure messages and the layout checks).
fn load_segments(exe: &Path) -> Vec<String> {
    run_ok(Command::new("readelf").arg("-lW").arg(exe))
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(str::to_string)
        .collect()
}

/// True when some PT_LOAD segment's file offset differs from its address: the layouts where
/// the first page-rounded segment match gives the wrong bias.
fn offsets_differ_from_addresses(exe: &Path) -> bool {
    load_segments(exe).iter().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && f[1].trim_start_matches("0x").trim_start_matches('0')
                != f[2].trim_start_matches("0x").trim_start_matches('0')
    })
}

/// Build run_callers.c with gcc and `flags`, measure it, check it.
fn check_c_layout(test: &str, flags: &[&str]) -> PathBuf {
    let dir = scratch_dir(test);
    let mut all = vec!["-O2", "-g", "-fomit-frame-pointer"];
    all.extend_from_slice(flags);
    let exe = compile("run_callers.c", &dir, "run_callers", &all);
    measure_callers(&dir, &exe, &format!("gcc {flags:?}"));
    exe
}

#[test]
fn rustc_default_lld_build_unwinds_and_names_its_leaf() {
    let dir = scratch_dir("layout-rustc-lld");
    let exe = compile("run_callers.rs", &dir, "run_callers", &["-O", "-g"]);
    assert!(
        offsets_differ_from_addresses(&exe),
        "rustc no longer shifts segments: {:?}",
        load_segments(&exe)
    );
    measure_callers(&dir, &exe, "rustc (LLD)");
}

#[test]
fn rustc_bfd_build_unwinds_and_names_its_leaf() {
    let dir = scratch_dir("layout-rustc-bfd");
    let flags = ["-O", "-g", "-Clinker-features=-lld"];
    let exe = compile("run_callers.rs", &dir, "run_callers", &flags);
    measure_callers(&dir, &exe, "rustc (BFD)");
}

#[test]
fn gcc_with_lld_gold_and_mold() {
    for linker in ["lld", "gold", "mold"] {
        let flag = format!("-fuse-ld={linker}");
        let exe = check_c_layout(&format!("layout-gcc-{linker}"), &[&flag]);
        if linker != "gold" {
            assert!(
                offsets_differ_from_addresses(&exe),
                "{linker}: {:?}",
                load_segments(&exe)
            );
        }
    }
}

#[test]
fn clang_build() {
    let dir = scratch_dir("layout-clang");
    let src = crate::support::fixture("run_callers.c");
    let exe = dir.join("run_callers");
    run_ok(
        Command::new("clang")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-fuse-ld=lld"])
            .arg(&src)
            .arg("-o")
            .arg(&exe),
    );
    measure_callers(&dir, &exe, "clang -fuse-ld=lld");
}

#[test]
fn one_segment_for_headers_and_code_and_static_pie() {
    check_c_layout("layout-noseparate", &["-Wl,-z,noseparate-code"]);
    let exe = check_c_layout("layout-static-pie", &["-static-pie"]);
    let header = run_ok(Command::new("readelf").arg("-hW").arg(&exe));
    assert!(header.contains("DYN"), "static-pie is position independent");
}

#[test]
fn a_dlopened_library_linked_by_lld() {
    let dir = scratch_dir("layout-dlopen-lld");
    let lib = compile(
        "run_dlwork.c",
        &dir,
        "libdlwork.so",
        &["-O2", "-g", "-shared", "-fPIC", "-fuse-ld=lld"],
    );
    assert!(
        offsets_differ_from_addresses(&lib),
        "{:?}",
        load_segments(&lib)
    );
    let exe = compile(
        "run_dlopen.c",
        &dir,
        "run_dlopen",
        &["-O2", "-g", "-fomit-frame-pointer", "-ldl"],
    );
    let (profile, stdout) = measure_with_output(
        &dir,
        "run_dlopen",
        &exe,
        &[lib.to_str().unwrap(), "60", "10"],
    );
    let clocks = work_clocks(&stdout);
    let truth = clocks["lib"] / (clocks["lib"] + clocks["main"]);
    let s = split(&profile);
    assert!(
        s.partial * 100 <= s.total,
        "{} of {} partial",
        s.partial,
        s.total
    );
    let in_lib: u64 = s
        .leaves
        .iter()
        .filter(|(leaf, caller, main, _)| {
            leaf == "libdlwork.so:work_in_lib" && caller.ends_with(":main") && *main
        })
        .map(|l| l.3)
        .sum();
    // Against the two timed parts only: a share of every sample also counts start-up and
    // exit, which a loaded machine stretches.
    let in_main: u64 = (s.leaves.iter())
        .filter(|(leaf, ..)| leaf.ends_with(":work_in_main"))
        .map(|l| l.3)
        .sum();
    let share = in_lib as f64 / (in_lib + in_main).max(1) as f64;
    assert!(
        (share - truth).abs() <= 0.05,
        "work_in_lib share {share:.3}, the program's own {truth:.3} ({clocks:?}); leaves {:?}; \
         run {:?}",
        top_leaves(&s),
        profile.stats
    );
}
