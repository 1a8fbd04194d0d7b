//! The 2:1 two-callers program: `leaf`'s cost splits 2:1 between `caller_a` and `caller_b`,
//! in the top-down tree and in the callers view.

use crate::correlate_prof_common::{all, bare, below, correlate, measure, samples};
use crate::support::{compile, scratch_dir};
use correlate::{callers, top_down, NodeKind, Selection};

/// caller_a's share of the two values, which must be 2/3 within 5 points.
fn assert_two_to_one(a: u64, b: u64, what: &str) {
    let share = a as f64 / (a + b) as f64;
    assert!(
        (share - 2.0 / 3.0).abs() <= 0.05,
        "{what}: caller_a {a}, caller_b {b}: share {share:.3}, want 0.667 +- 0.05"
    );
}

#[test]
fn leaf_cost_splits_two_to_one() {
    let dir = scratch_dir("correlate_prof_callers");
    let bin = compile(
        "prof_callers.c",
        &dir,
        "callers",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let profile = measure(&bin, &["45000000"], &dir, "callers");
    let db = correlate(&dir, &[&profile], "callers");

    let t = top_down(&db, &Selection::All);
    let leaf_under = |caller: &str| {
        let c = all(&t, |n| {
            n.kind == NodeKind::Procedure && bare(&n.name) == caller
        });
        assert_eq!(c.len(), 1, "one {caller} context");
        let leaf = below(&t, c[0], |n| bare(&n.name) == "leaf").expect("leaf below caller");
        // The call site between them is a line of the caller's source.
        let site = &t.nodes[c[0]].children[0];
        assert_eq!(t.nodes[*site].kind, NodeKind::Statement);
        samples(&t.nodes[leaf])
    };
    let (a, b) = (leaf_under("caller_a"), leaf_under("caller_b"));
    assert!(a + b > 500, "enough samples ({})", a + b);
    assert_two_to_one(a, b, "top-down");

    let leaf_total = all(&t, |n| bare(&n.name) == "leaf")
        .iter()
        .map(|&i| samples(&t.nodes[i]))
        .sum::<u64>();
    let c = callers(&db, &Selection::All);
    let leaf = c
        .children(0)
        .find(|(_, n)| bare(&n.name) == "leaf")
        .expect("leaf in the callers view")
        .0;
    assert_eq!(samples(&c.nodes[leaf]), leaf_total);
    let by_caller = |name: &str| {
        c.children(leaf)
            .filter(|(_, n)| bare(&n.name) == name)
            .map(|(_, n)| samples(n))
            .sum::<u64>()
    };
    assert_two_to_one(by_caller("caller_a"), by_caller("caller_b"), "callers view");
    assert_eq!(by_caller("caller_a") + by_caller("caller_b"), leaf_total);
}
