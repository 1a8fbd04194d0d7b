//! `hpcview-rs`: read a database written by `hpcprof-rs` in a terminal (hpcviewer's top-down,
//! callers and flat views), or export it as JSON, folded stacks for flame graphs, or annotated
//! source. All computation lives in the `correlate` library; this file parses arguments, picks
//! the renderer, and turns failures into one-line errors with exit codes scripts can trust.

use std::fs;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::{Parser, ValueEnum};
use correlate::{
    alloc, alloc_view, data_render, delinquent, delinquent_view, dhat, folded, json, source, text,
    Database, Selection, ViewKind, ViewTree,
};
use profiler::envelope::{write_atomically_with, EnvelopeError, Replace};

const EXAMPLES: &str = "\
Examples:
  hpcview-rs                          top-down view of the only *.hpcdb here
  hpcview-rs app.hpcdb --flat         costs by module, file, procedure, loop and line
  hpcview-rs --callers --threshold 5  who calls the expensive procedures
  hpcview-rs --depth 3 --absolute     three levels (hot path in full), with seconds
  hpcview-rs --source app.cc:10-40    lines 10-40 of app.cc with their costs
  hpcview-rs --json | jq '.root.children[0].name'
  hpcview-rs --folded | inferno-flamegraph > app.svg
  hpcview-rs --data                   data objects ranked by cost (hpcrun-rs --data)
  hpcview-rs --data --tree            each object, then the code that touched it
  hpcview-rs --data --fields A        object A by struct member or element range
  hpcview-rs --code-data --flat       each procedure, loop and line, then the objects it touched
  hpcview-rs --delinquent             instructions ranked by data cost, with the objects touched
  hpcview-rs --delinquent --csv       the same as CSV: file, function, line, operation, object...
  hpcview-rs --alloc --dhat app.dhat  allocation sites; also a DHAT file for dh_view.html

Exit status: 0 ok, 2 bad arguments or bad database, 1 other failure (e.g. writing output).";

/// Read an hpcprof-rs database: top-down (default), callers or flat view, as text, JSON or
/// folded stacks.
#[derive(Debug, Parser)]
#[command(name = "hpcview-rs", version, after_help = EXAMPLES)]
struct Args {
    /// Database written by hpcprof-rs [default: the only *.hpcdb in the current directory]
    database: Option<PathBuf>,

    /// Flat view: module > file > procedure > loops, inlined code and lines, over all contexts
    #[arg(long, conflicts_with = "callers")]
    flat: bool,

    /// Callers (bottom-up) view: each procedure, then the call chains that led to it
    #[arg(long)]
    callers: bool,

    /// Print the view as JSON (the format documented in the README)
    #[arg(long, conflicts_with_all = ["folded", "source"])]
    json: bool,

    /// Print folded stacks (`frame;frame;... samples`) for inferno-flamegraph or flamegraph.pl;
    /// top-down view, first metric
    #[arg(long, conflicts_with_all = ["flat", "callers", "source"])]
    folded: bool,

    /// Show source lines of FILE (optionally only LINES, `N` or `N-M`) with their costs
    #[arg(long, value_name = "FILE[:LINES]", conflicts_with_all = ["flat", "callers"])]
    source: Option<String>,

    /// Data objects (variables, heap blocks by allocation path, stack locals, regions) ranked
    /// by the cost of the data samples that touched them (profiles measured with --data)
    #[arg(long, conflicts_with_all = ["flat", "callers", "folded", "source", "code_data"])]
    data: bool,

    /// With --data: below each object, the calling contexts that touched it, top-down
    #[arg(long, requires = "data", conflicts_with = "fields")]
    tree: bool,

    /// With --data: one object (its name, or a part of it) split by field or element range
    #[arg(long, value_name = "OBJECT", requires = "data")]
    fields: Option<String>,

    /// With --fields: split arrays and untyped objects into N ranges
    #[arg(long, value_name = "N", default_value_t = correlate::DEFAULT_ROWS, requires = "fields")]
    rows: u64,

    /// With --fields: split arrays and untyped objects into ranges of BYTES (instead of --rows)
    #[arg(long, value_name = "BYTES", requires = "fields")]
    span: Option<u64>,

    /// The code view (top-down, or --callers, or --flat) with the data objects each context
    /// touched as its children
    #[arg(long, conflicts_with_all = ["folded", "source"])]
    code_data: bool,

    /// Show only this metric (repeatable; in the order given; the first one sorts) [default: all]
    #[arg(long = "metric", value_name = "NAME")]
    metrics: Vec<String>,

    /// Only this thread's costs (OS thread id; repeatable) [default: all threads summed]
    #[arg(long = "thread", value_name = "TID")]
    threads: Vec<u32>,

    /// Fold rows below PCT percent of the total into one "(N more)" row
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    threshold: f64,

    /// Show scopes at most N levels below the root (the hot path is always shown in full)
    #[arg(long, value_name = "N")]
    depth: Option<usize>,

    /// The hot path follows the costliest child while it holds at least PCT percent of its
    /// parent
    #[arg(long, value_name = "PCT", default_value_t = 50.0)]
    expand_hot: f64,

    /// Also show absolute values (seconds for clocks, event counts otherwise)
    #[arg(short, long)]
    absolute: bool,

    /// Print procedure names in full instead of shortening long C++ names
    #[arg(long)]
    full_names: bool,

    /// When to colour the text view
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    color: ColorChoice,

    /// Delinquent instructions (profiles measured with --data): the instructions carrying the
    /// data cost, ranked by the first metric, with their line, procedure, loop and the object
    /// touched
    #[arg(long, conflicts_with_all = ["flat", "callers", "folded", "source", "data", "code_data", "alloc"])]
    delinquent: bool,

    /// With --delinquent: CSV records (file, function, line, operation, object id, object
    /// start, object size, then object, address, module and one column per metric)
    #[arg(long, requires = "delinquent", conflicts_with = "json")]
    csv: bool,

    /// Allocation sites (profiles measured with --data; `hpcrun-rs --alloc-min 0` tracks every
    /// block): calls, bytes, frees, peak live, live at end (leaked), mean lifetime, by bytes
    #[arg(long, conflicts_with_all = ["flat", "callers", "folded", "source", "data", "code_data"])]
    alloc: bool,

    /// With --alloc: also write the sites to FILE as a DHAT file (JSON, version 2) for
    /// valgrind's dh_view.html; an existing FILE is not replaced
    #[arg(long, value_name = "FILE", requires = "alloc")]
    dhat: Option<PathBuf>,
}

/// When to use colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColorChoice {
    /// When stdout is a terminal and NO_COLOR is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// How a run failed: bad input (exit 2) or anything else (exit 1).
enum Failure {
    BadInput(anyhow::Error),
    Other(anyhow::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Other(anyhow!(e).context("writing the output"))
    }
}

fn bad(e: impl Into<anyhow::Error>) -> Failure {
    Failure::BadInput(e.into())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(summary) => {
            eprintln!("hpcview-rs: {summary}");
            ExitCode::SUCCESS
        }
        Err(Failure::BadInput(e)) => {
            eprintln!("hpcview-rs: error: {}", correlate::one_line(e.chain()));
            ExitCode::from(2)
        }
        Err(Failure::Other(e)) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(Failure::Other(e)) => {
            eprintln!("hpcview-rs: error: {}", correlate::one_line(e.chain()));
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
    check_percent("--threshold", args.threshold, true)?;
    check_percent("--expand-hot", args.expand_hot, false)?;
    let path = database_path(args.database.as_deref()).map_err(bad)?;
    let db = Database::read(&path).map_err(bad)?;
    let selection = thread_selection(&db, &args.threads, &path).map_err(bad)?;
    let metrics = metric_indices(&db, &args.metrics, &path).map_err(bad)?;
    if args.data || args.code_data {
        return run_data(args, &db, &selection, &metrics, &path);
    }
    if args.delinquent || args.alloc {
        return data_view(args, &db, &path, &selection, &metrics);
    }
    let kind = match (args.flat || args.source.is_some(), args.callers) {
        (true, _) => ViewKind::Flat,
        (_, true) => ViewKind::Callers,
        _ => ViewKind::TopDown,
    };
    let mut view = ViewTree::from_database(&db, kind, &selection);
    view.select_metrics(&metrics);
    if view.metrics.iter().all(|m| m.samples == 0) {
        eprintln!(
            "hpcview-rs: {}: no samples (the measured program recorded no events); the view is empty",
            path.display()
        );
    }

    let stdout = io::stdout();
    let colour = use_colour(args.color, &stdout);
    let mut out = BufWriter::new(stdout.lock());
    let what = format!("{} view of {}", kind.name(), path.display());
    let summary = if let Some(spec) = &args.source {
        let lines = show_source(&view, spec, args.absolute, &mut out)?;
        format!(
            "{lines} lines with samples in {spec} (from {})",
            path.display()
        )
    } else if args.folded {
        let written = folded::render(&view, 0, &mut out)?;
        format!(
            "{what}: {} folded stacks, {} samples of {}",
            written.stacks,
            written.samples,
            view.metrics
                .first()
                .map_or("no metric", |m| m.name.as_str())
        )
    } else {
        render_tree(args, &view, colour, &mut out, &what)?
    };
    out.flush()?;
    Ok(summary)
}

/// The data views: `--data` (objects, `--tree`, `--fields`) and `--code-data`.
fn run_data(
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
    let stdout = io::stdout();
    let colour = use_colour(args.color, &stdout);
    let mut out = BufWriter::new(stdout.lock());
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
            data_render::fields_json(db, &table, &mut out)?;
        } else {
            data_render::fields_text(db, &table, args.absolute, &mut out)?;
        }
        format!("{} parts of {name} ({})", table.rows.len(), path.display())
    } else if args.data && !args.tree {
        let mut table = correlate::objects(db, selection);
        table.select_metrics(metrics);
        if args.json {
            data_render::objects_json(db, &table, &mut out)?;
            format!(
                "{} data objects as JSON ({})",
                table.rows.len(),
                path.display()
            )
        } else {
            let shown =
                data_render::objects_text(db, &table, args.threshold, args.absolute, &mut out)?;
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
            let kind = match (args.flat, args.callers) {
                (true, _) => ViewKind::Flat,
                (_, true) => ViewKind::Callers,
                _ => ViewKind::TopDown,
            };
            correlate::code_data(db, kind, selection)
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
    out.flush()?;
    Ok(summary)
}

/// Print a tree view as JSON or text; returns the summary line.
fn render_tree(
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
fn text_options(args: &Args, colour: bool) -> text::TextOptions {
    text::TextOptions {
        threshold_pct: args.threshold,
        depth: args.depth,
        expand_hot_pct: args.expand_hot,
        absolute: args.absolute,
        color: colour,
        name_width: (!args.full_names).then_some(70),
    }
}

fn check_percent(flag: &str, value: f64, zero_ok: bool) -> Result<(), Failure> {
    let low_ok = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if low_ok && value <= 100.0 {
        Ok(())
    } else {
        Err(bad(anyhow!(
            "{flag} {value}: expected a percentage in (0, 100]"
        )))
    }
}

/// The database to open: the one given, or the only `*.hpcdb` file in the current directory.
fn database_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let mut found: Vec<PathBuf> = fs::read_dir(".")
        .context("listing the current directory")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hpcdb") && p.is_file())
        .collect();
    found.sort();
    match found.len() {
        0 => bail!("no *.hpcdb database in the current directory; name one (hpcprof-rs writes it)"),
        1 => {
            let p = found.remove(0);
            eprintln!("hpcview-rs: opened {}", p.display());
            Ok(p)
        }
        _ => bail!(
            "several databases in the current directory ({}); name one",
            list(found.iter().map(|p| p.display().to_string()))
        ),
    }
}

/// The threads `--thread` selects (all when none is given).
fn thread_selection(db: &Database, tids: &[u32], path: &Path) -> anyhow::Result<Selection> {
    if tids.is_empty() {
        return Ok(Selection::All);
    }
    let mut chosen = Vec::new();
    for &tid in tids {
        let found = db.threads_with_tid(tid);
        if found.is_empty() {
            let known = db.threads.iter().map(|t| format!("{} ({})", t.tid, t.comm));
            bail!(
                "{}: no thread {tid}; threads: {}",
                path.display(),
                list(known)
            );
        }
        chosen.extend(found);
    }
    Ok(Selection::Threads(chosen))
}

/// Indices of the metrics `--metric` names, in that order (all metrics when none is given).
fn metric_indices(db: &Database, names: &[String], path: &Path) -> anyhow::Result<Vec<usize>> {
    if names.is_empty() {
        return Ok((0..db.metrics.len()).collect());
    }
    names
        .iter()
        .map(|name| {
            db.metrics
                .iter()
                .position(|m| &m.name == name)
                .ok_or_else(|| {
                    let known = db.metrics.iter().map(|m| m.name.clone());
                    anyhow!(
                        "{}: no metric '{name}'; metrics: {}",
                        path.display(),
                        list(known)
                    )
                })
        })
        .collect()
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
        eprintln!(
            "hpcview-rs: cannot read {} (nor {file}); showing costs only",
            costs.path
        );
    }
    source::render(&costs, &view.metrics, text.as_deref(), range, absolute, out)?;
    Ok(costs.lines.len())
}

/// Colour only on a terminal, unless asked otherwise; `NO_COLOR` and `TERM=dumb` turn it off.
fn use_colour(choice: ColorChoice, stdout: &io::Stdout) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            stdout.is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    }
}

/// At most ten items joined by `, `, then how many more.
fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let shown = items
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match items.len() {
        0 => "none".to_string(),
        n if n > 10 => format!("{shown}, ... ({} more)", n - 10),
        _ => shown,
    }
}

/// Print a data view (`--delinquent`, `--alloc`, with `--dhat` the DHAT file too); returns the
/// summary line, or the one-line notice that the database has nothing for the view.
fn data_view(
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
    let stdout = io::stdout();
    let opts = text_options(args, use_colour(args.color, &stdout));
    let mut out = BufWriter::new(stdout.lock());
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
    out.flush()?;
    Ok(summary)
}

/// The error for a `--dhat` file that exists already.
fn dhat_exists(path: &Path) -> Failure {
    bad(anyhow!(
        "{}: already exists (remove it or name another file with --dhat)",
        path.display()
    ))
}
