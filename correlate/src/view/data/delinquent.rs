//! The delinquent-instructions view (IBM patent 8122439's "delinquent memory operations"): the
//! instructions that carry the data cost, ranked, each with what it touched.
//!
//! A row is one accessing instruction (module and link-time address) and one object it touched
//! (and the member of the object's type, when its layout is known; which array element is not
//! part of the row), summed over calling contexts, offsets and the selected threads. An access
//! with no instruction address (code in no known module) is a row per accessing context. Rows
//! are ranked by the first metric. Each carries the instruction's static context, read up the
//! enriched tree from the accessing node: the source line (the statement), the innermost loop,
//! the inlined frames (outermost first) and the procedure, named as every other view names them.

use fxhash::FxHashMap;
use profiler::db::Cost;

use super::fields::member;
use super::views::{metric_infos, pick, selected};
use crate::db::data::{DataObjectId, Field, Layout, MemoryOp};
use crate::db::database::{Database, Selection};
use crate::db::ids::{DbModuleId, DbNodeId};
use crate::db::label;
use crate::db::node::NodeKind;
use crate::view::tree::MetricInfo;

/// The delinquent-instructions view of a database.
#[derive(Debug, Clone, PartialEq)]
pub struct DelinquentView {
    /// The metrics shown; totals are the data samples' in the selected threads (the rows'
    /// sum), as in the other data views.
    pub metrics: Vec<MetricInfo>,
    /// The rows, costliest first.
    pub rows: Vec<DelinquentRow>,
}

/// One instruction and one object (and member) it touched.
#[derive(Debug, Clone, PartialEq)]
pub struct DelinquentRow {
    /// The instruction's link-time address, where it is in a known module.
    pub address: Option<u64>,
    /// Path of that module.
    pub module: Option<String>,
    /// What the instruction does with memory, where it was decoded.
    pub op: Option<MemoryOp>,
    /// The procedure it is in (`<unknown procedure> 0xADDR [module]` without structure).
    pub procedure: String,
    /// The inlined functions it is in, outermost first.
    pub inlined: Vec<String>,
    /// The innermost loop around it: `loop at FILE: LINE`.
    pub loop_name: Option<String>,
    /// Its source file (full path), where known.
    pub file: Option<String>,
    /// Its source line, where known.
    pub line: Option<u32>,
    /// The object touched.
    pub object: DataObjectId,
    /// The member of its type the accesses fell in, when its layout is known.
    pub field: Option<String>,
    /// Cost per metric shown.
    pub costs: Vec<Cost>,
}

impl DelinquentRow {
    /// The function whose source holds the line: the innermost inlined function, else the
    /// procedure.
    pub fn function(&self) -> &str {
        self.inlined.last().unwrap_or(&self.procedure)
    }
}

/// How to measure what the data views show, for their notices.
pub(crate) const MEASURE: &str = "measure with `hpcrun-rs --data` (e.g. `-e page-faults@1 --data`)";

/// Why `db` has no delinquent instructions, as a one-line notice pointing to `hpcrun-rs
/// --data`; `None` when it has some.
pub fn delinquent_notice(db: &Database) -> Option<String> {
    db.data
        .accesses
        .is_empty()
        .then(|| format!("no data samples, so no delinquent instructions; {MEASURE}"))
}

/// Where a row's accesses are: an instruction, or without one an accessing context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Site {
    Instruction(DbModuleId, u64),
    Context(DbNodeId),
}

/// The delinquent instructions of `db` in the threads of `selection`, with the metrics at
/// `metrics` (indices into [`Database::metrics`]; the first one ranks).
pub fn delinquent_view(db: &Database, selection: &Selection, metrics: &[usize]) -> DelinquentView {
    let data = &db.data;
    let mut index: FxHashMap<(Site, DataObjectId, Option<&str>), usize> = FxHashMap::default();
    let mut rows: Vec<DelinquentRow> = Vec::new();
    let mut totals = vec![Cost::default(); db.metrics.len()];
    for access in selected(db, selection) {
        Cost::add_each(&mut totals, &access.costs);
        let field = data
            .object(access.object)
            .layout
            .as_ref()
            .zip(access.offset)
            .and_then(|(layout, offset)| field_at(layout, offset))
            .map(|f| f.name.as_str());
        let site = match access.instruction {
            Some((module, addr)) => Site::Instruction(module, addr),
            None => Site::Context(access.node),
        };
        let row = *index
            .entry((site, access.object, field))
            .or_insert_with(|| {
                let context = StaticContext::of(db, access.node);
                rows.push(DelinquentRow {
                    address: access.instruction.map(|(_, addr)| addr),
                    module: access
                        .instruction
                        .map(|(m, _)| db.module_path(m).to_string()),
                    op: access.instruction.and_then(|(m, a)| data.memory_op(m, a)),
                    procedure: context.procedure,
                    inlined: context.inlined,
                    loop_name: context.loop_name,
                    file: context.file,
                    line: context.line,
                    object: access.object,
                    field: field.map(str::to_string),
                    costs: vec![Cost::default(); metrics.len()],
                });
                rows.len() - 1
            });
        Cost::add_each(&mut rows[row].costs, &pick(&access.costs, metrics));
    }
    let first = |r: &DelinquentRow| r.costs.first().copied().unwrap_or_default();
    rows.sort_by(|a, b| {
        let (ca, cb) = (first(a), first(b));
        (cb.value, cb.samples)
            .cmp(&(ca.value, ca.samples))
            .then_with(|| (a.address, a.object).cmp(&(b.address, b.object)))
            .then_with(|| a.field.cmp(&b.field))
    });
    DelinquentView {
        metrics: pick(&metric_infos(db, &totals), metrics),
        rows,
    }
}

/// The member of `layout` holding byte `offset` of the object: of the struct, or of the
/// element the offset falls in (which element is not part of the answer).
fn field_at(layout: &Layout, offset: i64) -> Option<&Field> {
    match layout {
        Layout::Fields(fields) => member(fields, offset),
        Layout::Elements { size, fields, .. } => {
            let within = u64::try_from(offset).ok()?.checked_rem(*size)?;
            member(fields, within as i64)
        }
    }
}

/// Where an instruction is in the program's static structure.
struct StaticContext {
    procedure: String,
    inlined: Vec<String>,
    loop_name: Option<String>,
    file: Option<String>,
    line: Option<u32>,
}

impl StaticContext {
    /// The context of accessing node `leaf`: its statement, then up to the first activation
    /// (procedure, unknown procedure or the kernel).
    fn of(db: &Database, leaf: DbNodeId) -> StaticContext {
        let statement = &db.nodes[leaf.index()];
        let is_statement = statement.kind == NodeKind::Statement;
        let mut context = StaticContext {
            procedure: "<unknown procedure>".to_string(),
            inlined: Vec::new(),
            loop_name: None,
            file: statement
                .file
                .filter(|_| is_statement)
                .map(|f| db.file(f).to_string()),
            line: statement.line.filter(|_| is_statement),
        };
        let mut id = leaf;
        loop {
            let node = &db.nodes[id.index()];
            let file = node.file.map(|f| db.file(f));
            let name = || label::name(node.kind, &node.name, file, node.line);
            match node.kind {
                NodeKind::Loop if context.loop_name.is_none() => context.loop_name = Some(name()),
                NodeKind::Inlined => context.inlined.push(name()),
                kind if kind.is_activation() => {
                    context.procedure = name();
                    break;
                }
                _ => {}
            }
            if id == DbNodeId::ROOT {
                break;
            }
            id = node.parent;
        }
        context.inlined.reverse();
        context
    }
}
