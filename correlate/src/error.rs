//! The correlator's error type: every error names the file it is about.

use std::path::PathBuf;

/// Why correlation failed.
#[derive(Debug, thiserror::Error)]
pub enum CorrelateError {
    /// An input could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An input is neither a profile nor a structure file.
    #[error("{path}: {what}")]
    Unrecognised {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// A `profile.db` could not be read (bad magic, other version, truncated, inconsistent).
    #[error(transparent)]
    Profile(profiler::envelope::EnvelopeError),
    /// The database could not be written (or already exists).
    #[error(transparent)]
    Database(profiler::envelope::EnvelopeError),
    /// A structure file could not be read.
    #[error(transparent)]
    Structure(#[from] structure::StructureError),
    /// The same measurement was given twice (the same file, a copy or a link): summing it would
    /// double every cost.
    #[error("{second}: the same measurement as {first} (same host, start and end time, processes); give each profile once")]
    Duplicate {
        /// The profile given first.
        first: PathBuf,
        /// The profile repeating it.
        second: PathBuf,
    },
    /// A structure file was matched to a module whose binary it does not describe.
    #[error("{structure}: does not describe {binary} (its procedures do not match the binary's symbols)")]
    Mismatch {
        /// The structure file.
        structure: PathBuf,
        /// The module's binary.
        binary: String,
    },
    /// A structure file describes no module of any profile.
    #[error("{path}: describes none of the profiled modules ({modules})")]
    Unused {
        /// The structure file.
        path: PathBuf,
        /// The load modules it describes.
        modules: String,
    },
    /// A module's binary could not be examined.
    #[error("{path}: cannot examine binary: {why}")]
    Binary {
        /// The binary.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The profiles disagree in a way that prevents merging them.
    #[error("{path}: {why}")]
    Incompatible {
        /// The profile that does not fit.
        path: PathBuf,
        /// Why.
        why: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = CorrelateError::Io {
            path: "/x/p.db".into(),
            source: io,
        };
        let chain: Vec<&(dyn std::error::Error + 'static)> =
            vec![&err, std::error::Error::source(&err).unwrap()];
        assert_eq!(one_line(chain), "/x/p.db: No such file");
    }
}
