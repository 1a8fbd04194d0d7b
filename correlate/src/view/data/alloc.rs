//! The allocation-sites view: per heap object (an allocation calling context), what its
//! blocks did, summed over the selected threads, ranked by bytes allocated (the weight of a
//! site on the allocator; heaptrack and DHAT rank by it too).
//!
//! Every number is exact, from the allocation records: calls, bytes, frees, the bytes still
//! live when the run ended (leaked, or freed at exit without a `free`), the smallest and
//! largest block and the lifetimes of the freed blocks. The peak is per thread: a site
//! allocating in several threads shows the sum of its threads' peaks, an upper bound of its
//! peak (exact for a site used by one thread). Temporaries (heaptrack's blocks freed before the
//! thread's next allocation) are not recorded in `profile.db`, so not shown.

use profiler::db::Cost;

use super::delinquent::MEASURE;
use super::views::{metric_infos, pick, selected};
use crate::db::data::{DataObjectId, SiteCounts};
use crate::db::database::{Database, Selection};
use crate::db::heap_name::user_frames;
use crate::db::ids::DbNodeId;
use crate::db::label;
use crate::view::tree::MetricInfo;

/// The allocation-sites view of a database.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocView {
    /// The metrics shown (the data cost of each site's blocks); totals are the data samples'
    /// in the selected threads, as in the other data views.
    pub metrics: Vec<MetricInfo>,
    /// The sites, most bytes first.
    pub rows: Vec<AllocRow>,
    /// The measured command line.
    pub command: Vec<String>,
    /// The process id of the first selected thread.
    pub pid: Option<u32>,
    /// Wall-clock time of the measured runs, ns.
    pub elapsed_ns: u64,
    /// Allocation records received (allocations and frees), over the profiles.
    pub records: u64,
    /// Allocation records lost.
    pub lost: u64,
    /// Why heap blocks were not tracked, per profile where they were not.
    pub heap_unavailable: Vec<String>,
}

/// The blocks allocated at one calling context.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocRow {
    /// The heap object.
    pub object: DataObjectId,
    /// The allocation path outside the allocator, innermost first, one `function (file:line)`
    /// per frame (inlined frames included), each with the line of the call it made.
    pub path: Vec<String>,
    /// What was allocated there, over the selected threads.
    pub counts: SiteCounts,
    /// Data cost of the site's blocks, per metric shown.
    pub costs: Vec<Cost>,
}

/// The allocation sites of `db` in the threads of `selection`, with the data cost of their
/// blocks in the metrics at `metrics` (indices into [`Database::metrics`]).
pub fn alloc_view(db: &Database, selection: &Selection, metrics: &[usize]) -> AllocView {
    let data = &db.data;
    let mut at: Vec<Option<usize>> = vec![None; data.objects.len()];
    let mut rows: Vec<AllocRow> = Vec::new();
    for stats in data.sites.iter().filter(|s| selection.includes(s.thread)) {
        let row = *at[stats.object.index()].get_or_insert_with(|| {
            let site = data.object(stats.object).site;
            rows.push(AllocRow {
                object: stats.object,
                path: site.map_or_else(Vec::new, |site| frames(db, site)),
                counts: SiteCounts::empty(),
                costs: vec![Cost::default(); metrics.len()],
            });
            rows.len() - 1
        });
        rows[row].counts.add(&stats.counts);
    }
    let mut totals = vec![Cost::default(); db.metrics.len()];
    for access in selected(db, selection) {
        Cost::add_each(&mut totals, &access.costs);
        if let Some(row) = at[access.object.index()] {
            Cost::add_each(&mut rows[row].costs, &pick(&access.costs, metrics));
        }
    }
    rows.sort_by(|a, b| {
        (b.counts.bytes, b.counts.calls)
            .cmp(&(a.counts.bytes, a.counts.calls))
            .then_with(|| a.object.cmp(&b.object))
    });
    let pid = match selection {
        Selection::All => db.threads.first(),
        Selection::Threads(list) => list.first().map(|t| &db.threads[t.index()]),
    };
    AllocView {
        metrics: pick(&metric_infos(db, &totals), metrics),
        rows,
        command: db.command.clone(),
        pid: pid.map(|t| t.pid),
        elapsed_ns: data.elapsed_ns,
        records: data.stats.alloc_records,
        lost: data.stats.alloc_lost,
        heap_unavailable: data.stats.heap_unavailable.clone(),
    }
}

/// Why `db` has no allocation sites, as a one-line notice (heap blocks not tracked, none
/// measured, or none reached `--alloc-min`); `None` when it has some.
pub fn alloc_notice(db: &Database) -> Option<String> {
    let data = &db.data;
    if !data.sites.is_empty() {
        return None;
    }
    Some(match data.stats.heap_unavailable.first() {
        Some(why) => format!("no allocation sites: heap blocks were not tracked ({why})"),
        None if data.is_empty() => format!("no allocation sites; {MEASURE}"),
        None => "no allocation sites: no block reached hpcrun-rs's --alloc-min \
                 (`--alloc-min 0` tracks every block)"
            .to_string(),
    })
}

/// The allocation path to `site` outside the allocator, innermost first, as
/// `function (file:line)` (the call towards the allocation; no position where it is unknown).
fn frames(db: &Database, site: DbNodeId) -> Vec<String> {
    user_frames(db, site)
        .into_iter()
        .map(|(frame, call)| {
            let node = &db.nodes[frame.index()];
            let file = node.file.map(|f| db.file(f));
            let name = label::name(node.kind, &node.name, file, node.line);
            match call {
                Some((file, line)) => {
                    let file = file.map_or("unknown file", |f| label::base_name(db.file(f)));
                    format!("{name} ({file}:{line})")
                }
                None => name,
            }
        })
        .collect()
}
