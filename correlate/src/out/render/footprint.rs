//! The per-procedure footprint ([`crate::footprint`]) as a text table.

use std::io::{self, Write};

use serde_json::json;

use crate::out::render::printable;
use crate::view::data::{FootprintRow, REGIONS};

/// Write one row per procedure: distinct units (`unit`: `pages` or `lines`), data samples, and
/// samples per region.
pub fn render(rows: &[FootprintRow], unit: &str, out: &mut dyn Write) -> io::Result<()> {
    let regions: String = REGIONS.iter().map(|r| format!("{r:>9}")).collect();
    writeln!(out, "{unit:>9}  samples{regions}  procedure")?;
    for row in rows {
        let counts: String = row.by_region.iter().map(|n| format!("{n:>9}")).collect();
        let name = printable(&row.procedure);
        writeln!(out, "{:>9} {:>8}{counts}  {name}", row.units, row.samples())?;
    }
    Ok(())
}

/// Write the rows as JSON: per procedure its distinct units and samples by region.
pub fn render_json(rows: &[FootprintRow], unit: &str, out: &mut dyn Write) -> io::Result<()> {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut row = json!({"procedure": r.procedure, "samples": r.samples()});
            row[unit] = json!(r.units);
            for (name, n) in REGIONS.iter().zip(r.by_region) {
                row[*name] = json!(n);
            }
            row
        })
        .collect();
    serde_json::to_writer_pretty(&mut *out, &json!({ "procedures": rows }))?;
    writeln!(out)
}
