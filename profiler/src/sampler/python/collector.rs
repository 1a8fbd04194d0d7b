//! The frame reader's records collected while the program runs. The recorder reads samples
//! tens of milliseconds late (the rings wake it when half full), and by then a code object a
//! frame ran may be freed, or its process ended (a short-lived worker, the run's last
//! moments). A thread of its own drains the frame reader's ring every millisecond and reads
//! each new code object at once, while the process is there; the recorder takes the records
//! and code objects from it (draining too, for the records of its last samples).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use fxhash::FxHashMap;

use crate::sampler::python::bpf::{Configs, PyFrame, PyFrames, PyRecord};
use crate::sampler::python::code::{read_code, CodeObject};
use crate::sampler::python::layout::{Reading, CONFIG_SIZE};

/// A frame's code object as the frame saw it: (process, address, name pointer, first line).
type CodeKey = (u32, u64, u64, u32);

/// What the collecting thread and the recorder share.
pub(crate) struct Shared {
    ring: Mutex<RingBuf<MapData>>,
    configs: Mutex<Configs>,
    processes: Mutex<FxHashMap<u32, Reading>>,
    /// Code objects read, by how frames saw them (`None`: no longer that code object).
    code: Mutex<FxHashMap<CodeKey, Option<Arc<CodeObject>>>>,
    /// Per thread, the records not yet matched to a sample, oldest first.
    records: Mutex<FxHashMap<u32, VecDeque<PyRecord>>>,
}

/// A lock, taken even from a thread that panicked holding it (the data stays usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Tell the frame reader where process `pid`'s interpreter keeps its threads and frames
    /// (`config`), and how to read its code objects; whether the kernel took it.
    pub(crate) fn register(&self, pid: u32, config: &[u8; CONFIG_SIZE], reading: Reading) -> bool {
        let taken = lock(&self.configs).insert(pid, config, 0).is_ok();
        if taken {
            lock(&self.processes).insert(pid, reading);
        }
        taken
    }

    /// Forget process `pid` (it replaced its program): the frame reader no longer reads it.
    pub(crate) fn forget(&self, pid: u32) {
        let _ = lock(&self.configs).remove(&pid);
        lock(&self.processes).remove(&pid);
        lock(&self.code).retain(|&(p, ..), _| p != pid);
    }

    /// Everything the frame reader wrote since the last call, its new code objects read.
    fn drain(&self) {
        let mut ring = lock(&self.ring);
        while let Some(item) = ring.next() {
            let Some(record) = PyRecord::parse(&item) else {
                continue;
            };
            for f in record.frames.iter().filter(|f| f.code != 0) {
                self.code_of(record.pid, f);
            }
            lock(&self.records)
                .entry(record.tid)
                .or_default()
                .push_back(record);
        }
    }

    /// The code object frame `f` of process `pid` ran, read now if it was not yet (`None`:
    /// it no longer is that code object, in the process or those it was forked from).
    fn code_of(&self, pid: u32, f: &PyFrame) -> Option<Arc<CodeObject>> {
        let key = (pid, f.code, f.name, f.first_line);
        if let Some(known) = lock(&self.code).get(&key) {
            return known.clone();
        }
        let reading = lock(&self.processes).get(&pid)?.clone();
        let read = (std::iter::once(pid).chain(reading.ancestors))
            .filter_map(|from| read_code(from, reading.layout, reading.code_type, f.code))
            .find(|c| c.name_at == f.name && c.first_line == f.first_line)
            .map(Arc::new);
        lock(&self.code).insert(key, read.clone());
        read
    }
}

/// The collecting thread and what it shares.
pub(crate) struct Collector {
    frames: PyFrames,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    /// Start collecting the records of the frame reader loaded as `frames` (with its map of
    /// processes and its ring).
    pub(crate) fn start((frames, configs, ring): (PyFrames, Configs, RingBuf<MapData>)) -> Self {
        let shared = Arc::new(Shared {
            ring: Mutex::new(ring),
            configs: Mutex::new(configs),
            processes: Mutex::default(),
            code: Mutex::default(),
            records: Mutex::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (s, halt) = (Arc::clone(&shared), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("hpcrun-pyframes".into())
            .spawn(move || {
                while !halt.load(Ordering::Relaxed) {
                    s.drain();
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .ok();
        Collector {
            frames,
            shared,
            stop,
            thread,
        }
    }

    /// What the collecting thread shares, for registering processes.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Run the frame reader at every sample of the event `event`.
    pub(crate) fn attach(&mut self, event: &std::os::fd::OwnedFd) -> std::io::Result<()> {
        self.frames.attach(event)
    }

    /// The record of thread `tid`'s sample at `time`, if the frame reader wrote one within
    /// `window` ns of it; older records of the thread are dropped.
    pub(crate) fn record_for(&self, tid: u32, time: u64, window: u64) -> Option<PyRecord> {
        self.shared.drain();
        let mut records = lock(&self.shared.records);
        let queue = records.get_mut(&tid)?;
        while queue.front().is_some_and(|r| r.time + window < time) {
            queue.pop_front();
        }
        match queue.front() {
            Some(r) if r.time.abs_diff(time) <= window => queue.pop_front(),
            _ => None,
        }
    }

    /// The code object frame `f` of process `pid` ran (see [`Shared`]).
    pub(crate) fn code_of(&self, pid: u32, f: &PyFrame) -> Option<Arc<CodeObject>> {
        self.shared.code_of(pid, f)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
