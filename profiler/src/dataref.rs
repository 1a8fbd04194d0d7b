//! Data references in `profile.db` (format version 3, `hpcrun-rs --data`): for every sample
//! that had a data address, what that address belonged to at the moment it was touched, and the
//! allocation sites of the heap blocks it could belong to.
//!
//! Resolution happens while the run is measured, in one time order across every source, because
//! only then is it known which heap block lived at an address (a block freed and another
//! allocated at the same place are different objects). What stays for the correlator is naming:
//! a [`DataRef::Static`] becomes a variable through symbols and DWARF, a [`DataRef::Heap`] is
//! named by its allocation path, a [`DataRef::Stack`] by the frame's procedure and local.

use serde::{Deserialize, Serialize};

use crate::addr::Svma;
use crate::db::{Cct, CctNodeId, Cost, ProfileModuleId};

/// The data half of a profile: one entry per thread of [`crate::db::Profile::threads`] (same
/// order), and run-wide counts. Empty for runs without `--data` and for files older than
/// version 3.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DataProfile {
    /// Per thread, parallel to the profile's threads.
    pub threads: Vec<ThreadData>,
    /// What was resolved, and what could not be.
    pub stats: DataStats,
}

/// One thread's data references and allocation sites.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadData {
    /// Costs of the thread's data samples by (accessing context, data reference).
    pub costs: Vec<DataCost>,
    /// Heap blocks allocated by this thread, by allocation calling context.
    pub allocs: Vec<AllocSite>,
}

/// The samples of one accessing context that touched one data reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataCost {
    /// The calling context of the access: the user-mode leaf of the sample's path in the
    /// thread's tree.
    pub node: CctNodeId,
    /// What the address belonged to.
    pub data: DataRef,
    /// Cost per event, parallel to the profile's events.
    pub costs: Vec<Cost>,
}

/// What one data address was when it was touched. Every data sample has exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataRef {
    /// Inside a live heap block.
    Heap {
        /// The thread that allocated the block (its `tid`).
        tid: u32,
        /// The allocation's calling context in that thread's tree (an [`AllocSite::node`]).
        site: CctNodeId,
        /// Bytes from the block's start (negative for the allocator's header just before it).
        offset: i64,
        /// Touched by the allocation call itself, before it returned the block.
        during_alloc: bool,
    },
    /// Inside a module's data segments (`.data`, `.bss`, `.rodata`...).
    Static {
        /// The module.
        module: ProfileModuleId,
        /// The address at link time, as symbols and DWARF give variables.
        addr: Svma,
    },
    /// Inside the frame of one of the sample's own stack frames.
    Stack {
        /// Frames up from the sample's leaf (0: the sampled function itself).
        frame: u16,
        /// The address minus the frame's canonical frame address (CFA): negative, since a
        /// frame lies below its CFA.
        cfa_offset: i64,
    },
    /// Inside some other mapping of the process.
    Mapping {
        /// Which kind of mapping.
        kind: MappingKind,
    },
    /// In nothing the run knew about.
    Unknown,
}

/// The kind of a mapping that holds a data address outside heap blocks, statics and frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MappingKind {
    /// The `brk` heap (`[heap]`): blocks too small to be tracked live here.
    Brk,
    /// A stack (`[stack]`), outside every unwound frame of the sample.
    Stack,
    /// Anonymous memory: untracked large blocks, thread stacks, the program's own mmaps.
    Anonymous,
    /// A mapped file that is not a module's data.
    File,
    /// The allocation shim's own rings (`memfd:hpcrun-alloc`): touches the measurement
    /// itself made in the program.
    Profiler,
}

/// The blocks allocated at one calling context by one thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocSite {
    /// The allocation's calling context in the thread's tree (costs there are unaffected).
    pub node: CctNodeId,
    /// Blocks allocated.
    pub calls: u64,
    /// Bytes allocated in all.
    pub bytes: u64,
    /// Blocks freed.
    pub frees: u64,
    /// The most bytes of this site live at once.
    pub peak_live: u64,
    /// Bytes still live when the run ended (leaked, or freed at exit without a free).
    pub live_at_end: u64,
    /// Smallest and largest block.
    pub size_min: u64,
    /// See [`AllocSite::size_min`].
    pub size_max: u64,
    /// Sum of the lifetimes of freed blocks, ns.
    pub lifetime_ns: u64,
}

/// What the data pipeline saw, for the summary and for checking it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataStats {
    /// Data samples by class: heap, static, stack, mapping, unknown.
    pub by_class: [u64; 5],
    /// Clock samples whose data address was sought by decoding the instruction (EA recovery).
    pub ea_attempted: u64,
    /// Of those, the ones with an address.
    pub ea_resolved: u64,
    /// Allocation records received (allocations and frees).
    pub alloc_records: u64,
    /// Allocation records lost (a full ring in the program).
    pub alloc_lost: u64,
    /// Why heap blocks were not tracked, when they were not.
    pub heap_unavailable: Option<String>,
}

/// The class names of [`DataStats::by_class`], in order.
pub const CLASS_NAMES: [&str; 5] = ["heap", "static", "stack", "mapping", "unknown"];

impl AllocSite {
    /// A site at `node` that has allocated nothing yet.
    pub fn new(node: CctNodeId) -> AllocSite {
        AllocSite {
            node,
            calls: 0,
            bytes: 0,
            frees: 0,
            peak_live: 0,
            live_at_end: 0,
            size_min: 0,
            size_max: 0,
            lifetime_ns: 0,
        }
    }
}

impl DataRef {
    /// The index of this reference's class in [`DataStats::by_class`].
    pub fn class(&self) -> usize {
        match self {
            DataRef::Heap { .. } => 0,
            DataRef::Static { .. } => 1,
            DataRef::Stack { .. } => 2,
            DataRef::Mapping { .. } => 3,
            DataRef::Unknown => 4,
        }
    }
}

impl DataProfile {
    /// Whether the profile holds anything (a run with `--data`).
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty() && self.stats == DataStats::default()
    }

    /// Why this data half does not fit `trees` (the profile's threads, as `(tid, tree)`),
    /// `events` and `modules`, if it does not: readers may then index without checks.
    pub(crate) fn malformation(
        &self,
        trees: &[(u32, &Cct)],
        events: usize,
        modules: usize,
    ) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        if self.threads.len() != trees.len() {
            let n = self.threads.len();
            return Some(format!(
                "data for {n} threads, {} in the profile",
                trees.len()
            ));
        }
        let nodes_of = |tid: u32| {
            trees
                .iter()
                .find(|(t, _)| *t == tid)
                .map(|(_, c)| c.nodes.len())
        };
        self.threads
            .iter()
            .zip(trees)
            .find_map(|(data, (tid, cct))| {
                let nodes = cct.nodes.len();
                let bad_site = data.allocs.iter().find(|a| a.node.index() >= nodes);
                if let Some(a) = bad_site {
                    return Some(format!(
                        "thread {tid}: allocation site at missing node {}",
                        a.node
                    ));
                }
                data.costs.iter().find_map(|c| {
                    let why = if c.node.index() >= nodes {
                        Some(format!("data cost at missing node {}", c.node))
                    } else if c.costs.len() != events {
                        Some(format!(
                            "data cost with {} costs for {events} events",
                            c.costs.len()
                        ))
                    } else {
                        match c.data {
                            DataRef::Static { module, .. } if module.index() >= modules => {
                                Some(format!("data in missing module {module}"))
                            }
                            DataRef::Heap {
                                tid: owner, site, ..
                            } if nodes_of(owner).is_none_or(|n| site.index() >= n) => {
                                Some(format!("heap block of a missing site {owner}/{site}"))
                            }
                            _ => None,
                        }
                    };
                    why.map(|w| format!("thread {tid}: {w}"))
                })
            })
    }

    /// Total data cost of event `event` over every thread (equal to the data samples' total).
    pub fn total(&self, event: usize) -> Cost {
        self.threads
            .iter()
            .flat_map(|t| &t.costs)
            .map(|c| c.costs.get(event).copied().unwrap_or_default())
            .sum()
    }
}
