//! What the end-to-end tests share: compiling fixture programs at test time and
//! running the workspace's tools.
//!
//! Fixture sources live in `tests/fixtures/`; each test compiles the ones it needs with the
//! system compilers into a fresh scratch directory, so nothing binary is committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, Once};

/// The workspace root (where `Cargo.toml` and `tests/` are).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of a fixture source file in `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures").join(name)
}

/// The line (1-based) of the one `@name` marker in fixture `source`: a comment that marks the
/// source line a test checks (a loop's begin line, a call site).
pub fn marker(source: &str, name: &str) -> u32 {
    let text = std::fs::read_to_string(fixture(source)).expect("read fixture");
    let tag = format!("@{name}");
    let is_tag_at = |line: &str, i: usize| {
        !line[i + tag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
    };
    let hits: Vec<u32> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.match_indices(&tag).any(|(i, _)| is_tag_at(l, i)))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(hits.len(), 1, "marker @{name} in {source}: lines {hits:?}");
    hits[0]
}

/// A fresh, empty scratch directory for one test, under the target directory.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = target_dir().join("test-scratch").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// Compile fixture `source` (C if it ends in `.c`, Fortran if in `.f90`, Rust if in `.rs`, C++
/// otherwise) with `flags` into `out_dir/out_name`, panicking with the compiler's message if it
/// fails.
pub fn compile(source: &str, out_dir: &Path, out_name: &str, flags: &[&str]) -> PathBuf {
    compile_all(&[source], out_dir, out_name, flags)
}

/// Compile and link several fixture sources of one language into `out_dir/out_name` (see
/// [`compile`]).
pub fn compile_all(sources: &[&str], out_dir: &Path, out_name: &str, flags: &[&str]) -> PathBuf {
    let compiler = match sources[0].rsplit('.').next() {
        Some("c") => "gcc",
        Some("f90") => "gfortran",
        Some("rs") => "rustc",
        _ => "g++",
    };
    compile_with(compiler, sources, out_dir, out_name, flags)
}

/// Compile and link fixture `sources` with `compiler` (`clang`, `clang++`, ...) into
/// `out_dir/out_name` (see [`compile`]).
pub fn compile_with(
    compiler: &str,
    sources: &[&str],
    out_dir: &Path,
    out_name: &str,
    flags: &[&str],
) -> PathBuf {
    let out = out_dir.join(out_name);
    let mut command = Command::new(compiler);
    if compiler == "gfortran" {
        // Module files (`*.mod`) go to the scratch directory, not the working directory.
        command.arg("-J").arg(out_dir);
    }
    let output = command
        .args(flags)
        .args(sources.iter().map(|s| fixture(s)))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {flags:?} {sources:?} failed:\n{}",
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

/// The `--features` the test run was built with (`HPCTOOLKIT_RS_FEATURES`, which scripts/test
/// sets to `correlate/mpi` where MPI is installed), so that building the tools again for a test
/// finds everything built and rebuilds nothing.
pub fn build_features() -> Vec<String> {
    match std::env::var("HPCTOOLKIT_RS_FEATURES") {
        Ok(f) if !f.is_empty() => vec!["--features".into(), f],
        _ => Vec::new(),
    }
}

/// Path of one of the workspace's binaries (`hpcrun-rs`, ...), built on first use if needed
/// with everything beside them (the allocation shim `libhpcrun_alloc.so` hpcrun-rs preloads).
pub fn tool(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir");
    let path = profile_dir.join(name);
    BUILD.call_once(|| {
        let release = profile_dir.ends_with("release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--workspace", "--quiet"])
            .args(build_features());
        if release {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --workspace failed");
    });
    path
}

/// A command running one of the workspace's tools with this test's own structure cache
/// (`XDG_CACHE_HOME`), so that no test sees what another one cached, nor the user's cache.
pub fn tool_command(name: &str) -> Command {
    let mut command = Command::new(tool(name));
    command.env("XDG_CACHE_HOME", test_cache());
    command
}

/// This test's private cache directory, emptied the first time this process asks for it: named
/// after the test (libtest runs each test on a thread named after it), or after the process
/// where the thread has no test's name (a test run alone on the main thread, a helper thread).
pub fn test_cache() -> PathBuf {
    static MADE: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let name = match std::thread::current().name() {
        Some(n) if n != "main" => n.replace("::", "-"),
        _ => format!("process-{}", std::process::id()),
    };
    let dir = target_dir().join("test-caches").join(&name);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if !made.contains(&name) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's cache directory");
        made.push(name);
    }
    dir
}

/// The GNU build-id of `binary`, in hex (as `readelf -n` prints it).
pub fn build_id(binary: &Path) -> String {
    let notes = run_ok(Command::new("readelf").arg("-n").arg(binary));
    let line = notes.lines().find(|l| l.contains("Build ID:")).unwrap();
    line.rsplit(' ').next().unwrap().trim().to_string()
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

/// Symbol tables of the modules of a profile, to name raw frames in tests.
pub mod symbols {
    use std::collections::HashMap;

    use object::{Object, ObjectSymbol};
    use profiler::db::{Cct, CctNodeId, Frame, Profile, ProfileModuleId};

    /// The function symbols of one ELF file, sorted by address.
    #[derive(Debug, Default)]
    pub struct SymbolTable {
        syms: Vec<(u64, u64, String)>,
    }

    impl SymbolTable {
        /// Read the symbol tables (static and dynamic) of `path`; empty if unreadable.
        pub fn read(path: &str) -> SymbolTable {
            let Ok(data) = std::fs::read(path) else {
                return SymbolTable::default();
            };
            let Ok(obj) = object::File::parse(&*data) else {
                return SymbolTable::default();
            };
            let mut syms: Vec<(u64, u64, String)> = obj
                .symbols()
                .chain(obj.dynamic_symbols())
                .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
                .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
                .collect();
            syms.sort();
            syms.dedup_by_key(|s| s.0);
            SymbolTable { syms }
        }

        /// The function containing link-time address `addr`.
        pub fn lookup(&self, addr: u64) -> Option<&str> {
            let i = self.syms.partition_point(|s| s.0 <= addr);
            let (start, size, name) = self.syms.get(i.checked_sub(1)?)?;
            (addr < start + (*size).max(1)).then_some(name.as_str())
        }

        /// Address range of the function called `name`.
        pub fn range(&self, name: &str) -> Option<std::ops::Range<u64>> {
            self.syms
                .iter()
                .find(|s| s.2 == name)
                .map(|s| s.0..s.0 + s.1)
        }
    }

    /// Names frames of a profile as `module-basename:function`.
    pub struct Namer<'p> {
        profile: &'p Profile,
        tables: HashMap<ProfileModuleId, SymbolTable>,
    }

    impl<'p> Namer<'p> {
        /// A namer for `profile`'s modules (read lazily).
        pub fn new(profile: &'p Profile) -> Self {
            Namer {
                profile,
                tables: HashMap::new(),
            }
        }

        /// The name of one frame; return addresses are looked up at `ra - 1`.
        pub fn frame(&mut self, frame: &Frame) -> String {
            match *frame {
                Frame::Root => "<root>".into(),
                Frame::Partial => "<partial call paths>".into(),
                Frame::Kernel => "<kernel>".into(),
                Frame::Blocked(reason) => reason.label().into(),
                Frame::Unmapped { avma, .. } | Frame::Jit { avma, .. } => format!("{avma:#x}"),
                Frame::Python { code, line } => {
                    let c = &self.profile.python_code[code as usize];
                    format!("py:{}:{line}", c.name)
                }
                Frame::Code { module, addr, kind } => {
                    let path = &self.profile.modules[module.index()].path;
                    let base = path.rsplit('/').next().unwrap_or(path).to_string();
                    let table = self
                        .tables
                        .entry(module)
                        .or_insert_with(|| SymbolTable::read(path));
                    let name = table.lookup(kind.lookup(addr).0).unwrap_or("?");
                    format!("{base}:{name}")
                }
            }
        }

        /// Every sampled path of `cct` as (named frames root first, samples of metric 0).
        pub fn paths(&mut self, cct: &Cct) -> Vec<(Vec<String>, u64)> {
            let mut out = Vec::new();
            for (i, node) in cct.nodes.iter().enumerate() {
                let samples = node.costs.first().map_or(0, |c| c.samples);
                if samples == 0 {
                    continue;
                }
                let mut frames = Vec::new();
                let mut n = CctNodeId::from_index(i);
                while n != CctNodeId::ROOT {
                    let node = &cct.nodes[n.index()];
                    frames.push(self.frame(&node.frame));
                    n = node.parent;
                }
                frames.reverse();
                out.push((frames, samples));
            }
            out
        }
    }
}

/// A measurement by hpcrun-rs whose samples can stand against the program's own clocks.
pub struct Sampled {
    /// The profile written.
    pub profile: profiler::db::Profile,
    /// What the command printed (its clocks).
    pub stdout: String,
    /// What hpcrun-rs printed (its summary), with the host's steal share of the run.
    pub stderr: String,
}

/// The profile `measure` writes to `db`, measured again (three tries) where the kernel dropped
/// samples (records lost, sampling throttled: the summary says so) or the virtual machine's host
/// took more than 2% of its CPU time during the run (steal time, `/proc/stat`): the clock samples
/// then miss or gain what the host took while the thread's own clock does not (CPU time of a
/// loop 20% off in a loaded CI run), and a split's oracle no longer holds.
pub fn sampled_in_full(db: &Path, measure: impl Fn(&Path) -> Output) -> Sampled {
    for attempt in 1..=3 {
        let before = cpu_ticks();
        let out = measure(db);
        let after = cpu_ticks();
        let stolen = (after.0 - before.0) as f64 / (after.1 - before.1).max(1) as f64;
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "hpcrun-rs failed:\n{stderr}");
        stderr.push_str(&format!(
            "(the host's steal: {:.1}% of the run)\n",
            100.0 * stolen
        ));
        let profile = profiler::db::Profile::read(db).expect("profile.db readable");
        let stats = &profile.stats;
        if (stats.lost == 0 && stats.throttled == 0 && stolen <= 0.02) || attempt == 3 {
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            return Sampled {
                profile,
                stdout,
                stderr,
            };
        }
        eprintln!("samples dropped or stolen ({stats:?}), measuring again:\n{stderr}");
    }
    unreachable!("the third try returns")
}

/// This machine's CPU time so far in clock ticks, from `/proc/stat`: (stolen by the host, all).
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = (stat.lines().next().unwrap_or_default().split_whitespace())
        .skip(1)
        .take(8)
        .filter_map(|t| t.parse().ok())
        .collect();
    (ticks.get(7).copied().unwrap_or(0), ticks.iter().sum())
}

/// The CPU time (s) each `who` reported in `stdout` ("WHO work-cpu-ns N" lines, as the
/// fixtures print them from their own thread clocks), by WHO.
pub fn work_clocks(stdout: &str) -> std::collections::BTreeMap<String, f64> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(" work-cpu-ns "))
        .map(|(who, ns)| (who.to_string(), ns.trim().parse::<f64>().unwrap() / 1e9))
        .collect()
}

/// `setpriv`'s arguments that run a command as `nobody`.
pub const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// A fresh directory every user may write in, with a copy of hpcrun-rs that every user may run.
pub fn world_dir(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    open(&dir, 0o777);
    let hpcrun = dir.join("hpcrun-rs");
    std::fs::copy(tool("hpcrun-rs"), &hpcrun).unwrap();
    open(&hpcrun, 0o755);
    (dir, hpcrun)
}

/// `program` run as `user` (`setpriv` and its arguments; empty: as we are).
pub fn as_user(user: &[&str], program: &Path) -> Command {
    match user.split_first() {
        None => Command::new(program),
        Some((setpriv, args)) => {
            let mut cmd = Command::new(setpriv);
            cmd.args(args).arg(program);
            cmd
        }
    }
}

/// The node named `name` in a JSON view's tree below `n` (depth first).
pub fn json_node<'a>(n: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    if n["name"] == name {
        return Some(n);
    }
    (n["children"].as_array().into_iter().flatten()).find_map(|c| json_node(c, name))
}
