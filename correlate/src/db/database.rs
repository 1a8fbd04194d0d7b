//! The correlated database (`*.hpcdb`): what `hpcprof-rs` writes and `hpcview-rs` reads.
//!
//! A file is one [`Database`] in the tools' common envelope ([`profiler::envelope`], magic
//! `HPCPROFD`, version 8: [tagged sections](profiler::sections), 1 the database, 2 its [data
//! section](crate::DataSection), 3 each profile's place in a parallel job ([`Database::jobs`]),
//! 4 its [traces](profiler::trace), 5 each profile's watchpoint results ([`Database::watch`]),
//! 6 the data section's traces ([`crate::DataSection::traces`]). Versions 3 to 7 hold the first
//! 2 to 6 sections untagged, one after the other; versions 1 and 2 (2 with a checksum) only the
//! first; all of them read). It holds everything the views need:
//!
//! - the metric descriptors ([`MetricDesc`]: event name, unit, sampling, run total),
//! - the module table ([`ModuleDesc`], with where each module's structure came from),
//! - the source-file table ([`Database::files`], indexed by [`DbFileId`]),
//! - the threads that were measured ([`ThreadDesc`], so a view can be restricted to one),
//! - the enriched calling-context tree as an arena ([`Database::nodes`], node 0 the root),
//! - the data objects, their accesses and allocation sites ([`Database::data`]),
//! - per thread, the time line of sampled contexts ([`Database::traces`], `hpcrun-rs -t`).
//!
//! The tree is the one model: procedure frames, inlined frames, loops and statements
//! ([`NodeKind`]). A call site is a statement node in the caller; the callee's procedure frame
//! hangs below it. Each node stores only the costs sampled exactly there ("self" costs), split by
//! thread; every metric a view shows (inclusive, exclusive, the callers and flat trees) is
//! computed from them by the projections ([`crate::top_down`], [`crate::callers`],
//! [`crate::flat`]), so the views cannot disagree.

use std::collections::hash_map::Entry;
use std::io::Write;
use std::path::Path;

use fxhash::FxHashMap;
use profiler::db::{Cost, Sampling};
use profiler::envelope::{read_file, write_atomically_with, EnvelopeError, FileKind, Replace};
use profiler::job::JobPlace;
use profiler::sections;
use profiler::trace::Traces;
use profiler::watchdb::WatchProfile;
use serde::{Deserialize, Serialize};

use crate::db::data::DataSection;
use crate::db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};
use crate::db::instructions::InstructionCosts;
use crate::db::label;
use crate::db::node::{ChildIndex, Node, NodeKey, NodeKind};

/// The sections of a database file: 1 the database, 2 its data section, 3 the profiles' job
/// places, 4 the traces, 5 the watch results, 6 the data traces, 7 the instructions' costs, 8
/// the event groups. An untagged file of version `v` (3 to 7) holds the first `v - 1`.
const SECTIONS: usize = 8;

/// The first format version whose body is tagged sections.
const TAGGED_SINCE: u32 = 8;

/// The kind of file a database is.
pub(crate) static DATABASE_FILE: FileKind = FileKind {
    magic: *b"HPCPROFD",
    version: 8,
    oldest: 1,
    checked_since: 2,
    version_summed_since: u32::MAX,
    noun: "database",
    writer: "hpcprof-rs",
};

/// One correlated experiment: one or more profiles merged, enriched with program structure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Database {
    /// The `profile.db` files this database was built from, as given on the command line.
    pub profiles: Vec<String>,
    /// The command line measured by the first profile.
    pub command: Vec<String>,
    /// One descriptor per metric; every cost vector is parallel to this.
    pub metrics: Vec<MetricDesc>,
    /// Load modules referred to by nodes.
    pub modules: Vec<ModuleDesc>,
    /// Source file paths referred to by nodes (`file`, `call_file`).
    pub files: Vec<String>,
    /// Every measured thread, over all profiles.
    pub threads: Vec<ThreadDesc>,
    /// The enriched calling-context tree; `nodes[0]` is the root (`<program root>`).
    pub nodes: Vec<Node>,
    /// Measurement counters summed over the profiles, plus correlation counters.
    pub stats: DbStats,
    /// Data objects and their costs (`hpcrun-rs --data`); stored after the rest of the
    /// database in the file (format version 3), so older files read with an empty one.
    #[serde(skip)]
    pub data: DataSection,
    /// Each profile's rank and job id (parallel to [`Database::profiles`]; empty in a file of
    /// version 3 or older, whose profiles read as outside any job).
    #[serde(skip)]
    pub jobs: Vec<JobPlace>,
    /// Per database thread, (time, database node) of every traced sample (`hpcrun-rs -t`):
    /// each trace's `thread` is a [`ThreadIdx`], its contexts [`DbNodeId`]s. Stored last
    /// (format version 5).
    #[serde(skip)]
    pub traces: Traces,
    /// Per profile (parallel to [`Database::profiles`]; empty when no profile had `--watch`,
    /// and in a file of version 5 or older), what `hpcrun-rs --watch` measured: producer/consumer bindings. Stored last
    /// (format version 6).
    #[serde(skip)]
    pub watch: Vec<WatchProfile>,
    /// What each sampled instruction cost (section 7; empty in older files).
    #[serde(skip)]
    pub instructions: InstructionCosts,
    /// (member, leader) metrics of event groups: the member counted, read with each sample of
    /// the leader (section 8; empty in older files and without groups).
    #[serde(skip)]
    pub read_with: Vec<(u32, u32)>,
}

/// The metric hpcprof-rs adds where a profile measured CPU and off-CPU time: their sum.
pub const WALL_METRIC: &str = "wall";

/// A metric: one sampled event, with values in event units (samples x period).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricDesc {
    /// Event name, e.g. `cpu-clock`.
    pub name: String,
    /// Unit of values: `ns` for clocks, `events` otherwise.
    pub unit: String,
    /// How the event was sampled (fixed period or target frequency).
    pub sampling: Sampling,
    /// Total over the whole database (all threads).
    pub total: Cost,
}

impl MetricDesc {
    /// A metric named `name` in `unit`, sampled as `sampling`, with no total yet.
    pub fn new(name: impl Into<String>, unit: impl Into<String>, sampling: Sampling) -> MetricDesc {
        MetricDesc {
            name: name.into(),
            unit: unit.into(),
            sampling,
            total: Cost::default(),
        }
    }
}

/// Where a module's program structure came from during correlation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StructureSource {
    /// A structure file given on the command line (its path).
    File(String),
    /// Recovered from the binary during this run.
    OnTheFly,
    /// Loaded from the on-disk structure cache: said in the run's summary only (databases before
    /// this rule may hold it), since the file records [`StructureSource::recorded`].
    Cache,
    /// None: the module was unreadable or had no symbols (the reason).
    None(String),
}

impl StructureSource {
    /// What a database records of this source: a cached analysis is the analysis of the same
    /// binary made earlier, so it is recorded as [`StructureSource::OnTheFly`]. The same inputs
    /// then give the same bytes whether the cache was cold or warm; the run summary still says
    /// which modules came from the cache.
    pub fn recorded(&self) -> StructureSource {
        match self {
            StructureSource::Cache => StructureSource::OnTheFly,
            other => other.clone(),
        }
    }
}

/// A load module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleDesc {
    /// Path of the module as it was mapped (or a bracketed name such as `[vdso]`).
    pub path: String,
    /// GNU build-id, when known.
    pub build_id: Option<Vec<u8>>,
    /// Where its structure came from.
    pub structure: StructureSource,
}

/// A measured thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadDesc {
    /// Index of the profile (in [`Database::profiles`]) it came from.
    pub profile: u32,
    /// Process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u32,
    /// Command name.
    pub comm: String,
}

/// Counters reported in the summary and kept in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbStats {
    /// Samples received (sum over profiles).
    pub samples: u64,
    /// Records lost by the kernel.
    pub lost: u64,
    /// Samples filed under `<partial call paths>`.
    pub partial: u64,
    /// Distinct addresses that could not be placed in any procedure (`<unknown procedure>`).
    pub unknown_addresses: u64,
    /// Samples whose leaf landed in an `<unknown procedure>`.
    pub unknown_samples: u64,
}

/// Which threads a view covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Selection {
    /// All threads summed.
    #[default]
    All,
    /// Only these threads (indices into [`Database::threads`]).
    Threads(Vec<ThreadIdx>),
}

impl Selection {
    pub(crate) fn includes(&self, thread: ThreadIdx) -> bool {
        match self {
            Selection::All => true,
            Selection::Threads(list) => list.contains(&thread),
        }
    }
}

/// Why a database could not be read or written (an [`EnvelopeError::Malformed`] names the
/// first node whose references are out of range).
pub type DatabaseError = EnvelopeError;

impl Database {
    /// An empty database (root node only) for these metrics.
    pub fn new(metrics: Vec<MetricDesc>) -> Database {
        Database {
            profiles: Vec::new(),
            command: Vec::new(),
            metrics,
            modules: Vec::new(),
            files: Vec::new(),
            threads: Vec::new(),
            nodes: vec![Node::from_key(
                DbNodeId::ROOT,
                NodeKey::pseudo(NodeKind::Root, "<program root>"),
            )],
            stats: DbStats::default(),
            data: DataSection::default(),
            jobs: Vec::new(),
            traces: Traces::default(),
            watch: Vec::new(),
            instructions: InstructionCosts::default(),
            read_with: Vec::new(),
        }
    }

    /// Path of a source file.
    pub fn file(&self, id: DbFileId) -> &str {
        &self.files[id.index()]
    }

    /// Path of a module.
    pub fn module_path(&self, id: DbModuleId) -> &str {
        &self.modules[id.index()].path
    }

    /// The hpcviewer-style label of a node: the procedure name, `[I] name` for inlined code,
    /// `loop at FILE: LINE`, `FILE: LINE` for statements (file base names), and the stored
    /// name for the pseudo-frames (`<program root>`, `<partial call paths>`, ...).
    pub fn label(&self, id: DbNodeId) -> String {
        let n = &self.nodes[id.index()];
        let file = n.file.map(|f| self.file(f));
        let name = label::name(n.kind, &n.name, file, n.line);
        label::display(n.kind, &name, None)
    }

    /// Indices of the threads with OS thread id `tid` (several when profiles are merged).
    pub fn threads_with_tid(&self, tid: u32) -> Vec<ThreadIdx> {
        (0..self.threads.len())
            .filter(|&i| self.threads[i].tid == tid)
            .map(ThreadIdx::from_index)
            .collect()
    }

    /// Self costs of every node summed over the selected threads (one `Vec<Cost>` per node).
    pub fn self_costs(&self, selection: &Selection) -> Vec<Vec<Cost>> {
        let metrics = self.metrics.len();
        self.nodes
            .iter()
            .map(|n| {
                let mut sum = vec![Cost::default(); metrics];
                for (_, costs) in n.costs.iter().filter(|(t, _)| selection.includes(*t)) {
                    sum.iter_mut().zip(costs).for_each(|(s, c)| *s += c);
                }
                sum
            })
            .collect()
    }

    /// Add a child of `parent` with identity `key`, or return the existing child with that key.
    /// `index` maps (parent, key) to child and must be used for every insertion into this tree.
    pub fn child(&mut self, index: &mut ChildIndex, parent: DbNodeId, key: NodeKey) -> DbNodeId {
        match index.map.entry((parent, key)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let id = DbNodeId::from_index(self.nodes.len());
                self.nodes.push(Node::from_key(parent, e.key().1.clone()));
                self.nodes[parent.index()].children.push(id);
                *e.insert(id)
            }
        }
    }

    /// Add `costs` (per metric) sampled in `thread` to node `id`'s self costs.
    pub fn add_cost(&mut self, id: DbNodeId, thread: ThreadIdx, costs: &[Cost]) {
        self.nodes[id.index()].costs.add(thread, costs);
    }

    /// Intern a source file path, returning its id.
    pub fn intern_file(&mut self, files: &mut FxHashMap<String, DbFileId>, path: &str) -> DbFileId {
        if let Some(&id) = files.get(path) {
            return id;
        }
        let id = DbFileId::from_index(self.files.len());
        self.files.push(path.to_string());
        files.insert(path.to_string(), id);
        id
    }

    /// Recompute every metric's [`MetricDesc::total`] from the nodes' self costs.
    pub fn compute_totals(&mut self) {
        let mut totals = vec![Cost::default(); self.metrics.len()];
        for c in self.self_costs(&Selection::All) {
            Cost::add_each(&mut totals, &c);
        }
        for (m, t) in self.metrics.iter_mut().zip(totals) {
            m.total = t;
        }
    }

    /// Decode a database from a file's bytes, checking that its tree and data section are
    /// consistent; `path` names the file in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Database, DatabaseError> {
        let body = DATABASE_FILE.body(bytes, path)?;
        let corrupt = |e| DATABASE_FILE.corrupt(path, e);
        let malformed = |why| DATABASE_FILE.malformed(path, why);
        let mut parts = Parts::default();
        // Versions 1 to 7: the first sections (only the database in versions 1 and 2, the
        // first `version - 1` from version 3 on), untagged.
        let untagged = (body.version < TAGGED_SINCE).then(|| body.version.max(2) - 1);
        let taken = sections::take_all(body.bytes, untagged, SECTIONS as u32, |id, bytes| {
            parts.take(id, bytes)
        });
        match taken {
            Ok(()) => {}
            Err(sections::TakeError::Corrupt(e)) => return Err(corrupt(e)),
            Err(sections::TakeError::Malformed(why)) => return Err(malformed(why)),
        }
        let db = parts.assemble().map_err(malformed)?;
        db.check().map_err(malformed)?;
        Ok(db)
    }

    /// Why the database is not consistent: a node, a trace or the data section pointing
    /// outside what the database holds.
    fn check(&self) -> Result<(), String> {
        if let Some(node) = self.first_bad_node() {
            return Err(format!("node {node} refers to a missing node"));
        }
        let (nodes, modules, files) = (self.nodes.len(), self.modules.len(), self.files.len());
        let (threads, metrics) = (self.threads.len(), self.metrics.len());
        let nodes_of = |t: u32| ((t as usize) < threads).then_some(nodes);
        if let Some(why) = self.traces.malformation(nodes_of) {
            return Err(why);
        }
        if let Some(why) = self.instructions.malformation(modules, metrics) {
            return Err(why);
        }
        if (self.read_with.iter()).any(|&(m, l)| m as usize >= metrics || l as usize >= metrics) {
            return Err("an event group names a missing metric".into());
        }
        let accesses = self.data.accesses.len();
        let accesses_of = |t: u32| ((t as usize) < threads).then_some(accesses);
        if let Some(why) = self.data.traces.malformation(accesses_of) {
            return Err(format!("data trace: {why}"));
        }
        (self
            .data
            .malformation(nodes, modules, files, threads, metrics))
        .map_or(Ok(()), Err)
    }

    /// The file's bytes in the current format version.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.write_file(&mut bytes)?;
        Ok(bytes)
    }

    /// The bytes of this database as a file of the older, untagged format `version` (3 to 7)
    /// writes it: its first `version - 1` sections, one after the other.
    #[cfg(test)]
    fn to_version(&self, version: u32) -> std::io::Result<Vec<u8>> {
        let kind = FileKind {
            version,
            ..DATABASE_FILE
        };
        let mut bytes = Vec::new();
        kind.write_streamed(&mut bytes, |mut out| {
            for id in 1..version {
                out = self.encode_section(id, out)?;
            }
            Ok(())
        })?;
        Ok(bytes)
    }

    /// Write the whole file to `out` in the current format version without holding it in
    /// memory: each section's length is counted once, by an encoding that keeps nothing, then
    /// the body is encoded twice (for the checksum that comes first, then into `out`).
    fn write_file(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut lens = [0u64; SECTIONS];
        for (id, len) in (1..).zip(&mut lens) {
            *len = self.encode_section(id, Counted(0))?.0;
        }
        DATABASE_FILE.write_streamed(out, |out| self.write_body(out, &lens))
    }

    /// Write the file's body to `out`: each of the [`SECTIONS`] sections tagged (see
    /// [`profiler::sections`]) with its length `lens[id - 1]`, encoded as it is written.
    fn write_body(&self, out: &mut dyn Write, lens: &[u64; SECTIONS]) -> std::io::Result<()> {
        let mut out = out;
        for (id, &len) in (1..).zip(lens) {
            out.write_all(&sections::header(id, len))?;
            out = self.encode_section(id, out)?;
        }
        Ok(())
    }

    /// Encode section `id` (1 the database, 2 the data section, 3 the job places, 4 the traces,
    /// 5 the watch results, 6 the data traces) into `out`; gives `out` back.
    fn encode_section<W: Write>(&self, id: u32, out: W) -> std::io::Result<W> {
        match id {
            1 => postcard::to_io(self, out),
            2 => postcard::to_io(&self.data, out),
            3 => postcard::to_io(&self.jobs, out),
            4 => postcard::to_io(&self.traces, out),
            5 => postcard::to_io(&self.watch, out),
            6 => postcard::to_io(&self.data.traces, out),
            7 => postcard::to_io(&self.instructions, out),
            _ => postcard::to_io(&self.read_with, out),
        }
        .map_err(std::io::Error::other)
    }

    /// The first node whose links, module, file or thread references are out of range.
    fn first_bad_node(&self) -> Option<DbNodeId> {
        let n = self.nodes.len();
        if n == 0 {
            return Some(DbNodeId::ROOT);
        }
        // Each node is listed once, by its own parent, after it: a tree, whatever the bytes say.
        let mut listed = vec![false; n];
        let ok_file = |f: Option<DbFileId>| f.is_none_or(|f| f.index() < self.files.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let parent_ok = node.parent.index() < n && (i == 0 || node.parent.index() < i);
            let children_ok = node.children.iter().all(|&c| {
                let c = c.index();
                let ok = c < n && c > i && self.nodes[c].parent.index() == i && !listed[c];
                if ok {
                    listed[c] = true;
                }
                ok
            });
            let refs = node.module.is_none_or(|m| m.index() < self.modules.len())
                && ok_file(node.file)
                && ok_file(node.call_file)
                && node.costs.iter().all(|(thread, costs)| {
                    thread.index() < self.threads.len() && costs.len() == self.metrics.len()
                });
            if !(parent_ok && children_ok && refs) {
                return Some(DbNodeId::from_index(i));
            }
        }
        None
    }

    /// Read a database file (see [`Database::from_bytes`]).
    pub fn read(path: &Path) -> Result<Database, DatabaseError> {
        Database::from_bytes(&read_file(path)?, path)
    }

    /// Write the database to `path`, which must not exist yet: it is put in place atomically
    /// without replacing anything, even a file that appears meanwhile; a failure leaves no
    /// partial file behind. The bytes are written as they are encoded, never held whole in
    /// memory (they are encoded twice: once for the checksum, which comes first).
    pub fn write_new(&self, path: &Path) -> Result<(), DatabaseError> {
        write_atomically_with(path, Replace::Refused, |out| self.write_file(out))
    }
}

/// The procedure (or inlined frame) a data access at node `id` is charged to in the
/// per-procedure views: its nearest frame, or the root above every frame.
pub(crate) fn frame_of(db: &Database, id: DbNodeId) -> DbNodeId {
    enclosing_frame(db, id).unwrap_or(DbNodeId::ROOT)
}

/// The nearest procedure or inlined frame at or above `id`.
pub(crate) fn enclosing_frame(db: &Database, mut id: DbNodeId) -> Option<DbNodeId> {
    loop {
        let node = &db.nodes[id.index()];
        if node.kind.is_frame() {
            return Some(id);
        }
        if id == DbNodeId::ROOT {
            return None;
        }
        id = node.parent;
    }
}

/// A writer that only counts the bytes written to it: a section's length before its bytes.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The sections of a database as they are decoded, before they are put together.
#[derive(Default)]
struct Parts {
    db: Option<Database>,
    data: Option<DataSection>,
    jobs: Option<Vec<JobPlace>>,
    traces: Option<Traces>,
    watch: Option<Vec<WatchProfile>>,
    data_traces: Option<Traces>,
    instructions: Option<InstructionCosts>,
    read_with: Option<Vec<(u32, u32)>>,
}

impl Parts {
    /// Decode section `id` (1 to [`SECTIONS`]) from the front of `bytes`; returns the bytes
    /// after it.
    fn take<'b>(&mut self, id: u32, bytes: &'b [u8]) -> Result<&'b [u8], postcard::Error> {
        use profiler::sections::decode_into as put;
        match id {
            1 => put(&mut self.db, bytes),
            2 => put(&mut self.data, bytes),
            3 => put(&mut self.jobs, bytes),
            4 => put(&mut self.traces, bytes),
            5 => put(&mut self.watch, bytes),
            6 => put(&mut self.data_traces, bytes),
            7 => put(&mut self.instructions, bytes),
            _ => put(&mut self.read_with, bytes),
        }
    }

    /// The database, each section in its place; why not when the database itself is missing
    /// or the sections disagree on the number of profiles.
    fn assemble(self) -> Result<Database, String> {
        let mut db = self.db.ok_or("section 1 (the database) is missing")?;
        db.data = self.data.unwrap_or_default();
        let profiles = db.profiles.len();
        if let Some(jobs) = self.jobs {
            if jobs.len() != profiles {
                return Err(format!("{} job places for {profiles} profiles", jobs.len()));
            }
            db.jobs = jobs;
        }
        db.traces = self.traces.unwrap_or_default();
        if let Some(watch) = self.watch {
            if !(watch.is_empty() || watch.len() == profiles) {
                return Err(format!(
                    "{} watch parts for {profiles} profiles",
                    watch.len()
                ));
            }
            if let Some(why) = watch.iter().find_map(WatchProfile::malformation) {
                return Err(why);
            }
            db.watch = watch;
        }
        db.data.traces = self.data_traces.unwrap_or_default();
        db.instructions = self.instructions.unwrap_or_default();
        db.read_with = self.read_with.unwrap_or_default();
        Ok(db)
    }
}

#[cfg(test)]
#[path = "database_tests.rs"]
mod tests;
