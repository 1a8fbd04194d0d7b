//! hpcprof-rs-mpi (`--features mpi`) under `mpirun -np 4` writes the database hpcprof-rs
//! writes: on 200 synthetic ranks (copies of a real profile, `profiler/examples/
//! synth_profiles.rs`) plus a damaged file, the same bytes, views, statistics and exit status (3);
//! a measurement given twice across two ranks' shares and a missing input fail as they do in
//! the serial tool (one line, exit 2); an OpenMP program's region timeline reaches rank 0 from the
//! other ranks' shares (the same database as the serial tool's).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::parallel_jobs::{have_mpi, EVENT};
use crate::support::{
    build_features, compile, run, run_ok, scratch_dir, target_dir, test_cache, tool_command,
    workspace_root,
};

/// Whether this test binary is a release build.
fn release() -> bool {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .ends_with("release")
}

/// The synthetic profile of `rank` in `m`.
fn rank_file(m: &Path, rank: u32) -> PathBuf {
    let prefix = format!("synth-{rank:06}-");
    std::fs::read_dir(m)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .unwrap()
}

/// Build `what` (cargo arguments) in `target_dir` (the test's profile) and return the profile's
/// output folder there.
fn build(what: &[&str], target_dir: &Path) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet"]).args(what);
    if !what.contains(&"--features") {
        cmd.args(build_features());
    }
    cmd.arg("--target-dir").arg(target_dir);
    if release() {
        cmd.arg("--release");
    }
    let status = cmd.current_dir(workspace_root()).status().unwrap();
    assert!(status.success(), "cargo build {what:?} failed");
    target_dir.join(if release() { "release" } else { "debug" })
}

/// hpcprof-rs-mpi, built with the `mpi` feature into the tests' own target folder (one build of
/// the dependencies for every tool; a run of scripts/test has built it already with the same
/// features, and this is then no work).
pub(crate) fn hpcprof_mpi() -> PathBuf {
    let dir = build(
        &["--workspace", "--bins", "--features", "correlate/mpi"],
        &target_dir(),
    );
    dir.join("hpcprof-rs-mpi")
}

/// `hpcprof-rs-mpi ARGS` on 4 ranks, in `dir`.
fn mpirun(dir: &Path, args: &[&str]) -> Output {
    run(Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .arg(hpcprof_mpi())
        .args(args)
        .env("XDG_CACHE_HOME", test_cache())
        .current_dir(dir))
}

/// `hpcprof-rs ARGS` in `dir`.
fn serial(dir: &Path, args: &[&str]) -> Output {
    run(tool_command("hpcprof-rs").args(args).current_dir(dir))
}

/// hpcview-rs's output for `db` with `args`.
fn view(dir: &Path, db: &str, args: &[&str]) -> String {
    run_ok(
        tool_command("hpcview-rs")
            .arg(db)
            .args(args)
            .current_dir(dir),
    )
}

/// The status and stderr's error lines of a failed run.
fn failure(out: &Output) -> (Option<i32>, Vec<String>) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = stderr
        .lines()
        .filter(|l| l.contains("error:"))
        .map(|l| l.split_once("error:").unwrap().1.to_string())
        .collect();
    (out.status.code(), lines)
}

#[test]
fn hpcprof_mpi_on_four_ranks_writes_the_serial_database() {
    if !have_mpi() {
        return;
    }
    let dir = scratch_dir("parallel_jobs_mpi");
    compile("par_ranks.c", &dir, "ranks", &["-O1", "-g"]);
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", EVENT, "-o", "base.db", "./ranks"])
            .current_dir(&dir),
    );
    let examples = build(
        &["--workspace", "--example", "synth_profiles"],
        &target_dir(),
    )
    .join("examples");
    std::fs::create_dir(dir.join("m")).unwrap();
    run_ok(
        Command::new(examples.join("synth_profiles"))
            .args(["base.db", "200", "m"])
            .current_dir(&dir),
    );
    let bytes = std::fs::read(rank_file(&dir.join("m"), 7)).unwrap();
    std::fs::write(dir.join("m/cut.db"), &bytes[..bytes.len() / 2]).unwrap();

    let one = serial(&dir, &["m", "-o", "serial.hpcdb"]);
    let four = mpirun(&dir, &["m", "-o", "mpi.hpcdb"]);
    for out in [&one, &four] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert_eq!(
            stderr.matches("warning: skipped m/cut.db").count(),
            1,
            "{stderr}"
        );
    }
    let db = |name: &str| std::fs::read(dir.join(name)).unwrap();
    assert!(
        db("serial.hpcdb") == db("mpi.hpcdb"),
        "the databases differ"
    );
    for args in [
        &["--json"][..],
        &["--json", "--flat"],
        &["--json", "--callers"],
        &["--json", "--stats"],
        &["--json", "--stats=threads", "--flat"],
        &["--json", "--rank", "199"],
    ] {
        let a = view(&dir, "serial.hpcdb", args);
        let b = view(&dir, "mpi.hpcdb", args);
        assert!(a == b, "hpcview-rs {args:?} differs");
        assert!(a.len() > 1000, "{a}");
    }
    let stats = view(&dir, "mpi.hpcdb", &["--stats", "--json"]);
    assert_eq!(stats.matches("\"rank\":").count(), 200, "{stats}");

    // The same measurement in the first and the last rank's share: refused in the merge.
    std::fs::remove_file(dir.join("m/cut.db")).unwrap();
    std::fs::copy(rank_file(&dir.join("m"), 0), dir.join("m/zz-copy.db")).unwrap();
    let one = serial(&dir, &["m", "-o", "dup1.hpcdb"]);
    let four = mpirun(&dir, &["m", "-o", "dup4.hpcdb"]);
    let (status, lines) = failure(&four);
    assert_eq!((status, &lines), (Some(2), &failure(&one).1), "{four:?}");
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("the same measurement as"), "{lines:?}");
    assert!(!dir.join("dup4.hpcdb").exists());

    // A missing input and an existing output: the serial tool's line and status.
    for args in [&["nothing-here"][..], &["m", "-o", "mpi.hpcdb"]] {
        let (status, lines) = failure(&mpirun(&dir, args));
        assert_eq!((status, lines.len()), (Some(2), 1), "{lines:?}");
        assert_eq!(lines, failure(&serial(&dir, args)).1);
    }
}

#[test]
fn an_openmp_programs_region_timeline_travels_between_the_ranks() {
    // Two runs of a clang/libomp program whose worker samples only the OpenMP tool's region
    // timeline places (see openmp.rs): the ranks' shares must carry the timeline to rank 0.
    let libomp = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("lib/libomp.so").exists());
    if !have_mpi() || !libomp {
        return;
    }
    let dir = scratch_dir("parallel_jobs_mpi_openmp");
    crate::support::compile_with(
        "clang",
        &["omp_lopsided.c"],
        &dir,
        "lopsided",
        &["-O2", "-g", "-fopenmp"],
    );
    std::fs::create_dir(dir.join("m")).unwrap();
    for run in ["m/a.db", "m/b.db"] {
        run_ok(
            tool_command("hpcrun-rs")
                .args(["-q", "-e", "cpu-clock@f4000", "-o", run, "./lopsided", "6"])
                .env("OMP_WAIT_POLICY", "passive")
                .current_dir(&dir),
        );
    }
    let one = serial(&dir, &["m", "-o", "serial.hpcdb"]);
    let four = mpirun(&dir, &["m", "-o", "mpi.hpcdb"]);
    for out in [&one, &four] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let line = (stderr.lines())
            .find(|l| l.trim_start().starts_with("OpenMP:"))
            .unwrap_or_else(|| panic!("no OpenMP line: {stderr}"));
        let numbers: Vec<f64> = (line.split(|c: char| !c.is_ascii_digit()))
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(numbers[1] >= 0.99 * numbers[2], "placed: {line}");
    }
    let (s, p) = (dir.join("serial.hpcdb"), dir.join("mpi.hpcdb"));
    assert!(
        std::fs::read(s).unwrap() == std::fs::read(p).unwrap(),
        "the databases differ"
    );
}
