//! The structure-file reader and writer: every HPCToolkit sample file loads, write-then-read
//! keeps the address-to-scope mapping, malformed files are rejected with a clear error.

use profiler::addr::Svma;
use std::path::{Path, PathBuf};
use structure::{
    read_structure, read_structure_file, write_structure, ScopeId, ScopeKind, ScopeTree,
};

const SAMPLES: &str = "/work/shared/hpcstruct-samples";

fn sample_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(SAMPLES)
        .expect("sample directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hpcstruct"))
        .collect();
    files.sort();
    files
}

/// What a lookup of one address says: the chain from statement to procedure.
fn context(tree: &ScopeTree, stmt: ScopeId) -> Vec<String> {
    std::iter::once(stmt)
        .chain(tree.ancestors(stmt))
        .map(|id| {
            let s = tree.get(id);
            let file = tree.scope_file(id).unwrap_or("?");
            match s.kind {
                ScopeKind::Alien {
                    call_file,
                    call_line,
                } => format!(
                    "A {} {file}:{} called at {}:{call_line}",
                    s.name,
                    s.line,
                    call_file.map_or("?", |f| tree.file_name(f))
                ),
                kind => format!("{kind:?} {} {file}:{} {:?}", s.name, s.line, s.entry),
            }
        })
        .collect()
}

/// Assert two trees map every address to the same context.
fn assert_same_mapping(a: &ScopeTree, b: &ScopeTree, what: &str) {
    let mut points: Vec<u64> = a
        .address_index()
        .iter()
        .chain(b.address_index())
        .flat_map(|&(s, e, _)| [s, e - 1, e])
        .collect();
    points.sort_unstable();
    points.dedup();
    for addr in points {
        let ca = a.lookup(Svma(addr)).map(|s| context(a, s));
        let cb = b.lookup(Svma(addr)).map(|s| context(b, s));
        assert_eq!(ca, cb, "{what}: address {addr:#x} maps differently");
    }
}

#[test]
fn every_sample_loads_and_round_trips() {
    let files = sample_files();
    assert!(
        files.len() >= 50,
        "expected the HPCToolkit samples, found {}",
        files.len()
    );
    for path in files {
        let trees = read_structure_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(trees.len(), 1, "{}", path.display());
        let tree = &trees[0];
        assert!(
            tree.procedures().count() > 0,
            "{}: no procedures",
            path.display()
        );
        assert!(!tree.address_index().is_empty(), "{}", path.display());
        let mut out = Vec::new();
        write_structure(&mut out, &trees).unwrap();
        let text = String::from_utf8(out).unwrap();
        let again = read_structure(&text, Path::new("written")).unwrap_or_else(|e| panic!("{e}"));
        assert_same_mapping(tree, &again[0], &path.display().to_string());
    }
}

#[test]
fn sample_content_is_read_faithfully() {
    let path = Path::new(SAMPLES).join("inlines+loops-x86_64-gcc12-d.hpcstruct");
    let trees = read_structure_file(&path).unwrap();
    let tree = &trees[0];
    // <P n="f2 [...]" l="18"> holds f_inlined (line 9) inlined at line 19: S at 0x1127..0x1138.
    let s = tree.lookup(Svma(0x1130)).expect("statement at 0x1130");
    assert_eq!(tree.get(s).line, 9);
    let chain: Vec<ScopeId> = tree.ancestors(s).collect();
    let alien = tree.get(chain[0]);
    assert_eq!(&*alien.name, "f_inlined");
    assert!(matches!(alien.kind, ScopeKind::Alien { call_line: 19, .. }));
    let proc_ = tree.get(chain[1]);
    assert_eq!(proc_.kind, ScopeKind::Procedure);
    assert_eq!(&*proc_.name, "f2", "library suffix stripped");
    assert_eq!(proc_.entry, Some(0x1123));
    // f3_1's loop: header 0x1159, statement 0x1145..0x1156 at line 25.
    let s = tree.lookup(Svma(0x1150)).unwrap();
    let l = tree.get(s).parent.unwrap();
    assert_eq!(tree.get(l).kind, ScopeKind::Loop);
    assert_eq!((tree.get(l).line, tree.get(l).entry), (24, Some(0x1159)));
    assert_eq!(tree.lookup(Svma(0x10)), None);
}

fn expect_error(text: &str, needle: &str) {
    match read_structure(text, Path::new("bad.hpcstruct")) {
        Ok(_) => panic!("accepted malformed input: {text}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("bad.hpcstruct"),
                "error does not name the file: {msg}"
            );
            assert!(msg.contains(needle), "error {msg:?} lacks {needle:?}");
        }
    }
}

#[test]
fn malformed_files_are_rejected_clearly() {
    let head = "<?xml version=\"1.0\"?>\n<HPCToolkitStructure i=\"0\" version=\"4.9\" n=\"\">\n<LM i=\"2\" n=\"/x\" has-calls=\"0\" v=\"{}\">\n<F i=\"3\" n=\"a.c\">\n";
    expect_error("", "no <HPCToolkitStructure>");
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\">\n</F>"),
        "line 6: ill-formed",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\">"),
        "ends inside",
    );
    expect_error(&format!("{head}<Q i=\"4\"/>"), "unknown element <Q>");
    expect_error(
        &format!("{head}<S i=\"4\" l=\"1\" v=\"{{}}\"/>"),
        "outside a procedure",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x20)}}\"></P>"),
        "exactly one byte",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\"><S i=\"5\" l=\"x\"/></P>"),
        "bad line",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\"><S i=\"5\" l=\"1\" v=\"{{[0x20-0x10)}}\"/></P>"),
        "bad range set",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\"><P i=\"5\" n=\"g\" v=\"{{[0x12-0x13)}}\"/></P>"),
        "nested",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f\" v=\"{{[0x10-0x11)}}\"/><P i=\"5\" n=\"g\" v=\"{{[0x10-0x11)}}\"/>"),
        "same entry",
    );
    expect_error(
        &format!("{head}<P i=\"4\" n=\"f &amp\" v=\"{{[0x10-0x11)}}\"/>"),
        "bad value",
    );
}
