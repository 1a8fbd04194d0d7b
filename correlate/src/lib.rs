//! # correlate: the correlation stage of hpctoolkit-rs (`hpcprof-rs`, `hpcview-rs`)
//!
//! `hpcrun-rs` records *where* samples landed as calling-context trees of bare addresses
//! (`profile.db`). This crate turns them into something a person can read: every address is
//! expanded into its static context (procedure frame, inlined frames outermost first with their
//! call sites, loops, source line) using the program structure recovered by the `structure`
//! crate, sibling contexts that land in the same scope merge, and the result is one
//! **database** holding the enriched tree, which the three views project.
//!
//! **What the caller provides:** one or more `profile.db` files (read with
//! [`profiler::db::Profile::read`]), and optionally structure files; modules without one are
//! analysed on the fly (in parallel) and cached on disk.
//!
//! **What it gives back:** a [`Database`] (written to and read from a single versioned file),
//! and the three views of it as [`ViewTree`]s: [`top_down`], [`callers`] and [`flat`] compute,
//! from the database, the inclusive and exclusive cost of every scope with HPCToolkit's
//! semantics (exclusive of a procedure includes its inlined code and loops but not its calls;
//! in the callers and flat views only the outermost instance of a recursive procedure counts).
//! Every scope is named once, by hpcviewer's rules (`[I] name`, `loop at file: line`, ...).
//! The renderers ([`render::text`], [`render::json`], [`render::csv`], [`render::folded`],
//! [`render::source`], and [`html_report`], one self-contained interactive HTML page of all
//! three views) only present a view; they
//! compute nothing and name nothing. [`focus`], [`hide`], [`sort_by`] and [`keep_top`] shape a
//! view before it is presented.
//!
//! ## Metrics and views
//!
//! Definitions (costs in event units, per metric; [`Cost::samples`](profiler::db::Cost::samples) alongside):
//!
//! - **inclusive** of a node: the self costs of its whole subtree.
//! - **exclusive** of a procedure, inlined frame or loop: the self costs of its subtree without
//!   crossing a call edge (into a procedure frame, unknown procedure or the kernel), i.e. its
//!   own code, including code inlined into it and its loops. Exclusive of a statement, an
//!   unknown procedure or the kernel: its own self cost. Of the roots: zero.
//! - **top-down** ([`top_down`]): the enriched tree itself.
//! - **callers** ([`callers()`]): one top entry per procedure (procedure frames, inlined
//!   functions, unknown procedures, the kernel, merged by name, module, file and line over all
//!   contexts); below it the chain of callers of each of its instances, each caller node keyed by
//!   (caller, call site). Every node on the chain of an instance receives that instance's costs.
//! - **flat** ([`flat()`]): module > file > procedure > inlined / loops / statements, the static
//!   structure, costs summed over all contexts; calls made from a statement count in that
//!   statement's (and its enclosing scopes') inclusive cost, not in their exclusive cost.
//!
//! Recursion, in the callers and flat views: a scope's inclusive cost counts only the outermost
//! instance on each path (a sample is never counted twice for the same entry); exclusive costs
//! are summed over all instances (they never overlap). Children in every returned tree are in
//! display order (inclusive value of the first metric, descending).
//!
//! Address conventions: a leaf address is the sampled instruction; every interior address is a
//! return address, looked up at `ra - 1` so that a call at the end of a function is attributed
//! to its call instruction.
//!
//! ```no_run
//! use correlate::{top_down, Database, Selection};
//!
//! let db = Database::read(std::path::Path::new("profile.hpcdb"))?;
//! let tree = top_down(&db, &Selection::All);
//! for (_, child) in tree.children(0) {
//!     println!("{} {}", child.label(), child.incl[0].value);
//! }
//! # Ok::<(), correlate::DatabaseError>(())
//! ```
//!
//! The crate is four rooms, in pipeline order, each a folder (see `docs/architecture.md`):
//! `prof` (correlation: inputs, the structure cache, each module's structure, the profiles
//! streamed in two passes, enrichment, ranks' shares), `db` (the `*.hpcdb` file, its node model,
//! index types and scope names), `view` (the projections into the three views, shaping,
//! statistics, diff, data and time views) and `out` (the renderers and the HTML report), with
//! `interop` (speedscope, pprof, HPCToolkit's database) beside `out`.

#![deny(missing_docs)]

mod db;
mod interop;
mod out;
mod prof;
mod view;

// Correlation (hpcprof-rs): from profiles and structure to a database.

/// Print one line on stderr in a single write: the tools' messages and summaries, which a
/// caller capturing stdout and stderr together (a pipe into `head`, a test, a script) must not
/// see cut in two by the other stream (`eprintln!` writes each piece of its format apart).
#[macro_export]
macro_rules! say_line {
    ($($arg:tt)*) => {{
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

pub use prof::cache::StructureCache;
pub use prof::correlation::{
    correlate, finish_enriched, gather_share, prepare, summary_text, summary_warnings, Options,
    Partial, Summary,
};
pub use prof::error::CorrelateError;
pub use prof::inputs::{classify, InputKind};
pub use prof::openmp::{graft, Grafted, IDLE_METRIC, OVERHEAD_METRIC};
pub use prof::shares::{Enriched, Message, Prepared, Share};
pub use prof::structures::Analyser;
pub use structure::one_line;

// The database: the file, its tree, its tables' index types, its data section.
pub use db::data::{
    AllocStats, DataAccess, DataCounts, DataObject, DataObjectId, DataSection, Field, Instruction,
    Layout, MemoryOp, ObjectKind, SiteCounts,
};
pub use db::database::{
    Database, DatabaseError, DbStats, MetricDesc, ModuleDesc, Selection, StructureSource,
    ThreadDesc,
};
pub use db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};
pub use db::instructions::{InstructionCost, InstructionCosts};
pub use db::node::{ChildIndex, Node, NodeKey, NodeKind};
pub use db::node_costs::{Costs, Entries, NodeCosts, ThreadCost};

// Views: what is computed from a database before it is shown.
pub use view::asm::{asm, bundle_stores, hottest, AsmError, AsmInstruction, AsmLine, AsmView};
pub use view::data::{
    alloc_notice, alloc_view, code_data, delinquent_notice, delinquent_view, fields, find_objects,
    footprint, memmap, object_tree, objects, AllocRow, AllocView, DelinquentRow, DelinquentView,
    FieldTable, FootprintRow, MapObject, MapRow, MemMap, ObjectRow, ObjectTable, PartRow,
    DEFAULT_ROWS, REGIONS,
};
pub use view::diff::{
    diff, Diff, DiffError, DiffOptions, DiffRow, Normalise, SideCost, CONTEXT_KEPT,
};
pub use view::formula::{Derived, FormulaError};
pub use view::projection::{callers, flat, top_down};
pub use view::shape::{focus, hide, keep_top, sort_by, SortKey};
pub use view::stats::{scope_stats, Group, Over, ScopeStats, StatsTable};
pub use view::time::{slices, timeline, Lane, Phase, SliceRow, Slices, Timeline, TimelineOptions};
pub use view::tree::{MetricInfo, ViewKind, ViewNode, ViewTree};

// Outputs: each renderer is a module of `render` (`render::text`, `render::json`, ...).
pub use out::bindings;
pub use out::render;
pub use out::report::{render as html_report, ReportSummary, SourceLimits};

// Other tools' formats.
pub use interop::export::{pprof, speedscope};
pub use interop::hpctoolkit;
