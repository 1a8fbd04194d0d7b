//! hpcstruct-rs on Fortran (gfortran, installed by scripts/test): module procedures get readable
//! names, and a triply nested DO loop nest is recovered at the source's DO lines.

use hpctoolkit_tests::{compile, fixture, scratch_dir};
use structure::loops::LOOP_BEGIN_TOLERANCE;
use structure::{analyze_file, Options, ScopeKind};

fn marker(name: &str) -> u32 {
    let text = std::fs::read_to_string(fixture("struct_fortran.f90")).unwrap();
    let tag = format!("@{name}");
    text.lines().position(|l| l.contains(&tag)).expect("marker") as u32 + 1
}

#[test]
fn fortran_loop_nest_and_module_procedure_names() {
    let dir = scratch_dir("struct-fortran");
    for level in ["-O0", "-O2"] {
        let exe = compile(
            "struct_fortran.f90",
            &dir,
            &format!("f{level}"),
            &[level, "-g"],
        );
        let tree = analyze_file(&exe, &Options::default()).unwrap().tree;
        let proc_ = tree
            .procedures()
            .find(|&p| tree.get(p).name == "kernels::matmul_naive")
            .unwrap_or_else(|| panic!("{level}: no kernels::matmul_naive"));
        assert_eq!(
            tree.get(proc_).link_name.as_deref(),
            Some("__kernels_MOD_matmul_naive")
        );
        // (line, depth) of every loop of the procedure.
        let loops: Vec<(u32, usize)> = tree
            .descendants(proc_)
            .into_iter()
            .filter(|&d| tree.get(d).kind == ScopeKind::Loop)
            .map(|d| {
                let depth = 1 + tree
                    .ancestors(d)
                    .filter(|&a| a != d && tree.get(a).kind == ScopeKind::Loop)
                    .count();
                (tree.get(d).line, depth)
            })
            .collect();
        for (depth, name) in [(1, "outer"), (2, "middle"), (3, "inner")] {
            let want = marker(name);
            assert!(
                loops
                    .iter()
                    .any(|&(l, d)| d == depth && l.abs_diff(want) <= LOOP_BEGIN_TOLERANCE),
                "{level}: no depth-{depth} loop near line {want} (@{name}): {loops:?}"
            );
        }
    }
}
