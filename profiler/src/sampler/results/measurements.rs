//! The measurement directory of a parallel job: one profile per process, named so that the
//! files sort by rank (`hpctoolkit-rs-APP-measurements[-JOBID]/APP-RANK-HOST-PID.db`).
//!
//! Every rank creates the directory, so creating it must tolerate another rank having just done
//! so; but a directory that is a symbolic link, or belongs to another user, could send the
//! profiles somewhere the user did not ask for, and is refused. Within it, each process's file
//! name holds its host and process id, so no two live processes share one; the file itself is
//! placed by [`crate::sampler::results::output::Output`], which never overwrites another run's profile.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::format::job::JobPlace;

/// Digits of a rank in a file name: enough for a million ranks, so names sort by rank.
const RANK_DIGITS: usize = 6;

/// Where one run's profile goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A single profile file (`profile.db` unless `-o` names another).
    File(PathBuf),
    /// A measurement directory, one file per process in it.
    Directory(PathBuf),
}

/// Why the measurement directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// Something other than a real directory (a file, a symbolic link) has the name.
    #[error("measurement directory {0} exists but is {1}; refusing to write profiles there")]
    NotDirectory(PathBuf, &'static str),
    /// The directory belongs to another user.
    #[error("measurement directory {0} belongs to another user (uid {1}); refusing to write profiles there")]
    Foreign(PathBuf, u32),
    /// It could not be created.
    #[error("cannot create measurement directory {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Where a run's profile goes, from `-o` (if given) and the run's place in a job:
///
/// - `-o` naming an existing directory, or ending in `/`: that measurement directory;
/// - under a launcher (a rank is known), `-o` naming anything but a `.db` file: the same;
/// - otherwise `-o` names the profile file, as it always did;
/// - without `-o`: under a launcher the default directory ([`default_directory`]), else
///   `profile.db`.
pub fn destination(output: Option<&Path>, app: &str, job: &JobPlace) -> Destination {
    match output {
        Some(path) => {
            let slash = path.as_os_str().as_encoded_bytes().ends_with(b"/");
            let db = path.extension().is_some_and(|e| e == "db");
            if path.is_dir() || slash || (job.rank.is_some() && !db) {
                Destination::Directory(path.to_path_buf())
            } else {
                Destination::File(path.to_path_buf())
            }
        }
        None if job.rank.is_some() => Destination::Directory(default_directory(app, job)),
        None => Destination::File(PathBuf::from("profile.db")),
    }
}

/// `hpctoolkit-rs-APP-measurements`, with `-JOBID` appended when the job has an id (so that
/// two jobs in one directory keep their measurements apart).
pub fn default_directory(app: &str, job: &JobPlace) -> PathBuf {
    let mut name = format!("hpctoolkit-rs-{app}-measurements");
    if let Some(id) = &job.job {
        name.push('-');
        name.push_str(id);
    }
    PathBuf::from(name)
}

/// `APP-RANK-HOST-PID.db` (rank zero-padded to six digits; without a rank, `APP-HOST-PID.db`).
pub fn file_name(app: &str, job: &JobPlace, host: &str, pid: u32) -> String {
    match job.rank {
        Some(rank) => format!("{app}-{rank:0RANK_DIGITS$}-{host}-{pid}.db"),
        None => format!("{app}-{host}-{pid}.db"),
    }
}

/// The application's name for file names: the last component of the command's path, without
/// leading dots (`process` when nothing is left, or for an attached process).
pub fn app_name(program: Option<&str>) -> String {
    let base = program
        .and_then(|c| c.rsplit('/').next())
        .unwrap_or_default()
        .trim_start_matches('.');
    if base.is_empty() {
        "process".into()
    } else {
        base.into()
    }
}

/// Create the measurement directory `dir` (its parent must exist), or accept it if it is
/// already a real directory of this user (another rank, or an earlier run, made it).
pub fn create(dir: &Path) -> Result<(), DirectoryError> {
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(DirectoryError::Create {
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| DirectoryError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(DirectoryError::NotDirectory(dir.into(), "a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(DirectoryError::NotDirectory(dir.into(), "not a directory"));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(DirectoryError::Foreign(dir.into(), meta.uid()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(rank: u32, job: Option<&str>) -> JobPlace {
        JobPlace {
            rank: Some(rank),
            job: job.map(String::from),
        }
    }

    #[test]
    fn names_sort_by_rank_and_say_where_they_ran() {
        let names: Vec<String> = [10, 2, 1]
            .iter()
            .map(|&r| file_name("app", &ranked(r, None), "n1", 99))
            .collect();
        assert_eq!(names[0], "app-000010-n1-99.db");
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [
                "app-000001-n1-99.db",
                "app-000002-n1-99.db",
                names[0].as_str()
            ]
        );
        assert_eq!(
            file_name("app", &JobPlace::default(), "n1", 5),
            "app-n1-5.db"
        );
        assert_eq!(app_name(Some("./bin/.hidden")), "hidden");
        assert_eq!(app_name(None), "process");
    }

    #[test]
    fn single_runs_keep_profile_db_and_launched_ones_get_a_directory() {
        let alone = JobPlace::default();
        let file = |p: &str| Destination::File(PathBuf::from(p));
        let dir = |p: &str| Destination::Directory(PathBuf::from(p));
        assert_eq!(destination(None, "app", &alone), file("profile.db"));
        assert_eq!(destination(Some(Path::new("x")), "app", &alone), file("x"));
        assert_eq!(destination(Some(Path::new("m/")), "app", &alone), dir("m/"));
        let rank = ranked(0, Some("77"));
        assert_eq!(
            destination(None, "app", &rank),
            dir("hpctoolkit-rs-app-measurements-77")
        );
        assert_eq!(destination(Some(Path::new("m")), "app", &rank), dir("m"));
        assert_eq!(
            destination(Some(Path::new("p.db")), "app", &rank),
            file("p.db")
        );
    }

    #[test]
    fn another_ranks_directory_is_accepted_a_symlink_or_file_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("m");
        create(&dir).unwrap();
        create(&dir).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = create(&link).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let err = create(&file).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        let err = create(&tmp.path().join("no/such")).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot create measurement directory"),
            "{err}"
        );
    }
}
