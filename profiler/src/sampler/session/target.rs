//! The target of a measurement made ready: a command launched and held before its `exec`, or a
//! running process's threads found; where heap blocks will come from (the allocation shim or
//! uprobes on the allocator) and the watchpoints' plan.

use nix::unistd::Pid;

use super::{threads_of, Options, Target};
use crate::sampler::capture::event_plan::RunError;
use crate::sampler::capture::launch::{self, Blocked};
use crate::sampler::capture::ompt::RegionLog;
use crate::sampler::capture::{java, python};
use crate::sampler::data::alloc::AllocTracker;
use crate::sampler::data::tracking::{self, HeapSource};
use crate::sampler::data::uprobes::Probe;
use crate::sampler::record::recorder::Recorder;
use crate::sampler::watch::{WatchPlan, Watcher};

/// Where the live heap blocks of a `--data` run come from.
#[derive(Default)]
pub(super) struct Heap {
    /// The allocation shim's rings (a launched, dynamically linked command).
    pub(super) tracker: Option<AllocTracker>,
    /// Uprobes on the allocator (a static command, or a process attached to).
    pub(super) probes: Vec<Probe>,
    /// Why neither is available, for the summary.
    pub(super) unavailable: Option<String>,
}

/// A target ready to be measured.
pub(super) struct Prepared {
    /// The launched command, held before its `exec` (none when attaching).
    child: Option<Blocked>,
    /// The threads to open per-task events on: the child, or every thread attached to.
    pub(super) tasks: Vec<i32>,
    /// The command line, for the profile.
    pub(super) command: Vec<String>,
    /// Where heap blocks come from (`--data`).
    pub(super) heap: Heap,
    /// The watchpoints' plan (`--watch`).
    watch_plan: Option<WatchPlan>,
    /// The process attached to (none when launching).
    attached: Option<u32>,
    /// Where the command's OpenMP tool writes (a launched command, where the tool is found).
    pub(super) regions: Option<RegionLog>,
}

impl Prepared {
    /// Launch or find the target of `opts`; `data`: heap blocks are wanted.
    pub(super) fn new(opts: &Options, data: bool) -> Result<Prepared, RunError> {
        match &opts.target {
            Target::Launch(argv) => launched(argv, opts, data),
            Target::Attach(pid) => attached(*pid, opts, data),
        }
    }

    /// Whether the target is a command we launched (its events then start at `exec`).
    pub(super) fn launched(&self) -> bool {
        self.child.is_some()
    }

    /// `result`, and on failure the held command killed: nothing of the run is left behind.
    pub(super) fn or_abandon<T>(&mut self, result: Result<T, RunError>) -> Result<T, RunError> {
        if result.is_err() {
            if let Some(c) = self.child.take() {
                c.abandon();
            }
        }
        result
    }

    /// Let the launched command go (its watchpoints placed first, at its `exec`), or adopt the
    /// process attached to; returns the child's pid and the watcher.
    pub(super) fn release(
        &mut self,
        cpus: &[i32],
        recorder: &mut Recorder,
    ) -> Result<(Option<Pid>, Option<Watcher>), RunError> {
        let name = self.command.first().cloned().unwrap_or_default();
        match (self.child.take(), self.watch_plan.take()) {
            (Some(c), Some(plan)) => {
                let start = |pid: Pid| Watcher::start(pid.as_raw(), plan, cpus);
                let (pid, w) = c.release_stopped(&name, start)?.map_err(RunError::System)?;
                Ok((Some(pid), Some(w)))
            }
            (Some(c), None) => Ok((Some(c.release(&name)?), None)),
            (None, _) => {
                if let Some(pid) = self.attached {
                    recorder.adopt_process(pid);
                }
                Ok((None, None))
            }
        }
    }
}

/// A command launched and held before its `exec`, with the shim in its environment when heap
/// blocks are tracked that way.
fn launched(argv: &[std::ffi::OsString], opts: &Options, data: bool) -> Result<Prepared, RunError> {
    let program = launch::resolve(&argv[0])?;
    let mut watch_plan = match &opts.watch {
        Some(request) => Some(WatchPlan::new(&program, request.clone()).map_err(RunError::Event)?),
        None => None,
    };
    let mut heap = Heap::default();
    if data {
        match tracking::heap_tracking(argv, &program, opts.alloc_min) {
            Ok(HeapSource::Shim(t)) => heap.tracker = Some(t),
            Ok(HeapSource::Probes(p)) => heap.probes = p,
            Err(why) => heap.unavailable = Some(why),
        }
        if heap.unavailable.is_none() {
            watch_plan = watch_plan.map(|p| p.with_heap_targets(opts.alloc_min));
        }
    }
    let regions = RegionLog::new();
    let (mut env, mut keep) = match &heap.tracker {
        Some(t) => (t.child_env(), t.fds_to_keep().to_vec()),
        None => (Vec::new(), Vec::new()),
    };
    env.extend(opts.python.then(python::perf_support_env).flatten());
    env.extend(opts.java.then(java::tool_options_env));
    if let Some(log) = &regions {
        env.extend(log.child_env());
        keep.push(log.fd_to_keep());
    }
    let blocked = match watch_plan.is_some() {
        true => launch::spawn_blocked_stopping(argv, &env, &keep)?,
        false => launch::spawn_blocked_with(argv, &env, &keep)?,
    };
    Ok(Prepared {
        tasks: vec![blocked.pid.as_raw()],
        child: Some(blocked),
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        heap,
        watch_plan,
        attached: None,
        regions,
    })
}

/// A running process: its threads, its command line, and uprobes on its allocator.
fn attached(pid: u32, opts: &Options, data: bool) -> Result<Prepared, RunError> {
    if opts.watch.is_some() {
        return Err(RunError::Event(
            "--watch needs a command to run, not -p (the watchpoints are placed at its start)"
                .into(),
        ));
    }
    let mut heap = Heap::default();
    if data {
        match tracking::heap_tracking_attached(pid) {
            Ok(p) => heap.probes = p,
            Err(why) => heap.unavailable = Some(why),
        }
    }
    let tasks = threads_of(pid);
    if tasks.is_empty() {
        return Err(RunError::System(format!("process {pid} does not exist")));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let command = (cmdline.split(|&b| b == 0))
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Ok(Prepared {
        child: None,
        tasks,
        command,
        heap,
        watch_plan: None,
        attached: Some(pid),
        regions: None,
    })
}
