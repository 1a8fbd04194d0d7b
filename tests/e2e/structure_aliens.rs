//! Inlined code without inline records: a binary whose DWARF keeps only the line table
//! (`.debug_info` removed with objcopy) must still show the always-inlined header function and
//! the same-file helper as aliens inside their callers, with loops in place, as the full DWARF
//! does; and units that have DWARF descriptors but no inlining must not grow false aliens.

use crate::support::{compile, compile_all, fixture, marker, run, scratch_dir, tool_command};
use profiler::addr::Svma;
use std::path::{Path, PathBuf};
use std::process::Command;
use structure::{
    analyze_file, analyze_file_with, read_structure_file, Heuristics, Options, ScopeId, ScopeKind,
    ScopeTree,
};

fn sh(cmd: &str, args: &[&str], dir: &Path) -> String {
    let out = run(Command::new(cmd).args(args).current_dir(dir));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `struct_alien.c` at -O2 -g, and a copy whose DWARF is only the line table. The source is
/// named relative to the compiler's directory, so that the line table's directories are
/// relative to the unit's directory too.
fn full_and_line_only(dir: &Path) -> (PathBuf, PathBuf) {
    let full = dir.join("full");
    let fixtures = fixture("struct_alien.c");
    let tests_dir = fixtures.parent().and_then(Path::parent).unwrap();
    let out = run(Command::new("gcc")
        .args(["-O2", "-g", "fixtures/struct_alien.c", "-o"])
        .arg(&full)
        .current_dir(tests_dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sh(
        "objcopy",
        &[
            "--remove-section=.debug_info",
            "--remove-section=.debug_abbrev",
            "--remove-section=.debug_aranges",
            "--remove-section=.debug_rnglists",
            "--remove-section=.debug_loclists",
            "--remove-section=.debug_str_offsets",
            "full",
            "lines",
        ],
        dir,
    );
    let sections = sh("readelf", &["-S", "-W", "lines"], dir);
    assert!(!sections.contains(".debug_info") && sections.contains(".debug_line"));
    let decoded = sh("readelf", &["--debug-dump=decodedline", "lines"], dir);
    assert!(
        decoded.contains("struct_alien.h"),
        "binutils still reads the line table"
    );
    (full, dir.join("lines"))
}

fn procedure(tree: &ScopeTree, name: &str) -> ScopeId {
    tree.procedures()
        .find(|&p| &*tree.get(p).name == name)
        .unwrap_or_else(|| panic!("no procedure {name}"))
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The callee file of the innermost alien around `addr` ("" when the code is native), and
/// the procedure's name.
fn context_at(tree: &ScopeTree, addr: Svma) -> Option<(String, String)> {
    let stmt = tree.lookup(addr)?;
    let proc_ = tree.procedure_of(stmt)?;
    let alien = tree.ancestors(stmt).find(|&a| tree.get(a).is_alien());
    let file = alien.map_or("", |a| base(tree.scope_file(a).unwrap_or("")));
    Some((tree.get(proc_).name.to_string(), file.to_string()))
}

/// Loops below `scope`: (line, file basename, whether an alien lies between it and `scope`).
fn loops_of(tree: &ScopeTree, scope: ScopeId) -> Vec<(u32, String, bool)> {
    tree.descendants(scope)
        .into_iter()
        .filter(|&d| tree.get(d).kind == ScopeKind::Loop)
        .map(|d| {
            let in_alien = tree
                .ancestors(d)
                .take_while(|&a| a != scope)
                .any(|a| tree.get(a).is_alien());
            let file = base(tree.scope_file(d).unwrap_or("")).to_string();
            (tree.get(d).line, file, in_alien)
        })
        .collect()
}

#[test]
fn line_table_only_binary_gets_aliens_from_the_line_map() {
    let dir = scratch_dir("structure_aliens_line_only");
    let (full, lines) = full_and_line_only(&dir);
    let exact = analyze_file(&full, &Options::default()).unwrap();
    let inferred = analyze_file(&lines, &Options::default()).unwrap();
    assert_eq!(exact.summary.inferred_inlined, 0, "full DWARF has records");
    assert_eq!(inferred.summary.units, 0);
    assert!(
        inferred.summary.inferred_inlined >= 3,
        "{:?}",
        inferred.summary
    );
    let (ex, inf) = (&exact.tree, &inferred.tree);
    let header = fixture("struct_alien.h");
    for tree in [ex, inf] {
        assert!(
            tree.files().iter().any(|f| Path::new(f) == header),
            "absolute paths: {:?}",
            tree.files()
        );
    }

    // Every line-table address of main and kernel: same procedure, and inlined (or not) from
    // the same file as the DWARF inline records say.
    let addrs = structure::line_table_addresses(&full).unwrap();
    let mut checked = 0;
    let mut alien = 0;
    for &a in &addrs {
        let Some(want) = context_at(ex, a) else {
            continue;
        };
        if want.0 != "main" && want.0 != "kernel" {
            continue;
        }
        let got = context_at(inf, a);
        assert_eq!(got.as_ref(), Some(&want), "{a:#x}");
        checked += 1;
        alien += usize::from(!want.1.is_empty());
    }
    assert!(
        checked > 40 && alien > 15,
        "{checked} addresses, {alien} alien"
    );

    // The aliens: called from struct_alien.c at an unknown line, the header's lines inside.
    let kernel = procedure(inf, "kernel");
    let clamp_line = marker("struct_alien.c", "clamp_body");
    let clamp_stmt = inf
        .descendants(kernel)
        .into_iter()
        .find(|&d| inf.get(d).kind == ScopeKind::Statement && inf.get(d).line == clamp_line)
        .expect("clamp's line in kernel");
    let clamp_alien = inf
        .ancestors(clamp_stmt)
        .find(|&a| inf.get(a).is_alien())
        .expect("same-file helper above its caller is alien");
    match inf.get(clamp_alien).kind {
        ScopeKind::Alien {
            call_file,
            call_line,
        } => {
            assert_eq!(call_line, 0, "call line cannot be known");
            assert_eq!(base(inf.file_name(call_file.unwrap())), "struct_alien.c");
        }
        _ => unreachable!(),
    }

    // Loops stay placed: the caller's loops native, dot's loop inside the alien.
    let dot_loop = marker("struct_alien.h", "dot_loop");
    for (proc_, own) in [("kernel", "kernel_loop"), ("main", "init_loop")] {
        let loops = loops_of(inf, procedure(inf, proc_));
        let own = marker("struct_alien.c", own);
        assert!(
            loops
                .iter()
                .any(|l| *l == (own, "struct_alien.c".into(), false)),
            "{proc_}: native loop at {own}: {loops:?}"
        );
        assert!(
            loops
                .iter()
                .any(|l| *l == (dot_loop, "struct_alien.h".into(), true)),
            "{proc_}: dot's loop inside the alien: {loops:?}"
        );
    }
    let kernel_loops = loops_of(ex, procedure(ex, "kernel"));
    assert_eq!(loops_of(inf, kernel).len(), kernel_loops.len());

    // Without the fallback, the same code is simply the procedure's own.
    let off = Heuristics {
        line_map_aliens: false,
    };
    let plain = analyze_file_with(&lines, &Options::default(), &off).unwrap();
    assert_eq!(plain.summary.inlined, 0);
    let header_stmts: Vec<ScopeId> = plain
        .tree
        .ids()
        .filter(|&i| {
            plain
                .tree
                .scope_file(i)
                .is_some_and(|f| f.ends_with("struct_alien.h"))
        })
        .filter(|&i| plain.tree.get(i).kind == ScopeKind::Statement)
        .collect();
    assert!(!header_stmts.is_empty());
    assert!(header_stmts.iter().all(|&s| !plain
        .tree
        .ancestors(s)
        .any(|a| plain.tree.get(a).is_alien())));
}

#[test]
fn inferred_aliens_survive_the_structure_file() {
    let dir = scratch_dir("structure_aliens_xml");
    let (_, lines) = full_and_line_only(&dir);
    let out = run(tool_command("hpcstruct-rs")
        .arg(&lines)
        .args(["-o", "lines.hpcstruct"])
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("inferred from the line map"), "{stderr}");
    let back = &read_structure_file(&dir.join("lines.hpcstruct")).unwrap()[0];
    let direct = analyze_file(&lines, &Options::default()).unwrap().tree;
    let mut aliens = 0;
    for &(start, _, _) in direct.address_index() {
        let want = context_at(&direct, Svma(start));
        assert_eq!(context_at(back, Svma(start)), want, "{start:#x}");
        aliens += usize::from(want.is_some_and(|w| !w.1.is_empty()));
    }
    assert!(aliens > 5);
}

#[test]
fn units_without_inlining_get_no_false_aliens() {
    let dir = scratch_dir("structure_aliens_o0");
    // At -O0 nothing is inlined in these two units: no inline records, every procedure bounded
    // by its declaration and the next procedure of its file.
    let units = ["struct_units_main.c", "struct_units_work.c"];
    let out = compile_all(&units, &dir, "units", &["-O0", "-g"]);
    let a = analyze_file(&out, &Options::default()).unwrap();
    assert_eq!(a.summary.units, 2);
    assert_eq!(a.summary.inlined, 0, "{:?}", a.summary);
    assert!(a.summary.loops >= 2);

    // Lambdas begin inside main's lines: they are nested in main, not the next procedure.
    let bin = compile("struct_lambda.cc", &dir, "lambda", &["-O0", "-g"]);
    let a = analyze_file(&bin, &Options::default()).unwrap();
    assert_eq!(a.summary.inlined, 0, "{:?}", a.summary);
    let main = procedure(&a.tree, "main");
    let want = marker("struct_lambda.cc", "lambda_caller_loop");
    assert!(loops_of(&a.tree, main).contains(&(want, "struct_lambda.cc".into(), false)));
}
