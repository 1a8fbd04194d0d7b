//! What one run of `hpcview-rs` does, decided once from its flags: clap's argument groups (see
//! [`crate::args`]) have already refused flags that ask for two things at once, so every
//! combination that reaches here names one mode, and `main` runs it with one `match`.

use std::path::Path;

use correlate::ViewKind;

use crate::args::Args;
use crate::ranks::StatsOver;

/// The mode of a run.
pub(crate) enum Mode<'a> {
    /// `--diff BASE NEW`: two databases compared.
    Diff { base: &'a Path, new: &'a Path },
    /// `--speedscope` and/or `--pprof`: the database written in other tools' formats.
    Export,
    /// Everything else reads one database (see [`DbMode`]).
    Database(DbMode<'a>),
}

/// A mode that reads one database.
pub(crate) enum DbMode<'a> {
    /// `--html FILE`: the self-contained report.
    Report(&'a Path),
    /// `--data` or `--code-data`: data objects, or code with the objects it touched.
    Data,
    /// `--delinquent` or `--alloc`: instructions or allocation sites.
    Sites,
    /// `--bindings`: which code ran with which objects (watchpoint runs).
    Bindings,
    /// `--footprint`: distinct pages touched per procedure.
    Footprint,
    /// `--timeline`, `--slices` or `--memmap`: costs over time (traced runs).
    Time,
    /// `--asm PROCEDURE`: a procedure's machine code with its instructions' costs.
    Asm(&'a str),
    /// `--stats`: a view's scopes across ranks or threads.
    Stats { kind: ViewKind, over: StatsOver },
    /// A tree view (top-down, callers or flat) shown as `shown` says.
    Tree { kind: ViewKind, shown: Shown<'a> },
}

/// How a tree view is shown.
pub(crate) enum Shown<'a> {
    /// `--source FILE[:LINES]`: the lines of a file with their costs.
    Source(&'a str),
    /// `--flamegraph`: an SVG flame graph.
    Flamegraph,
    /// `--folded`: folded stacks.
    Folded,
    /// Text (the default), `--json` or `--csv` rows.
    Rows,
}

impl<'a> Mode<'a> {
    /// The one mode `args` ask for.
    pub(crate) fn of(args: &'a Args) -> Mode<'a> {
        let e = &args.export;
        if let [base, new] = &e.diff[..] {
            return Mode::Diff { base, new };
        }
        if e.speedscope.is_some() || e.pprof.is_some() {
            return Mode::Export;
        }
        Mode::Database(DbMode::of(args))
    }
}

impl<'a> DbMode<'a> {
    /// The mode of the one database's flags; the group `mode` lets at most one of them through,
    /// so the order of the tests below does not matter.
    fn of(args: &'a Args) -> DbMode<'a> {
        let (t, kind) = (&args.time, view_kind(args));
        if let Some(file) = &args.report.html {
            DbMode::Report(file)
        } else if args.data || args.code_data {
            DbMode::Data
        } else if args.delinquent || args.alloc {
            DbMode::Sites
        } else if args.binding.bindings {
            DbMode::Bindings
        } else if args.memory.footprint {
            DbMode::Footprint
        } else if t.timeline || t.slices || t.memmap {
            DbMode::Time
        } else if let Some(procedure) = &args.asm {
            DbMode::Asm(procedure)
        } else if let Some(over) = args.ranks.stats {
            DbMode::Stats { kind, over }
        } else {
            DbMode::Tree {
                kind,
                shown: shown(args),
            }
        }
    }
}

/// The view `--flat` (or `--source`, which reads the flat view) or `--callers` choose.
pub(crate) fn view_kind(args: &Args) -> ViewKind {
    if args.flat || args.source.is_some() {
        ViewKind::Flat
    } else if args.callers {
        ViewKind::Callers
    } else {
        ViewKind::TopDown
    }
}

fn shown(args: &Args) -> Shown<'_> {
    match &args.source {
        Some(spec) => Shown::Source(spec),
        None if args.flamegraph => Shown::Flamegraph,
        None if args.folded => Shown::Folded,
        None => Shown::Rows,
    }
}
