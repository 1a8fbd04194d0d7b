//! Loop nests as the source has them, on code whose control flow compilers make hard to follow:
//! switches on jump tables inside loops (gcc and clang, PIC and not, Rust `match`), calls that
//! never return (named, imported through the PLT, or found by analysis, with and without
//! exceptions) and loops left by `break`, `return` and `goto`. Each function's loops are known
//! from the source: their number, their depths and their lines (`@name` markers).

use crate::structure_support::loops_below;
use crate::support::{compile_with, marker, scratch_dir};
use std::path::{Path, PathBuf};
use structure::loops::LOOP_BEGIN_TOLERANCE;
use structure::{analyze_file, Options, ScopeKind, ScopeTree};

/// Build `source` with `compiler` and `flags` into `dir`.
fn build(compiler: &str, source: &str, flags: &[&str], dir: &Path) -> PathBuf {
    let name = format!("{compiler}{}", flags.concat().replace(['-', '='], ""));
    compile_with(compiler, &[source], dir, &name, flags)
}

/// The loops of procedure `name` (C++: with any parameters) as (begin line, depth), sorted.
fn loops_of(tree: &ScopeTree, name: &str) -> Vec<(u32, usize)> {
    let named = |n: &str| n == name || n.strip_prefix(name).is_some_and(|r| r.starts_with('('));
    let p = tree
        .procedures()
        .find(|&p| named(&tree.get(p).name))
        .unwrap_or_else(|| panic!("no procedure {name}"));
    let mut loops: Vec<(u32, usize)> = loops_below(tree, p)
        .into_iter()
        .map(|(_, line, depth)| (line, depth))
        .collect();
    loops.sort_unstable();
    loops
}

/// Check every function of `expected` (name, loops as (marker, depth)) in `binary`, and that
/// none of them holds an irreducible loop; the analysis's tree, for further checks.
fn check(binary: &Path, source: &str, expected: &[(&str, &[(&str, usize)])]) -> ScopeTree {
    let a = analyze_file(binary, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    for &(function, want) in expected {
        let got = loops_of(&a.tree, function);
        let mut want: Vec<(u32, usize)> =
            want.iter().map(|&(m, d)| (marker(source, m), d)).collect();
        want.sort_unstable();
        let matches = got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|(g, w)| g.1 == w.1 && g.0.abs_diff(w.0) <= LOOP_BEGIN_TOLERANCE);
        assert!(
            matches,
            "{}: {function}: loops (line, depth) {got:?}, the source has {want:?}",
            binary.display()
        );
        let irreducible: Vec<_> = a
            .summary
            .irreducible_loops
            .iter()
            .filter(|l| l.procedure.starts_with(function))
            .collect();
        assert!(
            irreducible.is_empty(),
            "{}: {function}: {irreducible:?}",
            binary.display()
        );
    }
    a.tree
}

#[test]
fn c_switches_noreturn_calls_and_early_exits_give_the_source_loops() {
    let dir = scratch_dir("structure_loops_c");
    let source = "loops_control.c";
    let expected: &[(&str, &[(&str, usize)])] = &[
        ("switch_masked", &[("switch_masked", 1)]),
        ("switch_bounded", &[("switch_bounded", 1)]),
        ("checked_sum", &[("checked_rows", 1), ("checked_cols", 2)]),
        ("find_first", &[("find_first", 1)]),
        ("search_2d", &[("search_rows", 1), ("search_cols", 2)]),
        ("count_until", &[("count_until", 1)]),
        ("no_loop_errors", &[]),
    ];
    for compiler in ["gcc", "clang"] {
        for pic in [["-fPIE", "-pie"], ["-fno-pie", "-no-pie"]] {
            for opt in ["-O2", "-O3"] {
                let flags = [opt, "-g", pic[0], pic[1]];
                check(&build(compiler, source, &flags, &dir), source, expected);
            }
        }
    }
}

#[test]
fn cpp_assertions_throws_and_cleanups_make_no_loops() {
    let dir = scratch_dir("structure_loops_cpp");
    let source = "loops_noreturn.cc";
    let expected: &[(&str, &[(&str, usize)])] = &[
        ("guarded", &[]),
        ("sum_or_throw", &[("sum_or_throw", 1)]),
        ("retry", &[("retry", 1)]),
        ("guard_all", &[("guard_all", 1)]),
    ];
    // -g1 leaves out the declarations that say abort() does not return: the PLT stub's
    // import name must say it.
    for compiler in ["g++", "clang++"] {
        for debug in ["-g", "-g1"] {
            let binary = build(compiler, source, &["-O2", debug], &dir);
            let tree = check(&binary, source, expected);
            assert_catch_in_loop(&tree, &binary, source);
        }
    }
}

/// The `catch` block inside `retry`'s loop is reached only by the unwinder (through the
/// exception table's landing pad) and belongs to the loop.
fn assert_catch_in_loop(tree: &ScopeTree, binary: &Path, source: &str) {
    let line = marker(source, "retry_catch");
    let statements: Vec<_> = tree
        .ids()
        .filter(|&i| tree.get(i).kind == ScopeKind::Statement && tree.get(i).line == line)
        .collect();
    assert!(
        !statements.is_empty(),
        "{}: no statement at line {line}",
        binary.display()
    );
    for s in statements {
        assert!(
            tree.ancestors(s)
                .any(|a| tree.get(a).kind == ScopeKind::Loop),
            "{}: the catch block (line {line}) is outside the loop",
            binary.display()
        );
    }
}

#[test]
fn rust_match_in_a_loop_is_one_loop() {
    let dir = scratch_dir("structure_loops_rust");
    let source = "loops_match.rs";
    let expected: &[(&str, &[(&str, usize)])] =
        &[("classify", &[("classify", 1)]), ("checked", &[])];
    check(
        &build("rustc", source, &["-O", "-g"], &dir),
        source,
        expected,
    );
}
