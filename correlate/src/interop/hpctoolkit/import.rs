//! The [`Experiment`] model as our [`Database`]: contexts become nodes (see the parent module
//! for the mapping; instruction contexts fold into their parent, and a line context that is only
//! the call site of inlined calls becomes their `call_file:call_line`), point values become self
//! costs, and metric names are read back (ours exactly, HPCToolkit's with a unit in seconds
//! turned into nanoseconds).

use std::path::Path;

use profiler::db::{Cost, Sampling};
use profiler::trace::ThreadTrace;

use super::{Context, Experiment, Lexical, Relation, TraceLine};
use crate::db::database::{ModuleDesc, StructureSource, ThreadDesc};
use crate::db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};
use crate::db::node::{Node, NodeKey, NodeKind};
use crate::{Database, MetricDesc};

/// Where an HPCToolkit metric's values go: (our metric, sample counts or values times scale).
#[derive(Clone, Copy)]
enum Slot {
    Value(usize, f64),
    Samples(usize),
}

/// The database `ex` describes, read from directory `dir`.
pub(crate) fn import(ex: &Experiment, dir: &Path) -> Database {
    let (metrics, slots) = metrics(&ex.metrics);
    let mut db = Database::new(metrics);
    db.profiles = vec![dir.display().to_string()];
    db.command = (!ex.title.is_empty())
        .then(|| ex.title.clone())
        .into_iter()
        .collect();
    let source = StructureSource::File(dir.display().to_string());
    db.modules = ex
        .modules
        .iter()
        .map(|path| ModuleDesc {
            path: path.clone(),
            build_id: None,
            structure: source.clone(),
        })
        .collect();
    // The copies in the database's `src/` are found from its directory.
    db.files = ex
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| match ex.copied.contains(&i) {
            true => dir.join(f).display().to_string(),
            false => f.clone(),
        })
        .collect();
    db.threads = ex
        .threads
        .iter()
        .map(|&(profile, tid)| ThreadDesc {
            profile,
            pid: 0,
            tid,
            comm: String::new(),
        })
        .collect();
    let nodes = tree(ex, &mut db);
    let zero = vec![Cost::default(); db.metrics.len()];
    for p in &ex.values {
        let mut costs = zero.clone();
        match slots[p.metric] {
            Slot::Value(m, scale) => costs[m].value = (p.value * scale).round() as u64,
            Slot::Samples(m) => costs[m].samples = p.value.round() as u64,
        }
        db.add_cost(nodes[p.ctx], ThreadIdx::from_index(p.thread), &costs);
    }
    db.compute_totals();
    db.traces.threads = traces(ex, &nodes);
    db
}

/// The traces with each context replaced by its node; the times a thread was not running are
/// left out (our traces hold samples only).
fn traces(ex: &Experiment, nodes: &[DbNodeId]) -> Vec<ThreadTrace> {
    let mut lines: Vec<&TraceLine> = ex.traces.iter().collect();
    lines.sort_by_key(|t| t.thread);
    lines
        .into_iter()
        .map(|line| {
            let mut trace = ThreadTrace::new(line.thread as u32);
            for &(time, ctx) in &line.samples {
                if let Some(ctx) = ctx {
                    trace.push(time, nodes[ctx].index() as u32);
                }
            }
            trace
        })
        .collect()
}

/// Our metrics and where each HPCToolkit metric goes: a metric named like our sample counts
/// (`NAME samples (unit=U, sampling=fN|pN)`) names the metric before it.
fn metrics(names: &[String]) -> (Vec<MetricDesc>, Vec<Slot>) {
    let mut metrics: Vec<MetricDesc> = Vec::new();
    let mut slots = Vec::new();
    for name in names {
        let ours = parse_samples(name);
        if let (Some((name, unit, sampling)), Some(last)) = (ours, metrics.last_mut()) {
            *last = MetricDesc::new(name, unit, sampling);
            slots.push(Slot::Samples(metrics.len() - 1));
            continue;
        }
        let (base, unit) = match name.strip_suffix(')').and_then(|n| n.rsplit_once(" (")) {
            Some((base, "sec")) => (base, "ns"),
            Some((base, unit)) => (base, unit),
            None => (name.as_str(), "events"),
        };
        let scale = if unit == "ns" { 1e9 } else { 1.0 };
        slots.push(Slot::Value(metrics.len(), scale));
        metrics.push(MetricDesc::new(base, unit, Sampling::Frequency(0)));
    }
    (metrics, slots)
}

/// (name, unit, sampling) of a sample-count metric written by this tool.
fn parse_samples(name: &str) -> Option<(&str, &str, Sampling)> {
    let (base, rest) = name.strip_suffix(')')?.split_once(" samples (unit=")?;
    let (unit, sampling) = rest.split_once(", sampling=")?;
    let sampling = match sampling.split_at_checked(1)? {
        ("f", n) => Sampling::Frequency(n.parse().ok()?),
        ("p", n) => Sampling::Period(n.parse().ok()?),
        _ => return None,
    };
    Some((base, unit, sampling))
}

/// Build the nodes, one per context (sibling contexts alike in our terms, such as two loops
/// on one line, stay apart as HPCToolkit keeps them); returns the node each context's values
/// go to.
fn tree(ex: &Experiment, db: &mut Database) -> Vec<DbNodeId> {
    let call_site = call_site_lines(ex);
    let mut node = Vec::with_capacity(ex.contexts.len());
    for (i, c) in ex.contexts.iter().enumerate() {
        let parent = c.parent.map_or(DbNodeId::ROOT, |p| node[p]);
        let key = match c.lexical {
            Lexical::Entry(0) => Some(NodeKey::pseudo(NodeKind::Partial, "<partial call paths>")),
            Lexical::Entry(_) | Lexical::Instruction => None,
            _ if call_site[i] => None,
            Lexical::Loop => Some(lexical_key(NodeKind::Loop, c, db, parent)),
            Lexical::Line => Some(lexical_key(NodeKind::Statement, c, db, parent)),
            Lexical::Function => Some(function_key(ex, c)),
        };
        node.push(match key {
            Some(key) => {
                let id = DbNodeId::from_index(db.nodes.len());
                db.nodes.push(Node::from_key(parent, key));
                db.nodes[parent.index()].children.push(id);
                id
            }
            None => parent,
        });
    }
    node
}

/// Which contexts are lines that only stand for the call site of inlined calls: no values of
/// their own, and children that are all inlined calls.
fn call_site_lines(ex: &Experiment) -> Vec<bool> {
    let n = ex.contexts.len();
    let mut has_values = vec![false; n];
    for p in &ex.values {
        has_values[p.ctx] = true;
    }
    let mut inlined_children = vec![0usize; n];
    let mut other_children = vec![0usize; n];
    for c in &ex.contexts {
        if let Some(p) = c.parent {
            match c.relation {
                Relation::InlinedCall => inlined_children[p] += 1,
                _ => other_children[p] += 1,
            }
        }
    }
    (0..n)
        .map(|i| {
            ex.contexts[i].lexical == Lexical::Line
                && !has_values[i]
                && other_children[i] == 0
                && inlined_children[i] > 0
        })
        .collect()
}

/// The key of a loop or line context below node `parent`, in the same module (HPCToolkit does
/// not repeat the module in lexical contexts).
fn lexical_key(kind: NodeKind, c: &Context, db: &Database, parent: DbNodeId) -> NodeKey {
    NodeKey {
        module: db.nodes[parent.index()].module,
        file: c.src.map(|(f, _)| DbFileId::from_index(f)),
        line: c.src.and_then(|(_, l)| known(l)),
        ..NodeKey::pseudo(kind, "")
    }
}

/// A source line, 0 being HPCToolkit's "unknown".
fn known(line: u32) -> Option<u32> {
    (line != 0).then_some(line)
}

/// The key of a function context: a procedure frame (or `<kernel>`, an unknown procedure)
/// called from its parent line, or an inlined frame with the parent line as its call site.
fn function_key(ex: &Experiment, c: &Context) -> NodeKey {
    let f = c.function.map(|f| &ex.functions[f]);
    let module = f.and_then(|f| f.module);
    let name = match f.and_then(|f| f.name.clone()) {
        Some(name) => name,
        None => {
            let module = module.map_or("", |m| ex.modules[m].rsplit('/').next().unwrap_or(""));
            format!(
                "<unknown procedure> 0x{:x} [{module}]",
                f.map_or(0, |f| f.offset)
            )
        }
    };
    let kind = match name.as_str() {
        _ if c.relation == Relation::InlinedCall => NodeKind::Inlined,
        "<kernel>" => NodeKind::Kernel,
        n if n.starts_with("<unknown procedure>") => NodeKind::Unknown,
        _ => NodeKind::Procedure,
    };
    let parent_line = c
        .parent
        .map(|p| &ex.contexts[p])
        .filter(|p| p.lexical == Lexical::Line)
        .and_then(|p| p.src);
    NodeKey {
        kind,
        name,
        module: module.map(DbModuleId::from_index),
        file: f.and_then(|f| f.file).map(DbFileId::from_index),
        line: f.and_then(|f| known(f.line)),
        end_line: None,
        call_file: parent_line.map(|(file, _)| DbFileId::from_index(file)),
        call_line: parent_line.and_then(|(_, line)| known(line)),
    }
}
