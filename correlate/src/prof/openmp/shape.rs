//! Where each node of the merged tree stands with respect to the OpenMP runtime, read from the
//! tree alone: the runtime's entries called by the program (a master's `GOMP_parallel`, a
//! `GOMP_barrier`), the bodies below them, and the worker threads' start paths (system frames,
//! then the runtime, then a body, or the runtime waiting for work).
//!
//! A body is the first frame of the program's own code that the runtime calls. It is usually
//! the outlined function (`f._omp_fn.0`, `.omp_outlined.`), but an outlined function that only
//! calls another ends in a tail call and leaves the stack, so the callee stands for it; bodies
//! are matched by that frame's name, whatever it is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fxhash::FxHashSet;

use crate::db::database::Database;
use crate::db::ids::DbNodeId;
use crate::db::node::NodeKind;
use crate::prof::openmp::{runtime, spin};

/// The runtime chain a node is in: the frames of the runtime between the program's code (or a
/// thread's start) and the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chain {
    /// Not in the runtime: the program's own code (or the system frames of a thread's start).
    Outside,
    /// In the runtime, entered from the program by a call to this node's frame.
    Entered(DbNodeId),
    /// In the runtime on a worker thread's start path, called by no code of the program.
    Worker,
}

/// The two kinds of time the runtime spends (the metrics `omp-idle` and `omp-overhead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// Waiting for other threads.
    Idle,
    /// The runtime's own work.
    Overhead,
}

/// The place of node `id` below a node placed `above`, and, where `id` is a body the master's
/// side ran, the runtime entry that ran it.
fn step(
    db: &Database,
    runtime_module: &[bool],
    above: Place,
    id: DbNodeId,
) -> (Place, Option<DbNodeId>) {
    let node = &db.nodes[id.index()];
    let mut place = above;
    let module = node.module.map(|m| m.index());
    let in_runtime = module.is_some_and(|m| runtime_module[m]);
    let system = module.is_some_and(|m| runtime::is_system(&db.modules[m].path));
    match node.kind {
        NodeKind::Partial => place.partial = true,
        _ if place.partial || !node.kind.is_frame() || node.kind == NodeKind::Kernel => {}
        _ if in_runtime => {
            if above.chain == Chain::Outside {
                place.chain = match above.system_only {
                    true => Chain::Worker,
                    false => Chain::Entered(id),
                };
                place.entry = Some(id).filter(|_| !above.system_only);
            }
        }
        // The C library called by the runtime (memory, threads) is still the runtime's.
        _ if system && above.chain != Chain::Outside => {}
        _ => {
            // The program's code called by the runtime: a body (the outlined function, or what
            // it tail-called).
            place.chain = Chain::Outside;
            place.system_only = above.system_only && system;
            match above.chain {
                Chain::Entered(e) if above.worker_body.is_none() => return (place, Some(e)),
                Chain::Worker if above.worker_body.is_none() => place.worker_body = Some(id),
                _ => {}
            }
        }
    }
    (place, None)
}

/// What one node is, as far as the runtime goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    /// The runtime chain the node is in.
    pub chain: Chain,
    /// The outlined body a worker thread's start path ran this node in, if any (the outermost:
    /// nested bodies move with it).
    pub worker_body: Option<DbNodeId>,
    /// The nearest node at or above this one where the program called into the runtime.
    pub entry: Option<DbNodeId>,
    /// Whether every frame at or above this one is in a system library (a thread's start).
    system_only: bool,
    /// Whether the node is under `<partial call paths>`, whose top is unknown: left alone.
    partial: bool,
}

impl Place {
    /// The root's place: outside the runtime, nothing above it but the system.
    const ROOT: Place = Place {
        chain: Chain::Outside,
        worker_body: None,
        entry: None,
        system_only: true,
        partial: false,
    };
}

/// What a body is known by: its procedure (name, module, file and first line; not where it was
/// called from). The outlined functions of one source function can share a name (`f(int)
/// [clone ._omp_fn.0]` and `._omp_fn.1` demangle alike), not a first line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Body {
    name: String,
    module: Option<usize>,
    file: Option<usize>,
    line: Option<u32>,
}

impl Body {
    /// The body whose first frame is `node`.
    pub(crate) fn of(db: &Database, node: DbNodeId) -> Body {
        let n = &db.nodes[node.index()];
        Body {
            name: n.name.clone(),
            module: n.module.map(|m| m.index()),
            file: n.file.map(|f| f.index()),
            line: n.line,
        }
    }
}

/// The runtime's view of the whole tree.
pub(crate) struct Shape {
    /// Per node, its place.
    pub places: Vec<Place>,
    /// Per outlined body's name, the runtime entries the program ran it from (the master's
    /// side: a `GOMP_parallel` call in its calling context), in node order, each with the
    /// master's body node there (where a worker's body is grafted, merging with it).
    pub entries_of: BTreeMap<Body, Vec<(DbNodeId, DbNodeId)>>,
    /// Whether each node is a runtime entry that ran an outlined body (a parallel region).
    pub region: Vec<bool>,
    /// The runtime's unnamed code in spin-wait loops ([`crate::prof::openmp::spin`]).
    spinning: FxHashSet<DbNodeId>,
}

impl Shape {
    /// Read the tree of `db`; `runtime_module[m]` says whether module `m` is an OpenMP runtime.
    /// `binaries` holds each module's file on this machine (the runtime's code is read there).
    pub(crate) fn of(
        db: &Database,
        runtime_module: &[bool],
        binaries: &[Option<PathBuf>],
    ) -> Shape {
        let spinning = spin::spinning(db, runtime_module, binaries);
        let mut places: Vec<Place> = Vec::with_capacity(db.nodes.len());
        let mut entries_of: BTreeMap<Body, Vec<(DbNodeId, DbNodeId)>> = BTreeMap::new();
        for (i, node) in db.nodes.iter().enumerate() {
            let id = DbNodeId::from_index(i);
            let above = match i {
                0 => Place::ROOT,
                _ => places[node.parent.index()],
            };
            let (place, entered_by) = step(db, runtime_module, above, id);
            if let Some(e) = entered_by {
                let list = entries_of.entry(Body::of(db, id)).or_default();
                if list.iter().all(|&(other, _)| other != e) {
                    list.push((e, id));
                }
            }
            places.push(place);
        }
        // A body that a master also ran inside a task's creation or a wait (a task run at once
        // by the thread that made it, or while that thread waited) is, on the workers, the
        // work of the parallel region around it: where another entry runs it, those go.
        for list in entries_of.values_mut() {
            let regions: Vec<_> = (list.iter().copied())
                .filter(|&(e, _)| !runtime::runs_tasks(&db.nodes[e.index()].name))
                .collect();
            if !regions.is_empty() && regions.len() < list.len() {
                *list = regions;
            }
        }
        let mut region = vec![false; db.nodes.len()];
        for &(e, _) in entries_of.values().flatten() {
            region[e.index()] = true;
        }
        Shape {
            places,
            entries_of,
            region,
            spinning,
        }
    }

    /// Whether `node` is on a worker thread's side: in a worker's start path or in a body it
    /// ran (such samples say nothing of where the program was).
    pub(crate) fn is_worker_side(&self, node: DbNodeId) -> bool {
        let p = &self.places[node.index()];
        p.chain == Chain::Worker || p.worker_body.is_some()
    }

    /// The parallel region `node` is in, as one of `candidates` (runtime entries of one
    /// outlined body): the nearest entry above it that is among them.
    pub(crate) fn region_among(
        &self,
        db: &Database,
        node: DbNodeId,
        candidates: &[(DbNodeId, DbNodeId)],
    ) -> Option<DbNodeId> {
        let mut entry = self.places[node.index()].entry;
        while let Some(e) = entry {
            if candidates.iter().any(|&(c, _)| c == e) {
                return Some(e);
            }
            entry = self.places[db.nodes[e.index()].parent.index()].entry;
        }
        None
    }

    /// The parallel region `node` is in (the nearest entry above it that ran a body).
    pub(crate) fn region_of(&self, db: &Database, node: DbNodeId) -> Option<DbNodeId> {
        let mut entry = self.places[node.index()].entry;
        while let Some(e) = entry {
            if self.region[e.index()] {
                return Some(e);
            }
            entry = self.places[db.nodes[e.index()].parent.index()].entry;
        }
        None
    }

    /// What time at `node` is, when it is the runtime's: waiting ([`Runtime::Idle`]: a
    /// spin-wait loop, a worker's start path outside any body (waiting for work or at a
    /// region's end), under an entry that waits (a barrier, a lock), or in a region's entry
    /// outside its body (the master at its end)), or else its own work
    /// ([`Runtime::Overhead`]: handing out loop chunks, creating tasks, starting teams).
    pub(crate) fn runtime_time(&self, db: &Database, node: DbNodeId) -> Option<Runtime> {
        if self.spinning.contains(&node) {
            return Some(Runtime::Idle);
        }
        let p = &self.places[node.index()];
        let waits = match p.chain {
            Chain::Worker => p.worker_body.is_none(),
            Chain::Entered(e) => {
                self.region[e.index()] || runtime::is_wait(&db.nodes[e.index()].name)
            }
            Chain::Outside => return None,
        };
        Some(if waits {
            Runtime::Idle
        } else {
            Runtime::Overhead
        })
    }
}
