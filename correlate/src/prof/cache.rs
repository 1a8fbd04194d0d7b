//! The on-disk structure cache: scope trees recovered on the fly, kept so that the next
//! `hpcprof-rs` over the same binaries skips the analysis.
//!
//! Entries live in `$XDG_CACHE_HOME/hpctoolkit-rs/structure/` (else
//! `~/.cache/hpctoolkit-rs/structure/`), one file per binary, named by its GNU build-id or,
//! without one, by a hash of its path and content checksum (as the profile recorded it), else
//! of its path, size and modification time. Each file is, in the tools' common envelope
//! ([`profiler::envelope`], magic `HPCSCACH`, checksummed), tagged sections
//! ([`profiler::sections`]): 1, the version of the tools that wrote it (a newer analyser
//! invalidates old entries); 2, the [`Coverage`]; 3, the [`ScopeTree`]. A binary's data layout
//! sits beside it (magic `HPCDCACH`): 1, the tools' version; 2, the [`DataLayout`].
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

use profiler::envelope::{self, EnvelopeError, FileKind, Replace};
use profiler::sections::{self, TakeError};
use structure::{Coverage, DataLayout, ScopeTree};

/// The kind of file a cache entry is. The version changes whenever the analysis gives other
/// trees for the same binary, so that entries of an older analysis are recomputed (3: inlined
/// callees named across units and dwz files, entry-point symbols; 4: checksummed; 5: tagged
/// sections; 6: procedure linkage table stubs named, a Fortran program's own `main` no bound).
static CACHE_ENTRY: FileKind = FileKind {
    magic: *b"HPCSCACH",
    version: 6,
    oldest: 6,
    checked_since: 4,
    version_summed_since: u32::MAX,
    noun: "structure cache entry",
    writer: "hpcprof-rs",
};
/// The kind of file a cached data layout (a binary's variables and types, for naming data
/// objects) is; kept beside the binary's structure entry, under the same key.
static DATA_ENTRY: FileKind = FileKind {
    magic: *b"HPCDCACH",
    version: 2,
    oldest: 2,
    checked_since: 1,
    version_summed_since: u32::MAX,
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

    /// The cache key of the binary at `path`: its build-id in hex (marked where
    /// `DEBUGINFOD_URLS` names servers), else a hash of its path and
    /// the content `checksum` recorded in the profile, else of its path, size and modification
    /// time. `None` if the file cannot be examined.
    pub(crate) fn key(
        path: &Path,
        build_id: Option<&[u8]>,
        checksum: Option<u32>,
    ) -> Option<String> {
        if let Some(id) = build_id.filter(|id| !id.is_empty()) {
            // With debuginfod servers named, a binary without local DWARF may get it: such an
            // analysis is kept apart from one made without (symbols only).
            let servers = std::env::var("DEBUGINFOD_URLS").is_ok_and(|u| !u.trim().is_empty());
            return Some(format!(
                "b-{}{}",
                profiler::debugfiles::hex(id),
                if servers { "-d" } else { "" }
            ));
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
        let mut layout: Option<DataLayout> = None;
        let decoded = decode_sections(&DATA_ENTRY, &bytes, &path, |id, b| match id {
            DATA_LAYOUT => sections::decode_into(&mut layout, b),
            _ => Ok(b),
        });
        match decoded.map(|current| current.then_some(layout)) {
            Ok(Some(Some(layout))) => Some(layout),
            Ok(None) => None,
            Ok(Some(None)) | Err(_) => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Store `layout` under `key`, replacing any previous entry.
    pub(crate) fn store_data(&self, key: &str, layout: &DataLayout) -> std::io::Result<()> {
        let layout = postcard::to_stdvec(layout).map_err(std::io::Error::other)?;
        self.write_entry(
            &DATA_ENTRY,
            &self.data_entry(key),
            &[(DATA_LAYOUT, &layout)],
        )
    }

    /// Put an entry of `kind` at `path`: the tools' version, then `parts` (id and bytes).
    fn write_entry(
        &self,
        kind: &'static FileKind,
        path: &Path,
        parts: &[(u32, &[u8])],
    ) -> std::io::Result<()> {
        self.create_dir()?;
        let tools = postcard::to_stdvec(TOOLS).map_err(std::io::Error::other)?;
        let mut all = vec![(ENTRY_TOOLS, &tools[..])];
        all.extend_from_slice(parts);
        let bytes = kind
            .encode_parts(&[&sections::join(&all)])
            .map_err(std::io::Error::other)?;
        envelope::write_atomically(path, &bytes, Replace::Allowed).map_err(std::io::Error::other)
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
        let coverage = postcard::to_stdvec(coverage).map_err(std::io::Error::other)?;
        let tree = postcard::to_stdvec(tree).map_err(std::io::Error::other)?;
        let parts = [(ENTRY_COVERAGE, &coverage[..]), (ENTRY_TREE, &tree[..])];
        self.write_entry(&CACHE_ENTRY, &self.entry(key), &parts)
    }
}

/// The sections of the cache's entries: every entry starts with the tools' version.
const ENTRY_TOOLS: u32 = 1;
/// A structure entry's coverage.
const ENTRY_COVERAGE: u32 = 2;
/// A structure entry's tree.
const ENTRY_TREE: u32 = 3;
/// A data entry's layout.
const DATA_LAYOUT: u32 = 2;

/// Hand the sections of an entry of `kind` after its tools' version to `take` (as
/// [`sections::take_all`] does): `Ok(false)` if another version of the format or of the tools
/// wrote it, or why it is damaged.
fn decode_sections<'b>(
    kind: &'static FileKind,
    bytes: &'b [u8],
    path: &Path,
    mut take: impl FnMut(u32, &'b [u8]) -> Result<&'b [u8], postcard::Error>,
) -> Result<bool, String> {
    let body = match kind.body(bytes, path) {
        Ok(body) => body,
        Err(EnvelopeError::Version { .. }) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let mut tools: Option<&str> = None;
    let taken = sections::take_all(body.bytes, None, 3, |id, b| match id {
        ENTRY_TOOLS => sections::decode_into(&mut tools, b),
        _ if tools != Some(TOOLS) => Ok(&[]),
        _ => take(id, b),
    });
    match taken {
        Ok(()) => Ok(tools == Some(TOOLS)),
        Err(TakeError::Corrupt(e)) => Err(kind.corrupt(path, e).to_string()),
        Err(TakeError::Malformed(why)) => Err(kind.malformed(path, why).to_string()),
    }
}

/// An entry's tree and coverage, `None` if another version of the tools wrote it, or why it is
/// damaged.
fn decode_entry(bytes: &[u8], path: &Path) -> Result<Option<(ScopeTree, Coverage)>, String> {
    let (mut coverage, mut tree): (Option<Coverage>, Option<ScopeTree>) = (None, None);
    let current = decode_sections(&CACHE_ENTRY, bytes, path, |id, b| match id {
        ENTRY_COVERAGE => sections::decode_into(&mut coverage, b),
        ENTRY_TREE => sections::decode_into(&mut tree, b),
        _ => Ok(b),
    })?;
    if !current {
        return Ok(None);
    }
    let missing = |what| {
        CACHE_ENTRY
            .malformed(path, format!("no {what} section"))
            .to_string()
    };
    let coverage = coverage.ok_or_else(|| missing("coverage"))?;
    let tree = tree.ok_or_else(|| missing("tree"))?;
    tree.validate()
        .map_err(|why| CACHE_ENTRY.malformed(path, why).to_string())?;
    Ok(Some((tree, coverage)))
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
        fs::write(cache.entry(&key), b"HPCSCACH\x06\0\0\0garbage").unwrap();
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
        cache.store("k", &tree, &Coverage::Module).unwrap();
        let why = cache.load("k").unwrap_err();
        assert!(why.contains("scope 1: child 1 is not its own"), "{why}");
    }

    #[test]
    fn sections_a_newer_tool_adds_are_skipped_and_another_tools_version_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = StructureCache::at(dir.path().to_path_buf());
        let mut tree = ScopeTree::new("/bin/x");
        tree.add(tree.root(), Scope::new(ScopeKind::Procedure));
        tree.finish();
        let entry = |tools: &str, extra: &[(u32, &[u8])]| {
            let tools = postcard::to_stdvec(tools).unwrap();
            let coverage = postcard::to_stdvec(&Coverage::Module).unwrap();
            let tree = postcard::to_stdvec(&tree).unwrap();
            let mut parts = vec![(ENTRY_TOOLS, &tools[..]), (ENTRY_COVERAGE, &coverage[..])];
            parts.extend_from_slice(extra);
            parts.push((ENTRY_TREE, &tree[..]));
            let bytes = CACHE_ENTRY
                .encode_parts(&[&sections::join(&parts)])
                .unwrap();
            fs::write(cache.entry("k"), bytes).unwrap();
        };
        entry(TOOLS, &[(9, b"from a newer tool")]);
        let (_, coverage) = cache
            .load("k")
            .unwrap()
            .expect("read with the unknown section");
        assert_eq!(coverage, Coverage::Module);
        entry("0.0.0-other", &[]);
        assert_eq!(cache.load("k"), Ok(None));
        fs::write(
            cache.entry("k"),
            CACHE_ENTRY
                .encode_parts(&[&sections::join(&[(
                    ENTRY_TOOLS,
                    &postcard::to_stdvec(TOOLS).unwrap()[..],
                )])])
                .unwrap(),
        )
        .unwrap();
        let why = cache.load("k").unwrap_err();
        assert!(why.contains("no coverage section"), "{why}");
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
