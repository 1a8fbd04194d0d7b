//! Turning the kernel's records into per-thread calling-context trees, as they arrive.
//!
//! Side-band records (mmap, comm, fork, exit) keep each process's load map current; each sample
//! is unwound at once and its path inserted into its thread's tree, so nothing per-sample is
//! kept. Deep stacks that outgrow the stack copy are completed from the thread's previous
//! complete path where the frame at the edge of the copy is provably the same frame.

use std::borrow::Cow;

use fxhash::{FxHashMap, FxHashSet};
use linux_perf_event_reader::{
    ContextSwitchRecord, CpuMode, EventRecord, Mmap2Record, RawEventRecord, RecordParseInfo,
    RecordType, SampleRecord,
};

use crate::format::addr::Avma;
use crate::format::dataref::DataProfile;
use crate::format::db::{AddrKind, CctNodeId, Frame, ProcessInfo, Stats, ThreadProfile};
use crate::format::trace::{TraceLog, Traces};
use crate::sampler::capture::events::DataSource;
use crate::sampler::capture::groups::GroupReads;
use crate::sampler::capture::perf::{REG_BP, REG_IP, REG_SP};
use crate::sampler::capture::pmu::MemOp;
use crate::sampler::capture::ring::RingRecord;
use crate::sampler::data::datarec::{classify, Access, DataRecorder};
use crate::sampler::data::ea::{EaRecovery, GpRegs};
use crate::sampler::data::liveheap::LiveHeap;
use crate::sampler::data::sample::{is_kept, level_of, SampleFields, SampleLayout};
use crate::sampler::unwinding::cct::CctBuilder;
use crate::sampler::unwinding::loadmap::{AddressSpace, MapEvent, ModuleRegistry};
use crate::sampler::unwinding::stubs::Stubs;
use crate::sampler::unwinding::unwind::StackSample;
use processes::read_comm;

/// A frame of a thread's last complete path, kept to complete later truncated paths.
#[derive(Debug, Clone, Copy)]
struct PathEntry {
    sp: u64,
    ra: u64,
    node: CctNodeId,
}

struct ThreadState {
    pid: u32,
    comm: String,
    cct: CctBuilder,
    /// Return-address frames of the last complete path, outermost first.
    last_path: Vec<PathEntry>,
    /// The user stack pointer of its last sample (0 before any and after its end).
    last_sp: u64,
    /// Since its last switch away from the CPU (`off-cpu`): the context it blocked in, the
    /// event, and when.
    off_since: Option<(CctNodeId, usize, u64)>,
}

#[derive(Clone, Default)]
struct ProcessState {
    ppid: u32,
    comm: String,
    space: AddressSpace,
    /// Heap blocks live now (`--data` with allocation tracking).
    heap: LiveHeap,
    /// The code without unwind information recognised so far (CPython's trampolines).
    stubs: Stubs,
}

/// How a path reached the thread's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathOutcome {
    /// Unwound all the way.
    Complete,
    /// Completed from the thread's previous path.
    Stitched,
    /// Filed under `<partial call paths>`.
    Partial,
}

/// How one event's samples are laid out and weighted.
#[derive(Debug, Clone, Copy)]
pub struct EventLayout {
    /// The record layout its attribute asked for.
    pub parse_info: RecordParseInfo,
    /// The weight of each sample when the period is fixed (samples then carry no period).
    pub fixed_period: Option<u64>,
    /// Where its samples' data addresses come from (`None` without `--data`).
    pub data: DataSource,
    /// For a precise memory event, where the fields after the stack copy are, and which
    /// operations' samples count.
    pub precise: Option<PreciseLayout>,
    /// Whether its samples are switches away from the CPU, weighed by the time until the
    /// thread runs again (`off-cpu`).
    pub off_cpu: bool,
    /// For a group leader, where its samples hold the group's counts
    /// ([`crate::sampler::capture::groups::read_block_offset`]).
    pub group_read: Option<usize>,
}

/// How a precise memory event's samples are read (see [`crate::sampler::data::sample`]).
#[derive(Debug, Clone, Copy)]
pub struct PreciseLayout {
    /// Where its samples' address, weight and data source are.
    pub fields: SampleLayout,
    /// The operations whose samples count (IBS samples every operation).
    pub keep: MemOp,
}

/// Everything learned so far in a run.
pub struct Recorder {
    /// How each event's samples are laid out, by metric index.
    layouts: Vec<EventLayout>,
    /// Metric index of each kernel event id.
    event_of_id: FxHashMap<u64, usize>,
    /// The ids of the backpressure tripwires, whose samples only stop the command.
    tripwires: FxHashSet<u64>,
    modules: ModuleRegistry,
    processes: FxHashMap<u32, ProcessState>,
    threads: FxHashMap<u32, ThreadState>,
    stats: Stats,
    /// What walking one stack reuses from the last (see [`paths::Walking`]).
    walk: paths::Walking,
    /// The data side (`--data`).
    data: Option<DataRecorder>,
    /// Data addresses of clock samples from their registers (`--data`).
    ea: EaRecovery,
    /// The allocator's uprobes and the calls they are in (see [`probes::Probes`]).
    probes: probes::Probes,
    /// The traces (`-t`, or from when an OpenMP runtime is mapped).
    trace: Option<TraceLog>,
    /// The budget to start tracing with when the command maps an OpenMP runtime (see
    /// [`crate::format::openmp`]), where `-t` did not ask for a trace already.
    openmp_trace: Option<usize>,
    /// The kernel's symbols, read at the first off-CPU sample (`None` inside: unreadable).
    kernel_symbols: Option<Option<blocking::KernelSymbols>>,
    /// Each thread's last counts of the group members (`-e '{LEADER,MEMBER}'`).
    group_reads: GroupReads,
    /// Python's frames read at each sample, where the frame reader is loaded.
    python: Option<python::PythonReader>,
}

/// What a finished recording holds, ready to be written to `profile.db`.
pub struct Recording {
    /// Module table.
    pub modules: ModuleRegistry,
    /// Processes seen.
    pub processes: Vec<ProcessInfo>,
    /// Per-thread trees.
    pub threads: Vec<ThreadProfile>,
    /// Counters.
    pub stats: Stats,
    /// Data references and allocation sites (`--data`).
    pub data: DataProfile,
    /// Per-thread traces (`-t`).
    pub traces: Traces,
    /// The Python functions of the trees' Python frames, and a line for the summary.
    pub python: (Vec<crate::format::db::PythonCode>, Option<String>),
}

impl Recorder {
    /// A recorder for events laid out as `layouts` say (one per metric), with `event_of_id`
    /// mapping each kernel event id to the index of its metric.
    pub fn new(layouts: Vec<EventLayout>, event_of_id: FxHashMap<u64, usize>) -> Self {
        let data = layouts
            .iter()
            .any(|l| l.data != DataSource::None)
            .then(|| DataRecorder::new(layouts.len()));
        Recorder {
            data,
            layouts,
            event_of_id,
            tripwires: FxHashSet::default(),
            modules: ModuleRegistry::default(),
            processes: FxHashMap::default(),
            threads: FxHashMap::default(),
            stats: Stats::default(),
            walk: paths::Walking::default(),
            ea: EaRecovery::new(),
            probes: probes::Probes::default(),
            trace: None,
            openmp_trace: None,
            kernel_symbols: None,
            group_reads: GroupReads::default(),
            python: None,
        }
    }

    /// Splice Python's frames, as `frames` reads them at each sample, into the paths.
    pub(crate) fn read_python(&mut self, frames: crate::sampler::python::collector::Collector) {
        self.python = Some(python::PythonReader::new(frames));
    }

    /// Skip the samples of these events (backpressure tripwires,
    /// [`crate::sampler::capture::hold`]).
    pub(crate) fn skip_tripwires(&mut self, ids: impl IntoIterator<Item = u64>) {
        self.tripwires.extend(ids);
    }

    /// Also trace every sample of the first event, in at most `budget` bytes (`-t`), and
    /// with data addresses its data samples, in at most `budget` bytes more.
    pub fn trace(&mut self, budget: usize) {
        self.trace = Some(TraceLog::new(budget));
        if let Some(d) = self.data.as_mut() {
            d.trace(budget);
        }
    }

    /// Start tracing, in at most `budget` bytes, when the command maps an OpenMP runtime: the
    /// correlator places worker threads' samples by time (no data trace).
    pub fn trace_openmp(&mut self, budget: usize) {
        self.openmp_trace = Some(budget);
    }

    /// The record's timestamp (ordering key across rings); records without one sort first.
    pub fn timestamp(&self, rec: &RingRecord<'_>) -> u64 {
        // Every event's layout puts the time at the same place.
        self.raw(rec, 0).timestamp().unwrap_or(0)
    }

    /// The metric a record belongs to: samples start with their event's id
    /// (`PERF_SAMPLE_IDENTIFIER`); side-band records belong to the first event.
    fn event_of(&self, rec: &RingRecord<'_>) -> usize {
        if RecordType(rec.record_type) != RecordType::SAMPLE {
            return 0;
        }
        let mut data = rec.data;
        data.read_u64::<byteorder::LittleEndian>()
            .ok()
            .and_then(|id| self.event_of_id.get(&id).copied())
            .unwrap_or(0)
    }

    /// Whether a record is a tripwire's sample.
    fn is_tripwire(&self, rec: &RingRecord<'_>) -> bool {
        if self.tripwires.is_empty() || RecordType(rec.record_type) != RecordType::SAMPLE {
            return false;
        }
        let mut data = rec.data;
        (data.read_u64::<byteorder::LittleEndian>()).is_ok_and(|id| self.tripwires.contains(&id))
    }

    /// The allocator probe a sample record comes from, if it does.
    fn probe_of(
        &self,
        rec: &RingRecord<'_>,
    ) -> Option<(crate::sampler::data::uprobes::ProbePoint, RecordParseInfo)> {
        if RecordType(rec.record_type) != RecordType::SAMPLE || self.probes.points.is_empty() {
            return None;
        }
        let mut data = rec.data;
        let id = data.read_u64::<byteorder::LittleEndian>().ok()?;
        self.probes.points.get(&id).copied()
    }

    fn raw<'a>(&self, rec: &RingRecord<'a>, event: usize) -> RawEventRecord<'a> {
        RawEventRecord::new(
            RecordType(rec.record_type),
            rec.misc,
            rec.data,
            self.layouts[event].parse_info,
        )
    }

    /// Handle one record.
    pub fn handle(&mut self, rec: &RingRecord<'_>) {
        if self.is_tripwire(rec) {
            return;
        }
        if let Some((point, info)) = self.probe_of(rec) {
            let raw = RawEventRecord::new(RecordType(rec.record_type), rec.misc, rec.data, info);
            if let Ok(EventRecord::Sample(s)) = raw.parse() {
                self.probe_hit(&s, point);
            }
            return;
        }
        let event = self.event_of(rec);
        match self.raw(rec, event).parse() {
            Ok(EventRecord::Sample(s)) => {
                let precise = self.layouts[event].precise;
                match precise.map(|p| (p, p.fields.fields(rec.data))) {
                    None => {
                        let charged = self.sample(&s, event, None);
                        self.read_group(rec.data, event, charged);
                    }
                    // A record shorter than its layout, or an operation not asked for.
                    Some((_, None)) => {}
                    Some((p, Some(f))) if !is_kept(f.data_src.unwrap_or(0), p.keep) => {}
                    Some((_, Some(f))) => _ = self.sample(&s, event, Some(f)),
                }
            }
            Ok(EventRecord::Mmap2(m)) => self.mmap2(&m),
            Ok(EventRecord::ContextSwitch(ContextSwitchRecord::In { .. })) => {
                self.switched_in(rec, event)
            }
            Ok(EventRecord::Comm(c)) => self.comm(&c),
            Ok(EventRecord::Fork(f)) => self.fork(&f),
            // An ended thread's stack is no longer a `--watch sample` target.
            Ok(EventRecord::Exit(e)) => {
                if let Some(t) = self.threads.get_mut(&(e.tid as u32)) {
                    t.last_sp = 0;
                }
                self.group_reads.forget(e.tid as u32);
            }
            Ok(EventRecord::Lost(l)) => self.stats.lost += l.count,
            Ok(EventRecord::Throttle(_)) => self.stats.throttled += 1,
            Ok(_) | Err(_) => {}
        }
    }

    /// A thread is back on a CPU: the time since its last switch away goes to the context it
    /// blocked in (`off-cpu`).
    fn switched_in(&mut self, rec: &RingRecord<'_>, event: usize) {
        let Ok(common) = self.raw(rec, event).common_data() else {
            return;
        };
        let (Some(tid), Some(time)) = (common.tid, common.timestamp) else {
            return;
        };
        let Some(thread) = self.threads.get_mut(&(tid as u32)) else {
            return;
        };
        if let Some((node, metric, since)) = thread.off_since.take() {
            thread
                .cct
                .add_value(node, metric, time.saturating_sub(since));
        }
    }

    fn process(&mut self, pid: u32) -> &mut ProcessState {
        process_entry(&mut self.processes, pid)
    }

    fn mmap2(&mut self, m: &Mmap2Record<'_>) {
        let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
        if m.protection & libc::PROT_EXEC as u32 == 0 {
            let space = &mut self.process(m.pid as u32).space;
            space.map_data(m.address, m.length, &path);
            return;
        }
        self.map(
            m.pid as u32,
            MapEvent {
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                path: &path,
                pid: m.pid as u32,
            },
        );
    }

    fn map(&mut self, pid: u32, ev: MapEvent<'_>) {
        if self.trace.is_none() && crate::format::openmp::is_runtime(ev.path) {
            self.trace = self.openmp_trace.map(TraceLog::new);
        }
        let mut space = std::mem::take(&mut self.process(pid).space);
        space.map(ev, &mut self.modules);
        if let (Some(py), Some((module, _))) = (&mut self.python, space.resolve(Avma(ev.start))) {
            py.mapped(pid, (ev.path, module), ev.start, ev.pgoff);
        }
        self.process(pid).space = space;
    }

    /// Record sample `s` of metric `event`; `precise` holds a precise memory sample's fields.
    /// Returns the thread and the context charged.
    fn sample(
        &mut self,
        s: &SampleRecord<'_>,
        event: usize,
        precise: Option<SampleFields>,
    ) -> Option<(u32, CctNodeId)> {
        let (Some(pid), Some(tid)) = (s.pid, s.tid) else {
            return None;
        };
        let (pid, tid) = (pid as u32, tid as u32);
        let period = s.period.or(self.layouts[event].fixed_period).unwrap_or(1);
        self.stats.samples += 1;
        let in_kernel = matches!(s.cpu_mode, CpuMode::Kernel);

        // The user state: from the sampled registers, or (kernel samples) the registers saved
        // when the thread entered the kernel.
        let regs = s.user_regs.as_ref();
        let ip = regs
            .and_then(|r| r.get(REG_IP))
            .or(if in_kernel { None } else { s.ip });
        let sp = regs.and_then(|r| r.get(REG_SP)).unwrap_or(0);
        let bp = regs.and_then(|r| r.get(REG_BP)).unwrap_or(0);

        self.ensure_thread(pid, tid);
        if sp != 0 {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.last_sp = sp;
            }
        }
        self.walk.frames.clear();
        self.walk.outer_cfa = None;
        let leaf = match ip {
            Some(ip) => {
                // Unwound where the kernel wrote it, unless the record wraps around the ring.
                let stack = valid_stack(s);
                let sample = StackSample {
                    ip,
                    sp,
                    bp,
                    stack: &stack,
                    time: s.timestamp.unwrap_or(0),
                };
                let (leaf, outcome) = self.insert_user_path(pid, tid, &sample, AddrKind::Ip);
                match outcome {
                    PathOutcome::Complete => {}
                    PathOutcome::Stitched => self.stats.stitched += 1,
                    PathOutcome::Partial => self.stats.partial += 1,
                }
                leaf
            }
            None => CctNodeId::ROOT,
        };
        let blocked = (self.layouts[event].off_cpu && in_kernel).then(|| self.block_reason(s));
        let thread = self.threads.get_mut(&tid).expect("thread exists");
        let mut node = if in_kernel {
            thread.cct.child(leaf, Frame::Kernel)
        } else {
            leaf
        };
        if let Some(reason) = blocked {
            node = thread.cct.child(node, Frame::Blocked(reason));
        }
        match self.layouts[event].off_cpu {
            true => {
                thread.cct.charge(node, event, 0);
                thread.off_since = s.timestamp.map(|t| (node, event, t));
            }
            false => thread.cct.charge(node, event, period),
        }
        if let Some(trace) = self.trace.as_mut().filter(|_| event == 0) {
            trace.record(tid, s.timestamp.unwrap_or(0), node.index() as u32);
        }
        if let Some(addr) = self.data_address(s, event, pid, in_kernel, precise.as_ref()) {
            let access = Access {
                addr,
                tid,
                time: s.timestamp.unwrap_or(0),
                sp,
                frames: &self.walk.frames,
                outer_cfa: self.walk.outer_cfa,
            };
            let process = &self.processes[&pid];
            let data = classify(&access, &process.heap, &process.space);
            let source =
                precise.map(|f| (level_of(f.data_src.unwrap_or(0)), f.latency.unwrap_or(0)));
            if let Some(d) = self.data.as_mut() {
                d.charge(&access, leaf, data, event, period, source);
            }
        }
        Some((tid, node))
    }

    /// The data address of a sample of `event` of process `pid`, where `--data` asked for
    /// one and the sample has it: the kernel's (a fault's, or the PMU's in the `precise`
    /// fields, where 0 means none), or the memory operand of the user-mode instruction the
    /// sample interrupted (see [`crate::sampler::data::ea`]).
    fn data_address(
        &mut self,
        s: &SampleRecord<'_>,
        event: usize,
        pid: u32,
        in_kernel: bool,
        precise: Option<&SampleFields>,
    ) -> Option<u64> {
        match self.layouts[event].data {
            DataSource::Address => s.addr,
            DataSource::Precise => precise?.addr.filter(|&a| a != 0),
            DataSource::Registers if !in_kernel => {
                let regs = GpRegs::from_sample(s.user_regs.as_ref()?);
                let ip = regs.get(REG_IP as u8)?;
                let found = self.processes.get(&pid).and_then(|p| {
                    let (module, svma) = p.space.resolve(Avma(ip))?;
                    let image = self.modules.image(module)?;
                    let bias = ip.wrapping_sub(svma.0);
                    self.ea
                        .data_address(image, module.index() as u32, svma.0, bias, &regs)
                });
                let stats = self.data.as_mut()?.stats_mut();
                stats.ea_attempted += 1;
                stats.ea_resolved += found.is_some() as u64;
                found
            }
            DataSource::Registers | DataSource::None => None,
        }
    }

    fn ensure_thread(&mut self, pid: u32, tid: u32) {
        if self.threads.contains_key(&tid) {
            return;
        }
        let comm = read_comm(pid, tid);
        let events = self.layouts.len();
        let process = self.process(pid);
        let comm = if comm.is_empty() {
            process.comm.clone()
        } else {
            comm
        };
        self.threads.insert(
            tid,
            ThreadState {
                pid,
                comm,
                cct: CctBuilder::new(events),
                last_path: Vec::new(),
                last_sp: 0,
                off_since: None,
            },
        );
    }

    /// The last sampled stack pointer of each thread of process `pid` that has one.
    pub(crate) fn stack_pointers(&self, pid: u32) -> Vec<u64> {
        (self.threads.values())
            .filter(|t| t.pid == pid && t.last_sp != 0)
            .map(|t| t.last_sp)
            .collect()
    }

    /// Finish: the data for `profile.db`.
    pub fn finish(self) -> Recording {
        let mut processes: Vec<ProcessInfo> = self
            .processes
            .iter()
            .map(|(&pid, p)| ProcessInfo {
                pid,
                ppid: p.ppid,
                comm: p.comm.clone(),
            })
            .collect();
        processes.sort_by_key(|p| p.pid);
        let mut threads: Vec<ThreadProfile> = self
            .threads
            .into_iter()
            .filter(|(_, t)| !t.cct.is_empty())
            .map(|(tid, t)| ThreadProfile {
                pid: t.pid,
                tid,
                comm: t.comm,
                cct: t.cct.finish(),
            })
            .collect();
        threads.sort_by_key(|t| (t.pid, t.tid));
        let data = self.data.map(|d| d.finish(&threads)).unwrap_or_default();
        Recording {
            modules: self.modules,
            processes,
            threads,
            stats: self.stats,
            data,
            traces: self.trace.map(TraceLog::finish).unwrap_or_default(),
            python: self
                .python
                .map(python::PythonReader::finish)
                .unwrap_or_default(),
        }
    }
}

/// The valid part (`dyn_size` bytes) of a sample's user-stack copy: borrowed from the ring,
/// copied only where the record wraps around the ring's end.
fn valid_stack<'a>(s: &SampleRecord<'a>) -> Cow<'a, [u8]> {
    match &s.user_stack {
        Some((data, dyn_size)) => {
            let valid = (*dyn_size as usize).min(data.len());
            data.get(0..valid).map(|d| d.as_slice()).unwrap_or_default()
        }
        None => Cow::Borrowed(&[]),
    }
}

/// The state of process `pid`, created empty the first time it is seen.
fn process_entry(processes: &mut FxHashMap<u32, ProcessState>, pid: u32) -> &mut ProcessState {
    processes.entry(pid).or_default()
}

mod allocations;
mod blocking;
mod grouped;
mod paths;
mod probes;
mod processes;
mod python;
pub(crate) use probes::ProbeIds;
#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
