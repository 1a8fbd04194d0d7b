//! Which file a process's mapping names: a path in `/proc/PID/maps` or a `PERF_RECORD_MMAP2` is
//! the path as the process sees it, and a process in another mount namespace (a container,
//! `unshare -m`, bubblewrap) may see another file there than hpcrun-rs does. Such a module is
//! read through `/proc/PID/root`, the process's own view of the file tree, never through ours.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Where to read the file a process mapped at some path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The process sees our file tree: the path itself.
    Here(PathBuf),
    /// The process is in mount namespace `namespace` (its inode), not ours: its file is read
    /// at `path`, under `/proc/PID/root`.
    Elsewhere { namespace: u64, path: PathBuf },
}

/// Where to read the file that process `pid` mapped at `path` (absolute). A process whose
/// namespace cannot be read (it has exited) is taken to see ours, as before this check.
pub(crate) fn seen_by(pid: u32, path: &str) -> Seen {
    let namespace = |of: &str| std::fs::metadata(format!("/proc/{of}/ns/mnt")).map(|m| m.ino());
    match (namespace(&pid.to_string()), namespace("self")) {
        (Ok(theirs), Ok(ours)) if theirs != ours && path.starts_with('/') => Seen::Elsewhere {
            namespace: theirs,
            path: PathBuf::from(format!("/proc/{pid}/root{path}")),
        },
        _ => Seen::Here(PathBuf::from(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_files_are_read_where_they_are() {
        let me = std::process::id();
        assert_eq!(seen_by(me, "/bin/sh"), Seen::Here("/bin/sh".into()));
        // A process that is gone (pid 0 has no /proc entry): its path as given.
        assert_eq!(seen_by(0, "/bin/sh"), Seen::Here("/bin/sh".into()));
    }
}
