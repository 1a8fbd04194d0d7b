//! `hpcview-rs --footprint`: per procedure, the distinct pages (or lines) of data it touched
//! and its data samples by region (profiles measured with `hpcrun-rs --data`).

use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::anyhow;
use correlate::{footprint, render, Database};

use crate::{bad, Failure};

/// The memory views' flags.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryArgs {
    /// Per procedure: distinct 4 KiB pages of data touched, and data samples by region (stack,
    /// heap, static, other); exact first touches with `-e page-faults@1 --data`
    #[arg(long)]
    pub(crate) footprint: bool,

    /// With --footprint: count 64-byte lines instead of pages
    #[arg(long, requires = "footprint")]
    pub(crate) lines: bool,
}

/// Print the footprint table (as JSON with `json`); returns the summary line.
pub(crate) fn run(
    args: &MemoryArgs,
    json: bool,
    db: &Database,
    path: &Path,
) -> Result<String, Failure> {
    if db.data.accesses.is_empty() {
        let why = "has no data samples (measure with `hpcrun-rs --data`)";
        return Err(bad(anyhow!("{}: {why}", path.display())));
    }
    let (bits, unit) = if args.lines {
        (6, "lines")
    } else {
        (12, "pages")
    };
    let rows = footprint(db, bits);
    let mut out = BufWriter::new(io::stdout().lock());
    match json {
        true => render::footprint::render_json(&rows, unit, &mut out)?,
        false => render::footprint::render(&rows, unit, &mut out)?,
    }
    out.flush()?;
    Ok(format!(
        "footprint of {}: {} procedures",
        path.display(),
        rows.len()
    ))
}
