//! Per-procedure footprint (xQUAD's table): for each procedure whose code took data samples,
//! how many distinct pages (or 64-byte lines) of data it touched, and its data samples by
//! region: stack, heap, static, other (mappings holding no named object, unknown addresses).
//!
//! With `page-faults` data samples every first touch of a page is one sample, so the page
//! counts are exact; with clock samples they are the pages the samples happened to hit. A page
//! is an object's page: a static's by its link-time address, a heap object's by the offset in
//! its block (blocks of one allocation context share their page numbers), a local's by its
//! offset in the variable. Samples without an offset (an unnamed frame, a region) count in
//! their region but give no page.

use fxhash::{FxHashMap, FxHashSet};

use crate::db::data::{DataObjectId, ObjectKind};
use crate::db::database::frame_of;
use crate::db::database::Database;
use crate::db::ids::DbNodeId;

/// One procedure's footprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FootprintRow {
    /// The procedure (innermost frame, inlined code counted as its own).
    pub procedure: String,
    /// Distinct pages (or lines) touched.
    pub units: u64,
    /// Data samples (first metric) by region: stack, heap, static, other.
    pub by_region: [u64; 4],
}

impl FootprintRow {
    /// All its data samples.
    pub fn samples(&self) -> u64 {
        self.by_region.iter().sum()
    }
}

/// What one procedure touched: (object, unit) pairs, and samples by region.
type Touched = (FxHashSet<(DataObjectId, i64)>, [u64; 4]);

/// The names of the regions of [`FootprintRow::by_region`], in order.
pub const REGIONS: [&str; 4] = ["stack", "heap", "static", "other"];

/// The footprint of every procedure with data samples, most distinct units first; a unit is
/// 2^`unit_bits` bytes (12: pages, 6: cache lines).
pub fn footprint(db: &Database, unit_bits: u32) -> Vec<FootprintRow> {
    let mut by_proc: FxHashMap<String, Touched> = FxHashMap::default();
    let mut names: FxHashMap<DbNodeId, String> = FxHashMap::default();
    for access in &db.data.accesses {
        let name = names
            .entry(access.node)
            .or_insert_with(|| db.label(frame_of(db, access.node)));
        let object = &db.data.objects[access.object.index()];
        let (units, regions) = by_proc.entry(name.clone()).or_default();
        let samples = access.costs.first().map_or(0, |c| c.samples);
        regions[region(object.kind)] += samples;
        if let (Some(offset), true) = (access.offset, samples > 0) {
            let byte = object.start.unwrap_or(0) as i64 + offset;
            units.insert((access.object, byte >> unit_bits));
        }
    }
    let mut rows: Vec<FootprintRow> = by_proc
        .into_iter()
        .map(|(procedure, (units, by_region))| FootprintRow {
            procedure,
            units: units.len() as u64,
            by_region,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.units, b.samples(), &a.procedure).cmp(&(a.units, a.samples(), &b.procedure))
    });
    rows
}

/// The index in [`REGIONS`] of an object kind.
fn region(kind: ObjectKind) -> usize {
    match kind {
        ObjectKind::Stack => 0,
        ObjectKind::Heap => 1,
        ObjectKind::Static => 2,
        ObjectKind::Region | ObjectKind::Unknown => 3,
    }
}
