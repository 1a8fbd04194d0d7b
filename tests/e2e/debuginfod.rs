//! Debug files from a debuginfod server: a real one (elfutils' `debuginfod`, on the loopback
//! interface) serves the debug information of a program whose copy under test is stripped;
//! with `DEBUGINFOD_URLS` naming it, hpcstruct-rs recovers the same lines, inlined code and
//! loops as from the unstripped program, and hpcprof-rs names the profile's lines; the file
//! lands in elfutils' cache layout. A server that does not answer is a note, not a failure.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{build_id, compile, run, run_ok, scratch_dir, tool_command};

/// A debuginfod server serving `dir`, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start elfutils' debuginfod on a free loopback port over `dir` and wait until it serves
/// `build_id`'s debug file; `None` where debuginfod is not installed (outside CI).
fn serve(dir: &Path, db: &Path, build_id: &str) -> Option<Server> {
    let installed = Command::new("debuginfod").arg("--version").output();
    if !installed.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "debuginfod is missing: scripts/test installs it"
        );
        eprintln!("skipped: no debuginfod (apt-get install debuginfod)");
        return None;
    }
    let port = free_port();
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(dir)
        .args(["-p", &port.to_string(), "-d"])
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // The server scans its directory before it serves: ask until the file is there.
    let wanted = format!("{}/buildid/{build_id}/debuginfo", server.url);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let got = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &wanted])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        if got.is_ok_and(|code| code == "200") {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("debuginfod did not serve {wanted} within a minute");
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// The fixture built with DWARF into directory `full` (created), and a copy stripped of it in
/// `dir`: (the full program, the stripped one), both named `ob`.
fn stripped_program(dir: &Path, full: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(full).unwrap();
    let program = compile("offcpu_block.c", full, "ob", &["-O2", "-g", "-pthread"]);
    let stripped = dir.join("ob");
    run_ok(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&program)
            .arg(&stripped),
    );
    (program, stripped)
}

/// hpcstruct-rs's structure of `binary`, with `env` set, its module's own names made alike.
fn structure(dir: &Path, binary: &Path, env: &[(&str, &Path)]) -> (String, String) {
    let out = dir.join("s.hs");
    let mut cmd = tool_command("hpcstruct-rs");
    cmd.arg(binary).arg("-o").arg(&out);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let result = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    assert!(result.status.success(), "{stderr}");
    let name = binary.file_name().unwrap().to_str().unwrap();
    let text = std::fs::read_to_string(&out)
        .unwrap()
        .replace(binary.to_str().unwrap(), "PROGRAM")
        .replace(&format!("[{name}]"), "[PROGRAM]");
    (text, stderr)
}

#[test]
fn a_stripped_program_gets_its_lines_and_inlined_code_from_a_debuginfod_server() {
    let dir = scratch_dir("debuginfod_server");
    let served = dir.join("served");
    let (full, stripped) = stripped_program(&dir, &served);
    let id = build_id(&stripped);
    assert_eq!(id, build_id(&full));
    let Some(server) = serve(&served, &dir.join("index.sqlite"), &id) else {
        return;
    };
    let cache = dir.join("cache");
    let urls = PathBuf::from(&server.url);
    let env = [
        ("DEBUGINFOD_URLS", urls.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];

    // Without the server: symbols only. With it: what the unstripped program gives.
    let (alone, _) = structure(&dir, &stripped, &[]);
    let (fetched, stderr) = structure(&dir, &stripped, &env);
    let (original, _) = structure(&dir, &full, &[]);
    assert!(
        !alone.contains("<A "),
        "the stripped program alone has no inlined code"
    );
    assert!(
        stderr.contains("debuginfod: fetching the debug file"),
        "{stderr}"
    );
    assert!(
        fetched.contains("<A "),
        "inlined code from the fetched file"
    );
    assert_eq!(fetched, original, "the structure of the unstripped program");
    assert!(
        cache.join(&id).join("debuginfo").is_file(),
        "elfutils' cache layout"
    );

    // hpcprof-rs: the profile of the stripped program has lines and inlined frames (from
    // the cache now: the server is stopped first).
    drop(server);
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "-o", "ob.db", "./ob"])
            .current_dir(&dir),
    );
    let mut prof = tool_command("hpcprof-rs");
    prof.arg("ob.db").current_dir(&dir);
    for (name, value) in &env {
        prof.env(name, value);
    }
    run_ok(&mut prof);
    let view = run_ok(
        tool_command("hpcview-rs")
            .args(["ob.hpcdb", "--threshold", "1"])
            .current_dir(&dir),
    );
    assert!(view.contains("loop at offcpu_block.c: 37"), "{view}");
    assert!(view.contains("[I] now"), "{view}");
}

/// A static HTTPS server (Python's `http.server` in an `ssl` context) over `argv[1]`, with
/// certificate `argv[2]` and key `argv[3]`, on a free loopback port it writes to `argv[4]`.
const HTTPS_SERVER: &str = r#"
import functools, http.server, ssl, sys
root, cert, key, port_file = sys.argv[1:5]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
handler.log_message = lambda *a: None
server = http.server.HTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
__import__("os").rename(port_file + ".tmp", port_file)
server.serve_forever()
"#;

/// A certificate authority and a certificate for `localhost` it signed, made by `openssl` in
/// `dir`: (the authority's PEM, the server's certificate, its key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| run_ok(Command::new("openssl").args(args).current_dir(dir));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=hpctoolkit-rs test authority",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// An `https://` server is spoken to over TLS and checked: with its authority trusted
/// (`SSL_CERT_FILE`), the stripped program gets the unstripped one's structure; with only the
/// system's authorities, the fetch is refused with a note and nothing is cached.
#[test]
fn an_https_server_is_used_when_its_certificate_is_trusted() {
    let dir = scratch_dir("debuginfod_https");
    let (full, stripped) = stripped_program(&dir, &dir.join("full"));
    let id = build_id(&stripped);
    let served = dir.join("served").join("buildid").join(&id);
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(&full, served.join("debuginfo")).unwrap();
    let (ca, cert, key) = certificates(&dir);
    let port_file = dir.join("port");
    let child = Command::new("python3")
        .args(["-c", HTTPS_SERVER])
        .arg(dir.join("served"))
        .args([&cert, &key, &port_file])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !port_file.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let port = std::fs::read_to_string(&port_file).expect("the server's port");
    let server = Server {
        child,
        url: format!("https://localhost:{port}"),
    };
    let urls = PathBuf::from(&server.url);
    let cache = dir.join("cache");
    let mut env = vec![
        ("DEBUGINFOD_URLS", urls.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];
    let (untrusted, stderr) = structure(&dir, &stripped, &env);
    assert!(!untrusted.contains("<A "), "{stderr}");
    assert!(stderr.contains("debuginfod: no debug file for"), "{stderr}");
    assert!(!cache.join(&id).join("debuginfo").exists());
    env.push(("SSL_CERT_FILE", ca.as_path()));
    let (fetched, stderr) = structure(&dir, &stripped, &env);
    let (original, _) = structure(&dir, &full, &[]);
    assert!(
        stderr.contains("debuginfod: fetching the debug file"),
        "{stderr}"
    );
    assert_eq!(fetched, original, "the structure of the unstripped program");
    assert!(cache.join(&id).join("debuginfo").is_file());
}

#[test]
fn a_server_that_does_not_answer_is_a_note() {
    let dir = scratch_dir("debuginfod_silent");
    let (_, stripped) = stripped_program(&dir, &dir.join("full"));
    // A port nothing listens on, a server whose name does not resolve, and one named by a
    // scheme no debuginfod client speaks.
    let port = free_port();
    let urls = PathBuf::from(format!(
        "http://127.0.0.1:{port} https://debuginfod.invalid ftp://debuginfod.invalid"
    ));
    let cache = dir.join("cache");
    let env = [
        ("DEBUGINFOD_URLS", urls.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];
    let (text, stderr) = structure(&dir, &stripped, &env);
    assert!(text.contains("<P "), "the symbols still give procedures");
    assert!(stderr.contains("debuginfod: no debug file for"), "{stderr}");
    assert!(
        stderr.contains("ftp://debuginfod.invalid not asked (http:// and https:// servers"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("debuginfod: no debug file for").count(),
        2,
        "{stderr}"
    );
    assert!(!cache.join(build_id(&stripped)).join("debuginfo").exists());
}

#[test]
fn a_program_missing_here_is_fetched_from_a_debuginfod_server() {
    let dir = scratch_dir("debuginfod_executable");
    let served = dir.join("served");
    let (full, stripped) = stripped_program(&dir, &served);
    let id = build_id(&full);
    // Measured, then gone from this machine (as on a login node without the build).
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "-o", "ob.db", "./ob"])
            .current_dir(&dir),
    );
    std::fs::remove_file(&stripped).unwrap();
    let Some(server) = serve(&served, &dir.join("index.sqlite"), &id) else {
        return;
    };
    let cache = dir.join("cache");
    let out = run(tool_command("hpcprof-rs")
        .arg("ob.db")
        .env("DEBUGINFOD_URLS", &server.url)
        .env("DEBUGINFOD_CACHE_PATH", &cache)
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("debuginfod: fetching the binary of"),
        "{stderr}"
    );
    assert!(
        cache.join(&id).join("executable").is_file(),
        "elfutils' cache layout"
    );
    let view = run_ok(
        tool_command("hpcview-rs")
            .args(["ob.hpcdb", "--threshold", "1"])
            .current_dir(&dir),
    );
    assert!(view.contains("loop at offcpu_block.c: 37"), "{view}");
    // Without a server, the binary is missing: nothing named.
    let out = run(tool_command("hpcprof-rs")
        .args(["ob.db", "-o", "bare.hpcdb"])
        .env_remove("DEBUGINFOD_URLS")
        .current_dir(&dir));
    assert!(out.status.success());
    let view = run_ok(tool_command("hpcview-rs").arg(dir.join("bare.hpcdb")));
    assert!(!view.contains("offcpu_block.c"), "{view}");
}
