//! What the OpenMP tool's region timeline ([`RegionTimeline`], recorded where the runtime has
//! the tools interface) says about a worker thread's sample: the region it ran in, and so
//! which of the master side's samples tell where that region was entered from.
//!
//! First the encountering thread's own samples within that region instance's time (a worker may
//! still work while the master sleeps at the region's end, its next samples in another region).
//! Where it took none (a region shorter than the sampling period), those it took within the
//! other instances of the same region, entered at the same return address: the instances of
//! one call site are entered from the calling contexts the master was sampled in there; where
//! those contexts are several, they disagree and the sample stays unplaced.

use std::collections::BTreeMap;

use profiler::openmp::{Region, RegionTimeline};

use crate::db::database::Database;
use crate::db::ids::DbNodeId;

/// The samples of the master side of one process, (time, node, thread) in time order.
pub(crate) type Evidence = Vec<(u64, DbNodeId, u32)>;

/// A process of the database: (profile, pid).
pub(crate) type Process = (u32, u32);

/// The process of database thread `t`.
pub(crate) fn process_of(db: &Database, t: u32) -> Process {
    let d = &db.threads[t as usize];
    (d.profile, d.pid)
}

/// The timeline with, per call site of a region, the encountering threads' samples within its
/// instances.
pub(crate) struct RegionEvidence<'a> {
    timeline: &'a RegionTimeline,
    /// Per (process, return address of the call that started the region): the encountering
    /// thread's samples within any instance, first and last.
    sites: BTreeMap<(Process, u64), (DbNodeId, DbNodeId)>,
}

impl<'a> RegionEvidence<'a> {
    /// The timeline of `db`'s traces, each region's instances read against `evidence` (the
    /// master side's samples per process).
    pub(crate) fn new(db: &'a Database, evidence: &BTreeMap<Process, Evidence>) -> Self {
        let timeline = &db.traces.regions;
        let mut sites = BTreeMap::new();
        for r in timeline.regions.iter().filter(|r| r.codeptr != 0) {
            let process = process_of(db, r.thread);
            let Some(list) = evidence.get(&process) else {
                continue;
            };
            for &(_, node, _) in within(list, r) {
                sites
                    .entry((process, r.codeptr))
                    .and_modify(|e: &mut (DbNodeId, DbNodeId)| e.1 = node)
                    .or_insert((node, node));
            }
        }
        RegionEvidence { timeline, sites }
    }

    /// The master side's samples (before and after) that say where the sample of database
    /// thread `thread` at `time` ran, as the timeline tells; `None` where it tells nothing
    /// (no timeline, the thread ran no region's task then, or no instance of that region's
    /// call site was sampled on its encountering thread).
    pub(crate) fn for_sample(
        &self,
        db: &Database,
        evidence: &Evidence,
        thread: u32,
        time: u64,
    ) -> Option<(Option<DbNodeId>, Option<DbNodeId>)> {
        let region = self.timeline.outermost_at(thread, time)?;
        let i = evidence.partition_point(|&(t, _, _)| t <= time);
        let own = |&&(_, _, t): &&(u64, DbNodeId, u32)| t == region.thread;
        let before = (evidence[..i].iter().rev())
            .take_while(|&&(t, _, _)| t >= region.begin)
            .find(own);
        let after = (evidence[i..].iter())
            .take_while(|&&(t, _, _)| t <= region.end)
            .find(own);
        if before.is_some() || after.is_some() {
            return Some((before.map(|e| e.1), after.map(|e| e.1)));
        }
        let &(first, last) = self
            .sites
            .get(&(process_of(db, region.thread), region.codeptr))?;
        Some((Some(first), Some(last)))
    }
}

/// The encountering thread's samples within region instance `r`.
fn within<'e>(list: &'e Evidence, r: &Region) -> impl Iterator<Item = &'e (u64, DbNodeId, u32)> {
    let (begin, end, thread) = (r.begin, r.end, r.thread);
    let from = list.partition_point(|&(t, _, _)| t < begin);
    (list[from..].iter())
        .take_while(move |&&(t, _, _)| t <= end)
        .filter(move |&&(_, _, t)| t == thread)
}
