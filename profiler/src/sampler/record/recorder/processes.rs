//! Side-band records of the processes measured: a thread's or process's new command name (and
//! with `exec`, a new program image), and a new process forked from a known one.

use linux_perf_event_reader::{CommOrExecRecord, ForkOrExitRecord};

use super::{ProcessState, Recorder};
use crate::format::trace::TraceLog;
use crate::sampler::data::liveheap::LiveHeap;
use crate::sampler::unwinding::loadmap::AddressSpace;
use crate::sampler::unwinding::stubs::Stubs;

impl Recorder {
    /// Learn about a process that existed before sampling started (attach mode).
    pub fn adopt_process(&mut self, pid: u32) {
        let comm = read_comm(pid, pid);
        let state = self.process(pid);
        state.comm = comm;
        let mut space = std::mem::take(&mut state.space);
        space.load_proc_maps(pid, &mut self.modules);
        if let Some(py) = &mut self.python {
            py.adopted(pid, &space);
        }
        self.process(pid).space = space;
        if self.trace.is_none() && self.modules.has_openmp_runtime() {
            self.trace = self.openmp_trace.map(TraceLog::new);
        }
    }

    pub(super) fn comm(&mut self, c: &CommOrExecRecord<'_>) {
        let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
        let (pid, tid) = (c.pid as u32, c.tid as u32);
        if let (true, Some(py)) = (c.is_execve, &mut self.python) {
            py.exec(pid);
        }
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
        if pid == ppid {
            return; // a new thread
        }
        // Known already with its parent: its fork was seen before.
        if self.processes.get(&pid).is_some_and(|p| p.ppid != 0) {
            return;
        }
        let parent = self.processes.get(&ppid).cloned().unwrap_or_default();
        match self.processes.get_mut(&pid) {
            // Known only from a sample that came before its fork record (the child's CPU's
            // ring copied out ahead of its parent's): it gets its parent now, and the parent's
            // address space where it has none of its own yet. Without the parent, the code its
            // parent compiled (CPython's trampolines) was left unnamed.
            Some(known) => {
                known.ppid = ppid;
                if known.space.is_empty() {
                    known.space = parent.space;
                    known.heap = parent.heap;
                    known.stubs = parent.stubs;
                }
            }
            None => {
                let child = ProcessState { ppid, ..parent };
                self.processes.insert(pid, child);
            }
        }
        if let Some(py) = &mut self.python {
            py.forked(ppid, pid);
        }
    }
}

/// A thread's command name from `/proc` (empty if it is gone).
pub(super) fn read_comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}
