//! Finding each module's program structure: a structure file matched by path, the on-disk
//! cache, or on-the-fly analysis (in parallel over modules).
//!
//! On-the-fly analysis is focused: the analyser gets the addresses the enrichment will look up
//! in the module (gathered by [`crate::prof::profiles`]: sampled IPs, and `ra - 1` of return addresses) and
//! recovers only the procedures holding them (`structure::analyze_focused`), which answers
//! those lookups exactly as a whole-module analysis would. See [`crate::prof::cache`] for how such
//! trees are reused.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use profiler::addr::Svma;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use structure::{Analysis, Coverage, ScopeTree, StructureError};
use tempfile::TempDir;

use crate::db::database::StructureSource;
use crate::prof::cache::StructureCache;
use crate::prof::error::CorrelateError;
use crate::prof::inputs::{self, StructureFile};

/// Recovers a binary's structure on the fly, at least for the given link-time addresses
/// (sorted, distinct): normally `structure::analyze_focused`.
pub type Analyser<'a> = dyn Fn(&Path, &[Svma]) -> Result<Analysis, StructureError> + Sync + 'a;

/// A module's structure: where it came from, the tree, and how many procedures were analysed
/// on the fly for it.
#[derive(Serialize, Deserialize)]
pub(crate) struct Found {
    pub(crate) source: StructureSource,
    pub(crate) tree: Option<ScopeTree>,
    pub(crate) analysed: usize,
    /// The module's file on this machine, where the data naming and the OpenMP runtime's code
    /// are read from: its copy in a `--bundle` store, else the path it was measured at.
    pub(crate) binary: Option<PathBuf>,
}

/// How a module's structure will be obtained.
enum Plan<'s> {
    /// A tree from a structure file.
    File(&'s Path, &'s ScopeTree),
    /// No structure, for this reason.
    None(String),
    /// From the cache or by analysis of this binary (cache key, if any), a copy of the module
    /// (`hpcrun-rs --bundle`) to be named after the path it was measured at (the name).
    Recover(PathBuf, Option<String>, Option<String>),
}

/// The structure of every module: its source and its tree (borrowed from a structure file or
/// owned when recovered). A module copied into one of `stores` (`hpcrun-rs --bundle`) is read
/// from its copy.
pub(crate) fn find_structures(
    modules: &[profiler::db::ModuleInfo],
    addresses: &[Vec<Svma>],
    files: &[StructureFile],
    stores: &[PathBuf],
    cache: Option<&StructureCache>,
    analyser: &Analyser<'_>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Found>, CorrelateError> {
    let refusal = cache.and_then(StructureCache::refusal);
    let cache = cache.filter(|_| refusal.is_none());
    warnings.extend(refusal);
    let mut used = vec![vec![false; 0]; files.len()];
    for (u, f) in used.iter_mut().zip(files) {
        *u = vec![false; f.trees.len()];
    }
    // A private directory (unpredictable name, mode 0700, removed at the end) for the image of
    // hpcprof-rs's own vDSO, made when a profile has one.
    let scratch = OnceCell::new();
    let binaries: Vec<Option<PathBuf>> = (modules.iter())
        .map(|m| local_binary(m, stores, warnings))
        .collect();
    let plans: Vec<Plan<'_>> = (modules.iter().zip(&binaries))
        .map(|(m, binary)| plan(m, binary.as_deref(), files, &mut used, warnings, &scratch))
        .collect::<Result<_, _>>()?;
    for (f, u) in files.iter().zip(&used) {
        if !u.iter().any(|&x| x) {
            let modules: Vec<&str> = f.trees.iter().map(|t| t.module_path()).collect();
            return Err(CorrelateError::Unused {
                path: f.path.clone(),
                modules: modules.join(", "),
            });
        }
    }
    let results: Vec<(Found, Vec<String>)> = plans
        .into_par_iter()
        .zip(addresses)
        .map(|(p, addresses)| match p {
            Plan::File(path, tree) => (
                Found {
                    source: StructureSource::File(path.display().to_string()),
                    tree: Some(tree.clone()),
                    analysed: 0,
                    binary: None,
                },
                Vec::new(),
            ),
            Plan::None(why) => (
                Found {
                    source: StructureSource::None(why),
                    tree: None,
                    analysed: 0,
                    binary: None,
                },
                Vec::new(),
            ),
            Plan::Recover(binary, key, name) => {
                let (found, warnings) =
                    recover(&binary, key.as_deref(), addresses, cache, analyser);
                match name {
                    Some(name) => named_as_measured(found, warnings, &binary, &name),
                    None => (found, warnings),
                }
            }
        })
        .collect();
    // The data naming and the OpenMP runtime's code read files only: a `[vdso]` copy serves
    // its structure alone, as this machine's own image does without a bundle.
    Ok(results
        .into_iter()
        .zip(binaries.into_iter().zip(modules))
        .map(|((mut found, warning), (binary, m))| {
            warnings.extend(warning);
            found.binary = binary.filter(|_| !m.path.starts_with('['));
            found
        })
        .collect())
}

/// What was recovered from `copy`, a `--bundle` copy of a module, told as of the module at
/// `name`, the path it was measured at: its tree, and the reasons and warnings that name the
/// file (a database must not depend on where the measurement was moved).
fn named_as_measured(
    mut found: Found,
    warnings: Vec<String>,
    copy: &Path,
    name: &str,
) -> (Found, Vec<String>) {
    let copy = copy.display().to_string();
    if let Some(tree) = &mut found.tree {
        tree.rename_module(name);
    }
    if let StructureSource::None(why) = &mut found.source {
        *why = why.replace(&copy, name);
    }
    let warnings = warnings
        .into_iter()
        .map(|w| w.replace(&copy, name))
        .collect();
    (found, warnings)
}

/// Module `m`'s file on this machine: its copy in one of `stores`, else the path it was
/// measured at where that is a file, else (where `DEBUGINFOD_URLS` names servers) the binary
/// with its build-id from a debuginfod server, noted in `warnings` if none has it; `None` for
/// the vDSO and other bracketed names without a copy.
fn local_binary(
    m: &profiler::db::ModuleInfo,
    stores: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Option<PathBuf> {
    if let Some(copy) = profiler::bundle::find(stores, m) {
        return Some(copy);
    }
    let path = Path::new(&m.path);
    if m.path.starts_with('[') || path.is_file() {
        return (!m.path.starts_with('[')).then(|| path.to_path_buf());
    }
    let id = m.build_id.as_deref()?;
    structure::debuginfod::executable(&m.path, id, warnings)
}

/// Decide where module `m`'s structure comes from. A structure file matches by its `LM` path,
/// else by file name when exactly one tree has it; a match that records another build than
/// the profiled one (hpcstruct-rs's files say which), or whose procedures do not fit the
/// binary on disk, is an error.
fn plan<'s>(
    m: &profiler::db::ModuleInfo,
    local: Option<&Path>,
    files: &'s [StructureFile],
    used: &mut [Vec<bool>],
    warnings: &mut Vec<String>,
    scratch: &OnceCell<Option<TempDir>>,
) -> Result<Plan<'s>, CorrelateError> {
    if profiler::bundle::jitdump_pid(&m.path).is_some() {
        let why = "a jitdump, no code: the JIT code it lists is named from it";
        return Ok(Plan::None(why.to_string()));
    }
    let candidates: Vec<(usize, usize)> = files
        .iter()
        .enumerate()
        .flat_map(|(fi, f)| (0..f.trees.len()).map(move |ti| (fi, ti)))
        .collect();
    let tree_of = |(fi, ti): (usize, usize)| &files[fi].trees[ti];
    let exact = candidates
        .iter()
        .copied()
        .find(|&c| tree_of(c).module_path() == m.path);
    let by_name: Vec<(usize, usize)> = candidates
        .iter()
        .copied()
        .filter(|&c| inputs::file_name(tree_of(c).module_path()) == inputs::file_name(&m.path))
        .collect();
    let chosen = exact.or(match by_name.as_slice() {
        [one] => Some(*one),
        _ => None,
    });
    let vdso = (m.path == "[vdso]" && local.is_none())
        .then(|| {
            let dir = scratch.get_or_init(|| {
                tempfile::Builder::new()
                    .prefix("hpcprof-rs-")
                    .tempdir()
                    .ok()
            });
            inputs::own_vdso_image(m.build_id.as_deref()?, dir.as_ref()?.path())
        })
        .flatten();
    let binary = (vdso.as_deref().or(local)).unwrap_or(Path::new(&m.path));
    let is_file = (vdso.is_some() || local.is_some()) && binary.is_file();
    let facts = is_file.then(|| inputs::binary_facts(binary).ok()).flatten();
    if let Some(c) = chosen {
        let tree = tree_of(c);
        if let Some(recorded) = tree.identity() {
            if recorded.matches(m.build_id.as_deref(), m.checksum) == Some(false) {
                return Err(CorrelateError::OtherBuild {
                    structure: files[c.0].path.clone(),
                    binary: m.path.clone(),
                    recorded: recorded.clone(),
                });
            }
        }
        if let Some(facts) = &facts {
            if !inputs::describes(tree, facts) {
                return Err(CorrelateError::Mismatch {
                    structure: files[c.0].path.clone(),
                    binary: m.path.clone(),
                });
            }
        }
        used[c.0][c.1] = true;
        return Ok(Plan::File(&files[c.0].path, tree));
    }
    if !is_file {
        return Ok(Plan::None(format!("{}: not a readable file", m.path)));
    }
    let on_disk = facts.as_ref().and_then(|f| f.build_id.as_deref());
    if let Some(why) = facts
        .as_ref()
        .and_then(|f| inputs::changed_since_profiled(m, f))
    {
        warnings.push(format!(
            "{}: the binary changed since it was profiled ({why}); its samples stay unresolved",
            m.path
        ));
        return Ok(Plan::None("binary changed since profiling".into()));
    }
    let id = m.build_id.as_deref().or(on_disk);
    let copy = local.is_some_and(|l| l != Path::new(&m.path));
    let name = match m.path.as_str() {
        "[vdso]" => inputs::VDSO_IMAGE.to_string(),
        path => path.to_string(),
    };
    Ok(Plan::Recover(
        binary.to_path_buf(),
        StructureCache::key(binary, id, m.checksum),
        copy.then_some(name),
    ))
}

/// Recover one binary's structure for `addresses`: from the cache if its entry covers them all,
/// else by focused analysis of those addresses' procedures and the entry's (the union is then
/// cached). Returns what was found and warnings if something went wrong.
fn recover(
    binary: &Path,
    key: Option<&str>,
    addresses: &[Svma],
    cache: Option<&StructureCache>,
    analyser: &Analyser<'_>,
) -> (Found, Vec<String>) {
    let cache = cache.zip(key);
    let (cached, mut warnings) = match cache.map(|(c, k)| c.load(k)) {
        Some(Err(damaged)) => (None, vec![damaged]),
        Some(Ok(entry)) => (entry, Vec::new()),
        None => (None, Vec::new()),
    };
    let mut wanted = addresses.to_vec();
    if let Some((tree, coverage)) = cached {
        if addresses.iter().all(|&a| coverage.covers(a)) {
            let found = Found {
                source: StructureSource::Cache,
                tree: Some(tree),
                analysed: 0,
                binary: None,
            };
            return (found, warnings);
        }
        wanted.extend(revisit(&tree, &coverage));
        wanted.sort_unstable();
        wanted.dedup();
    }
    match analyser(binary, &wanted) {
        Ok(analysis) => {
            warnings.extend(cache.and_then(|(c, k)| {
                c.store(k, &analysis.tree, &analysis.coverage)
                    .err()
                    .map(|e| format!("cannot write structure cache in {}: {e}", c.dir().display()))
            }));
            let found = Found {
                source: StructureSource::OnTheFly,
                analysed: analysis.tree.procedures().count(),
                tree: Some(analysis.tree),
                binary: None,
            };
            (found, warnings)
        }
        Err(e) => {
            let found = Found {
                source: StructureSource::None(e.to_string()),
                tree: None,
                analysed: 0,
                binary: None,
            };
            warnings.push(e.to_string());
            (found, warnings)
        }
    }
}

/// Addresses that make a new focused analysis cover what a cached tree covered: the entry of
/// each of its procedures and the start of each covered range (addresses in no procedure).
fn revisit<'t>(tree: &'t ScopeTree, coverage: &'t Coverage) -> impl Iterator<Item = Svma> + 't {
    let starts = match coverage {
        Coverage::Ranges(r) => r.as_slice(),
        Coverage::Module => &[],
    };
    tree.procedures()
        .filter_map(|p| tree.get(p).entry)
        .chain(starts.iter().map(|r| r.start))
        .map(Svma)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use structure::{normalize_ranges, Scope, ScopeKind};

    /// A stand-in for the structure analysis: one 16-byte procedure (with one statement) at
    /// each asked address rounded down to 16, covering exactly those; records what it was
    /// asked.
    fn analyse(asked: &Mutex<Vec<Vec<u64>>>, path: &Path, addresses: &[Svma]) -> Analysis {
        asked
            .lock()
            .unwrap()
            .push(addresses.iter().map(|a| a.0).collect());
        let mut tree = ScopeTree::new(&path.display().to_string());
        let mut bases: Vec<u64> = addresses.iter().map(|a| a.0 & !0xf).collect();
        bases.dedup();
        for &base in &bases {
            let mut p = Scope::new(ScopeKind::Procedure);
            p.entry = Some(base);
            let p = tree.add(tree.root(), p);
            let mut s = Scope::new(ScopeKind::Statement);
            s.line = base as u32;
            s.ranges = vec![base..base + 16];
            tree.add(p, s);
        }
        tree.finish();
        let covered = bases.iter().map(|&b| b..b + 16).collect();
        Analysis {
            tree,
            summary: Default::default(),
            coverage: Coverage::Ranges(normalize_ranges(covered)),
        }
    }

    #[test]
    fn cache_is_reused_when_it_covers_else_the_union_is_analysed() {
        let dir = std::env::temp_dir().join(format!("hpcprof-recover-test-{}", std::process::id()));
        let asked = Mutex::new(Vec::new());
        let analyser = |path: &Path, addresses: &[Svma]| Ok(analyse(&asked, path, addresses));
        let cache = Some(StructureCache::at(dir.clone()));
        let bin = Path::new("/bin/app");
        let key = Some("b-0123");
        let run = |addresses: &[u64]| {
            let addresses: Vec<Svma> = addresses.iter().copied().map(Svma).collect();
            let (found, warnings) = recover(bin, key, &addresses, cache.as_ref(), &analyser);
            assert_eq!(warnings, Vec::<String>::new());
            found
        };
        let first = run(&[0x105, 0x203]);
        assert_eq!(first.source, StructureSource::OnTheFly);
        assert_eq!(first.analysed, 2);

        let again = run(&[0x10f, 0x200]);
        assert_eq!(again.source, StructureSource::Cache, "covered: no analysis");
        assert_eq!(asked.lock().unwrap().len(), 1);

        let wider = run(&[0x305]);
        assert_eq!(wider.source, StructureSource::OnTheFly);
        assert_eq!(
            asked.lock().unwrap()[1],
            vec![0x100, 0x200, 0x305],
            "the new address with the cached procedures' entries"
        );
        assert_eq!(wider.analysed, 3);

        let all = run(&[0x101, 0x20f, 0x30a]);
        assert_eq!(all.source, StructureSource::Cache, "the union was stored");
        let tree = all.tree.unwrap();
        for a in [0x101, 0x20f, 0x30a] {
            let stmt = tree.lookup(Svma(a)).expect("cached tree answers");
            assert_eq!(tree.get(stmt).line, (a & !0xf) as u32);
        }
        let (found, _) = recover(bin, key, &[Svma(0x101)], None, &analyser);
        assert_eq!(
            found.source,
            StructureSource::OnTheFly,
            "--no-cache analyses"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
