//! Opening perf events: the `perf_event_attr` this profiler needs, the fallbacks the kernel
//! forces on us, and errors that tell the user what to do.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use linux_perf_event_reader::{Endianness, PerfEventAttr, RecordParseInfo};
use perf_event_open_sys::bindings as sys;

use crate::format::db::Sampling;
use crate::sampler::capture::events::{DataSource, EventClass, EventSpec, Grouping};
use crate::sampler::capture::groups;
use crate::sampler::capture::pmu::{PreciseUnits, UnitKind};

/// The `sample_regs_user` mask (perf's x86 register numbering) the effective-address recovery (`data::ea`) needs: the 16
/// general-purpose registers and ip (`AX`..`IP` = bits 0-8, `R8`..`R15` = bits 16-23). Flags
/// and the segment registers (bits 9-15) are left out: no address depends on them.
pub const SAMPLE_REGS_GP: u64 = 0x1ff | 0xff << 16;

/// The user registers each sample carries: BP, SP and IP (all the unwinder needs).
pub const SAMPLE_REGS_USER: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// Index of BP, SP and IP in a sample's register array (ascending bit order).
pub const REG_BP: u64 = 6;
/// See [`REG_BP`].
pub const REG_SP: u64 = 7;
/// See [`REG_BP`].
pub const REG_IP: u64 = 8;
/// The largest user-stack copy the kernel accepts.
pub const MAX_STACK_SIZE: u32 = 65528;
/// The default user-stack copy per sample. Every sample occupies this much ring space whatever
/// the stack's real depth, so it trades unwinding depth against data rate; deeper stacks are
/// completed from the thread's previous path where possible. Measured (scripts/bench-hpcrun):
/// 8 KiB leaves at most 0.1% more paths partial than 16 KiB on the STL map program, CPython and
/// ripgrep (4 KiB: 10% and 78% for the last two), and fits twice the samples in a ring.
pub const DEFAULT_STACK_SIZE: u32 = 8192;

/// How every event of a run is opened.
#[derive(Debug, Clone, Copy)]
pub struct AttrOptions {
    /// Bytes of user stack copied with each sample (multiple of 8, <= [`MAX_STACK_SIZE`]).
    pub stack_size: u32,
    /// Sample kernel mode too (needs privilege).
    pub kernel: bool,
    /// Launch mode: start disabled, enable when the child execs.
    pub enable_on_exec: bool,
    /// `--data`: data addresses with every sample that can have one, and the non-executable
    /// mappings they may fall in.
    pub data: bool,
    /// How precise memory events are opened, as far as the kernel lets them be.
    pub precise: PreciseTuning,
}

/// The settings of precise memory events the kernel may refuse, lowered one at a time while it
/// does (as perf lowers them): the sample weight as a structure (kernel 5.12 on) or a plain
/// number, and the most precise `precise_ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreciseTuning {
    /// `PERF_SAMPLE_WEIGHT_STRUCT` rather than `PERF_SAMPLE_WEIGHT`.
    pub weight_struct: bool,
    /// The highest `precise_ip` asked for.
    pub max_precise_ip: u8,
}

impl Default for PreciseTuning {
    fn default() -> Self {
        PreciseTuning {
            weight_struct: true,
            max_precise_ip: 3,
        }
    }
}

impl PreciseTuning {
    /// The next setting to try after the kernel refused this one as invalid, if any.
    pub fn lowered(self) -> Option<PreciseTuning> {
        if self.weight_struct {
            Some(PreciseTuning {
                weight_struct: false,
                ..self
            })
        } else if self.max_precise_ip > 1 {
            Some(PreciseTuning {
                max_precise_ip: self.max_precise_ip - 1,
                ..self
            })
        } else {
            None
        }
    }
}

/// One `perf_event_open` of an event: its attribute, the counting group leader it must be
/// opened under (Intel's `mem-loads-aux`), and the CPUs its PMU covers (`None`: all).
#[derive(Clone)]
pub struct OpenAttr {
    /// The sampling event.
    pub attr: sys::perf_event_attr,
    /// Its group leader, opened first on the same task and CPU.
    pub leader: Option<sys::perf_event_attr>,
    /// The CPUs it can be opened on.
    pub cpus: Option<Vec<i32>>,
}

impl OpenAttr {
    /// Whether it can be opened on `cpu`.
    pub fn covers(&self, cpu: i32) -> bool {
        self.cpus.as_ref().is_none_or(|c| c.contains(&cpu))
    }
}

/// Every `perf_event_open` that sampling `spec` takes (one per PMU for precise memory events
/// on hybrid parts; none where the machine has no unit for it). See [`attr`] for `side_band`.
pub fn event_attrs(spec: &EventSpec, opts: &AttrOptions, side_band: bool) -> Vec<OpenAttr> {
    match spec.event.class {
        EventClass::Memory(_) => crate::sampler::capture::pmu::machine()
            .map(|units| memory_attrs(units, spec, opts, side_band))
            .unwrap_or_default(),
        EventClass::Hardware | EventClass::Software => vec![OpenAttr {
            attr: attr(spec, opts, side_band),
            leader: None,
            cpus: None,
        }],
    }
}

/// The opens of precise memory event `spec` on a machine with `units`: [`attr`]'s attribute
/// with each PMU's type and configuration and `precise_ip`, AMD IBS without the exclusion of
/// the hypervisor (which it refuses; it has none to exclude), Intel's loads under their
/// counting `mem-loads-aux` leader where the PMU has one.
pub fn memory_attrs(
    units: &PreciseUnits,
    spec: &EventSpec,
    opts: &AttrOptions,
    side_band: bool,
) -> Vec<OpenAttr> {
    let EventClass::Memory(op) = spec.event.class else {
        return Vec::new();
    };
    let base = attr(spec, opts, side_band);
    let events = units.events(op).unwrap_or_default();
    events
        .iter()
        .map(|e| {
            let mut a = base;
            a.type_ = e.event.type_;
            a.config = e.event.config[0];
            a.__bindgen_anon_3.config1 = e.event.config[1];
            a.__bindgen_anon_4.config2 = e.event.config[2];
            a.set_precise_ip(u64::from(e.precise_ip.min(opts.precise.max_precise_ip)));
            if units.kind == UnitKind::Ibs {
                a.set_exclude_hv(0);
            }
            let leader = e.leader.as_ref().map(|l| {
                // The leader counts (no samples) and is the one enabled at exec; the member
                // follows it.
                let mut g = sys::perf_event_attr {
                    size: std::mem::size_of::<sys::perf_event_attr>() as u32,
                    type_: l.type_,
                    config: l.config[0],
                    ..Default::default()
                };
                g.__bindgen_anon_3.config1 = l.config[1];
                g.__bindgen_anon_4.config2 = l.config[2];
                g.set_disabled(a.disabled());
                g.set_enable_on_exec(a.enable_on_exec());
                g.set_inherit(1);
                g.set_exclude_kernel(a.exclude_kernel());
                g.set_exclude_hv(a.exclude_hv());
                a.set_disabled(0);
                a.set_enable_on_exec(0);
                g
            });
            OpenAttr {
                attr: a,
                leader,
                cpus: e.cpus.clone(),
            }
        })
        .collect()
}

/// Build the attribute for one event. `side_band` asks for the mmap/comm/task records that only
/// one event of the run needs to carry.
pub fn attr(spec: &EventSpec, opts: &AttrOptions, side_band: bool) -> sys::perf_event_attr {
    if spec.grouping == Grouping::Member {
        let type_ = match spec.event.class {
            EventClass::Hardware => sys::PERF_TYPE_HARDWARE,
            _ => sys::PERF_TYPE_SOFTWARE,
        };
        return groups::member_attr(type_, spec.event.config, !opts.kernel);
    }
    let mut a = sys::perf_event_attr {
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        ..Default::default()
    };
    a.type_ = match spec.event.class {
        EventClass::Hardware => sys::PERF_TYPE_HARDWARE,
        EventClass::Software => sys::PERF_TYPE_SOFTWARE,
        // The PMU's own type, set by `memory_attrs`.
        EventClass::Memory(_) => sys::PERF_TYPE_RAW,
    };
    a.config = spec.event.config;
    a.sample_type = (sys::PERF_SAMPLE_IDENTIFIER
        | sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU
        | sys::PERF_SAMPLE_REGS_USER
        | sys::PERF_SAMPLE_STACK_USER) as u64;
    match spec.sampling {
        // With PERF_SAMPLE_PERIOD and a fixed period, the kernel samples software events at
        // every occurrence (reporting the count as the period); so fixed periods are not asked
        // for in samples, and each sample is weighted by the period itself.
        Sampling::Period(p) => a.__bindgen_anon_1.sample_period = p,
        Sampling::Frequency(hz) => {
            a.__bindgen_anon_1.sample_freq = hz;
            a.set_freq(1);
            a.sample_type |= sys::PERF_SAMPLE_PERIOD as u64;
        }
    }
    if spec.grouping == Grouping::Leader {
        groups::read_with_samples(&mut a);
    }
    a.sample_regs_user = SAMPLE_REGS_USER;
    if opts.data {
        match spec.event.data_source() {
            DataSource::Address => a.sample_type |= sys::PERF_SAMPLE_ADDR as u64,
            DataSource::Registers => {
                a.sample_regs_user = crate::sampler::capture::perf::SAMPLE_REGS_GP
            }
            DataSource::Precise | DataSource::None => {}
        }
    }
    if spec.event.data_source() == DataSource::Precise {
        // What a precise memory sample is for, with or without --data.
        let weight = match opts.precise.weight_struct {
            true => sys::PERF_SAMPLE_WEIGHT_STRUCT,
            false => sys::PERF_SAMPLE_WEIGHT,
        };
        a.sample_type |= (sys::PERF_SAMPLE_ADDR | sys::PERF_SAMPLE_DATA_SRC | weight) as u64;
    }
    a.sample_stack_user = opts.stack_size;
    // Off-CPU time: the switch records say when each thread runs again, and the kernel's call
    // chain at the switch (its kernel part only) why it left.
    a.set_context_switch(spec.event.is_off_cpu() as u64);
    if spec.event.is_off_cpu() {
        a.sample_type |= sys::PERF_SAMPLE_CALLCHAIN as u64;
        a.set_exclude_callchain_user(1);
    }
    a.set_disabled(opts.enable_on_exec as u64);
    a.set_enable_on_exec(opts.enable_on_exec as u64);
    a.set_inherit(1);
    a.set_exclude_kernel((!opts.kernel) as u64);
    a.set_exclude_hv(1);
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    // Wake the reader when half the ring is full (set per ring size by the caller).
    a.set_watermark(1);
    if side_band {
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
        a.set_mmap_data(opts.data as u64);
    }
    a
}

/// What the record parser needs to know about the attribute every ring's records follow.
///
/// linux-perf-event-reader 0.10 reads a sample's read block with its two layouts swapped: it
/// takes a group's (`PERF_FORMAT_GROUP`: the number of events, then their counts) for a single
/// event's and the other way round. Our group leaders' layout is therefore described to it
/// without `PERF_FORMAT_GROUP`, so that it steps over the block rightly (the counts themselves
/// are read by [`groups::group_counts`]).
pub fn parse_info(attr: &sys::perf_event_attr) -> RecordParseInfo {
    let mut attr = *attr;
    attr.read_format &= !(sys::PERF_FORMAT_GROUP as u64);
    let attr = &attr;
    // SAFETY: perf_event_attr is plain old data; we read exactly its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (attr as *const sys::perf_event_attr).cast::<u8>(),
            std::mem::size_of::<sys::perf_event_attr>(),
        )
    };
    let (parsed, _) = PerfEventAttr::parse::<_, byteorder::LittleEndian>(bytes)
        .expect("a perf_event_attr we built ourselves always parses");
    RecordParseInfo::new(&parsed, Endianness::LittleEndian)
}

/// Open one event for `pid` (a process, or a thread in attach mode) on `cpu`.
pub fn open(attr: &sys::perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    open_in_group(attr, pid, cpu, None)
}

/// Open an event as [`open`] does, in the group of `leader` when given.
pub fn open_in_group(
    attr: &sys::perf_event_attr,
    pid: i32,
    cpu: i32,
    leader: Option<&OwnedFd>,
) -> io::Result<OwnedFd> {
    open_under(attr, pid, cpu, leader.map_or(-1, |l| l.as_raw_fd()))
}

/// Open an event as [`open`] does, in the group whose leader is open as descriptor `group` (-1:
/// none).
pub fn open_under(
    attr: &sys::perf_event_attr,
    pid: i32,
    cpu: i32,
    group: std::os::fd::RawFd,
) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    // SAFETY: `attr` is a fully initialised attribute owned by this frame.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            pid,
            cpu,
            group,
            sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: the kernel just returned this descriptor to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// The kernel's id of an event, which samples carry in `PERF_SAMPLE_IDENTIFIER`.
pub fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
    let r = unsafe { perf_event_open_sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(id)
    }
}

/// The count of counting event `fd` (opened with `PERF_FORMAT_ID` alone: its value, then its
/// id), or `None` where it cannot be read.
pub fn read_count(fd: &OwnedFd) -> Option<u64> {
    let mut words = [0u64; 2];
    // SAFETY: `words` is 16 writable bytes; read(2) writes at most that many.
    let n = unsafe { libc::read(fd.as_raw_fd(), words.as_mut_ptr().cast(), 16) };
    (n == 16).then_some(words[0])
}

/// Send the records of `fd` into the ring of `target` (both on the same CPU).
pub fn redirect(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both are perf event descriptors we own.
    let r = unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Enable or disable counting on `fd` (attach mode, and stopping cleanly at the end).
pub fn set_enabled(fd: &OwnedFd, on: bool) {
    // SAFETY: ENABLE/DISABLE take no pointer argument.
    unsafe {
        if on {
            perf_event_open_sys::ioctls::ENABLE(fd.as_raw_fd(), 0);
        } else {
            perf_event_open_sys::ioctls::DISABLE(fd.as_raw_fd(), 0);
        }
    }
}

/// Set the wake-up watermark (bytes) of an attribute.
pub fn set_wakeup_watermark(attr: &mut sys::perf_event_attr, bytes: u32) {
    attr.__bindgen_anon_2.wakeup_watermark = bytes;
}

/// Read a `/proc/sys/kernel/...` integer setting.
pub fn kernel_setting(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The CPUs the kernel lists as online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = crate::sampler::capture::pmu::parse_cpu_list(&text);
    if cpus.is_empty() {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as i32;
        cpus.extend(0..n);
    }
    cpus
}

/// Whether an open error means "this machine has no such hardware counter".
pub fn is_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO | libc::EOPNOTSUPP)
    )
}

/// Whether an open error is a permission refusal.
pub fn is_denied(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

/// A user-facing explanation of why `spec` could not be opened, and what to do about it.
pub fn explain_open_error(spec: &EventSpec, err: &io::Error) -> String {
    let name = spec.event.name;
    if is_denied(err) {
        let level = kernel_setting("perf_event_paranoid")
            .map(|l| l.to_string())
            .unwrap_or_else(|| "unknown".into());
        return format!(
            "permission denied opening event '{name}' ({err}); kernel.perf_event_paranoid is {level}. \
             Unprivileged profiling needs a level <= 2 (run `sudo sysctl kernel.perf_event_paranoid=2`, \
             or 1 to include kernel time), or run hpcrun-rs with CAP_PERFMON"
        );
    }
    if let EventClass::Memory(_) = spec.event.class {
        let units = crate::sampler::capture::pmu::machine();
        if units.is_some_and(|u| u.kind == UnitKind::Ibs)
            && err.raw_os_error() == Some(libc::EINVAL)
        {
            // IBS drivers older than a 2025 change refuse any exclusion, of the kernel too.
            return format!(
                "the kernel refused AMD IBS for '{spec}' ({err}): this kernel's IBS driver cannot \
                 leave kernel samples out, so it needs root or kernel.perf_event_paranoid <= 1"
            );
        }
        let pmus = units.map_or_else(String::new, |u| u.pmus.join(", "));
        return format!(
            "the kernel refused precise memory event '{spec}' on {pmus} ({err}), even at the \
             lowest precision; data addresses are available from -e page-faults --data and \
             -e cpu-clock --data"
        );
    }
    if is_unsupported(err) {
        return format!(
            "event '{name}' is not supported on this machine ({err}): it has no usable hardware \
             performance counters (common in VMs). Use a software event such as cpu-clock or task-clock; \
             `hpcrun-rs -L` lists what works here"
        );
    }
    if err.raw_os_error() == Some(libc::EINVAL) {
        if let Sampling::Frequency(hz) = spec.sampling {
            if let Some(max) = kernel_setting("perf_event_max_sample_rate") {
                if hz as i64 > max {
                    return frequency_too_high(spec, max);
                }
            }
        }
        return format!("the kernel rejected event '{spec}' as invalid ({err})");
    }
    if err.raw_os_error() == Some(libc::EMFILE) {
        return format!(
            "too many open files opening event '{name}' ({err}); raise the limit with `ulimit -n`"
        );
    }
    format!("cannot open event '{spec}': {err}")
}

/// The message for a frequency above `kernel.perf_event_max_sample_rate`.
pub fn frequency_too_high(spec: &EventSpec, max: i64) -> String {
    format!(
        "sampling frequency of '{spec}' is above kernel.perf_event_max_sample_rate ({max}); \
         use {}@f{max} or lower, or raise the limit with `sudo sysctl kernel.perf_event_max_sample_rate=N`",
        spec.event.name
    )
}

#[cfg(test)]
#[path = "perf_tests.rs"]
mod tests;
