//! hpcstruct-rs as a command, and the analysis on degraded inputs: no DWARF, stripped shared
//! library, separate debug file via `.gnu_debuglink`, compressed debug sections, not ELF.

use crate::support::{compile, run, scratch_dir, tool, tool_command};
use profiler::addr::Svma;
use std::path::Path;
use std::process::Command;
use structure::{analyze_file, read_structure_file, DebugSource, Options, ScopeKind, ScopeTree};

fn count(tree: &ScopeTree, kind: fn(&ScopeKind) -> bool) -> usize {
    tree.ids().filter(|&i| kind(&tree.get(i).kind)).count()
}

fn sh(cmd: &str, args: &[&str], dir: &Path) {
    let out = run(Command::new(cmd).args(args).current_dir(dir));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn writes_a_file_that_reads_back_with_the_same_mapping() {
    let dir = scratch_dir("structure_cli_roundtrip");
    let bin = compile("struct_shapes.c", &dir, "shapes", &["-O2", "-g"]);
    let out = run(tool_command("hpcstruct-rs")
        .arg(&bin)
        .arg("-j")
        .arg("2")
        .current_dir(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("procedures") && stderr.contains("loops"),
        "summary: {stderr}"
    );
    let written = dir.join("shapes.hpcstruct");
    let trees = read_structure_file(&written).unwrap_or_else(|e| panic!("{e}"));
    let direct = analyze_file(&bin, &Options::default()).unwrap().tree;
    assert_eq!(trees[0].address_index().len(), direct.address_index().len());
    for &(start, end, _) in direct.address_index() {
        for addr in [start, end - 1] {
            let a = direct.lookup(Svma(addr)).map(|s| direct.get(s).line);
            let b = trees[0].lookup(Svma(addr)).map(|s| trees[0].get(s).line);
            assert_eq!(a, b, "{addr:#x}");
        }
    }
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.starts_with("<?xml version=\"1.0\"?>\n<!DOCTYPE HPCToolkitStructure ["));
}

#[test]
fn bad_inputs_fail_clearly_with_exit_2() {
    let dir = scratch_dir("structure_cli_bad");
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, b"this is not an ELF file at all").unwrap();
    for path in [junk.clone(), dir.join("missing")] {
        let out = run(tool_command("hpcstruct-rs").arg(&path).current_dir(&dir));
        assert_eq!(out.status.code(), Some(2), "{}", path.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&*path.to_string_lossy()),
            "error names the file: {err}"
        );
    }
    let out = run(tool_command("hpcstruct-rs").arg("--bogus-flag"));
    assert_eq!(out.status.code(), Some(2));
    // A stripped PIE executable has no function symbols at all.
    let bin = compile("struct_shapes.c", &dir, "stripped", &["-O2"]);
    sh("strip", &["--strip-all", "stripped"], &dir);
    let out = run(tool_command("hpcstruct-rs").arg(&bin).current_dir(&dir));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to analyse"));
}

#[test]
fn without_dwarf_procedures_come_from_symbols_and_loops_from_code() {
    let dir = scratch_dir("structure_no_dwarf");
    let bin = compile("struct_shapes.c", &dir, "nodwarf", &["-O2"]);
    let a = analyze_file(&bin, &Options::default()).unwrap();
    assert_eq!(a.summary.debug_source, DebugSource::None);
    let tree = &a.tree;
    let triply = tree
        .procedures()
        .find(|&p| &*tree.get(p).name == "triply")
        .expect("triply");
    let loops: Vec<_> = tree
        .descendants(triply)
        .into_iter()
        .filter(|&d| tree.get(d).kind == ScopeKind::Loop)
        .collect();
    assert!(
        loops.len() >= 3,
        "triply's loops from the CFG: {}",
        loops.len()
    );
    assert!(tree
        .ids()
        .all(|i| tree.get(i).kind != ScopeKind::Statement || tree.get(i).line == 0));
    assert_eq!(count(tree, |k| matches!(k, ScopeKind::Alien { .. })), 0);
}

#[test]
fn stripped_shared_library_uses_dynsym() {
    let dir = scratch_dir("structure_stripped_so");
    let lib = compile(
        "struct_shapes.c",
        &dir,
        "libshapes.so",
        &["-O2", "-g", "-shared", "-fPIC"],
    );
    sh("strip", &["--strip-all", "libshapes.so"], &dir);
    let a = analyze_file(&lib, &Options::default()).unwrap();
    let tree = &a.tree;
    assert!(tree.is_shared_library());
    for name in ["single", "doubly", "calls_inline"] {
        assert!(
            tree.procedures().any(|p| &*tree.get(p).name == name),
            "{name} from .dynsym"
        );
    }
    assert!(count(tree, |k| *k == ScopeKind::Loop) >= 6);
}

#[test]
fn separate_and_compressed_debug_info_are_found() {
    let dir = scratch_dir("structure_debuglink");
    let bin = compile("struct_shapes.c", &dir, "app", &["-O2", "-g"]);
    let with = analyze_file(&bin, &Options::default()).unwrap();
    sh("objcopy", &["--only-keep-debug", "app", "app.debug"], &dir);
    sh("strip", &["--strip-debug", "app"], &dir);
    sh("objcopy", &["--add-gnu-debuglink=app.debug", "app"], &dir);
    let sep = analyze_file(&bin, &Options::default()).unwrap();
    assert_eq!(
        sep.summary.debug_source,
        DebugSource::Separate(dir.join("app.debug"))
    );
    assert_eq!(sep.summary.inlined, with.summary.inlined);
    assert_eq!(sep.summary.statements, with.summary.statements);
    assert!(sep.summary.inlined > 0);

    // Stripped of its symbol table too (as distributions ship binaries): functions without
    // DWARF, such as the assembly `_start`, are named from the debug file's table.
    sh("cp", &["app", "app-stripped"], &dir);
    sh("strip", &["--strip-all", "app-stripped"], &dir);
    let stripped = analyze_file(&dir.join("app-stripped"), &Options::default()).unwrap();
    let tree = &stripped.tree;
    assert!(
        tree.procedures().any(|p| &*tree.get(p).name == "_start"),
        "_start named from the debug file's .symtab"
    );

    let z = compile("struct_shapes.c", &dir, "appz", &["-O2", "-g", "-gz"]);
    let zs = analyze_file(&z, &Options::default()).unwrap();
    assert_eq!(zs.summary.debug_source, DebugSource::Embedded);
    assert_eq!(zs.summary.inlined, with.summary.inlined);
    assert_eq!(zs.summary.loops, with.summary.loops);
}

/// A debug file found through `.gnu_debuglink` that is not the binary's is refused, as gdb
/// refuses it, with one note naming both files: one left from another build (build-id and
/// CRC32 differ) and one changed since (same build-id, CRC32 differs). Before, either
/// supplied its lines.
#[test]
fn stale_separate_debug_files_are_refused() {
    let dir = scratch_dir("structure_debuglink_stale");
    let bin = compile("struct_shapes.c", &dir, "app", &["-O2", "-g"]);
    compile("struct_shapes.c", &dir, "other", &["-O1", "-g"]);
    sh("objcopy", &["--only-keep-debug", "app", "app.debug"], &dir);
    sh(
        "objcopy",
        &["--only-keep-debug", "other", "other.debug"],
        &dir,
    );
    sh("strip", &["--strip-debug", "app"], &dir);
    sh("objcopy", &["--add-gnu-debuglink=app.debug", "app"], &dir);
    let good = std::fs::read(dir.join("app.debug")).unwrap();
    let analysis = analyze_file(&bin, &Options::default()).unwrap();
    assert_eq!(
        analysis.summary.debug_source,
        DebugSource::Separate(dir.join("app.debug"))
    );
    let mut changed = good.clone();
    changed.push(0);
    for (what, debug, why) in [
        (
            "another build's",
            std::fs::read(dir.join("other.debug")).unwrap(),
            "build-id",
        ),
        ("a changed", changed, "CRC32"),
    ] {
        std::fs::write(dir.join("app.debug"), debug).unwrap();
        let analysis = analyze_file(&bin, &Options::default()).unwrap();
        assert_eq!(analysis.summary.debug_source, DebugSource::None, "{what}");
        let notes: Vec<_> = analysis
            .summary
            .skipped
            .iter()
            .filter(|n| n.contains("app.debug"))
            .collect();
        assert!(
            notes.len() == 1
                && notes[0].contains(why)
                && notes[0].contains(&*bin.to_string_lossy()),
            "{what} debug file: {:?}",
            analysis.summary.skipped
        );
    }
}

/// A directory or a FIFO given as the binary is refused at once, saying what it is (before:
/// "No such device", and a FIFO blocked forever); a structure file behind a UTF-8 byte order
/// mark reads.
#[test]
fn non_regular_inputs_are_refused_and_a_byte_order_mark_is_read() {
    let dir = scratch_dir("structure_non_regular");
    let fifo = dir.join("fifo");
    sh("mkfifo", &["fifo"], &dir);
    for (input, what) in [(&dir, "is a directory"), (&fifo, "not a regular file")] {
        let mut command = Command::new("timeout");
        let out = run(command.arg("20").arg(tool("hpcstruct-rs")).arg(input));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", input.display());
        assert_eq!(
            stderr.matches(what).count(),
            1,
            "{}: {stderr}",
            input.display()
        );
    }
    let bin = compile("struct_shapes.c", &dir, "app", &["-O2", "-g"]);
    let xml = dir.join("app.hpcstruct");
    let out = run(tool_command("hpcstruct-rs").arg(&bin).arg("-o").arg(&xml));
    assert!(out.status.success());
    let plain = read_structure_file(&xml).unwrap();
    let mut bytes = "\u{feff}".as_bytes().to_vec();
    bytes.extend(std::fs::read(&xml).unwrap());
    std::fs::write(&xml, bytes).unwrap();
    let with_bom = read_structure_file(&xml).unwrap();
    assert_eq!(with_bom.len(), plain.len());
    assert_eq!(
        with_bom[0].procedures().count(),
        plain[0].procedures().count()
    );
}

#[test]
fn irreducible_loops_are_kept_and_reported_with_their_entries() {
    let dir = scratch_dir("structure_irreducible");
    // At -O0 the goto into the loop body leaves a loop with two entries.
    let bin = compile("struct_shapes.c", &dir, "shapes", &["-O0", "-g"]);
    let a = analyze_file(&bin, &Options::default()).unwrap();
    let want_line = std::fs::read_to_string(crate::support::fixture("struct_shapes.c"))
        .unwrap()
        .lines()
        .position(|l| l.contains("@irreducible "))
        .unwrap() as u32
        + 1;
    let reported = &a.summary.irreducible_loops;
    assert_eq!(reported.len(), 1, "{reported:?}");
    let irr = &reported[0];
    assert_eq!(
        (irr.procedure.as_str(), irr.line),
        ("irreducible", want_line)
    );
    assert!(irr.file.ends_with("struct_shapes.c"));
    assert!(irr.entries.len() >= 2, "{irr:?}");
    // The loop stays in the tree, headed by the first entry, and holds the other entries.
    let tree = &a.tree;
    let lp = tree
        .ids()
        .find(|&i| tree.get(i).kind == ScopeKind::Loop && tree.get(i).entry == Some(irr.entries[0]))
        .expect("irreducible loop in the tree");
    assert_eq!(tree.get(lp).line, want_line);
    for &e in &irr.entries {
        let stmt = tree.lookup(Svma(e)).expect("entry in a statement");
        assert!(
            tree.ancestors(stmt).any(|x| x == lp),
            "entry {e:#x} inside the loop"
        );
    }
    // The summary counts it; only --verbose lists it.
    let quiet = run(tool_command("hpcstruct-rs")
        .arg(&bin)
        .args(["-o", "shapes.hpcstruct"])
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(quiet.status.success(), "{stderr}");
    assert!(
        stderr.contains("(1 irreducible)") && !stderr.contains("irreducible loop in"),
        "{stderr}"
    );
    let out = run(tool_command("hpcstruct-rs")
        .arg(&bin)
        .args(["-o", "shapes.hpcstruct", "--verbose"])
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("(1 irreducible)")
            && stderr.contains(&format!(
                "irreducible loop in irreducible at struct_shapes.c:{want_line}, entries {:#x} ",
                irr.entries[0]
            )),
        "{stderr}"
    );
}
