//! The calling-context tree as `profile.db` stores it: nodes in insertion order pointing at
//! their parents, each with what it stands for (a [`Frame`]) and its exclusive [`Cost`] per
//! event. The parts of the format that attach costs to contexts (data references, traces) name
//! nodes by [`CctNodeId`]; [`crate::format::db`] holds one tree per thread.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::format::addr::{Address, Avma, Svma};

crate::arena_index! {
    /// Index of a module in [`Profile::modules`](crate::format::db::Profile::modules) (profile side: the database's module ids in
    /// `correlate` are another table).
    pub struct ProfileModuleId;
}

crate::arena_index! {
    /// Index of a node in [`Cct::nodes`]; node 0 ([`CctNodeId::ROOT`]) is the thread's root.
    pub struct CctNodeId;
}

impl CctNodeId {
    /// The thread's root, `nodes[0]`.
    pub const ROOT: CctNodeId = CctNodeId(0);
}

/// A calling-context tree: nodes in insertion order, each pointing at its parent.
///
/// Node 0 is the root. Costs are exclusive (what was sampled exactly at that node); inclusive
/// costs are sums over subtrees and are computed by the correlator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cct {
    /// The nodes; `nodes[0]` is the root.
    pub nodes: Vec<CctNode>,
}

/// One calling context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CctNode {
    /// Parent node (the root is its own parent).
    pub parent: CctNodeId,
    /// What this node stands for.
    pub frame: Frame,
    /// Exclusive cost per event, parallel to [`Profile::events`](crate::format::db::Profile::events).
    pub costs: Vec<Cost>,
}

/// Samples and their summed periods for one event at one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Number of samples.
    pub samples: u64,
    /// Sum of the samples' periods, in the event's unit.
    pub value: u64,
}

/// Costs add saturating: a sum too large for a `u64` stays at `u64::MAX` instead of wrapping
/// around to a small, plausible-looking number.
impl Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost {
            samples: self.samples.saturating_add(other.samples),
            value: self.value.saturating_add(other.value),
        }
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), Add::add)
    }
}

impl Cost {
    /// Add `other` to `sums` element by element (one cost per event).
    pub fn add_each(sums: &mut [Cost], other: &[Cost]) {
        for (s, o) in sums.iter_mut().zip(other) {
            *s += *o;
        }
    }
}

/// What a calling-context node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Frame {
    /// The thread's root.
    Root,
    /// The `<partial call paths>` root: paths below it could not be unwound to the thread's root.
    Partial,
    /// An address in a known module. `kind` tells whether it was sampled or is a return address.
    Code {
        /// The module.
        module: ProfileModuleId,
        /// Link-time address in the module's file.
        addr: Svma,
        /// Sampled instruction pointer or return address.
        kind: AddrKind,
    },
    /// An address in no known module (JIT code, an unmapped page): the runtime address.
    Unmapped {
        /// Runtime address in the process.
        avma: Avma,
        /// Sampled instruction pointer or return address.
        kind: AddrKind,
    },
    /// Time spent in the kernel on behalf of the user context above it.
    Kernel,
    /// Why a thread was off the CPU (`off-cpu`), below the `<kernel>` frame of the context it
    /// switched away in, as the kernel's call chain at the switch says (format version 10).
    Blocked(BlockReason),
    /// An address in JIT code that the process's jitdump loaded (format version 11; the last
    /// variant, so that older files' variants keep their numbers): `load` is the jitdump's
    /// code-load or code-move record in effect at the sample's time, counted from 0 among those
    /// records, so that code put where other code was before is told apart.
    Jit {
        /// Runtime address in the process.
        avma: Avma,
        /// Sampled instruction pointer or return address.
        kind: AddrKind,
        /// The load in effect (see above).
        load: u32,
    },
    /// A Python function's frame at a line, read from the interpreter at the sample's time
    /// (format version 12; the last variant): `code` indexes the profile's
    /// [`Profile::python_code`](crate::format::db::Profile::python_code), `line` is the line the
    /// frame was running (the innermost frame) or calling from.
    Python {
        /// The function's code object, as an index into the profile's table.
        code: u32,
        /// The source line.
        line: u32,
    },
}

/// Why a thread left the CPU, by the kernel function it switched away in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BlockReason {
    /// Sleeping for a time (`nanosleep`, `clock_nanosleep`, `pause`).
    Sleep,
    /// Waiting for I/O: a pipe, a socket, a terminal, a disk, `poll`/`select`/`epoll`.
    Io,
    /// Waiting for a lock: a futex (mutexes, condition variables, joins), a kernel lock.
    Lock,
    /// Preempted while runnable: its time slice ended or a wakeup put another task first.
    Preempted,
    /// Another wait the kernel's chain names (`waitpid`, `sched_yield`, ...).
    Other,
    /// No kernel call chain to tell (the kernel's symbols unreadable, the chain missing).
    Unknown,
}

impl BlockReason {
    /// The frame's name in every view.
    pub fn label(self) -> &'static str {
        match self {
            BlockReason::Sleep => "<off-cpu: sleep>",
            BlockReason::Io => "<off-cpu: I/O>",
            BlockReason::Lock => "<off-cpu: lock>",
            BlockReason::Preempted => "<off-cpu: preempted>",
            BlockReason::Other => "<off-cpu: other>",
            BlockReason::Unknown => "<off-cpu: reason unknown>",
        }
    }
}

/// Whether a frame address is the sampled instruction or a return address.
///
/// The correlator looks up `ra - 1` for return addresses so that a call that ends a function
/// is attributed to the call, not to whatever follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AddrKind {
    /// The interrupted instruction (the leaf of a path).
    Ip,
    /// A return address (every interior frame).
    Return,
}

impl AddrKind {
    /// The address that stands for a frame at `addr` in lookups, in the same address space
    /// (link-time for code frames, runtime for unmapped ones): the instruction itself, or
    /// `ra - 1` (inside the call instruction) for a return address.
    pub fn lookup<A: Address>(self, addr: A) -> A {
        match self {
            AddrKind::Ip => addr,
            AddrKind::Return => addr.saturating_sub(1),
        }
    }
}

impl Cct {
    /// A tree holding only its root.
    pub fn new(events: usize) -> Self {
        Cct {
            nodes: vec![CctNode {
                parent: CctNodeId::ROOT,
                frame: Frame::Root,
                costs: vec![Cost::default(); events],
            }],
        }
    }

    /// Children of every node, in node order (built on demand; the file stores parents only).
    pub fn children(&self) -> Vec<Vec<CctNodeId>> {
        let mut children = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            children[node.parent.index()].push(CctNodeId::from_index(i));
        }
        children
    }

    /// Total cost of event `event` over the whole tree.
    pub fn total(&self, event: usize) -> Cost {
        self.nodes
            .iter()
            .map(|n| n.costs.get(event).copied().unwrap_or_default())
            .sum()
    }

    /// Why the tree is not well formed for `events` events and `modules` modules, if it is not.
    pub(crate) fn malformation(&self, events: usize, modules: usize) -> Option<String> {
        if self.nodes.is_empty() {
            return Some("an empty tree".into());
        }
        self.nodes.iter().enumerate().find_map(|(i, node)| {
            if i > 0 && node.parent.index() >= i {
                return Some(format!("node {i} precedes its parent"));
            }
            if node.costs.len() != events {
                let n = node.costs.len();
                return Some(format!("node {i} has {n} costs for {events} events"));
            }
            match node.frame {
                Frame::Code { module, .. } if module.index() >= modules => {
                    Some(format!("node {i} refers to missing module {module}"))
                }
                _ => None,
            }
        })
    }
}
