//! `hpcview-rs`: read a database written by `hpcprof-rs` in a terminal (hpcviewer's top-down,
//! callers and flat views), or export it as JSON, folded stacks for flame graphs, or annotated
//! source. All computation lives in the `correlate` library; this binary parses arguments, picks
//! the renderer, and turns failures into one-line errors with exit codes scripts can trust.

mod args;
mod asm;
mod bindings;
mod data;
mod export;
mod hpctoolkit;
mod html;
mod inputs;
mod memory;
mod mode;
mod output;
mod ranks;
mod shape;
mod time;

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;
use correlate::render::{csv, flame, folded, json, source, text};
use correlate::ViewTree;

use args::{Args, ColorChoice};
use inputs::{check_percent, database_path, metric_choice, thread_selection};
use mode::{DbMode, Mode, Shown};

/// How a run failed: bad input (exit 2) or anything else (exit 1).
pub(crate) enum Failure {
    BadInput(anyhow::Error),
    Other(anyhow::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Other(anyhow!(e).context("writing the output"))
    }
}

pub(crate) fn bad(e: impl Into<anyhow::Error>) -> Failure {
    Failure::BadInput(e.into())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(summary) => {
            correlate::say_line!("hpcview-rs: {summary}");
            ExitCode::SUCCESS
        }
        Err(Failure::BadInput(e)) => {
            correlate::say_line!("hpcview-rs: error: {}", correlate::one_line(e.chain()));
            ExitCode::from(2)
        }
        Err(Failure::Other(e)) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(Failure::Other(e)) => {
            correlate::say_line!("hpcview-rs: error: {}", correlate::one_line(e.chain()));
            ExitCode::from(1)
        }
    }
}

/// A reader that stopped reading (`hpcview-rs | head`) is not a failure.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Do what `args` ask; returns the summary line for stderr.
fn run(args: &Args) -> Result<String, Failure> {
    match Mode::of(args) {
        Mode::Diff { base, new } => export::diff(args, base, new),
        Mode::Export => export::export(args),
        Mode::Database(mode) => on_database(args, mode),
    }
}

/// Run `mode` on the database `args` name.
fn on_database(args: &Args, mode: DbMode) -> Result<String, Failure> {
    check_percent("--threshold", args.threshold, true)?;
    check_percent("--expand-hot", args.expand_hot, false)?;
    let path = database_path(args.database.as_deref()).map_err(bad)?;
    let db = hpctoolkit::open(&path).map_err(bad)?;
    let selection = thread_selection(&db, &args.threads, &path).map_err(bad)?;
    let selection = ranks::narrow(&db, &args.ranks, &path, selection)?;
    let (metrics, derived) = metric_choice(&db, &args.metrics, &path).map_err(bad)?;
    if !derived.is_empty() && !matches!(mode, DbMode::Tree { .. } | DbMode::Report(_)) {
        return Err(bad(anyhow::anyhow!(
            "--metric '{} = {}': derived metrics are shown by the tree views (top-down, \
             --callers, --flat) as text, --json and --csv, and by the HTML report",
            derived[0].name,
            derived[0].formula
        )));
    }
    match mode {
        DbMode::Report(file) => html::write_report(&db, &path, &metrics, &derived, file),
        DbMode::Data => data::run_data(args, &db, &selection, &metrics, &path),
        DbMode::Sites => data::data_view(args, &db, &path, &selection, &metrics),
        DbMode::Bindings => bindings::run(&args.binding, args.json, &db, &path),
        DbMode::Footprint => memory::run(&args.memory, args.json, &db, &path),
        DbMode::Time => time::run(args, &db, &path),
        DbMode::Asm(procedure) => asm::run(args, &db, &path, procedure),
        DbMode::Stats { kind, over } => ranks::run_stats(args, &db, &metrics, kind, over, &path),
        DbMode::Tree { kind, shown } => {
            let mut view = ViewTree::from_database(&db, kind, &selection);
            view.select_metrics(&metrics);
            view.derived = inputs::derived_over(&db, &metrics, &derived).map_err(bad)?;
            shape::apply(&args.shape, &mut view)?;
            show_tree(args, &view, &path, shown)
        }
    }
}

/// Show tree view `view` (of database `path`) as `shown` says; returns the summary line.
fn show_tree(args: &Args, view: &ViewTree, path: &Path, shown: Shown) -> Result<String, Failure> {
    if view.metrics.iter().all(|m| m.samples == 0 && m.total == 0) {
        correlate::say_line!(
            "hpcview-rs: {}: no samples (the measured program recorded no events); the view is empty",
            path.display()
        );
    }
    let mut out = output::Sink::open(&args.output);
    let colour = out.colour(args.color);
    let kind = view.view;
    let what = format!("{} view of {}", kind.name(), path.display());
    let summary = match shown {
        Shown::Source(spec) => {
            let lines = show_source(view, spec, args.absolute, &mut out)?;
            format!(
                "{lines} lines with samples in {spec} (from {})",
                path.display()
            )
        }
        Shown::Flamegraph => {
            let title = format!("{} ({})", path.display(), kind.name());
            let drawn = flame::render(view, 0, &title, &mut out)?;
            format!(
                "{what}: flame graph of {} frames, {} deep, {} samples",
                drawn.frames, drawn.depth, drawn.samples
            )
        }
        Shown::Folded => {
            let written = folded::render(view, 0, &mut out)?;
            format!(
                "{what}: {} folded stacks, {} samples of {}",
                written.stacks,
                written.samples,
                view.metrics
                    .first()
                    .map_or("no metric", |m| m.name.as_str())
            )
        }
        Shown::Rows => render_tree(args, view, colour, &mut out, &what)?,
    };
    out.finish()?;
    Ok(summary)
}

/// Print a tree view as JSON, CSV or text; returns the summary line.
pub(crate) fn render_tree(
    args: &Args,
    view: &ViewTree,
    colour: bool,
    out: &mut dyn Write,
    what: &str,
) -> Result<String, Failure> {
    if args.json {
        json::render(view, out)?;
        return Ok(format!("{what}: {} scopes as JSON", view.nodes.len()));
    }
    if args.csv {
        let rows = csv::render(view, out)?;
        return Ok(format!("{what}: {rows} scopes as CSV"));
    }
    let shown = text::render(view, &text_options(args, colour), out)?;
    let mut summary = format!("{what}: {} rows", shown.rows);
    if shown.folded > 0 {
        summary.push_str(&format!(
            ", {} scopes folded below {}% (--threshold 0 shows all)",
            shown.folded, args.threshold
        ));
    }
    Ok(summary)
}

/// How the text outputs are laid out.
pub(crate) fn text_options(args: &Args, colour: bool) -> text::TextOptions {
    text::TextOptions {
        threshold_pct: args.threshold,
        depth: args.depth,
        expand_hot_pct: args.expand_hot,
        absolute: args.absolute,
        color: colour,
        name_width: (!args.full_names).then_some(70),
    }
}

/// Print the `--source` view; returns the number of lines with samples.
fn show_source(
    view: &ViewTree,
    spec: &str,
    absolute: bool,
    out: &mut dyn Write,
) -> Result<usize, Failure> {
    let (file, range) = source::parse_spec(spec).map_err(bad)?;
    let costs = source::file_costs(view, &file).map_err(bad)?;
    // The file as named on the command line, else where the profile says it was compiled from.
    let text = [Path::new(&file), Path::new(&costs.path)]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok());
    if text.is_none() {
        correlate::say_line!(
            "hpcview-rs: cannot read {} (nor {file}); showing costs only",
            costs.path
        );
    }
    source::render(&costs, &view.metrics, text.as_deref(), range, absolute, out)?;
    Ok(costs.lines.len())
}

/// Colour only for a terminal, unless asked otherwise; `NO_COLOR` and `TERM=dumb` turn it off.
pub(crate) fn use_colour(choice: ColorChoice, terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    }
}
