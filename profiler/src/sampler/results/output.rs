//! Where `hpcrun-rs` puts its profile, safely when several runs share one output name (what
//! `mpirun -np 8 hpcrun-rs ./app` does: eight runs, one `profile.db`).
//!
//! The profile is written and synced to a temporary file of a unique, unpredictable name in the
//! output's directory, then placed, under an exclusive lock on that directory (runs place their
//! profiles one at a time; where locks are unavailable, the steps below still never overwrite
//! a profile):
//!
//! - if the output name is free, the profile takes it (`renameat2(RENAME_NOREPLACE)`: never
//!   over a file that appears meanwhile);
//! - if it holds the very file that was there when the run started (an old profile), that file
//!   is kept as `NAME.old` and the profile takes the name;
//! - otherwise another run wrote its profile there meanwhile: this profile goes to the first
//!   free numbered sibling, `profile.1.db`, `profile.2.db`, ... (for a name without an
//!   extension, `NAME.1`, ...), and the run says so;
//! - if the directory cannot take the profile at all (a full disk), it goes to a new file
//!   `hpcrun-rs-*.db` in the temporary directory instead.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use tempfile::NamedTempFile;

use crate::format::envelope::{directory_of, staged_beside, write_unique};

/// How many numbered siblings are tried before giving up.
const MAX_SIBLINGS: u32 = 10_000;

/// Why the profile cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The output names a directory.
    #[error("{0} is a directory; give a file name with -o")]
    IsDirectory(PathBuf),
    /// The output's directory does not exist.
    #[error("cannot write {path}: directory {dir} does not exist")]
    NoDirectory {
        /// The output.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// The directory or file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// What could not be written.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Neither the output's directory nor the temporary directory took the profile.
    #[error("cannot write the profile: {first}; nor in the temporary directory: {second}")]
    Nowhere {
        /// Why the output's directory did not.
        first: String,
        /// Why the temporary directory did not.
        second: crate::format::envelope::EnvelopeError,
    },
}

/// The output file of one run, checked before the measurement starts.
#[derive(Debug)]
pub struct Output {
    path: PathBuf,
    /// Device and inode of the file at `path` when the run started: the old profile that may
    /// be kept as `.old` (any other file there is a concurrent run's).
    previous: Option<(u64, u64)>,
}

/// Where the profile went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// At the output name; an old profile there was kept under the given name.
    Requested {
        /// Where the old profile went, if there was one.
        kept_old: Option<PathBuf>,
    },
    /// At a numbered sibling: another run's profile took the output name meanwhile.
    Sibling,
    /// In the temporary directory: the output's directory could not take it, for this reason.
    Fallback(String),
}

impl Output {
    /// Check that a profile can be written at `path` (refused early, before anything runs) and
    /// remember which file is there now.
    pub fn prepare(path: &Path) -> Result<Output, OutputError> {
        if path.is_dir() {
            return Err(OutputError::IsDirectory(path.to_path_buf()));
        }
        let dir = directory_of(path);
        if !dir.is_dir() {
            return Err(OutputError::NoDirectory {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
            });
        }
        // An unnamed temporary file (O_TMPFILE where the file system has it, else an exclusive
        // random name, removed at once): no name another user could have prepared.
        tempfile::tempfile_in(dir).map_err(|source| OutputError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Output {
            path: path.to_path_buf(),
            previous: identity(path),
        })
    }

    /// The output name asked for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Put `bytes` (an encoded profile) in place (see the module documentation); returns where
    /// they went and how.
    pub fn place(&self, bytes: &[u8]) -> Result<(PathBuf, Placement), OutputError> {
        match self.place_here(bytes) {
            Ok(placed) => Ok(placed),
            Err(first) => {
                let fallback = write_unique(bytes, &std::env::temp_dir(), "hpcrun-rs-", ".db")
                    .map_err(|second| OutputError::Nowhere {
                        first: first.to_string(),
                        second,
                    })?;
                Ok((fallback, Placement::Fallback(first.to_string())))
            }
        }
    }

    /// [`Output::place`] in the output's own directory.
    fn place_here(&self, bytes: &[u8]) -> Result<(PathBuf, Placement), OutputError> {
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OutputError::Io { path, source }
        };
        let staged = staged_beside(&self.path, bytes).map_err(io_err(&self.path))?;
        // Held until the profile is in place; without it (a file system without locks) the
        // steps below are still safe, only an old profile may go unkept.
        let _lock = File::open(directory_of(&self.path))
            .ok()
            .and_then(|d| Flock::lock(d, FlockArg::LockExclusive).ok());
        let mut kept_old = None;
        if self.previous.is_some() && identity(&self.path) == self.previous {
            let old = with_suffix(&self.path, ".old");
            std::fs::rename(&self.path, &old).map_err(io_err(&self.path))?;
            kept_old = Some(old);
        }
        let staged = match staged.persist_noclobber(&self.path) {
            Ok(_) => return Ok((self.path.clone(), Placement::Requested { kept_old })),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => e.file,
            Err(e) => return Err(io_err(&self.path)(e.error)),
        };
        self.place_sibling(staged)
    }

    /// Put `staged` at the first free numbered sibling of the output.
    fn place_sibling(
        &self,
        mut staged: NamedTempFile,
    ) -> Result<(PathBuf, Placement), OutputError> {
        for n in 1..=MAX_SIBLINGS {
            let sibling = sibling_name(&self.path, n);
            match staged.persist_noclobber(&sibling) {
                Ok(_) => return Ok((sibling, Placement::Sibling)),
                Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => staged = e.file,
                Err(e) => {
                    return Err(OutputError::Io {
                        path: sibling,
                        source: e.error,
                    })
                }
            }
        }
        Err(OutputError::Io {
            path: sibling_name(&self.path, MAX_SIBLINGS),
            source: io::Error::other("every numbered sibling name is taken"),
        })
    }
}

/// Device and inode of the file at `path` (not following a symlink), if there is one.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The `n`th numbered sibling of `path`: `dir/stem.n.ext`, or `dir/name.n` without extension.
pub fn sibling_name(path: &Path, n: u32) -> PathBuf {
    match (path.file_stem(), path.extension()) {
        (Some(stem), Some(ext)) => {
            let mut name = stem.to_owned();
            name.push(format!(".{n}."));
            name.push(ext);
            path.with_file_name(name)
        }
        _ => with_suffix(path, &format!(".{n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, Placement) {
        Output::prepare(&dir.join(name))
            .unwrap()
            .place(bytes)
            .unwrap()
    }

    #[test]
    fn siblings_are_numbered_before_the_extension() {
        assert_eq!(
            sibling_name(Path::new("d/profile.db"), 2),
            Path::new("d/profile.2.db")
        );
        assert_eq!(sibling_name(Path::new("out"), 1), Path::new("out.1"));
    }

    #[test]
    fn an_old_profile_is_kept_once_and_a_concurrent_one_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        std::fs::write(&path, b"old").unwrap();
        // Two runs that started while the old profile was there.
        let first = Output::prepare(&path).unwrap();
        let second = Output::prepare(&path).unwrap();
        let (at, how) = first.place(b"first").unwrap();
        assert_eq!(at, path);
        let old = dir.path().join("p.db.old");
        assert_eq!(
            how,
            Placement::Requested {
                kept_old: Some(old.clone())
            }
        );
        let (at, how) = second.place(b"second").unwrap();
        assert_eq!(
            (at.clone(), how),
            (dir.path().join("p.1.db"), Placement::Sibling)
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(std::fs::read(&old).unwrap(), b"old");
        assert_eq!(std::fs::read(&at).unwrap(), b"second");
        // A later run started after both: the first's profile is now the old one.
        let (_, how) = placed(dir.path(), "p.db", b"third");
        assert_eq!(
            how,
            Placement::Requested {
                kept_old: Some(old.clone())
            }
        );
        assert_eq!(std::fs::read(&old).unwrap(), b"first");
        let names = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names, 3, "no temporary left behind");
    }
}
