//! Our database as HPCToolkit's model ([`Experiment`]): the tree mapped context by context (see
//! the parent module for the mapping) and the self costs turned into point values.

use fxhash::FxHashMap;
use profiler::db::Sampling;

use super::{Context, Experiment, Function, Lexical, PointValue, Relation, TraceLine};
use crate::db::database::MetricDesc;
use crate::db::ids::DbNodeId;
use crate::db::node::{Node, NodeKind};
use crate::Database;

/// Nanoseconds per second: clocks are written in seconds, as HPCToolkit writes them.
const NS_PER_S: f64 = 1e9;

/// The HPCToolkit model of `db`.
pub(crate) fn export(db: &Database) -> Experiment {
    let mut ex = Experiment {
        title: db.command.first().cloned().unwrap_or_default(),
        modules: db.modules.iter().map(|m| m.path.clone()).collect(),
        files: db.files.clone(),
        metrics: metric_names(&db.metrics),
        threads: db.threads.iter().map(|t| (t.profile, t.tid)).collect(),
        ..Experiment::default()
    };
    let mut tree = TreeBuilder::default();
    let main = tree.push(&mut ex, None, Relation::Lexical, Lexical::Entry(1));
    // Depth first with an explicit stack: (our node, the context its children hang from).
    let mut stack: Vec<(DbNodeId, usize)> = vec![(DbNodeId::ROOT, main)];
    let mut context_of = vec![main; db.nodes.len()];
    while let Some((id, ctx)) = stack.pop() {
        context_of[id.index()] = ctx;
        let node = &db.nodes[id.index()];
        point_values(db, node, ctx, &mut ex.values);
        for &child in node.children.iter().rev() {
            let c = tree.context(&mut ex, &db.nodes[child.index()], ctx);
            stack.push((child, c));
        }
    }
    ex.traces = traces(db, &context_of);
    ex
}

/// Our traces with each node replaced by its context (a database read back has checked
/// traces, so none fails to decode; one that did would be left out rather than written wrong).
fn traces(db: &Database, context_of: &[usize]) -> Vec<TraceLine> {
    let traces = db.traces.threads.iter();
    traces
        .filter_map(|t| {
            let samples = t.decode(db.nodes.len()).ok()?;
            Some(TraceLine {
                thread: t.thread as usize,
                samples: samples
                    .into_iter()
                    .map(|(time, node)| (time, Some(context_of[node as usize])))
                    .collect(),
            })
        })
        .collect()
}

/// The HPCToolkit metric names of our metrics: values then sample counts, for each.
fn metric_names(metrics: &[MetricDesc]) -> Vec<String> {
    let first_clock = metrics.iter().position(|m| m.unit == "ns");
    let mut names = Vec::with_capacity(2 * metrics.len());
    for (i, m) in metrics.iter().enumerate() {
        names.push(match (m.unit.as_str(), Some(i) == first_clock) {
            ("ns", true) => "CPUTIME (sec)".to_string(),
            ("ns", false) => format!("{} (sec)", m.name),
            _ => m.name.clone(),
        });
        let sampling = match m.sampling {
            Sampling::Frequency(hz) => format!("f{hz}"),
            Sampling::Period(p) => format!("p{p}"),
        };
        names.push(format!(
            "{} samples (unit={}, sampling={sampling})",
            m.name, m.unit
        ));
    }
    names
}

/// Point values of `node`'s self costs at context `ctx`: value and sample count of each metric.
fn point_values(db: &Database, node: &Node, ctx: usize, out: &mut Vec<PointValue>) {
    for (thread, costs) in node.costs.iter() {
        for (m, (cost, desc)) in costs.zip(&db.metrics).enumerate() {
            let scale = if desc.unit == "ns" { NS_PER_S } else { 1.0 };
            let pairs = [
                (2 * m, cost.value as f64 / scale),
                (2 * m + 1, cost.samples as f64),
            ];
            for (metric, value) in pairs.into_iter().filter(|&(_, v)| v != 0.0) {
                out.push(PointValue {
                    ctx,
                    thread: thread.index(),
                    metric,
                    value,
                });
            }
        }
    }
}

/// Builds the context list, interning functions and the call-site lines of inlined calls.
#[derive(Default)]
struct TreeBuilder {
    functions: FxHashMap<Function, usize>,
    /// (parent context, file, line) -> the line context at that call site.
    call_sites: FxHashMap<(usize, usize, u32), usize>,
}

impl TreeBuilder {
    /// Append a context; returns its index.
    fn push(
        &mut self,
        ex: &mut Experiment,
        parent: Option<usize>,
        relation: Relation,
        lexical: Lexical,
    ) -> usize {
        ex.contexts.push(Context {
            parent,
            relation,
            lexical,
            function: None,
            src: None,
            point: None,
        });
        ex.contexts.len() - 1
    }

    /// The context of our `node` below context `parent` (an inlined frame gets the line
    /// context of its call site in between).
    fn context(&mut self, ex: &mut Experiment, node: &Node, parent: usize) -> usize {
        let src = node.file.map(|f| (f.index(), node.line.unwrap_or(0)));
        let (relation, lexical, parent) = match node.kind {
            NodeKind::Partial => {
                return self.push(ex, None, Relation::Lexical, Lexical::Entry(0));
            }
            NodeKind::Inlined => (Relation::InlinedCall, Lexical::Function, {
                self.call_site(ex, node, parent)
            }),
            NodeKind::Loop => (Relation::Lexical, Lexical::Loop, parent),
            NodeKind::Statement => (Relation::Lexical, Lexical::Line, parent),
            _ => (Relation::Call, Lexical::Function, parent),
        };
        let c = self.push(ex, Some(parent), relation, lexical);
        if lexical == Lexical::Function {
            ex.contexts[c].function = Some(self.function(ex, node));
        } else {
            ex.contexts[c].src = src;
        }
        c
    }

    /// The line context at an inlined frame's call site below `parent` (`parent` itself
    /// when the call site is unknown).
    fn call_site(&mut self, ex: &mut Experiment, node: &Node, parent: usize) -> usize {
        let Some(file) = node.call_file else {
            return parent;
        };
        let key = (parent, file.index(), node.call_line.unwrap_or(0));
        if let Some(&c) = self.call_sites.get(&key) {
            return c;
        }
        let c = self.push(ex, Some(parent), Relation::Lexical, Lexical::Line);
        ex.contexts[c].src = Some((key.1, key.2));
        self.call_sites.insert(key, c);
        c
    }

    /// The function of a procedure, inlined, unknown or kernel frame, interned.
    fn function(&mut self, ex: &mut Experiment, node: &Node) -> usize {
        let f = Function {
            name: Some(node.name.clone()),
            module: node.module.map(|m| m.index()),
            offset: 0,
            file: node.file.map(|f| f.index()),
            line: node.line.unwrap_or(0),
        };
        *self.functions.entry(f.clone()).or_insert_with(|| {
            ex.functions.push(f);
            ex.functions.len() - 1
        })
    }
}
