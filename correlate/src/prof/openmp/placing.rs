//! Where each traced sample of a worker thread goes: under the parallel region that ran it,
//! decided by the master's own samples nearest in time (where the two disagree or there are
//! none, the sample is unplaced: never guessed); or, for the runtime waiting outside any body,
//! on the context the master was in at its last sample before (blame shifting: the wait is
//! caused by what the master was doing then, a region's imbalance or serial code; the error is
//! at most one sampling period at each change of context).

use std::collections::BTreeMap;

use crate::db::database::Database;
use crate::db::ids::{DbNodeId, ThreadIdx};
use crate::prof::openmp::regions::{process_of, Evidence, RegionEvidence};
use crate::prof::openmp::shape::{Body, Shape};

/// Where a worker thread's sample goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    /// Merged into this node: the master's body of the region that ran it.
    Region(DbNodeId),
    /// Under this runtime entry of the master's, in whose region it ran (a body the master
    /// itself did not run there, such as a `single` block or a task).
    Entry(DbNodeId),
    /// Idle time, blamed on this context of the master's: a region's entry or the procedure
    /// frame the master was running serially.
    Blame(DbNodeId),
    /// Under `<unplaced parallel work>`.
    Unplaced,
}

/// The targets of every traced worker sample.
pub(crate) struct Placements {
    /// Per worker-side (node, thread), how many of its traced samples go to each target.
    pub counts: BTreeMap<(DbNodeId, ThreadIdx), BTreeMap<Target, u64>>,
    /// Per trace of [`Database::traces`], each sample (time, node) with its target (`None`:
    /// the sample stays): the traces decoded once, for placing and for rewriting.
    pub per_sample: Vec<Vec<(u64, DbNodeId, Option<Target>)>>,
}

impl Placements {
    /// Place every traced sample of a worker thread of `db`, as `shape` reads its tree.
    pub(crate) fn of(db: &Database, shape: &Shape) -> Placements {
        let contexts = db.nodes.len();
        let process = |t: u32| process_of(db, t);
        let decoded: Vec<Vec<(u64, u32)>> = (db.traces.threads.iter())
            .map(|t| t.decode(contexts).unwrap_or_default())
            .collect();
        let mut evidence: BTreeMap<(u32, u32), Evidence> = BTreeMap::new();
        for (trace, samples) in db.traces.threads.iter().zip(&decoded) {
            let list = evidence.entry(process(trace.thread)).or_default();
            let master_side = samples
                .iter()
                .map(|&(t, c)| (t, DbNodeId::from_index(c as usize), trace.thread));
            list.extend(master_side.filter(|&(_, n, _)| !shape.is_worker_side(n)));
        }
        for list in evidence.values_mut() {
            list.sort_by_key(|&(t, _, _)| t);
        }
        let regions = RegionEvidence::new(db, &evidence);
        let no_evidence = Evidence::new();
        let mut placements = Placements {
            counts: BTreeMap::new(),
            per_sample: Vec::with_capacity(decoded.len()),
        };
        for (trace, samples) in db.traces.threads.iter().zip(&decoded) {
            let thread = ThreadIdx::from_index(trace.thread as usize);
            let evidence = evidence.get(&process(trace.thread)).unwrap_or(&no_evidence);
            let mut targets = Vec::with_capacity(samples.len());
            for &(time, c) in samples {
                let node = DbNodeId::from_index(c as usize);
                let at = (trace.thread, time);
                let target = shape
                    .is_worker_side(node)
                    .then(|| place(db, shape, (evidence, &regions), at, node));
                if let Some(target) = target {
                    let count = placements.counts.entry((node, thread)).or_default();
                    *count.entry(target).or_default() += 1;
                }
                targets.push((time, node, target));
            }
            placements.per_sample.push(targets);
        }
        placements
    }
}

/// Where the worker sample of database thread `thread` at `time` in `node` goes, given the
/// master side's samples and what the OpenMP tool's timeline says of them.
fn place(
    db: &Database,
    shape: &Shape,
    (evidence, regions): (&Evidence, &RegionEvidence<'_>),
    (thread, time): (u32, u64),
    node: DbNodeId,
) -> Target {
    let (before, after) = regions
        .for_sample(db, evidence, thread, time)
        .unwrap_or_else(|| neighbours(evidence, time));
    let place = &shape.places[node.index()];
    let Some(body) = place.worker_body else {
        // The runtime waiting outside any body: blame what the master was doing.
        let master = before.or(after);
        return master.map_or(Target::Unplaced, |m| Target::Blame(blamed(db, shape, m)));
    };
    let candidates = (shape.entries_of.get(&Body::of(db, body))).map_or(&[][..], |c| &c[..]);
    let master_body = |e: DbNodeId| candidates.iter().find(|&&(c, _)| c == e).map(|&(_, b)| b);
    match candidates {
        [(_, only)] => Target::Region(*only),
        [] => {
            // No master ran this body: the region the master was in then.
            let region = |m: DbNodeId| shape.region_of(db, m);
            let region = agreed(before.and_then(region), after.and_then(region));
            region.map_or(Target::Unplaced, Target::Entry)
        }
        _ => {
            let region = |m: DbNodeId| shape.region_among(db, m, candidates);
            let region = agreed(before.and_then(region), after.and_then(region));
            region
                .and_then(master_body)
                .map_or(Target::Unplaced, Target::Region)
        }
    }
}

/// The master side's samples nearest before (or at) and after `time`.
fn neighbours(evidence: &Evidence, time: u64) -> (Option<DbNodeId>, Option<DbNodeId>) {
    let i = evidence.partition_point(|&(t, _, _)| t <= time);
    let before = i.checked_sub(1).map(|j| evidence[j].1);
    (before, evidence.get(i).map(|&(_, n, _)| n))
}

/// The one answer two pieces of evidence give: both the same, or only one there.
fn agreed(a: Option<DbNodeId>, b: Option<DbNodeId>) -> Option<DbNodeId> {
    match (a, b) {
        (Some(a), Some(b)) => (a == b).then_some(a),
        (a, b) => a.or(b),
    }
}

/// The context blamed for a worker's waiting while the master was at `node`: the region the
/// master was in, or else the procedure frame it was running.
fn blamed(db: &Database, shape: &Shape, node: DbNodeId) -> DbNodeId {
    if let Some(region) = shape.region_of(db, node) {
        return region;
    }
    let mut at = node;
    while at != DbNodeId::ROOT {
        let n = &db.nodes[at.index()];
        if n.kind.is_activation() && n.kind != crate::db::node::NodeKind::Kernel {
            return at;
        }
        at = n.parent;
    }
    DbNodeId::ROOT
}
