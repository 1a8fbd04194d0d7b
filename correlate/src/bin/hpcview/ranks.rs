//! `hpcview-rs --stats` and `--rank`: parallel runs seen rank by rank (or thread by thread).

use std::path::Path;

use anyhow::bail;
use clap::ValueEnum;
use correlate::{render, scope_stats, Database, Over, Selection, ThreadIdx, ViewKind};

use crate::args::Args;
use crate::inputs::list;
use crate::output::Sink;
use crate::{bad, Failure};

/// The flags of parallel runs (flattened into [`Args`]).
#[derive(Debug, clap::Args)]
pub(crate) struct RankArgs {
    /// Statistics per scope of the view (top-down, or --callers, or --flat) across ranks
    /// (profiles; the default) or threads: sum, mean, min and max with the rank or thread
    /// holding them, standard deviation, coefficient of variation and imbalance (max - mean),
    /// most imbalanced first; first metric (see --metric)
    #[arg(
        long,
        value_enum,
        value_name = "OVER",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "ranks",
        conflicts_with_all = ["folded", "source", "rank", "threads"]
    )]
    pub(crate) stats: Option<StatsOver>,

    /// Only this rank's costs (the threads of its profile; runs under an MPI launcher)
    #[arg(long, value_name = "N", conflicts_with = "threads")]
    pub(crate) rank: Option<u32>,
}

/// What `--stats` is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatsOver {
    /// Each profile (an MPI rank) with all its threads.
    Ranks,
    /// Each thread.
    Threads,
}

/// `selection` narrowed to rank `--rank`'s threads when it is given.
pub(crate) fn narrow(
    db: &Database,
    args: &RankArgs,
    path: &Path,
    selection: Selection,
) -> Result<Selection, Failure> {
    let Some(rank) = args.rank else {
        return Ok(selection);
    };
    rank_threads(db, rank, path)
        .map(Selection::Threads)
        .map_err(bad)
}

/// The database threads of the profile(s) with rank `rank`.
fn rank_threads(db: &Database, rank: u32, path: &Path) -> anyhow::Result<Vec<ThreadIdx>> {
    let of_rank = |p: u32| db.jobs.get(p as usize).and_then(|j| j.rank) == Some(rank);
    let threads: Vec<ThreadIdx> = (0..db.threads.len())
        .filter(|&i| of_rank(db.threads[i].profile))
        .map(ThreadIdx::from_index)
        .collect();
    if threads.is_empty() {
        let mut ranks: Vec<u32> = db.jobs.iter().filter_map(|j| j.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.is_empty() {
            bail!(
                "{}: no ranks (its profiles were not measured under an MPI launcher)",
                path.display()
            );
        }
        bail!(
            "{}: no rank {rank}; ranks: {}",
            path.display(),
            list(ranks.iter().map(u32::to_string))
        );
    }
    Ok(threads)
}

/// Print `--stats` of view `kind` for the first of `metrics`; returns the summary line.
pub(crate) fn run_stats(
    args: &Args,
    db: &Database,
    metrics: &[usize],
    kind: ViewKind,
    over: StatsOver,
    path: &Path,
) -> Result<String, Failure> {
    let Some(&metric) = metrics.first() else {
        return Err(bad(anyhow::anyhow!("{}: no metrics", path.display())));
    };
    let over = match over {
        StatsOver::Ranks => Over::Ranks,
        StatsOver::Threads => Over::Threads,
    };
    let table = scope_stats(db, kind, metric, over);
    let mut out = Sink::open(&args.output);
    let colour = out.colour(args.color);
    let what = format!(
        "{} statistics over {} {}s of {}",
        kind.name(),
        table.groups.len(),
        over_noun(over),
        path.display()
    );
    let summary = if args.json {
        render::stats::json(&table, &mut out)?;
        format!("{what}: {} scopes as JSON", table.rows.len())
    } else {
        let shown = render::stats::text(&table, args.threshold, colour, &mut out)?;
        format!("{what}: {} rows", shown.rows)
    };
    out.finish()?;
    Ok(summary)
}

/// `rank` or `thread`.
fn over_noun(over: Over) -> &'static str {
    match over {
        Over::Ranks => "rank",
        Over::Threads => "thread",
    }
}
