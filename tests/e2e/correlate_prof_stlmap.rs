//! The STL map program (thesis Figure 5.1) at -O3 -g: loops, inlined frames and call sites
//! come out where the source says they are.

use crate::correlate_prof_common::{all, bare, below, correlate, dump, measure_with, samples};
use crate::support::{compile, fixture, scratch_dir};
use correlate::{top_down, NodeKind, Selection};

/// Line numbers (1-based) of the source lines starting with `for (` in the fixture.
fn for_lines() -> Vec<u32> {
    let src = std::fs::read_to_string(fixture("stlmap.cc")).unwrap();
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("for ("))
        .map(|(i, _)| i as u32 + 1)
        .collect()
}

#[test]
fn second_loop_holds_the_inlined_add_and_the_tree_search_loop() {
    let dir = scratch_dir("correlate_prof_stlmap");
    let bin = compile("stlmap.cc", &dir, "stlmap", &["-O3", "-g"]);
    // 10 kHz: the first loop's drand48 calls are rare (well under 1% of the time), and the test
    // needs some of them sampled.
    let profile = measure_with("cpu-clock@f10000", &bin, &["2000000"], &dir, "stlmap");
    let db = correlate(&dir, &[&profile], "stlmap");
    let t = top_down(&db, &Selection::All);
    let lines = for_lines();
    assert_eq!(lines.len(), 2, "the fixture has two for loops");

    let mains = all(&t, |n| {
        n.kind == NodeKind::Procedure && bare(&n.name) == "main"
    });
    assert_eq!(mains.len(), 1, "one main context:\n{}", dump(&t, 0, 3));
    let main = mains[0];
    let picture = dump(&t, main, 12);
    let main_cost = samples(&t.nodes[main]);
    assert!(main_cost > 500, "enough samples in main ({main_cost})");

    let loop_at = |line: u32| {
        below(&t, main, |n| {
            n.kind == NodeKind::Loop
                && n.line == Some(line)
                && n.file.as_deref().is_some_and(|f| f.ends_with("stlmap.cc"))
        })
    };
    let second = loop_at(lines[1])
        .unwrap_or_else(|| panic!("the second for loop is a loop under main:\n{picture}"));
    // The loop's body is the one line after its `for` (the map insertion).
    assert_eq!(
        t.nodes[second].end_line,
        Some(lines[1] + 1),
        "end line of the second loop:\n{picture}"
    );
    let second_cost = samples(&t.nodes[second]);
    let first_cost = loop_at(lines[0]).map_or(0, |l| samples(&t.nodes[l]));
    assert!(
        second_cost * 2 > main_cost && second_cost > 3 * first_cost,
        "second loop {second_cost} carries the bulk of main {main_cost} (first loop {first_cost}):\n{picture}"
    );

    let add = below(&t, second, |n| {
        n.kind == NodeKind::Inlined && bare(&n.name).ends_with("Mp::add")
    })
    .unwrap_or_else(|| panic!("[I] Mp::add inside the second loop:\n{picture}"));
    assert!(t.nodes[add].label().starts_with("[I] "));
    let search = below(&t, add, |n| n.kind == NodeKind::Loop)
        .unwrap_or_else(|| panic!("a loop below Mp::add:\n{picture}"));
    let parent = |id: usize| {
        t.nodes
            .iter()
            .position(|n| n.children.contains(&id))
            .unwrap()
    };
    let mut up = parent(search);
    while t.nodes[up].kind != NodeKind::Inlined {
        up = parent(up);
    }
    assert!(
        t.nodes[up]
            .file
            .as_deref()
            .is_some_and(|f| f.contains("stl_tree") || f.contains("stl_map")),
        "the search loop sits in an inlined frame from the STL ({:?} in {:?})",
        t.nodes[up].name,
        t.nodes[up].file
    );

    let drand_sites: std::collections::BTreeSet<u32> = all(&t, |n| {
        n.kind == NodeKind::Procedure && bare(&n.name) == "drand48"
    })
    .into_iter()
    .filter_map(|d| t.nodes[parent(d)].line)
    .collect();
    assert!(
        drand_sites.len() >= 2,
        "drand48 reached from two distinct call lines, got {drand_sites:?}:\n{picture}"
    );
}
