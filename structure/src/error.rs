//! The crate's error type: every error names the file it is about.

use std::path::PathBuf;

/// Why reading a binary or a structure file, or writing a structure file, failed.
#[derive(Debug, thiserror::Error)]
pub enum StructureError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A structure file is not well-formed XML or breaks the hpcstruct format's rules.
    #[error("{path}: line {line}: {message}")]
    Format {
        /// The structure file.
        path: PathBuf,
        /// 1-based line of the offending element (0 if unknown).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The binary is not an ELF file this crate can analyse (wrong class, machine, corrupt
    /// headers).
    #[error("{path}: not a usable ELF file: {message}")]
    NotElf {
        /// The binary.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The binary has neither debug information nor symbols, so no procedure can be found.
    #[error("{path}: no symbols and no debug information: nothing to analyse")]
    NothingToAnalyse {
        /// The binary.
        path: PathBuf,
    },
}

/// `error` and its causes on one line, joined by `: `, for a tool's error message. A cause whose
/// message the line already ends with is left out: errors that name their source in their own
/// message (`{path}: {source}`) would otherwise print it twice.
pub fn one_line<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut line = String::new();
    for cause in chain {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}
