//! `--html FILE`: the database as one self-contained interactive HTML report (the three views
//! as tree tables, a flame graph, a source pane, per-thread costs), written atomically.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use correlate::{Database, Derived, SourceLimits};
use profiler::envelope::{write_atomically_with, Replace};

use crate::{inputs, Failure};

/// The report's flag.
#[derive(Debug, clap::Args)]
pub(crate) struct HtmlArgs {
    /// Write an interactive HTML report (all three views, flame graph, sources, threads, and
    /// data objects, a timeline and a memory map where measured) to FILE: one file, no network needed to
    /// view it; an existing FILE is replaced
    #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "output"])]
    pub(crate) html: Option<PathBuf>,
}

/// Write the report of `db` (database `path`) with the metrics at `metrics` and the `derived`
/// ones to `file`; returns the summary line.
pub(crate) fn write_report(
    db: &Database,
    path: &Path,
    metrics: &[usize],
    derived: &[Derived],
    file: &Path,
) -> Result<String, Failure> {
    let derived = inputs::derived_over(db, metrics, derived).map_err(Failure::BadInput)?;
    let mut summary = None;
    write_atomically_with(file, Replace::Allowed, |out| {
        summary = Some(correlate::html_report(
            db,
            metrics,
            &derived,
            SourceLimits::default(),
            out,
        )?);
        Ok(())
    })
    .map_err(|e| Failure::Other(anyhow!(e).context("writing the HTML report")))?;
    let s = summary.unwrap_or_default();
    let mut panes = String::new();
    if s.objects > 0 {
        panes += &format!(", {} data objects", s.objects);
    }
    if s.timeline {
        panes += ", a timeline";
    }
    if s.memmap {
        panes += ", a memory map";
    }
    if s.listings > 0 {
        let plural = if s.listings == 1 { "" } else { "s" };
        panes += &format!(", the machine code of {} procedure{plural}", s.listings);
    }
    Ok(format!(
        "report of {} in {}: {} scopes in 3 views{panes}, {} of {} source files embedded, {:.1} MiB",
        path.display(),
        file.display(),
        s.scopes,
        s.embedded,
        s.files,
        s.bytes as f64 / (1 << 20) as f64
    ))
}
