//! The command line of `hpcprof-rs` and `hpcprof-rs-mpi`: the same arguments, output, summary
//! and exit statuses; they differ only in how the stages of the correlation are run.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use correlate::hpctoolkit::{self, HpctoolkitError};
use correlate::{
    summary_text, summary_warnings, CorrelateError, Database, DatabaseError, Derived, FormulaError,
    InputKind, Options, StructureCache, Summary,
};
use profiler::addr::Svma;

/// Merge one or more profile.db files (from hpcrun-rs) with the structure of the code they
/// sampled into one database of enriched calling contexts: every context is expanded into its
/// procedure frames, inlined frames, loops and source lines. View it with hpcview-rs.
///
/// Inputs are recognised by content, in any order. A directory stands for the profiles (*.db)
/// in it, e.g. the measurement directory of an MPI job: they are merged streaming, a few at a
/// time, so memory does not grow with their number; one that does not read is skipped with a
/// warning naming it (exit status 3), the rest merged. Structure files (from hpcstruct-rs or
/// HPCToolkit's hpcstruct) are matched to load modules by path; every module without one is
/// analysed on the fly, in parallel, and only in the procedures the profiles sampled
/// ("focused"); the result is cached (under $XDG_CACHE_HOME/hpctoolkit-rs or
/// ~/.cache/hpctoolkit-rs) so the next run on the same binaries is fast. Several profiles
/// (threads, processes, runs) are summed into one tree; the same measurement given twice (the
/// same file, a link or a copy) is refused, as it would double every cost.
#[derive(Parser, Debug)]
#[command(version)]
#[command(
    after_help = "Exit status: 0 success, 3 database written without some damaged profiles of a \
                  directory (named on stderr), 2 bad usage or bad input, 1 other failure."
)]
pub(crate) struct Args {
    /// profile.db files, measurement directories and optional structure files (.hpcstruct),
    /// recognised by content.
    #[arg(required = true, value_name = "PROFILE.db|DIR|STRUCTURE")]
    pub(crate) inputs: Vec<PathBuf>,

    /// Output database [default: PROFILE.hpcdb beside the first profile, DIR.hpcdb beside a
    /// measurement directory]. Never replaced if it already exists.
    #[arg(short, long, value_name = "DATABASE")]
    output: Option<PathBuf>,

    /// Threads for structure recovery [default: all cores].
    #[arg(short = 'j', long, value_name = "THREADS")]
    threads: Option<usize>,

    /// Neither read nor write the structure cache.
    #[arg(long)]
    no_cache: bool,

    /// Keep OpenMP worker threads as they were sampled (under the runtime's thread start)
    /// instead of grafting their work under the parallel regions that ran it, and add no
    /// omp-idle metric
    #[arg(long)]
    no_graft: bool,

    /// Write an HPCToolkit database (format v4: a directory of meta.db, profile.db and cct.db,
    /// for hpcviewer, hatchet or thicket) instead [default output: PROFILE.d]. An existing
    /// directory is only reused when it holds nothing but a database hpcprof-rs wrote.
    #[arg(long)]
    hpctoolkit: bool,

    /// With --hpctoolkit: a derived metric, 'NAME = FORMULA' over the measured metrics
    /// (numbers, metric names, + - * / and parentheses; e.g. 'ipc = instructions / cycles'),
    /// which hpcviewer computes per context from the database's metric taxonomy
    /// (metrics/default.yaml); may be given several times. The built-in ones (ipc, cpi,
    /// cache-miss-ratio, branch-miss-ratio) are added wherever their inputs were measured.
    #[arg(
        long = "metric",
        value_name = "NAME = FORMULA",
        requires = "hpctoolkit"
    )]
    metrics: Vec<String>,

    /// No summary: only warnings and errors are printed.
    #[arg(short, long)]
    quiet: bool,
}

/// The arguments of the tool called `name` (clap exits with status 2 on a usage error, 0 for
/// --help and --version).
pub(crate) fn parse(name: &'static str) -> Args {
    let matches = Args::command().name(name).bin_name(name).get_matches();
    Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Set up the worker threads and check that the output may be written.
pub(crate) fn setup(args: &Args) -> anyhow::Result<()> {
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("cannot set up worker threads")?;
    }
    let output = output(args);
    if output.exists() && !args.hpctoolkit {
        return Err(CorrelateError::Database(DatabaseError::Exists { path: output }).into());
    }
    Ok(())
}

/// Call `f` with the correlation options `args` ask for.
pub(crate) fn with_options<R>(args: &Args, f: impl FnOnce(&Options<'_>) -> R) -> R {
    let options = Options {
        inputs: args.inputs.clone(),
        cache: if args.no_cache {
            None
        } else {
            StructureCache::standard()
        },
        analyser: &|path: &Path, addresses: &[Svma]| {
            let options = structure::Options {
                threads: args.threads.unwrap_or(0),
                loops: true,
            };
            structure::analyze_focused(path, addresses, &options)
        },
        graft: !args.no_graft,
    };
    f(&options)
}

/// Write the `correlated` database and print its summary, or print the error; the exit status
/// (0, or 3 when some profiles of a directory were left out, or the error's).
pub(crate) fn write_or_report(
    args: &Args,
    name: &str,
    correlated: anyhow::Result<(Database, Summary)>,
) -> u8 {
    match correlated.and_then(|(db, summary)| write(args, name, &db, &summary)) {
        Ok(status) => status,
        Err(e) => report(name, &e),
    }
}

/// Write the database and print the summary; the exit status.
fn write(args: &Args, name: &str, db: &Database, summary: &Summary) -> anyhow::Result<u8> {
    let output = output(args);
    if args.hpctoolkit {
        hpctoolkit::write_database(db, &output, &derived_metrics(args, db)?)?;
    } else {
        db.write_new(&output).map_err(CorrelateError::Database)?;
    }
    match args.quiet {
        true => summary_warnings(summary)
            .iter()
            .for_each(|w| correlate::say_line!("{w}")),
        false => correlate::say_line!("{}", summary_text(name, summary, &output)),
    }
    Ok(if summary.skipped.is_empty() { 0 } else { 3 })
}

/// The derived metrics of an HPCToolkit database: those `--metric` defines, then the built-in
/// ones whose inputs `db` measured (where no metric defined has the name).
fn derived_metrics(args: &Args, db: &Database) -> Result<Vec<Derived>, FormulaError> {
    let names: Vec<String> = db.metrics.iter().map(|m| m.name.clone()).collect();
    let mut derived = (args.metrics.iter())
        .map(|m| Derived::parse(m, &names))
        .collect::<Result<Vec<_>, _>>()?;
    for d in Derived::built_ins(&names) {
        if derived.iter().all(|x| x.name != d.name) {
            derived.push(d);
        }
    }
    Ok(derived)
}

/// Print `e` as one line; its exit status: 2 for bad input, 1 otherwise.
pub(crate) fn report(name: &str, e: &anyhow::Error) -> u8 {
    correlate::say_line!("{name}: error: {}", message(e));
    exit_status(e)
}

/// `e` and its causes as one line.
pub(crate) fn message(e: &anyhow::Error) -> String {
    correlate::one_line(e.chain())
}

/// The exit status for `e`: 2 when it is the input's fault, 1 otherwise.
pub(crate) fn exit_status(e: &anyhow::Error) -> u8 {
    let refused = matches!(e.downcast_ref(), Some(HpctoolkitError::Refused { .. }));
    let bad_input = refused
        || e.downcast_ref::<FormulaError>().is_some()
        || e.downcast_ref::<CorrelateError>()
            .is_some_and(CorrelateError::is_bad_input);
    if bad_input {
        2
    } else {
        1
    }
}

/// The output path: `-o`, or beside the first profile or measurement directory.
fn output(args: &Args) -> PathBuf {
    args.output.clone().unwrap_or_else(|| {
        let first = args
            .inputs
            .iter()
            .find(|p| p.is_dir() || correlate::classify(p).ok() == Some(InputKind::Profile))
            .unwrap_or(&args.inputs[0]);
        first.with_extension(if args.hpctoolkit { "d" } else { "hpcdb" })
    })
}
