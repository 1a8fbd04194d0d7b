//! The allocation shim (`libhpcrun_alloc.so`) and `profiler::alloc::AllocTracker` on a real
//! program: three threads, every allocation function, a fork, blocks on both sides of the
//! threshold. The records must match the program's own counts exactly, per process, thread,
//! calling function and op, with nothing lost, in time order, each allocation with a stack
//! copy that starts at the return address.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::symbols::SymbolTable;
use crate::support::{compile, scratch_dir, tool};
use profiler::alloc::{AllocEvent, AllocOp, AllocTracker};
use profiler::launch::{self, ChildState, Ended};

/// Drain everything stamped up to the present (`drain` caps a cutoff at the present and at any
/// call in progress); `u64::MAX` is reserved for the final drain.
const UP_TO_NOW: u64 = u64::MAX - 1;

/// Run `exe args` under the shim until it ends; its records in drain order, and the tracker.
fn trace(exe: &Path, args: &[&str], min_size: u64) -> (Vec<AllocEvent>, AllocTracker, Ended) {
    // Builds the workspace, the shim with it, beside the test binaries' profile directory
    // (where `AllocTracker` finds it).
    tool("hpcrun-rs");
    let mut tracker = AllocTracker::new(min_size, 8192).expect("tracker");
    let mut argv: Vec<OsString> = vec![exe.into()];
    argv.extend(args.iter().map(OsString::from));
    let blocked = launch::spawn_blocked_with(&argv, &tracker.child_env(), &tracker.fds_to_keep())
        .expect("spawn");
    let pid = blocked.release(&exe.to_string_lossy()).expect("exec");
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let ended = loop {
        wait_readable(&tracker, Duration::from_millis(20));
        tracker.drain(UP_TO_NOW, &mut events);
        if let ChildState::Ended(ended) = launch::poll_child(pid) {
            break ended;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not finish",
            exe.display()
        );
    };
    tracker.drain(u64::MAX, &mut events);
    (events, tracker, ended)
}

/// Wait until the tracker's socket is readable (a new ring, a ring half full) or `timeout`.
fn wait_readable(tracker: &AllocTracker, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd: tracker.poll_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
}

fn fixture_exe(dir: &Path) -> PathBuf {
    // Non-PIE: runtime addresses are the symbol table's.
    compile(
        "alloc_threads.c",
        dir,
        "alloc_threads",
        &["-O2", "-g", "-no-pie", "-fomit-frame-pointer", "-pthread"],
    )
}

type Key = (u32, u32, String, &'static str);

fn op_name(op: AllocOp) -> &'static str {
    match op {
        AllocOp::Alloc => "alloc",
        AllocOp::Free => "free",
        AllocOp::Realloc => "realloc",
    }
}

/// The program's own counts: "PID TID FUNCTION OP COUNT" lines.
fn program_counts(path: &Path) -> BTreeMap<Key, u64> {
    let text = std::fs::read_to_string(path).expect("counts written");
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let op = match f[3] {
                "alloc" => "alloc",
                "free" => "free",
                _ => "realloc",
            };
            let key = (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
                op,
            );
            (key, f[4].parse().unwrap())
        })
        .collect()
}

#[test]
fn shim_records_match_the_programs_own_counts_per_thread_path_and_op() {
    let dir = scratch_dir("alloc-shim-counts");
    let exe = fixture_exe(&dir);
    let counts_file = dir.join("counts.txt");
    let (events, tracker, ended) = trace(&exe, &[counts_file.to_str().unwrap()], 4096);
    assert_eq!(ended, Ended::Exited(0));
    assert_eq!(tracker.lost(), 0, "records lost");
    let expected = program_counts(&counts_file);
    assert_eq!(
        expected.len(),
        11,
        "the fixture reports 11 counts: {expected:?}"
    );

    let symbols = SymbolTable::read(exe.to_str().unwrap());
    let mut seen: BTreeMap<Key, u64> = BTreeMap::new();
    for e in &events {
        // A return address is looked up at ra - 1 (it may be the first byte after the call).
        let Some(function) = symbols.lookup(e.ip - 1) else {
            continue; // a call from a library (stdio's buffers): not the program's own
        };
        *seen
            .entry((e.pid, e.tid, function.to_string(), op_name(e.op)))
            .or_default() += 1;
    }
    assert_eq!(seen, expected);

    // Threads: the main thread, its two workers and the forked child each announced a ring.
    let pids: Vec<u32> = expected.keys().map(|k| k.0).collect();
    let child_pid = *pids.iter().max().unwrap();
    assert_ne!(pids[0], child_pid, "the fork's child has its own pid");
    for (pid, tid, _, _) in expected.keys() {
        assert!(
            tracker.threads().contains(&(*pid, *tid)),
            "no ring for {pid}/{tid}"
        );
    }
}

#[test]
fn shim_records_are_in_time_order_with_the_callers_stack_from_the_return_address() {
    let dir = scratch_dir("alloc-shim-order");
    let exe = fixture_exe(&dir);
    let counts_file = dir.join("counts.txt");
    let (events, tracker, _) = trace(&exe, &[counts_file.to_str().unwrap()], 4096);
    assert_eq!(tracker.lost(), 0);
    assert!(events.len() > 90_000, "{} records", events.len());
    let symbols = SymbolTable::read(exe.to_str().unwrap());
    let own = ["work_a", "work_b", "work_c", "child_work", "variety"];
    let mut last = 0;
    for e in &events {
        assert!(e.t_entry <= e.t_return, "{e:?}");
        assert!(e.t_return >= last, "out of time order: {e:?} after {last}");
        last = e.t_return;
        let caller = symbols.lookup(e.ip - 1);
        if e.op == AllocOp::Free {
            assert!(e.stack.is_empty());
            continue;
        }
        assert!(
            e.ptr != 0 && e.size >= 4096 || e.op == AllocOp::Realloc,
            "{e:?}"
        );
        if caller.is_some_and(|c| own.contains(&c)) {
            // The copy starts at the allocator's entry sp, where the return address lies,
            // and reaches the caller's frame.
            assert!(
                e.stack.len() >= 64 && e.stack.len() <= 8192,
                "{} bytes",
                e.stack.len()
            );
            let ra = u64::from_le_bytes(e.stack[..8].try_into().unwrap());
            assert_eq!(ra, e.ip, "{e:?}");
            assert_eq!(e.sp % 8, 0);
        }
    }
}

#[test]
fn shim_with_threshold_zero_records_the_small_blocks_too() {
    let dir = scratch_dir("alloc-shim-all");
    let exe = fixture_exe(&dir);
    let counts_file = dir.join("counts.txt");
    let (events, tracker, ended) = trace(&exe, &[counts_file.to_str().unwrap()], 0);
    assert_eq!(ended, Ended::Exited(0));
    assert_eq!(tracker.lost(), 0);
    let symbols = SymbolTable::read(exe.to_str().unwrap());
    let in_work_b = |op| {
        events
            .iter()
            .filter(|e| e.op == op && symbols.lookup(e.ip - 1) == Some("work_b"))
            .count()
    };
    // Each iteration: one large and one small block, both freed.
    assert_eq!(
        (in_work_b(AllocOp::Alloc), in_work_b(AllocOp::Free)),
        (60_000, 60_000)
    );
}
