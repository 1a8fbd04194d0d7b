//! The recorder's side of Python's frames ([`crate::sampler::python`]): each process that maps
//! a CPython interpreter registered with the frame reader, its records matched to their
//! samples by thread and time (from the [`Collector`], which reads the code objects while the
//! process runs), and the frames spliced into the sample's native path.

use std::sync::Arc;

use fxhash::FxHashMap;

use crate::format::addr::Avma;
use crate::format::db::{Frame, ProfileModuleId, PythonCode};
use crate::sampler::python::bpf::PyFrame;
use crate::sampler::python::code::CodeObject;
use crate::sampler::python::collector::Collector;
use crate::sampler::python::early::exec_mappings;
use crate::sampler::python::layout::Interpreter;
use crate::sampler::python::splice::{activations, splice};
use crate::sampler::unwinding::loadmap::AddressSpace;

/// How far from its sample's time the frame reader's record of it may be (ns): the two are
/// stamped in the same interrupt, the record a fraction of a microsecond after the sample
/// (measured: 90 ns to 0.3 µs), and samples of one thread are at least a sampling period
/// (250 µs at 4 kHz) apart.
const MATCH_WINDOW: u64 = 100_000;

/// A process whose interpreter the frame reader knows.
#[derive(Clone)]
struct PyProcess {
    interpreter: Arc<Interpreter>,
    /// The interpreter's module in the profile.
    module: ProfileModuleId,
    /// Its load bias.
    bias: u64,
    /// The processes it was forked from, nearest first.
    ancestors: Vec<u32>,
}

/// Python's frames for the recorder.
pub(crate) struct PythonReader {
    collector: Collector,
    /// Interpreters read from their files, by path (`None`: not one).
    interpreters: FxHashMap<String, Option<Arc<Interpreter>>>,
    processes: FxHashMap<u32, PyProcess>,
    /// The profile's Python functions.
    codes: CodeTable,
    /// Each code object's index in [`PythonReader::codes`], by the address of the collector's
    /// copy of it (held here, so that the address is not another's later).
    ids: FxHashMap<usize, (Arc<CodeObject>, u32)>,
    /// Frames whose code object was freed before it was read.
    freed: u64,
    /// Samples with Python frames spliced into their path, and samples with Python frames
    /// that did not agree with their native path (kept native).
    pub(crate) spliced: u64,
    /// See [`PythonReader::spliced`].
    pub(crate) disagreed: u64,
}

impl PythonReader {
    /// A reader of what `collector` collects.
    pub(crate) fn new(collector: Collector) -> PythonReader {
        PythonReader {
            collector,
            interpreters: FxHashMap::default(),
            processes: FxHashMap::default(),
            codes: CodeTable::default(),
            ids: FxHashMap::default(),
            freed: 0,
            spliced: 0,
            disagreed: 0,
        }
    }

    /// Process `pid` mapped the code of the module file `path` (profile module `module`) at
    /// `start` from file offset `pgoff`: where it is a CPython interpreter of a known version,
    /// tell the frame reader where its threads are.
    pub(crate) fn mapped(
        &mut self,
        pid: u32,
        (path, module): (&str, ProfileModuleId),
        start: u64,
        pgoff: u64,
    ) {
        if self.processes.contains_key(&pid)
            || crate::sampler::python::layout::layout_of(path).is_none()
        {
            return;
        }
        let interpreter = (self.interpreters.entry(path.to_string()))
            .or_insert_with(|| Interpreter::in_file(path).map(Arc::new))
            .clone();
        let Some(interpreter) = interpreter else {
            return;
        };
        let Some(bias) = interpreter.bias(start, pgoff) else {
            return;
        };
        let (config, reading) = (interpreter.config(bias), interpreter.reading(bias));
        if self.collector.shared().register(pid, &config, reading) {
            let process = PyProcess {
                interpreter,
                module,
                bias,
                ancestors: Vec::new(),
            };
            self.processes.insert(pid, process);
        }
    }

    /// Process `pid`, attached to while it runs, has the mappings of `/proc/PID/maps` (its
    /// load map `space` read from them).
    pub(crate) fn adopted(&mut self, pid: u32, space: &AddressSpace) {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        for (start, pgoff, path) in exec_mappings(&maps) {
            if let Some((module, _)) = space.resolve(Avma(start)) {
                self.mapped(pid, (path, module), start, pgoff);
            }
        }
    }

    /// Process `pid` replaced its program (`exec`): its interpreter, if any, is gone.
    pub(crate) fn exec(&mut self, pid: u32) {
        if self.processes.remove(&pid).is_some() {
            self.collector.shared().forget(pid);
        }
    }

    /// Process `child` was forked from `parent`: the same interpreter at the same addresses.
    pub(crate) fn forked(&mut self, parent: u32, child: u32) {
        if let Some(mut p) = self.processes.get(&parent).cloned() {
            p.ancestors.insert(0, parent);
            let mut reading = p.interpreter.reading(p.bias);
            reading.ancestors.clone_from(&p.ancestors);
            let config = p.interpreter.config(p.bias);
            if self.collector.shared().register(child, &config, reading) {
                self.processes.insert(child, p);
            }
        }
    }

    /// `path` (outermost first) of thread `tid` of process `pid` sampled at `time`, with its
    /// Python frames spliced in where the frame reader recorded them and they agree with it;
    /// `complete`: the path reaches the thread's root. `None` leaves the path as it is.
    pub(crate) fn splice(
        &mut self,
        (pid, tid, time): (u32, u32, u64),
        path: &[Frame],
        complete: bool,
    ) -> Option<Vec<Frame>> {
        if !self.processes.contains_key(&pid) {
            return None;
        }
        let record = self.collector.record_for(tid, time, MATCH_WINDOW)?;
        if record.frames.is_empty() {
            return None;
        }
        let runs: Vec<Vec<Frame>> = activations(&record.frames)
            .iter()
            .map(|run| run.iter().map(|f| self.frame(pid, f)).collect())
            .collect();
        let p = &self.processes[&pid];
        let (module, evaluator) = (p.module, p.interpreter.evaluator.clone());
        let is_evaluator = |f: &Frame| match *f {
            Frame::Code {
                module: m,
                addr,
                kind,
            } => m == module && evaluator.contains(&kind.lookup(addr).0),
            _ => false,
        };
        match splice(path, is_evaluator, &runs, complete) {
            Some(spliced) => {
                self.spliced += 1;
                Some(spliced)
            }
            None => {
                self.disagreed += 1;
                None
            }
        }
    }

    /// The Python frame of `f` in process `pid`: of its code object where that was read
    /// while still the one the frame ran, else of [`FREED`].
    fn frame(&mut self, pid: u32, f: &PyFrame) -> Frame {
        let Some(object) = self.collector.code_of(pid, f) else {
            self.freed += 1;
            let freed = PythonCode {
                name: FREED.into(),
                file: String::new(),
                first_line: 0,
            };
            return Frame::Python {
                code: self.codes.id(freed),
                line: 0,
            };
        };
        let codes = &mut self.codes;
        let (_, id) = *(self.ids.entry(Arc::as_ptr(&object) as usize))
            .or_insert_with(|| (Arc::clone(&object), codes.id(object.function())));
        Frame::Python {
            code: id,
            line: object.line(f.instr),
        }
    }

    /// The profile's Python functions, and a line for the run's summary.
    pub(crate) fn finish(self) -> (Vec<PythonCode>, Option<String>) {
        let line = (self.spliced + self.disagreed > 0).then(|| {
            format!(
                "Python: {} samples with their Python frames and lines ({} frames of code freed \
                 before it was read), {} whose Python frames did not match their native stack \
                 (kept native)",
                self.spliced, self.freed, self.disagreed
            )
        });
        (self.codes.list, line)
    }
}

/// The name of a Python frame whose code object was freed (and its memory perhaps reused)
/// before hpcrun-rs read it: a module's top-level code run once at its import, say.
pub(crate) const FREED: &str = "<Python code freed before it was read>";

/// The profile's Python functions, each once.
#[derive(Default)]
struct CodeTable {
    list: Vec<PythonCode>,
    ids: FxHashMap<PythonCode, u32>,
}

impl CodeTable {
    /// The index of `code`, added where new.
    fn id(&mut self, code: PythonCode) -> u32 {
        let next = self.list.len() as u32;
        let id = *self.ids.entry(code.clone()).or_insert(next);
        if id == next {
            self.list.push(code);
        }
        id
    }
}
