//! Support for the end-to-end tests in `tests/`: compiling fixture programs at test time and
//! running the workspace's tools.
//!
//! Fixture sources live in `tests/fixtures/`; each test compiles the ones it needs with the
//! system compilers into a fresh scratch directory, so nothing binary is committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

/// The workspace root (where `Cargo.toml` and `tests/` are).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of a fixture source file in `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures").join(name)
}

/// A fresh, empty scratch directory for one test, under the target directory.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = target_dir().join("test-scratch").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// Compile fixture `source` (C if it ends in `.c`, C++ otherwise) with `flags` into
/// `out_dir/out_name`, panicking with the compiler's message if it fails.
pub fn compile(source: &str, out_dir: &Path, out_name: &str, flags: &[&str]) -> PathBuf {
    let src = fixture(source);
    let compiler = if source.ends_with(".c") { "gcc" } else { "g++" };
    let out = out_dir.join(out_name);
    let output = Command::new(compiler)
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {flags:?} {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// The directory cargo builds into (`target/` unless `CARGO_TARGET_DIR` says otherwise).
pub fn target_dir() -> PathBuf {
    // Test executables live in <target>/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Path of one of the workspace's binaries (`hpcrun-rs`, ...), built on first use if needed.
pub fn tool(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir");
    let path = profile_dir.join(name);
    BUILD.call_once(|| {
        let release = profile_dir.ends_with("release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--workspace", "--bins", "--quiet"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --bins failed");
    });
    path
}

/// Run a command and return its output, panicking if it cannot be started.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Run a command that must succeed; returns its stdout, panics with stderr otherwise.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
