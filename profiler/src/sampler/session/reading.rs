//! The reader's loop: wake when a source of records has something ([`Source`]), a signal came
//! or the command ended; merge every source's records into the recorder in time order; stop
//! when the command ends (launch) or the process ends or the user asks (attach).

use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::sampler::capture::hold;
use crate::sampler::capture::launch::{self, ChildState, Ended};
use crate::sampler::capture::signals::SignalPipe;
use crate::sampler::record::recorder::Recorder;
use crate::sampler::results::report::Notice;
use crate::sampler::sources::{merge, Source, LONGEST_SLEEP_MS};

/// Everything the loop reads from and writes to.
pub(super) struct Reading<'a, 's> {
    /// Where records come from, in the order that breaks ties of time.
    pub(super) sources: Vec<&'s mut dyn Source>,
    pub(super) recorder: &'a mut Recorder,
    pub(super) signals: &'a SignalPipe,
    /// The launched command; none when attached.
    pub(super) child: Option<Pid>,
    /// Whether the command is held while its samples are copied ([`hold`]).
    pub(super) held: bool,
    /// The process attached to: its first thread.
    pub(super) tasks: &'a [i32],
    pub(super) notify: fn(Notice),
    pub(super) attached_cpu: &'a mut AttachedCpu,
}

impl Reading<'_, '_> {
    /// Merge the sources until the child ends (launch), or the process ends or Ctrl-C
    /// (attach); then the last records, once every source has finished.
    pub(super) fn until_end(mut self) -> Option<Ended> {
        if self.child.is_none() {
            self.attached_cpu.update(self.tasks[0]);
        }
        // Readable when the child exits, so the end of the run is noticed at once.
        let exit_fd = self.child.and_then(launch::exit_fd);
        let ended = loop {
            self.wait(exit_fd.as_ref().map(|fd| fd.as_fd()));
            let stop = self.forward_signals();
            merge(&mut self.sources, self.recorder, false);
            if let Some(ended) = self.ended(stop) {
                break ended;
            }
        };
        self.sources.iter_mut().for_each(|s| s.finish());
        merge(&mut self.sources, self.recorder, true);
        ended
    }

    /// Sleep until a source has something, a signal came or the child exited, or at most as
    /// long as the sources allow.
    fn wait(&self, exit_fd: Option<std::os::fd::BorrowedFd<'_>>) {
        let readable = |fd| PollFd::new(fd, PollFlags::POLLIN);
        let mut fds = vec![readable(self.signals.fd().as_fd())];
        fds.extend(exit_fd.map(readable));
        fds.extend(
            (self.sources.iter())
                .flat_map(|s| s.ready_fds())
                .map(readable),
        );
        let wait = (self.sources.iter().map(|s| s.sleep_ms())).fold(LONGEST_SLEEP_MS, u16::min);
        let _ = poll(&mut fds, PollTimeout::from(wait));
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
    /// attached process is gone, nothing more can come from the sources, or `stop` was asked.
    fn ended(&mut self, stop: bool) -> Option<Option<Ended>> {
        match self.child {
            Some(pid) => match launch::poll_child(pid) {
                ChildState::Ended(ended) => Some(Some(ended)),
                // A tripwire's stop: the copier continues the command after its copy; doing it
                // here too covers a stop that came after the copier looked.
                ChildState::Stopped(libc::SIGSTOP) if self.held => {
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
                let exhausted = self.sources.iter().all(|s| s.exhausted());
                (stop || gone || exhausted).then_some(None)
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
