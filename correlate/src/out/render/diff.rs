//! The differential view ([`Diff`]) as text for people, JSON for scripts, and folded stacks
//! with two counts per line for differential flame graphs.
//!
//! - [`text`]: the scopes holding at least the threshold of either run, ranked by the growth
//!   of their exclusive cost (loops and lines indented below their procedure): change in
//!   percent, growth, base and new cost, and the scope with its context (the enclosing scopes,
//!   the last three).
//! - `json`: every matched scope, ranked, with both runs' costs and its context (`depth`
//!   enclosing scopes, the innermost [`CONTEXT_KEPT`](crate::view::diff::CONTEXT_KEPT) named).
//! - [`folded`]: `frame;frame;... BASE NEW` per path, the samples of the two runs' `--folded`
//!   outputs merged by path: the input of `inferno-flamegraph` (or of `flamegraph.pl`) for a
//!   differential flame graph, as `inferno-diff-folded` would write it.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::json;

use super::folded as folded_stacks;
use super::json::contract_kind;
use crate::db::node::NodeKind;
use crate::view::diff::{Diff, DiffRow, Normalise, SideCost};
use crate::view::tree::ViewTree;

/// What [`text`] printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiffTextSummary {
    /// Scopes shown.
    pub rows: usize,
    /// Scopes left out (below the threshold in both runs).
    pub hidden: usize,
}

/// How the normalised values of `diff` read: `1.234 s`, `12.5%`, `4,000/s`, ...
fn amount(diff: &Diff, value: f64) -> String {
    let clock = diff.unit == "ns";
    match (diff.normalise, clock) {
        (Normalise::Absolute, true) => format!("{:.3} s", value / 1e9),
        (Normalise::Absolute, false) => format!("{value:.0}"),
        (Normalise::PerSecond, true) => format!("{:.3} s/s", value / 1e9),
        (Normalise::PerSecond, false) => format!("{value:.0}/s"),
        (Normalise::PerTotal, _) => format!("{value:.2}%"),
    }
}

/// `amount` with a sign.
fn signed(diff: &Diff, value: f64) -> String {
    let text = amount(diff, value.abs());
    if value < 0.0 {
        format!("-{text}")
    } else {
        format!("+{text}")
    }
}

/// A change in percent, `new` for a scope the base run did not have.
fn change(row: &DiffRow) -> String {
    match row.change_pct() {
        Some(pct) => format!("{pct:+.1}%"),
        None => "new".to_string(),
    }
}

/// A normalised name for the normalisation, as the header and JSON write it.
fn normalisation(n: Normalise) -> &'static str {
    match n {
        Normalise::Absolute => "absolute",
        Normalise::PerSecond => "per-second",
        Normalise::PerTotal => "per-total",
    }
}

/// The scope's label (indented for a loop or line) and, after two spaces, its last three
/// enclosing scopes.
fn scope(row: &DiffRow) -> String {
    let indent = match row.kind {
        NodeKind::Loop | NodeKind::Statement => "  ",
        _ => "",
    };
    let context = &row.context;
    if context.is_empty() {
        return super::printable(&format!("{indent}{}", row.label)).into_owned();
    }
    let shown = context[context.len().saturating_sub(3)..].join(" > ");
    let more = if row.depth > 3 { "... > " } else { "" };
    super::printable(&format!("{indent}{}  (in {more}{shown})", row.label)).into_owned()
}

/// Print `diff` of `base` and `new` (their names) for people: the scopes holding at least
/// `threshold_pct` of either run's total, ranked.
pub fn text(
    diff: &Diff,
    names: (&str, &str),
    threshold_pct: f64,
    out: &mut dyn Write,
) -> io::Result<DiffTextSummary> {
    let total_change = if diff.base_total > 0.0 {
        format!(
            " ({:+.1}%)",
            (diff.new_total - diff.base_total) / diff.base_total * 100.0
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "{} view, {} (exclusive cost), {}",
        diff.view.name(),
        diff.metric,
        normalisation(diff.normalise)
    )?;
    writeln!(out, "base {}: {}", names.0, amount(diff, diff.base_total))?;
    writeln!(
        out,
        "new  {}: {}{total_change}",
        names.1,
        amount(diff, diff.new_total)
    )?;
    writeln!(
        out,
        "{:>9} {:>12} {:>12} {:>12}  scope",
        "change", "growth", "base", "new"
    )?;
    let mut summary = DiffTextSummary::default();
    for row in &diff.rows {
        if row.share_pct() < threshold_pct {
            summary.hidden += 1;
            continue;
        }
        let side = |s: Option<SideCost>| s.map_or("-".to_string(), |s| amount(diff, s.excl));
        writeln!(
            out,
            "{:>9} {:>12} {:>12} {:>12}  {}",
            change(row),
            signed(diff, row.delta()),
            side(row.base),
            side(row.new),
            scope(row)
        )?;
        summary.rows += 1;
    }
    if summary.hidden > 0 {
        writeln!(
            out,
            "({} scopes below {threshold_pct}% of both runs not shown; --threshold 0 shows all)",
            summary.hidden
        )?;
    }
    Ok(summary)
}

/// Print `diff` as JSON: `metric`, `unit`, `view`, `normalise`, both totals, and `rows` (every
/// scope, ranked) with `kind`, `name`, `depth`, `context`, `base` and `new` (`incl`, `excl`,
/// `share_pct`; `null` when the run lacks the scope), `growth` (exclusive, new minus base) and
/// `change_pct` (`null` for a scope new in the second run).
pub fn json(diff: &Diff, out: &mut dyn Write) -> io::Result<()> {
    let side = |s: Option<SideCost>| {
        s.map(|s| json!({"incl": s.incl, "excl": s.excl, "share_pct": s.share_pct}))
    };
    let rows: Vec<serde_json::Value> = diff
        .rows
        .iter()
        .map(|r| {
            json!({
                "kind": contract_kind(r.kind),
                "name": r.label,
                "depth": r.depth,
                "context": r.context,
                "base": side(r.base),
                "new": side(r.new),
                "growth": r.delta(),
                "change_pct": r.change_pct(),
            })
        })
        .collect();
    let doc = json!({
        "metric": diff.metric,
        "unit": diff.unit,
        "view": diff.view.name(),
        "normalise": normalisation(diff.normalise),
        "base_total": diff.base_total,
        "new_total": diff.new_total,
        "rows": rows,
    });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// What [`folded`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiffFoldedSummary {
    /// Lines (distinct paths of either run).
    pub stacks: usize,
    /// Samples of the base run.
    pub base: u64,
    /// Samples of the new run.
    pub new: u64,
}

/// The folded stacks of a top-down `view` (first metric) as (path, samples), in its order.
fn paths(view: &ViewTree) -> io::Result<Vec<(String, u64)>> {
    let mut text = Vec::new();
    folded_stacks::render(view, 0, &mut text)?;
    let text = String::from_utf8_lossy(&text);
    Ok(text
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(path, n)| (path.to_string(), n.parse().unwrap_or(0)))
        .collect())
}

/// Write the two top-down views' folded stacks merged by path: `path BASE NEW`, base paths
/// first in their order, then the paths only the new run has.
pub fn folded(
    base: &ViewTree,
    new: &ViewTree,
    out: &mut dyn Write,
) -> io::Result<DiffFoldedSummary> {
    let mut merged: Vec<(String, u64, u64)> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for (path, n) in paths(base)? {
        at.insert(path.clone(), merged.len());
        merged.push((path, n, 0));
    }
    for (path, n) in paths(new)? {
        match at.get(&path) {
            Some(&i) => merged[i].2 += n,
            None => merged.push((path, 0, n)),
        }
    }
    let mut summary = DiffFoldedSummary::default();
    for (path, b, n) in &merged {
        writeln!(out, "{path} {b} {n}")?;
        summary.base += b;
        summary.new += n;
    }
    summary.stacks = merged.len();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::{MetricInfo, ViewKind, ViewNode};
    use profiler::db::Cost;

    fn side(excl: f64, share_pct: f64) -> Option<SideCost> {
        Some(SideCost {
            incl: excl,
            excl,
            share_pct,
        })
    }

    fn row(
        kind: NodeKind,
        label: &str,
        context: &[&str],
        base: Option<SideCost>,
        new: Option<SideCost>,
    ) -> DiffRow {
        DiffRow {
            kind,
            label: label.into(),
            depth: context.len(),
            context: context.iter().map(|s| s.to_string()).collect(),
            base,
            new,
        }
    }

    #[test]
    fn text_ranks_indents_and_hides_below_the_threshold() {
        let diff = Diff {
            view: ViewKind::Flat,
            metric: "cpu-clock".into(),
            unit: "ns".into(),
            normalise: Normalise::Absolute,
            base_total: 2e9,
            new_total: 3e9,
            rows: vec![
                row(
                    NodeKind::Procedure,
                    "grow",
                    &["app", "m.c"],
                    side(1e9, 50.0),
                    side(2e9, 66.7),
                ),
                row(
                    NodeKind::Loop,
                    "loop at m.c: 4",
                    &["app", "m.c", "grow"],
                    side(1e9, 50.0),
                    side(2e9, 66.7),
                ),
                row(
                    NodeKind::Procedure,
                    "fresh",
                    &["app", "m.c"],
                    None,
                    side(0.5e9, 16.7),
                ),
                row(
                    NodeKind::Procedure,
                    "tiny",
                    &["app", "m.c"],
                    side(0.01e9, 0.5),
                    side(0.01e9, 0.3),
                ),
            ],
        };
        let mut out = Vec::new();
        let shown = text(&diff, ("a.hpcdb", "b.hpcdb"), 1.0, &mut out).unwrap();
        assert_eq!(shown, DiffTextSummary { rows: 3, hidden: 1 });
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "base a.hpcdb: 2.000 s");
        assert_eq!(lines[2], "new  b.hpcdb: 3.000 s (+50.0%)");
        assert_eq!(
            lines[4],
            "  +100.0%     +1.000 s      1.000 s      2.000 s  grow  (in app > m.c)"
        );
        assert!(
            lines[5].ends_with("    loop at m.c: 4  (in app > m.c > grow)"),
            "{}",
            lines[5]
        );
        assert!(
            lines[6].starts_with("      new     +0.500 s            -"),
            "{}",
            lines[6]
        );
        assert!(lines[7].contains("1 scopes below 1% of both runs not shown"));
    }

    #[test]
    fn folded_merges_the_two_runs_by_path() {
        let tree = |leaves: &[(&str, u64)]| {
            let metric = MetricInfo {
                name: "cpu-clock".into(),
                unit: "ns".into(),
                period: Some(1),
                total: 0,
                samples: 0,
                read_with: None,
            };
            let root = ViewNode::new(NodeKind::Root, "<program root>", 1);
            let mut view = ViewTree::new(ViewKind::TopDown, vec![metric], root);
            let main = view.push(0, ViewNode::new(NodeKind::Procedure, "main", 1));
            for (name, samples) in leaves {
                let mut leaf = ViewNode::new(NodeKind::Procedure, *name, 1);
                leaf.own[0] = Cost {
                    samples: *samples,
                    value: *samples,
                };
                view.push(main, leaf);
            }
            view
        };
        let (base, new) = (
            tree(&[("grow", 10), ("old", 3)]),
            tree(&[("grow", 20), ("fresh", 4)]),
        );
        let mut out = Vec::new();
        let summary = folded(&base, &new, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main;grow 10 20\nmain;old 3 0\nmain;fresh 0 4\n"
        );
        assert_eq!((summary.stacks, summary.base, summary.new), (3, 13, 24));
    }
}
