//! One measurement from start to finish: open the events, run (or attach to) the target, drain
//! the rings until it ends, and hand back the recording.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::format::db::{EventDesc, Sampling};
use crate::format::watchdb::WatchProfile;
use crate::sampler::capture::event_plan::plan;
pub use crate::sampler::capture::event_plan::RunError;
use crate::sampler::capture::events::{DataSource, EventClass, EventSpec};
use crate::sampler::capture::launch::{self, ChildState, Ended};
use crate::sampler::capture::perf::{self, AttrOptions};
use crate::sampler::capture::pmu::MemOp;
use crate::sampler::capture::ring::Copier;
use crate::sampler::capture::signals::SignalPipe;
use crate::sampler::data::alloc::AllocTracker;
use crate::sampler::data::sample::SampleLayout;
use crate::sampler::open_events::{default_ring_pages, OpenEvents};
use crate::sampler::record::recorder::{EventLayout, PreciseLayout, Recorder, Recording};
use crate::sampler::results::report::Notice;
use crate::sampler::streams::{self, HeapSource};
use crate::sampler::watch::{WatchPlan, WatchRequest, Watcher};

/// What to measure.
#[derive(Debug, Clone)]
pub enum Target {
    /// Run this command line.
    Launch(Vec<OsString>),
    /// Attach to this running process (all its threads).
    Attach(u32),
}

/// How to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events requested, in order (metric order in the profile).
    pub events: Vec<EventSpec>,
    /// Bytes of user stack copied per sample.
    pub stack_size: u32,
    /// Data pages per ring (a power of two); `None` picks by privilege.
    pub ring_pages: Option<usize>,
    /// What to measure.
    pub target: Target,
    /// `--data`: resolve a data address with every sample that can have one.
    pub data: bool,
    /// `--data`: the smallest heap block whose allocation and free are tracked.
    pub alloc_min: u64,
    /// `-t`: trace every sample of the first event in at most this many bytes.
    pub trace: Option<usize>,
    /// Where notices go that cannot wait for the end of the run ([`Notice`]).
    pub notify: fn(Notice),
    /// `--watch`: hardware watchpoints for producer/consumer bindings ([`crate::sampler::watch`]).
    pub watch: Option<WatchRequest>,
}

/// A finished measurement.
pub struct Measurement {
    /// What was recorded.
    pub recording: Recording,
    /// Events as actually opened.
    pub events: Vec<EventDesc>,
    /// Whether kernel mode was sampled.
    pub kernel: bool,
    /// One-line notices for the user (fallbacks, reduced rings).
    pub notices: Vec<String>,
    /// How the command ended (launch mode).
    pub ended: Option<Ended>,
    /// Wall-clock start and end, ns since the epoch.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Wall time of the measurement.
    pub duration: Duration,
    /// Command line of the target.
    pub command: Vec<String>,
    /// CPU seconds (user + system) the attached process used while it was measured (attach
    /// mode; a launched command's are its rusage).
    pub attached_cpu: Option<f64>,
    /// What the watchpoints saw (`--watch`).
    pub watch: WatchProfile,
}

/// Data pages per ring (8 MiB) when allocator probes write into the rings.
const PROBE_RING_PAGES: usize = 2048;

/// At paranoid <= 2 the kernel lets users profile their own processes: a permission refusal to
/// attach then means the process is not ours to trace, whatever the generic explanation says.
fn explain_for_target(e: RunError, target: &Target) -> RunError {
    match (e, target) {
        (RunError::Permission(_), Target::Attach(pid))
            if perf::kernel_setting("perf_event_paranoid") <= Some(2) =>
        {
            RunError::Permission(format!(
                "permission denied attaching to process {pid}: it belongs to another user or \
                 cannot be traced; run hpcrun-rs as its owner or as root"
            ))
        }
        (e, _) => e,
    }
}

/// Ns since the Unix epoch.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Threads of a running process, from `/proc/PID/task`.
fn threads_of(pid: u32) -> Vec<i32> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

/// How the samples of `spec` are read when it is a precise memory event.
fn precise_layout(spec: &EventSpec, opts: &AttrOptions) -> Option<PreciseLayout> {
    let EventClass::Memory(op) = spec.event.class else {
        return None;
    };
    let keep = crate::sampler::capture::pmu::machine()
        .and_then(|u| u.events(op).ok()?.first().map(|e| e.keep))
        .unwrap_or(MemOp::Both);
    Some(PreciseLayout {
        fields: SampleLayout::of(&perf::attr(spec, opts, false)),
        keep,
    })
}

/// Run one measurement. Precise memory events (`-e mem`) imply `--data`: their samples are
/// data addresses.
pub fn run(opts: &Options) -> Result<Measurement, RunError> {
    let data = opts.data
        || opts
            .events
            .iter()
            .any(|e| matches!(e.event.class, EventClass::Memory(_)));
    let cpus = perf::online_cpus();
    let signals = SignalPipe::install().map_err(|e| RunError::System(e.to_string()))?;
    let mut tracker = None;
    let mut probes = Vec::new();
    let mut heap_unavailable = None;
    let mut watch_plan = None;
    let (child, tasks, command) = match &opts.target {
        Target::Launch(argv) => {
            let program = launch::resolve(&argv[0])?;
            if let Some(request) = &opts.watch {
                watch_plan =
                    Some(WatchPlan::new(&program, request.clone()).map_err(RunError::Event)?);
            }
            if data {
                match streams::heap_tracking(argv, &program, opts.alloc_min) {
                    Ok(HeapSource::Shim(t)) => tracker = Some(t),
                    Ok(HeapSource::Probes(p)) => probes = p,
                    Err(why) => heap_unavailable = Some(why),
                }
                if heap_unavailable.is_none() {
                    watch_plan = watch_plan.map(|p| p.with_heap_targets(opts.alloc_min));
                }
            }
            let (env, keep) = match &tracker {
                Some(t) => (t.child_env(), t.fds_to_keep().to_vec()),
                None => (Vec::new(), Vec::new()),
            };
            let blocked = match watch_plan.is_some() {
                true => launch::spawn_blocked_stopping(argv, &env, &keep)?,
                false => launch::spawn_blocked_with(argv, &env, &keep)?,
            };
            let pid = blocked.pid.as_raw();
            (
                Some(blocked),
                vec![pid],
                argv.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            )
        }
        Target::Attach(pid) => {
            if opts.watch.is_some() {
                return Err(RunError::Event(
                    "--watch needs a command to run, not -p (the watchpoints are placed at its \
                     start)"
                        .into(),
                ));
            }
            if data {
                match streams::heap_tracking_attached(*pid) {
                    Ok(p) => probes = p,
                    Err(why) => heap_unavailable = Some(why),
                }
            }
            let tasks = threads_of(*pid);
            if tasks.is_empty() {
                return Err(RunError::System(format!("process {pid} does not exist")));
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let command: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (None, tasks, command)
        }
    };
    // Allocator probes on a program allocating as fast as it can fill a ring with an 8 KiB stack
    // copy per call every few µs: give the reader longer to come (measured on this project's
    // VM, 200,000 malloc+free pairs: 250-3900 records lost with 2 MiB per CPU, none with 8).
    let pages = opts.ring_pages.unwrap_or_else(|| match probes.is_empty() {
        true => default_ring_pages(cpus.len()),
        false => default_ring_pages(cpus.len()).max(PROBE_RING_PAGES),
    });
    let setup = (|| {
        let mut attr_opts = AttrOptions {
            stack_size: opts.stack_size,
            kernel: true,
            enable_on_exec: true,
            data,
            precise: Default::default(),
        };
        let plan = plan(&opts.events, tasks[0], cpus[0], attr_opts)?;
        let mut notices = plan.notices.clone();
        attr_opts.kernel = plan.kernel;
        attr_opts.precise = plan.precise;
        attr_opts.enable_on_exec = child.is_some();
        let mut open = OpenEvents::new(attr_opts, pages);
        open.add_tasks(&plan, &tasks, &cpus)?;
        if let Target::Attach(pid) = opts.target {
            // Threads created while the first events were being opened are not covered by
            // their inheritance: open theirs too, until the thread list is stable.
            let mut known = tasks.clone();
            loop {
                let new: Vec<i32> = threads_of(pid)
                    .into_iter()
                    .filter(|t| !known.contains(t))
                    .collect();
                if new.is_empty() {
                    break;
                }
                open.add_tasks(&plan, &new, &cpus)?;
                known.extend(new);
            }
        }
        if open.pages < pages && opts.ring_pages.is_some() {
            notices.push(format!(
                "sample buffers reduced to {} KiB per CPU by the locked-memory limit",
                open.pages * 4
            ));
        }
        Ok::<_, RunError>((plan, open, notices))
    })();
    let (plan, mut open, notices) = match setup {
        Ok(s) => s,
        Err(e) => {
            if let Some(c) = child {
                c.abandon();
            }
            return Err(explain_for_target(e, &opts.target));
        }
    };
    let probe_ids = match open.add_probes(&probes, &tasks, &cpus) {
        Ok(ids) => ids,
        Err(e) => {
            heap_unavailable = Some(format!("the allocator's uprobes could not be opened ({e})"));
            Vec::new()
        }
    };
    let mut recorder = Recorder::new(
        plan.specs
            .iter()
            .map(|(spec, _)| EventLayout {
                parse_info: perf::parse_info(&perf::attr(spec, &open.opts, false)),
                fixed_period: match spec.sampling {
                    Sampling::Period(p) => Some(p),
                    Sampling::Frequency(_) => None,
                },
                data: if data {
                    spec.event.data_source()
                } else {
                    DataSource::None
                },
                precise: precise_layout(spec, &open.opts),
            })
            .collect(),
        open.event_of_id.clone(),
    );
    recorder.add_probes(probe_ids, opts.alloc_min);
    if let Some(budget) = opts.trace {
        recorder.trace(budget);
    }
    // Copies the rings out as soon as they wake it, from before the command starts (a short
    // program's fault burst fills a ring in a millisecond), while the reader unwinds; stopped
    // before the last drain.
    let copier = match Copier::start(&open.rings) {
        Ok(c) => c,
        Err(e) => {
            if let Some(c) = child {
                c.abandon();
            }
            return Err(RunError::System(format!(
                "cannot start the thread that empties the sample buffers: {e}"
            )));
        }
    };
    // The command exists by now, stopped (and its children reset to the ordinary policy
    // anyway); the copier thread exists too, so the reader's nice value is its own.
    if !crate::sampler::capture::priority::set_realtime(crate::sampler::capture::priority::READER) {
        crate::sampler::capture::priority::yield_to_copier();
    }
    let start_ns = now_ns();
    let started = Instant::now();
    let mut watcher = None;
    let child_pid = match (child, watch_plan) {
        (Some(c), Some(plan)) => {
            let name = command.first().cloned().unwrap_or_default();
            let start = |pid: Pid| Watcher::start(pid.as_raw(), plan, &cpus);
            let (pid, w) = c.release_stopped(&name, start)?.map_err(RunError::System)?;
            watcher = Some(w);
            Some(pid)
        }
        (Some(c), None) => {
            let name = command.first().cloned().unwrap_or_default();
            Some(c.release(&name)?)
        }
        (None, _) => {
            if let Target::Attach(pid) = opts.target {
                recorder.adopt_process(pid);
            }
            None
        }
    };
    let mut attached_cpu = AttachedCpu::default();
    if let Target::Attach(pid) = opts.target {
        (opts.notify)(Notice::Attached(pid));
    }
    let ended = record_loop(
        &mut open,
        copier,
        &mut recorder,
        tracker.as_mut(),
        &signals,
        child_pid,
        opts.notify,
        &tasks,
        &mut attached_cpu,
        watcher.as_mut(),
    );
    recorder.heap_tracking(heap_unavailable, tracker.as_ref().map_or(0, |t| t.lost()));
    Ok(Measurement {
        recording: recorder.finish(),
        events: plan
            .specs
            .iter()
            .map(|(s, replaced)| s.describe(replaced.as_deref()))
            .collect(),
        kernel: plan.kernel,
        notices,
        ended,
        start_ns,
        end_ns: now_ns(),
        duration: started.elapsed(),
        command,
        attached_cpu: attached_cpu.used(),
        watch: watcher.map(Watcher::finish).unwrap_or_default(),
    })
}

/// The CPU time of a process that is not our child, followed from `/proc/PID/stat`: read when
/// sampling starts and at every wake-up while the process lives, since it leaves no rusage
/// behind for us when it exits.
#[derive(Default)]
struct AttachedCpu {
    first: Option<f64>,
    last: Option<f64>,
}

impl AttachedCpu {
    fn update(&mut self, pid: i32) {
        if let Some(now) = process_cpu_seconds(pid) {
            self.first.get_or_insert(now);
            self.last = Some(now);
        }
    }

    fn used(&self) -> Option<f64> {
        Some(self.last? - self.first?)
    }
}

/// User + system CPU seconds of process `pid`, all its threads (fields 14 and 15 of
/// `/proc/PID/stat`, counted after the parenthesised command name, which may hold spaces).
fn process_cpu_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&hz| hz > 0)?;
    Some(ticks as f64 / hz as f64)
}

/// Drain the rings until the child ends (launch), or the process ends or Ctrl-C (attach).
#[allow(clippy::too_many_arguments)]
fn record_loop(
    open: &mut OpenEvents,
    copier: Copier,
    recorder: &mut Recorder,
    mut tracker: Option<&mut AllocTracker>,
    signals: &SignalPipe,
    child: Option<Pid>,
    notify: fn(Notice),
    tasks: &[i32],
    attached_cpu: &mut AttachedCpu,
    mut watcher: Option<&mut Watcher>,
) -> Option<Ended> {
    if child.is_none() {
        attached_cpu.update(tasks[0]);
        open.fds().for_each(|fd| perf::set_enabled(fd, true));
    }
    // Readable when the child exits, so the end of the run is noticed at once.
    let exit_fd = child.and_then(launch::exit_fd);
    let ended = loop {
        {
            // The copier alone polls the rings; it says when it has copied something.
            let mut fds: Vec<PollFd> = vec![
                PollFd::new(signals.fd().as_fd(), PollFlags::POLLIN),
                PollFd::new(copier.notices().as_fd(), PollFlags::POLLIN),
            ];
            fds.extend(
                exit_fd
                    .iter()
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
            fds.extend(
                tracker
                    .as_ref()
                    .map(|t| PollFd::new(t.poll_fd(), PollFlags::POLLIN)),
            );
            fds.extend(
                (watcher.iter())
                    .flat_map(|w| w.poll_fds())
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
            let wait = watcher.as_ref().map_or(50, |w| w.sleep_ms().min(50));
            let _ = poll(&mut fds, PollTimeout::from(wait));
            copier.take_notices();
        }
        let mut stop = false;
        for sig in signals.take() {
            match child {
                Some(pid) if sig.from_process => {
                    let _ = kill(pid, sig.signal);
                }
                Some(_) => {}
                // Attached: any request to end stops sampling (a SIGPIPE is only our own
                // write to a closed pipe).
                None => stop |= sig.signal != nix::sys::signal::Signal::SIGPIPE,
            }
        }
        copier.flush();
        streams::drain(&mut open.rings, tracker.as_deref_mut(), recorder, false);
        if let Some(w) = watcher.as_deref_mut() {
            w.tick(recorder);
        }
        match child {
            Some(pid) => match launch::poll_child(pid) {
                ChildState::Ended(ended) => break Some(ended),
                ChildState::Stopped(sig) => notify(Notice::Stopped(pid.as_raw() as u32, sig)),
                ChildState::Running => {}
            },
            None => {
                attached_cpu.update(tasks[0]);
                let gone = kill(Pid::from_raw(tasks[0]), None).is_err();
                if stop || gone || copier.all_hung() {
                    break None;
                }
            }
        }
    };
    open.fds().for_each(|fd| perf::set_enabled(fd, false));
    drop(copier);
    streams::drain(&mut open.rings, tracker, recorder, true);
    ended
}

/// Assemble the `profile.db` contents from a finished measurement.
pub fn into_profile(m: Measurement) -> crate::format::db::Profile {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::format::db::Profile {
        command: m.command,
        host,
        start_ns: m.start_ns,
        end_ns: m.end_ns,
        events: m.events,
        kernel_included: m.kernel,
        modules: m.recording.modules.into_infos(),
        processes: m.recording.processes,
        threads: m.recording.threads,
        stats: m.recording.stats,
        data: m.recording.data,
        job: Default::default(),
        traces: m.recording.traces,
        watch: m.watch,
    }
}
