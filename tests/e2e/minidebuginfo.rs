//! MiniDebugInfo (`.gnu_debugdata`): a program stripped of everything but an xz-compressed
//! symbol table of its own functions, made the way Fedora's build tools (and gdb's manual)
//! make it. hpcstruct-rs and hpcprof-rs name its functions from it, where the same stripped
//! program without it leaves them unnamed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// Defined symbols of `binary` (`nm`, posix format), `dynamic` ones or all of the kinds kept.
fn symbols(binary: &Path, dynamic: bool, kinds: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("nm");
    if dynamic {
        cmd.arg("-D");
    }
    let out = run_ok(cmd.args(["--format=posix", "--defined-only"]).arg(binary));
    let mut names: Vec<String> = (out.lines())
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (name, kind) = (f.next()?, f.next()?);
            (kinds.is_empty() || kinds.contains(&kind)).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names
}

/// `program` stripped, in `dir`: without and with a MiniDebugInfo section holding the
/// function symbols `.dynsym` does not have.
fn stripped_pair(dir: &Path, program: &Path) -> (PathBuf, PathBuf) {
    let dynamic = symbols(program, true, &[]);
    let keep: Vec<String> = symbols(program, false, &["T", "t"])
        .into_iter()
        .filter(|s| !dynamic.contains(s))
        .collect();
    assert!(keep.iter().any(|s| s == "leaf"), "{keep:?}");
    let keep_file = dir.join("keep_symbols");
    std::fs::write(&keep_file, keep.join("\n") + "\n").unwrap();
    let debug = dir.join("debug");
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(program)
            .arg(&debug),
    );
    let mini = dir.join("mini_debuginfo");
    run_ok(
        Command::new("objcopy")
            .args([
                "-S",
                "--remove-section",
                ".gdb_index",
                "--remove-section",
                ".comment",
            ])
            .arg(format!("--keep-symbols={}", keep_file.display()))
            .arg(&debug)
            .arg(&mini),
    );
    run_ok(Command::new("xz").arg("-f").arg(&mini));
    let bare = dir.join("bare");
    run_ok(
        Command::new("strip")
            .args(["--strip-all", "-R", ".comment", "-o"])
            .arg(&bare)
            .arg(program),
    );
    let with_mini = dir.join("mini");
    run_ok(
        Command::new("objcopy")
            .arg(format!(
                "--add-section=.gnu_debugdata={}.xz",
                mini.display()
            ))
            .arg(&bare)
            .arg(&with_mini),
    );
    (bare, with_mini)
}

/// Whether hpcstruct-rs's structure of `binary` has a procedure named `name`.
fn structure_names(dir: &Path, binary: &Path, name: &str) -> bool {
    let out = dir.join("s.hpcstruct");
    run_ok(tool_command("hpcstruct-rs").arg(binary).arg("-o").arg(&out));
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .any(|l| l.starts_with("<P ") && l.contains(&format!(" n=\"{name}\"")))
}

#[test]
fn a_stripped_program_is_named_from_its_minidebuginfo() {
    let dir = scratch_dir("minidebuginfo");
    let program = compile("run_callers.c", &dir, "full", &["-O2", "-g"]);
    let (bare, mini) = stripped_pair(&dir, &program);
    let out = run(tool_command("hpcstruct-rs")
        .arg(&bare)
        .arg("-o")
        .arg(dir.join("bare.hpcstruct")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no symbols"), "{stderr}");
    for name in ["leaf", "caller_a", "caller_b", "main"] {
        assert!(structure_names(&dir, &mini, name), "{name}");
    }
    // A profile of it, correlated on the fly: the time is in `leaf`, by name.
    let db = dir.join("mini.db");
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "-o"])
            .arg(&db)
            .arg(&mini)
            .args(["300", "200000"]),
    );
    run_ok(tool_command("hpcprof-rs").arg(&db));
    let flat = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("mini.hpcdb"))
            .arg("--flat"),
    );
    assert!(
        flat.contains(" leaf\n") && flat.contains(" caller_a\n"),
        "{flat}"
    );
    // Its structure file is taken for the program it describes (checked against the symbols
    // the binary has, its MiniDebugInfo's among them).
    let structure = dir.join("mini.hpcstruct");
    run_ok(
        tool_command("hpcstruct-rs")
            .arg(&mini)
            .arg("-o")
            .arg(&structure),
    );
    let with_file = dir.join("with-file.hpcdb");
    run_ok(
        tool_command("hpcprof-rs")
            .arg(&db)
            .arg(&structure)
            .arg("-o")
            .arg(&with_file),
    );
    let flat = run_ok(tool_command("hpcview-rs").arg(&with_file).arg("--flat"));
    assert!(flat.contains(" leaf\n"), "{flat}");
}
