//! How a scope is named on screen and in flame graphs, following hpcviewer's conventions:
//! `[I] name` for inlined code, `loop at file: line` for loops, `file: line` for statements and
//! call sites, and placeholders such as `<partial call paths>` and
//! `<unknown procedure> 0xADDR [module]` as they are.

use crate::viewtree::{base_name, NodeKind, ViewNode};

/// hpcviewer's marker for inlined code.
pub const INLINE_MARK: &str = "[I] ";

/// inferno's annotation for an inlined frame (its palettes colour such frames aqua).
pub const FOLDED_INLINE_SUFFIX: &str = "_[i]";

/// inferno's annotation for a kernel frame (drawn orange).
pub const FOLDED_KERNEL_SUFFIX: &str = "_[k]";

/// The name the database gives time spent in the kernel.
pub const KERNEL_NAME: &str = "<kernel>";

/// `file: line` with the file's last path component, `unknown file: line` without a file,
/// and just the file when the line is unknown.
pub fn location(file: Option<&str>, line: Option<u32>) -> String {
    match (file, line) {
        (Some(f), Some(l)) => format!("{}: {l}", base_name(f)),
        (None, Some(l)) => format!("unknown file: {l}"),
        (Some(f), None) => base_name(f).to_string(),
        (None, None) => "unknown file".to_string(),
    }
}

/// The call site that entered a procedure or inlined node, as `file: line`, if recorded.
pub fn call_site(node: &ViewNode) -> Option<String> {
    node.call_line
        .map(|line| location(node.call_file.as_deref(), Some(line)))
}

/// The row label of `node` in the text view. `shorten` turns a procedure name into its
/// displayed form (e.g. [`crate::render::names::shorten`] with the available width).
pub fn text_label(node: &ViewNode, shorten: &dyn Fn(&str) -> String) -> String {
    match node.kind {
        NodeKind::Procedure => shorten(&node.name),
        NodeKind::Inlined => format!("{INLINE_MARK}{}", inlined_name(node, shorten)),
        NodeKind::Loop => loop_label(node),
        NodeKind::Statement => location(node.file.as_deref(), node.line),
        NodeKind::Module | NodeKind::File => base_name(&node.name).to_string(),
        NodeKind::Root | NodeKind::Unknown => node.name.clone(),
    }
}

/// The frame `node` contributes to a folded stack, or `None` for scopes that are not frames
/// (the program root, and statements, whose samples belong to the enclosing frame).
pub fn folded_frame(node: &ViewNode) -> Option<String> {
    let frame = match node.kind {
        NodeKind::Root | NodeKind::Statement => return None,
        NodeKind::Inlined => format!(
            "{}{FOLDED_INLINE_SUFFIX}",
            inlined_name(node, &|n| n.into())
        ),
        NodeKind::Loop => loop_label(node),
        NodeKind::Procedure if node.name == KERNEL_NAME => {
            format!("{KERNEL_NAME}{FOLDED_KERNEL_SUFFIX}")
        }
        NodeKind::Procedure | NodeKind::Module | NodeKind::File | NodeKind::Unknown => {
            node.name.clone()
        }
    };
    // `;` separates frames and a line ends a record; neither may appear inside a frame.
    Some(frame.replace(';', ":").replace(['\n', '\r'], " "))
}

fn loop_label(node: &ViewNode) -> String {
    match (&node.file, node.line) {
        (None, Some(line)) => format!("loop at line {line}"),
        _ => format!("loop at {}", location(node.file.as_deref(), node.line)),
    }
}

/// An inlined scope's name; hpcviewer's `inlined from file: line` when the name is missing.
fn inlined_name(node: &ViewNode, shorten: &dyn Fn(&str) -> String) -> String {
    match node.name.as_str() {
        "" | "-" | "<inline>" => {
            format!("inlined from {}", location(node.file.as_deref(), node.line))
        }
        name => shorten(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_location(kind: NodeKind, name: &str, file: &str, line: u32) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.file = Some(file.into());
        n.line = Some(line);
        n
    }

    fn same(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn labels_follow_hpcviewer() {
        let lp = with_location(NodeKind::Loop, "", "/src/stlmap.cc", 19);
        assert_eq!(text_label(&lp, &same), "loop at stlmap.cc: 19");
        let st = with_location(NodeKind::Statement, "", "/src/stlmap.cc", 20);
        assert_eq!(text_label(&st, &same), "stlmap.cc: 20");
        let inl = with_location(NodeKind::Inlined, "Mp::add", "/src/stlmap.cc", 9);
        assert_eq!(text_label(&inl, &same), "[I] Mp::add");
        let anon = with_location(NodeKind::Inlined, "<inline>", "/usr/include/x.h", 7);
        assert_eq!(text_label(&anon, &same), "[I] inlined from x.h: 7");
        let mut stmt = ViewNode::new(NodeKind::Statement, "", 1);
        stmt.line = Some(3);
        assert_eq!(text_label(&stmt, &same), "unknown file: 3");
    }

    #[test]
    fn folded_frames_mark_inlining_and_skip_statements() {
        let inl = with_location(NodeKind::Inlined, "Mp::add", "/src/stlmap.cc", 9);
        assert_eq!(folded_frame(&inl).unwrap(), "Mp::add_[i]");
        let lp = with_location(NodeKind::Loop, "", "/src/stlmap.cc", 19);
        assert_eq!(folded_frame(&lp).unwrap(), "loop at stlmap.cc: 19");
        let st = with_location(NodeKind::Statement, "", "/src/stlmap.cc", 20);
        assert_eq!(folded_frame(&st), None);
        let kernel = ViewNode::new(NodeKind::Procedure, KERNEL_NAME, 1);
        assert_eq!(folded_frame(&kernel).unwrap(), "<kernel>_[k]");
        let odd = ViewNode::new(NodeKind::Procedure, "a;b", 1);
        assert_eq!(folded_frame(&odd).unwrap(), "a:b");
    }

    #[test]
    fn call_sites_read_file_colon_line() {
        let mut n = ViewNode::new(NodeKind::Procedure, "f", 1);
        assert_eq!(call_site(&n), None);
        n.call_file = Some("/a/b/main.c".into());
        n.call_line = Some(12);
        assert_eq!(call_site(&n).unwrap(), "main.c: 12");
    }
}
