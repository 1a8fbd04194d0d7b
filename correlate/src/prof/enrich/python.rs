//! Python functions in the calling context, in place of the interpreter's frames.
//!
//! CPython 3.12 and later, with its perf trampolines on (`hpcrun-rs` turns them on), calls
//! each Python function through a trampoline of its own, named in the process's perf map
//! (`py::fib:/app/fib.py`); hpcrun-rs unwinds through them (see `profiler`'s stubs), so a path
//! holds, for each Python call, the trampoline and the interpreter's frames that run the
//! function and make its calls. While the profile's tree is inserted into the database:
//!
//! - a trampoline becomes the Python function (`fib`, file `/app/fib.py`);
//! - the evaluator it calls (`_PyEval_EvalFrameDefault`) is the function running: its samples
//!   are the function's own, its frame is left out;
//! - the interpreter's frames after that (the call machinery: `PyObject_Vectorcall`, ...) are
//!   left out of every path that goes on to another Python function or to native code outside
//!   the interpreter (a C extension, a `ctypes` call), so a path reads `main > solve > kernel`
//!   with the native frames of extensions interleaved where they are; where a path ends in the
//!   interpreter (time spent in its own C code: a dict lookup, an allocation), its frames stay,
//!   below the Python function.
//!
//! The interpreter is the module named `libpython*` or `python*` (a statically linked one).
//! Nothing here guesses: every Python frame is a trampoline the walk went through.

use profiler::db::{CctNode, Frame};

use crate::db::ids::DbNodeId;
use crate::db::node::{NodeKey, NodeKind};
use crate::prof::enrich::{Enricher, ProfileMapping};

/// One thread's tree being inserted: its nodes, where the profile's tables went, its process.
pub(super) struct ThreadTree<'p> {
    /// The thread's calling-context tree, parents first.
    pub(super) nodes: &'p [CctNode],
    /// Where the profile's modules and metrics went in the database.
    pub(super) map: &'p ProfileMapping,
    /// The thread's process (whose JIT map names its trampolines).
    pub(super) pid: u32,
}

/// What one node of a profile's tree is, for the folding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Kept as it is.
    Native,
    /// A Python function (a trampoline).
    Python,
    /// The interpreter's code, left out of paths that go on to a Python function (and, where
    /// `true`, a Python function is above it: also of paths that go on to native code).
    Interpreter(bool),
}

/// The folding of one thread's tree, node by node (parents first).
#[derive(Debug, Default)]
pub(super) struct Fold {
    role: Vec<Role>,
    /// Where a kept frame below the node attaches: its own database node, or for the
    /// interpreter's frames the Python function above them.
    anchor: Vec<DbNodeId>,
    /// Where the node's own samples land, once known (the interpreter's frames get one only
    /// when they or a node below them has samples).
    own: Vec<Option<DbNodeId>>,
    /// What is above the node, for the summary's counts.
    above: Vec<Above>,
}

/// What is above a node of a profile's tree (the node included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Above {
    /// Neither a Python function nor the evaluator.
    Nothing,
    /// A Python function.
    Python,
    /// The evaluator, without a Python function above it.
    BareEvaluator,
}

impl Fold {
    /// Per node, where its samples and data references landed: its own node, or where the
    /// frames below it attach.
    pub(super) fn placed(self) -> Vec<DbNodeId> {
        (self.own.into_iter().zip(self.anchor))
            .map(|(own, anchor)| own.unwrap_or(anchor))
            .collect()
    }
}

/// The interpreter's evaluator, whose frames run one Python function each.
const EVALUATOR: &str = "_PyEval_EvalFrameDefault";

/// Whether the module at `path` is a CPython interpreter.
pub(super) fn is_interpreter(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libpython") || name.starts_with("python")
}

impl Enricher<'_> {
    /// Insert node `i` of a thread's tree (`nodes`; its parent already placed) with Python
    /// functions folded in; returns where its own samples land.
    pub(super) fn fold_node(
        &mut self,
        fold: &mut Fold,
        tree: &ThreadTree<'_>,
        i: usize,
    ) -> DbNodeId {
        let (nodes, map, pid) = (tree.nodes, tree.map, tree.pid);
        let node = &nodes[i];
        let parent = (i > 0).then(|| node.parent.index());
        let (up, base, above) = parent
            .map_or((Role::Native, DbNodeId::ROOT, Above::Nothing), |p| {
                (fold.role[p], fold.anchor[p], fold.above[p])
            });
        let samples = node.costs.first().map_or(0, |c| c.samples);
        let sampled = node.costs.iter().any(|c| c.samples > 0 || c.value > 0);
        let above = match above {
            Above::Nothing if self.is_evaluator(node.frame, map) => Above::BareEvaluator,
            other => other,
        };
        let placed = if let Some(keys) = self.python_keys(node.frame, pid) {
            // Any run of the interpreter's frames above is the call machinery: left out.
            let here = self.insert_chain(base, &keys);
            push(fold, Role::Python, here, Some(here), Above::Python)
        } else if self.in_interpreter(node.frame, map) {
            match up {
                // The evaluator running the function: its samples are the function's.
                Role::Python => push(fold, Role::Interpreter(true), base, Some(base), above),
                Role::Interpreter(_) | Role::Native => {
                    let after_python = matches!(up, Role::Interpreter(true));
                    push(fold, Role::Interpreter(after_python), base, None, above);
                    match sampled {
                        true => self.place_run(fold, tree, i),
                        false => base,
                    }
                }
            }
        } else {
            let base = match (up, parent) {
                // Native code called by the interpreter outside Python: the run stays.
                (Role::Interpreter(false), Some(p)) => self.place_run(fold, tree, p),
                _ => base,
            };
            let here = self.insert_frame(base, node.frame, map, pid);
            push(fold, Role::Native, here, Some(here), above)
        };
        match fold.above[i] {
            Above::Python => self.python.samples += samples,
            Above::BareEvaluator => self.python.unnamed += samples,
            Above::Nothing => {}
        }
        placed
    }

    /// Insert the run of the interpreter's frames that ends at node `i` (from below the last
    /// node placed above it), where the samples of node `i` and its native callees land: a
    /// path that ends in the interpreter, or leaves it for native code outside Python, keeps
    /// its frames.
    fn place_run(&mut self, fold: &mut Fold, tree: &ThreadTree<'_>, i: usize) -> DbNodeId {
        let (nodes, map, pid) = (tree.nodes, tree.map, tree.pid);
        if let Some(at) = fold.own[i] {
            return at;
        }
        let mut run = vec![i];
        let mut j = nodes[i].parent.index();
        while fold.own[j].is_none() {
            run.push(j);
            j = nodes[j].parent.index();
        }
        let mut at = fold.own[j].unwrap_or(DbNodeId::ROOT);
        for &k in run.iter().rev() {
            at = self.insert_frame(at, nodes[k].frame, map, pid);
            fold.own[k] = Some(at);
        }
        at
    }

    /// The Python function (with its line, where the frame was read at the sample) a frame
    /// is: a frame of the interpreter read by hpcrun-rs, or a trampoline the process's perf
    /// map names.
    fn python_keys(&mut self, frame: Frame, pid: u32) -> Option<Vec<NodeKey>> {
        let symbol = match frame {
            Frame::Python { code, line } => return Some(self.python_frame(code, line).to_vec()),
            Frame::Unmapped { avma, kind } => self.jit.symbol(pid, kind.lookup(avma).0)?,
            Frame::Jit { avma, kind, load } => {
                self.jit.symbol_of_load(pid, load, kind.lookup(avma).0)?
            }
            _ => return None,
        };
        let name = symbol.name.strip_prefix("py::")?.to_string();
        let file = (symbol.file.as_deref()).map(|f| self.db.intern_file(&mut self.files, f));
        Some(vec![NodeKey {
            file,
            ..NodeKey::pseudo(NodeKind::Procedure, name)
        }])
    }

    /// The Python function of the profile's code `code` (its name, file and first line) and
    /// its line `line` below it.
    pub(super) fn python_frame(&mut self, code: u32, line: u32) -> [NodeKey; 2] {
        let (name, file, first) = match self.python_code.get(code as usize) {
            Some(c) => (c.name.clone(), c.file.as_str(), c.first_line),
            None => (format!("<python code {code}>"), "", 0),
        };
        let file = Some(self.db.intern_file(&mut self.files, file));
        let function = NodeKey {
            file,
            line: Some(first),
            ..NodeKey::pseudo(NodeKind::Procedure, name)
        };
        let statement = NodeKey {
            file,
            line: Some(line),
            ..NodeKey::pseudo(NodeKind::Statement, "")
        };
        [function, statement]
    }

    /// Whether a frame is code of a CPython interpreter.
    fn in_interpreter(&self, frame: Frame, map: &ProfileMapping) -> bool {
        match frame {
            Frame::Code { module, .. } => self.interpreters[map.modules[module.index()].index()],
            _ => false,
        }
    }

    /// Whether a frame is in the interpreter's evaluator.
    fn is_evaluator(&mut self, frame: Frame, map: &ProfileMapping) -> bool {
        let Frame::Code { module, addr, kind } = frame else {
            return false;
        };
        let module = map.modules[module.index()];
        if !self.interpreters[module.index()] {
            return false;
        }
        let keys = self.expand(module, kind.lookup(addr));
        keys.first().is_some_and(|k| k.name == EVALUATOR)
    }
}

/// Record a node's role, places and what is above it; returns where its own samples land.
fn push(
    fold: &mut Fold,
    role: Role,
    anchor: DbNodeId,
    own: Option<DbNodeId>,
    above: Above,
) -> DbNodeId {
    fold.role.push(role);
    fold.anchor.push(anchor);
    fold.own.push(own);
    fold.above.push(above);
    own.unwrap_or(anchor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_are_known_by_their_file_names() {
        assert!(is_interpreter("/usr/lib/libpython3.12.so.1.0"));
        assert!(is_interpreter("/usr/bin/python3.12"));
        assert!(!is_interpreter("/usr/lib/x86_64-linux-gnu/libffi.so.8"));
        assert!(!is_interpreter("/app/mypython/solver"));
    }
}
