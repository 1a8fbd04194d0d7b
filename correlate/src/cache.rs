//! The on-disk structure cache: scope trees recovered on the fly, kept so that the next
//! `hpcprof-rs` over the same binaries skips the analysis.
//!
//! Entries live in `$XDG_CACHE_HOME/hpctoolkit-rs/structure/` (else
//! `~/.cache/hpctoolkit-rs/structure/`), one file per binary, named by its GNU build-id or,
//! without one, by a hash of its path, size and modification time. Each file is, in the tools'
//! common envelope ([`profiler::envelope`], magic `HPCSCACH`), the version of the tools that
//! wrote it (a newer analyser invalidates old entries), the [`Coverage`] and the [`ScopeTree`].
//! Entries that fail to decode are treated as missing and replaced; writes are atomic, so
//! concurrent runs never see half an entry.
//!
//! Trees recovered on the fly are *focused* (`structure::analyze_focused`): they hold only the
//! procedures that a profile sampled, and their coverage says which addresses they answer for.
//! A run reuses an entry when its coverage holds every address the run looks up; otherwise it
//! analyses the procedures of its own addresses together with those of the entry (their
//! entries are asked again) and stores that union, so one binary's entry grows with the
//! profiles correlated against it and soon serves them all.

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use profiler::envelope::{write_atomically, FileKind, Replace};
use structure::{Coverage, ScopeTree};

/// The kind of file a cache entry is. The version changes whenever the analysis gives other
/// trees for the same binary, so that entries of an older analysis are recomputed (3: inlined
/// callees named across units and dwz files, entry-point symbols).
static CACHE_ENTRY: FileKind = FileKind {
    magic: *b"HPCSCACH",
    version: 3,
    noun: "structure cache entry",
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

    /// The cache key of the binary at `path`: its build-id in hex, or a hash of its path, size
    /// and modification time. `None` if the file cannot be examined.
    pub(crate) fn key(path: &Path, build_id: Option<&[u8]>) -> Option<String> {
        if let Some(id) = build_id.filter(|id| !id.is_empty()) {
            return Some(format!("b-{}", hex(id)));
        }
        let meta = fs::metadata(path).ok()?;
        let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
        let mut h = fxhash::FxHasher64::default();
        (path, meta.len(), mtime.as_nanos()).hash(&mut h);
        Some(format!("p-{:016x}", h.finish()))
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.struct"))
    }

    /// The tree cached under `key` and the addresses it covers, if there is a valid entry.
    pub(crate) fn load(&self, key: &str) -> Option<(ScopeTree, Coverage)> {
        let path = self.entry(key);
        let bytes = fs::read(&path).ok()?;
        let body = CACHE_ENTRY.body(&bytes, &path).ok()?;
        let (tools, body) = postcard::take_from_bytes::<&str>(body).ok()?;
        if tools != TOOLS {
            return None;
        }
        let (coverage, tree): (Coverage, ScopeTree) = postcard::from_bytes(body).ok()?;
        Some((tree, coverage))
    }

    /// Store `tree`, which answers for `coverage`, under `key`, replacing any previous entry.
    pub(crate) fn store(
        &self,
        key: &str,
        tree: &ScopeTree,
        coverage: &Coverage,
    ) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let bytes = CACHE_ENTRY
            .encode(&(TOOLS, coverage, tree))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        write_atomically(&self.entry(key), &bytes, Replace::Allowed).map_err(std::io::Error::other)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
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
        let key = StructureCache::key(Path::new("/bin/x"), Some(&[0xab, 0x01])).unwrap();
        assert_eq!(key, "b-ab01");
        assert!(cache.load(&key).is_none());
        let coverage = Coverage::Ranges(vec![0x10..0x20]);
        cache.store(&key, &tree, &coverage).unwrap();
        let (back, covered) = cache.load(&key).unwrap();
        assert_eq!(back.lookup(0x18), Some(s));
        assert_eq!(covered, coverage);
        fs::write(cache.entry(&key), b"HPCSCACH\x01\0\0\0garbage").unwrap();
        assert!(cache.load(&key).is_none(), "corrupt entry is a miss");
        fs::remove_dir_all(dir).unwrap();
    }
}
