//! The two-callers program (designed 2:1): `leaf`'s cost splits between `caller_a` and
//! `caller_b` as the program's own clocks say, in the top-down tree and in the callers view.

use crate::correlate_prof_common::{all, bare, below, correlate, measure, samples};
use crate::support::{compile, scratch_dir, work_clocks};
use correlate::{callers, top_down, NodeKind, Selection};

/// caller_a's share of the two values, which must be `want` within 5 points.
fn assert_share(a: u64, b: u64, want: f64, what: &str) {
    let share = a as f64 / (a + b) as f64;
    assert!(
        (share - want).abs() <= 0.05,
        "{what}: caller_a {a}, caller_b {b}: share {share:.3}, want {want:.3} +- 0.05"
    );
}

#[test]
fn leaf_cost_splits_between_the_callers_as_their_clocks_say() {
    let dir = scratch_dir("correlate_prof_callers");
    let bin = compile(
        "prof_callers.c",
        &dir,
        "callers",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let profile = measure(&bin, &["45000000"], &dir, "callers");
    let db = correlate(&dir, &[&profile], "callers");
    let clocks = work_clocks(&std::fs::read_to_string(dir.join("callers.stdout")).unwrap());
    let want = clocks["caller_a"] / (clocks["caller_a"] + clocks["caller_b"]);

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
    assert_share(a, b, want, "top-down");

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
    assert_share(
        by_caller("caller_a"),
        by_caller("caller_b"),
        want,
        "callers view",
    );
    assert_eq!(by_caller("caller_a") + by_caller("caller_b"), leaf_total);
}
