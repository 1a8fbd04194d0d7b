//! Writing scope trees as HPCToolkit structure files (hpcstruct XML, version 4.9).
//!
//! The output follows what HPCToolkit's `hpcstruct` writes and its `hpcprof` accepts: an inline
//! DTD, one element per line, `i` numbered in pre-order (root 0, each `LM` restarting at 2),
//! `P` and `L` with a one-byte `v` (entry / loop header), inlined calls as double aliens, and
//! guard aliens (`A n="<inline>"`) around statements and loops whose file differs from the
//! enclosing scope's or whose line precedes their procedure's line.

use crate::error::StructureError;
use crate::scope::{module_basename, FileId, Scope, ScopeId, ScopeKind, ScopeTree};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;

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
        let mut writer = TreeWriter {
            tree,
            out: String::with_capacity(2 * SPILL_AT),
            sink: &mut *out,
            next_index: 2,
            lib_suffix: if tree.is_shared_library() {
                library_suffix(tree.module_path())
            } else {
                String::new()
            },
            files: tree
                .files()
                .iter()
                .map(|f| escape(f).into_owned())
                .collect(),
        };
        writer.module()?;
        writer.sink.write_all(writer.out.as_bytes())?;
    }
    out.write_all(b"</HPCToolkitStructure>\n")
}

/// `" [libfoo.so]"`: what HPCToolkit appends to the procedure names of a shared library.
pub(crate) fn library_suffix(module_path: &str) -> String {
    format!(" [{}]", module_basename(module_path))
}

/// Bytes of text gathered before they are handed to the output: the text of a whole module
/// would be hundreds of megabytes for a large binary, grown by copying.
const SPILL_AT: usize = 1 << 16;

struct TreeWriter<'a, 'w> {
    tree: &'a ScopeTree,
    /// Text not yet written to `sink`.
    out: String,
    sink: &'w mut dyn Write,
    next_index: u64,
    lib_suffix: String,
    /// Each file's path, escaped once (inlined code names its files hundreds of thousands of
    /// times), indexed by `FileId.0`.
    files: Vec<String>,
}

impl<'a> TreeWriter<'a, '_> {
    fn index(&mut self) -> u64 {
        let i = self.next_index;
        self.next_index += 1;
        i
    }

    fn module(&mut self) -> io::Result<()> {
        let root = self.tree.get(self.tree.root());
        let i = self.index();
        let _ = writeln!(
            self.out,
            "<LM i=\"{i}\" n=\"{}\" has-calls=\"0\" v=\"{{}}\">",
            escape(&root.name)
        );
        if let Some(identity) = self.tree.identity() {
            let _ = writeln!(self.out, "<!--{}-->", identity.comment());
        }
        for &child in &root.children {
            self.scope(child, None)?;
        }
        self.out.push_str("</LM>\n");
        Ok(())
    }

    /// Append file `file`'s path, escaped, as an attribute value.
    fn push_file(&mut self, file: Option<FileId>) {
        match file {
            Some(f) => self.out.push_str(&self.files[f.0 as usize]),
            None => self.out.push_str(UNKNOWN_FILE),
        }
    }

    /// Write scope `id`; `context` is the enclosing P, A or L (for guard aliens), if any.
    fn scope(&mut self, id: ScopeId, context: Option<Context<'_>>) -> io::Result<()> {
        let scope = self.tree.get(id);
        match scope.kind {
            ScopeKind::Module => Err(io::Error::other("module scope below the root")),
            ScopeKind::File => self.file(scope),
            ScopeKind::Procedure => self.procedure(scope),
            ScopeKind::Alien {
                call_file,
                call_line,
            } => self.alien(scope, call_file, call_line),
            ScopeKind::Loop | ScopeKind::Statement => match context {
                Some(ctx) if needs_guard(scope, ctx.scope, ctx.earliest_line) => {
                    self.open("<A i=\"", scope.line);
                    self.push_file(scope.file);
                    self.out.push_str("\" n=\"");
                    push_escaped(&mut self.out, GUARD_NAME);
                    self.out.push_str("\" v=\"{}\">\n");
                    self.leaf_or_loop(scope, ctx.earliest_line)?;
                    self.out.push_str("</A>\n");
                    Ok(())
                }
                _ => self.leaf_or_loop(scope, context.map_or(0, |c| c.earliest_line)),
            },
        }
    }

    /// Append `tag` (up to its `i` value's quote), the next index, and ` l="LINE" f="` as
    /// statements, loops and aliens begin.
    fn open(&mut self, tag: &str, line: u32) {
        let i = self.index();
        self.out.push_str(tag);
        push_decimal(&mut self.out, i);
        self.out.push_str("\" l=\"");
        push_decimal(&mut self.out, line);
        self.out.push_str("\" f=\"");
    }

    fn file(&mut self, scope: &Scope) -> io::Result<()> {
        let i = self.index();
        self.out.push_str("<F i=\"");
        push_decimal(&mut self.out, i);
        self.out.push_str("\" n=\"");
        push_escaped(&mut self.out, &scope.name);
        self.out.push_str("\">\n");
        for &child in &scope.children {
            self.scope(child, None)?;
        }
        self.out.push_str("</F>\n");
        Ok(())
    }

    fn procedure(&mut self, scope: &Scope) -> io::Result<()> {
        let i = self.index();
        self.out.push_str("<P i=\"");
        push_decimal(&mut self.out, i);
        self.out.push_str("\" n=\"");
        push_escaped(&mut self.out, &scope.name);
        push_escaped(&mut self.out, &self.lib_suffix);
        self.out.push('"');
        let link = scope.link_name.as_deref().unwrap_or(&scope.name);
        if !self.lib_suffix.is_empty() || link != scope.name {
            push_attr(&mut self.out, "ln", link);
        }
        let entry = scope.entry.or(scope.low_address()).unwrap_or(0);
        self.out.push_str(" l=\"");
        push_decimal(&mut self.out, scope.line);
        self.out.push_str("\" v=\"");
        push_one_byte(&mut self.out, entry);
        self.out.push_str("\">\n");
        self.children(scope, scope.line)?;
        self.out.push_str("</P>\n");
        if self.out.len() >= SPILL_AT {
            self.sink.write_all(self.out.as_bytes())?;
            self.out.clear();
        }
        Ok(())
    }

    /// Write the children of `scope`, whose statements and loops need a guard alien before
    /// `earliest_line` (see [`Context`]).
    fn children(&mut self, scope: &Scope, earliest_line: u32) -> io::Result<()> {
        let context = (scope.kind != ScopeKind::Statement).then_some(Context {
            scope,
            earliest_line,
        });
        for &child in &scope.children {
            self.scope(child, context)?;
        }
        Ok(())
    }

    fn alien(
        &mut self,
        scope: &Scope,
        call_file: Option<FileId>,
        call_line: u32,
    ) -> io::Result<()> {
        self.open("<A i=\"", call_line);
        self.push_file(call_file);
        self.out.push_str("\" n=\"\" v=\"{}\">\n");
        self.open("<A i=\"", scope.line);
        self.push_file(scope.file);
        self.out.push_str("\" n=\"");
        push_escaped(&mut self.out, &scope.name);
        self.out.push('"');
        if let Some(ln) = scope.link_name.as_deref().filter(|ln| *ln != scope.name) {
            push_attr(&mut self.out, "ln", ln);
        }
        self.out.push_str(" v=\"{}\">\n");
        // Inside inlined code the lines are the callee's: no line is too early.
        self.children(scope, 0)?;
        self.out.push_str("</A>\n</A>\n");
        Ok(())
    }

    /// Write a statement, or a loop with what it holds (`earliest_line`: its context's).
    fn leaf_or_loop(&mut self, scope: &Scope, earliest_line: u32) -> io::Result<()> {
        if scope.kind == ScopeKind::Statement {
            let i = self.index();
            self.out.push_str("<S i=\"");
            push_decimal(&mut self.out, i);
            self.out.push_str("\" l=\"");
            push_decimal(&mut self.out, scope.line);
            self.out.push_str("\" v=\"");
            push_ranges(&mut self.out, &scope.ranges);
            self.out.push_str("\"/>\n");
            return Ok(());
        }
        let header = scope.entry.or(scope.low_address()).unwrap_or(0);
        self.open("<L i=\"", scope.line);
        self.push_file(scope.file);
        self.out.push_str("\" v=\"");
        push_one_byte(&mut self.out, header);
        self.out.push_str("\">\n");
        self.children(scope, earliest_line)?;
        self.out.push_str("</L>\n");
        Ok(())
    }
}

/// The scope whose children are being written, and the line before which its statements and
/// loops need a guard alien: the procedure's line in a procedure and its loops, 0 (no such
/// rule) inside inlined code, whose lines belong to the callee.
#[derive(Clone, Copy)]
struct Context<'a> {
    scope: &'a Scope,
    earliest_line: u32,
}

/// Whether a statement or loop directly inside procedure/loop `ctx` must be wrapped in a guard
/// alien: its file differs from the context's, or its line precedes `earliest_line`.
fn needs_guard(scope: &Scope, ctx: &Scope, earliest_line: u32) -> bool {
    let other_file = scope.file.is_some() && ctx.file.is_some() && scope.file != ctx.file;
    other_file || (scope.line != 0 && scope.line < earliest_line)
}

/// Append ranges as hpcstruct's `v` attribute: `{[0x10-0x20) [0x30-0x38)}`.
fn push_ranges(out: &mut String, ranges: &[Range<u64>]) {
    out.push('{');
    for (k, r) in ranges.iter().enumerate() {
        if k > 0 {
            out.push(' ');
        }
        out.push('[');
        push_hex(out, r.start);
        out.push('-');
        push_hex(out, r.end);
        out.push(')');
    }
    out.push('}');
}

/// The `v` of a `P` or `L`: the single byte at `addr`.
fn push_one_byte(out: &mut String, addr: u64) {
    push_ranges(out, std::slice::from_ref(&(addr..addr + 1)));
}

/// C's `%#lx`: `0` for zero, `0x…` otherwise.
fn push_hex(out: &mut String, v: u64) {
    if v == 0 {
        out.push('0');
        return;
    }
    let mut digits = [0u8; 18];
    let mut at = digits.len();
    let mut rest = v;
    while rest != 0 {
        at -= 1;
        digits[at] = b"0123456789abcdef"[(rest & 0xf) as usize];
        rest >>= 4;
    }
    at -= 2;
    digits[at..at + 2].copy_from_slice(b"0x");
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// Append `v` in decimal.
fn push_decimal(out: &mut String, v: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// Escape an attribute value the way hpcstruct does (`< > & "`), plus control characters.
fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.bytes().any(|b| entity(b).is_some()) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    push_escaped(&mut out, s);
    out.into()
}

/// Append ` NAME="VALUE"` to `out`, the value escaped.
fn push_attr(out: &mut String, name: &str, value: &str) {
    out.push(' ');
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value);
    out.push('"');
}

/// Append `s` to `out` escaped as [`escape`] does.
fn push_escaped(out: &mut String, s: &str) {
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        if let Some(e) = entity(b) {
            // The characters replaced are ASCII: `i` is a character boundary.
            out.push_str(&s[start..i]);
            out.push_str(e);
            start = i + 1;
        }
    }
    out.push_str(&s[start..]);
}

/// The entity that stands for byte `b` in an attribute value, if it needs one.
fn entity(b: u8) -> Option<&'static str> {
    Some(match b {
        b'<' => "&lt;",
        b'>' => "&gt;",
        b'&' => "&amp;",
        b'"' => "&quot;",
        b'\n' => "&#10;",
        b'\r' => "&#13;",
        b'\t' => "&#9;",
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn ranges_format_like_hpcstruct() {
        let mut s = String::new();
        push_ranges(&mut s, &[0..0x10, 0x1147..0x1172]);
        assert_eq!(s, "{[0-0x10) [0x1147-0x1172)}");
        s.clear();
        push_ranges(&mut s, &[]);
        assert_eq!(s, "{}");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b> & \"c\"'"), "a&lt;b&gt; &amp; &quot;c&quot;'");
    }
}
