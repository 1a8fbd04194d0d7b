//! The memory map ([`crate::memmap`]) as text (per slice, per object: samples, pages and a bar
//! over the object's pages), CSV (one record per slice, thread, procedure, object and page),
//! JSON, and one drawing written as SVG or rasterised to PNG: time across, one band per object
//! down, each sample a mark at its time and page in the object's colour.

use std::io::{self, Write};

use serde_json::json;

use super::table::csv_field;
use super::timeline::{colour, hex, seconds, time_axis, Shape};
use fxhash::FxHashMap;

use crate::db::database::Database;
use crate::out::render::{printable, shortened, whole_if_cut};
use crate::view::data::{MapObject, MapRow, MemMap};

/// Characters of the text rendering's page bar.
const BAR: usize = 40;

/// The most objects drawn in the picture, of those with at least [`DRAWN_SHARE`] of the
/// samples (the rest are counted in a line under the legend).
pub const DRAWN_OBJECTS: usize = 8;

/// The least share of the samples an object needs to be drawn (the first always is).
pub const DRAWN_SHARE: f64 = 0.01;

/// The most objects the text lists per slice (the rest are summed in one line).
const LISTED_OBJECTS: usize = 6;

/// Write the text rendering: per slice, per object with samples in it, the samples, the
/// distinct pages and a bar over the object's pages (`#` pages with the most samples, `:` and
/// `.` fewer, blank none).
pub fn render_text(map: &MemMap, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{} slices of {} ms; per object: samples, distinct pages, and its pages from the lowest to the highest touched",
        map.slices(),
        map.slice_ns as f64 / 1e6
    )?;
    writeln!(
        out,
        "{:>9}  {:>8}  {:>6}  {:<w$}  object",
        "slice",
        "samples",
        "pages",
        "pages touched",
        w = BAR + 2
    )?;
    for rows in map.rows.chunk_by(|a, b| a.slice == b.slice) {
        let mut at = format!("{} s", seconds(rows[0].slice as u64 * map.slice_ns));
        let mut busy = pages_per_object(rows);
        busy.sort_by_key(|(object, pages)| (std::cmp::Reverse(total(pages)), *object));
        for (object, pages) in busy.iter().take(LISTED_OBJECTS) {
            let o = &map.objects[*object];
            let distinct = pages.keys().filter(|p| p.is_some()).count();
            let (samples, bar, name) = (total(pages), bar(o, pages), printable(&o.label));
            writeln!(out, "{at:>9}  {samples:>8}  {distinct:>6}  |{bar}|  {name}")?;
            at.clear();
        }
        if busy.len() > LISTED_OBJECTS {
            let rest = &busy[LISTED_OBJECTS..];
            let samples: u64 = rest.iter().map(|(_, pages)| total(pages)).sum();
            let more = match rest.len() {
                1 => "(1 more object)".to_string(),
                n => format!("({n} more objects)"),
            };
            writeln!(out, "{at:>9}  {samples:>8}  {:>6}  {more}", "")?;
        }
    }
    Ok(())
}

/// Samples per page of one object in one slice.
type Pages = FxHashMap<Option<i64>, u64>;

/// The objects with samples among one slice's `rows`, each with its samples per page.
fn pages_per_object(rows: &[MapRow]) -> Vec<(usize, Pages)> {
    let mut by_object: FxHashMap<usize, Pages> = FxHashMap::default();
    for row in rows {
        *by_object
            .entry(row.object)
            .or_default()
            .entry(row.page)
            .or_default() += row.samples;
    }
    by_object.into_iter().collect()
}

/// All the samples of `pages`.
fn total(pages: &Pages) -> u64 {
    pages.values().sum()
}

/// [`BAR`] characters over `o`'s page range, each as dense as the busiest page it covers.
fn bar(o: &MapObject, pages: &Pages) -> String {
    let Some((lo, hi)) = o.pages else {
        return " ".repeat(BAR);
    };
    let mut cells = [0u64; BAR];
    for (&page, &n) in pages {
        if let Some(p) = page {
            let c = ((p - lo) as u128 * BAR as u128 / (hi - lo + 1) as u128) as usize;
            cells[c.min(BAR - 1)] = cells[c.min(BAR - 1)].max(n);
        }
    }
    let max = cells.iter().copied().max().unwrap_or(0).max(1);
    cells
        .iter()
        .map(|&n| match n {
            0 => ' ',
            n if n * 3 <= max => '.',
            n if n * 3 <= 2 * max => ':',
            _ => '#',
        })
        .collect()
}

/// Write the CSV records: `slice_start_ns` (trace clock, CLOCK_MONOTONIC), `tid`,
/// `procedure`, `object`, `kind`, `page` (empty where the object has no offsets), `samples`.
pub fn render_csv(map: &MemMap, db: &Database, out: &mut dyn Write) -> io::Result<usize> {
    writeln!(out, "slice_start_ns,tid,procedure,object,kind,page,samples")?;
    for r in &map.rows {
        let o = &map.objects[r.object];
        let start = map.start_ns + r.slice as u64 * map.slice_ns;
        let tid = db.threads[r.thread.index()].tid;
        let page = r.page.map_or_else(String::new, |p| p.to_string());
        writeln!(
            out,
            "{start},{tid},{},{},{},{page},{}",
            csv_field(&r.procedure),
            csv_field(&o.label),
            o.kind.name(),
            r.samples
        )?;
    }
    Ok(map.rows.len())
}

/// Write the map as JSON: time span and slice length (trace clock ns), the objects (label,
/// kind, page range, samples, colour in the picture) and the rows as in the CSV.
pub fn render_json(map: &MemMap, db: &Database, out: &mut dyn Write) -> io::Result<()> {
    let objects: Vec<_> = map
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            json!({"object": o.label, "kind": o.kind.name(), "samples": o.samples,
                "pages": o.pages.map(|(lo, hi)| [lo, hi]), "colour": hex(colour(i))})
        })
        .collect();
    let rows: Vec<_> = map
        .rows
        .iter()
        .map(|r| {
            json!({"slice": r.slice, "tid": db.threads[r.thread.index()].tid,
                "procedure": r.procedure, "object": r.object, "page": r.page,
                "samples": r.samples})
        })
        .collect();
    let doc = json!({"start_ns": map.start_ns, "end_ns": map.end_ns, "slice_ns": map.slice_ns,
        "objects": objects, "rows": rows});
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// Where the picture's bands are (tests read the PNG with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLayout {
    /// The left edge of the plot (labels go left of it).
    pub left: u32,
    /// The top of the first band.
    pub top: u32,
    /// Pixel columns of the plot.
    pub plot_width: u32,
    /// Height of one band (one object).
    pub band_height: u32,
    /// Space between bands.
    pub gap: u32,
}

impl MapLayout {
    /// A plot `width` pixels wide.
    pub fn new(width: u32) -> MapLayout {
        MapLayout {
            left: 220,
            top: 20,
            plot_width: width.max(1),
            band_height: 64,
            gap: 8,
        }
    }

    /// The top of band `i`.
    pub fn band_top(&self, i: usize) -> u32 {
        self.top + i as u32 * (self.band_height + self.gap)
    }

    /// The pixel column of time `t` (trace clock ns) in a map of `map`'s span.
    pub fn column(&self, map: &MemMap, t: u64) -> u32 {
        let span = (map.end_ns - map.start_ns).max(1) as u128;
        let x = (t.saturating_sub(map.start_ns) as u128 * self.plot_width as u128 / span) as u32;
        x.min(self.plot_width - 1)
    }
}

/// Light grey behind each band, so that an object's extent shows where it has no samples.
const BAND: [u8; 3] = [0xf0, 0xf0, 0xf0];

/// The drawing of `map` laid out by `layout`, and its size (width, height).
pub fn draw(map: &MemMap, layout: &MapLayout) -> (Vec<Shape>, (u32, u32)) {
    let mut shapes = Vec::new();
    let drawn = drawn(map);
    for (i, o) in map.objects.iter().take(drawn).enumerate() {
        let y = layout.band_top(i);
        let (x, w, h) = (layout.left, layout.plot_width, layout.band_height);
        shapes.push(Shape::Rect {
            x,
            y,
            w,
            h,
            rgb: BAND,
        });
        label(&mut shapes, o, 8, y);
        marks(&mut shapes, map, layout, i);
    }
    let axis = layout.band_top(drawn);
    time_axis(
        &mut shapes,
        (layout.left, axis),
        layout.plot_width,
        map.end_ns - map.start_ns,
    );
    let legend = axis + 36;
    for (i, o) in map.objects.iter().take(drawn).enumerate() {
        let y = legend + i as u32 * 20;
        let rgb = colour(i);
        shapes.push(Shape::Rect {
            x: layout.left,
            y,
            w: 14,
            h: 14,
            rgb,
        });
        let pages = o
            .pages
            .map_or(String::new(), |(lo, hi)| format!(", pages {lo} to {hi}"));
        let name = printable(&o.label);
        let text = format!(
            "{}  ({} samples{pages})",
            shortened(&name, LEGEND_CHARS),
            o.samples
        );
        shapes.push(Shape::Text {
            x: layout.left + 22,
            y: y + 12,
            text,
            centred: false,
            full: whole_if_cut(&name, LEGEND_CHARS),
        });
    }
    let mut height = legend + drawn as u32 * 20 + 10;
    if map.objects.len() > drawn {
        let rest: u64 = map.objects[drawn..].iter().map(|o| o.samples).sum();
        let more = map.objects.len() - drawn;
        let text = format!("{more} more objects with {rest} samples (each under 1%) not drawn");
        shapes.push(Shape::Text {
            x: layout.left,
            y: height + 4,
            text,
            centred: false,
            full: None,
        });
        height += 20;
    }
    (shapes, (layout.left + layout.plot_width + 40, height))
}

/// How many objects, from the first, are drawn.
pub fn drawn(map: &MemMap) -> usize {
    let total = map.points.len() as f64;
    let big = map
        .objects
        .iter()
        .take_while(|o| o.samples as f64 >= DRAWN_SHARE * total)
        .count();
    big.clamp(1, DRAWN_OBJECTS).min(map.objects.len())
}

/// Characters of an object's name in the legend and beside its band.
const LEGEND_CHARS: usize = 90;
const BAND_CHARS: usize = 30;

/// The band's label: the object's name (shortened) and its kind.
fn label(shapes: &mut Vec<Shape>, o: &MapObject, x: u32, y: u32) {
    let name = printable(&o.label);
    shapes.push(Shape::Text {
        x,
        y: y + 26,
        text: shortened(&name, BAND_CHARS),
        centred: false,
        full: whole_if_cut(&name, BAND_CHARS),
    });
    let text = format!("{} ({} samples)", o.kind.name(), o.samples);
    shapes.push(Shape::Text {
        x,
        y: y + 44,
        text,
        centred: false,
        full: None,
    });
}

/// Object `i`'s samples as marks in its band: two pixels wide per time column, the object's
/// pages spread over the band's height (lowest page at the bottom); samples without a page
/// mark the band's middle row. Vertical runs of marked rows become one rectangle.
fn marks(shapes: &mut Vec<Shape>, map: &MemMap, layout: &MapLayout, i: usize) {
    let h = layout.band_height as i64;
    let (lo, hi) = map.objects[i].pages.unwrap_or((0, 0));
    let mut cells: Vec<(u32, u32)> = map
        .points
        .iter()
        .filter(|p| p.1 == i)
        .map(|&(t, _, page)| {
            let row = match page {
                Some(p) => (h - 1) - ((p - lo) as i128 * h as i128 / (hi - lo + 1) as i128) as i64,
                None => h / 2,
            };
            (layout.column(map, t), row.clamp(0, h - 1) as u32)
        })
        .collect();
    cells.sort_unstable();
    cells.dedup();
    let top = layout.band_top(i);
    let rgb = colour(i);
    let mut k = 0;
    while k < cells.len() {
        let (x, row) = cells[k];
        let run = cells[k..]
            .iter()
            .enumerate()
            .take_while(|&(j, c)| *c == (x, row + j as u32))
            .count();
        shapes.push(Shape::Rect {
            x: layout.left + x,
            y: top + row,
            w: 2.min(layout.plot_width - x),
            h: run as u32,
            rgb,
        });
        k += run;
    }
}
