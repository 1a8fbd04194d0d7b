//! Shaping a view before it is printed, as perf and pprof let one do: keep only the call paths
//! through some scopes ([`focus`]), drop some scopes ([`hide`]), order siblings by any column
//! ([`sort_by`]) and keep the costliest few children of every scope ([`keep_top`]).
//!
//! Percentages stay relative to the metrics' totals over the whole view (as `MetricInfo::total`
//! says), so a focused path reads as its share of the program. Every function relies on the
//! arena's order: a node's index is greater than its parent's (as [`ViewTree::push`] builds).

use std::cmp::Ordering;

use profiler::db::Cost;
use regex_lite::Regex;

use crate::view::tree::{ViewNode, ViewTree};

/// The column that orders siblings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SortKey {
    /// Inclusive (or, with `exclusive`, exclusive) value of metric `metric`, descending.
    Cost {
        /// Index into the view's metrics.
        metric: usize,
        /// Order by the exclusive value instead of the inclusive one.
        exclusive: bool,
    },
    /// The label, ascending.
    Name,
}

/// Keep only the call paths through scopes whose label matches `re`: each matching scope with
/// everything below it, and the scopes above it, whose costs become those of what is kept below
/// them (nothing of their own). `None` when no scope matches.
pub fn focus(view: &ViewTree, re: &Regex) -> Option<ViewTree> {
    let parent = parent_of(view);
    let hit: Vec<bool> = view.nodes.iter().map(|n| re.is_match(&n.label())).collect();
    // Inside a matching subtree (top-down), or leading to a match (bottom-up).
    let mut within = hit.clone();
    for id in 1..view.nodes.len() {
        within[id] |= within[parent[id]];
    }
    let mut leads = hit;
    for id in (1..view.nodes.len()).rev() {
        if leads[id] {
            leads[parent[id]] = true;
        }
    }
    if !leads[0] {
        return None;
    }
    let keep: Vec<bool> = within.iter().zip(&leads).map(|(w, l)| w | l).collect();
    let (mut out, old) = prune(view, &keep);
    for id in (0..out.nodes.len()).rev().filter(|&id| !within[old[id]]) {
        let kept = children_incl(&out, id);
        let n = &mut out.nodes[id];
        n.incl = kept;
        n.excl
            .iter_mut()
            .chain(&mut n.own)
            .for_each(|c| *c = Cost::default());
    }
    Some(out)
}

/// Drop the scopes whose label matches `re` with everything below them; the scopes above lose
/// their inclusive cost (and their exclusive cost is capped at what remains: a procedure's
/// exclusive cost counts its loops and inlined code). The root is never dropped.
pub fn hide(view: &ViewTree, re: &Regex) -> ViewTree {
    let parent = parent_of(view);
    let mut keep: Vec<bool> = view
        .nodes
        .iter()
        .map(|n| !re.is_match(&n.label()))
        .collect();
    keep[0] = true;
    // What each scope loses below it.
    let mut lost = vec![vec![Cost::default(); view.metrics.len()]; view.nodes.len()];
    for id in (1..view.nodes.len()).rev() {
        let gone = if keep[id] {
            std::mem::take(&mut lost[id])
        } else {
            view.nodes[id].incl.clone()
        };
        Cost::add_each(&mut lost[parent[id]], &gone);
        lost[id] = gone;
    }
    let (mut out, old) = prune(view, &keep);
    for (n, &o) in out.nodes.iter_mut().zip(&old) {
        for ((c, e), g) in n.incl.iter_mut().zip(&mut n.excl).zip(&lost[o]) {
            c.samples = c.samples.saturating_sub(g.samples);
            c.value = c.value.saturating_sub(g.value);
            e.samples = e.samples.min(c.samples);
            e.value = e.value.min(c.value);
        }
    }
    out
}

/// Order every scope's children by `key`; ties keep their display order.
pub fn sort_by(view: &mut ViewTree, key: &SortKey) {
    for id in 0..view.nodes.len() {
        let mut children = std::mem::take(&mut view.nodes[id].children);
        children.sort_by(|&a, &b| compare(key, &view.nodes[a], &view.nodes[b]));
        view.nodes[id].children = children;
    }
}

fn compare(key: &SortKey, a: &ViewNode, b: &ViewNode) -> Ordering {
    match *key {
        SortKey::Name => a.label().cmp(&b.label()),
        SortKey::Cost { metric, exclusive } => {
            let value = |n: &ViewNode| {
                let costs = if exclusive { &n.excl } else { &n.incl };
                costs.get(metric).map_or(0, |c| c.value)
            };
            value(b).cmp(&value(a))
        }
    }
}

/// Keep the first `n` children of every scope (the costliest, in display order); the scopes
/// dropped keep counting in their parents' inclusive costs.
pub fn keep_top(view: &mut ViewTree, n: usize) {
    let mut keep = vec![false; view.nodes.len()];
    keep[0] = true;
    for node in &view.nodes {
        for &c in node.children.iter().take(n) {
            keep[c] = true;
        }
    }
    *view = prune(view, &keep).0;
}

/// The scopes of `view` that are kept and whose ancestors all are, in a new tree; with, for each
/// new node, its index in `view`.
fn prune(view: &ViewTree, keep: &[bool]) -> (ViewTree, Vec<usize>) {
    let mut root = view.nodes[0].clone();
    root.children.clear();
    let mut out = ViewTree::new(view.view, view.metrics.clone(), root);
    let mut old = vec![0];
    let mut stack: Vec<(usize, usize)> = view.nodes[0]
        .children
        .iter()
        .rev()
        .map(|&c| (c, 0))
        .collect();
    while let Some((id, parent)) = stack.pop() {
        if !keep[id] {
            continue;
        }
        let mut node = view.nodes[id].clone();
        node.children.clear();
        let new = out.push(parent, node);
        old.push(id);
        stack.extend(view.nodes[id].children.iter().rev().map(|&c| (c, new)));
    }
    (out, old)
}

/// Each node's parent (the root's is 0).
fn parent_of(view: &ViewTree) -> Vec<usize> {
    let mut parent = vec![0; view.nodes.len()];
    for (id, n) in view.nodes.iter().enumerate() {
        for &c in &n.children {
            parent[c] = id;
        }
    }
    parent
}

/// The sum of the inclusive costs of node `id`'s children.
fn children_incl(view: &ViewTree, id: usize) -> Vec<Cost> {
    let mut sum = vec![Cost::default(); view.metrics.len()];
    for &c in &view.nodes[id].children {
        Cost::add_each(&mut sum, &view.nodes[c].incl);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::node::NodeKind;
    use crate::view::tree::tests::cost;
    use crate::view::tree::{MetricInfo, ViewKind};

    /// root 10 > a 6 (excl 1) > {a1 4, a2 1}; root > b 4 (excl 3) > x 1.
    fn tree() -> ViewTree {
        let node = |name: &str, incl: u64, excl: u64| {
            let mut n = ViewNode::new(NodeKind::Procedure, name, 1);
            n.incl[0] = cost(incl);
            n.excl[0] = cost(excl);
            n
        };
        let metric = MetricInfo {
            name: "m".into(),
            unit: "events".into(),
            period: None,
            total: 10,
            samples: 10,
            read_with: None,
        };
        let mut t = ViewTree::new(ViewKind::TopDown, vec![metric], node("root", 10, 0));
        let a = t.push(0, node("a", 6, 1));
        t.push(a, node("a1", 4, 4));
        t.push(a, node("a2", 1, 1));
        let b = t.push(0, node("b", 4, 3));
        t.push(b, node("x", 1, 1));
        t
    }

    /// `name incl` of every node, depth first.
    fn shape(t: &ViewTree) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![0];
        while let Some(id) = stack.pop() {
            let n = &t.nodes[id];
            out.push(format!(
                "{} {}/{}",
                n.name, n.incl[0].value, n.excl[0].value
            ));
            stack.extend(n.children.iter().rev());
        }
        out
    }

    #[test]
    fn focus_keeps_the_paths_through_matches_and_only_their_cost() {
        let t = focus(&tree(), &Regex::new("^a1$").unwrap()).unwrap();
        assert_eq!(shape(&t), ["root 4/0", "a 4/0", "a1 4/4"]);
        let t = focus(&tree(), &Regex::new("^(a|x)$").unwrap()).unwrap();
        assert_eq!(
            shape(&t),
            ["root 7/0", "a 6/1", "a1 4/4", "a2 1/1", "b 1/0", "x 1/1"]
        );
        assert!(focus(&tree(), &Regex::new("nothing").unwrap()).is_none());
    }

    #[test]
    fn hide_drops_matches_and_their_cost_above() {
        let t = hide(&tree(), &Regex::new("^a1$").unwrap());
        assert_eq!(shape(&t), ["root 6/0", "a 2/1", "a2 1/1", "b 4/3", "x 1/1"]);
        let t = hide(&tree(), &Regex::new("^(a|x)$").unwrap());
        assert_eq!(shape(&t), ["root 3/0", "b 3/3"]);
    }

    #[test]
    fn top_keeps_the_first_children_and_sort_orders_them() {
        let mut t = tree();
        sort_by(
            &mut t,
            &SortKey::Cost {
                metric: 0,
                exclusive: true,
            },
        );
        assert_eq!(
            shape(&t),
            ["root 10/0", "b 4/3", "x 1/1", "a 6/1", "a1 4/4", "a2 1/1"]
        );
        keep_top(&mut t, 1);
        assert_eq!(shape(&t), ["root 10/0", "b 4/3", "x 1/1"]);
        let mut t = tree();
        sort_by(&mut t, &SortKey::Name);
        t.nodes[0].children.reverse();
        sort_by(&mut t, &SortKey::Name);
        assert_eq!(shape(&t)[1], "a 6/1");
    }
}
