//! hpcstruct-rs on fixture programs compiled at test time: loop begin lines and nesting, inline
//! chains and call sites against the source's markers, and every inline chain against
//! `addr2line -i -f`.

use crate::structure_support::loops_below;
use crate::support::{compile, fixture, marker, scratch_dir};
use std::path::Path;
use structure::loops::LOOP_BEGIN_TOLERANCE;
use structure::{analyze_file, verify, Options, ScopeId, ScopeKind, ScopeTree};

fn analyze(binary: &Path) -> ScopeTree {
    analyze_file(binary, &Options::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .tree
}

fn procedure(tree: &ScopeTree, name: &str) -> ScopeId {
    tree.procedures()
        .find(|&p| &*tree.get(p).name == name)
        .unwrap_or_else(|| panic!("no procedure {name}"))
}

fn near(line: u32, expected: u32, exact: bool) -> bool {
    if exact {
        line == expected
    } else {
        line.abs_diff(expected) <= LOOP_BEGIN_TOLERANCE
    }
}

/// Assert `proc_` has a loop at nesting depth `depth` beginning near marker `name`.
fn assert_loop(tree: &ScopeTree, proc_: &str, name: &str, depth: usize, exact: bool, what: &str) {
    let want = marker("struct_shapes.c", name);
    let loops = loops_below(tree, procedure(tree, proc_));
    assert!(
        loops.iter().any(|&(_, l, d)| d == depth && near(l, want, exact)),
        "{what}: {proc_}: no depth-{depth} loop at line {want} (@{name}); loops (id, line, depth): {loops:?}"
    );
}

fn max_depth(tree: &ScopeTree, proc_: &str) -> usize {
    loops_below(tree, procedure(tree, proc_))
        .iter()
        .map(|l| l.2)
        .max()
        .unwrap_or(0)
}

/// The alien scopes below `scope` calling `callee`.
fn aliens_named(tree: &ScopeTree, scope: ScopeId, callee: &str) -> Vec<ScopeId> {
    tree.descendants(scope)
        .into_iter()
        .filter(|&d| tree.get(d).is_alien() && &*tree.get(d).name == callee)
        .collect()
}

fn call_line(tree: &ScopeTree, alien: ScopeId) -> u32 {
    match tree.get(alien).kind {
        ScopeKind::Alien { call_line, .. } => call_line,
        _ => unreachable!(),
    }
}

/// Every address in at most one statement; inline chains agree with addr2line on every
/// line-table address.
fn assert_consistent(tree: &ScopeTree, binary: &Path, min_agreement: f64) {
    let stmt_bytes: u64 = tree
        .ids()
        .filter(|&i| tree.get(i).kind == ScopeKind::Statement)
        .flat_map(|i| tree.get(i).ranges.iter().map(|r| r.end - r.start))
        .sum();
    let index_bytes: u64 = tree.address_index().iter().map(|&(s, e, _)| e - s).sum();
    assert_eq!(stmt_bytes, index_bytes, "statement ranges overlap");
    let addrs = structure::line_table_addresses(binary).unwrap();
    assert!(!addrs.is_empty());
    let a = verify::compare_with_addr2line(tree, binary, &addrs).unwrap();
    let agree = a.agree as f64 / a.checked as f64;
    let covered = a.covered as f64 / a.checked as f64;
    assert!(
        agree >= min_agreement && covered >= 0.99,
        "{}: {} of {} addresses covered, {} agree with addr2line; e.g. {:#?}",
        binary.display(),
        a.covered,
        a.checked,
        a.agree,
        a.disagreements.first()
    );
}

#[test]
fn c_loop_shapes_and_inlining_at_all_levels() {
    let dir = scratch_dir("structure_c_shapes");
    for opt in ["-O0", "-O2", "-O3"] {
        let bin = compile(
            "struct_shapes.c",
            &dir,
            &format!("shapes{opt}"),
            &[opt, "-g"],
        );
        let tree = analyze(&bin);
        let exact = opt == "-O0";
        assert_loop(&tree, "single", "single", 1, exact, opt);
        assert_eq!(max_depth(&tree, "single"), 1, "{opt}");
        assert_loop(&tree, "doubly", "doubly_outer", 1, exact, opt);
        assert_loop(&tree, "doubly", "doubly_inner", 2, exact, opt);
        assert_eq!(max_depth(&tree, "doubly"), 2, "{opt}");
        assert_loop(&tree, "triply", "triply_3", 3, exact, opt);
        assert_eq!(max_depth(&tree, "triply"), 3, "{opt}");
        assert_loop(&tree, "break_continue", "break_continue", 1, exact, opt);
        assert_eq!(
            max_depth(&tree, "break_continue"),
            1,
            "{opt}: break/continue is one loop"
        );
        // The `do {` line holds no code: the loop begins at the first body line or the test.
        assert_loop(&tree, "do_while", "do_while", 1, false, opt);
        assert_loop(&tree, "irreducible", "irreducible", 1, exact, opt);

        // The always-inline callee with its own loop, inlined inside the caller's loop.
        let calls = procedure(&tree, "calls_inline");
        let call_site = marker("struct_shapes.c", "call_inner_sum");
        let inlined = aliens_named(&tree, calls, "inner_sum");
        assert!(!inlined.is_empty(), "{opt}: inner_sum not inlined");
        let inner_loop_line = marker("struct_shapes.c", "inlined_loop");
        let with_loop: Vec<_> = inlined
            .iter()
            .filter(|&&a| {
                loops_below(&tree, a)
                    .iter()
                    .any(|l| near(l.1, inner_loop_line, exact))
            })
            .collect();
        assert!(
            !with_loop.is_empty(),
            "{opt}: no loop inside inlined inner_sum"
        );
        for &&a in &with_loop {
            assert_eq!(call_line(&tree, a), call_site, "{opt}: inner_sum call line");
            let outer_loop = tree
                .ancestors(a)
                .find(|&x| tree.get(x).kind == ScopeKind::Loop);
            let outer_line = outer_loop.map(|l| tree.get(l).line);
            assert!(
                outer_line.is_some_and(|l| near(l, marker("struct_shapes.c", "caller_loop"), exact)),
                "{opt}: inlined loop not inside the caller's loop (enclosing loop line {outer_line:?})"
            );
        }

        // Three-deep inlining with the call lines the source shows.
        let deep = procedure(&tree, "deep_inline");
        let l3 = aliens_named(&tree, deep, "level3");
        assert!(!l3.is_empty(), "{opt}: level3 not inlined");
        for a in l3 {
            let chain: Vec<(String, u32)> = std::iter::once(a)
                .chain(tree.ancestors(a))
                .filter(|&x| tree.get(x).is_alien())
                .map(|x| (tree.get(x).name.to_string(), call_line(&tree, x)))
                .collect();
            let want = vec![
                (
                    "level3".to_string(),
                    marker("struct_shapes.c", "call_level3"),
                ),
                (
                    "level2".to_string(),
                    marker("struct_shapes.c", "call_level2"),
                ),
                (
                    "level1".to_string(),
                    marker("struct_shapes.c", "call_level1"),
                ),
            ];
            assert_eq!(chain, want, "{opt}: inline chain of level3");
        }
        procedure(&tree, "recurse");
        assert_consistent(&tree, &bin, 0.99);
    }
}

#[test]
fn stl_map_loops_and_inlined_search() {
    let dir = scratch_dir("structure_stlmap");
    let bin = compile("stlmap.cc", &dir, "stlmap", &["-O3", "-g"]);
    let tree = analyze(&bin);
    let source = std::fs::read_to_string(fixture("stlmap.cc")).unwrap();
    let for_lines: Vec<u32> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("for ("))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(for_lines.len(), 2);
    let main = procedure(&tree, "main");
    let top: Vec<(ScopeId, u32)> = loops_below(&tree, main)
        .into_iter()
        .filter(|l| {
            l.2 == 1 && tree.get(tree.get(l.0).parent.unwrap()).kind == ScopeKind::Procedure
        })
        .map(|l| (l.0, l.1))
        .collect();
    let mut lines: Vec<u32> = top.iter().map(|l| l.1).collect();
    lines.sort_unstable();
    assert_eq!(lines, for_lines, "main's loops: {top:?}");
    let second = top.iter().find(|l| l.1 == for_lines[1]).unwrap().0;
    let add = aliens_named(&tree, second, "Mp::add(int, double)");
    assert!(!add.is_empty(), "Mp::add not inlined in the second loop");
    assert!(
        add.iter().all(|&a| call_line(&tree, a) == for_lines[1] + 1),
        "Mp::add's call line is the loop body's line"
    );
    let search_loops: Vec<_> = add.iter().flat_map(|&a| loops_below(&tree, a)).collect();
    assert!(
        search_loops.iter().any(|l| tree
            .scope_file(l.0)
            .is_some_and(|f| f.ends_with("stl_tree.h"))),
        "no red-black tree search loop inside the inlined Mp::add: {search_loops:?}"
    );
    assert_consistent(&tree, &bin, 0.99);
}

#[test]
fn cpp_names_are_demangled_with_link_names_kept() {
    let dir = scratch_dir("structure_cpp_names");
    let bin = compile("stlmap.cc", &dir, "stlmap", &["-O2", "-g"]);
    let tree = analyze(&bin);
    let add = tree
        .ids()
        .find(|&i| &*tree.get(i).name == "Mp::add(int, double)")
        .expect("Mp::add somewhere");
    assert_eq!(tree.get(add).link_name.as_deref(), Some("_ZN2Mp3addEid"));
}

/// The procedure linkage table's stubs are procedures named as objdump names them
/// (`printf@plt`), at the addresses objdump gives, in a program and in a library built with
/// indirect-branch tracking (whose stubs sit in `.plt.sec`).
#[test]
fn plt_stubs_are_named_as_objdump_names_them() {
    let dir = scratch_dir("struct-plt");
    let program = compile("run_callers.c", &dir, "callers", &["-O2", "-g"]);
    let library = compile(
        "run_dlwork.c",
        &dir,
        "libwork.so",
        &[
            "-O2",
            "-g",
            "-shared",
            "-fPIC",
            "-fcf-protection",
            "-Wl,-z,now",
        ],
    );
    for binary in [program, library] {
        let listing =
            crate::support::run_ok(std::process::Command::new("objdump").arg("-d").arg(&binary));
        let theirs: Vec<(u64, String)> = (listing.lines())
            .filter_map(|l| {
                let (address, name) = l.strip_suffix(">:")?.split_once(" <")?;
                let name = name.strip_suffix("@plt").map(|n| format!("{n}@plt"))?;
                Some((u64::from_str_radix(address, 16).ok()?, name))
            })
            .collect();
        assert!(
            !theirs.is_empty(),
            "{}: objdump lists no stub",
            binary.display()
        );
        let tree = analyze(&binary);
        let mut ours: Vec<(u64, String)> = (tree.procedures())
            .map(|p| tree.get(p))
            .filter(|s| s.name.ends_with("@plt"))
            .map(|s| (s.ranges[0].start, s.name.to_string()))
            .collect();
        ours.sort();
        let mut theirs = theirs;
        theirs.sort();
        assert_eq!(ours, theirs, "{}", binary.display());
    }
}
