//! The one envelope of every binary file the tools write (`profile.db`, the hpcprof-rs
//! database, structure-cache entries): an 8-byte magic naming the kind of file, a little-endian
//! `u32` format version, a little-endian CRC-32 of the body (from the kind's
//! [`FileKind::checked_since`] version on), then the body encoded with postcard; and the one way
//! they are put on disk, atomically.
//!
//! The checksum catches what decoding alone cannot: a damaged byte that still decodes, into
//! other numbers. CRC-32 detects every error confined to 32 consecutive bits, so any one damaged
//! byte, and all but one in 2^32 of other damage. Files of older versions, written before there
//! was a checksum, still read (unchecked) where the kind says the body did not change.
//!
//! Readers get an error that names the file and says what is wrong with it (another kind of
//! file, another version, a damaged or truncated body, an inconsistent one, a FIFO or device
//! given as a file); writers never leave half a
//! file behind, never write through a name another user could have prepared (the temporary file
//! is created exclusively, under an unpredictable name, in the target's directory) and, when
//! asked, never replace an existing file.

use super::write_behind::WriteBehind;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A kind of file: its magic, the versions this build writes and reads, and how to name it in
/// errors ("not a {noun} written by {writer}").
#[derive(Debug)]
pub struct FileKind {
    /// The first eight bytes of every file of this kind.
    pub magic: [u8; 8],
    /// The format version this build writes (and the newest it reads).
    pub version: u32,
    /// The oldest format version this build still reads.
    pub oldest: u32,
    /// The first version whose files carry a checksum of the body.
    pub checked_since: u32,
    /// The first version whose checksum covers the version number too (`u32::MAX`: none), so
    /// that a damaged version number that names another readable version is caught.
    pub version_summed_since: u32,
    /// What the file is called, e.g. `profile.db`.
    pub noun: &'static str,
    /// The tool that writes it, e.g. `hpcrun-rs`.
    pub writer: &'static str,
}

/// Bytes of the header before the checksum: magic and version.
const HEADER: usize = 12;
/// Bytes of the checksum, after the header in checked versions.
const CHECKSUM: usize = 4;

/// The body of a file, once its header (and checksum) are checked.
#[derive(Debug, Clone, Copy)]
pub struct Body<'b> {
    /// The format version the file was written in.
    pub version: u32,
    /// The encoded body.
    pub bytes: &'b [u8],
}

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
        "{path}: {} {} format version {found}, this build reads versions {} to {}",
        kind.writer, kind.noun, kind.oldest, kind.version
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
    /// The body does not match its checksum (a damaged or truncated file).
    #[error("{path}: truncated or corrupt {} {} (checksum mismatch)", kind.writer, kind.noun)]
    Checksum {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static FileKind,
    },
    /// The path names something other than a regular file (a FIFO, a device, a directory),
    /// which reading could block on forever or never finish.
    #[error("{path}: not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
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

/// A writer that only computes the CRC-32 of what is written to it.
struct Checksum(crc32fast::Hasher);

impl Write for Checksum {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl FileKind {
    /// Header, checksum and `body` encoded in the current version, ready to write.
    pub fn encode<T: Serialize>(&self, body: &T) -> Result<Vec<u8>, postcard::Error> {
        self.encode_parts(&[&postcard::to_stdvec(body)?])
    }

    /// Header and checksum followed by `parts`, concatenated, as the body of a file in the
    /// current version (for bodies encoded in pieces).
    pub fn encode_parts(&self, parts: &[&[u8]]) -> Result<Vec<u8>, postcard::Error> {
        let mut crc = self.sum_of(self.version);
        parts.iter().for_each(|p| crc.update(p));
        let mut out = self.header(crc.finalize());
        parts.iter().for_each(|p| out.extend_from_slice(p));
        Ok(out)
    }

    /// Write a file of this kind in the current version to `out` without holding its body
    /// whole in memory: `body` writes the body and is called twice, to checksum it and then to
    /// write it, so it must write the same bytes both times.
    pub fn write_streamed(
        &self,
        out: &mut dyn Write,
        body: impl Fn(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut crc = io::BufWriter::new(Checksum(self.sum_of(self.version)));
        body(&mut crc)?;
        let crc = crc.into_inner().map_err(io::IntoInnerError::into_error)?;
        out.write_all(&self.header(crc.0.finalize()))?;
        body(out)
    }

    /// The checksum a body of `version` starts from: of its version number where the kind's
    /// checksums cover it ([`FileKind::version_summed_since`]).
    fn sum_of(&self, version: u32) -> crc32fast::Hasher {
        let mut crc = crc32fast::Hasher::new();
        if version >= self.version_summed_since {
            crc.update(&version.to_le_bytes());
        }
        crc
    }

    /// Magic, version and (from [`FileKind::checked_since`] on) checksum `crc` of the body: the
    /// header of a file in the current version.
    fn header(&self, crc: u32) -> Vec<u8> {
        let mut out = self.magic.to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        if self.version >= self.checked_since {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }

    /// The body of `bytes` once magic, version and checksum are checked; `path` names the file
    /// in errors.
    pub fn body<'b>(
        &'static self,
        bytes: &'b [u8],
        path: &Path,
    ) -> Result<Body<'b>, EnvelopeError> {
        if bytes.len() < HEADER || bytes[..8] != self.magic {
            return Err(EnvelopeError::BadMagic {
                path: path.to_path_buf(),
                kind: self,
            });
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(self.oldest..=self.version).contains(&version) {
            return Err(EnvelopeError::Version {
                path: path.to_path_buf(),
                kind: self,
                found: version,
            });
        }
        let rest = &bytes[HEADER..];
        if version < self.checked_since {
            return Ok(Body {
                version,
                bytes: rest,
            });
        }
        let damaged = || EnvelopeError::Checksum {
            path: path.to_path_buf(),
            kind: self,
        };
        let (sum, body) = rest.split_first_chunk::<CHECKSUM>().ok_or_else(damaged)?;
        let mut crc = self.sum_of(version);
        crc.update(body);
        if crc.finalize() != u32::from_le_bytes(*sum) {
            return Err(damaged());
        }
        Ok(Body {
            version,
            bytes: body,
        })
    }

    /// Decode a whole file's bytes into its body's type (the same in every version read).
    pub fn decode<'b, T: Deserialize<'b>>(
        &'static self,
        bytes: &'b [u8],
        path: &Path,
    ) -> Result<T, EnvelopeError> {
        let body = self.body(bytes, path)?;
        postcard::from_bytes(body.bytes).map_err(|source| self.corrupt(path, source))
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

/// The whole file at `path`, with an error that names it; anything but a regular file (a FIFO
/// that would block until a writer comes, a device that never ends) is refused.
pub fn read_file(path: &Path) -> Result<Vec<u8>, EnvelopeError> {
    let io_err = |source| EnvelopeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = open_regular(path).map_err(|e| match e {
        OpenError::Io(source) => io_err(source),
        OpenError::NotAFile => EnvelopeError::NotAFile {
            path: path.to_path_buf(),
        },
    })?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes).map_err(io_err)?;
    Ok(bytes)
}

/// Why [`open_regular`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file could not be opened or examined.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// It is a FIFO, a device, a socket or a directory.
    #[error("not a regular file")]
    NotAFile,
}

/// Open `path` for reading if it is a regular file. The open itself does not wait (a FIFO with
/// no writer would otherwise block it forever); the kind is judged on the opened file, so a
/// file swapped in after a check cannot slip through.
pub fn open_regular(path: &Path) -> Result<std::fs::File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(OpenError::NotAFile);
    }
    Ok(file)
}

/// Put `bytes` at `path` atomically: they are written and synced to a temporary file created
/// exclusively, under an unpredictable name, in the same directory, which is then renamed (or,
/// with [`Replace::Refused`], linked) into place. A failure (a full disk) leaves nothing behind
/// and any existing file untouched.
pub fn write_atomically(path: &Path, bytes: &[u8], replace: Replace) -> Result<(), EnvelopeError> {
    write_atomically_with(path, replace, |out| out.write_all(bytes))
}

/// [`write_atomically`] for contents that `fill` writes in pieces (a large text file need not
/// be held whole in memory); an error from `fill` fails the write the same way.
pub fn write_atomically_with(
    path: &Path,
    replace: Replace,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), EnvelopeError> {
    let io_err = |source| EnvelopeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = staged_beside_with(path, fill).map_err(io_err)?;
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

/// The directory a file at `path` goes in (`.` for a bare file name).
pub fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Put `bytes` into a new file of a unique, unpredictable name `{prefix}*{suffix}` in `dir`,
/// created exclusively; returns its path.
pub fn write_unique(
    bytes: &[u8],
    dir: &Path,
    prefix: &str,
    suffix: &str,
) -> Result<PathBuf, EnvelopeError> {
    let io_err = |source| EnvelopeError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let file = synced_temporary(dir, prefix, suffix, |out| out.write_all(bytes)).map_err(io_err)?;
    let (_, path) = file.keep().map_err(|e| io_err(e.error))?;
    Ok(path)
}

/// `bytes` in a synced temporary `.NAME.*.tmp` beside `path` (see `synced_temporary`), ready
/// to be renamed or linked to `path`.
pub fn staged_beside(path: &Path, bytes: &[u8]) -> io::Result<tempfile::NamedTempFile> {
    staged_beside_with(path, |out| out.write_all(bytes))
}

/// [`staged_beside`] with the contents written by `fill`.
fn staged_beside_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<tempfile::NamedTempFile> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    synced_temporary(directory_of(path), &format!(".{name}."), ".tmp", fill)
}

/// A new file `{prefix}*{suffix}` in `dir`, created exclusively under an unpredictable name,
/// holding what `fill` wrote (buffered), synced to disk; it is removed when dropped unless kept
/// or persisted.
fn synced_temporary(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<tempfile::NamedTempFile> {
    let file = tempfile::Builder::new()
        .prefix(prefix)
        .suffix(suffix)
        .tempfile_in(dir)?;
    let mut out = io::BufWriter::new(WriteBehind::new(file));
    fill(&mut out)?;
    let file = out
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?
        .into_inner();
    file.as_file().sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    static KIND: FileKind = FileKind {
        magic: *b"TESTKIND",
        version: 3,
        oldest: 2,
        checked_since: 3,
        version_summed_since: u32::MAX,
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
            .contains("format version 4, this build reads versions 2 to 3"));
        let cut = KIND.decode::<(u32, String)>(&bytes[..bytes.len() - 2], p);
        assert!(
            matches!(cut, Err(EnvelopeError::Checksum { .. })),
            "{cut:?}"
        );
    }

    #[test]
    fn every_damaged_byte_is_caught_and_unchecked_old_versions_still_read() {
        let p = Path::new("f.bin");
        let body = (
            7u64,
            "a body long enough to damage".to_string(),
            vec![1u32; 9],
        );
        let bytes = KIND.encode(&body).unwrap();
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let read = KIND.decode::<(u64, String, Vec<u32>)>(&bad, p);
                assert!(read.is_err(), "byte {i} ^ {flip:#x} accepted: {read:?}");
            }
        }
        let mut old = b"TESTKIND\x02\0\0\0".to_vec();
        old.extend(postcard::to_stdvec(&body).unwrap());
        assert_eq!(
            KIND.decode::<(u64, String, Vec<u32>)>(&old, p).unwrap(),
            body
        );
    }

    #[test]
    fn a_streamed_file_is_the_encoded_one() {
        let parts: [&[u8]; 2] = [b"first part", b"second"];
        let mut streamed = Vec::new();
        KIND.write_streamed(&mut streamed, |out| {
            parts.iter().try_for_each(|p| out.write_all(p))
        })
        .unwrap();
        assert_eq!(streamed, KIND.encode_parts(&parts).unwrap());
        let body = KIND.body(&streamed, Path::new("f.bin")).unwrap();
        assert_eq!(body.bytes, b"first partsecond");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let err = read_file(&fifo).unwrap_err();
        assert!(matches!(err, EnvelopeError::NotAFile { .. }), "{err}");
        assert!(
            err.to_string().ends_with("fifo: not a regular file"),
            "{err}"
        );
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
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
