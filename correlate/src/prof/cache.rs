//! The on-disk structure cache: scope trees recovered on the fly, kept so that the next
//! `hpcprof-rs` over the same binaries skips the analysis.
//!
//! Entries live in `$XDG_CACHE_HOME/hpctoolkit-rs/structure/` (else
//! `~/.cache/hpctoolkit-rs/structure/`), one file per binary, named by its GNU build-id or,
//! without one, by a hash of its path and content checksum (as the profile recorded it), else
//! of its path, size and modification time. Each file is, in the tools' common envelope
//! ([`profiler::envelope`], magic `HPCSCACH`, checksummed), the version of the tools that wrote
//! it (a newer analyser invalidates old entries), the [`Coverage`] and the [`ScopeTree`].
//!
//! An entry is trusted no further than the bytes on disk: one that fails its checksum, does not
//! decode or holds an inconsistent tree ([`ScopeTree::validate`]) is removed, reported once and
//! rebuilt. Writes are synced and atomic, so concurrent runs never see half an entry. A cache
//! directory that another user owns, or that group or others may write, is not used at all:
//! whoever can write there could plant entries.
//!
//! Trees recovered on the fly are *focused* (`structure::analyze_focused`): they hold only the
//! procedures that a profile sampled, and their coverage says which addresses they answer for.
//! A run reuses an entry when its coverage holds every address the run looks up; otherwise it
//! analyses the procedures of its own addresses together with those of the entry (their
//! entries are asked again) and stores that union, so one binary's entry grows with the
//! profiles correlated against it and soon serves them all.

use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use profiler::envelope::{EnvelopeError, FileKind, Replace};
use structure::{Coverage, DataLayout, ScopeTree};

/// The kind of file a cache entry is. The version changes whenever the analysis gives other
/// trees for the same binary, so that entries of an older analysis are recomputed (3: inlined
/// callees named across units and dwz files, entry-point symbols; 4: checksummed).
static CACHE_ENTRY: FileKind = FileKind {
    magic: *b"HPCSCACH",
    version: 4,
    oldest: 4,
    checked_since: 4,
    noun: "structure cache entry",
    writer: "hpcprof-rs",
};
/// The kind of file a cached data layout (a binary's variables and types, for naming data
/// objects) is; kept beside the binary's structure entry, under the same key.
static DATA_ENTRY: FileKind = FileKind {
    magic: *b"HPCDCACH",
    version: 1,
    oldest: 1,
    checked_since: 1,
    noun: "data layout cache entry",
    writer: "hpcprof-rs",
};
/// The tools' version; entries from another version are ignored.
const TOOLS: &str = env!("CARGO_PKG_VERSION");

/// A structure cache directory.
#[derive(Debug, Clone)]
pub struct StructureCache {
    dir: PathBuf,
}

impl StructureCache {
    /// The cache at its standard location, if a home or XDG cache directory is known.
    pub fn standard() -> Option<StructureCache> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(StructureCache::at(
            base.join("hpctoolkit-rs").join("structure"),
        ))
    }

    /// A cache in directory `dir` (created on first store).
    pub fn at(dir: PathBuf) -> StructureCache {
        StructureCache { dir }
    }

    /// The directory holding the entries.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Why the cache must not be used, if it must not: its directory (when it exists) is owned
    /// by another user or writable by group or others, so its entries could be someone else's.
    pub(crate) fn refusal(&self) -> Option<String> {
        let meta = fs::metadata(&self.dir).ok()?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let why = if meta.uid() != me {
            "owned by another user"
        } else if meta.mode() & 0o022 != 0 {
            "writable by group or others"
        } else {
            return None;
        };
        Some(format!(
            "structure cache {} is {why}; running without the cache (fix its owner or mode, e.g. chmod go-w)",
            self.dir.display()
        ))
    }

    /// The cache key of the binary at `path`: its build-id in hex, else a hash of its path and
    /// the content `checksum` recorded in the profile, else of its path, size and modification
    /// time. `None` if the file cannot be examined.
    pub(crate) fn key(
        path: &Path,
        build_id: Option<&[u8]>,
        checksum: Option<u32>,
    ) -> Option<String> {
        if let Some(id) = build_id.filter(|id| !id.is_empty()) {
            return Some(format!("b-{}", hex(id)));
        }
        let mut h = fxhash::FxHasher64::default();
        if let Some(sum) = checksum {
            (path, sum).hash(&mut h);
            return Some(format!("c-{:016x}", h.finish()));
        }
        let meta = fs::metadata(path).ok()?;
        let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
        (path, meta.len(), mtime.as_nanos()).hash(&mut h);
        Some(format!("p-{:016x}", h.finish()))
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.struct"))
    }

    fn data_entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.data"))
    }

    /// The data layout cached under `key`, if there is one from this version of the tools; a
    /// damaged entry is removed (and rebuilt by the caller).
    pub(crate) fn load_data(&self, key: &str) -> Option<DataLayout> {
        let path = self.data_entry(key);
        let bytes = fs::read(&path).ok()?;
        let decoded = DATA_ENTRY.decode::<(&str, DataLayout)>(&bytes, &path);
        match decoded {
            Ok((tools, layout)) if tools == TOOLS => Some(layout),
            Ok(_) | Err(EnvelopeError::Version { .. }) => None,
            Err(_) => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Store `layout` under `key`, replacing any previous entry.
    pub(crate) fn store_data(&self, key: &str, layout: &DataLayout) -> std::io::Result<()> {
        self.create_dir()?;
        DATA_ENTRY
            .write(&(TOOLS, layout), &self.data_entry(key), Replace::Allowed)
            .map_err(std::io::Error::other)
    }

    fn create_dir(&self) -> std::io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    /// The tree cached under `key` and the addresses it covers: `Ok(None)` if there is no
    /// entry or it is from another version of the tools, `Err` with a warning if the entry
    /// was damaged (it is then removed, to be rebuilt).
    pub(crate) fn load(&self, key: &str) -> Result<Option<(ScopeTree, Coverage)>, String> {
        let path = self.entry(key);
        let Ok(bytes) = fs::read(&path) else {
            return Ok(None);
        };
        let decoded = decode_entry(&bytes, &path);
        if let Err(why) = &decoded {
            let _ = fs::remove_file(&path);
            return Err(format!(
                "damaged structure cache entry removed, rebuilt: {why}"
            ));
        }
        decoded
    }

    /// Store `tree`, which answers for `coverage`, under `key`, replacing any previous entry.
    pub(crate) fn store(
        &self,
        key: &str,
        tree: &ScopeTree,
        coverage: &Coverage,
    ) -> std::io::Result<()> {
        self.create_dir()?;
        CACHE_ENTRY
            .write(&(TOOLS, coverage, tree), &self.entry(key), Replace::Allowed)
            .map_err(std::io::Error::other)
    }
}

/// An entry's tree and coverage, `None` if another version of the tools wrote it, or why it is
/// damaged.
fn decode_entry(bytes: &[u8], path: &Path) -> Result<Option<(ScopeTree, Coverage)>, String> {
    let body = match CACHE_ENTRY.body(bytes, path) {
        Ok(body) => body,
        Err(EnvelopeError::Version { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let corrupt = |e| CACHE_ENTRY.corrupt(path, e).to_string();
    let (tools, body) = postcard::take_from_bytes::<&str>(body.bytes).map_err(corrupt)?;
    if tools != TOOLS {
        return Ok(None);
    }
    let (coverage, tree): (Coverage, ScopeTree) = postcard::from_bytes(body).map_err(corrupt)?;
    tree.validate()
        .map_err(|why| CACHE_ENTRY.malformed(path, why).to_string())?;
    Ok(Some((tree, coverage)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use profiler::addr::Svma;
    use structure::{Scope, ScopeKind};

    #[test]
    fn store_then_load_and_reject_garbage() {
        let dir = std::env::temp_dir().join(format!("hpcprof-cache-test-{}", std::process::id()));
        let cache = StructureCache::at(dir.clone());
        let mut tree = ScopeTree::new("/bin/x");
        let mut p = Scope::new(ScopeKind::Procedure);
        p.name = "f".into();
        let p = tree.add(tree.root(), p);
        let mut s = Scope::new(ScopeKind::Statement);
        s.line = 3;
        s.ranges = vec![0x10..0x20];
        let s = tree.add(p, s);
        tree.finish();
        let key = StructureCache::key(Path::new("/bin/x"), Some(&[0xab, 0x01]), None).unwrap();
        assert_eq!(key, "b-ab01");
        assert_eq!(cache.load(&key), Ok(None));
        let coverage = Coverage::Ranges(vec![0x10..0x20]);
        cache.store(&key, &tree, &coverage).unwrap();
        let (back, covered) = cache.load(&key).unwrap().unwrap();
        assert_eq!(back.lookup(Svma(0x18)), Some(s));
        assert_eq!(covered, coverage);
        let mode = fs::metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700, "a new cache directory is private");
        fs::write(cache.entry(&key), b"HPCSCACH\x04\0\0\0garbage").unwrap();
        let damaged = cache.load(&key).unwrap_err();
        assert!(damaged.contains("checksum"), "{damaged}");
        assert_eq!(cache.load(&key), Ok(None), "a damaged entry is removed");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_entry_whose_tree_is_inconsistent_is_refused_though_its_checksum_fits() {
        let dir = tempfile::tempdir().unwrap();
        let cache = StructureCache::at(dir.path().to_path_buf());
        let mut tree = ScopeTree::new("/bin/x");
        let p = tree.add(tree.root(), Scope::new(ScopeKind::Procedure));
        tree.get_mut(p).children.push(p);
        let bytes = CACHE_ENTRY
            .encode(&(TOOLS, Coverage::Module, &tree))
            .unwrap();
        fs::write(cache.entry("k"), bytes).unwrap();
        let why = cache.load("k").unwrap_err();
        assert!(why.contains("scope 1: child 1 is not its own"), "{why}");
    }

    #[test]
    fn keys_without_build_id_follow_the_content_checksum() {
        let bin = Path::new("/bin/sh");
        let a = StructureCache::key(bin, None, Some(1)).unwrap();
        assert_ne!(a, StructureCache::key(bin, None, Some(2)).unwrap());
        assert!(StructureCache::key(bin, None, None)
            .unwrap()
            .starts_with("p-"));
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = StructureCache::at(dir.path().to_path_buf());
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(cache.refusal(), None);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let why = cache.refusal().unwrap();
        assert!(why.contains("writable by group or others"), "{why}");
    }
}
