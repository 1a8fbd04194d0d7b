//! Time slices ([`crate::Slices`]) as text: per procedure its total, activity (slices with
//! samples, of all), span (first-last slice) and samples per slice; then the phases.

use std::io::{self, Write};

use serde_json::json;

use crate::out::render::printable;
use crate::view::time::Slices;

/// Write the slice table and the phases.
pub fn render(s: &Slices, out: &mut dyn Write) -> io::Result<()> {
    let count = s.rows.first().map_or(0, |r| r.per_slice.len());
    let ms = s.slice_ns as f64 / 1e6;
    writeln!(
        out,
        "{count} slices of {ms} ms from the first traced sample; samples per slice"
    )?;
    let header: String = (0..count).map(|i| format!("{i:>6}")).collect();
    writeln!(
        out,
        "{:>8} {:>9} {:>9}{header}  procedure",
        "total", "active", "span"
    )?;
    for row in &s.rows {
        let active = format!("{}/{count}", row.active());
        let span = row
            .span()
            .map_or(String::new(), |(a, b)| format!("{a}-{b}"));
        let cells: String = row.per_slice.iter().map(|n| format!("{n:>6}")).collect();
        let name = printable(&row.name);
        writeln!(
            out,
            "{:>8} {active:>9} {span:>9}{cells}  {name}",
            row.total()
        )?;
    }
    writeln!(
        out,
        "phases (runs of slices with the same procedures holding >= 25% of each):"
    )?;
    let at = |slice: usize| slice as f64 * s.slice_ns as f64 / 1e9;
    for p in &s.phases {
        let (from, to) = (at(p.first), at(p.last + 1));
        let slices = format!("{}-{}", p.first, p.last);
        let names: Vec<_> = p
            .procedures
            .iter()
            .map(|&r| printable(&s.rows[r].name))
            .collect();
        let share = 100.0 * p.samples as f64 / p.all.max(1) as f64;
        let what = match names.is_empty() {
            true => "no samples".to_string(),
            false => format!(
                "{}  {} of {} samples ({share:.1}%)",
                names.join(" + "),
                p.samples,
                p.all
            ),
        };
        writeln!(out, "  slices {slices:>7}  {from:.3}-{to:.3} s  {what}")?;
    }
    Ok(())
}

/// Write the slices as JSON: slice length, per procedure its samples per slice, activity and
/// span, and the phases (slice range, procedure indices, samples).
pub fn render_json(s: &Slices, out: &mut dyn Write) -> io::Result<()> {
    let rows: Vec<_> = s
        .rows
        .iter()
        .map(|r| {
            json!({"name": r.name, "samples": r.total(), "active": r.active(),
                "span": r.span().map(|(a, b)| [a, b]), "per_slice": r.per_slice})
        })
        .collect();
    let phases: Vec<_> = s
        .phases
        .iter()
        .map(|p| {
            json!({"first": p.first, "last": p.last, "procedures": p.procedures,
                "samples": p.samples, "all": p.all})
        })
        .collect();
    let doc = json!({"start_ns": s.start_ns, "slice_ns": s.slice_ns, "procedures": rows,
        "phases": phases});
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}
