//! The delinquent-instructions view ([`DelinquentView`]) as text, as CSV (the record of IBM
//! patent 8122439: file, function, line, operation, object id, object start, object size, for
//! a compiler or a script) and as JSON (documented in the README's contract section).

use std::io::{self, Write};

use profiler::db::Cost;
use serde::Serialize;
use serde_json::Value;

use super::data::{cost_columns, metric_heading, object_json, object_label};
use super::table::{csv_field, shown, Table};
use super::text::{metric_summary, TextOptions, TextSummary};
use crate::db::database::Database;
use crate::db::label;
use crate::db::node::NodeKind;
use crate::view::data::{DelinquentRow, DelinquentView};
use crate::view::tree::MetricInfo;

/// Print the view as a table, costliest first: per metric the row's samples (or value with
/// `absolute`) and share of the data samples, then the instruction (address and module), its
/// operation, source line, procedure (with inlined frames and innermost loop), the member of
/// the object and the object. Rows below the threshold (first metric) fold into `(N more)`.
pub fn text(
    db: &Database,
    view: &DelinquentView,
    opts: &TextOptions,
    out: &mut dyn Write,
) -> io::Result<TextSummary> {
    for m in &view.metrics {
        writeln!(out, "{}", metric_summary(m))?;
    }
    let metric_head = metric_heading(&view.metrics, opts.absolute);
    let heads = [
        metric_head.as_str(),
        "address",
        "op",
        "line",
        "procedure",
        "field",
        "object",
    ];
    let mut table = Table::new(heads.map(String::from).to_vec(), 1);
    let total = view.metrics.first().map_or(0, |m| m.total);
    let first = |r: &DelinquentRow| r.costs.first().map_or(0, |c| c.value);
    let count = shown(view.rows.iter().map(first), total, opts.threshold_pct);
    for row in &view.rows[..count] {
        table.push(vec![
            cost_columns(&view.metrics, &row.costs, opts.absolute),
            address(row),
            row.op.map_or("", |op| op.name()).to_string(),
            match (&row.file, row.line) {
                (None, None) => String::new(),
                (file, line) => label::location(file.as_deref(), line),
            },
            procedure(row, opts.name_width),
            row.field.clone().unwrap_or_default(),
            object_label(db.data.object(row.object)),
        ]);
    }
    let folded = &view.rows[count..];
    if !folded.is_empty() {
        let mut sum = vec![Cost::default(); view.metrics.len()];
        for row in folded {
            Cost::add_each(&mut sum, &row.costs);
        }
        let mut cells = vec![cost_columns(&view.metrics, &sum, opts.absolute)];
        cells.extend(std::iter::repeat_n(String::new(), 5));
        cells.push(format!("({} more)", folded.len()));
        table.push(cells);
    }
    table.write(opts.color, out)?;
    Ok(TextSummary {
        rows: count,
        folded: folded.len(),
    })
}

/// `0xADDR [module]`, or `-` for code in no known module.
fn address(row: &DelinquentRow) -> String {
    match (row.address, &row.module) {
        (Some(addr), Some(module)) => format!("{addr:#x} [{}]", label::base_name(module)),
        _ => "-".to_string(),
    }
}

/// `procedure > [I] inlined > loop at FILE: LINE`, procedure names shortened to `width`.
fn procedure(row: &DelinquentRow, width: Option<usize>) -> String {
    let mut parts = vec![label::display(NodeKind::Procedure, &row.procedure, width)];
    parts.extend(
        row.inlined
            .iter()
            .map(|name| label::display(NodeKind::Inlined, name, width)),
    );
    parts.extend(row.loop_name.clone());
    parts.join(" > ")
}

/// Write the view as CSV: a heading line, then one line per row with the patent's seven
/// fields (`file` a full path, `function` the one whose source holds the line, `operation`
/// `load`, `store`, `load+store` or `none`, `object_start` a static's link-time address in
/// hex, `object_size` in bytes), then the object's name, the instruction's address and module,
/// and one column per metric (values in its unit). Unknown values are empty.
pub fn csv(db: &Database, view: &DelinquentView, out: &mut dyn Write) -> io::Result<()> {
    let mut heads: Vec<String> = [
        "file",
        "function",
        "line",
        "operation",
        "object_id",
        "object_start",
        "object_size",
        "object",
        "address",
        "module",
    ]
    .map(String::from)
    .to_vec();
    heads.extend(view.metrics.iter().map(|m| csv_field(&m.name)));
    writeln!(out, "{}", heads.join(","))?;
    let text = |v: Option<String>| v.map_or_else(String::new, |v| csv_field(&v));
    for row in &view.rows {
        let object = db.data.object(row.object);
        let mut fields = vec![
            text(row.file.clone()),
            csv_field(row.function()),
            text(row.line.map(|l| l.to_string())),
            text(row.op.map(|op| op.name().to_string())),
            row.object.to_string(),
            text(object.start.map(|s| format!("{s:#x}"))),
            text(object.size.map(|s| s.to_string())),
            csv_field(&object.name),
            text(row.address.map(|a| format!("{a:#x}"))),
            text(row.module.clone()),
        ];
        fields.extend(row.costs.iter().map(|c| c.value.to_string()));
        writeln!(out, "{}", fields.join(","))?;
    }
    Ok(())
}

/// The JSON document (see the README's contract section).
#[derive(Serialize)]
struct Document<'a> {
    view: &'static str,
    metrics: &'a [MetricInfo],
    rows: Vec<Row<'a>>,
}

#[derive(Serialize)]
struct Row<'a> {
    address: Option<u64>,
    module: Option<&'a str>,
    op: Option<&'static str>,
    procedure: &'a str,
    inlined: &'a [String],
    #[serde(rename = "loop")]
    loop_name: Option<&'a str>,
    file: Option<&'a str>,
    line: Option<u32>,
    object: Value,
    field: Option<&'a str>,
    share: f64,
    costs: Vec<u64>,
    samples: Vec<u64>,
}

/// Write the view as indented JSON followed by a newline: `view` (`delinquent`), `metrics`,
/// and `rows` in rank order, each with its `object` described as in the `--data` view.
pub fn json(db: &Database, view: &DelinquentView, out: &mut dyn Write) -> io::Result<()> {
    let total = view.metrics.first().map_or(0, |m| m.total);
    let rows = view
        .rows
        .iter()
        .map(|r| Row {
            address: r.address,
            module: r.module.as_deref(),
            op: r.op.map(|op| op.name()),
            procedure: &r.procedure,
            inlined: &r.inlined,
            loop_name: r.loop_name.as_deref(),
            file: r.file.as_deref(),
            line: r.line,
            object: object_json(db, r.object.index(), db.data.object(r.object)),
            field: r.field.as_deref(),
            share: match total {
                0 => 0.0,
                t => r.costs.first().map_or(0, |c| c.value) as f64 / t as f64,
            },
            costs: r.costs.iter().map(|c| c.value).collect(),
            samples: r.costs.iter().map(|c| c.samples).collect(),
        })
        .collect();
    let document = Document {
        view: "delinquent",
        metrics: &view.metrics,
        rows,
    };
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}
