//! The module bundle that `hpcrun-rs --bundle` keeps with a measurement: a copy of every binary
//! the profile names (executable, libraries, the `[vdso]` image) and of the separate debug
//! files found for them, so that `hpcprof-rs` on another machine, where those files are gone
//! or differ, gives the same database as on the machine that measured.
//!
//! A store uses elfutils' debuginfod cache layout: one directory per binary named by its GNU
//! build-id in hex (for a file without one, `crc32-XXXXXXXX`, the checksum the profile records
//! for it), holding `executable` and, where one was found, `debuginfo`; a dwz supplementary
//! file sits under its own build-id as `debuginfo`. Copies are found by identity, never by
//! path, so a store can be shared by every process of a job and moved at will. It is
//! `DIR/modules/` in a measurement directory and `PROFILE.modules/` beside a single profile.
//!
//! The files that name code compiled at run time travel too: each process's perf map
//! (`/tmp/perf-PID.map`) and jitdump (`jit-PID.dump`), under `jit/START-PID/` (the run's start
//! in ns and the process id: ids are reused, and a job's processes share the store), with the
//! time they were last written (the correlator checks it against the run's).

use crate::format::db::ModuleInfo;
use crate::format::debugfiles::{hex, EXECUTABLE};
use std::path::{Path, PathBuf};

/// The store's name inside a measurement directory.
pub const STORE_IN_DIRECTORY: &str = "modules";

/// The store of the profile written at `profile`: `DIR/modules/` when it is one process's
/// file of measurement directory `DIR`, else `PROFILE.modules/` beside it.
pub fn store_for(profile: &Path, measurement_directory: Option<&Path>) -> PathBuf {
    match measurement_directory {
        Some(dir) => dir.join(STORE_IN_DIRECTORY),
        None => {
            let mut name = profile.as_os_str().to_owned();
            name.push(".modules");
            PathBuf::from(name)
        }
    }
}

/// The stores that may hold the modules of the profile at `profile`, existing ones only: the
/// one beside it and its directory's `modules/` (whichever way it was written).
pub fn stores_of(profile: &Path) -> Vec<PathBuf> {
    let dir = profile.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    [store_for(profile, None), store_for(profile, Some(dir))]
        .into_iter()
        .filter(|s| s.is_dir())
        .collect()
}

/// The directory name of a module in a store: its build-id in hex, else its content
/// checksum; `None` for a module with neither (nothing could tell its copy from another file).
pub fn key(build_id: Option<&[u8]>, checksum: Option<u32>) -> Option<String> {
    match (build_id.filter(|id| !id.is_empty()), checksum) {
        (Some(id), _) => Some(hex(id)),
        (None, Some(sum)) => Some(format!("crc32-{sum:08x}")),
        (None, None) => None,
    }
}

/// Where the JIT files of process `pid` of the run that started at `run_start_ns` (ns since the
/// epoch) are kept in `store`.
pub fn jit_dir(store: &Path, run_start_ns: u64, pid: u32) -> PathBuf {
    store.join("jit").join(format!("{run_start_ns}-{pid}"))
}

/// Where process `pid`'s perf map is written (by the JIT, for perf and us to read).
pub fn perf_map(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// How far a JIT file's last write may lie outside its run and still be the run's (clock
/// granularity, a JIT that writes at exit after the last sample, a run's start taken after the
/// program's first write).
const JIT_WRITE_SLACK_NS: u64 = 5_000_000_000;

/// Why a perf map or jitdump may not be read as the measured process's own: its names go
/// straight into the profile, so a file planted in `/tmp` by another user, or left there by an
/// earlier process of the same id, must not name our code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitDistrust {
    /// Owned by this user id, neither the reader nor root.
    Owner(u32),
    /// Last written outside the run (by more than the slack): another process's of the same id.
    Stale,
}

impl std::fmt::Display for JitDistrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JitDistrust::Owner(uid) => write!(f, "owned by user {uid}, neither you nor root"),
            JitDistrust::Stale => {
                f.write_str("last written outside the run: another process's of the same id")
            }
        }
    }
}

/// Whether the JIT file described by `meta` belongs to the run that lasted `run` (start and end,
/// ns since the epoch): owned by the reader or root, and last written within the run, give or
/// take the slack.
pub fn jit_distrust(meta: &std::fs::Metadata, run: (u64, u64)) -> Option<JitDistrust> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let written = (meta.mtime().max(0) as u64) * 1_000_000_000 + meta.mtime_nsec().max(0) as u64;
    if meta.uid() != me && meta.uid() != 0 {
        Some(JitDistrust::Owner(meta.uid()))
    } else if written.saturating_add(JIT_WRITE_SLACK_NS) < run.0
        || written > run.1.saturating_add(JIT_WRITE_SLACK_NS)
    {
        Some(JitDistrust::Stale)
    } else {
        None
    }
}

/// Whether `path` names a jitdump (`jit-PID.dump`), and for which process.
pub fn jitdump_pid(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next()?;
    name.strip_prefix("jit-")?
        .strip_suffix(".dump")?
        .parse()
        .ok()
}

/// The copy of module `m` in the first of `stores` that holds one.
pub fn find(stores: &[PathBuf], m: &ModuleInfo) -> Option<PathBuf> {
    let key = key(m.build_id.as_deref(), m.checksum)?;
    stores
        .iter()
        .map(|s| s.join(&key).join(EXECUTABLE))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_found_by_its_identity_in_either_store() {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("run.db");
        assert_eq!(stores_of(&profile), Vec::<PathBuf>::new());
        let store = store_for(&profile, None);
        assert_eq!(store, dir.path().join("run.db.modules"));
        std::fs::create_dir_all(store.join("beef")).unwrap();
        std::fs::write(store.join("beef").join(EXECUTABLE), b"x").unwrap();
        let module = |build_id: Option<Vec<u8>>, checksum| ModuleInfo {
            path: "/gone/app".into(),
            build_id,
            checksum,
        };
        let stores = stores_of(&profile);
        assert_eq!(stores, vec![store.clone()]);
        let found = find(&stores, &module(Some(vec![0xbe, 0xef]), None));
        assert_eq!(found, Some(store.join("beef").join(EXECUTABLE)));
        assert_eq!(find(&stores, &module(Some(vec![0xbe, 0xee]), None)), None);
        assert_eq!(find(&stores, &module(None, None)), None);
        assert_eq!(key(None, Some(0x1234)).as_deref(), Some("crc32-00001234"));
        assert_eq!(jitdump_pid("/tmp/jit-4242.dump"), Some(4242));
        assert_eq!(jitdump_pid("/tmp/jit-x.dump"), None);
        let in_dir = store_for(&profile, Some(dir.path()));
        assert_eq!(in_dir, dir.path().join("modules"));
    }
}
