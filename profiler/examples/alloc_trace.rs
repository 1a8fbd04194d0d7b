//! Run a command under the allocation shim and summarise what it recorded: records per process,
//! thread and op, bytes allocated, records lost. For measuring the shim's cost and checking it
//! by hand before `hpcrun-rs --data` uses it.
//!
//! ```text
//! cargo build --release -p hpcrun-alloc --example alloc_trace
//! target/release/examples/alloc_trace [--min BYTES] [--stack BYTES] [--quiet] -- COMMAND ARGS...
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;

use profiler::alloc::{AllocEvent, AllocOp, AllocTracker};
use profiler::launch::{self, ChildState};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (mut min, mut stack, mut quiet) = (4096u64, 8192u32, false);
    let mut command: Vec<OsString> = Vec::new();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--min") => min = number(args.next()),
            Some("--stack") => stack = number(args.next()) as u32,
            Some("--quiet") => quiet = true,
            Some("--") => {
                command.extend(args.by_ref());
            }
            _ => command.push(arg),
        }
    }
    if command.is_empty() {
        eprintln!("usage: alloc_trace [--min BYTES] [--stack BYTES] [--quiet] -- COMMAND ARGS...");
        std::process::exit(2);
    }
    let mut tracker = AllocTracker::new(min, stack).unwrap_or_else(|e| fail(&e));
    let blocked =
        launch::spawn_blocked_with(&command, &tracker.child_env(), &tracker.fds_to_keep())
            .unwrap_or_else(|e| fail(&e));
    let name = command[0].to_string_lossy().into_owned();
    let pid = blocked.release(&name).unwrap_or_else(|e| fail(&e));
    let mut summary = Summary::default();
    let mut batch = Vec::new();
    let ended = loop {
        let mut pfd = libc::pollfd {
            fd: tracker.poll_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 10) };
        // u64::MAX - 1: everything up to the present (drain caps it there).
        tracker.drain(u64::MAX - 1, &mut batch);
        summary.add(&mut batch);
        if let ChildState::Ended(ended) = launch::poll_child(pid) {
            break ended;
        }
    };
    tracker.drain(u64::MAX, &mut batch);
    summary.add(&mut batch);
    if !quiet {
        for ((pid, tid, op), (count, bytes)) in &summary.per_thread {
            eprintln!("alloc_trace: {pid}/{tid} {op:?}: {count} records, {bytes} bytes");
        }
    }
    eprintln!(
        "alloc_trace: {} records, {} threads, {} lost, {} out of time order; cpu s: command {:.3}, reader {:.3}",
        summary.records,
        tracker.threads().len(),
        tracker.lost(),
        summary.disordered,
        cpu_seconds(libc::RUSAGE_CHILDREN),
        cpu_seconds(libc::RUSAGE_SELF),
    );
    std::process::exit(ended.exit_status());
}

#[derive(Default)]
struct Summary {
    per_thread: BTreeMap<(u32, u32, AllocOp), (u64, u64)>,
    records: u64,
    last: u64,
    disordered: u64,
}

impl Summary {
    fn add(&mut self, batch: &mut Vec<AllocEvent>) {
        for e in batch.drain(..) {
            let entry = self.per_thread.entry((e.pid, e.tid, e.op)).or_default();
            entry.0 += 1;
            entry.1 += if e.op == AllocOp::Free { 0 } else { e.size };
            self.records += 1;
            self.disordered += u64::from(e.t_return < self.last);
            self.last = e.t_return;
        }
    }
}

/// User + system CPU seconds of `who` (the reaped command, or this reader).
fn cpu_seconds(who: i32) -> f64 {
    // SAFETY: getrusage fills the struct.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(who, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn number(arg: Option<OsString>) -> u64 {
    arg.and_then(|a| a.to_str()?.parse().ok())
        .unwrap_or_else(|| fail(&"--min and --stack take a number of bytes"))
}

fn fail(e: &dyn std::fmt::Display) -> ! {
    eprintln!("alloc_trace: {e}");
    std::process::exit(1);
}
