//! The one envelope of every binary file the tools write (`profile.db`, the hpcprof-rs
//! database, structure-cache entries): an 8-byte magic naming the kind of file, a little-endian
//! `u32` format version, then the body encoded with postcard; and the one way they are put on
//! disk, atomically.
//!
//! Readers get an error that names the file and says what is wrong with it (another kind of
//! file, another version, a truncated body, an inconsistent one); writers never leave half a
//! file behind, never write through a name another user could have prepared (the temporary file
//! is created exclusively, under an unpredictable name, in the target's directory) and, when
//! asked, never replace an existing file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A kind of file: its magic, the version this build writes and reads, and how to name it in
/// errors ("not a {noun} written by {writer}").
#[derive(Debug)]
pub struct FileKind {
    /// The first eight bytes of every file of this kind.
    pub magic: [u8; 8],
    /// The format version this build writes and reads.
    pub version: u32,
    /// What the file is called, e.g. `profile.db`.
    pub noun: &'static str,
    /// The tool that writes it, e.g. `hpcrun-rs`.
    pub writer: &'static str,
}

/// Bytes of the header: magic and version.
const HEADER: usize = 12;

/// Why a file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start with the kind's magic.
    #[error("{path}: not a {} written by {} (bad magic)", kind.noun, kind.writer)]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// What it should have been.
        kind: &'static FileKind,
    },
    /// The file was written by another version of the format.
    #[error(
        "{path}: {} {} format version {found}, this build reads version {}",
        kind.writer, kind.noun, kind.version
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static FileKind,
        /// Version in the file.
        found: u32,
    },
    /// The body could not be decoded (a truncated or damaged file).
    #[error("{path}: truncated or corrupt {} {} ({problem})", kind.writer, kind.noun)]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static FileKind,
        /// The decoder's complaint (part of the message, not a separate cause).
        problem: postcard::Error,
    },
    /// The body decoded but is inconsistent (an index out of range, a child before its parent).
    #[error("{path}: corrupt {} {}: {why}", kind.writer, kind.noun)]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static FileKind,
        /// What is inconsistent.
        why: String,
    },
    /// Refused to replace an existing file.
    #[error("{path}: already exists (remove it or choose another output with -o)")]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

impl FileKind {
    /// Header and `body` encoded, ready to write.
    pub fn encode<T: Serialize>(&self, body: &T) -> Result<Vec<u8>, postcard::Error> {
        let mut out = Vec::with_capacity(1 << 16);
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        postcard::to_extend(body, out)
    }

    /// The body bytes of `bytes` once magic and version are checked; `path` names the file in
    /// errors.
    pub fn body<'b>(
        &'static self,
        bytes: &'b [u8],
        path: &Path,
    ) -> Result<&'b [u8], EnvelopeError> {
        if bytes.len() < HEADER || bytes[..8] != self.magic {
            return Err(EnvelopeError::BadMagic {
                path: path.to_path_buf(),
                kind: self,
            });
        }
        let found = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if found != self.version {
            return Err(EnvelopeError::Version {
                path: path.to_path_buf(),
                kind: self,
                found,
            });
        }
        Ok(&bytes[HEADER..])
    }

    /// Decode a whole file's bytes into its body's type.
    pub fn decode<'b, T: Deserialize<'b>>(
        &'static self,
        bytes: &'b [u8],
        path: &Path,
    ) -> Result<T, EnvelopeError> {
        postcard::from_bytes(self.body(bytes, path)?).map_err(|source| self.corrupt(path, source))
    }

    /// Encode `body` and put it at `path` atomically (see [`write_atomically`]).
    pub fn write<T: Serialize>(
        &'static self,
        body: &T,
        path: &Path,
        replace: Replace,
    ) -> Result<(), EnvelopeError> {
        let bytes = self.encode(body).map_err(|e| self.corrupt(path, e))?;
        write_atomically(path, &bytes, replace)
    }

    /// Encode `body` into a new file of a unique, unpredictable name `{prefix}*{suffix}` in
    /// `dir`, created exclusively; returns its path.
    pub fn write_unique<T: Serialize>(
        &'static self,
        body: &T,
        dir: &Path,
        prefix: &str,
        suffix: &str,
    ) -> Result<PathBuf, EnvelopeError> {
        let io_err = |source| EnvelopeError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let bytes = self.encode(body).map_err(|e| self.corrupt(dir, e))?;
        let file = synced_temporary(dir, prefix, suffix, &bytes).map_err(io_err)?;
        let (_, path) = file.keep().map_err(|e| io_err(e.error))?;
        Ok(path)
    }

    /// The error for a body that does not decode.
    pub fn corrupt(&'static self, path: &Path, problem: postcard::Error) -> EnvelopeError {
        EnvelopeError::Corrupt {
            path: path.to_path_buf(),
            kind: self,
            problem,
        }
    }

    /// The error for a body that decodes but is inconsistent.
    pub fn malformed(&'static self, path: &Path, why: String) -> EnvelopeError {
        EnvelopeError::Malformed {
            path: path.to_path_buf(),
            kind: self,
            why,
        }
    }
}

/// Whether [`write_atomically`] may replace a file already at the target path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Replace it (the directory entry: a symlink there is replaced, not followed).
    Allowed,
    /// Fail with [`EnvelopeError::Exists`] instead, even if the file appears meanwhile.
    Refused,
}

/// The whole file at `path`, with an error that names it.
pub fn read_file(path: &Path) -> Result<Vec<u8>, EnvelopeError> {
    std::fs::read(path).map_err(|source| EnvelopeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Put `bytes` at `path` atomically: they are written and synced to a temporary file created
/// exclusively, under an unpredictable name, in the same directory, which is then renamed (or,
/// with [`Replace::Refused`], linked) into place. A failure (a full disk) leaves nothing behind
/// and any existing file untouched.
pub fn write_atomically(path: &Path, bytes: &[u8], replace: Replace) -> Result<(), EnvelopeError> {
    let io_err = |source| EnvelopeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = synced_temporary(dir, &format!(".{name}."), ".tmp", bytes).map_err(io_err)?;
    let placed = match replace {
        Replace::Allowed => tmp.persist(path).map(drop),
        Replace::Refused => tmp.persist_noclobber(path).map(drop),
    };
    placed.map_err(|e| match e.error.kind() {
        io::ErrorKind::AlreadyExists => EnvelopeError::Exists {
            path: path.to_path_buf(),
        },
        _ => io_err(e.error),
    })
}

/// A new file `{prefix}*{suffix}` in `dir`, created exclusively under an unpredictable name,
/// holding `bytes` synced to disk; it is removed when dropped unless kept or persisted.
fn synced_temporary(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    bytes: &[u8],
) -> io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix(prefix)
        .suffix(suffix)
        .tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    static KIND: FileKind = FileKind {
        magic: *b"TESTKIND",
        version: 3,
        noun: "test file",
        writer: "the tests",
    };

    #[test]
    fn round_trip_and_each_error_names_the_file() {
        let p = Path::new("/x/f.bin");
        let bytes = KIND.encode(&(7u32, "seven".to_string())).unwrap();
        let back: (u32, String) = KIND.decode(&bytes, p).unwrap();
        assert_eq!(back, (7, "seven".into()));
        let bad = KIND
            .decode::<u32>(b"NOTAKIND\x03\0\0\0\x07", p)
            .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "/x/f.bin: not a test file written by the tests (bad magic)"
        );
        let mut other = bytes.clone();
        other[8] = 4;
        let ver = KIND.decode::<(u32, String)>(&other, p).unwrap_err();
        assert!(ver
            .to_string()
            .contains("format version 4, this build reads version 3"));
        let cut = KIND.decode::<(u32, String)>(&bytes[..bytes.len() - 2], p);
        assert!(matches!(cut, Err(EnvelopeError::Corrupt { .. })));
    }

    #[test]
    fn atomic_writes_replace_only_when_allowed_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        KIND.write(&1u32, &path, Replace::Refused).unwrap();
        let again = KIND.write(&2u32, &path, Replace::Refused).unwrap_err();
        assert!(matches!(again, EnvelopeError::Exists { .. }), "{again}");
        assert_eq!(
            KIND.decode::<u32>(&read_file(&path).unwrap(), &path)
                .unwrap(),
            1
        );
        KIND.write(&2u32, &path, Replace::Allowed).unwrap();
        assert_eq!(
            KIND.decode::<u32>(&read_file(&path).unwrap(), &path)
                .unwrap(),
            2
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary left: {names:?}");
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let path = dir.path().join("out.bin");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let refused = KIND.write(&1u32, &path, Replace::Refused).unwrap_err();
        assert!(matches!(refused, EnvelopeError::Exists { .. }));
        KIND.write(&1u32, &path, Replace::Allowed).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }
}
