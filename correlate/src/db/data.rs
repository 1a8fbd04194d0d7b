//! The data half of a database: named data objects, the accesses that touched them, and the
//! allocation sites of heap objects. Written by `hpcprof-rs` from the data references in
//! `profile.db` (`hpcrun-rs --data`); every data view of `hpcview-rs` is a projection of it.

pub use profiler::dataref::SiteCounts;
use profiler::db::Cost;
use profiler::trace::Traces;
use serde::{Deserialize, Serialize};

use crate::db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};

profiler::arena_index! {
    /// Index of an object in [`DataSection::objects`].
    pub struct DataObjectId;
}

/// Everything a database knows about data: empty when no profile had data references.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DataSection {
    /// The named objects, in the order they were first met.
    pub objects: Vec<DataObject>,
    /// Costs of data samples by (object, thread, accessing context, instruction, offset).
    pub accesses: Vec<DataAccess>,
    /// Allocation statistics of heap objects, per object and allocating thread.
    pub sites: Vec<AllocStats>,
    /// What the measurement resolved, summed over the profiles.
    pub stats: DataCounts,
    /// What the accessing instructions of `accesses` do with memory, decoded from their
    /// modules by `hpcprof-rs`: one entry per distinct (module, address), sorted; an
    /// instruction whose module could not be read has none.
    pub instructions: Vec<Instruction>,
    /// Wall-clock time the profiles measured, summed, ns.
    pub elapsed_ns: u64,
    /// Per database thread, (time, access) of every traced data sample (`hpcrun-rs -t
    /// --data`): each trace's `thread` is a [`ThreadIdx`], its contexts indices in
    /// [`DataSection::accesses`]. Stored in the database's last part (format version 7).
    #[serde(skip)]
    pub traces: Traces,
}

/// An accessing instruction and what it does with memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Instruction {
    /// Its module.
    pub module: DbModuleId,
    /// Its link-time address.
    pub addr: u64,
    /// Whether it reads or writes memory.
    pub op: MemoryOp,
}

/// What an instruction does with memory, explicit and implicit operands (a `push`, a `call`'s
/// return address, `movs`) together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemoryOp {
    /// Reads only.
    Load,
    /// Writes only.
    Store,
    /// Reads and writes (`add [rax], 1`, `xchg`, `movs`).
    LoadStore,
    /// No memory operand (a clock sample's interrupted instruction after its memory access).
    None,
}

impl MemoryOp {
    /// The name in text, CSV and JSON: `load`, `store`, `load+store`, `none`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryOp::Load => "load",
            MemoryOp::Store => "store",
            MemoryOp::LoadStore => "load+store",
            MemoryOp::None => "none",
        }
    }
}

/// What one data object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ObjectKind {
    /// A static variable (or a module's unnamed data).
    Static,
    /// Heap blocks allocated at one calling context.
    Heap,
    /// A local variable (or an unnamed part) of a stack frame.
    Stack,
    /// A mapping holding no named object: small heap blocks, other anonymous or file memory.
    Region,
    /// An address in nothing the run knew about.
    Unknown,
}

impl ObjectKind {
    /// The kind's name in text and JSON: `static`, `heap`, `stack`, `region`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Static => "static",
            ObjectKind::Heap => "heap",
            ObjectKind::Stack => "stack",
            ObjectKind::Region => "region",
            ObjectKind::Unknown => "unknown",
        }
    }
}

/// A named data object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataObject {
    /// Kind.
    pub kind: ObjectKind,
    /// Display name: `A`, `counter in f`, `Class::member`, `deep::lbuf`, `<frame of f>`,
    /// `xmalloc (a.c:12) < alloc_a (:20) < main (:31)`, `<heap: blocks < 4 KiB>`...
    pub name: String,
    /// The module it belongs to (statics, stack frames' code), where known.
    pub module: Option<DbModuleId>,
    /// Source file of its declaration (statics and locals) or allocation call (heap).
    pub file: Option<DbFileId>,
    /// Line of the declaration or allocation call.
    pub line: Option<u32>,
    /// Size in bytes: a variable's, or a heap site's largest block.
    pub size: Option<u64>,
    /// A static's link-time address, the start the offsets count from.
    pub start: Option<u64>,
    /// Heap: the allocation's calling context in the enriched tree.
    pub site: Option<DbNodeId>,
    /// Heap: SIGMA's receiver hint, the variable the returned pointer was stored into.
    pub receiver: Option<String>,
    /// How offsets into the object map to its parts, when its type is known.
    pub layout: Option<Layout>,
}

/// The parts of an object's type, for splitting costs by field or element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Layout {
    /// A struct or union: its members.
    Fields(Vec<Field>),
    /// An array: element size, count, and the members of a struct element type.
    Elements {
        /// Bytes per element.
        size: u64,
        /// Number of elements (0 when unknown, e.g. a heap block of this element type).
        count: u64,
        /// Members of each element when the element type is a struct.
        fields: Vec<Field>,
    },
}

/// A member of a struct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Name (nested members as `a.b`).
    pub name: String,
    /// Offset in the struct, bytes.
    pub offset: u64,
    /// Size, bytes.
    pub size: u64,
}

/// The data samples of one accessing context, in one thread, at one offset of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataAccess {
    /// The object touched.
    pub object: DataObjectId,
    /// The thread that touched it.
    pub thread: ThreadIdx,
    /// The accessing context: the enriched leaf of the sample's path.
    pub node: DbNodeId,
    /// The accessing instruction: its module and link-time address, where it was in one.
    pub instruction: Option<(DbModuleId, u64)>,
    /// Bytes from the object's start (negative: an allocator's header before a block), when
    /// the object has a start.
    pub offset: Option<i64>,
    /// Cost per metric.
    pub costs: Vec<Cost>,
}

/// The blocks one thread allocated for one heap object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStats {
    /// The heap object (an allocation context).
    pub object: DataObjectId,
    /// The allocating thread.
    pub thread: ThreadIdx,
    /// What it allocated.
    pub counts: SiteCounts,
}

/// What the measurements resolved, summed over profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataCounts {
    /// Data samples by class: heap, static, stack, mapping, unknown.
    pub by_class: [u64; 5],
    /// Clock samples whose address was sought by decoding the instruction.
    pub ea_attempted: u64,
    /// Of those, the ones with an address.
    pub ea_resolved: u64,
    /// Allocation records received.
    pub alloc_records: u64,
    /// Allocation records lost.
    pub alloc_lost: u64,
    /// Why heap blocks were not tracked, per profile where they were not.
    pub heap_unavailable: Vec<String>,
}

impl DataObject {
    /// The name people read: the name, and for a heap object with a receiver hint, the
    /// variable its pointer went to (`make_grid (a.c:26) < main (:38) = grid`).
    pub fn label(&self) -> String {
        match &self.receiver {
            Some(r) => format!("{} = {r}", self.name),
            None => self.name.clone(),
        }
    }
}

impl DataSection {
    /// Whether no profile had data references.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.stats == DataCounts::default()
    }

    /// The object `id`.
    pub fn object(&self, id: DataObjectId) -> &DataObject {
        &self.objects[id.index()]
    }

    /// What the instruction at link-time address `addr` of `module` does with memory, if it
    /// was decoded.
    pub fn memory_op(&self, module: DbModuleId, addr: u64) -> Option<MemoryOp> {
        let i = self
            .instructions
            .binary_search_by_key(&(module, addr), |i| (i.module, i.addr))
            .ok()?;
        Some(self.instructions[i].op)
    }

    /// Why this section does not fit a database of `nodes` nodes, `modules` modules, `files`
    /// files, `threads` threads and `metrics` metrics, if it does not.
    pub(crate) fn malformation(
        &self,
        nodes: usize,
        modules: usize,
        files: usize,
        threads: usize,
        metrics: usize,
    ) -> Option<String> {
        let objects = self.objects.len();
        let bad_object = self.objects.iter().position(|o| {
            o.module.is_some_and(|m| m.index() >= modules)
                || o.file.is_some_and(|f| f.index() >= files)
                || o.site.is_some_and(|n| n.index() >= nodes)
        });
        if let Some(i) = bad_object {
            return Some(format!("data object {i} refers to a missing entry"));
        }
        let bad_access = self.accesses.iter().position(|a| {
            a.object.index() >= objects
                || a.thread.index() >= threads
                || a.node.index() >= nodes
                || a.instruction.is_some_and(|(m, _)| m.index() >= modules)
                || a.costs.len() != metrics
        });
        if let Some(i) = bad_access {
            return Some(format!("data access {i} refers to a missing entry"));
        }
        let bad_site = self
            .sites
            .iter()
            .position(|s| s.object.index() >= objects || s.thread.index() >= threads);
        if let Some(i) = bad_site {
            return Some(format!("allocation site {i} refers to a missing entry"));
        }
        let key = |i: &Instruction| (i.module, i.addr);
        let sorted = self
            .instructions
            .windows(2)
            .all(|w| key(&w[0]) < key(&w[1]));
        let bad_module = self
            .instructions
            .iter()
            .any(|i| i.module.index() >= modules);
        (bad_module || !sorted)
            .then(|| "the instruction table is out of order or names a missing module".to_string())
    }
}
