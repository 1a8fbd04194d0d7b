//! Renderers: the ways `hpcview-rs` prints a [`ViewTree`](crate::ViewTree).
//!
//! - [`text`]: the indented tree for people (threshold folding, hot path, colour on a terminal);
//! - [`json`]: the documented JSON contract for scripts;
//! - [`folded`]: folded stacks for inferno-flamegraph and flamegraph.pl;
//! - [`flame`]: the same stacks drawn as a flame graph (SVG) with no other tool;
//! - [`source`]: source lines annotated with their costs; [`asm`]: a procedure's machine code
//!   annotated with its instructions' costs;
//! - [`data`]: the data views' tables (objects, an object's fields);
//! - [`delinquent`], [`alloc`]: the delinquent instructions (text, CSV, JSON) and the
//!   allocation sites (text, JSON); [`dhat`]: the allocation sites as a DHAT file;
//! - [`stats`]: statistics across ranks or threads per scope (text, JSON).
//! - [`diff`]: two databases compared (text, JSON, folded stacks with two counts).
//! - [`timeline`], [`memmap`]: the traces as threads x time and the data traces as time x
//!   pages (text, JSON, CSV, SVG and PNG through [`raster`]).
//!
//! Every scope's name comes from the view (hpcviewer's rules, applied by the database's
//! naming); renderers only lay it out.
//! Every renderer walks the tree with an explicit stack, so a view as deep as the deepest
//! recursion a profile can record (hundreds of thousands of levels) prints on an ordinary
//! thread stack, and indentation stops growing at [`MAX_INDENT_LEVELS`] so that output stays
//! linear in the number of rows rather than quadratic in the depth.

use std::borrow::Cow;
use std::fmt::Write as _;

pub mod alloc;
pub mod asm;
pub mod csv;
pub mod data;
pub mod delinquent;
pub mod dhat;
pub mod diff;
pub mod flame;
pub mod folded;
pub mod footprint;
pub mod json;
pub mod memmap;
pub mod raster;
pub mod slices;
pub mod source;
pub mod stats;
mod table;
pub mod text;
pub mod timeline;

/// Nesting levels that get their own indentation in the text and JSON outputs; deeper levels
/// are indented as this one (the text view then writes the depth before the label).
pub const MAX_INDENT_LEVELS: usize = 100;

/// Spaces for `levels` levels of nesting, two per level, capped at [`MAX_INDENT_LEVELS`].
pub(crate) fn indent(levels: usize) -> String {
    " ".repeat(2 * levels.min(MAX_INDENT_LEVELS))
}

/// `text`, cut to `chars` characters with an ellipsis where it was longer (a legend's names).
pub(crate) fn shortened(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The whole of `text` where [`shortened`] to `chars` characters cuts it (a picture's tooltip),
/// else `None`.
pub(crate) fn whole_if_cut(text: &str, chars: usize) -> Option<String> {
    (text.chars().count() > chars).then(|| text.to_string())
}

/// `text` with control characters (escape sequences, line breaks, ...) spelled out as `\x1b` or
/// `\u{85}`, so that a name from a profiled program cannot drive the reader's terminal.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c as u32 {
            _ if !c.is_control() => out.push(c),
            code @ 0..=0x7f => {
                let _ = write!(out, "\\x{code:02x}");
            }
            code => {
                let _ = write!(out, "\\u{{{code:x}}}");
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_spelled_out() {
        assert_eq!(printable("plain::name<int>"), "plain::name<int>");
        assert_eq!(printable("evil\x1b[2Jname"), "evil\\x1b[2Jname");
        assert_eq!(printable("a\nb\tc"), "a\\x0ab\\x09c");
        assert_eq!(printable("x\u{85}y"), "x\\u{85}y");
        assert_eq!(printable("ünïcode"), "ünïcode");
    }

    #[test]
    fn indentation_is_capped() {
        assert_eq!(indent(3), "      ");
        assert_eq!(indent(1_000_000).len(), 2 * MAX_INDENT_LEVELS);
    }
}
