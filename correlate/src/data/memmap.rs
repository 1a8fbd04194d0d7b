//! The memory map (xQUAD's memory maps, HMTT's address traces): the traced data samples
//! (`hpcrun-rs -t --data`) placed in time and in each object's pages, so that which data a
//! program works on *when* can be seen: time slices x objects in text and CSV, time x page
//! as a picture ([`crate::render::memmap`]).
//!
//! A page is a page of the object: page 0 holds its first byte (a static's link-time
//! address, a heap block's start; a local's variable), so blocks of one allocation context
//! share their page numbers, and a heap block's allocator header is page -1. Samples whose
//! object has no offset (an unnamed frame, a region) have no page.

use fxhash::FxHashMap;

use super::build::enclosing_frame;
use super::model::{DataObjectId, ObjectKind};
use crate::database::{Database, Selection};
use crate::ids::{DbNodeId, ThreadIdx};

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
    let start_ns = samples.iter().map(|s| s.0).min()?;
    let end_ns = samples.iter().map(|s| s.0).max()?;
    let slice_ns = slice_ns
        .filter(|&n| n > 0)
        .unwrap_or_else(|| crate::time::round_step(end_ns - start_ns));
    let mut map = MemMap {
        start_ns,
        end_ns,
        slice_ns,
        objects: objects(db, &samples),
        rows: Vec::new(),
        points: Vec::with_capacity(samples.len()),
    };
    let index: FxHashMap<DataObjectId, usize> = map
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| (o.id, i))
        .collect();
    let mut names: FxHashMap<DbNodeId, String> = FxHashMap::default();
    let mut cells: FxHashMap<(usize, ThreadIdx, String, usize, Option<i64>), u64> =
        FxHashMap::default();
    for &(time, access) in &samples {
        let a = &db.data.accesses[access];
        let object = index[&a.object];
        let page = page_of(db, a.object, a.offset);
        map.points.push((time, object, page));
        let procedure = names
            .entry(a.node)
            .or_insert_with(|| db.label(enclosing_frame(db, a.node).unwrap_or(DbNodeId::ROOT)));
        let slice = ((time - start_ns) / slice_ns) as usize;
        let key = (slice, a.thread, procedure.clone(), object, page);
        *cells.entry(key).or_default() += 1;
    }
    map.points.sort_unstable();
    map.rows = cells
        .into_iter()
        .map(
            |((slice, thread, procedure, object, page), samples)| MapRow {
                slice,
                thread,
                procedure,
                object,
                page,
                samples,
            },
        )
        .collect();
    map.rows.sort_by(|a, b| {
        let key = |r: &MapRow| (r.slice, r.thread, r.object, r.page);
        key(a)
            .cmp(&key(b))
            .then_with(|| a.procedure.cmp(&b.procedure))
    });
    Some(map)
}

/// The selected threads' traced samples as (time, access index).
fn decode(db: &Database, threads: &Selection) -> Vec<(u64, usize)> {
    let accesses = db.data.accesses.len();
    db.data
        .traces
        .threads
        .iter()
        .filter(|t| threads.includes(ThreadIdx::from_index(t.thread as usize)))
        // Databases were checked when read, so every trace decodes.
        .filter_map(|t| t.decode(accesses).ok())
        .flatten()
        .map(|(time, access)| (time, access as usize))
        .collect()
}

/// The objects the samples touched, with their page ranges, most samples first.
fn objects(db: &Database, samples: &[(u64, usize)]) -> Vec<MapObject> {
    let mut by_id: FxHashMap<DataObjectId, MapObject> = FxHashMap::default();
    for &(_, access) in samples {
        let a = &db.data.accesses[access];
        let page = page_of(db, a.object, a.offset);
        let o = by_id.entry(a.object).or_insert_with(|| {
            let object = db.data.object(a.object);
            MapObject {
                id: a.object,
                label: object.label(),
                kind: object.kind,
                pages: None,
                samples: 0,
            }
        });
        o.samples += 1;
        if let Some(p) = page {
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
