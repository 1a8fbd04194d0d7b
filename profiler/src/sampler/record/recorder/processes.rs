//! Side-band records of the processes measured: a thread's or process's new command name (and
//! with `exec`, a new program image), and a new process forked from a known one.

use linux_perf_event_reader::{CommOrExecRecord, ForkOrExitRecord};

use super::{ProcessState, Recorder};
use crate::sampler::data::liveheap::LiveHeap;
use crate::sampler::unwinding::loadmap::AddressSpace;
use crate::sampler::unwinding::stubs::Stubs;

impl Recorder {
    pub(super) fn comm(&mut self, c: &CommOrExecRecord<'_>) {
        let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
        let (pid, tid) = (c.pid as u32, c.tid as u32);
        let process = self.process(pid);
        if c.is_execve {
            // A new program image: the old mappings and heap are gone.
            process.space = AddressSpace::default();
            process.heap = LiveHeap::default();
            process.stubs = Stubs::default();
        }
        if pid == tid {
            process.comm = name.clone();
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            t.comm = name;
        }
    }

    pub(super) fn fork(&mut self, f: &ForkOrExitRecord) {
        let (pid, ppid) = (f.pid as u32, f.ppid as u32);
        if pid == ppid || self.processes.contains_key(&pid) {
            return; // a new thread, or already known
        }
        let child = ProcessState {
            ppid,
            ..self.processes.get(&ppid).cloned().unwrap_or_default()
        };
        self.processes.insert(pid, child);
    }
}

/// A thread's command name from `/proc` (empty if it is gone).
pub(super) fn read_comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}
