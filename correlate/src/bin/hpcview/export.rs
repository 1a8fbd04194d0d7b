//! `--speedscope FILE`, `--pprof FILE` (the database in other tools' formats) and `--diff BASE
//! NEW` (two databases compared, with `--fail-above PCT` as a CI gate).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use correlate::{pprof, render, speedscope, Database, DiffOptions, Normalise, ViewKind, ViewTree};
use profiler::envelope::{write_atomically_with, EnvelopeError, Replace};

use crate::args::Args;
use crate::inputs::{check_percent, database_path};
use crate::output::Sink;
use crate::{bad, Failure};

/// The export and diff flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Write the database to FILE in speedscope's format (one profile per thread and metric;
    /// open it with `speedscope FILE` or at www.speedscope.app)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["mode", "kind", "format", "threads", "metrics"])]
    pub(crate) speedscope: Option<PathBuf>,

    /// Write the database to FILE as a gzipped pprof profile (for `go tool pprof FILE`)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["mode", "kind", "format", "threads", "metrics"])]
    pub(crate) pprof: Option<PathBuf>,

    /// With --speedscope or --pprof: replace FILE if it exists
    #[arg(long, requires = "exports")]
    pub(crate) replace: bool,

    /// Compare two databases of the same program, scope by scope (top-down, or --flat), ranked
    /// by growth of exclusive cost; text, --json, or --folded (differential flame graph)
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with_all = ["database", "callers", "source", "threads"])]
    pub(crate) diff: Vec<PathBuf>,

    /// With --diff: compare costs per second of measured wall-clock time
    #[arg(long, requires = "diff", conflicts_with = "per_total")]
    pub(crate) per_second: bool,

    /// With --diff: compare costs as percentages of each run's total
    #[arg(long, requires = "diff")]
    pub(crate) per_total: bool,

    /// With --diff: exit with status 1 when a scope holding at least --threshold percent of
    /// either run grew by more than PCT percent
    #[arg(
        long,
        value_name = "PCT",
        requires = "diff",
        allow_negative_numbers = true
    )]
    pub(crate) fail_above: Option<f64>,
}

/// Write the `--speedscope` and `--pprof` files.
pub(crate) fn export(args: &Args) -> Result<String, Failure> {
    let e = &args.export;
    let path = database_path(args.database.as_deref()).map_err(bad)?;
    let db = Database::read(&path).map_err(bad)?;
    let replace = if e.replace {
        Replace::Allowed
    } else {
        Replace::Refused
    };
    let mut done = Vec::new();
    if let Some(file) = &e.speedscope {
        let name = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let mut written = Default::default();
        write_export(file, replace, "--speedscope", |w| {
            written = speedscope::render(&db, &name, w)?;
            Ok(())
        })?;
        done.push(format!(
            "speedscope file {} ({} profiles, {} frames)",
            file.display(),
            written.profiles,
            written.frames
        ));
    }
    if let Some(file) = &e.pprof {
        let mut written = Default::default();
        write_export(file, replace, "--pprof", |w| {
            written = pprof::render(&db, w)?;
            Ok(())
        })?;
        done.push(format!(
            "pprof profile {} ({} samples, {} locations, {} functions)",
            file.display(),
            written.samples,
            written.locations,
            written.functions
        ));
    }
    Ok(format!("{}: {}", path.display(), done.join("; ")))
}

/// Write an export file atomically, never through a symlink; an existing file is refused
/// unless `replace` allows it.
fn write_export(
    file: &Path,
    replace: Replace,
    flag: &str,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    write_atomically_with(file, replace, fill).map_err(|e| match e {
        EnvelopeError::Exists { path } => bad(anyhow!(
            "{}: already exists (remove it, name another file with {flag}, or add --replace)",
            path.display()
        )),
        e => Failure::Other(anyhow!(e).context(format!("writing the {flag} file"))),
    })
}

/// Compare `base` with `new` and print the result; a regression past `--fail-above` is a
/// failure (exit 1) after the comparison is printed.
pub(crate) fn diff(args: &Args, base: &Path, new: &Path) -> Result<String, Failure> {
    let e = &args.export;
    check_percent("--threshold", args.threshold, true)?;
    if let Some(limit) = e.fail_above.filter(|l| !(l.is_finite() && *l >= 0.0)) {
        return Err(bad(anyhow!(
            "--fail-above {limit}: expected a percentage, 0 or more"
        )));
    }
    let (base_db, new_db) = (
        Database::read(base).map_err(bad)?,
        Database::read(new).map_err(bad)?,
    );
    let options = DiffOptions {
        // --callers and --source are refused with --diff: top-down or flat.
        view: crate::mode::view_kind(args),
        metric: args.metrics.first().cloned(),
        normalise: match (e.per_second, e.per_total) {
            (true, _) => Normalise::PerSecond,
            (_, true) => Normalise::PerTotal,
            _ => Normalise::Absolute,
        },
    };
    let result = correlate::diff(&base_db, &new_db, &options)
        .map_err(|err| bad(anyhow!("{} vs {}: {err}", base.display(), new.display())))?;
    let mut out = Sink::open(&args.output);
    let what = format!("{} vs {}", base.display(), new.display());
    let mut summary = if args.folded {
        let tree = |db| ViewTree::from_database(db, ViewKind::TopDown, &correlate::Selection::All);
        let written = render::diff::folded(&tree(&base_db), &tree(&new_db), &mut out)?;
        format!(
            "{what}: {} folded stacks, {} and {} samples",
            written.stacks, written.base, written.new
        )
    } else if args.json {
        render::diff::json(&result, &mut out)?;
        format!("{what}: {} scopes as JSON", result.rows.len())
    } else {
        let names = (base.to_string_lossy(), new.to_string_lossy());
        let shown = render::diff::text(&result, (&names.0, &names.1), args.threshold, &mut out)?;
        format!("{what}: {} scopes shown", shown.rows)
    };
    out.finish()?;
    if let Some(limit) = e.fail_above {
        let grown: Vec<String> = result
            .rows
            .iter()
            .filter(|r| r.regressed(args.threshold, limit))
            .map(|r| match r.change_pct() {
                Some(pct) => format!("{} {pct:+.1}%", r.label),
                None => format!("{} (new)", r.label),
            })
            .collect();
        if !grown.is_empty() {
            return Err(Failure::Other(anyhow!(
                "{what}: {} scopes above {}% grew by more than {limit}% (--fail-above): {}",
                grown.len(),
                args.threshold,
                crate::inputs::list(grown.into_iter())
            )));
        }
        summary.push_str(&format!(
            "; no scope above {}% grew by more than {limit}%",
            args.threshold
        ));
    }
    Ok(summary)
}
