//! The reader's loop: wake when the copier has copied records, a signal came, the command
//! ended, or another source (the shim's rings, the watcher) has something; hand everything to the
//! recorder in time order; stop when the command ends (launch) or the process ends or the user
//! asks (attach).

use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::sampler::capture::launch::{self, ChildState, Ended};
use crate::sampler::capture::ring::Copier;
use crate::sampler::capture::signals::SignalPipe;
use crate::sampler::capture::{hold, perf};
use crate::sampler::data::alloc::AllocTracker;
use crate::sampler::open_events::OpenEvents;
use crate::sampler::record::recorder::Recorder;
use crate::sampler::results::report::Notice;
use crate::sampler::streams;
use crate::sampler::watch::Watcher;

/// The longest the reader sleeps without a wake-up, in ms.
const LONGEST_SLEEP_MS: u16 = 50;

/// Everything the loop reads from and writes to.
pub(super) struct Reading<'a> {
    pub(super) open: &'a mut OpenEvents,
    pub(super) copier: Copier,
    pub(super) recorder: &'a mut Recorder,
    pub(super) tracker: Option<&'a mut AllocTracker>,
    pub(super) watcher: Option<&'a mut Watcher>,
    pub(super) signals: &'a SignalPipe,
    /// The launched command; none when attached.
    pub(super) child: Option<Pid>,
    /// The process attached to: its first thread.
    pub(super) tasks: &'a [i32],
    pub(super) notify: fn(Notice),
    pub(super) attached_cpu: &'a mut AttachedCpu,
    /// Set at the end: how many times the command was held while its samples were copied.
    pub(super) holds: &'a mut u64,
}

impl Reading<'_> {
    /// Drain the rings until the child ends (launch), or the process ends or Ctrl-C (attach);
    /// then the last records, after the events are switched off.
    pub(super) fn until_end(mut self) -> Option<Ended> {
        if self.child.is_none() {
            self.attached_cpu.update(self.tasks[0]);
            self.open.fds().for_each(|fd| perf::set_enabled(fd, true));
        }
        // Readable when the child exits, so the end of the run is noticed at once.
        let exit_fd = self.child.and_then(launch::exit_fd);
        let ended = loop {
            self.wait(exit_fd.as_ref().map(|fd| fd.as_fd()));
            let stop = self.forward_signals();
            self.copier.flush();
            streams::drain(
                &mut self.open.rings,
                self.tracker.as_deref_mut(),
                self.recorder,
                false,
            );
            if let Some(w) = self.watcher.as_deref_mut() {
                w.tick(self.recorder);
            }
            if let Some(ended) = self.ended(stop) {
                break ended;
            }
        };
        self.open.fds().for_each(|fd| perf::set_enabled(fd, false));
        if self.copier.holding().is_some() {
            self.open.release_hold();
        }
        *self.holds = self.copier.holds();
        drop(self.copier);
        streams::drain(&mut self.open.rings, self.tracker, self.recorder, true);
        ended
    }

    /// Sleep until something is to be read (the copier alone polls the rings; it says when it
    /// has copied something), or at most [`LONGEST_SLEEP_MS`] (less when the watcher asks).
    fn wait(&self, exit_fd: Option<std::os::fd::BorrowedFd<'_>>) {
        let readable = |fd| PollFd::new(fd, PollFlags::POLLIN);
        let mut fds = vec![
            readable(self.signals.fd().as_fd()),
            readable(self.copier.notices().as_fd()),
        ];
        fds.extend(exit_fd.map(readable));
        fds.extend(self.tracker.as_ref().map(|t| readable(t.poll_fd())));
        let watcher = self.watcher.as_deref();
        fds.extend(
            watcher
                .iter()
                .flat_map(|w| w.poll_fds())
                .map(|fd| readable(fd.as_fd())),
        );
        let wait = watcher.map_or(LONGEST_SLEEP_MS, |w| w.sleep_ms().min(LONGEST_SLEEP_MS));
        let _ = poll(&mut fds, PollTimeout::from(wait));
        self.copier.take_notices();
    }

    /// Pass the signals caught on to the launched command; true when an attached run is asked
    /// to end (any terminating signal but SIGPIPE, which is only our own write to a closed pipe).
    fn forward_signals(&self) -> bool {
        let mut stop = false;
        for sig in self.signals.take() {
            match self.child {
                Some(pid) if sig.from_process => {
                    let _ = kill(pid, sig.signal);
                }
                Some(_) => {}
                None => stop |= sig.signal != Signal::SIGPIPE,
            }
        }
        stop
    }

    /// `Some` once the run is over: how the command ended (launch), or `Some(None)` when the
    /// attached process is gone, its events have all hung up, or `stop` was asked.
    fn ended(&mut self, stop: bool) -> Option<Option<Ended>> {
        match self.child {
            Some(pid) => match launch::poll_child(pid) {
                ChildState::Ended(ended) => Some(Some(ended)),
                // A stop by a ring's wake-up, which the copier ends (this one too, at the latest).
                ChildState::Stopped(libc::SIGSTOP) if self.copier.holding().is_some() => {
                    hold::resume(pid);
                    None
                }
                ChildState::Stopped(sig) => {
                    (self.notify)(Notice::Stopped(pid.as_raw() as u32, sig));
                    None
                }
                ChildState::Running => None,
            },
            None => {
                self.attached_cpu.update(self.tasks[0]);
                let gone = kill(Pid::from_raw(self.tasks[0]), None).is_err();
                (stop || gone || self.copier.all_hung()).then_some(None)
            }
        }
    }
}

/// The CPU time of a process that is not our child, followed from `/proc/PID/stat`: read when
/// sampling starts and at every wake-up while the process lives, since it leaves no rusage
/// behind for us when it exits.
#[derive(Default)]
pub(super) struct AttachedCpu {
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

    /// CPU seconds used between the first and the last reading.
    pub(super) fn used(&self) -> Option<f64> {
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
