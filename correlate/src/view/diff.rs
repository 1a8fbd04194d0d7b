//! The differential view: two databases of the same program (say, before and after a change)
//! matched scope by scope, with what each scope cost in both and how much it grew.
//!
//! Scopes are matched by what they are in the source, never by address, so two builds of the
//! program compare: by kind and label (a procedure's name, `[I] name`, `loop at file: line`,
//! `file: line`, a module's or file's base name) plus the source file's base name, within the
//! matched parent (the calling context in the top-down view, module > file > procedure in the
//! flat view). Edits that move lines make the moved loops and lines new scopes.
//!
//! Costs are of one metric, normalised as asked ([`Normalise`]): raw event values, per second
//! of measured wall-clock time, or as a percentage of the run's total. Each scope's change is
//! that of its **exclusive** cost, so a slower callee does not make every caller look slower.
//! [`Diff::rows`] are ranked by it, the largest growth first, a procedure's (or inlined
//! function's, module's, file's) loops and lines right after it, themselves ranked: so the
//! procedure that grew comes first, then where in it. Modules and files (flat view), whose
//! exclusive cost is everything in them, come after all other scopes.

use std::collections::HashMap;

use crate::db::database::{Database, Selection};
use crate::db::label;
use crate::db::node::NodeKind;
use crate::view::tree::{ViewKind, ViewNode, ViewTree};

/// How many enclosing scopes a [`DiffRow`] names.
pub const CONTEXT_KEPT: usize = 16;

/// How costs are normalised before they are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalise {
    /// Values in event units (ns for clocks), as measured.
    Absolute,
    /// Values per second of measured wall-clock time (for a clock: the CPUs kept busy).
    PerSecond,
    /// Values as a percentage of the run's total of the metric.
    PerTotal,
}

/// Why two databases cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The metric is not in one of the databases.
    #[error("the {side} database has no metric '{metric}' (metrics: {known})")]
    NoMetric {
        /// `base` or `new`.
        side: &'static str,
        /// The metric asked for.
        metric: String,
        /// The metrics it has.
        known: String,
    },
    /// `--per-second` on a database that recorded no wall-clock time (an older format).
    #[error("the {side} database records no wall-clock time; compare --per-total instead")]
    NoElapsed {
        /// `base` or `new`.
        side: &'static str,
    },
}

/// A scope's normalised costs in one of the databases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SideCost {
    /// Inclusive cost.
    pub incl: f64,
    /// Exclusive cost.
    pub excl: f64,
    /// Exclusive cost as a share of that database's total, percent (not normalised).
    pub share_pct: f64,
}

/// One matched scope.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffRow {
    /// What the scope is.
    pub kind: NodeKind,
    /// Its label ([`ViewNode::label`]).
    pub label: String,
    /// How many scopes are around it (program root left out).
    pub depth: usize,
    /// The labels of the scopes around it, outermost first: the innermost [`CONTEXT_KEPT`]
    /// of them, so that rows of deep recursion stay small.
    pub context: Vec<String>,
    /// Its costs in the base database; `None` when it is not there.
    pub base: Option<SideCost>,
    /// Its costs in the new database; `None` when it is not there.
    pub new: Option<SideCost>,
}

impl DiffRow {
    /// Growth of the exclusive cost, new minus base (normalised units).
    pub fn delta(&self) -> f64 {
        excl(self.new) - excl(self.base)
    }

    /// Growth of the exclusive cost in percent of the base; `None` for a scope that cost
    /// nothing in the base and something in the new database.
    pub fn change_pct(&self) -> Option<f64> {
        let (base, new) = (excl(self.base), excl(self.new));
        match (base > 0.0, new > 0.0) {
            (true, _) => Some((new - base) / base * 100.0),
            (false, true) => None,
            (false, false) => Some(0.0),
        }
    }

    /// The larger of the scope's two shares of the total (exclusive, percent).
    pub fn share_pct(&self) -> f64 {
        let share = |s: Option<SideCost>| s.map_or(0.0, |s| s.share_pct);
        share(self.base).max(share(self.new))
    }

    /// Whether the scope holds at least `threshold_pct` of either run and grew by more than
    /// `limit_pct` (a scope new in the second run grew without limit).
    pub fn regressed(&self, threshold_pct: f64, limit_pct: f64) -> bool {
        self.share_pct() >= threshold_pct && self.change_pct().is_none_or(|c| c > limit_pct)
    }
}

fn excl(side: Option<SideCost>) -> f64 {
    side.map_or(0.0, |s| s.excl)
}

/// What to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffOptions {
    /// Top-down (calling contexts) or flat (static structure).
    pub view: ViewKind,
    /// The metric's name; `None` for the base database's first metric.
    pub metric: Option<String>,
    /// How to normalise.
    pub normalise: Normalise,
}

/// Two databases compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Which view was matched.
    pub view: ViewKind,
    /// The metric compared.
    pub metric: String,
    /// Its unit in the databases (`ns`, `events`).
    pub unit: String,
    /// How costs were normalised.
    pub normalise: Normalise,
    /// The base run's total, normalised.
    pub base_total: f64,
    /// The new run's total, normalised.
    pub new_total: f64,
    /// Every scope of either database, ranked: the scopes that are not loops or lines by the
    /// growth of their exclusive cost, largest first, each followed by its loops and lines in
    /// the same order (ties: outer scopes first, then by label); modules and files last.
    pub rows: Vec<DiffRow>,
}

/// The view of one side, restricted to the compared metric, and its normaliser.
struct Side {
    view: ViewTree,
    scale: f64,
    total: u64,
}

impl Side {
    fn of(
        db: &Database,
        options: &DiffOptions,
        name: &str,
        side: &'static str,
    ) -> Result<Side, DiffError> {
        let metric = db
            .metrics
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = db.metrics.iter().map(|m| m.name.as_str()).collect();
                DiffError::NoMetric {
                    side,
                    metric: name.to_string(),
                    known: known.join(", "),
                }
            })?;
        let mut view = ViewTree::from_database(db, options.view, &Selection::All);
        view.select_metrics(&[metric]);
        let total = view.metrics[0].total;
        let scale = match options.normalise {
            Normalise::Absolute => 1.0,
            Normalise::PerTotal if total == 0 => 0.0,
            Normalise::PerTotal => 100.0 / total as f64,
            Normalise::PerSecond if db.data.elapsed_ns == 0 => {
                return Err(DiffError::NoElapsed { side })
            }
            Normalise::PerSecond => 1e9 / db.data.elapsed_ns as f64,
        };
        Ok(Side { view, scale, total })
    }

    fn cost(&self, node: &ViewNode) -> SideCost {
        let (incl, excl) = (node.incl[0].value as f64, node.excl[0].value as f64);
        SideCost {
            incl: incl * self.scale,
            excl: excl * self.scale,
            share_pct: if self.total == 0 {
                0.0
            } else {
                excl * 100.0 / self.total as f64
            },
        }
    }
}

/// What a scope is matched by within its parent: kind, label and source file base name.
type MatchKey = (NodeKind, String, Option<String>);

fn match_key(node: &ViewNode) -> MatchKey {
    let file = node
        .file
        .as_deref()
        .map(|f| label::base_name(f).to_string());
    (node.kind, node.label(), file)
}

/// The matched scopes (row 0 the root), each found by its parent row and its key.
struct Matched {
    rows: Vec<DiffRow>,
    /// Per row, the row it is ranked with: itself, or for a loop or line the scope around it
    /// that is neither.
    groups: Vec<usize>,
    index: HashMap<(usize, MatchKey), usize>,
}

impl Matched {
    /// Add every node of `side`'s view under the matching rows, `is_new` choosing the column.
    fn add(&mut self, side: &Side, is_new: bool) {
        let mut todo = vec![(0usize, 0usize)];
        while let Some((id, parent)) = todo.pop() {
            let node = &side.view.nodes[id];
            let row = if id == 0 { 0 } else { self.row(parent, node) };
            let cost = side.cost(node);
            let slot = if is_new {
                &mut self.rows[row].new
            } else {
                &mut self.rows[row].base
            };
            let sum = slot.get_or_insert_with(SideCost::default);
            sum.incl += cost.incl;
            sum.excl += cost.excl;
            sum.share_pct += cost.share_pct;
            todo.extend(node.children.iter().map(|&c| (c, row)));
        }
    }

    /// The row matching `node` below row `parent`, added if new.
    fn row(&mut self, parent: usize, node: &ViewNode) -> usize {
        let next = self.rows.len();
        let id = *self.index.entry((parent, match_key(node))).or_insert(next);
        if id == next {
            let around = &self.rows[parent];
            let mut context = around.context.clone();
            let mut depth = 0;
            if parent != 0 {
                if context.len() == CONTEXT_KEPT {
                    context.remove(0);
                }
                context.push(around.label.clone());
                depth = around.depth + 1;
            }
            self.rows.push(DiffRow {
                kind: node.kind,
                label: node.label(),
                depth,
                context,
                base: None,
                new: None,
            });
            let within = matches!(node.kind, NodeKind::Loop | NodeKind::Statement);
            self.groups
                .push(if within { self.groups[parent] } else { id });
        }
        id
    }

    /// The rows but the root, ranked (see [`Diff::rows`]).
    fn ranked(self) -> Vec<DiffRow> {
        let rows = &self.rows;
        let mut order: Vec<usize> = (1..rows.len()).collect();
        let by_growth = |a: usize, b: usize| rows[b].delta().total_cmp(&rows[a].delta());
        let tie = |a: usize, b: usize| {
            let (ra, rb) = (&rows[a], &rows[b]);
            ra.depth
                .cmp(&rb.depth)
                .then_with(|| ra.label.cmp(&rb.label))
                .then_with(|| ra.context.cmp(&rb.context))
        };
        order.sort_by(|&a, &b| {
            let (ga, gb) = (self.groups[a], self.groups[b]);
            let container = |g: usize| matches!(rows[g].kind, NodeKind::Module | NodeKind::File);
            container(ga)
                .cmp(&container(gb))
                .then_with(|| by_growth(ga, gb))
                .then_with(|| tie(ga, gb))
                .then_with(|| (a != ga).cmp(&(b != gb)))
                .then_with(|| by_growth(a, b))
                .then_with(|| tie(a, b))
        });
        let mut rows: Vec<Option<DiffRow>> = self.rows.into_iter().map(Some).collect();
        order.into_iter().filter_map(|i| rows[i].take()).collect()
    }
}

/// Compare `base` with `new` (see the module documentation).
pub fn diff(base: &Database, new: &Database, options: &DiffOptions) -> Result<Diff, DiffError> {
    let metric = match &options.metric {
        Some(m) => m.clone(),
        None => base
            .metrics
            .first()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
    };
    let (base_side, new_side) = (
        Side::of(base, options, &metric, "base")?,
        Side::of(new, options, &metric, "new")?,
    );
    let root = &base_side.view.nodes[0];
    let mut matched = Matched {
        rows: vec![DiffRow {
            kind: root.kind,
            label: root.label(),
            depth: 0,
            context: Vec::new(),
            base: None,
            new: None,
        }],
        groups: vec![0],
        index: HashMap::new(),
    };
    matched.add(&base_side, false);
    matched.add(&new_side, true);
    let rows = matched.ranked();
    Ok(Diff {
        view: options.view,
        unit: base_side.view.metrics[0].unit.clone(),
        metric,
        normalise: options.normalise,
        base_total: base_side.total as f64 * base_side.scale,
        new_total: new_side.total as f64 * new_side.scale,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::database::{MetricDesc, ThreadDesc};
    use crate::db::ids::{DbNodeId, ThreadIdx};
    use crate::db::node::{ChildIndex, NodeKey};
    use fxhash::FxHashMap;
    use profiler::db::{Cost, Sampling};

    /// `main` calling `grow` and `steady` from lines 5 and 6 of `/src/{dir}/m.c`, each
    /// spending its time in a loop, `grow` `grow` ms and `steady` 10 ms, over `elapsed` ms.
    fn db(dir: &str, grow: u64, elapsed: u64) -> Database {
        let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000));
        let mut db = Database::new(vec![metric]);
        db.threads.push(ThreadDesc {
            profile: 0,
            pid: 1,
            tid: 1,
            comm: "m".into(),
        });
        db.data.elapsed_ns = elapsed * 1_000_000;
        let mut files = FxHashMap::default();
        let file = Some(db.intern_file(&mut files, &format!("/src/{dir}/m.c")));
        let mut index = ChildIndex::default();
        let key = |kind, name: &str, line| NodeKey {
            line: Some(line),
            file,
            ..NodeKey::pseudo(kind, name)
        };
        let main = db.child(
            &mut index,
            DbNodeId::ROOT,
            key(NodeKind::Procedure, "main", 3),
        );
        for (line, name, ms) in [(5, "grow", grow), (6, "steady", 10)] {
            let site = db.child(&mut index, main, key(NodeKind::Statement, "", line));
            let callee = db.child(&mut index, site, key(NodeKind::Procedure, name, 10 + line));
            let lp = db.child(&mut index, callee, key(NodeKind::Loop, "", 12 + line));
            let body = db.child(&mut index, lp, key(NodeKind::Statement, "", 12 + line));
            let cost = Cost {
                samples: ms,
                value: ms * 1_000_000,
            };
            db.add_cost(body, ThreadIdx(0), &[cost]);
        }
        db.compute_totals();
        db
    }

    fn options(view: ViewKind, normalise: Normalise) -> DiffOptions {
        DiffOptions {
            view,
            metric: None,
            normalise,
        }
    }

    #[test]
    fn the_grown_procedure_ranks_first_and_rebuilt_paths_still_match() {
        let (base, new) = (db("a", 10, 40), db("b", 20, 50));
        let d = diff(
            &base,
            &new,
            &options(ViewKind::TopDown, Normalise::Absolute),
        )
        .unwrap();
        let first = &d.rows[0];
        assert_eq!(
            (first.label.as_str(), first.kind),
            ("grow", NodeKind::Procedure)
        );
        assert_eq!(first.context, ["main", "m.c: 5"]);
        assert_eq!(first.change_pct(), Some(100.0));
        assert_eq!(first.delta(), 10e6);
        let next: Vec<(&str, NodeKind)> = d.rows[1..4]
            .iter()
            .map(|r| (r.label.as_str(), r.kind))
            .collect();
        assert_eq!(
            next,
            [
                ("loop at m.c: 17", NodeKind::Loop),
                ("m.c: 17", NodeKind::Statement),
                ("main", NodeKind::Procedure)
            ],
            "grow's loop and line right after it, equal growth: outer first"
        );
        assert_eq!((d.base_total, d.new_total), (20e6, 30e6));
        let steady = d.rows.iter().find(|r| r.label == "steady").unwrap();
        assert_eq!(steady.change_pct(), Some(0.0));
        assert!(
            d.rows.iter().all(|r| r.base.is_some() && r.new.is_some()),
            "all matched"
        );
        assert!(first.regressed(1.0, 50.0) && !steady.regressed(1.0, 50.0));
        // main's own code cost nothing in either run.
        let main = d.rows.iter().find(|r| r.label == "main").unwrap();
        assert_eq!(
            (main.change_pct(), main.new.unwrap().incl),
            (Some(0.0), 30e6)
        );
    }

    #[test]
    fn rows_of_deep_recursion_name_only_the_innermost_context() {
        let mut db = db("a", 10, 40);
        let mut index = ChildIndex::default();
        let mut at = DbNodeId::ROOT;
        for level in 0..40 {
            let key = NodeKey::pseudo(NodeKind::Procedure, format!("r{level}"));
            at = db.child(&mut index, at, key);
        }
        let cost = Cost {
            samples: 1,
            value: 1,
        };
        db.add_cost(at, ThreadIdx(0), &[cost]);
        db.compute_totals();
        let d = diff(&db, &db, &options(ViewKind::TopDown, Normalise::Absolute)).unwrap();
        let deepest = d.rows.iter().find(|r| r.label == "r39").unwrap();
        assert_eq!((deepest.depth, deepest.context.len()), (39, CONTEXT_KEPT));
        assert_eq!(
            (deepest.context[0].as_str(), deepest.context[15].as_str()),
            ("r23", "r38")
        );
    }

    #[test]
    fn normalised_per_total_and_per_second_and_flat() {
        let (base, new) = (db("a", 10, 40), db("a", 30, 40));
        let d = diff(&base, &new, &options(ViewKind::Flat, Normalise::PerTotal)).unwrap();
        let grow = d.rows.iter().find(|r| r.label == "grow").unwrap();
        assert_eq!(grow.context.last().map(String::as_str), Some("m.c"));
        assert_eq!(
            d.rows[0].label, "grow",
            "containers do not rank before what they hold"
        );
        let kinds: Vec<NodeKind> = d.rows[d.rows.len() - 2..].iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [NodeKind::Module, NodeKind::File]);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(grow.base.unwrap().excl, 50.0) && near(grow.new.unwrap().excl, 75.0));
        let d = diff(
            &base,
            &new,
            &options(ViewKind::TopDown, Normalise::PerSecond),
        )
        .unwrap();
        assert_eq!(d.base_total, 20e6 * 25.0);
        let mut old = db("a", 10, 40);
        old.data.elapsed_ns = 0;
        let err = diff(
            &old,
            &new,
            &options(ViewKind::TopDown, Normalise::PerSecond),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("base database records no wall-clock time"),
            "{err}"
        );
        let mut other = DiffOptions {
            metric: Some("cycles".into()),
            ..options(ViewKind::Flat, Normalise::Absolute)
        };
        let err = diff(&base, &new, &other).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the base database has no metric 'cycles' (metrics: cpu-clock)"
        );
        other.metric = Some("cpu-clock".into());
        assert!(diff(&base, &new, &other).is_ok());
    }
}
