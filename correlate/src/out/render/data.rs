//! The data views' tables as text and JSON: `--data` (objects ranked) and `--data --fields`
//! (one object by part). The tree-shaped data views (`--data --tree`, `--code-data`) are
//! [`ViewTree`](crate::ViewTree)s and print with the ordinary renderers.

use std::io::{self, Write};

use profiler::db::Cost;
use serde_json::{json, Value};

use super::printable;
use super::text::{format_value, metric_summary};
use crate::db::data::DataObject;
use crate::db::database::Database;
use crate::view::data::{FieldTable, ObjectTable};
use crate::view::tree::MetricInfo;

/// Width of the object-name column before it is clipped.
const NAME_WIDTH: usize = 110;

/// What a table rendering showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableSummary {
    /// Rows printed.
    pub rows: usize,
    /// Rows folded into the `(N more)` row.
    pub folded: usize,
}

/// Print the objects, folding those below `threshold_pct` of the first metric (and without
/// allocations) into one `(N more: ...)` row.
pub fn objects_text(
    db: &Database,
    table: &ObjectTable,
    threshold_pct: f64,
    absolute: bool,
    out: &mut dyn Write,
) -> io::Result<TableSummary> {
    for m in &table.metrics {
        writeln!(out, "{}", metric_summary(m))?;
    }
    writeln!(out, "{}", counts_line(db))?;
    writeln!(
        out,
        "{}  {:<7} {:>10} {:>8}  object",
        metric_heading(&table.metrics, absolute),
        "kind",
        "size",
        "blocks"
    )?;
    let total = table.metrics.first().map_or(0, |m| m.total);
    let (shown, folded): (Vec<_>, Vec<_>) = table.rows.iter().partition(|r| {
        let value = r.costs.first().map_or(0, |c| c.value);
        threshold_pct == 0.0
            || (value > 0 && (value as f64) * 100.0 >= threshold_pct * total as f64)
    });
    for r in &shown {
        let o = db.data.object(r.object);
        writeln!(
            out,
            "{}  {:<7} {:>10} {:>8}  {}",
            cost_columns(&table.metrics, &r.costs, absolute),
            o.kind.name(),
            o.size.map_or(String::new(), bytes),
            if r.blocks > 0 {
                r.blocks.to_string()
            } else {
                String::new()
            },
            object_label(o)
        )?;
    }
    if !folded.is_empty() {
        let mut sum = vec![Cost::default(); table.metrics.len()];
        folded
            .iter()
            .for_each(|r| Cost::add_each(&mut sum, &r.costs));
        let names: Vec<String> = folded
            .iter()
            .take(3)
            .map(|r| clip(&db.data.object(r.object).name, 24))
            .collect();
        let more = if folded.len() > 3 { ", …" } else { "" };
        writeln!(
            out,
            "{}  ({} more: {}{more})",
            cost_columns(&table.metrics, &sum, absolute),
            folded.len(),
            names.join(", ")
        )?;
    }
    Ok(TableSummary {
        rows: shown.len(),
        folded: folded.len(),
    })
}

/// The objects as JSON: `view: "data"`, `metrics`, `stats`, and `objects` in rank order.
pub fn objects_json(db: &Database, table: &ObjectTable, out: &mut dyn Write) -> io::Result<()> {
    let objects: Vec<Value> = table
        .rows
        .iter()
        .map(|r| {
            let mut v = object_json(db, r.object.index(), db.data.object(r.object));
            v["costs"] = costs_json(&r.costs);
            v["samples"] = json!(r.costs.iter().map(|c| c.samples).collect::<Vec<_>>());
            v["blocks"] = json!(r.blocks);
            v["bytes"] = json!(r.bytes);
            v
        })
        .collect();
    let stats = &db.data.stats;
    let doc = json!({
        "view": "data",
        "metrics": table.metrics,
        "stats": {
            "by_class": label_classes(&stats.by_class),
            "ea_attempted": stats.ea_attempted,
            "ea_resolved": stats.ea_resolved,
            "alloc_records": stats.alloc_records,
            "alloc_lost": stats.alloc_lost,
        },
        "objects": objects,
    });
    write_json(&doc, out)
}

/// Print one object's parts.
pub fn fields_text(
    db: &Database,
    table: &FieldTable,
    absolute: bool,
    out: &mut dyn Write,
) -> io::Result<TableSummary> {
    let o = db.data.object(table.object);
    for m in &table.metrics {
        writeln!(out, "{}", metric_summary(m))?;
    }
    writeln!(
        out,
        "{} ({}, {}), by {}",
        object_label(o),
        o.kind.name(),
        o.size.map_or("size unknown".to_string(), bytes),
        table.split
    )?;
    writeln!(
        out,
        "{}  {:>10} {:>8}  {:<24} part",
        metric_heading(&table.metrics, absolute),
        "offset",
        "size",
        "touched"
    )?;
    for r in &table.rows {
        let offset = if r.offset == i64::MAX {
            String::new()
        } else {
            format!("{:#x}", r.offset)
        };
        let touched = match (r.elements, r.touched) {
            (Some((lo, hi)), _) if lo == hi => format!("element {lo}"),
            (Some((lo, hi)), _) => format!("elements {lo}..{hi}"),
            (None, Some((lo, hi))) if lo == hi => format!("+{lo:#x}"),
            (None, Some((lo, hi))) => format!("+{lo:#x}..+{hi:#x}"),
            (None, None) => String::new(),
        };
        writeln!(
            out,
            "{}  {offset:>10} {:>8}  {touched:<24} {}",
            cost_columns(&table.metrics, &r.costs, absolute),
            if r.size > 0 {
                bytes(r.size)
            } else {
                String::new()
            },
            printable(&r.name)
        )?;
    }
    Ok(TableSummary {
        rows: table.rows.len(),
        folded: 0,
    })
}

/// One object's parts as JSON: `view: "fields"`, `object`, `split`, `metrics`, `parts`.
pub fn fields_json(db: &Database, table: &FieldTable, out: &mut dyn Write) -> io::Result<()> {
    let parts: Vec<Value> = table
        .rows
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "offset": (r.offset != i64::MAX).then_some(r.offset),
                "size": r.size,
                "touched": r.touched.map(|(lo, hi)| [lo, hi]),
                "elements": r.elements.map(|(lo, hi)| [lo, hi]),
                "costs": costs_json(&r.costs),
                "samples": r.costs.iter().map(|c| c.samples).collect::<Vec<_>>(),
            })
        })
        .collect();
    let o = db.data.object(table.object);
    let doc = json!({
        "view": "fields",
        "object": object_json(db, table.object.index(), o),
        "split": table.split,
        "metrics": table.metrics,
        "parts": parts,
    });
    write_json(&doc, out)
}

/// The one-line account of what the measurement resolved, by class.
fn counts_line(db: &Database) -> String {
    let stats = &db.data.stats;
    let classes: Vec<String> = profiler::dataref::CLASS_NAMES
        .iter()
        .zip(stats.by_class)
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let mut line = format!(
        "data samples by class: {}",
        if classes.is_empty() {
            "none".to_string()
        } else {
            classes.join(", ")
        }
    );
    if stats.ea_attempted > 0 {
        line.push_str(&format!(
            "; addresses recovered for {} of {} clock samples ({:.0}%)",
            stats.ea_resolved,
            stats.ea_attempted,
            stats.ea_resolved as f64 * 100.0 / stats.ea_attempted as f64
        ));
    }
    line
}

fn label_classes(by_class: &[u64; 5]) -> Value {
    let map: serde_json::Map<String, Value> = profiler::dataref::CLASS_NAMES
        .iter()
        .zip(by_class)
        .map(|(name, n)| (name.to_string(), json!(n)))
        .collect();
    Value::Object(map)
}

/// An object's description in JSON (the contract's `objects[]` entries).
pub(crate) fn object_json(db: &Database, id: usize, o: &DataObject) -> Value {
    let alloc_path: Vec<String> = o
        .site
        .map(|site| {
            let mut path = Vec::new();
            let mut at = site;
            while at != crate::db::ids::DbNodeId::ROOT {
                let n = &db.nodes[at.index()];
                if n.kind.is_frame() {
                    path.push(db.label(at));
                }
                at = n.parent;
            }
            path
        })
        .unwrap_or_default();
    json!({
        "id": id,
        "name": o.name,
        "kind": o.kind.name(),
        "module": o.module.map(|m| db.module_path(m)),
        "file": o.file.map(|f| db.file(f)),
        "line": o.line,
        "size": o.size,
        "start": o.start,
        "receiver": o.receiver,
        "alloc_path": alloc_path,
    })
}

fn costs_json(costs: &[Cost]) -> Value {
    json!(costs.iter().map(|c| c.value).collect::<Vec<_>>())
}

fn write_json(doc: &Value, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, doc).map_err(io::Error::from)?;
    writeln!(out)
}

/// Per metric: samples and share (and the absolute value on request).
pub(crate) fn metric_heading(metrics: &[MetricInfo], absolute: bool) -> String {
    metrics
        .iter()
        .map(|m| {
            let name = clip(&m.name, 16);
            if absolute {
                format!("{:>10} {name:>16}", "value")
            } else {
                format!("{:>9} {name:>16}", "samples")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn cost_columns(metrics: &[MetricInfo], costs: &[Cost], absolute: bool) -> String {
    metrics
        .iter()
        .zip(costs)
        .map(|(m, c)| {
            let share = if m.total == 0 {
                "-".to_string()
            } else {
                format!("{:.1}%", c.value as f64 * 100.0 / m.total as f64)
            };
            if absolute {
                format!("{:>10} {share:>16}", format_value(c.value, &m.unit))
            } else {
                format!("{:>9} {share:>16}", c.samples)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An object as a row's label (see [`DataObject::label`]), clipped.
pub(crate) fn object_label(o: &DataObject) -> String {
    printable(&clip(&o.label(), NAME_WIDTH)).into_owned()
}

/// A size in bytes for people: `512 B`, `4.0 KiB`, `3.0 MiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(max - 1).collect();
        c.push('…');
        c
    }
}
