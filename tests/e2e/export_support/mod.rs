//! Shared by the export tests: the pipeline (compile, measure, correlate), the external
//! readers (speedscope's own importer under node, `protoc` with pprof's `profile.proto`) and a
//! reader for protobuf's text format, which `protoc --decode` prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{run_ok, workspace_root};

/// pprof's own schema, from Debian's golang-github-google-pprof-dev (`scripts/install-exports`).
const PPROF_PROTO_DIR: &str = "/usr/share/gocode/src/github.com/google/pprof/proto";

/// Measure `exe` at 4 kHz cpu-clock into `dir/NAME.db`.
pub fn measure(exe: &Path, dir: &Path, name: &str) -> PathBuf {
    measure_events(exe, dir, name, &["cpu-clock@f4000"])
}

/// Measure `exe` with `events` (`hpcrun-rs -e` each) into `dir/NAME.db`.
pub fn measure_events(exe: &Path, dir: &Path, name: &str, events: &[&str]) -> PathBuf {
    let profile = dir.join(format!("{name}.db"));
    let mut command = crate::support::tool_command("hpcrun-rs");
    command.arg("-q");
    for event in events {
        command.args(["-e", event]);
    }
    run_ok(command.arg("-o").arg(&profile).arg(exe));
    profile
}

/// Correlate `profiles` into `dir/NAME.hpcdb`.
pub fn correlate(profiles: &[PathBuf], dir: &Path, name: &str) -> PathBuf {
    let db = dir.join(format!("{name}.hpcdb"));
    run_ok(
        crate::support::tool_command("hpcprof-rs")
            .arg("--no-cache")
            .args(profiles)
            .arg("-o")
            .arg(&db),
    );
    db
}

/// Measure `exe` once and correlate it into `dir/NAME.hpcdb`.
pub fn measure_and_correlate(exe: &Path, dir: &Path, name: &str) -> PathBuf {
    let profile = measure(exe, dir, name);
    correlate(&[profile], dir, name)
}

/// An external reader is missing: a failure in CI (`CI=true`), a skip with the reason
/// otherwise. Returns whether to go on.
pub fn available(what: &str, found: bool) -> bool {
    if found {
        return true;
    }
    let why = format!("{what} is missing: run scripts/install-exports");
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "{why}");
    eprintln!("skipped: {why}");
    false
}

/// The installed `speedscope` npm package (`scripts/install-exports`), if there.
pub fn speedscope_package() -> Option<PathBuf> {
    let dir = workspace_root().join("target/npm-speedscope/node_modules/speedscope");
    dir.join("package.json").is_file().then_some(dir)
}

/// Import `file` with speedscope's own importer (`speedscope_import.mjs`) and return what it
/// imported, as that script prints it.
pub fn speedscope_import(package: &Path, file: &Path) -> serde_json::Value {
    let script = workspace_root().join("tests/e2e/export_support/speedscope_import.mjs");
    let out = run_ok(Command::new("node").arg(script).arg(package).arg(file));
    serde_json::from_str(&out).expect("the import script prints JSON")
}

/// Whether `protoc` and pprof's schema are installed.
pub fn protoc_available() -> bool {
    let protoc = Command::new("protoc")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    protoc.is_ok_and(|s| s.success()) && Path::new(PPROF_PROTO_DIR).join("profile.proto").is_file()
}

/// Decode the gzipped pprof profile `file` with `gzip -dc` and `protoc --decode` against
/// pprof's own `profile.proto`.
pub fn protoc_decode(file: &Path) -> Message {
    let raw = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(file)
        .output()
        .expect("run gzip");
    assert!(
        raw.status.success(),
        "gzip -dc {}: not gzip",
        file.display()
    );
    let mut child = Command::new("protoc")
        .args([
            "--decode=perftools.profiles.Profile",
            "-I",
            PPROF_PROTO_DIR,
            "profile.proto",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run protoc");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&raw.stdout).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc refused the profile: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Message::parse(&String::from_utf8(out.stdout).expect("protoc prints UTF-8"))
}

/// Whether `go` (for `go tool pprof`) is installed.
pub fn go_available() -> bool {
    let go = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .status();
    go.is_ok_and(|s| s.success())
}

/// `go tool pprof ARGS FILE`'s output (pprof's own reader); its state goes to `home`.
pub fn go_pprof(args: &[&str], file: &Path, home: &Path) -> String {
    run_ok(
        Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(file)
            .env("HOME", home)
            .env("PPROF_TMPDIR", home),
    )
}

/// A message in protobuf's text format: its fields in order, each a scalar (as printed) or a
/// nested message.
#[derive(Debug, Default)]
pub struct Message {
    pub fields: Vec<(String, Field)>,
}

#[derive(Debug)]
pub enum Field {
    Scalar(String),
    Message(Message),
}

impl Message {
    /// Read protoc's text output (one `name: value` or `name {` ... `}` per line).
    pub fn parse(text: &str) -> Message {
        let mut stack = vec![(String::new(), Message::default())];
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(name) = line.strip_suffix(" {") {
                stack.push((name.to_string(), Message::default()));
            } else if line == "}" {
                let (name, msg) = stack.pop().expect("balanced braces");
                stack
                    .last_mut()
                    .unwrap()
                    .1
                    .fields
                    .push((name, Field::Message(msg)));
            } else {
                let (name, value) = line.split_once(": ").expect("name: value");
                let value = Field::Scalar(unquote(value));
                stack
                    .last_mut()
                    .unwrap()
                    .1
                    .fields
                    .push((name.to_string(), value));
            }
        }
        assert_eq!(stack.len(), 1, "balanced braces");
        stack.pop().unwrap().1
    }

    /// The messages in repeated field `name`.
    pub fn all(&self, name: &str) -> Vec<&Message> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, f)| match f {
                Field::Message(m) => Some(m),
                Field::Scalar(_) => None,
            })
            .collect()
    }

    /// The scalars in repeated field `name`.
    pub fn scalars(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, f)| match f {
                Field::Scalar(s) => Some(s.as_str()),
                Field::Message(_) => None,
            })
            .collect()
    }

    /// Integer field `name` (0, proto3's default, when absent).
    pub fn int(&self, name: &str) -> i64 {
        self.scalars(name)
            .first()
            .map_or(0, |s| s.parse().expect("an integer"))
    }
}

/// A text-format scalar as its value: strings unquoted, with protoc's escapes (`\"`, `\\`,
/// `\n`, octal `\NNN` bytes) undone.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_string();
    };
    let mut bytes = Vec::new();
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(d @ b'0'..=b'7') => {
                let mut n = u32::from(d - b'0');
                for _ in 0..2 {
                    if let Some(&d @ b'0'..=b'7') = chars.peek() {
                        n = n * 8 + u32::from(d - b'0');
                        chars.next();
                    }
                }
                bytes.push(n as u8);
            }
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(other) => bytes.push(other),
            None => {}
        }
    }
    String::from_utf8(bytes).expect("UTF-8 string")
}

#[test]
fn text_format_reads_nesting_and_escapes() {
    let m = Message::parse("a: 1\nb {\n  c: \"x\\\"y\\303\\251\"\n}\nb {\n}\n");
    assert_eq!(m.int("a"), 1);
    assert_eq!(m.all("b").len(), 2);
    assert_eq!(m.all("b")[0].scalars("c"), ["x\"yé"]);
}
