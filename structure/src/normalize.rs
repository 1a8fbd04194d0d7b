//! Normalization of a procedure's local tree (thesis §3.6), in the thesis's order:
//!
//! 1. *coalesce-duplicate-statements*: a line that appears in two sibling loop nests of the same
//!    procedure context (procedure or inlined call) fuses the nests (loop copies made by
//!    peeling, versioning or unswitching); a line that appears at several levels of one loop
//!    nest keeps only its innermost instance, which takes the other instances' addresses;
//! 2. *merge-perfectly-nested-loops*: a loop whose only content is one loop with the same
//!    begin line and file absorbs it;
//! 3. empty loops and inlined calls are removed.
//!
//! Address ranges move with the statements, so every address stays in exactly one statement.

use crate::procedure::{LocalTree, Step};
use std::collections::{BTreeMap, BTreeSet};

/// Normalize `tree` in place (dead nodes are marked, not removed).
pub fn normalize(tree: &mut LocalTree) {
    fuse_sibling_nests(tree, 0);
    elide_outer_duplicates(tree);
    merge_perfect_nests(tree);
    mark_empty(tree, 0);
}

fn is_loop(tree: &LocalTree, n: usize) -> bool {
    matches!(tree.nodes[n].step, Some(Step::Loop(_)))
}

fn live_children(tree: &LocalTree, n: usize) -> Vec<usize> {
    tree.nodes[n]
        .children
        .iter()
        .copied()
        .filter(|&c| !tree.nodes[c].dead)
        .collect()
}

/// Lines of statements in loop `n` and its nested loops, not crossing into inlined calls.
fn nest_lines(tree: &LocalTree, n: usize, out: &mut BTreeSet<(u32, u32)>) {
    out.extend(tree.nodes[n].stmts.keys().copied());
    for c in live_children(tree, n) {
        if is_loop(tree, c) {
            nest_lines(tree, c, out);
        }
    }
}

/// Move everything of node `from` into node `into` and mark `from` dead.
fn absorb(tree: &mut LocalTree, into: usize, from: usize) {
    let stmts = std::mem::take(&mut tree.nodes[from].stmts);
    for (key, mut ranges) in stmts {
        tree.nodes[into]
            .stmts
            .entry(key)
            .or_default()
            .append(&mut ranges);
    }
    let children = std::mem::take(&mut tree.nodes[from].children);
    for &c in &children {
        tree.nodes[c].parent = Some(into);
    }
    tree.nodes[into].children.extend(children);
    tree.nodes[from].dead = true;
}

/// Fuse sibling loops under `n` that share a line, then recurse.
fn fuse_sibling_nests(tree: &mut LocalTree, n: usize) {
    loop {
        let loops: Vec<usize> = live_children(tree, n)
            .into_iter()
            .filter(|&c| is_loop(tree, c))
            .collect();
        let lines: Vec<BTreeSet<(u32, u32)>> = loops
            .iter()
            .map(|&l| {
                let mut s = BTreeSet::new();
                nest_lines(tree, l, &mut s);
                s.retain(|&(_, line)| line != 0);
                s
            })
            .collect();
        let pair = (0..loops.len())
            .flat_map(|i| (i + 1..loops.len()).map(move |j| (i, j)))
            .find(|&(i, j)| !lines[i].is_disjoint(&lines[j]));
        match pair {
            Some((i, j)) => absorb(tree, loops[i], loops[j]),
            None => break,
        }
    }
    for c in live_children(tree, n) {
        fuse_sibling_nests(tree, c);
    }
}

/// Within each loop nest, keep each line only in its most deeply nested loop.
fn elide_outer_duplicates(tree: &mut LocalTree) {
    let outermost: Vec<usize> = (0..tree.nodes.len())
        .filter(|&n| !tree.nodes[n].dead && is_loop(tree, n))
        .filter(|&n| tree.nodes[n].parent.is_none_or(|p| !is_loop(tree, p)))
        .collect();
    for root in outermost {
        // line -> (depth, node) of its deepest instance, and all instances.
        let mut deepest: BTreeMap<(u32, u32), (usize, usize)> = BTreeMap::new();
        let mut instances: Vec<((u32, u32), usize)> = Vec::new();
        let mut stack = vec![(root, 0usize)];
        while let Some((n, depth)) = stack.pop() {
            for &key in tree.nodes[n].stmts.keys() {
                instances.push((key, n));
                let best = deepest.entry(key).or_insert((depth, n));
                if depth > best.0 {
                    *best = (depth, n);
                }
            }
            for c in live_children(tree, n) {
                if is_loop(tree, c) {
                    stack.push((c, depth + 1));
                }
            }
        }
        for (key, n) in instances {
            let target = deepest[&key].1;
            if target != n {
                if let Some(mut ranges) = tree.nodes[n].stmts.remove(&key) {
                    tree.nodes[target]
                        .stmts
                        .entry(key)
                        .or_default()
                        .append(&mut ranges);
                }
            }
        }
    }
}

/// Merge loops whose only content is one loop with the same begin line.
fn merge_perfect_nests(tree: &mut LocalTree) {
    for n in 0..tree.nodes.len() {
        if tree.nodes[n].dead || !is_loop(tree, n) {
            continue;
        }
        while let [only] = live_children(tree, n)[..] {
            let same = tree.nodes[n].stmts.is_empty()
                && is_loop(tree, only)
                && tree.loop_line(n) == tree.loop_line(only);
            if !same {
                break;
            }
            absorb(tree, n, only);
        }
    }
}

/// Mark loops and inlined calls without statements below them dead; returns whether `n` holds
/// any statement.
fn mark_empty(tree: &mut LocalTree, n: usize) -> bool {
    let mut any = !tree.nodes[n].stmts.is_empty();
    for c in live_children(tree, n) {
        any |= mark_empty(tree, c);
    }
    if !any && n != 0 {
        tree.nodes[n].dead = true;
    }
    any
}
