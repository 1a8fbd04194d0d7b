//! The command line of `hpcview-rs`: its flags, their help and the examples shown by `--help`.

use std::path::PathBuf;

use clap::{ArgGroup, Parser, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  hpcview-rs                          top-down view of the only *.hpcdb here
  hpcview-rs app.hpcdb --flat         costs by module, file, procedure, loop and line
  hpcview-rs --callers --threshold 5  who calls the expensive procedures
  hpcview-rs --depth 3 --absolute     three levels (hot path in full), with seconds
  hpcview-rs --source app.cc:10-40    lines 10-40 of app.cc with their costs
  hpcview-rs --asm kernel_loop        its machine code, each instruction's costs, loops and jumps
  hpcview-rs --json | jq '.root.children[0].name'
  hpcview-rs --flamegraph -o app.svg  a flame graph (SVG), no other tool needed
  hpcview-rs --folded | inferno-flamegraph > app.svg
  hpcview-rs --data                   data objects ranked by cost (hpcrun-rs --data)
  hpcview-rs --data --tree            each object, then the code that touched it
  hpcview-rs --data --fields A        object A by struct member or element range
  hpcview-rs --code-data --flat       each procedure, loop and line, then the objects it touched
  hpcview-rs --delinquent             instructions ranked by data cost, with the objects touched
  hpcview-rs --delinquent --csv       the same as CSV: file, function, line, operation, object...
  hpcview-rs --alloc --dhat app.dhat  allocation sites; also a DHAT file for dh_view.html
  hpcview-rs --stats                  per scope across MPI ranks: mean, min, max (which rank),
                                      stddev, imbalance; --stats=threads across threads
  hpcview-rs --rank 3 --callers       one rank's costs (profiles measured under mpirun)
  hpcview-rs --speedscope app.speedscope.json   for `speedscope app.speedscope.json`
  hpcview-rs --pprof app.pb.gz        for `go tool pprof app.pb.gz` (inlined frames, loops)
  hpcview-rs --diff base.hpcdb new.hpcdb --flat   what got slower or faster, by scope
  hpcview-rs --diff base.hpcdb new.hpcdb --fail-above 10   CI gate: exit 1 on a regression
  hpcview-rs --diff base.hpcdb new.hpcdb --folded | inferno-flamegraph > diff.svg
  hpcview-rs hpctoolkit-app-database  a database written by HPCToolkit (or hpcprof-rs --hpctoolkit)
  hpcview-rs --html app.html          one-file interactive report: views, flame graph, sources
  hpcview-rs --focus 'Mp::add' --hide '^_start$'   only the paths through Mp::add
  hpcview-rs --flat --sort excl --top 5 --csv -o app.csv   5 costliest per level, as CSV
  hpcview-rs --timeline --png t.png   threads x time by innermost procedure (hpcrun-rs -t)
  hpcview-rs --timeline --depth 4 --svg t.svg   the same by the procedure 4 calls deep
  hpcview-rs --slices --slice 50      samples per procedure per 50 ms, activity spans, phases
  hpcview-rs --footprint              distinct data pages and samples by region per procedure
  hpcview-rs --memmap --png m.png     which objects' pages were touched when (hpcrun-rs -t --data)
  hpcview-rs --memmap --csv -o m.csv  the same per slice, thread, procedure, object and page

Exit status: 0 ok, 2 bad arguments or bad database, 1 other failure (e.g. writing output) or,
with --diff --fail-above, a regression.";

/// Read an hpcprof-rs database: top-down (default), callers or flat view, as text, JSON or
/// folded stacks.
#[derive(Debug, Parser)]
#[command(name = "hpcview-rs", version, after_help = EXAMPLES)]
// What to show: at most one of these (see `mode::Mode`).
#[command(group(ArgGroup::new("mode").args([
    "data", "code_data", "delinquent", "alloc", "stats", "html", "diff", "bindings", "footprint",
    "timeline", "slices", "memmap", "asm",
])))]
// How a view is written: at most one.
#[command(group(ArgGroup::new("format").args(["json", "csv", "folded", "flamegraph", "source"])))]
// Which tree view: top-down unless one of these.
#[command(group(ArgGroup::new("kind").args(["flat", "callers"])))]
// Groups that options require (`--svg` a picture, `--slice` slices, `--replace` an export).
#[command(group(ArgGroup::new("pictured").multiple(true).args(["timeline", "memmap"])))]
#[command(group(ArgGroup::new("sliced").multiple(true).args(["slices", "memmap"])))]
#[command(group(ArgGroup::new("exports").multiple(true).args(["speedscope", "pprof"])))]
pub(crate) struct Args {
    /// Database written by hpcprof-rs, or an HPCToolkit database directory (v4) [default: the
    /// only *.hpcdb in the current directory]
    pub(crate) database: Option<PathBuf>,

    /// Flat view: module > file > procedure > loops, inlined code and lines, over all contexts
    #[arg(long, help_heading = "Views")]
    pub(crate) flat: bool,

    /// Callers (bottom-up) view: each procedure, then the call chains that led to it
    #[arg(long, help_heading = "Views")]
    pub(crate) callers: bool,

    /// Print the view as JSON (the format documented in the README)
    #[arg(long, help_heading = "Output")]
    pub(crate) json: bool,

    /// Print folded stacks (`frame;frame;... samples`) for inferno-flamegraph or flamegraph.pl;
    /// top-down view, first metric
    #[arg(long, conflicts_with = "kind", help_heading = "Output")]
    pub(crate) folded: bool,

    /// Draw a flame graph as SVG (top-down view, first metric; the frames of --folded, hover
    /// for names and shares); write it with -o FILE.svg
    #[arg(long, conflicts_with = "kind", help_heading = "Output")]
    pub(crate) flamegraph: bool,

    /// Show PROCEDURE's machine code (its name, or a part of it) with each instruction's costs,
    /// user and kernel mode, grouped by its loops and inlined code, jumps named
    #[arg(
        long,
        value_name = "PROCEDURE",
        conflicts_with_all = ["kind", "csv", "folded", "flamegraph", "source"],
        help_heading = "Views"
    )]
    pub(crate) asm: Option<String>,

    /// Show source lines of FILE (optionally only LINES, `N` or `N-M`) with their costs
    #[arg(
        long,
        value_name = "FILE[:LINES]",
        conflicts_with = "kind",
        help_heading = "Views"
    )]
    pub(crate) source: Option<String>,

    /// Data objects (variables, heap blocks by allocation path, stack locals, regions) ranked
    /// by the cost of the data samples that touched them (profiles measured with --data)
    #[arg(long, conflicts_with_all = ["kind", "folded", "source", "csv"], help_heading = "Data")]
    pub(crate) data: bool,

    /// With --data: below each object, the calling contexts that touched it, top-down
    #[arg(
        long,
        requires = "data",
        conflicts_with = "fields",
        help_heading = "Data"
    )]
    pub(crate) tree: bool,

    /// With --data: one object (its name, or a part of it) split by field or element range
    #[arg(long, value_name = "OBJECT", requires = "data", help_heading = "Data")]
    pub(crate) fields: Option<String>,

    /// With --fields: split arrays and untyped objects into N ranges
    #[arg(long, value_name = "N", default_value_t = correlate::DEFAULT_ROWS, requires = "fields", help_heading = "Data")]
    pub(crate) rows: u64,

    /// With --fields: split arrays and untyped objects into ranges of BYTES (instead of --rows)
    #[arg(long, value_name = "BYTES", requires = "fields", help_heading = "Data")]
    pub(crate) span: Option<u64>,

    /// The code view (top-down, or --callers, or --flat) with the data objects each context
    /// touched as its children
    #[arg(long, conflicts_with_all = ["folded", "source"], help_heading = "Data")]
    pub(crate) code_data: bool,

    /// Show only this metric (repeatable; in the order given; the first one sorts), or define
    /// one: 'NAME = FORMULA' over the metrics with + - * / and parentheses, computed per scope,
    /// inclusive and exclusive (e.g. 'fps = page-faults / (cpu-clock / 1e9)'); ipc, cpi,
    /// cache-miss-ratio and branch-miss-ratio are built in where their inputs exist
    /// [default: all]
    #[arg(
        long = "metric",
        value_name = "NAME[=FORMULA]",
        help_heading = "Selecting and shaping"
    )]
    pub(crate) metrics: Vec<String>,

    /// Only this thread's costs (OS thread id; repeatable) [default: all threads summed]
    #[arg(
        long = "thread",
        value_name = "TID",
        help_heading = "Selecting and shaping"
    )]
    pub(crate) threads: Vec<u32>,

    /// Fold rows below PCT percent of the total into one "(N more)" row
    #[arg(
        long,
        value_name = "PCT",
        default_value_t = 1.0,
        help_heading = "Selecting and shaping"
    )]
    pub(crate) threshold: f64,

    /// Show scopes at most N levels below the root (the hot path is always shown in full)
    #[arg(long, value_name = "N", help_heading = "Selecting and shaping")]
    pub(crate) depth: Option<usize>,

    /// The hot path follows the costliest child while it holds at least PCT percent of its
    /// parent
    #[arg(
        long,
        value_name = "PCT",
        default_value_t = 50.0,
        help_heading = "Selecting and shaping"
    )]
    pub(crate) expand_hot: f64,

    /// Also show absolute values (seconds for clocks, event counts otherwise)
    #[arg(short, long, help_heading = "Output")]
    pub(crate) absolute: bool,

    /// Print procedure names in full instead of shortening long C++ names
    #[arg(long, help_heading = "Output")]
    pub(crate) full_names: bool,

    /// When to colour the text view
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto, help_heading = "Output")]
    pub(crate) color: ColorChoice,

    /// Delinquent instructions (profiles measured with --data): the instructions carrying the
    /// data cost, ranked by the first metric, with their line, procedure, loop and the object
    /// touched
    #[arg(long, conflicts_with_all = ["kind", "folded", "source"], help_heading = "Data")]
    pub(crate) delinquent: bool,

    /// CSV records: for the tree views one per scope (depth, kind, scope, call site, file, line,
    /// then each metric's inclusive and exclusive value); with --delinquent one per instruction
    /// (file, function, line, operation, object id, start and size, object, address, module,
    /// metrics)
    #[arg(long, help_heading = "Output")]
    pub(crate) csv: bool,

    /// Allocation sites (profiles measured with --data; `hpcrun-rs --alloc-min 0` tracks every
    /// block): calls, bytes, frees, peak live, live at end (leaked), mean lifetime, by bytes
    #[arg(long, conflicts_with_all = ["kind", "folded", "source", "csv"], help_heading = "Data")]
    pub(crate) alloc: bool,

    /// With --alloc: also write the sites to FILE as a DHAT file (JSON, version 2) for
    /// valgrind's dh_view.html; an existing FILE is not replaced
    #[arg(long, value_name = "FILE", requires = "alloc", help_heading = "Data")]
    pub(crate) dhat: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Parallel runs")]
    pub(crate) ranks: crate::ranks::RankArgs,

    #[command(
        flatten,
        next_help_heading = "Other tools' formats, and comparing runs"
    )]
    pub(crate) export: crate::export::ExportArgs,

    #[command(flatten, next_help_heading = "Output")]
    pub(crate) report: crate::html::HtmlArgs,

    #[command(flatten, next_help_heading = "Selecting and shaping")]
    pub(crate) shape: crate::shape::ShapeArgs,

    #[command(flatten, next_help_heading = "Output")]
    pub(crate) output: crate::output::OutputArgs,

    #[command(flatten, next_help_heading = "Time (runs traced with hpcrun-rs -t)")]
    pub(crate) time: crate::time::TimeArgs,

    #[command(flatten, next_help_heading = "Data")]
    pub(crate) memory: crate::memory::MemoryArgs,

    #[command(flatten, next_help_heading = "Data")]
    pub(crate) binding: crate::bindings::BindingArgs,
}

/// When to use colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    /// When stdout is a terminal and NO_COLOR is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}
