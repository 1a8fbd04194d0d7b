//! Measure here, analyse there (`hpcrun-rs --bundle`): a measurement directory carries copies
//! of the binaries its profile names and of their separate debug files, found by build-id, so
//! that moved to a place where the program and its debug file are gone it correlates into the
//! very bytes the measuring machine gives without the bundle; without the bundle there, the
//! program's code and data stay unnamed.

use std::path::Path;
use std::process::Command;

use crate::correlate_data::view_json;
use profiler::db::Profile;

use crate::support::{
    as_user, build_id, compile, run, run_ok, scratch_dir, tool_command, world_dir, NOBODY,
};

/// Pages of static array B in `data_touch.c` (A has three times as many).
const NP: u64 = 256;

/// Measure `exe`'s page faults with data addresses into measurement directory `dir` with
/// `--bundle`, again if records were lost (every page is counted below).
fn measure_into_directory(exe: &Path, dir: &Path) {
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(dir);
        let out = run(tool_command("hpcrun-rs")
            .args([
                "-e",
                "page-faults@1",
                "--data",
                "--buffer-kib",
                "32768",
                "--bundle",
            ])
            .arg("-o")
            .arg(dir.join(""))
            .arg(exe));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
        assert!(stderr.contains("bundled "), "{stderr}");
        if Profile::read(&the_profile_in(dir)).unwrap().stats.lost == 0 {
            return;
        }
    }
    panic!("hpcrun-rs lost records twice in a row");
}

/// The one process's profile in measurement directory `dir`.
fn the_profile_in(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("a profile in the measurement directory")
}

/// `hpcprof-rs --no-cache run -o NAME` in `dir` (relative inputs: the database names its
/// profiles as given), returning the database's bytes; its summary says whether it read
/// binaries from the bundle, as `bundled` expects.
fn correlate_in(dir: &Path, name: &str, bundled: bool) -> Vec<u8> {
    let _ = std::fs::remove_file(dir.join(name));
    let out =
        run(tool_command("hpcprof-rs")
            .current_dir(dir)
            .args(["--no-cache", "run", "-o", name]));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{summary}");
    let said = summary.contains(" binaries read from the measurement's bundle");
    assert_eq!(said, bundled, "{summary}");
    std::fs::read(dir.join(name)).unwrap()
}

/// Fault samples of the static array `name` in database `db`'s data view (0 if unnamed).
fn static_samples(db: &Path, name: &str) -> u64 {
    let view = view_json(db, &["--data"]);
    let objects = view["objects"].as_array().cloned().unwrap_or_default();
    objects
        .iter()
        .filter(|o| o["name"] == name)
        .filter_map(|o| o["samples"][0].as_u64())
        .sum()
}

/// Whether the top-down view of `db` shows procedure `name` called from `file`.
fn names_procedure(db: &Path, name: &str, file: &str) -> bool {
    let view = run_ok(tool_command("hpcview-rs").arg(db));
    view.contains(&format!(" {name}  ({file}:"))
}

#[test]
fn a_bundled_measurement_correlates_the_same_where_the_binaries_are_gone() {
    let base = scratch_dir("bundle_moved");
    let (build, here, there) = (base.join("build"), base.join("here"), base.join("there"));
    for dir in [&build, &here, &there] {
        std::fs::create_dir_all(dir).unwrap();
    }
    // Debug information in a separate file, named by .gnu_debuglink, as distributions ship it.
    let exe = compile("data_touch.c", &build, "touch", &["-O2", "-g"]);
    let debug = build.join("touch.debug");
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(&debug),
    );
    run_ok(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&exe),
    );
    let run_dir = here.join("run");
    measure_into_directory(&exe, &run_dir);
    let id = build_id(&exe);
    let entry = run_dir.join("modules").join(&id);
    assert!(
        entry.join("executable").is_file(),
        "no copy in {}",
        entry.display()
    );
    assert!(
        entry.join("debuginfo").is_file(),
        "no debug file in {}",
        entry.display()
    );

    // What the measuring machine gives from the program itself.
    let store = run_dir.join("modules");
    let aside = here.join("modules-aside");
    std::fs::rename(&store, &aside).unwrap();
    let measuring = correlate_in(&here, "m.hpcdb", false);
    std::fs::rename(&aside, &store).unwrap();
    assert_eq!(static_samples(&here.join("m.hpcdb"), "B"), NP);

    // Moved; the program and its debug file are gone.
    std::fs::rename(&run_dir, there.join("run")).unwrap();
    std::fs::remove_dir_all(&build).unwrap();
    let moved = correlate_in(&there, "m.hpcdb", true);
    assert!(
        measuring == moved,
        "the moved measurement gives other bytes"
    );
    let db = there.join("m.hpcdb");
    assert_eq!(static_samples(&db, "A"), 3 * NP);
    assert_eq!(static_samples(&db, "B"), NP);
    assert!(names_procedure(&db, "touch", "data_touch.c"));

    // The bundle is what named them.
    std::fs::remove_dir_all(there.join("run").join("modules")).unwrap();
    correlate_in(&there, "bare.hpcdb", false);
    let bare = there.join("bare.hpcdb");
    assert_eq!(static_samples(&bare, "B"), 0);
    assert!(!names_procedure(&bare, "touch", "data_touch.c"));
}

#[test]
fn a_program_in_another_mount_namespace_is_read_from_its_own_files() {
    if !crate::hpcrun::is_root() {
        return; // a mount namespace of one's own needs root (unshare -m, mount --bind)
    }
    let dir = scratch_dir("bundle_namespace");
    // The host's `app` and the file the namespace sees at the same path are other programs.
    let app = compile("run_spin.c", &dir, "app", &["-O2", "-g"]);
    let theirs = compile("run_callers.c", &dir, "theirs", &["-O2", "-g"]);
    let out = run(tool_command("hpcrun-rs")
        .args(["-e", "cpu-clock", "--bundle", "-o", "run/", "--"])
        .args(in_namespace(&app, &theirs, 600))
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let profile = Profile::read(&the_profile_in(&dir.join("run"))).unwrap();
    let module = (profile.modules.iter())
        .find(|m| m.path == app.display().to_string())
        .expect("the program's module");
    let hex = |id: &[u8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        module.build_id.as_deref().map(hex),
        Some(build_id(&theirs)),
        "the module is the file the namespace mapped, not ours at its path"
    );
    // Correlated from the bundle: the namespace's program, by its own source.
    assert_theirs_from_the_bundle(&dir, "ns.hpcdb");
    // Without it, the host's file at that path is another build: refused, never used.
    std::fs::remove_dir_all(dir.join("run").join("modules")).unwrap();
    let out = run(tool_command("hpcprof-rs")
        .current_dir(&dir)
        .args(["run", "-o", "bare.hpcdb"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed since it was profiled"), "{stderr}");
    let flat = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("bare.hpcdb"))
            .arg("--flat"),
    );
    assert!(!flat.contains("run_spin.c"), "{flat}");
}

/// The arguments that run `app ROUNDS` in a mount namespace of its own (as root) where `theirs`,
/// another program, is bound at `app`'s path; the process that runs it is the one started
/// (`unshare` and the shell exec).
fn in_namespace(app: &Path, theirs: &Path, rounds: u32) -> Vec<String> {
    let script = format!(
        "mount --bind {} {} && exec {} {rounds}",
        theirs.display(),
        app.display(),
        app.display()
    );
    [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]
    .map(String::from)
    .to_vec()
}

/// Correlate measurement directory `dir/run` into `dir/NAME`: the program named is
/// `run_callers.c`'s (bound into the namespace), not `run_spin.c`'s (the host's at that path).
fn assert_theirs_from_the_bundle(dir: &Path, name: &str) {
    run_ok(
        tool_command("hpcprof-rs")
            .current_dir(dir)
            .args(["run", "-o", name]),
    );
    let flat = run_ok(tool_command("hpcview-rs").arg(dir.join(name)).arg("--flat"));
    assert!(
        flat.contains("run_callers.c") && !flat.contains("run_spin.c"),
        "{flat}"
    );
}

/// Attached to with `-p`, a process of another mount namespace is read the same way: its
/// modules through its own root, the host's file at the same path never used.
#[test]
fn a_program_attached_to_in_another_mount_namespace_is_read_from_its_own_files() {
    if !crate::hpcrun::is_root() {
        return; // a mount namespace of one's own needs root (unshare -m, mount --bind)
    }
    let dir = scratch_dir("bundle_namespace_attach");
    let app = compile("run_spin.c", &dir, "app", &["-O2", "-g"]);
    let theirs = compile("run_callers.c", &dir, "theirs", &["-O2", "-g"]);
    let hpcrun = crate::support::tool("hpcrun-rs"); // built before the target starts
    let args = in_namespace(&app, &theirs, 4000);
    let mut target = Command::new(&args[0]).args(&args[1..]).spawn().unwrap();
    // Attach once the shell has bound the file and become the program.
    let comm = format!("/proc/{}/comm", target.id());
    for _ in 0..500 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "app") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = run(Command::new(hpcrun)
        .args(["-e", "cpu-clock", "--bundle", "-o", "run/", "-p"])
        .arg(target.id().to_string())
        .current_dir(&dir));
    let status = target.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && status.success(), "{stderr}");
    assert_theirs_from_the_bundle(&dir, "attached.hpcdb");
}

/// The same in a bubblewrap sandbox (`bwrap`, which needs no privilege: a user namespace of
/// its own), measured by an unprivileged user (`nobody`, where the tests run as root): the
/// sandbox binds another program over the host's at the same path, and the profile names the
/// sandbox's, read through the process's own root while it ran.
#[test]
fn a_program_in_a_bubblewrap_sandbox_is_read_from_its_own_files() {
    let user: &[&str] = match crate::hpcrun::is_root() {
        true => NOBODY,
        false => &[],
    };
    let (dir, hpcrun) = world_dir("bundle-bwrap");
    let app = compile("run_spin.c", &dir, "app", &["-O2", "-g"]);
    let theirs = compile("run_callers.c", &dir, "theirs", &["-O2", "-g"]);
    // bwrap's arguments: the host's tree, with `theirs` at `app`'s path.
    let binds = |cmd: &mut Command| {
        cmd.args(["--dev-bind", "/", "/", "--bind"])
            .args([&theirs, &app])
            .arg("--");
    };
    // A kernel (or a container) that gives this user no namespaces of its own cannot run it.
    match Command::new("bwrap").arg("--version").output() {
        Ok(_) => {}
        Err(_) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: bwrap is not installed (apt-get install bubblewrap)");
            return;
        }
        Err(e) => panic!("bwrap: {e} (scripts/test installs bubblewrap)"),
    }
    let mut probe = as_user(user, Path::new("bwrap"));
    binds(&mut probe);
    let probe = run(probe.arg("/bin/true").current_dir(&dir));
    if !probe.status.success() {
        eprintln!(
            "skipped: bwrap cannot make a sandbox here: {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        return;
    }
    let mut measured = as_user(user, &hpcrun);
    measured.args(["-e", "cpu-clock", "--bundle", "-o", "run/", "--", "bwrap"]);
    binds(&mut measured);
    let out = run(measured.arg(&app).arg("600").current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_theirs_from_the_bundle(&dir, "sandbox.hpcdb");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_split_dwarf_program_travels_with_its_dwo_files() {
    let base = scratch_dir("bundle_split_dwarf");
    let build = base.join("build");
    std::fs::create_dir_all(&build).unwrap();
    let flags = ["-O2", "-g", "-gsplit-dwarf", "-pthread"];
    let exe = compile("offcpu_block.c", &build, "ob", &flags);
    let id = build_id(&exe);
    let out = run(tool_command("hpcrun-rs")
        .args(["-q", "-e", "cpu-clock", "--bundle", "-o", "run/"])
        .arg(&exe)
        .current_dir(&base));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The inlined calls are in the .dwo file only: gone with the build tree, kept in the store.
    std::fs::remove_dir_all(&build).unwrap();
    let view = |db: &str| {
        run_ok(
            tool_command("hpcprof-rs")
                .current_dir(&base)
                .args(["--no-cache", "run", "-o", db]),
        );
        run_ok(tool_command("hpcview-rs").arg(base.join(db)))
    };
    let moved = view("moved.hpcdb");
    assert!(moved.contains("[I] now"), "{moved}");
    let entry = base.join("run").join("modules").join(id);
    for dwo in std::fs::read_dir(&entry)
        .unwrap()
        .map(|e| e.unwrap().path())
    {
        if dwo.extension().is_some_and(|x| x == "dwo") {
            std::fs::remove_file(dwo).unwrap();
        }
    }
    let without = view("without.hpcdb");
    assert!(!without.contains("[I] now"), "{without}");
}
