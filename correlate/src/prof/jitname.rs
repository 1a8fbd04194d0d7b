//! What JITs call the functions they compile, in perf maps and jitdumps alike: a name that may
//! end with the function's source position (V8: `JS:*fib /app/fib.js:1:13`; CPython:
//! `py::fib:/app/fib.py`), split into the two.

/// One function of a map: its name, and the source position the name carries, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JitSymbol {
    /// The function's name as the map gives it, less a trailing source position.
    pub(crate) name: String,
    /// The source file and line the name ends with (V8: `JS:*fib /app/fib.js:1:13`; CPython:
    /// `py::fib:/app/fib.py`, file only).
    pub(crate) file: Option<String>,
    /// See [`JitSymbol::file`].
    pub(crate) line: Option<u32>,
}

/// A JIT's name for a function split into the function and the source position it ends with.
pub(crate) fn symbol(name: &str) -> JitSymbol {
    // V8: `JS:*fib /app/fib.js:1:13` (a space, an absolute path, line and column).
    if let Some((function, place)) = name.rsplit_once(" /") {
        let mut parts = place.rsplitn(3, ':');
        let (_column, line, file) = (parts.next(), parts.next(), parts.next());
        if let (Some(line), Some(file)) = (line.and_then(|l| l.parse().ok()), file) {
            return JitSymbol {
                name: function.to_string(),
                file: Some(format!("/{file}")),
                line: Some(line),
            };
        }
    }
    // CPython: `py::fib:/app/fib.py`, `py::_find_and_load:<frozen importlib._bootstrap>` (a
    // qualified name has no colon; the file is what follows the first).
    if let Some((function, file)) = name.strip_prefix("py::").and_then(|n| n.split_once(':')) {
        return JitSymbol {
            name: format!("py::{function}"),
            file: Some(file.to_string()),
            line: None,
        };
    }
    JitSymbol {
        name: name.to_string(),
        file: None,
        line: None,
    }
}
