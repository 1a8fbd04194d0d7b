//! The allocation-sites view ([`AllocView`]) as text and as JSON (documented in the README's
//! contract section); [`super::dhat`] writes it for DHAT's viewer.

use std::io::{self, Write};

use profiler::db::Cost;
use serde::Serialize;
use serde_json::Value;

use super::data::{bytes, cost_columns, metric_heading, object_json, object_label};
use super::table::{shown, Table};
use super::text::{TextOptions, TextSummary};
use crate::db::database::Database;
use crate::view::data::{AllocRow, AllocView};
use crate::view::tree::MetricInfo;

/// Print the view as a table, most bytes first: calls, bytes, frees, peak live bytes, bytes
/// live at the end, mean lifetime of the freed blocks, block sizes, the data cost of the
/// site's blocks per metric, and the site. Byte counts are shortened (`1.5 MiB`) unless
/// `absolute`. Sites below the threshold (of all bytes allocated) fold into `(N more)`.
pub fn text(
    db: &Database,
    view: &AllocView,
    opts: &TextOptions,
    out: &mut dyn Write,
) -> io::Result<TextSummary> {
    let calls: u64 = view.rows.iter().map(|r| r.counts.calls).sum();
    let total: u64 = view.rows.iter().map(|r| r.counts.bytes).sum();
    writeln!(
        out,
        "{calls} blocks, {} allocated at {} sites; {} allocation records, {} lost",
        size(total, opts.absolute),
        view.rows.len(),
        view.records,
        view.lost
    )?;
    for why in &view.heap_unavailable {
        writeln!(out, "heap blocks not tracked: {why}")?;
    }
    let metric_head = metric_heading(&view.metrics, opts.absolute);
    let heads = [
        "calls",
        "bytes",
        "frees",
        "peak live",
        "at end",
        "mean life",
        "sizes",
        metric_head.as_str(),
        "allocation site",
    ];
    let mut table = Table::new(heads.map(String::from).to_vec(), heads.len() - 1);
    let count = shown(
        view.rows.iter().map(|r| r.counts.bytes),
        total,
        opts.threshold_pct,
    );
    for row in &view.rows[..count] {
        let name = object_label(db.data.object(row.object));
        table.push(cells(view, row, name, opts.absolute));
    }
    let folded = &view.rows[count..];
    if let Some((first, rest)) = folded.split_first() {
        let mut sum = first.clone();
        for row in rest {
            add(&mut sum, row);
        }
        let name = format!("({} more)", folded.len());
        table.push(cells(view, &sum, name, opts.absolute));
    }
    table.write(opts.color, out)?;
    Ok(TextSummary {
        rows: count,
        folded: folded.len(),
    })
}

/// Add `row`'s blocks and costs to `sum`.
fn add(sum: &mut AllocRow, row: &AllocRow) {
    sum.counts.add(&row.counts);
    Cost::add_each(&mut sum.costs, &row.costs);
}

/// The cells of one row labelled `name`.
fn cells(view: &AllocView, row: &AllocRow, name: String, absolute: bool) -> Vec<String> {
    let sizes = if row.counts.size_min == row.counts.size_max {
        row.counts.size_min.to_string()
    } else {
        format!("{}..{}", row.counts.size_min, row.counts.size_max)
    };
    vec![
        row.counts.calls.to_string(),
        size(row.counts.bytes, absolute),
        row.counts.frees.to_string(),
        size(row.counts.peak_live, absolute),
        size(row.counts.live_at_end, absolute),
        row.counts
            .mean_lifetime_ns()
            .map_or_else(String::new, duration),
        sizes,
        cost_columns(&view.metrics, &row.costs, absolute),
        name,
    ]
}

/// A byte count: exact with `absolute`, else shortened (`3.0 MiB`).
fn size(n: u64, absolute: bool) -> String {
    if absolute {
        format!("{n} B")
    } else {
        bytes(n)
    }
}

/// A duration in ns as `830 ns`, `12.5 µs`, `3.2 ms` or `1.25 s`.
fn duration(ns: u64) -> String {
    let v = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.1} µs", v / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} ms", v / 1e6),
        _ => format!("{:.2} s", v / 1e9),
    }
}

/// The JSON document (see the README's contract section).
#[derive(Serialize)]
struct Document<'a> {
    view: &'static str,
    metrics: &'a [MetricInfo],
    records: u64,
    lost: u64,
    heap_unavailable: &'a [String],
    sites: Vec<Site<'a>>,
}

#[derive(Serialize)]
struct Site<'a> {
    object: Value,
    frames: &'a [String],
    calls: u64,
    bytes: u64,
    frees: u64,
    peak_live: u64,
    live_at_end: u64,
    blocks_at_end: u64,
    mean_lifetime_ns: Option<u64>,
    size_min: u64,
    size_max: u64,
    costs: Vec<u64>,
    samples: Vec<u64>,
}

/// Write the view as indented JSON followed by a newline: `view` (`alloc`), `metrics`, the
/// allocation records' counts, and `sites` most bytes first, each with its `object` described
/// as in the `--data` view.
pub fn json(db: &Database, view: &AllocView, out: &mut dyn Write) -> io::Result<()> {
    let sites = view
        .rows
        .iter()
        .map(|r| Site {
            object: object_json(db, r.object.index(), db.data.object(r.object)),
            frames: &r.path,
            calls: r.counts.calls,
            bytes: r.counts.bytes,
            frees: r.counts.frees,
            peak_live: r.counts.peak_live,
            live_at_end: r.counts.live_at_end,
            blocks_at_end: r.counts.blocks_at_end(),
            mean_lifetime_ns: r.counts.mean_lifetime_ns(),
            size_min: r.counts.size_min,
            size_max: r.counts.size_max,
            costs: r.costs.iter().map(|c| c.value).collect(),
            samples: r.costs.iter().map(|c| c.samples).collect(),
        })
        .collect();
    let document = Document {
        view: "alloc",
        metrics: &view.metrics,
        records: view.records,
        lost: view.lost,
        heap_unavailable: &view.heap_unavailable,
        sites,
    };
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(size(3 << 20, false), "3.0 MiB");
        assert_eq!(size(3 << 20, true), "3145728 B");
        assert_eq!(duration(830), "830 ns");
        assert_eq!(duration(12_500), "12.5 µs");
        assert_eq!(duration(1_250_000_000), "1.25 s");
    }
}
