//! The flat tables of the data views' text output (`--delinquent`, `--alloc`): numeric columns
//! right-aligned, then text columns left-aligned, the last one (a long name) unpadded; rows
//! below the threshold folded into one `(N more)` row, as the tree views fold theirs.

use std::io::{self, Write};

use super::printable;

const HEADING: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// A table being filled.
pub(crate) struct Table {
    heads: Vec<String>,
    /// The first `right` columns are right-aligned.
    right: usize,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings, the first `right` of them right-aligned.
    pub(crate) fn new(heads: Vec<String>, right: usize) -> Table {
        Table {
            heads,
            right,
            rows: Vec::new(),
        }
    }

    /// Add a row (one cell per heading).
    pub(crate) fn push(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.heads.len());
        self.rows.push(cells);
    }

    /// Write the headings (bold with `color`) and the rows; control characters in cells are
    /// spelled out.
    pub(crate) fn write(&self, color: bool, out: &mut dyn Write) -> io::Result<()> {
        let cells: Vec<Vec<String>> = std::iter::once(&self.heads)
            .chain(&self.rows)
            .map(|row| row.iter().map(|c| printable(c).into_owned()).collect())
            .collect();
        let mut widths = vec![0; self.heads.len()];
        for row in &cells {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for (i, row) in cells.iter().enumerate() {
            let mut line = String::new();
            for (c, (cell, &width)) in row.iter().zip(&widths).enumerate() {
                let last = c + 1 == row.len();
                match (c < self.right, last) {
                    (true, _) => line.push_str(&format!("{cell:>width$}")),
                    (false, true) => line.push_str(cell),
                    (false, false) => line.push_str(&format!("{cell:<width$}")),
                }
                if !last {
                    line.push_str("  ");
                }
            }
            let line = line.trim_end();
            if i == 0 && color {
                writeln!(out, "{HEADING}{line}{RESET}")?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        Ok(())
    }
}

/// How many of the leading rows, ranked by `values` descending, hold at least `threshold_pct`
/// percent of `total`: the rows shown; the rest fold.
pub(crate) fn shown(values: impl Iterator<Item = u64>, total: u64, threshold_pct: f64) -> usize {
    values
        .take_while(|&v| v as f64 * 100.0 >= threshold_pct * total as f64)
        .count()
}

/// `field` as a CSV field: quoted, with quotes doubled, when it holds a comma, a quote or a
/// line break.
pub(crate) fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_the_last_is_not_padded() {
        let mut table = Table::new(vec!["n".into(), "op".into(), "name".into()], 1);
        table.push(vec!["100".into(), "store".into(), "A".into()]);
        table.push(vec!["5".into(), "".into(), "evil\x1b[2J".into()]);
        let mut out = Vec::new();
        table.write(false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "  n  op     name\n100  store  A\n  5         evil\\x1b[2J\n"
        );
    }

    #[test]
    fn rows_below_the_threshold_fold_and_csv_fields_are_quoted() {
        assert_eq!(shown([50, 30, 15, 5].into_iter(), 100, 10.0), 3);
        assert_eq!(shown([50, 30].into_iter(), 100, 0.0), 2);
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("f(int, char)"), "\"f(int, char)\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
