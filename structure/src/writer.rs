//! Writing scope trees as HPCToolkit structure files (hpcstruct XML, version 4.9).
//!
//! The output follows what HPCToolkit's `hpcstruct` writes and its `hpcprof` accepts: an inline
//! DTD, one element per line, `i` numbered in pre-order (root 0, each `LM` restarting at 2),
//! `P` and `L` with a one-byte `v` (entry / loop header), inlined calls as double aliens, and
//! guard aliens (`A n="<inline>"`) around statements and loops whose file differs from the
//! enclosing scope's or whose line precedes their procedure's line.

mod text;

use crate::error::StructureError;
use crate::scope::{module_basename, ScopeId, ScopeKind, ScopeTree};
use rayon::prelude::*;
use std::io::{self, Write};
use std::path::Path;
use text::{indices, Formatter, Style};

/// The document type declaration written at the top of every file (format version 4.9).
const DOCTYPE: &str = r#"<!DOCTYPE HPCToolkitStructure [
<!-- HPCToolkit structure file, format 4.9 (written by hpcstruct-rs). -->
<!-- Scopes: LM load module, F file, P procedure, A alien (inlined code), L loop,
     S statement, C call site. v: half-open link-time address ranges {[lo-hi) ...}. -->
<!ELEMENT HPCToolkitStructure (LM)*>
<!ATTLIST HPCToolkitStructure version CDATA #REQUIRED i CDATA #REQUIRED n CDATA #IMPLIED>
<!ELEMENT LM (F|P)*>
<!ATTLIST LM i CDATA #REQUIRED n CDATA #REQUIRED has-calls CDATA #REQUIRED v CDATA #IMPLIED>
<!ELEMENT F (P|L|S)*>
<!ATTLIST F i CDATA #REQUIRED n CDATA #REQUIRED>
<!ELEMENT P (P|A|L|S|C)*>
<!ATTLIST P i CDATA #REQUIRED n CDATA #REQUIRED ln CDATA #IMPLIED l CDATA #IMPLIED
          s CDATA #IMPLIED v CDATA #IMPLIED>
<!ELEMENT A (A|L|S|C)*>
<!ATTLIST A i CDATA #REQUIRED f CDATA #IMPLIED n CDATA #IMPLIED ln CDATA #IMPLIED
          l CDATA #IMPLIED v CDATA #IMPLIED>
<!ELEMENT L (A|L|S|C)*>
<!ATTLIST L i CDATA #REQUIRED l CDATA #REQUIRED f CDATA #IMPLIED v CDATA #IMPLIED>
<!ELEMENT S EMPTY>
<!ATTLIST S i CDATA #REQUIRED l CDATA #REQUIRED v CDATA #IMPLIED>
<!ELEMENT C (C)*>
<!ATTLIST C i CDATA #REQUIRED l CDATA #REQUIRED v CDATA #IMPLIED t CDATA #IMPLIED
          d CDATA #IMPLIED>
]>
"#;

/// Name HPCToolkit gives guard aliens.
pub(crate) const GUARD_NAME: &str = "<inline>";

/// File name written for an unknown call-site file.
pub(crate) const UNKNOWN_FILE: &str = "<unknown>";

/// Write `trees` (one per load module) as one structure file at `path`, atomically: into a
/// temporary file beside it, then renamed into place (a symlink at `path` is replaced, never
/// written through; a failed write leaves any earlier file whole).
pub fn write_structure_file(path: &Path, trees: &[ScopeTree]) -> Result<(), StructureError> {
    use profiler::envelope::{write_atomically_with, EnvelopeError, Replace};
    write_atomically_with(path, Replace::Allowed, |mut out| {
        write_structure(&mut out, trees)
    })
    .map_err(|e| StructureError::Io {
        path: path.to_path_buf(),
        source: match e {
            EnvelopeError::Io { source, .. } => source,
            other => io::Error::other(other.to_string()),
        },
    })
}

/// Write `trees` (one per load module) as a structure document to `out`.
pub fn write_structure<W: Write>(out: &mut W, trees: &[ScopeTree]) -> io::Result<()> {
    out.write_all(b"<?xml version=\"1.0\"?>\n")?;
    out.write_all(DOCTYPE.as_bytes())?;
    out.write_all(b"<HPCToolkitStructure i=\"0\" version=\"4.9\" n=\"\">\n")?;
    for tree in trees {
        write_module(out, tree)?;
    }
    out.write_all(b"</HPCToolkitStructure>\n")
}

/// One part of a module's text, in document order.
#[derive(Clone, Copy)]
enum Piece {
    /// A file's opening tag.
    FileOpen(ScopeId),
    /// A file's closing tag.
    FileClose,
    /// A scope directly in the module or in a file, with all below it.
    Scope(ScopeId),
}

/// Pieces formatted together, then written in order: a few megabytes of text (ripgrep's
/// peak, while its 124 MB file is written: 174 MB with 512 a batch, 165 MB with 128).
const BATCH: usize = 128;

/// Write one module. Its scopes below the module and file level (procedures) are formatted in
/// parallel, a batch at a time, each numbered from its first index, known beforehand from
/// what the scopes before it take ([`indices`]); the text is the same as one formatter's.
fn write_module<W: Write>(out: &mut W, tree: &ScopeTree) -> io::Result<()> {
    let style = Style::of(tree);
    let mut start = Formatter::new(tree, &style, 2);
    start.module_open();
    out.write_all(start.out.as_bytes())?;
    let pieces = pieces(tree);
    let sizes: Vec<u64> = pieces
        .par_iter()
        .map(|piece| match *piece {
            Piece::FileOpen(_) => 1,
            Piece::FileClose => 0,
            Piece::Scope(id) => indices(tree, id, None),
        })
        .collect();
    let firsts: Vec<u64> = sizes
        .iter()
        .scan(start.next_index(), |next, size| {
            let first = *next;
            *next += size;
            Some(first)
        })
        .collect();
    for (batch, firsts) in pieces.chunks(BATCH).zip(firsts.chunks(BATCH)) {
        let texts: Vec<io::Result<String>> = (batch.par_iter().zip(firsts))
            .map(|(piece, &first)| {
                let mut text = Formatter::new(tree, &style, first);
                match *piece {
                    Piece::FileOpen(id) => text.file_open(tree.get(id)),
                    Piece::FileClose => text.out.push_str("</F>\n"),
                    Piece::Scope(id) => text.scope(id, None)?,
                }
                Ok(text.out)
            })
            .collect();
        for text in texts {
            out.write_all(text?.as_bytes())?;
        }
    }
    out.write_all(b"</LM>\n")
}

/// The module's text in pieces: each file split into its opening tag, its scopes and its
/// closing tag, every other scope in the module whole.
fn pieces(tree: &ScopeTree) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for &child in &tree.get(tree.root()).children {
        let scope = tree.get(child);
        if scope.kind == ScopeKind::File {
            pieces.push(Piece::FileOpen(child));
            pieces.extend(scope.children.iter().map(|&c| Piece::Scope(c)));
            pieces.push(Piece::FileClose);
        } else {
            pieces.push(Piece::Scope(child));
        }
    }
    pieces
}

/// `" [libfoo.so]"`: what HPCToolkit appends to the procedure names of a shared library.
pub(crate) fn library_suffix(module_path: &str) -> String {
    format!(" [{}]", module_basename(module_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Scope;

    /// A module of `procedures` procedures in three files, each with a guarded statement (its
    /// line before the procedure's), an inlined call holding a loop, and a statement in it.
    fn module(procedures: u32) -> ScopeTree {
        let mut tree = ScopeTree::new("/bin/app");
        let files: Vec<_> = (0..3)
            .map(|f| {
                let id = tree.intern_file(&format!("/src/f{f}.c"));
                let mut scope = Scope::new(ScopeKind::File);
                scope.name = format!("/src/f{f}.c").into();
                scope.file = Some(id);
                (id, tree.add(tree.root(), scope))
            })
            .collect();
        for p in 0..procedures {
            let (file, parent) = files[(p % 3) as usize];
            let at = u64::from(p) * 0x100;
            let mut procedure = Scope::new(ScopeKind::Procedure);
            procedure.name = format!("f{p}").into();
            procedure.file = Some(file);
            procedure.line = 10;
            procedure.entry = Some(at);
            let proc_id = tree.add(parent, procedure);
            let statement = |line, range: std::ops::Range<u64>| {
                let mut s = Scope::new(ScopeKind::Statement);
                s.file = Some(file);
                s.line = line;
                s.ranges = vec![range];
                s
            };
            tree.add(proc_id, statement(5, at..at + 4));
            let mut alien = Scope::new(ScopeKind::Alien {
                call_file: Some(file),
                call_line: 12,
            });
            alien.name = "inlined".into();
            alien.file = Some(file);
            alien.line = 1;
            let alien_id = tree.add(proc_id, alien);
            let mut lp = Scope::new(ScopeKind::Loop);
            lp.file = Some(file);
            lp.line = 2;
            lp.entry = Some(at + 8);
            let loop_id = tree.add(alien_id, lp);
            tree.add(loop_id, statement(3, at + 8..at + 16));
        }
        tree.finish();
        tree
    }

    /// Every element's `i`, in document order.
    fn indices_in(text: &str) -> Vec<u64> {
        text.split(" i=\"")
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
            .collect()
    }

    #[test]
    fn elements_are_numbered_in_document_order_across_batches() {
        // More procedures than one batch formats, so that numbers run on from batch to batch.
        let procedures = 3 * BATCH as u32 / 2;
        let mut out = Vec::new();
        write_structure(&mut out, &[module(procedures)]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let numbers = indices_in(&text);
        // Root 0, module 2, then one number per element: 3 files, and per procedure the
        // procedure, a guard and its statement, two aliens, a loop and its statement.
        assert_eq!(numbers.len() as u64, 2 + 3 + 7 * u64::from(procedures));
        assert_eq!(&numbers[..2], &[0, 2]);
        assert!(numbers[2..].iter().zip(3..).all(|(&n, want)| n == want));
        assert_eq!(
            text.matches("n=\"&lt;inline&gt;\"").count() as u32,
            procedures
        );
    }
}
