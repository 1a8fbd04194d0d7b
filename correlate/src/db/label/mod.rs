//! How scopes are named, in one place, following hpcviewer's conventions: `[I] name` for
//! inlined code, `loop at FILE: LINE` for loops, `FILE: LINE` for statements and call sites,
//! `<unknown procedure> 0xADDR [module]` for code no structure covers, and placeholders such as
//! `<partial call paths>` as they are.
//!
//! A scope's [`name`] is made once, when a view node (or a database label) is built: it is the
//! `name` of `hpcview-rs --json`, the text of a flame-graph frame, and what the text view prints
//! after [`display`] adds the inlined-code mark. So text, JSON, folded stacks and
//! [`Database::label`](crate::Database::label) cannot disagree about what a scope is called.

mod names;

use crate::db::node::NodeKind;

/// hpcviewer's mark before inlined code.
pub(crate) const INLINE_MARK: &str = "[I] ";

/// Names the structure gives inlined code whose callee it does not know.
const ANONYMOUS_INLINED: &[&str] = &["", "-", "<inline>"];

/// The name of a scope of `kind` whose raw name (a procedure's name, a path, a placeholder) is
/// `raw`, in source file `file` (a full path) at line `line`:
///
/// - inlined code: the callee's name, or hpcviewer's `inlined from FILE: LINE` without one;
/// - a loop: `loop at FILE: LINE` (`loop at line LINE` when the file is unknown);
/// - a statement: `FILE: LINE` (see [`location`]);
/// - anything else (procedures, unknown procedures, the kernel, roots, modules, files): `raw`.
pub(crate) fn name(kind: NodeKind, raw: &str, file: Option<&str>, line: Option<u32>) -> String {
    match kind {
        NodeKind::Inlined if ANONYMOUS_INLINED.contains(&raw) => {
            format!("inlined from {}", location(file, line))
        }
        NodeKind::Loop => match (file, line) {
            (None, Some(l)) => format!("loop at line {l}"),
            _ => format!("loop at {}", location(file, line)),
        },
        NodeKind::Statement => location(file, line),
        _ => raw.to_string(),
    }
}

/// The label a person reads for a scope of `kind` called `name` (see [`name`]): `[I] name` for
/// inlined code, the last component of a module's or file's path, `name` otherwise. With a
/// `width`, procedure names (of procedures, inlined code and the kernel) are shortened to fit it
/// (see [`names::shorten`]).
pub(crate) fn display(kind: NodeKind, name: &str, width: Option<usize>) -> String {
    let procedure = || match width {
        Some(w) => names::shorten(name, w),
        None => name.to_string(),
    };
    match kind {
        NodeKind::Inlined => format!("{INLINE_MARK}{}", procedure()),
        NodeKind::Procedure | NodeKind::Kernel => procedure(),
        NodeKind::Module | NodeKind::File => base_name(name).to_string(),
        _ => name.to_string(),
    }
}

/// `FILE: LINE` with the file's last path component, `unknown file: LINE` without a file, and
/// just the file when the line is unknown.
pub(crate) fn location(file: Option<&str>, line: Option<u32>) -> String {
    match (file, line) {
        (Some(f), Some(l)) => format!("{}: {l}", base_name(f)),
        (None, Some(l)) => format!("unknown file: {l}"),
        (Some(f), None) => base_name(f).to_string(),
        (None, None) => "unknown file".to_string(),
    }
}

/// A call site as `FILE: LINE` (see [`location`]), if its line is known.
pub(crate) fn call_site(file: Option<&str>, line: Option<u32>) -> Option<String> {
    line.map(|line| location(file, Some(line)))
}

/// The name of code no structure covers: `<unknown procedure> 0xADDR [module]`, the module by
/// the last component of its path.
pub(crate) fn unknown_procedure(addr: u64, module: Option<&str>) -> String {
    match module {
        Some(m) => format!("<unknown procedure> {addr:#x} [{}]", base_name(m)),
        None => format!("<unknown procedure> {addr:#x}"),
    }
}

/// The address in a name [`unknown_procedure`] made, if `name` is one.
pub(crate) fn unknown_address(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("<unknown procedure> 0x")?;
    let hex = rest.split(' ').next()?;
    u64::from_str_radix(hex, 16).ok()
}

/// The last component of a path (`/usr/lib/libc.so.6` -> `libc.so.6`); the whole string when
/// it has no `/`.
pub(crate) fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_hpcviewer() {
        use NodeKind::*;
        let (cc, header, nodwarf) = (
            Some("/src/stlmap.cc"),
            Some("/usr/include/x.h"),
            Some("[app]"),
        );
        let cases = [
            (Loop, "", cc, Some(19), "loop at stlmap.cc: 19"),
            (Statement, "", cc, Some(20), "stlmap.cc: 20"),
            (Inlined, "Mp::add", cc, Some(9), "[I] Mp::add"),
            (
                Inlined,
                "<inline>",
                header,
                Some(7),
                "[I] inlined from x.h: 7",
            ),
            (Module, "/usr/lib/libm.so.6", None, None, "libm.so.6"),
            // A module without DWARF: its scopes have a bracketed module name as file, no line.
            (Loop, "", nodwarf, None, "loop at [app]"),
            (Statement, "", nodwarf, None, "[app]"),
            (Statement, "", None, Some(3), "unknown file: 3"),
            (Loop, "", None, Some(4), "loop at line 4"),
            (Loop, "", None, None, "loop at unknown file"),
            (Kernel, "<kernel>", None, None, "<kernel>"),
            (
                Partial,
                "<partial call paths>",
                None,
                None,
                "<partial call paths>",
            ),
        ];
        for (kind, raw, file, line, expected) in cases {
            let label = display(kind, &name(kind, raw, file, line), None);
            assert_eq!(label, expected, "{kind:?} {raw:?} {file:?} {line:?}");
        }
    }

    #[test]
    fn shortening_applies_to_procedure_names_only() {
        let long = "std::map<int, double>::insert(std::pair<int const, double>&&)";
        assert_eq!(
            display(NodeKind::Procedure, long, Some(30)),
            "std::map<…>::insert(…)"
        );
        assert_eq!(
            display(NodeKind::Inlined, long, Some(30)),
            "[I] std::map<…>::insert(…)"
        );
        let lp = "loop at a_very_long_file_name_indeed.cc: 1";
        assert_eq!(display(NodeKind::Loop, lp, Some(10)), lp);
    }

    #[test]
    fn unknown_procedures_and_call_sites() {
        let name = unknown_procedure(0x1f7da, Some("/usr/lib/libgomp.so.1"));
        assert_eq!(unknown_address(&name), Some(0x1f7da));
        assert_eq!(
            unknown_address(&unknown_procedure(0x11f, None)),
            Some(0x11f)
        );
        assert_eq!(unknown_address("main"), None);
        let name = unknown_procedure(0x1a2b, Some("/usr/lib/libm.so.6"));
        assert_eq!(name, "<unknown procedure> 0x1a2b [libm.so.6]");
        assert_eq!(
            call_site(Some("/a/b/main.c"), Some(12)).unwrap(),
            "main.c: 12"
        );
        assert_eq!(call_site(Some("/a/b/main.c"), None), None);
    }
}
