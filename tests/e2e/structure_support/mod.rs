//! Shared checks for the structure tests: what a scope tree says about an address, in a form
//! that compares across trees (files as paths, not ids), and the agreement of focused and
//! whole-module analysis.

use profiler::addr::Svma;
use std::path::Path;
use structure::{analyze_focused, Analysis, Options, ScopeId, ScopeKind, ScopeTree};

/// One scope of a lookup's context, with files as paths (trees intern files differently).
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Scope kind: statement, loop, inlined, procedure.
    pub kind: &'static str,
    /// Procedure or callee name.
    pub name: String,
    /// Source file path.
    pub file: Option<String>,
    /// Begin line.
    pub line: u32,
    /// Procedure entry or loop header.
    pub entry: Option<u64>,
    /// Call site (file, line) of an inlined call.
    pub call: Option<(Option<String>, u32)>,
}

/// What `tree` says about `addr`: the statement found and its ancestors up to the procedure.
pub fn context(tree: &ScopeTree, addr: Svma) -> Option<Vec<Frame>> {
    let stmt = tree.lookup(addr)?;
    let frame = |id: ScopeId| {
        let s = tree.get(id);
        let call = match s.kind {
            ScopeKind::Alien {
                call_file,
                call_line,
            } => Some((call_file.map(|f| tree.file_name(f).to_string()), call_line)),
            _ => None,
        };
        let kind = match s.kind {
            ScopeKind::Statement => "statement",
            ScopeKind::Loop => "loop",
            ScopeKind::Alien { .. } => "inlined",
            ScopeKind::Procedure => "procedure",
            ScopeKind::File | ScopeKind::Module => "above procedures",
        };
        Frame {
            kind,
            name: s.name.to_string(),
            file: tree.scope_file(id).map(str::to_string),
            line: s.line,
            entry: s.entry,
            call,
        }
    };
    Some(
        std::iter::once(stmt)
            .chain(tree.ancestors(stmt))
            .map(frame)
            .collect(),
    )
}

/// Analyse `binary` focused on `addresses` and assert that the result covers each address and
/// answers it as `full`, the whole-module analysis, does. Returns the focused analysis and how
/// many addresses resolve to a statement.
pub fn assert_focused_agrees(
    binary: &Path,
    full: &Analysis,
    addresses: &[Svma],
) -> (Analysis, usize) {
    let focused = analyze_focused(binary, addresses, &Options::default()).unwrap();
    let mut resolved = 0;
    for &a in addresses {
        let want = context(&full.tree, a);
        resolved += usize::from(want.is_some());
        assert_eq!(
            context(&focused.tree, a),
            want,
            "{}: focused and full analysis disagree at {a:#x}",
            binary.display()
        );
        assert!(focused.coverage.covers(a), "{a:#x} not covered");
    }
    (focused, resolved)
}

/// Loops below `scope`: (loop, begin line, loop depth).
pub fn loops_below(tree: &ScopeTree, scope: ScopeId) -> Vec<(ScopeId, u32, usize)> {
    tree.descendants(scope)
        .into_iter()
        .filter(|&d| tree.get(d).kind == ScopeKind::Loop)
        .map(|d| {
            let depth = 1 + tree
                .ancestors(d)
                .filter(|&a| tree.get(a).kind == ScopeKind::Loop)
                .count();
            (d, tree.get(d).line, depth)
        })
        .collect()
}
