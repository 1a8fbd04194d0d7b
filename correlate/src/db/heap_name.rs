//! How a heap object is named: by its allocation calling context, shown from the first frame
//! outside the allocator (`malloc`, `operator new`, `std::allocator`, Rust's `alloc::`, the
//! measurement's own shim: folded), with the line of the call it made and its callers:
//! `make_big (mbench.c:12) < main (:18)`.

use crate::db::database::Database;
use crate::db::ids::DbNodeId;
use crate::db::label;
use crate::db::node::{Node, NodeKind};

/// Frames shown by default; sites whose names would collide get more.
pub(crate) const SHOWN_FRAMES: usize = 3;

/// The name of the heap object allocated at `site` (an enriched tree node), with at most
/// `frames` frames, and the source position of the allocation call (file, line) in the first
/// frame shown.
pub(crate) fn heap_name(db: &Database, site: DbNodeId, frames: usize) -> HeapName {
    let chain = user_frames(db, site);
    let mut parts = Vec::new();
    let mut last_file: Option<&str> = None;
    for &(frame, call) in chain.iter().take(frames) {
        let node = &db.nodes[frame.index()];
        let name = label::display(node.kind, &node.name, Some(40));
        let at = call.map(|(file, line)| {
            let file = file.map(|f| db.file(f));
            let shown = if file.is_some() && file == last_file {
                String::new()
            } else {
                file.map_or_else(String::new, |f| label::base_name(f).to_string())
            };
            last_file = file.or(last_file);
            format!(" ({shown}:{line})")
        });
        parts.push(format!("{name}{}", at.unwrap_or_default()));
    }
    let (file, line) = chain
        .first()
        .and_then(|(_, call)| *call)
        .map_or((None, None), |(f, l)| (f, Some(l)));
    HeapName {
        name: if parts.is_empty() {
            "<allocation in the allocator>".to_string()
        } else {
            parts.join(" < ")
        },
        file,
        line,
        depth: chain.len(),
    }
}

/// A heap object's display name and where its allocation call is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeapName {
    pub(crate) name: String,
    pub(crate) file: Option<crate::db::ids::DbFileId>,
    pub(crate) line: Option<u32>,
    /// Frames outside the allocator on the path (how many a longer name could show).
    pub(crate) depth: usize,
}

/// The frames of the path to `site` outside the allocator, innermost first, each with the
/// position of the call it made towards the allocation (from its callee's call site).
type CallFrame = (DbNodeId, Option<(Option<crate::db::ids::DbFileId>, u32)>);

pub(crate) fn user_frames(db: &Database, site: DbNodeId) -> Vec<CallFrame> {
    let mut frames = Vec::new();
    // The position of the call each frame made: its callee frame's call site, or for the
    // innermost frame (an allocation recorded at the caller's return address) its statement.
    let mut call: Option<(Option<crate::db::ids::DbFileId>, u32)> = None;
    let mut id = site;
    while id != DbNodeId::ROOT {
        let node = &db.nodes[id.index()];
        if node.kind == NodeKind::Statement && call.is_none() {
            call = node.line.map(|l| (node.file, l));
        }
        if node.kind.is_frame() {
            if STARTERS.contains(&node.name.as_str()) {
                break;
            }
            if !(frames.is_empty() && is_allocator(db, node)) {
                frames.push((id, call));
            }
            call = node.call_line.map(|l| (node.call_file, l));
        }
        id = node.parent;
    }
    frames
}

/// The C library's frames that start `main` and threads: a heap object's path is shown up to
/// the program's own outermost frame.
const STARTERS: [&str; 7] = [
    "__libc_start_call_main",
    "__libc_start_main_impl",
    "__libc_start_main",
    "_start",
    "start_thread",
    "clone",
    "clone3",
];

/// Whether a frame belongs to the allocator: the measurement's shim, unknown code in the C and
/// C++ runtimes, C++'s `operator new` and allocators, Rust's `alloc::`, and every function
/// whose own name says it allocates (`malloc`, `xmalloc`, `_PyObject_Malloc`,
/// `pymalloc_alloc`, `g_realloc`): wrappers are folded so that an object is named by the code
/// that wanted the memory.
pub(crate) fn is_allocator(db: &Database, node: &Node) -> bool {
    let module = node.module.map(|m| label::base_name(db.module_path(m)));
    if module.is_some_and(|m| m.starts_with("libhpcrun_alloc")) {
        return true;
    }
    if node.kind == NodeKind::Unknown {
        return module.is_some_and(|m| m.starts_with("libc.so") || m.starts_with("libstdc++"));
    }
    const PREFIXES: [&str; 7] = [
        "operator new",
        "std::allocator",
        "std::__new_allocator",
        "__gnu_cxx::new_allocator",
        "std::allocator_traits",
        "alloc::",
        "__rust_",
    ];
    PREFIXES.iter().any(|p| node.name.starts_with(p)) || allocates(&node.name)
}

/// Whether a function's own name (without its scope and parameters) ends in `malloc`,
/// `calloc`, `realloc`, `memalign`, `valloc` or `_alloc`, in any case.
fn allocates(name: &str) -> bool {
    let own = name.split('(').next().unwrap_or(name);
    let own = own.rsplit("::").next().unwrap_or(own).to_ascii_lowercase();
    [
        "malloc",
        "calloc",
        "realloc",
        "memalign",
        "valloc",
        "_alloc",
        "reallocarray",
    ]
    .iter()
    .any(|suffix| own.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::allocates;

    #[test]
    fn allocating_names_are_recognised_by_their_ending() {
        for name in [
            "malloc",
            "xmalloc",
            "_PyObject_Malloc",
            "pymalloc_alloc",
            "aligned_alloc",
            "posix_memalign",
            "g_realloc",
            "ns::Pool::raw_alloc(unsigned long)",
        ] {
            assert!(allocates(name), "{name}");
        }
        for name in ["alloc_a", "make_particles", "allocate_tree", "main", "free"] {
            assert!(!allocates(name), "{name}");
        }
    }
}
