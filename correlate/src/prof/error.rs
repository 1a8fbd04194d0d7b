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
    /// A structure file records another build of a module's binary than the one profiled.
    #[error(
        "{structure}: describes another build of {binary} ({recorded}) than the one profiled; \
         run hpcstruct-rs on the binary again"
    )]
    OtherBuild {
        /// The structure file.
        structure: PathBuf,
        /// The module's binary.
        binary: String,
        /// The build the structure file records.
        recorded: structure::BinaryIdentity,
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

impl CorrelateError {
    /// Whether the error is the user's input's fault (the tools' exit status 2) rather than
    /// ours or the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            CorrelateError::Binary { .. } => false,
            CorrelateError::Database(d) => {
                matches!(d, profiler::envelope::EnvelopeError::Exists { .. })
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use structure::one_line;

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
