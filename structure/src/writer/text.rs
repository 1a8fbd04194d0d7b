//! The text of a structure file's elements: one scope at a time, numbered from a given index,
//! so that parts of a module can be formatted apart (in parallel) and joined in order.

use super::{library_suffix, GUARD_NAME, UNKNOWN_FILE};
use crate::scope::{FileId, Scope, ScopeId, ScopeKind, ScopeTree};
use std::fmt::Write as _;
use std::io;
use std::ops::Range;

/// What every scope of one module is written with.
pub(super) struct Style {
    /// `" [libfoo.so]"` after procedure names of a shared library, else empty.
    lib_suffix: String,
    /// Each file's path, escaped once (inlined code names its files hundreds of thousands of
    /// times), indexed by `FileId.0`.
    files: Vec<String>,
}

impl Style {
    /// The style of `tree`'s module.
    pub(super) fn of(tree: &ScopeTree) -> Style {
        Style {
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
        }
    }
}

/// Formats scopes of one tree as structure-file text, numbering elements from a given index.
pub(super) struct Formatter<'a> {
    tree: &'a ScopeTree,
    style: &'a Style,
    /// The text so far.
    pub(super) out: String,
    next_index: u64,
}

impl<'a> Formatter<'a> {
    /// A formatter whose first element gets index `first_index`.
    pub(super) fn new(tree: &'a ScopeTree, style: &'a Style, first_index: u64) -> Self {
        Formatter {
            tree,
            style,
            out: String::new(),
            next_index: first_index,
        }
    }

    /// The number the next element gets.
    pub(super) fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Append `tag` (an element's name and ` i="`) and the next element number.
    fn element(&mut self, tag: &str) {
        self.out.push_str(tag);
        push_decimal(&mut self.out, self.next_index);
        self.next_index += 1;
    }

    /// The module's opening tag and the comment recording its build.
    pub(super) fn module_open(&mut self) {
        let root = self.tree.get(self.tree.root());
        self.element("<LM i=\"");
        let _ = writeln!(
            self.out,
            "\" n=\"{}\" has-calls=\"0\" v=\"{{}}\">",
            escape(&root.name)
        );
        if let Some(identity) = self.tree.identity() {
            let _ = writeln!(self.out, "<!--{}-->", identity.comment());
        }
    }

    /// Append file `file`'s path, escaped, as an attribute value.
    fn push_file(&mut self, file: Option<FileId>) {
        match file {
            Some(f) => self.out.push_str(&self.style.files[f.0 as usize]),
            None => self.out.push_str(UNKNOWN_FILE),
        }
    }

    /// Write scope `id`; `context` is the enclosing P, A or L (for guard aliens), if any.
    pub(super) fn scope(&mut self, id: ScopeId, context: Option<Context<'_>>) -> io::Result<()> {
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
        self.element(tag);
        self.out.push_str("\" l=\"");
        push_decimal(&mut self.out, line);
        self.out.push_str("\" f=\"");
    }

    fn file(&mut self, scope: &Scope) -> io::Result<()> {
        self.file_open(scope);
        for &child in &scope.children {
            self.scope(child, None)?;
        }
        self.out.push_str("</F>\n");
        Ok(())
    }

    /// A file's opening tag.
    pub(super) fn file_open(&mut self, scope: &Scope) {
        self.element("<F i=\"");
        self.out.push_str("\" n=\"");
        push_escaped(&mut self.out, &scope.name);
        self.out.push_str("\">\n");
    }

    fn procedure(&mut self, scope: &Scope) -> io::Result<()> {
        self.element("<P i=\"");
        self.out.push_str("\" n=\"");
        push_escaped(&mut self.out, &scope.name);
        push_escaped(&mut self.out, &self.style.lib_suffix);
        self.out.push('"');
        let link = scope.link_name.as_deref().unwrap_or(&scope.name);
        if !self.style.lib_suffix.is_empty() || link != &*scope.name {
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
        Ok(())
    }

    /// Write the children of `scope`, whose statements and loops need a guard alien before
    /// `earliest_line` (see [`Context`]).
    fn children(&mut self, scope: &Scope, earliest_line: u32) -> io::Result<()> {
        let context = Context::inside(scope, earliest_line);
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
        if let Some(ln) = scope.link_name.as_deref().filter(|ln| *ln != &*scope.name) {
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
            self.element("<S i=\"");
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
pub(super) struct Context<'a> {
    scope: &'a Scope,
    earliest_line: u32,
}

impl<'a> Context<'a> {
    /// The context of `scope`'s children (none below a statement).
    fn inside(scope: &'a Scope, earliest_line: u32) -> Option<Context<'a>> {
        (scope.kind != ScopeKind::Statement).then_some(Context {
            scope,
            earliest_line,
        })
    }
}

/// Whether a statement or loop directly inside procedure/loop `ctx` must be wrapped in a guard
/// alien: its file differs from the context's, or its line precedes `earliest_line`.
fn needs_guard(scope: &Scope, ctx: &Scope, earliest_line: u32) -> bool {
    let other_file = scope.file.is_some() && ctx.file.is_some() && scope.file != ctx.file;
    other_file || (scope.line != 0 && scope.line < earliest_line)
}

/// How many elements (`i` indices) [`Formatter::scope`] writes for scope `id` in `context`:
/// the numbering of what follows it, known before it is formatted.
pub(super) fn indices(tree: &ScopeTree, id: ScopeId, context: Option<Context<'_>>) -> u64 {
    let scope = tree.get(id);
    let below = |earliest_line: u32| {
        let inner = Context::inside(scope, earliest_line);
        (scope.children.iter())
            .map(|&c| indices(tree, c, inner))
            .sum::<u64>()
    };
    match scope.kind {
        ScopeKind::Module => 0,
        ScopeKind::File => {
            1 + (scope.children.iter())
                .map(|&c| indices(tree, c, None))
                .sum::<u64>()
        }
        ScopeKind::Procedure => 1 + below(scope.line),
        ScopeKind::Alien { .. } => 2 + below(0),
        ScopeKind::Statement | ScopeKind::Loop => {
            let earliest_line = context.map_or(0, |c| c.earliest_line);
            let guard = context.is_some_and(|c| needs_guard(scope, c.scope, c.earliest_line));
            let own = if scope.kind == ScopeKind::Loop {
                below(earliest_line)
            } else {
                0
            };
            1 + u64::from(guard) + own
        }
    }
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
    // Digit by digit, most significant first: the digits are ASCII, so no UTF-8 check of a
    // buffer of them is needed (that check was 1.8% of libpython's instructions).
    out.push_str("0x");
    let digits = (u64::BITS - v.leading_zeros()).div_ceil(4);
    for d in (0..digits).rev() {
        out.push(char::from(
            b"0123456789abcdef"[((v >> (4 * d)) & 0xf) as usize],
        ));
    }
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
        for (v, hex) in [
            (0x1, "0x1"),
            (0xf, "0xf"),
            (0x10, "0x10"),
            (u64::MAX, "0xffffffffffffffff"),
        ] {
            s.clear();
            push_hex(&mut s, v);
            assert_eq!(s, hex);
        }
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b> & \"c\"'"), "a&lt;b&gt; &amp; &quot;c&quot;'");
    }
}
