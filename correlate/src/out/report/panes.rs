//! The report's panes beside the tree views, present when the database has what they show:
//! the data objects of `hpcrun-rs --data` (the `--data` view as a sortable table), the
//! timeline of `hpcrun-rs -t` (the `--timeline --svg` picture, inline) and the memory map of
//! `hpcrun-rs -t --data` (the `--memmap --svg` picture, inline).

use serde::Serialize;

use crate::db::database::{Database, Selection};
use crate::out::render::data::{bytes, object_label};
use crate::out::render::memmap::{draw as draw_map, MapLayout};
use crate::out::render::timeline::{draw, write_svg, Layout, Shape};
use crate::view::data::memmap;
use crate::view::data::objects;
use crate::view::time::{timeline, TimelineOptions};

/// Time columns of the report's timeline (one pixel each).
const TIMELINE_COLUMNS: usize = 800;

/// One data object's row.
#[derive(Serialize)]
pub(crate) struct ObjectData {
    /// The label, as the `--data` view prints it.
    n: String,
    /// Kind: static, heap, stack, region, unknown.
    k: &'static str,
    /// Size for people, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<String>,
    /// Heap objects: blocks allocated.
    b: u64,
    /// Data samples per metric.
    s: Vec<u64>,
    /// Share of the metric's data samples' cost, in percent.
    p: Vec<f64>,
}

/// The data objects of `db` with the metrics at `metrics`, most costly first; `None` when it has
/// none.
pub(crate) fn object_rows(db: &Database, metrics: &[usize]) -> Option<Vec<ObjectData>> {
    let mut table = objects(db, &Selection::All);
    if table.rows.is_empty() {
        return None;
    }
    table.select_metrics(metrics);
    let rows = table.rows.iter().map(|r| {
        let o = db.data.object(r.object);
        let share = table
            .metrics
            .iter()
            .zip(&r.costs)
            .map(|(m, c)| match m.total {
                0 => 0.0,
                t => c.value as f64 * 100.0 / t as f64,
            });
        ObjectData {
            n: object_label(o),
            k: o.kind.name(),
            size: o.size.map(bytes),
            b: r.blocks,
            s: r.costs.iter().map(|c| c.samples).collect(),
            p: share.collect(),
        }
    });
    Some(rows.collect())
}

/// The timeline of every thread of `db` as SVG; `None` without traces.
pub(crate) fn timeline_svg(db: &Database) -> Option<String> {
    let options = TimelineOptions {
        depth: None,
        columns: TIMELINE_COLUMNS,
        threads: Selection::All,
    };
    let grid = timeline(db, &options)?;
    let (shapes, size) = draw(&grid, &Layout::new(TIMELINE_COLUMNS, grid.lanes.len()));
    inline_svg(&shapes, size)
}

/// The memory map of every thread of `db` as SVG, as wide as the timeline; `None` without
/// data traces.
pub(crate) fn memmap_svg(db: &Database) -> Option<String> {
    let map = memmap(db, &Selection::All, None)?;
    let (shapes, size) = draw_map(&map, &MapLayout::new(TIMELINE_COLUMNS as u32));
    inline_svg(&shapes, size)
}

/// A drawing as SVG markup to put inside the page.
fn inline_svg(shapes: &[Shape], size: (u32, u32)) -> Option<String> {
    let mut svg = Vec::new();
    write_svg(shapes, size, &mut svg).ok()?;
    // Inline in HTML the SVG namespace is implied: the page names no web address.
    let svg = String::from_utf8(svg).ok()?;
    Some(svg.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1))
}
