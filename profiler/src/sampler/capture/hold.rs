//! Backpressure: the kernel itself stops the command every so many samples, and the copier
//! lets it go on once it has copied them out, so a burst the copier cannot keep up with waits
//! for it instead of being lost.
//!
//! Without real-time priority (an ordinary user) the copier may wait milliseconds for a CPU,
//! and a short program's fault burst (1,200 samples with 8 KiB stack copies in 10 ms) fills a
//! 4 MiB ring in that time: 5% of such records were lost as the user nobody, none as root
//! (`docs/limits.md`). Larger rings did not help, nor earlier wake-ups; only holding the writer
//! does.
//!
//! Each sampled event gets a twin, a *tripwire*: the same event at a period `every` times
//! longer, its tiny samples (id, ip, thread, time) written into the same ring, each one waking
//! the copier. Software events counted at a kernel call site (page faults, context switches)
//! are the exception: the kernel prepares one sample for all the events of one site, and the
//! second event's record then carries the first one's id (seen here: a fault sample taken for
//! the tripwire's and skipped). Page faults get minor faults as their tripwire, which count
//! the same faults at another site; the other such events get none. Its descriptor has `O_ASYNC` with the command as owner and `SIGSTOP` as signal
//! (`fcntl(2)` `F_SETOWN`, `F_SETSIG`), and the kernel signals an `O_ASYNC` event's owner at
//! each of its samples: every `every` samples the command stops, the copier is woken, copies
//! the ring out and continues the command with `SIGCONT`. The sampled events themselves are
//! not armed, or every sample would stop the command. The command loses no CPU time; its wall
//! time grows by the copies.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use perf_event_open_sys::bindings as sys;

/// `fcntl(2)`'s `F_SETSIG` (Linux), which the libc crate does not name.
const F_SETSIG: i32 = 10;

/// When to hold the command (`hpcrun-rs --backpressure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backpressure {
    /// Where the copier could not have real-time priority (an ordinary user).
    #[default]
    Auto,
    /// Always.
    On,
    /// Never: records that do not fit are lost and counted.
    Off,
}

impl Backpressure {
    /// Whether to hold, given whether the copier has real-time priority.
    pub(crate) fn wanted(self, copier_realtime: bool) -> bool {
        match self {
            Backpressure::Auto => !copier_realtime,
            Backpressure::On => true,
            Backpressure::Off => false,
        }
    }
}

/// The tripwire of a sampled event's attribute: the same event (or for page faults, minor
/// faults), `every` times rarer, with samples of the fields every layout starts with (so they
/// sort by time with the others) and a wake-up at each; no side-band records. `None` for the
/// software events that have no tripwire, and where the event the tripwire would count is
/// one of `sampled` (type, config), which share the kernel's call site.
pub(crate) fn tripwire(
    attr: &sys::perf_event_attr,
    every: u64,
    sampled: &[(u32, u64)],
) -> Option<sys::perf_event_attr> {
    let mut a = *attr;
    if a.type_ == sys::PERF_TYPE_SOFTWARE {
        a.config = match a.config as u32 {
            sys::PERF_COUNT_SW_CPU_CLOCK | sys::PERF_COUNT_SW_TASK_CLOCK => a.config,
            sys::PERF_COUNT_SW_PAGE_FAULTS => sys::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64,
            sys::PERF_COUNT_SW_PAGE_FAULTS_MIN | sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ => {
                sys::PERF_COUNT_SW_PAGE_FAULTS as u64
            }
            _ => return None,
        };
        if a.config != attr.config && sampled.contains(&(a.type_, a.config)) {
            return None;
        }
    }
    a.sample_type = (sys::PERF_SAMPLE_IDENTIFIER
        | sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME) as u64;
    a.sample_regs_user = 0;
    a.sample_stack_user = 0;
    a.set_precise_ip(0);
    a.set_mmap(0);
    a.set_mmap2(0);
    a.set_comm(0);
    a.set_task(0);
    a.set_watermark(0);
    a.__bindgen_anon_2.wakeup_events = 1;
    // SAFETY: `freq` says which member of the union the attribute uses.
    unsafe {
        match a.freq() {
            1 => a.__bindgen_anon_1.sample_freq = (a.__bindgen_anon_1.sample_freq / every).max(1),
            _ => {
                a.__bindgen_anon_1.sample_period =
                    a.__bindgen_anon_1.sample_period.saturating_mul(every)
            }
        }
    }
    Some(a)
}

/// Samples between two stops for rings of `ring_bytes` and samples of at most
/// `sample_bytes`: half a ring's worth. A quarter made twice the holds; with half, the
/// fault storm of `scripts/bench-data` takes 1.67x the bare run's wall time held, 1.64x not.
pub(crate) fn tripwire_every(ring_bytes: usize, sample_bytes: usize) -> u64 {
    (ring_bytes / 2 / sample_bytes.max(1)).max(1) as u64
}

/// Have each sample of tripwire `fd` send `SIGSTOP` to process `owner`.
pub(crate) fn arm(fd: &OwnedFd, owner: Pid) -> std::io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    let ok = unsafe {
        libc::fcntl(raw, libc::F_SETOWN, owner.as_raw()) == 0
            && libc::fcntl(raw, F_SETSIG, libc::SIGSTOP) == 0
            && set_async(raw, true)
    };
    match ok {
        true => Ok(()),
        false => Err(std::io::Error::last_os_error()),
    }
}

/// Stop tripwire `fd` from signalling anyone (before the last copy of a run).
pub(crate) fn disarm(fd: &OwnedFd) {
    // SAFETY: as in `arm`.
    unsafe {
        set_async(fd.as_raw_fd(), false);
    }
}

/// Set or clear `O_ASYNC` on `raw`.
///
/// # Safety
/// `raw` must be an open descriptor.
unsafe fn set_async(raw: i32, on: bool) -> bool {
    let flags = libc::fcntl(raw, libc::F_GETFL);
    if flags < 0 {
        return false;
    }
    let flags = match on {
        true => flags | libc::O_ASYNC,
        false => flags & !libc::O_ASYNC,
    };
    libc::fcntl(raw, libc::F_SETFL, flags) == 0
}

/// Let the held command go on.
pub(crate) fn resume(owner: Pid) {
    let _ = kill(owner, Signal::SIGCONT);
}

/// Whether process `owner` is stopped (state `T` in `/proc/PID/stat`): a stop the kernel sent
/// after the copier's `SIGCONT` (the two race only when the copier is very quick) would
/// otherwise hold the command until its next wake-up, which never comes.
pub(crate) fn is_stopped(owner: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{owner}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tripwire_is_the_event_rarer_with_small_samples_that_wake() {
        let mut attr = sys::perf_event_attr {
            type_: sys::PERF_TYPE_HARDWARE,
            sample_type: 0x1_0007,
            sample_stack_user: 8192,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 3;
        attr.set_watermark(1);
        attr.set_mmap(1);
        let t = tripwire(&attr, 100, &[]).unwrap();
        // SAFETY: a fixed period was set.
        assert_eq!(unsafe { t.__bindgen_anon_1.sample_period }, 300);
        assert_eq!((t.watermark(), t.mmap(), t.sample_stack_user), (0, 0, 0));
        // SAFETY: without a watermark the union holds wakeup_events.
        assert_eq!(unsafe { t.__bindgen_anon_2.wakeup_events }, 1);
        attr.set_freq(1);
        attr.__bindgen_anon_1.sample_freq = 1000;
        // SAFETY: a frequency was set.
        assert_eq!(
            unsafe {
                tripwire(&attr, 100, &[])
                    .unwrap()
                    .__bindgen_anon_1
                    .sample_freq
            },
            10
        );
        assert_eq!(tripwire_every(4 << 20, 8192 + 256), 248);
        assert_eq!(tripwire_every(16 << 10, 8192 + 256), 1);
    }

    #[test]
    fn software_events_of_one_call_site_get_a_tripwire_from_another() {
        let sw = |config: u32| sys::perf_event_attr {
            type_: sys::PERF_TYPE_SOFTWARE,
            config: config as u64,
            ..Default::default()
        };
        let faults = sw(sys::PERF_COUNT_SW_PAGE_FAULTS);
        let minor = (
            sys::PERF_TYPE_SOFTWARE,
            sys::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64,
        );
        let config = |a: Option<sys::perf_event_attr>| a.map(|a| a.config);
        assert_eq!(config(tripwire(&faults, 4, &[])), Some(minor.1));
        assert_eq!(config(tripwire(&faults, 4, &[minor])), None);
        let clock = sys::PERF_COUNT_SW_CPU_CLOCK;
        assert_eq!(config(tripwire(&sw(clock), 4, &[])), Some(clock as u64));
        assert_eq!(
            config(tripwire(&sw(sys::PERF_COUNT_SW_CONTEXT_SWITCHES), 4, &[])),
            None
        );
    }

    #[test]
    fn auto_holds_only_without_realtime_priority() {
        assert!(Backpressure::Auto.wanted(false));
        assert!(!Backpressure::Auto.wanted(true));
        assert!(Backpressure::On.wanted(true));
        assert!(!Backpressure::Off.wanted(false));
    }

    #[test]
    fn a_stopped_child_reads_as_stopped_and_a_running_one_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let pid = Pid::from_raw(child.id() as i32);
        assert!(!is_stopped(pid));
        kill(pid, Signal::SIGSTOP).unwrap();
        let stopped = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            is_stopped(pid)
        });
        resume(pid);
        let resumed = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            !is_stopped(pid)
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(stopped && resumed);
    }
}
