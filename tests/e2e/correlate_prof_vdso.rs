//! Time in the kernel-provided `[vdso]` gets procedure names: hpcprof-rs uses this machine's own
//! vdso image when its build-id is the profiled one.

use crate::correlate_prof_common::{all, correlate, measure, samples};
use crate::support::{compile, scratch_dir};
use correlate::{flat, NodeKind, Selection};

#[test]
fn vdso_samples_are_named_procedures() {
    let dir = scratch_dir("correlate_prof_vdso");
    let bin = compile("prof_vdso.c", &dir, "vdso", &["-O2", "-g"]);
    let profile = measure(&bin, &["20000000"], &dir, "vdso");
    let db = correlate(&dir, &[&profile], "vdso");
    let t = flat(&db, &Selection::All);
    let module = all(&t, |n| {
        n.kind == NodeKind::Module && n.name.ends_with("[vdso]")
    });
    assert_eq!(module.len(), 1, "the flat view has a [vdso] module");
    let in_vdso = samples(&t.nodes[module[0]]);
    let total = samples(&t.nodes[0]);
    assert!(
        in_vdso * 5 > total,
        "[vdso] holds {in_vdso} of {total} samples"
    );
    let named: u64 = all(&t, |n| {
        n.kind == NodeKind::Procedure && n.name.contains("clock_gettime")
    })
    .iter()
    .map(|&i| samples(&t.nodes[i]))
    .sum();
    let unknown: u64 = all(&t, |n| n.kind == NodeKind::Unknown)
        .iter()
        .map(|&i| samples(&t.nodes[i]))
        .sum();
    assert!(
        named * 2 > in_vdso,
        "clock_gettime procedures hold {named} of {in_vdso}"
    );
    assert!(unknown * 10 < in_vdso, "unknown procedures hold {unknown}");
}
