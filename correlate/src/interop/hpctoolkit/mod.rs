//! HPCToolkit's database format (v4: `meta.db`, `profile.db`, `cct.db`, `trace.db` when traced,
//! `src/` with copies of the source files), both ways, so that
//! hpcviewer, hatchet and thicket read what `hpcprof-rs` measured, and `hpcview-rs` reads what
//! HPCToolkit's own `hpcprof` wrote.
//!
//! Both directions go through one intermediate model, `Experiment`: HPCToolkit's context tree
//! (entry points, then functions, loops and lines related by lexical nesting, calls or inlined
//! calls) with the costs measured exactly at each context ("point" values) per thread profile.
//! `export` builds it from a [`Database`] and [`write`] lays it out; `read` parses the files
//! and `import` turns it into a [`Database`] the views already know. The propagated values
//! HPCToolkit's readers want (exclusive "function" scope, inclusive "execution" scope, and their
//! sums over threads in the summary profile) are computed from the point values when writing;
//! when reading, each context's own cost is its inclusive value less its children's (see
//! `read`), and the views compute everything else the same way as for our own databases.
//!
//! Mapping of our tree: the root is the "main thread" entry point, `<partial call paths>` the
//! "unknown entry"; procedure frames (and unknown procedures, `<kernel>`) are function contexts
//! reached by a call; an inlined frame is a function context reached by an inlined call from a
//! line context at its call site (as HPCToolkit's `hpcprof` places them); loops and statements
//! are loop and line contexts. Each of our metrics becomes two HPCToolkit metrics: its values
//! (a clock in seconds, the first one named `CPUTIME (sec)` as HPCToolkit names it, so hatchet
//! finds its time metric) and its sample counts, whose name (`NAME samples (unit=U,
//! sampling=fN|pN)`) carries what the values alone lose. Each thread is one profile with the
//! identifier tuple (RANK = the profile it came from, THREAD = its OS thread id).

mod bytes;
mod export;
mod import;
mod meta;
mod read;
mod taxonomy;
#[cfg(test)]
mod tests;
mod trace;
mod values;
mod write;

use std::path::{Path, PathBuf};

use fxhash::FxHashSet;

use crate::{Database, Derived};

/// The entries of a database directory this tool writes: the files, `src/` with copies of the
/// source files and `metrics/` with the metric taxonomy.
const ENTRIES: [&str; 6] = [
    "meta.db",
    "profile.db",
    "cct.db",
    "trace.db",
    "src",
    "metrics",
];

/// Why an HPCToolkit database could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HpctoolkitError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file's bytes do not follow the format.
    #[error("{file}: corrupt HPCToolkit database at offset {at:#x}: {why}")]
    Corrupt {
        /// Which of the database's files (with its directory once known).
        file: String,
        /// Where the problem is.
        at: u64,
        /// What is wrong.
        why: String,
    },
    /// A file could not be put in place.
    #[error(transparent)]
    Write(#[from] profiler::envelope::EnvelopeError),
    /// The output directory exists and is not one this tool wrote.
    #[error("{path}: {why}")]
    Refused {
        /// The directory.
        path: PathBuf,
        /// Why it is not replaced.
        why: &'static str,
    },
}

/// A database as HPCToolkit models it (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Experiment {
    /// Title of the database.
    pub(crate) title: String,
    /// Load module paths.
    pub(crate) modules: Vec<String>,
    /// Source file paths.
    pub(crate) files: Vec<String>,
    /// Which of [`Experiment::files`] are copies in the database's `src/`, their paths relative
    /// to the database directory (`meta.db`'s `copied` flag).
    pub(crate) copied: FxHashSet<usize>,
    /// Functions, referred to by contexts.
    pub(crate) functions: Vec<Function>,
    /// Metric names; metric `m` has propagated ids `3m` (point), `3m+1` (function) and
    /// `3m+2` (execution) when written.
    pub(crate) metrics: Vec<String>,
    /// The context tree, parents before children; context `i` has `ctxId` `i + 1`.
    pub(crate) contexts: Vec<Context>,
    /// One (RANK, THREAD) identifier pair per thread profile.
    pub(crate) threads: Vec<(u32, u32)>,
    /// Values measured exactly at a context, in one thread profile, of one metric.
    pub(crate) values: Vec<PointValue>,
    /// The traced threads' time lines (`trace.db`).
    pub(crate) traces: Vec<TraceLine>,
}

/// One thread profile's trace: (time in ns, context) in time order; no context where the
/// thread was not running.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TraceLine {
    /// Index into [`Experiment::threads`].
    pub(crate) thread: usize,
    pub(crate) samples: Vec<(u64, Option<usize>)>,
}

/// A named source construct.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Function {
    pub(crate) name: Option<String>,
    pub(crate) module: Option<usize>,
    pub(crate) offset: u64,
    pub(crate) file: Option<usize>,
    pub(crate) line: u32,
}

/// What a context is to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// Enclosed lexically (a line in a loop).
    Lexical = 0,
    /// Reached by an ordinary call from the parent (a call site).
    Call = 1,
    /// Reached by a call the compiler inlined.
    InlinedCall = 2,
}

/// What a context stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lexical {
    /// An entry point of this kind (0 unknown, 1 main thread, 2 application thread).
    Entry(u16),
    Function,
    Loop,
    Line,
    Instruction,
}

/// One context of the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Context {
    /// Index of the parent context; `None` for entry points.
    pub(crate) parent: Option<usize>,
    pub(crate) relation: Relation,
    pub(crate) lexical: Lexical,
    /// Index into [`Experiment::functions`].
    pub(crate) function: Option<usize>,
    /// Source file index and line.
    pub(crate) src: Option<(usize, u32)>,
    /// Load module index and offset.
    pub(crate) point: Option<(usize, u64)>,
}

/// A point value (see [`Experiment::values`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PointValue {
    pub(crate) ctx: usize,
    pub(crate) thread: usize,
    pub(crate) metric: usize,
    pub(crate) value: f64,
}

/// Write `db` as an HPCToolkit database in directory `dir` (created; an existing directory is
/// only reused when it holds nothing but a database this tool wrote, whose files are replaced
/// atomically; a symlink is never followed): `meta.db`, `profile.db`, `cct.db`, `trace.db` when
/// `db` has traces, `src/` with a copy of each source file that can be read, and
/// `metrics/default.yaml`, the taxonomy through which hpcviewer shows the metrics and the
/// `derived` ones (read against the names of `db`'s metrics), evaluated from their sums.
pub fn write_database(
    db: &Database,
    dir: &Path,
    derived: &[Derived],
) -> Result<(), HpctoolkitError> {
    let ex = export::export(db);
    let taxonomy = taxonomy::default_yaml(&db.metrics, &ex.metrics, derived);
    write::write_dir(ex, dir, &taxonomy)
}

/// Read the HPCToolkit database in directory `dir` (written by HPCToolkit's `hpcprof` or by
/// [`write_database`]) into a [`Database`] the views can show.
pub fn read_database(dir: &Path) -> Result<Database, HpctoolkitError> {
    let experiment = read::read_dir(dir).map_err(|e| match e {
        HpctoolkitError::Corrupt { file, at, why } => HpctoolkitError::Corrupt {
            file: dir.join(file).display().to_string(),
            at,
            why,
        },
        e => e,
    })?;
    Ok(import::import(&experiment, dir))
}

/// Whether `path` is a directory holding an HPCToolkit `meta.db` (what [`read_database`] reads).
pub fn is_database(path: &Path) -> bool {
    path.is_dir() && path.join("meta.db").is_file()
}
