//! One measurement from start to finish: make the target ready (`target`), open the events,
//! start the copier and the command, read until it ends (`reading`), and hand back the
//! recording.

use std::ffi::OsString;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::unistd::Pid;

use crate::format::db::{EventDesc, Sampling};
use crate::format::openmp::RegionTimeline;
use crate::format::watchdb::WatchProfile;
pub use crate::sampler::capture::event_plan::RunError;
use crate::sampler::capture::event_plan::{plan, Plan};
use crate::sampler::capture::events::{DataSource, EventClass, EventSpec, Grouping};
use crate::sampler::capture::groups;
use crate::sampler::capture::hold::{self, Backpressure};
use crate::sampler::capture::launch::Ended;
use crate::sampler::capture::ompt::RegionLog;
use crate::sampler::capture::perf::{self, AttrOptions};
use crate::sampler::capture::pmu::MemOp;
use crate::sampler::capture::priority;
use crate::sampler::capture::ring::Copier;
use crate::sampler::capture::signals::SignalPipe;
use crate::sampler::data::sample::SampleLayout;
use crate::sampler::open_events::{default_ring_pages, OpenEvents};
use crate::sampler::python::bpf::PyFrames;
use crate::sampler::python::collector::Collector;
use crate::sampler::python::layout::layout_of;
use crate::sampler::record::recorder::{EventLayout, PreciseLayout, Recorder, Recording};
use crate::sampler::results::report::Notice;
use crate::sampler::sources::{Allocations, PerfRings, Source};
use crate::sampler::watch::{WatchRequest, Watcher};
use reading::{AttachedCpu, Reading};
use target::Prepared;

mod reading;
mod target;

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
    /// `--backpressure`: when to stop the command while its samples are copied ([`crate::sampler::capture::hold`]).
    pub backpressure: Backpressure,
    /// Turn CPython's perf trampolines on in a launched command's environment
    /// ([`crate::sampler::capture::python`]).
    pub python: bool,
    /// Ask JVMs for a perf map of their compiled code and frame pointers in it, in a launched
    /// command's environment ([`crate::sampler::capture::java`]).
    pub java: bool,
}

/// A finished measurement.
pub struct Measurement {
    /// What was recorded.
    pub recording: Recording,
    /// Events as actually opened.
    pub events: Vec<EventDesc>,
    /// Per event, the leader whose samples read it ([`crate::format::db::Profile::read_with`]).
    pub read_with: Vec<Option<u32>>,
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
    /// How many times the command was held while its samples were copied ([`crate::sampler::capture::hold`]).
    pub holds: u64,
    /// CPU seconds (user + system) the attached process used while it was measured (attach
    /// mode; a launched command's are its rusage).
    pub attached_cpu: Option<f64>,
    /// What the watchpoints saw (`--watch`).
    pub watch: WatchProfile,
    /// When the OpenMP regions and their threads' shares ran, as the OpenMP tool recorded them.
    pub regions: RegionTimeline,
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
    let data =
        opts.data || (opts.events.iter()).any(|e| matches!(e.event.class, EventClass::Memory(_)));
    let cpus = perf::online_cpus();
    let signals = SignalPipe::install().map_err(|e| RunError::System(e.to_string()))?;
    // Python's frames read at each sample where the kernel takes the frame reader; CPython's
    // perf trampolines (functions without lines, 3.12 on) otherwise.
    let (mut python, python_notice) =
        match (opts.python && is_python_target(&opts.target)).then(PyFrames::load) {
            Some(Ok(loaded)) => (Some(Collector::start(loaded)), None),
            Some(Err(why)) => (None, Some(python_fallback(&why))),
            None => (None, None),
        };
    let trampolines = Options {
        python: opts.python && python.is_none(),
        ..opts.clone()
    };
    let mut target = Prepared::new(&trampolines, data)?;
    if let (Some(frames), Target::Launch(_)) = (&python, &opts.target) {
        crate::sampler::python::early::watch(target.tasks[0] as u32, frames.shared());
    }
    let opened = open_all(opts, data, &target, &cpus);
    let (plan, mut open, mut notices) = target.or_abandon(opened)?;
    let mut recorder = recorder_for(opts, data, (&plan, &mut open), &mut target, &cpus);
    if let Some(mut frames) = python.take() {
        let sampling = open
            .rings
            .iter()
            .map(|r| r.fd())
            .chain(open.sampling_others());
        match sampling.map(|fd| frames.attach(fd)).find_map(Result::err) {
            None => recorder.read_python(frames),
            Some(e) => notices.push(python_fallback(&format!("the events refused it ({e})"))),
        }
    }
    notices.extend(python_notice);
    let copier = start_copier(opts, &plan, (&mut open, &mut recorder), &mut target, &cpus).map(
        |(copier, notice)| {
            notices.extend(notice);
            copier
        },
    )?;
    // The command exists by now, stopped (and its children reset to the ordinary policy
    // anyway); the copier thread exists too, so the reader's nice value is its own.
    if !priority::set_realtime(priority::READER) {
        priority::yield_to_copier();
    }
    let (start_ns, started) = (now_ns(), Instant::now());
    let (child, mut watcher) = target.release(&cpus, &mut recorder)?;
    if let Target::Attach(pid) = opts.target {
        (opts.notify)(Notice::Attached(pid));
        open.fds().for_each(|fd| perf::set_enabled(fd, true));
    }
    let mut attached_cpu = AttachedCpu::default();
    let held = copier.holding().is_some();
    let mut holds = 0;
    // The sources of records, in the order that breaks ties of time: an allocation returned
    // before a sample stamped at the same nanosecond.
    let mut allocations = target.heap.tracker.as_mut().map(Allocations::new);
    let mut rings = PerfRings::new(&mut open, copier, &mut holds);
    let mut sources: Vec<&mut dyn Source> = Vec::new();
    sources.extend(allocations.as_mut().map(|a| a as &mut dyn Source));
    sources.push(&mut rings);
    sources.extend(watcher.as_mut().map(|w| w as &mut dyn Source));
    let ended = Reading {
        sources,
        recorder: &mut recorder,
        signals: &signals,
        child,
        held,
        tasks: &target.tasks,
        notify: opts.notify,
        attached_cpu: &mut attached_cpu,
    }
    .until_end();
    drop((rings, allocations));
    let counted = open.member_totals(plan.specs.len());
    let regions = target.regions.take().map(RegionLog::finish);
    let lost = target.heap.tracker.as_ref().map_or(0, |t| t.lost());
    recorder.heap_tracking(target.heap.unavailable, lost);
    let mut recording = recorder.finish();
    notices.extend(recording.python.1.take());
    notices.extend(groups::unread_counts(
        &plan.specs,
        &counted,
        &recording.threads,
    ));
    Ok(Measurement {
        recording,
        events: (plan.specs.iter())
            .map(|(s, replaced)| s.describe(replaced.as_deref()))
            .collect(),
        read_with: groups::leaders(plan.specs.iter().map(|(s, _)| s)),
        kernel: plan.kernel,
        notices,
        ended,
        start_ns,
        end_ns: now_ns(),
        duration: started.elapsed(),
        command: target.command,
        holds,
        attached_cpu: attached_cpu.used(),
        watch: watcher.map(Watcher::finish).unwrap_or_default(),
        regions: regions.unwrap_or_default(),
    })
}

/// Whether the target is a Python interpreter or script (launched), or a process with an
/// interpreter mapped (attached to).
fn is_python_target(target: &Target) -> bool {
    match target {
        Target::Launch(argv) => (crate::sampler::capture::launch::resolve(&argv[0]))
            .is_ok_and(|p| crate::sampler::capture::python::is_python(&p)),
        Target::Attach(pid) => std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|maps| maps.lines().any(|l| layout_of(l.trim_end()).is_some())),
    }
}

/// The notice for a Python command whose frames are not read at each sample, and why.
fn python_fallback(why: &str) -> String {
    format!(
        "Python lines are not read ({why}); Python functions come from CPython's perf \
         trampolines (3.12 and later)"
    )
}

/// The recorder for the events of `plan` as `open` opened them, with the allocator probes
/// opened (or the reason they could not be, kept for the summary) and the trace asked for.
fn recorder_for(
    opts: &Options,
    data: bool,
    (plan, open): (&Plan, &mut OpenEvents),
    target: &mut Prepared,
    cpus: &[i32],
) -> Recorder {
    let probe_ids = match open.add_probes(&target.heap.probes, &target.tasks, cpus) {
        Ok(ids) => ids,
        Err(e) => {
            let why = format!("the allocator's uprobes could not be opened ({e})");
            target.heap.unavailable = Some(why);
            Vec::new()
        }
    };
    let mut recorder = Recorder::new(event_layouts(plan, open, data), open.event_of_id.clone());
    recorder.add_probes(probe_ids, opts.alloc_min);
    match opts.trace {
        Some(budget) => recorder.trace(budget),
        None => recorder.trace_openmp(OPENMP_TRACE_BUDGET),
    }
    recorder
}

/// The most bytes an OpenMP program's trace takes when `-t` did not ask for one (about 13
/// million samples).
const OPENMP_TRACE_BUDGET: usize = 64 << 20;

/// Start the thread that copies the rings out as soon as they wake it, from before the command
/// starts (a short program's fault burst fills a ring in a millisecond), while the reader
/// unwinds; and hold the command while it copies where `--backpressure` asks for it (with a
/// notice when it cannot, or not for every event).
fn start_copier(
    opts: &Options,
    plan: &Plan,
    (open, recorder): (&mut OpenEvents, &mut Recorder),
    target: &mut Prepared,
    cpus: &[i32],
) -> Result<(Copier, Option<String>), RunError> {
    let copier = target.or_abandon(Copier::start(&open.rings).map_err(|e| {
        RunError::System(format!(
            "cannot start the thread that empties the sample buffers: {e}"
        ))
    }))?;
    if !opts.backpressure.wanted(copier.realtime()) {
        return Ok((copier, None));
    }
    let held = hold_command(opts, plan, (open, &copier, recorder), &target.tasks, cpus);
    let notice = held.unwrap_or_else(|e| {
        open.release_hold();
        Some(format!(
            "the command cannot be held while its samples are copied ({e}); a burst may lose \
             records"
        ))
    });
    Ok((copier, notice))
}

/// Open the tripwires that stop the command every half ring of samples until the copier has
/// copied them ([`crate::sampler::capture::hold`]); a notice names the events that have none.
fn hold_command(
    opts: &Options,
    plan: &Plan,
    (open, copier, recorder): (&mut OpenEvents, &Copier, &mut Recorder),
    tasks: &[i32],
    cpus: &[i32],
) -> std::io::Result<Option<String>> {
    let owner = match opts.target {
        Target::Attach(pid) => Pid::from_raw(pid as i32),
        Target::Launch(_) => Pid::from_raw(tasks[0]),
    };
    // A sample: its stack copy, the registers and the fixed fields.
    let sample_bytes = opts.stack_size as usize + 512;
    let every = hold::tripwire_every(open.pages * 4096, sample_bytes);
    let (ids, without) = open.add_tripwires(plan, (tasks, cpus), owner, every)?;
    recorder.skip_tripwires(ids);
    copier.hold(owner);
    Ok((!without.is_empty()).then(|| {
        format!(
            "the command is not held for the samples of {} (--backpressure): a burst of them \
             may lose records",
            without.join(", ")
        )
    }))
}

/// Plan the events of `opts` and open them on the target's tasks, one ring per CPU (with a
/// notice when the locked-memory limit made the rings smaller than asked).
fn open_all(
    opts: &Options,
    data: bool,
    target: &Prepared,
    cpus: &[i32],
) -> Result<(Plan, OpenEvents, Vec<String>), RunError> {
    // Allocator probes on a program allocating as fast as it can fill a ring with an 8 KiB
    // stack copy per call every few µs: give the reader longer to come (measured on this
    // project's VM, 200,000 malloc+free pairs: 250-3900 records lost with 2 MiB per CPU, none
    // with 8).
    let pages = opts
        .ring_pages
        .unwrap_or_else(|| match target.heap.probes.is_empty() {
            true => default_ring_pages(cpus.len()),
            false => default_ring_pages(cpus.len()).max(PROBE_RING_PAGES),
        });
    let mut attr_opts = AttrOptions {
        stack_size: opts.stack_size,
        kernel: true,
        enable_on_exec: true,
        data,
        precise: Default::default(),
    };
    let plan = plan(&opts.events, target.tasks[0], cpus[0], attr_opts)
        .map_err(|e| explain_for_target(e, &opts.target))?;
    let mut notices = plan.notices.clone();
    attr_opts.kernel = plan.kernel;
    attr_opts.precise = plan.precise;
    attr_opts.enable_on_exec = target.launched();
    let mut open = OpenEvents::new(attr_opts, pages);
    let add = |open: &mut OpenEvents, tasks: &[i32]| {
        (open.add_tasks(&plan, tasks, cpus)).map_err(|e| explain_for_target(e, &opts.target))
    };
    add(&mut open, &target.tasks)?;
    if let Target::Attach(pid) = opts.target {
        // Threads created while the first events were being opened are not covered by their
        // inheritance: open theirs too, until the thread list is stable.
        let mut known = target.tasks.clone();
        loop {
            let new: Vec<i32> = (threads_of(pid).into_iter())
                .filter(|t| !known.contains(t))
                .collect();
            if new.is_empty() {
                break;
            }
            add(&mut open, &new)?;
            known.extend(new);
        }
    }
    if open.pages < pages && opts.ring_pages.is_some() {
        notices.push(format!(
            "sample buffers reduced to {} KiB per CPU by the locked-memory limit",
            open.pages * 4
        ));
    }
    Ok((plan, open, notices))
}

/// How the recorder reads each planned event's samples.
fn event_layouts(plan: &Plan, open: &OpenEvents, data: bool) -> Vec<EventLayout> {
    (plan.specs.iter())
        .map(|(spec, _)| EventLayout {
            parse_info: perf::parse_info(&perf::attr(spec, &open.opts, false)),
            fixed_period: match spec.sampling {
                Sampling::Period(p) => Some(p),
                Sampling::Frequency(_) => None,
            },
            data: match data {
                true => spec.event.data_source(),
                false => DataSource::None,
            },
            precise: precise_layout(spec, &open.opts),
            off_cpu: spec.event.is_off_cpu(),
            group_read: (spec.grouping == Grouping::Leader).then(|| {
                groups::read_block_offset(perf::attr(spec, &open.opts, false).sample_type)
            }),
        })
        .collect()
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
        regions: m.regions,
        read_with: m.read_with,
        python_code: m.recording.python.0,
    }
}
