//! Tests of the scope tree.

#![allow(clippy::single_range_in_vec_init)]

use super::*;

fn stmt(line: u32, ranges: &[Range<u64>]) -> Scope {
    let mut s = Scope::new(ScopeKind::Statement);
    s.line = line;
    s.ranges = ranges.to_vec();
    s
}

fn sample_tree() -> (ScopeTree, ScopeId, ScopeId, ScopeId, ScopeId) {
    let mut t = ScopeTree::new("/bin/x");
    let f = t.intern_file("a.c");
    let mut file = Scope::new(ScopeKind::File);
    file.name = "a.c".into();
    file.file = Some(f);
    let file = t.add(t.root(), file);
    let mut p = Scope::new(ScopeKind::Procedure);
    p.name = "main".into();
    p.entry = Some(0x100);
    let p = t.add(file, p);
    let s1 = t.add(p, stmt(3, &[0x100..0x108]));
    let mut l = Scope::new(ScopeKind::Loop);
    l.entry = Some(0x110);
    let l = t.add(p, l);
    let s2 = t.add(l, stmt(4, &[0x108..0x110, 0x118..0x120]));
    let s3 = t.add(l, stmt(5, &[0x110..0x118]));
    t.finish();
    let _ = s3;
    (t, p, l, s1, s2)
}

#[test]
fn lookup_finds_statement_and_misses_gaps() {
    let (t, _, _, s1, s2) = sample_tree();
    assert_eq!(t.lookup(Svma(0x100)), Some(s1));
    assert_eq!(t.lookup(Svma(0x107)), Some(s1));
    assert_eq!(t.lookup(Svma(0x108)), Some(s2));
    assert_eq!(t.lookup(Svma(0x11f)), Some(s2));
    assert_eq!(t.lookup(Svma(0x120)), None);
    assert_eq!(t.lookup(Svma(0xff)), None);
}

#[test]
fn ancestors_stop_at_procedure() {
    let (t, p, l, _, s2) = sample_tree();
    let chain: Vec<_> = t.ancestors(s2).collect();
    assert_eq!(chain, vec![l, p]);
    assert_eq!(t.procedure_of(s2), Some(p));
    assert_eq!(t.get(l).ranges, vec![0x108..0x120]);
    assert_eq!(t.get(p).ranges, vec![0x100..0x120]);
}

#[test]
fn first_statement_keeps_overlap() {
    let mut t = ScopeTree::new("m");
    let p = t.add(t.root(), Scope::new(ScopeKind::Procedure));
    let a = t.add(p, stmt(1, &[0x10..0x20]));
    let b = t.add(p, stmt(2, &[0x08..0x30]));
    t.finish();
    assert_eq!(t.lookup(Svma(0x09)), Some(b));
    assert_eq!(t.lookup(Svma(0x10)), Some(a));
    assert_eq!(t.lookup(Svma(0x1f)), Some(a));
    assert_eq!(t.lookup(Svma(0x20)), Some(b));
}

#[test]
fn postcard_round_trip_keeps_lookup() {
    let (t, _, _, _, s2) = sample_tree();
    let bytes = postcard::to_allocvec(&t).unwrap();
    let mut back: ScopeTree = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back.lookup(Svma(0x118)), Some(s2));
    let again = back.intern_file("a.c");
    assert_eq!(again, FileId(0));
}

#[test]
fn validate_accepts_built_trees_and_refuses_broken_links() {
    let (tree, _, l, _, _) = sample_tree();
    assert_eq!(tree.validate(), Ok(()));
    let broken = |edit: &dyn Fn(&mut ScopeTree)| {
        let mut t = tree.clone();
        edit(&mut t);
        t.validate().unwrap_err()
    };
    let last = ScopeId(tree.len() as u32 - 1);
    assert!(broken(&|t| t.scopes[l.index()].parent = Some(l)).contains("not its own"));
    assert!(broken(&|t| t.scopes[0].children.push(ScopeId(99))).contains("child 99"));
    assert!(broken(&|t| t.scopes[0].children.push(l)).contains("is not its own"));
    assert!(broken(&|t| t.scopes[last.index()].file = Some(FileId(50))).contains("file"));
    assert!(broken(&|t| t.index.push((1, 2, ScopeId(77)))).contains("index"));
    let orphan = broken(&|t| t.scopes[l.index()].children.clear());
    assert!(orphan.contains("not listed"), "{orphan}");
    assert!(broken(&|t| t.scopes.clear()).contains("root"));
}

#[test]
fn a_renamed_module_names_its_file_of_unknown_lines_after_the_new_path() {
    let mut tree = ScopeTree::new("/store/ab12/executable");
    let unknown = tree.intern_file("[executable]");
    let mut file = Scope::new(ScopeKind::File);
    file.name = "[executable]".into();
    file.file = Some(unknown);
    tree.add(tree.root(), file);
    tree.intern_file("app.c");
    tree.rename_module("/home/u/app");
    assert_eq!(tree.module_path(), "/home/u/app");
    assert_eq!(tree.files(), ["[app]", "app.c"]);
    assert_eq!(tree.intern_file("[app]"), unknown);
    let names: Vec<&str> = tree.ids().map(|id| &*tree.get(id).name).collect();
    assert_eq!(names, ["/home/u/app", "[app]"]);
}
