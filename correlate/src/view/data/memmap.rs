//! The memory map (xQUAD's memory maps, HMTT's address traces): the traced data samples
//! (`hpcrun-rs -t --data`) placed in time and in each object's pages, so that which data a
//! program works on *when* can be seen: time slices x objects in text and CSV, time x page
//! as a picture (drawn by the `memmap` renderer in `out`).
//!
//! A page is a page of the object: page 0 holds its first byte (a static's link-time
//! address, a heap block's start; a local's variable), so blocks of one allocation context
//! share their page numbers, and a heap block's allocator header is page -1. Samples whose
//! object has no offset (an unnamed frame, a region) have no page.

use fxhash::FxHashMap;

use crate::db::data::{DataObjectId, ObjectKind};
use crate::db::database::frame_of;
use crate::db::database::{Database, Selection};
use crate::db::ids::{DbNodeId, ThreadIdx};

/// log2 of the page size the map counts in.
const PAGE_BITS: u32 = 12;

/// The traced data samples by time slice, object and page.
#[derive(Debug, Clone, PartialEq)]
pub struct MemMap {
    /// The first traced sample's time (trace clock: CLOCK_MONOTONIC ns); slice 0 starts here.
    pub start_ns: u64,
    /// The last traced sample's time.
    pub end_ns: u64,
    /// Length of a slice, ns.
    pub slice_ns: u64,
    /// The objects with traced samples, most samples first.
    pub objects: Vec<MapObject>,
    /// Samples per (slice, thread, procedure, object, page), in that order.
    pub rows: Vec<MapRow>,
    /// Every traced sample as (time, index in `objects`, page), in time order.
    pub points: Vec<(u64, usize, Option<i64>)>,
}

/// One object of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapObject {
    /// The object.
    pub id: DataObjectId,
    /// Its label, as the data views print it.
    pub label: String,
    /// Its kind.
    pub kind: ObjectKind,
    /// Its lowest and highest page with samples (`None`: no sample had a page).
    pub pages: Option<(i64, i64)>,
    /// Its traced samples.
    pub samples: u64,
}

/// The samples of one thread's procedure on one page of one object in one slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRow {
    /// The slice.
    pub slice: usize,
    /// The thread.
    pub thread: ThreadIdx,
    /// The accessing procedure (innermost frame, inlined code counted as its own).
    pub procedure: String,
    /// Index in [`MemMap::objects`].
    pub object: usize,
    /// The page, where the object has offsets.
    pub page: Option<i64>,
    /// Samples.
    pub samples: u64,
}

impl MemMap {
    /// The number of slices.
    pub fn slices(&self) -> usize {
        ((self.end_ns - self.start_ns) / self.slice_ns) as usize + 1
    }
}

/// The memory map of the selected threads' traced data samples, cut into slices of
/// `slice_ns` (default, and in place of 0: a round length giving at most 11); `None` when the
/// database has no data traces for them.
pub fn memmap(db: &Database, threads: &Selection, slice_ns: Option<u64>) -> Option<MemMap> {
    let samples = decode(db, threads);
    let start_ns = samples.iter().map(|s| s.time).min()?;
    let end_ns = samples.iter().map(|s| s.time).max()?;
    let slice_ns = slice_ns
        .filter(|&n| n > 0)
        .unwrap_or_else(|| crate::view::time::round_step(end_ns - start_ns));
    let objects = objects(db, &samples);
    let index: FxHashMap<DataObjectId, usize> =
        objects.iter().enumerate().map(|(i, o)| (o.id, i)).collect();
    // Procedures by label (frames of one name, e.g. a function inlined in several places,
    // make one row), each access node's label looked up once.
    let mut labels: Vec<String> = Vec::new();
    let mut label_ids: FxHashMap<String, usize> = FxHashMap::default();
    let mut procedure_of: FxHashMap<DbNodeId, usize> = FxHashMap::default();
    let mut cells: FxHashMap<(usize, ThreadIdx, usize, usize, Option<i64>), u64> =
        FxHashMap::default();
    let mut points = Vec::with_capacity(samples.len());
    for s in &samples {
        let a = &db.data.accesses[s.access];
        let object = index[&a.object];
        points.push((s.time, object, s.page));
        let procedure = *procedure_of.entry(a.node).or_insert_with(|| {
            let label = db.label(frame_of(db, a.node));
            *label_ids.entry(label.clone()).or_insert_with(|| {
                labels.push(label);
                labels.len() - 1
            })
        });
        let slice = ((s.time - start_ns) / slice_ns) as usize;
        *cells
            .entry((slice, a.thread, procedure, object, s.page))
            .or_default() += 1;
    }
    points.sort_unstable();
    let mut rows: Vec<MapRow> = cells
        .into_iter()
        .map(
            |((slice, thread, procedure, object, page), samples)| MapRow {
                slice,
                thread,
                procedure: labels[procedure].clone(),
                object,
                page,
                samples,
            },
        )
        .collect();
    rows.sort_by(|a, b| {
        let key = |r: &MapRow| (r.slice, r.thread, r.object, r.page);
        key(a)
            .cmp(&key(b))
            .then_with(|| a.procedure.cmp(&b.procedure))
    });
    Some(MemMap {
        start_ns,
        end_ns,
        slice_ns,
        objects,
        rows,
        points,
    })
}

/// One traced data sample: when, which access, and the page of its object it touched.
struct Sample {
    time: u64,
    access: usize,
    page: Option<i64>,
}

/// The selected threads' traced samples.
fn decode(db: &Database, threads: &Selection) -> Vec<Sample> {
    let accesses = &db.data.accesses;
    db.data
        .traces
        .threads
        .iter()
        .filter(|t| threads.includes(ThreadIdx::from_index(t.thread as usize)))
        // Databases were checked when read, so every trace decodes.
        .filter_map(|t| t.decode(accesses.len()).ok())
        .flatten()
        .map(|(time, access)| {
            let a = &accesses[access as usize];
            let page = page_of(db, a.object, a.offset);
            Sample {
                time,
                access: access as usize,
                page,
            }
        })
        .collect()
}

/// The objects the samples touched, with their page ranges, most samples first.
fn objects(db: &Database, samples: &[Sample]) -> Vec<MapObject> {
    let mut by_id: FxHashMap<DataObjectId, MapObject> = FxHashMap::default();
    for s in samples {
        let id = db.data.accesses[s.access].object;
        let o = by_id.entry(id).or_insert_with(|| {
            let object = db.data.object(id);
            MapObject {
                id,
                label: object.label(),
                kind: object.kind,
                pages: None,
                samples: 0,
            }
        });
        o.samples += 1;
        if let Some(p) = s.page {
            o.pages = Some(o.pages.map_or((p, p), |(lo, hi)| (lo.min(p), hi.max(p))));
        }
    }
    let mut objects: Vec<MapObject> = by_id.into_values().collect();
    objects.sort_by(|a, b| (b.samples, &a.label).cmp(&(a.samples, &b.label)));
    objects
}

/// The page of `object` holding the byte at `offset` (page 0 holds its first byte).
fn page_of(db: &Database, object: DataObjectId, offset: Option<i64>) -> Option<i64> {
    let start = db.data.object(object).start.unwrap_or(0) as i64;
    Some(((start + offset?) >> PAGE_BITS) - (start >> PAGE_BITS))
}
