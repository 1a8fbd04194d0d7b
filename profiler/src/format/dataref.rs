//! Data references in `profile.db` (format version 3, `hpcrun-rs --data`): for every sample
//! that had a data address, what that address belonged to at the moment it was touched, and the
//! allocation sites of the heap blocks it could belong to. Format version 4 adds, for the
//! samples of precise memory events (`-e mem`, PEBS or IBS), where each access was served from
//! and its latency: a [`SourceHist`] per event of each [`DataCost`] ([`DataCost::sources`]),
//! stored as a fourth part of the file ([`MemorySources`]) so that versions 1 to 3 read as
//! before.
//!
//! Resolution happens while the run is measured, in one time order across every source, because
//! only then is it known which heap block lived at an address (a block freed and another
//! allocated at the same place are different objects). What stays for the correlator is naming:
//! a [`DataRef::Static`] becomes a variable through symbols and DWARF, a [`DataRef::Heap`] is
//! named by its allocation path, a [`DataRef::Stack`] by the frame's procedure and local.

use serde::{Deserialize, Serialize};

use crate::format::addr::Svma;
use crate::format::calltree::{Cct, CctNodeId, Cost, ProfileModuleId};
use crate::format::trace::Traces;

/// The data half of a profile: one entry per thread of [`crate::format::db::Profile::threads`] (same
/// order), and run-wide counts. Empty for runs without `--data` and for files older than
/// version 3.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DataProfile {
    /// Per thread, parallel to the profile's threads.
    pub threads: Vec<ThreadData>,
    /// What was resolved, and what could not be.
    pub stats: DataStats,
    /// With `-t`, per thread, the time of each data sample of the first event and the index
    /// of its [`DataCost`] in the thread's [`ThreadData::costs`] (the trace's context ids).
    /// Stored in the file's eighth part (format version 8), not here.
    #[serde(skip)]
    pub traces: Traces,
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
    /// Where the accesses were served from, per event (parallel to `costs`) when a precise
    /// memory event sampled this place; empty otherwise. Stored in the file's fourth part
    /// (format version 4), not here.
    #[serde(skip)]
    pub sources: Vec<SourceHist>,
}

/// Where the memory hierarchy served a sampled access from, as the sampler reduces the
/// kernel's `perf_mem_data_src` (`sample::level_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemLevel {
    /// The first-level data cache.
    L1,
    /// A line fill buffer (the L1's or the L2's miss handling buffer): a miss already on its
    /// way.
    Lfb,
    /// The second-level cache.
    L2,
    /// The last-level cache (L3, or L4 where there is one), or another core's cache on this
    /// node.
    L3,
    /// Memory of this node (DRAM, persistent memory, CXL).
    LocalDram,
    /// Another node's memory or cache.
    Remote,
    /// Another core's cache holding the line modified (a snoop HitM, local or remote): true or
    /// false sharing.
    Hitm,
    /// Uncached memory or I/O.
    Uncached,
    /// Not reported, or a miss at a named level with no more said.
    Unknown,
}

impl MemLevel {
    /// Every level, in the order of [`SourceHist::levels`].
    pub const ALL: [MemLevel; MEM_LEVELS] = [
        MemLevel::L1,
        MemLevel::Lfb,
        MemLevel::L2,
        MemLevel::L3,
        MemLevel::LocalDram,
        MemLevel::Remote,
        MemLevel::Hitm,
        MemLevel::Uncached,
        MemLevel::Unknown,
    ];

    /// Its index in [`SourceHist::levels`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            MemLevel::L1 => "L1",
            MemLevel::Lfb => "LFB",
            MemLevel::L2 => "L2",
            MemLevel::L3 => "L3/LLC",
            MemLevel::LocalDram => "local DRAM",
            MemLevel::Remote => "remote DRAM/cache",
            MemLevel::Hitm => "HITM",
            MemLevel::Uncached => "uncached/IO",
            MemLevel::Unknown => "unknown",
        }
    }
}

/// How many [`MemLevel`]s there are.
pub const MEM_LEVELS: usize = 9;

/// The precise memory samples of one place for one event: how many each level served, and
/// their summed latency.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceHist {
    /// Samples per level, indexed by [`MemLevel::index`].
    pub levels: [u64; MEM_LEVELS],
    /// The summed latency (the samples' weight: core cycles on Intel and AMD) of the samples
    /// that reported one.
    pub latency: u64,
    /// The samples that reported a latency (a weight above 0; Intel's stores report none).
    pub weighted: u64,
}

impl SourceHist {
    /// Count one access served from `level` with `latency` (0: none reported).
    pub fn add(&mut self, level: MemLevel, latency: u64) {
        let n = &mut self.levels[level.index()];
        *n = n.saturating_add(1);
        if latency > 0 {
            self.latency = self.latency.saturating_add(latency);
            self.weighted += 1;
        }
    }

    /// Take one such access back.
    pub fn remove(&mut self, level: MemLevel, latency: u64) {
        let n = &mut self.levels[level.index()];
        *n = n.saturating_sub(1);
        if latency > 0 {
            self.latency = self.latency.saturating_sub(latency);
            self.weighted = self.weighted.saturating_sub(1);
        }
    }

    /// Samples counted.
    pub fn samples(&self) -> u64 {
        self.levels.iter().sum()
    }

    /// Add `other`'s counts.
    pub fn merge(&mut self, other: &SourceHist) {
        for (a, b) in self.levels.iter_mut().zip(other.levels) {
            *a = a.saturating_add(b);
        }
        self.latency = self.latency.saturating_add(other.latency);
        self.weighted = self.weighted.saturating_add(other.weighted);
    }
}

/// The fourth part of a version-4 `profile.db`: the [`DataCost::sources`] of every data cost
/// that has them, per thread (parallel to [`DataProfile::threads`]) as (index in the thread's
/// `costs`, one histogram per event).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySources {
    /// Per thread, the costs with histograms.
    pub threads: Vec<Vec<(u32, Vec<SourceHist>)>>,
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
    /// What was allocated there. postcard writes a nested struct's fields in place, so the
    /// encoding is that of the fields listed after `node` (as format versions 3 and 4 have it).
    pub counts: SiteCounts,
}

/// What was allocated at one site: blocks, bytes, peak, lifetimes. Also what the correlator
/// sums over threads and sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteCounts {
    /// Blocks allocated.
    pub calls: u64,
    /// Bytes allocated in all.
    pub bytes: u64,
    /// Blocks freed.
    pub frees: u64,
    /// The most bytes live at once (a sum over threads or sites is an upper bound of theirs).
    pub peak_live: u64,
    /// Bytes still live when the run ended (leaked, or freed at exit without a free).
    pub live_at_end: u64,
    /// Smallest block.
    pub size_min: u64,
    /// Largest block.
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

impl SiteCounts {
    /// Nothing allocated yet (the smallest block is the largest number until one is).
    pub fn empty() -> SiteCounts {
        SiteCounts {
            calls: 0,
            bytes: 0,
            frees: 0,
            peak_live: 0,
            live_at_end: 0,
            size_min: u64::MAX,
            size_max: 0,
            lifetime_ns: 0,
        }
    }

    /// Count one more block of `size` bytes.
    pub fn allocated(&mut self, size: u64) {
        self.calls += 1;
        self.bytes += size;
        self.size_min = self.size_min.min(size);
        self.size_max = self.size_max.max(size);
    }

    /// Add `other`'s blocks (peaks add up: an upper bound of the combined peak).
    pub fn add(&mut self, other: &SiteCounts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.frees = self.frees.saturating_add(other.frees);
        self.peak_live = self.peak_live.saturating_add(other.peak_live);
        self.live_at_end = self.live_at_end.saturating_add(other.live_at_end);
        self.size_min = self.size_min.min(other.size_min);
        self.size_max = self.size_max.max(other.size_max);
        self.lifetime_ns = self.lifetime_ns.saturating_add(other.lifetime_ns);
    }

    /// Blocks live at the end of the run.
    pub fn blocks_at_end(&self) -> u64 {
        self.calls.saturating_sub(self.frees)
    }

    /// Mean lifetime of the freed blocks, ns; `None` when none was freed.
    pub fn mean_lifetime_ns(&self) -> Option<u64> {
        self.lifetime_ns.checked_div(self.frees)
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

    /// The data-source histograms of every cost, for the file's fourth part.
    pub fn memory_sources(&self) -> MemorySources {
        MemorySources {
            threads: self
                .threads
                .iter()
                .map(|t| {
                    t.costs
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| !c.sources.is_empty())
                        .map(|(i, c)| (i as u32, c.sources.clone()))
                        .collect()
                })
                .collect(),
        }
    }

    /// Attach the histograms of a file's fourth part to their costs; why they do not fit this
    /// data half (`events` metrics), if they do not.
    pub(crate) fn attach_sources(
        &mut self,
        sources: MemorySources,
        events: usize,
    ) -> Result<(), String> {
        if sources.threads.iter().all(Vec::is_empty) {
            return Ok(());
        }
        if sources.threads.len() != self.threads.len() {
            return Err(format!(
                "data sources for {} threads, data for {}",
                sources.threads.len(),
                self.threads.len()
            ));
        }
        for (t, (thread, list)) in self.threads.iter_mut().zip(sources.threads).enumerate() {
            for (i, hists) in list {
                if hists.len() != events {
                    return Err(format!(
                        "thread {t}: {} data-source histograms for {events} events",
                        hists.len()
                    ));
                }
                let cost = thread
                    .costs
                    .get_mut(i as usize)
                    .ok_or_else(|| format!("thread {t}: data sources of missing cost {i}"))?;
                if !cost.sources.is_empty() {
                    return Err(format!(
                        "thread {t}: cost {i} has two data-source histograms"
                    ));
                }
                cost.sources = hists;
            }
        }
        Ok(())
    }

    /// The data-source histogram of event `event` summed over every place (empty where no
    /// precise memory event sampled it).
    pub fn source_total(&self, event: usize) -> SourceHist {
        let mut total = SourceHist::default();
        for c in self.threads.iter().flat_map(|t| &t.costs) {
            if let Some(h) = c.sources.get(event) {
                total.merge(h);
            }
        }
        total
    }

    /// Why this data half does not fit `trees` (the profile's threads, as `(tid, tree)`),
    /// `events` and `modules`, if it does not: readers may then index without checks.
    pub(crate) fn malformation(
        &self,
        trees: &[(u32, &Cct)],
        events: usize,
        modules: usize,
    ) -> Option<String> {
        let costs_of = |tid: u32| {
            let i = trees.iter().position(|(t, _)| *t == tid)?;
            Some(self.threads.get(i)?.costs.len())
        };
        if let Some(why) = self.traces.malformation(costs_of) {
            return Some(format!("data trace: {why}"));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_encodes_as_its_fields_in_a_row_as_format_versions_3_and_4_have_it() {
        let site = AllocSite {
            node: CctNodeId::from_index(7),
            counts: SiteCounts {
                calls: 1,
                bytes: 2,
                frees: 3,
                peak_live: 4,
                live_at_end: 5,
                size_min: 6,
                size_max: 7,
                lifetime_ns: 8,
            },
        };
        let flat = (7u32, 1u64, 2u64, 3u64, 4u64, 5u64, 6u64, 7u64, 8u64);
        assert_eq!(
            postcard::to_stdvec(&site).unwrap(),
            postcard::to_stdvec(&flat).unwrap()
        );
    }
}
