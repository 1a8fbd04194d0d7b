//! The data side of a recording (`hpcrun-rs --data`): each data address becomes a
//! [`DataRef`] the moment its sample is handled, against the heap blocks live at that moment.
//!
//! Records reach the recorder in one time order across every source (the perf rings and the
//! allocation rings), so a block freed and a later one allocated at the same address are told
//! apart: a touch belongs to whichever was live when it happened.

use fxhash::FxHashMap;

use crate::format::addr::Avma;
use crate::format::dataref::{
    AllocSite, DataCost, DataProfile, DataRef, DataStats, MemLevel, SiteCounts, SourceHist,
    ThreadData,
};
use crate::format::db::{CctNodeId, Cost, ThreadProfile};
use crate::sampler::data::datatrace::DataTraceLog;
use crate::sampler::data::liveheap::{Block, LiveHeap, HEADER};
use crate::sampler::unwinding::loadmap::AddressSpace;
use crate::sampler::unwinding::unwind::RawFrame;

/// Bytes below the stack pointer a leaf function may use without moving it (the x86-64 ABI's
/// red zone): touches there belong to the sampled frame.
pub(crate) const RED_ZONE: u64 = 128;

/// One allocation or free, as the allocation tracker reported it, its calling context already
/// a node of the allocating thread's tree.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AllocCall {
    /// A block of `size` bytes at `ptr`, allocated at `site` between `t_entry` and `t_return`.
    Alloc {
        /// The allocating thread.
        tid: u32,
        /// Its calling context.
        site: CctNodeId,
        /// The block.
        ptr: u64,
        /// Its size.
        size: u64,
        /// When the allocation call started and returned (CLOCK_MONOTONIC ns).
        t_entry: u64,
        /// See `t_entry`.
        t_return: u64,
    },
    /// The block at `ptr` was freed at `time`.
    Free {
        /// The block.
        ptr: u64,
        /// When.
        time: u64,
    },
}

/// One data access of a sample: where, by whom, when, and the sample's own unwound frames.
pub(crate) struct Access<'a> {
    /// The data address.
    pub addr: u64,
    /// The sampled thread.
    pub tid: u32,
    /// The sample's time.
    pub time: u64,
    /// The sampled stack pointer.
    pub sp: u64,
    /// The sample's frames, innermost first, as the unwinder found them.
    pub frames: &'a [RawFrame],
    /// The CFA of the outermost frame when the walk was cut short by the stack copy.
    pub outer_cfa: Option<u64>,
}

/// What `access` touched, in the order heap, stack, static, other mapping, unknown.
pub(crate) fn classify(access: &Access<'_>, heap: &LiveHeap, space: &AddressSpace) -> DataRef {
    let avma = Avma(access.addr);
    heap.find(access.addr, access.tid, access.time)
        .or_else(|| stack_ref(access))
        .or_else(|| {
            let (module, addr) = space.static_at(avma)?;
            Some(DataRef::Static { module, addr })
        })
        .or_else(|| {
            space
                .mapping_kind(avma)
                .map(|kind| DataRef::Mapping { kind })
        })
        .unwrap_or(DataRef::Unknown)
}

/// The frame of the sample's own path whose extent holds the address: frame `i` lies between
/// the CFA of frame `i - 1` (the stack pointer once it returns) and its own CFA, frame 0 from
/// below the stack pointer's red zone. The CFA of frame `i` is the stack pointer of frame
/// `i + 1`, or for the outermost frame of a walk cut short by the stack copy, the CFA found
/// beyond the copy; a complete walk's outermost frame (the entry code) holds no data.
fn stack_ref(access: &Access<'_>) -> Option<DataRef> {
    let addr = access.addr;
    if addr < access.sp.saturating_sub(RED_ZONE) {
        return None;
    }
    let cfas = access.frames.iter().skip(1).map(|f| f.sp);
    let (i, cfa) = cfas
        .chain(access.outer_cfa)
        .enumerate()
        .find(|&(_, cfa)| addr < cfa)?;
    Some(DataRef::Stack {
        frame: u16::try_from(i).ok()?,
        cfa_offset: addr.wrapping_sub(cfa) as i64,
    })
}

/// Where a precise memory sample's access was served from, and its latency (0: none).
pub(crate) type Source = (MemLevel, u64);

/// The costs of one (accessing context, data reference) as they accumulate.
#[derive(Default)]
struct CostBuilder {
    /// Its number in the thread, in the order first met (the data trace's key).
    key: u32,
    costs: Vec<Cost>,
    /// Per event, once a precise memory sample came.
    sources: Vec<SourceHist>,
}

/// One thread's data costs and allocation sites as they accumulate.
#[derive(Default)]
struct ThreadBuilder {
    costs: FxHashMap<(CctNodeId, DataRef), CostBuilder>,
    sites: FxHashMap<CctNodeId, SiteBuilder>,
    /// Its data samples outside heap blocks since its last allocation record: the allocation
    /// tracker reports a call when it returns, so touches made inside the call (the allocator
    /// writing its header into fresh pages) are found again here when the block is known.
    recent: Vec<Recent>,
}

/// A charged data sample that may turn out to have touched a block being allocated.
#[derive(Debug, Clone, Copy)]
struct Recent {
    time: u64,
    addr: u64,
    node: CctNodeId,
    data: DataRef,
    event: usize,
    period: u64,
    source: Option<Source>,
    /// Its position in the thread's data trace, where it was traced.
    traced: Option<usize>,
}

/// The most samples kept per thread for [`ThreadBuilder::recent`]; older ones are forgotten
/// (an allocation call touching more pages than this keeps the rest where they first landed).
const RECENT_MAX: usize = 4096;

/// An allocation site and the bytes it has live now.
struct SiteBuilder {
    site: AllocSite,
    live: u64,
}

/// Everything the data side has learned in a run.
pub(crate) struct DataRecorder {
    events: usize,
    threads: FxHashMap<u32, ThreadBuilder>,
    stats: DataStats,
    /// The data trace, with `-t`.
    trace: Option<DataTraceLog>,
}

impl DataRecorder {
    /// An empty recorder for `events` metrics.
    pub(crate) fn new(events: usize) -> Self {
        DataRecorder {
            events,
            threads: FxHashMap::default(),
            stats: DataStats::default(),
            trace: None,
        }
    }

    /// Also trace the data samples of the first event, in at most `budget` bytes while
    /// recording (`-t`).
    pub(crate) fn trace(&mut self, budget: usize) {
        self.trace = Some(DataTraceLog::new(budget));
    }

    /// The run-wide counters, to be updated by the sources (EA recovery, allocation records).
    pub(crate) fn stats_mut(&mut self) -> &mut DataStats {
        &mut self.stats
    }

    /// Charge the data sample `access`, taken at `node`, to `data`; `source` is where a
    /// precise memory sample's access was served from, and its latency.
    pub(crate) fn charge(
        &mut self,
        access: &Access<'_>,
        node: CctNodeId,
        data: DataRef,
        event: usize,
        period: u64,
        source: Option<Source>,
    ) {
        let key = self.add(access.tid, (node, data), event, period, source, true);
        let traced = match self.trace.as_mut() {
            Some(log) if event == 0 => log.record(access.tid, access.time, key),
            _ => None,
        };
        let thread = self.threads.entry(access.tid).or_default();
        if !matches!(data, DataRef::Heap { .. }) && thread.recent.len() < RECENT_MAX {
            thread.recent.push(Recent {
                time: access.time,
                addr: access.addr,
                node,
                data,
                event,
                period,
                source,
                traced,
            });
        }
    }

    /// Add one sample of `period` of `event` at `key`, or take one back (`add` false);
    /// returns the key's number in the thread.
    fn add(
        &mut self,
        tid: u32,
        key: (CctNodeId, DataRef),
        event: usize,
        period: u64,
        source: Option<Source>,
        add: bool,
    ) -> u32 {
        let class = &mut self.stats.by_class[key.1.class()];
        let events = self.events;
        let thread = self.threads.entry(tid).or_default();
        let next = thread.costs.len() as u32;
        let entry = thread.costs.entry(key).or_insert_with(|| CostBuilder {
            key: next,
            costs: vec![Cost::default(); events],
            sources: Vec::new(),
        });
        let Some(c) = entry.costs.get_mut(event) else {
            return entry.key;
        };
        if add {
            *class += 1;
            *c += Cost {
                samples: 1,
                value: period,
            };
        } else {
            *class = class.saturating_sub(1);
            c.samples = c.samples.saturating_sub(1);
            c.value = c.value.saturating_sub(period);
        }
        if let Some((level, latency)) = source {
            if entry.sources.is_empty() {
                entry.sources = vec![SourceHist::default(); events];
            }
            let h = &mut entry.sources[event];
            match add {
                true => h.add(level, latency),
                false => h.remove(level, latency),
            }
        }
        entry.key
    }

    /// Move the samples of thread `tid` that touched the block `[ptr - header, ptr + size)`
    /// while its allocation call ran (`span`: entry to return) to that block, then forget
    /// every sample kept for it (all are older than the call's return).
    fn claim_touches_during_alloc(
        &mut self,
        tid: u32,
        site: CctNodeId,
        block: (u64, u64),
        span: (u64, u64),
    ) {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let recent = std::mem::take(&mut thread.recent);
        let (ptr, size) = block;
        let inside = |r: &&Recent| {
            (span.0..=span.1).contains(&r.time)
                && r.addr.saturating_add(HEADER) >= ptr
                && r.addr < ptr.saturating_add(size)
        };
        for r in recent.iter().filter(inside) {
            self.add(tid, (r.node, r.data), r.event, r.period, r.source, false);
            let heap = DataRef::Heap {
                tid,
                site,
                offset: r.addr.wrapping_sub(ptr) as i64,
                during_alloc: true,
            };
            let key = self.add(tid, (r.node, heap), r.event, r.period, r.source, true);
            if let (Some(log), Some(at)) = (self.trace.as_mut(), r.traced) {
                log.move_to(tid, at, key);
            }
        }
    }

    /// Apply an allocation or a free to `heap` and to the allocation sites.
    pub(crate) fn alloc_call(&mut self, heap: &mut LiveHeap, call: AllocCall) {
        self.stats.alloc_records += 1;
        match call {
            AllocCall::Alloc {
                tid,
                site,
                ptr,
                size,
                t_entry,
                t_return,
            } => {
                self.claim_touches_during_alloc(tid, site, (ptr, size), (t_entry, t_return));
                let block = Block {
                    end: ptr.saturating_add(size),
                    size,
                    tid,
                    site,
                    t_alloc: t_entry,
                    t_return,
                };
                if let Some(old) = heap.insert(ptr, block) {
                    // Its free was not seen (lost, or untracked): it is not live any more.
                    self.release(old, old.t_return);
                }
                let s = &mut self.threads.entry(tid).or_default().sites;
                let s = s.entry(site).or_insert_with(|| SiteBuilder {
                    site: AllocSite {
                        node: site,
                        counts: SiteCounts::empty(),
                    },
                    live: 0,
                });
                s.site.counts.allocated(size);
                s.live += size;
                s.site.counts.peak_live = s.site.counts.peak_live.max(s.live);
            }
            AllocCall::Free { ptr, time } => {
                if let Some(block) = heap.remove(ptr) {
                    self.release(block, time);
                }
            }
        }
    }

    fn release(&mut self, block: Block, time: u64) {
        let Some(thread) = self.threads.get_mut(&block.tid) else {
            return;
        };
        if let Some(s) = thread.sites.get_mut(&block.site) {
            s.live = s.live.saturating_sub(block.size);
            s.site.counts.frees += 1;
            s.site.counts.lifetime_ns += time.saturating_sub(block.t_alloc);
        }
    }

    /// Forget the samples kept for [`DataRecorder::claim_touches_during_alloc`] of thread
    /// `tid`: a record of it that is not an allocation shows no call was in progress.
    pub(crate) fn no_call_in_progress(&mut self, tid: u32) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.recent.clear();
        }
    }

    /// The data half of the profile, parallel to `threads` (the recording's, in file order).
    pub(crate) fn finish(mut self, threads: &[ThreadProfile]) -> DataProfile {
        let mut keys: FxHashMap<u32, Vec<Option<u32>>> = FxHashMap::default();
        let threads = threads
            .iter()
            .map(|t| {
                let b = self.threads.remove(&t.tid).unwrap_or_default();
                let (data, index) = thread_data(b);
                keys.insert(t.tid, index);
                data
            })
            .collect();
        let traces = self
            .trace
            .map(|log| log.finish(|tid| keys.remove(&tid).unwrap_or_default()))
            .unwrap_or_default();
        DataProfile {
            threads,
            stats: self.stats,
            traces,
        }
    }
}

/// One thread's data as the profile stores it, and where each of its keys went in its costs.
fn thread_data(b: ThreadBuilder) -> (ThreadData, Vec<Option<u32>>) {
    let mut index = vec![None; b.costs.len()];
    let mut keyed: Vec<(u32, DataCost)> = b
        .costs
        .into_iter()
        .filter(|(_, c)| c.costs.iter().any(|c| c.samples > 0))
        .map(|((node, data), c)| {
            let cost = DataCost {
                node,
                data,
                costs: c.costs,
                sources: c.sources,
            };
            (c.key, cost)
        })
        .collect();
    keyed.sort_by_key(|(key, c)| (c.node, c.data.class(), *key));
    for (i, (key, _)) in keyed.iter().enumerate() {
        index[*key as usize] = Some(i as u32);
    }
    let costs = keyed.into_iter().map(|(_, c)| c).collect();
    let mut allocs: Vec<AllocSite> = b
        .sites
        .into_values()
        .map(|mut s| {
            s.site.counts.live_at_end = s.live;
            s.site
        })
        .collect();
    allocs.sort_by_key(|a| a.node);
    (ThreadData { costs, allocs }, index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::db::AddrKind;

    fn alloc(tid: u32, site: usize, ptr: u64, size: u64, t: u64) -> AllocCall {
        AllocCall::Alloc {
            tid,
            site: CctNodeId::from_index(site),
            ptr,
            size,
            t_entry: t,
            t_return: t + 10,
        }
    }

    fn at(heap: &LiveHeap, addr: u64, tid: u32, time: u64) -> DataRef {
        let access = Access {
            addr,
            tid,
            time,
            sp: 0x7000_0000,
            frames: &[],
            outer_cfa: None,
        };
        classify(&access, heap, &AddressSpace::default())
    }

    #[test]
    fn a_touch_belongs_to_the_block_live_at_that_time() {
        let mut d = DataRecorder::new(1);
        let mut heap = LiveHeap::default();
        d.alloc_call(&mut heap, alloc(1, 5, 0x1000, 0x800, 100));
        let first = at(&heap, 0x1400, 1, 150);
        d.alloc_call(
            &mut heap,
            AllocCall::Free {
                ptr: 0x1000,
                time: 200,
            },
        );
        assert_eq!(at(&heap, 0x1400, 1, 250), DataRef::Unknown);
        d.alloc_call(&mut heap, alloc(2, 9, 0x1000, 0x800, 300));
        let second = at(&heap, 0x1400, 2, 350);
        let site = |r| match r {
            DataRef::Heap {
                tid, site, offset, ..
            } => (tid, site.index(), offset),
            other => panic!("{other:?}"),
        };
        assert_eq!(site(first), (1, 5, 0x400));
        assert_eq!(site(second), (2, 9, 0x400));
    }

    #[test]
    fn the_allocators_header_belongs_to_the_block_only_while_it_is_allocated() {
        let mut d = DataRecorder::new(1);
        let mut heap = LiveHeap::default();
        d.alloc_call(&mut heap, alloc(1, 5, 0x1010, 0x800, 100));
        let during = at(&heap, 0x1008, 1, 105);
        assert!(
            matches!(
                during,
                DataRef::Heap {
                    during_alloc: true,
                    offset: -8,
                    ..
                }
            ),
            "{during:?}"
        );
        assert_eq!(
            at(&heap, 0x1008, 2, 105),
            DataRef::Unknown,
            "another thread"
        );
        assert_eq!(
            at(&heap, 0x1008, 1, 500),
            DataRef::Unknown,
            "after the call"
        );
        let later = at(&heap, 0x1010, 1, 500);
        assert!(
            matches!(
                later,
                DataRef::Heap {
                    during_alloc: false,
                    offset: 0,
                    ..
                }
            ),
            "{later:?}"
        );
    }

    #[test]
    fn sites_count_calls_bytes_peaks_and_what_stays_live() {
        let mut d = DataRecorder::new(1);
        let mut heap = LiveHeap::default();
        d.alloc_call(&mut heap, alloc(1, 5, 0x1000, 100, 0));
        d.alloc_call(&mut heap, alloc(1, 5, 0x2000, 300, 10));
        d.alloc_call(
            &mut heap,
            AllocCall::Free {
                ptr: 0x1000,
                time: 40,
            },
        );
        d.alloc_call(
            &mut heap,
            AllocCall::Free {
                ptr: 0x9999,
                time: 41,
            },
        );
        d.alloc_call(&mut heap, alloc(1, 5, 0x1000, 50, 50));
        let thread = crate::format::db::ThreadProfile {
            pid: 1,
            tid: 1,
            comm: "t".into(),
            cct: crate::format::db::Cct::new(1),
        };
        let data = d.finish(&[thread]);
        let s = &data.threads[0].allocs[0].counts;
        assert_eq!((s.calls, s.bytes, s.frees), (3, 450, 1));
        assert_eq!((s.peak_live, s.live_at_end), (400, 350));
        assert_eq!((s.size_min, s.size_max, s.lifetime_ns), (50, 300, 40));
        assert_eq!(data.stats.alloc_records, 5);
    }

    #[test]
    fn stack_addresses_go_to_the_frame_between_two_cfas() {
        let frame = |sp, kind| RawFrame { avma: 0, kind, sp };
        let frames = [
            frame(0x1000, AddrKind::Ip),
            frame(0x1100, AddrKind::Return),
            frame(0x1800, AddrKind::Return),
        ];
        let access = |addr, outer_cfa| Access {
            addr,
            tid: 1,
            time: 0,
            sp: 0x1000,
            frames: &frames,
            outer_cfa,
        };
        let stack = |a: &Access| stack_ref(a);
        assert_eq!(
            stack(&access(0xf90, None)),
            Some(DataRef::Stack {
                frame: 0,
                cfa_offset: -0x170
            })
        );
        assert_eq!(stack(&access(0xf00, None)), None, "below the red zone");
        assert_eq!(
            stack(&access(0x1100, None)),
            Some(DataRef::Stack {
                frame: 1,
                cfa_offset: -0x700
            })
        );
        assert_eq!(
            stack(&access(0x1900, None)),
            None,
            "above the last known CFA"
        );
        let beyond = stack(&access(0x1900, Some(0x2000)));
        assert_eq!(
            beyond,
            Some(DataRef::Stack {
                frame: 2,
                cfa_offset: -0x700
            })
        );
    }
}
