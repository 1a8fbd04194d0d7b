//! End-to-end tests of what `hpcrun-rs` does around a measurement: several runs sharing one
//! output name, a command that stops itself, a process that does not exist, inputs that are
//! not regular files.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{compile, run, scratch_dir, tool, tool_command};
use profiler::db::Profile;

/// The path after "profile written to " in a run's summary.
fn written_to(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("profile written to "))
}

#[test]
fn concurrent_runs_with_one_output_keep_every_profile() {
    let dir = scratch_dir("hpcrun-output-concurrent");
    let spin = compile("run_spin.c", &dir, "run_spin", &["-O1", "-g"]);
    std::fs::write(dir.join("profile.db"), b"an old profile").unwrap();
    let runs: Vec<Child> = (0..8)
        .map(|_| {
            tool_command("hpcrun-rs")
                .args(["-e", "cpu-clock@f1000"])
                .arg(&spin)
                .arg("30000000")
                .current_dir(&dir)
                .stderr(Stdio::piped())
                .spawn()
                .expect("start hpcrun-rs")
        })
        .collect();
    let mut places = std::collections::BTreeSet::new();
    for child in runs {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let place = written_to(&stderr).unwrap_or_else(|| panic!("no place named:\n{stderr}"));
        let profile = Profile::read(&dir.join(place)).unwrap_or_else(|e| panic!("{e}"));
        assert!(profile.stats.samples > 0, "{place}: no samples");
        if place != "profile.db" {
            assert!(
                stderr.contains("another run wrote profile.db meanwhile"),
                "{stderr}"
            );
        }
        assert!(places.insert(place.to_string()), "{place} named twice");
    }
    assert_eq!(places.len(), 8, "{places:?}");
    assert!(places.contains("profile.db"), "{places:?}");
    let old = std::fs::read(dir.join("profile.db.old")).unwrap();
    assert_eq!(old, b"an old profile", "the old profile is kept, once");
}

#[test]
fn a_command_that_stops_itself_is_announced_and_resumes_on_sigcont() {
    let dir = scratch_dir("hpcrun-output-sigstop");
    let mut child = tool_command("hpcrun-rs")
        .args(["-q", "-e", "cpu-clock", "-o"])
        .arg(dir.join("p.db"))
        .args(["/bin/sh", "-c", "kill -STOP $$; exit 3"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Were the stop not announced, nobody would resume the command: end hpcrun-rs after 30 s.
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let hpcrun_pid = child.id().to_string();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = Command::new("kill").args(["-KILL", &hpcrun_pid]).status();
        }
    });
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let notice = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = done.send(());
    watchdog.join().unwrap();
    assert!(
        notice.contains("the command stopped itself (SIGSTOP); hpcrun-rs waits; send SIGCONT to"),
        "{notice}"
    );
    let pid: i32 = notice
        .split("kill -CONT ")
        .nth(1)
        .and_then(|p| p.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {notice}"));
    let sent = run(Command::new("kill").args(["-CONT", &pid.to_string()]));
    assert!(sent.status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert!(
        rest.iter().all(|l| !l.contains("stopped")),
        "said once: {rest:?}"
    );
    assert!(Profile::read(&dir.join("p.db")).is_ok());
}

#[test]
fn attaching_to_a_missing_process_fails_without_announcing_sampling() {
    let dir = scratch_dir("hpcrun-output-no-pid");
    let out = run(tool_command("hpcrun-rs")
        .arg("-o")
        .arg(dir.join("p.db"))
        .args(["-p", "999999999"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("process 999999999 does not exist"),
        "{stderr}"
    );
    assert!(!stderr.contains("sampling process"), "{stderr}");
    assert!(!dir.join("p.db").exists());
}

/// Wait for `child` at most 20 s (killing it then): its stderr and status code.
fn within_deadline(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after 20 s: blocked on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mkfifo(path: &Path) {
    let made = run(Command::new("mkfifo").arg(path));
    assert!(made.status.success());
}

#[test]
fn fifos_given_as_inputs_are_refused_without_blocking() {
    let dir = scratch_dir("hpcrun-output-fifo");
    let fifo = dir.join("profile.db");
    mkfifo(&fifo);
    let spawn = |tool_name: &str, args: &[&str]| {
        Command::new(tool(tool_name))
            .args(args)
            .arg(&fifo)
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for (name, args) in [("hpcrun-rs", &["--show"][..]), ("hpcprof-rs", &[][..])] {
        let (code, stderr) = within_deadline(spawn(name, args));
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("profile.db: not a regular file"),
            "{name}: {stderr}"
        );
    }
}
