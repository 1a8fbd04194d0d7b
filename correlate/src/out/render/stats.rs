//! The statistics across ranks or threads ([`StatsTable`]) as a table for people and as JSON
//! for scripts (the table's own fields; documented in the README).

use std::io::{self, Write};

use super::table::Table;
use super::text::TextSummary;
use crate::view::stats::{Over, StatsTable};

/// Print the table, most imbalanced scope first. Scopes whose sum is below `threshold_pct`
/// percent of the program's total are left out and counted in a last `(N more)` line.
/// Clock values are in seconds, other metrics in events.
pub fn text(
    table: &StatsTable,
    threshold_pct: f64,
    color: bool,
    out: &mut dyn Write,
) -> io::Result<TextSummary> {
    let over = match table.over {
        Over::Ranks => "ranks (profiles)",
        Over::Threads => "threads",
    };
    writeln!(
        out,
        "{} over {} {over}, {} view; imbalance = max - mean, most imbalanced first",
        table.metric,
        table.groups.len(),
        table.view.name()
    )?;
    let total = table.rows.iter().map(|r| r.sum).max().unwrap_or(0);
    let unit = if table.unit == "ns" { "s" } else { "events" };
    let heads = [
        format!("imbalance ({unit})"),
        "imb %".into(),
        "cv".into(),
        "mean".into(),
        "min".into(),
        "at min".into(),
        "max".into(),
        "at max".into(),
        "sum".into(),
        "scope".into(),
    ];
    let mut out_table = Table::new(heads.to_vec(), 3);
    let mut shown = 0;
    for row in &table.rows {
        if (row.sum as f64) * 100.0 < threshold_pct * total as f64 {
            continue;
        }
        shown += 1;
        let amount = |v: f64| amount(v, &table.unit);
        let pct = if row.mean > 0.0 {
            100.0 * row.imbalance / row.mean
        } else {
            0.0
        };
        let scope = if row.context.is_empty() {
            row.scope.clone()
        } else {
            format!("{} > {}", row.context, row.scope)
        };
        out_table.push(vec![
            amount(row.imbalance),
            format!("{pct:.1}"),
            format!("{:.3}", row.cv),
            amount(row.mean),
            amount(row.min as f64),
            table.groups[row.min_at].name.clone(),
            amount(row.max as f64),
            table.groups[row.max_at].name.clone(),
            amount(row.sum as f64),
            scope,
        ]);
    }
    out_table.write(color, out)?;
    let folded = table.rows.len() - shown;
    if folded > 0 {
        writeln!(out, "({folded} more below {threshold_pct}% of the total)")?;
    }
    Ok(TextSummary {
        rows: shown,
        folded,
    })
}

/// A value in the metric's unit for the table: seconds (three decimals) for `ns`, else a
/// whole number of events.
fn amount(value: f64, unit: &str) -> String {
    if unit == "ns" {
        format!("{:.3}", value / 1e9)
    } else {
        format!("{value:.0}")
    }
}

/// Print the table as one JSON document: `view`, `over`, `metric`, `unit`, `groups` (name,
/// rank, profile, pid, tid) and `rows` (scope, context, sum, mean, min, min_at, max, max_at, stddev, cv,
/// imbalance; `*_at` index `groups`; values in the metric's unit).
pub fn json(table: &StatsTable, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, table)?;
    writeln!(out)
}
