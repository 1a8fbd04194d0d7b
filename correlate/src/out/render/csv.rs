//! `--csv` for the tree views: one record per scope, depth first in display order, for
//! spreadsheets and scripts that want rows rather than JSON's nesting.
//!
//! Columns: `depth` (the root is 0), `kind` (as in the JSON contract), `scope` (the label, in
//! full), `call_site`, `file`, `line`, then per metric `NAME (I)` and `NAME (E)`: inclusive and
//! exclusive values in the metric's unit (ns for clocks, events otherwise); then the same two
//! per derived metric (`--metric 'NAME = FORMULA'`), empty where the formula has no value.

use std::io::{self, Write};

use super::json::contract_kind;
use super::table::csv_field;
use crate::view::tree::ViewTree;

/// Write `view` as CSV records, a header first.
pub fn render(view: &ViewTree, out: &mut dyn Write) -> io::Result<usize> {
    let mut head: Vec<String> = ["depth", "kind", "scope", "call_site", "file", "line"]
        .map(String::from)
        .to_vec();
    let names = (view.metrics.iter().map(|m| &m.name)).chain(view.derived.iter().map(|d| &d.name));
    for name in names {
        head.push(csv_field(&format!("{name} (I)")));
        head.push(csv_field(&format!("{name} (E)")));
    }
    writeln!(out, "{}", head.join(","))?;
    let mut rows = 0;
    let mut stack = vec![(0usize, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        let n = &view.nodes[id];
        let mut fields = vec![
            depth.to_string(),
            contract_kind(n.kind).to_string(),
            csv_field(&n.label()),
            csv_field(&n.call_site().unwrap_or_default()),
            csv_field(n.file.as_deref().unwrap_or_default()),
            n.line.map_or_else(String::new, |l| l.to_string()),
        ];
        for (i, e) in n.incl.iter().zip(&n.excl) {
            fields.push(i.value.to_string());
            fields.push(e.value.to_string());
        }
        for d in &view.derived {
            let shown = |v: Option<f64>| v.map_or_else(String::new, |v| v.to_string());
            fields.push(shown(d.value(&n.incl)));
            fields.push(shown(d.value(&n.excl)));
        }
        writeln!(out, "{}", fields.join(","))?;
        rows += 1;
        stack.extend(n.children.iter().rev().map(|&c| (c, depth + 1)));
    }
    Ok(rows)
}
