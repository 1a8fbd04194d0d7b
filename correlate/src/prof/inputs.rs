//! The correlator's inputs: recognising files by content, reading profiles and structure files,
//! and checking a module's binary on disk (its build-id, whether a structure file describes it).

use std::io::Read;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};
use structure::ScopeTree;

use crate::prof::error::CorrelateError;

/// What an input file turned out to be, judged by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A `profile.db` written by `hpcrun-rs`.
    Profile,
    /// An hpcstruct XML structure file (ours or HPCToolkit's).
    Structure,
}

/// Recognise `path` by its content: the `profile.db` magic or an XML document whose root is
/// `HPCToolkitStructure`. Anything else (including an hpcprof-rs database) is an error naming
/// the file.
pub fn classify(path: &Path) -> Result<InputKind, CorrelateError> {
    let mut head = Vec::with_capacity(4096);
    let io_err = |source| CorrelateError::Io {
        path: path.to_path_buf(),
        source,
    };
    profiler::envelope::open_regular(path)
        .map_err(std::io::Error::other)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .map_err(io_err)?;
    if head.starts_with(&profiler::db::PROFILE_MAGIC) {
        return Ok(InputKind::Profile);
    }
    let text = String::from_utf8_lossy(&head);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if text.trim_start().starts_with('<') && text.contains("<HPCToolkitStructure") {
        return Ok(InputKind::Structure);
    }
    let what = if head.starts_with(&crate::db::database::DATABASE_FILE.magic) {
        "an hpcprof-rs database (an output, not an input)"
    } else if head.is_empty() {
        "empty"
    } else {
        "neither a profile.db (hpcrun-rs) nor a structure file (hpcstruct)"
    };
    Err(CorrelateError::Unrecognised {
        path: path.to_path_buf(),
        what,
    })
}

/// One structure file's trees, with the file they came from.
#[derive(Debug)]
pub(crate) struct StructureFile {
    /// The file, as given.
    pub(crate) path: PathBuf,
    /// One finished tree per load module (`LM`) in the file.
    pub(crate) trees: Vec<ScopeTree>,
}

/// Read a structure file (ours or HPCToolkit's).
pub(crate) fn read_structure_file(path: &Path) -> Result<StructureFile, CorrelateError> {
    let trees = structure::read_structure_file(path)?;
    Ok(StructureFile {
        path: path.to_path_buf(),
        trees,
    })
}

/// What we could learn about a module's binary on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinaryFacts {
    /// Its GNU build-id, if it has one.
    pub(crate) build_id: Option<Vec<u8>>,
    /// For a file without a build-id, [`profiler::db::file_checksum`] of its bytes: what
    /// identifies that build instead.
    pub(crate) checksum: Option<u32>,
    /// Addresses and names of its function symbols.
    pub(crate) functions: Vec<(u64, String)>,
}

/// Why the binary on disk, with `facts`, is not the file module `m` was when it was profiled,
/// if it is not: another build-id or, for a file without one, another content checksum than
/// the profile recorded (the same path, size and time do not make the same program: `cp -p`,
/// `rsync -a`).
pub(crate) fn changed_since_profiled(
    m: &profiler::db::ModuleInfo,
    facts: &BinaryFacts,
) -> Option<&'static str> {
    match (m.build_id.as_deref(), facts.build_id.as_deref(), m.checksum) {
        (Some(want), Some(have), _) => (want != have).then_some("build-id differs"),
        (None, _, Some(sum)) => {
            (facts.checksum != Some(sum)).then_some("its contents differ, and it has no build-id")
        }
        _ => None,
    }
}

/// The file name of a `[vdso]` image analysed: what names the vDSO's code without lines
/// (`[vdso.so]`), whether the image is this machine's or a `--bundle` copy.
pub(crate) const VDSO_IMAGE: &str = "vdso.so";

/// A file holding this machine's `[vdso]` image, if its build-id is `build_id` (the kernel maps
/// the same image into every process, so a profile taken under this kernel can use ours),
/// written into `dir`, a private directory of this run (never a shared, predictable name).
pub(crate) fn own_vdso_image(build_id: &[u8], dir: &Path) -> Option<std::path::PathBuf> {
    let path = dir.join(VDSO_IMAGE);
    std::fs::write(&path, profiler::vdso::own_vdso()?).ok()?;
    let facts = binary_facts(&path).ok()?;
    (facts.build_id.as_deref() == Some(build_id)).then_some(path)
}

/// Read the build-id and function symbols of the ELF file at `path`, and the checksum of a
/// file without a build-id, from one read of the file. It is read, not mapped: a binary cut
/// short meanwhile gives an error, where a mapping would end the process with SIGBUS.
pub(crate) fn binary_facts(path: &Path) -> Result<BinaryFacts, CorrelateError> {
    let bad = |why: String| CorrelateError::Binary {
        path: path.to_path_buf(),
        why,
    };
    let bytes = profiler::envelope::read_file(path).map_err(|e| bad(e.to_string()))?;
    let obj = object::File::parse(bytes.as_slice()).map_err(|e| bad(e.to_string()))?;
    let build_id = obj
        .build_id()
        .map_err(|e| bad(e.to_string()))?
        .map(<[u8]>::to_vec);
    let checksum = build_id
        .is_none()
        .then(|| profiler::db::file_checksum(&bytes));
    let functions_of = |file: &object::File<'_>, dynamic: bool| -> Vec<(u64, String)> {
        let table = if dynamic {
            file.dynamic_symbols()
        } else {
            file.symbols()
        };
        table
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.name().ok()?.to_string())))
            .collect()
    };
    let mut functions = functions_of(&obj, false);
    functions.extend(functions_of(&obj, true));
    // A stripped library's own functions may be named by its MiniDebugInfo only.
    let mini = structure::mini_debuginfo(&obj);
    if let Some(mini) = mini.as_deref().and_then(|b| object::File::parse(b).ok()) {
        functions.extend(functions_of(&mini, false));
    }
    Ok(BinaryFacts {
        build_id,
        checksum,
        functions,
    })
}

/// Whether `tree` describes the binary with `facts`. Of its procedures with an entry address
/// (HPCToolkit's `targXXXX` names for stripped functions aside), at least half must start at a
/// function symbol, and nearly all of those (nine in ten) must carry that symbol's name (link
/// or display name, a clone suffix such as `.part.0` aside): a structure file of another
/// build, whose functions moved, names the symbols it lands on wrongly. A binary without
/// symbols cannot be checked and is taken on trust.
pub(crate) fn describes(tree: &ScopeTree, facts: &BinaryFacts) -> bool {
    if facts.functions.is_empty() {
        return true;
    }
    let mut symbols: fxhash::FxHashMap<u64, Vec<&str>> = fxhash::FxHashMap::default();
    for (addr, name) in &facts.functions {
        symbols.entry(*addr).or_default().push(name.as_str());
    }
    let (mut total, mut at_symbol, mut agree) = (0usize, 0usize, 0usize);
    for id in tree.procedures() {
        let p = tree.get(id);
        let Some(entry) = p.entry else { continue };
        if p.name.starts_with("targ") && p.link_name.is_none() {
            continue;
        }
        total += 1;
        let Some(names) = symbols.get(&entry) else {
            continue;
        };
        at_symbol += 1;
        let same = |n: &&str| {
            let base = n.split('.').next().unwrap_or(n);
            [*n, base]
                .iter()
                .any(|n| *n == &*p.name || p.link_name.as_deref() == Some(n))
        };
        agree += usize::from(names.iter().any(same));
    }
    total == 0 || (at_symbol * 2 >= total && agree * 10 >= at_symbol * 9)
}

/// The last path component of a module path, used to match structure files whose `LM` path
/// differs (the binary was moved, or analysed elsewhere).
pub(crate) fn file_name(path: &str) -> &str {
    crate::db::label::base_name(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use structure::{Scope, ScopeKind};

    /// A tree with procedures `(entry, name)`.
    fn tree(procedures: &[(u64, &str)]) -> ScopeTree {
        let mut tree = ScopeTree::new("/bin/app");
        for &(entry, name) in procedures {
            let mut p = Scope::new(ScopeKind::Procedure);
            p.name = name.into();
            p.entry = Some(entry);
            tree.add(tree.root(), p);
        }
        tree.finish();
        tree
    }

    #[test]
    fn a_structure_file_must_name_the_symbols_it_lands_on() {
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        let facts = BinaryFacts {
            build_id: None,
            checksum: None,
            functions: names
                .iter()
                .enumerate()
                .map(|(i, n)| (0x1000 + 0x10 * i as u64, n.to_string()))
                .collect(),
        };
        let same: Vec<(u64, &str)> = facts
            .functions
            .iter()
            .map(|(a, n)| (*a, n.as_str()))
            .collect();
        assert!(describes(&tree(&same), &facts));
        // Another build: 6 of 10 functions where they were, 4 moved onto others' addresses
        // (half matched: what the old rule accepted).
        let mut moved = same.clone();
        for (i, p) in moved.iter_mut().enumerate().skip(6) {
            p.1 = names[(i + 1) % 10];
        }
        assert!(!describes(&tree(&moved), &facts));
        // A clone suffix on the symbol is the same function.
        let clone = BinaryFacts {
            build_id: None,
            checksum: None,
            functions: vec![(0x1000, "a.part.0".into())],
        };
        assert!(describes(&tree(&[(0x1000, "a")]), &clone));
    }
}
