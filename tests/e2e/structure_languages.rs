//! hpcstruct-rs on Fortran (gfortran, installed by scripts/test) and Rust (rustc): procedures get
//! readable names (`module::procedure`, demangled Rust paths) with their link names kept, and
//! loop nests are recovered at the source's loop lines.

use std::path::Path;

use crate::structure_support::loops_below;
use crate::support::{compile, marker, scratch_dir};
use structure::loops::LOOP_BEGIN_TOLERANCE;
use structure::{analyze_file, Options, ScopeId};

/// Analyse `exe`, find procedure `name`, check its link name with `link_ok`, and check that it
/// has a loop at each (depth, marker) of `nest`, within the thesis's tolerance.
fn assert_procedure_loops(
    exe: &Path,
    source: &str,
    name: &str,
    link_ok: impl Fn(&str) -> bool,
    nest: &[(usize, &str)],
) {
    let tree = analyze_file(exe, &Options::default()).unwrap().tree;
    let proc_ = tree
        .procedures()
        .find(|&p| &*tree.get(p).name == name)
        .unwrap_or_else(|| panic!("{}: no procedure {name}", exe.display()));
    let link = tree.get(proc_).link_name.clone().unwrap_or_default();
    assert!(link_ok(&link), "{name}: link name {link:?}");
    // (line, depth) of every loop of the procedure.
    let loops: Vec<(u32, usize)> = loops_below(&tree, proc_)
        .into_iter()
        .map(|(_, line, depth)| (line, depth))
        .collect();
    for &(depth, mark) in nest {
        let want = marker(source, mark);
        assert!(
            loops
                .iter()
                .any(|&(l, d)| d == depth && l.abs_diff(want) <= LOOP_BEGIN_TOLERANCE),
            "{}: no depth-{depth} loop near line {want} (@{mark}): {loops:?}",
            exe.display()
        );
    }
}

#[test]
fn fortran_module_procedure_and_do_loop_nest() {
    let dir = scratch_dir("struct-fortran");
    for level in ["-O0", "-O2"] {
        let exe = compile(
            "struct_fortran.f90",
            &dir,
            &format!("f{level}"),
            &[level, "-g"],
        );
        assert_procedure_loops(
            &exe,
            "struct_fortran.f90",
            "kernels::matmul_naive",
            |l| l == "__kernels_MOD_matmul_naive",
            &[(1, "outer"), (2, "middle"), (3, "inner")],
        );
        let tree = analyze_file(&exe, &Options::default()).unwrap().tree;
        let unnamed: Vec<&str> = tree
            .descendants(ScopeId(0))
            .into_iter()
            .map(|s| &*tree.get(s).name)
            .filter(|n| n.starts_with("<inlined from"))
            .collect();
        assert!(
            unnamed.is_empty(),
            "{level}: unnamed inlined code {unnamed:?}"
        );
    }
    // Unoptimised, the program body is a procedure of its own, named by its `program` statement
    // and holding its loop directly.
    assert_procedure_loops(
        &dir.join("f-O0"),
        "struct_fortran.f90",
        "driver",
        |l| l.is_empty() || l == "MAIN__",
        &[(1, "program")],
    );
}

#[test]
fn rust_demangled_procedure_and_loop_nest() {
    let dir = scratch_dir("struct-rust");
    for level in ["0", "2"] {
        let opt = format!("opt-level={level}");
        let exe = compile(
            "struct_rust.rs",
            &dir,
            &format!("r{level}"),
            &["-C", &opt, "-g"],
        );
        assert_procedure_loops(
            &exe,
            "struct_rust.rs",
            "struct_rust::stencil",
            |l| l.starts_with("_ZN") || l.starts_with("_R"),
            &[(1, "outer"), (2, "inner")],
        );
    }
}
