//! `hpcprof-rs`: correlate sampled calling contexts with program structure into a database.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use correlate::{
    correlate, summary_text, CorrelateError, DatabaseError, InputKind, Options, StructureCache,
};
use profiler::addr::Svma;

/// Merge one or more profile.db files (from hpcrun-rs) with the structure of the code they
/// sampled into one database of enriched calling contexts: every context is expanded into its
/// procedure frames, inlined frames, loops and source lines. View it with hpcview-rs.
///
/// Inputs are recognised by content, in any order. Structure files (from hpcstruct-rs or
/// HPCToolkit's hpcstruct) are matched to load modules by path; every module without one is
/// analysed on the fly, in parallel, and only in the procedures the profiles sampled
/// ("focused"); the result is cached (under $XDG_CACHE_HOME/hpctoolkit-rs or
/// ~/.cache/hpctoolkit-rs) so the next run on the same binaries is fast. Several profiles
/// (threads, processes, runs) are summed into one tree; the same measurement given twice (the
/// same file, a link or a copy) is refused, as it would double every cost.
#[derive(Parser, Debug)]
#[command(name = "hpcprof-rs", version)]
#[command(after_help = "Exit status: 0 success, 2 bad usage or bad input, 1 other failure.")]
struct Args {
    /// profile.db files and optional structure files (.hpcstruct), recognised by content.
    #[arg(required = true, value_name = "PROFILE.db|STRUCTURE")]
    inputs: Vec<PathBuf>,

    /// Output database [default: PROFILE.hpcdb beside the first profile]. Never replaced if it
    /// already exists.
    #[arg(short, long, value_name = "DATABASE")]
    output: Option<PathBuf>,

    /// Threads for structure recovery [default: all cores].
    #[arg(short = 'j', long, value_name = "THREADS")]
    threads: Option<usize>,

    /// Neither read nor write the structure cache.
    #[arg(long)]
    no_cache: bool,
}

fn main() -> ExitCode {
    // clap exits with status 2 on a usage error, 0 for --help and --version.
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hpcprof-rs: error: {}", correlate::one_line(e.chain()));
            let bad_input = e.downcast_ref::<CorrelateError>().is_some_and(is_bad_input);
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("cannot set up worker threads")?;
    }
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
    };
    let first_profile = first_profile(&args.inputs);
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&first_profile));
    if output.exists() {
        return Err(CorrelateError::Database(DatabaseError::Exists { path: output }).into());
    }
    let (db, summary) = correlate(&options)?;
    db.write_new(&output).map_err(CorrelateError::Database)?;
    eprintln!("{}", summary_text(&summary, &output));
    Ok(())
}

/// The first input that is a profile (by content), or the first input.
fn first_profile(inputs: &[PathBuf]) -> PathBuf {
    inputs
        .iter()
        .find(|p| correlate::classify(p).ok() == Some(InputKind::Profile))
        .unwrap_or(&inputs[0])
        .clone()
}

/// `dir/name.db` -> `dir/name.hpcdb`.
fn default_output(profile: &Path) -> PathBuf {
    profile.with_extension("hpcdb")
}

/// Whether an error is the user's input's fault (exit status 2) rather than ours (1).
fn is_bad_input(e: &CorrelateError) -> bool {
    match e {
        CorrelateError::Binary { .. } => false,
        CorrelateError::Database(d) => matches!(d, DatabaseError::Exists { .. }),
        _ => true,
    }
}
