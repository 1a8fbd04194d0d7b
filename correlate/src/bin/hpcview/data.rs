//! The data views: `--data` (objects, `--tree`, `--fields`), `--code-data`, `--delinquent` and
//! `--alloc` (with `--dhat`).

use std::path::Path;

use anyhow::anyhow;
use correlate::render::{alloc, delinquent, dhat, text};
use correlate::{alloc_view, delinquent_view, render, Database, Selection};
use profiler::envelope::{write_atomically_with, EnvelopeError, Replace};

use crate::args::Args;
use crate::inputs::list;
use crate::output::Sink;
use crate::{bad, render_tree, text_options, Failure};

/// The data views: `--data` (objects, `--tree`, `--fields`) and `--code-data`.
pub(crate) fn run_data(
    args: &Args,
    db: &Database,
    selection: &Selection,
    metrics: &[usize],
    path: &Path,
) -> Result<String, Failure> {
    if db.data.is_empty() {
        return Ok(format!(
            "{}: no data samples; measure with `hpcrun-rs --data` (or -e page-faults --data) to see data objects",
            path.display()
        ));
    }
    let mut out = Sink::open(&args.output);
    let colour = out.colour(args.color);
    let summary = if let Some(name) = &args.fields {
        let found = correlate::find_objects(db, name);
        let (id, _) = match found.as_slice() {
            [one] => one,
            [] => {
                return Err(bad(anyhow!(
                    "{}: no data object named '{name}'",
                    path.display()
                )))
            }
            many => {
                let names = many.iter().map(|(_, o)| format!("'{}'", o.name));
                return Err(bad(anyhow!(
                    "{}: '{name}' names {} objects: {}; give the whole name",
                    path.display(),
                    many.len(),
                    list(names)
                )));
            }
        };
        let mut table = correlate::fields(db, selection, *id, args.rows, args.span);
        table.select_metrics(metrics);
        if args.json {
            render::data::fields_json(db, &table, &mut out)?;
        } else {
            render::data::fields_text(db, &table, args.absolute, &mut out)?;
        }
        format!("{} parts of {name} ({})", table.rows.len(), path.display())
    } else if args.data && !args.tree {
        let mut table = correlate::objects(db, selection);
        table.select_metrics(metrics);
        if args.json {
            render::data::objects_json(db, &table, &mut out)?;
            format!(
                "{} data objects as JSON ({})",
                table.rows.len(),
                path.display()
            )
        } else {
            let shown =
                render::data::objects_text(db, &table, args.threshold, args.absolute, &mut out)?;
            let mut s = format!("{} data objects of {}", shown.rows, path.display());
            if shown.folded > 0 {
                s.push_str(&format!(
                    ", {} folded below {}% (--threshold 0 shows all)",
                    shown.folded, args.threshold
                ));
            }
            s
        }
    } else {
        let mut view = if args.tree {
            correlate::object_tree(db, selection)
        } else {
            correlate::code_data(db, crate::mode::view_kind(args), selection)
        };
        view.select_metrics(metrics);
        let what = if args.tree {
            "data tree"
        } else {
            "code-data view"
        };
        render_tree(
            args,
            &view,
            colour,
            &mut out,
            &format!("{what} of {}", path.display()),
        )?
    };
    out.finish()?;
    Ok(summary)
}

/// Print a data view (`--delinquent`, `--alloc`, with `--dhat` the DHAT file too); returns the
/// summary line, or the one-line notice that the database has nothing for the view.
pub(crate) fn data_view(
    args: &Args,
    db: &Database,
    path: &Path,
    selection: &Selection,
    metrics: &[usize],
) -> Result<String, Failure> {
    let notice = if args.delinquent {
        correlate::delinquent_notice(db)
    } else {
        correlate::alloc_notice(db)
    };
    if let Some(notice) = notice {
        let dhat = if args.dhat.is_some() {
            " (no DHAT file written)"
        } else {
            ""
        };
        return Ok(format!("{}: {notice}{dhat}", path.display()));
    }
    // Refused before anything is printed; the write itself refuses a file that appears meanwhile.
    if let Some(file) = args
        .dhat
        .as_deref()
        .filter(|f| f.symlink_metadata().is_ok())
    {
        return Err(dhat_exists(file));
    }
    let mut out = Sink::open(&args.output);
    let opts = text_options(args, out.colour(args.color));
    let rows_shown = |shown: text::TextSummary| match shown.folded {
        0 => format!("{} rows", shown.rows),
        n => format!(
            "{} rows, {n} folded below {}% (--threshold 0 shows all)",
            shown.rows, args.threshold
        ),
    };
    let summary = if args.delinquent {
        let view = delinquent_view(db, selection, metrics);
        let what = format!("delinquent instructions of {}", path.display());
        if args.csv {
            delinquent::csv(db, &view, &mut out)?;
            format!("{what}: {} rows as CSV", view.rows.len())
        } else if args.json {
            delinquent::json(db, &view, &mut out)?;
            format!("{what}: {} rows as JSON", view.rows.len())
        } else {
            format!(
                "{what}: {}",
                rows_shown(delinquent::text(db, &view, &opts, &mut out)?)
            )
        }
    } else {
        let view = alloc_view(db, selection, metrics);
        let what = format!("allocation sites of {}", path.display());
        let mut summary = if args.json {
            alloc::json(db, &view, &mut out)?;
            format!("{what}: {} sites as JSON", view.rows.len())
        } else {
            format!(
                "{what}: {}",
                rows_shown(alloc::text(db, &view, &opts, &mut out)?)
            )
        };
        if let Some(file) = &args.dhat {
            write_atomically_with(file, Replace::Refused, |w| dhat::render(&view, w)).map_err(
                |e| match e {
                    EnvelopeError::Exists { path } => dhat_exists(&path),
                    e => Failure::Other(anyhow!(e).context("writing the DHAT file")),
                },
            )?;
            summary.push_str(&format!("; DHAT file {}", file.display()));
        }
        summary
    };
    out.finish()?;
    Ok(summary)
}

/// The error for a `--dhat` file that exists already.
pub(crate) fn dhat_exists(path: &Path) -> Failure {
    bad(anyhow!(
        "{}: already exists (remove it or name another file with --dhat)",
        path.display()
    ))
}
