//! The whole correlation: inputs in, database and summary out.
//!
//! [`correlate`] recognises its inputs by content, merges the profiles' metrics, modules and
//! threads, finds each module's structure (a structure file matched by path, the on-disk cache,
//! or on-the-fly analysis, in parallel), enriches every calling context and returns the
//! database with a [`Summary`].
//!
//! On-the-fly analysis is focused: the analyser gets the addresses the enrichment will look up
//! in the module (sampled IPs, and `ra - 1` of return addresses) and recovers only the
//! procedures holding them (`structure::analyze_focused`), which answers those lookups exactly
//! as a whole-module analysis would. See [`crate::cache`] for how such trees are reused.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fxhash::FxHashMap;
use profiler::db::Profile;
use rayon::prelude::*;
use structure::{Analysis, Coverage, ScopeTree, StructureError};
use tempfile::TempDir;

use crate::cache::StructureCache;
use crate::database::{Database, MetricDesc, ModuleDesc, ModuleId, StructureSource};
use crate::enrich::{Enricher, ProfileMapping};
use crate::error::CorrelateError;
use crate::inputs::{self, InputKind, StructureFile};

/// Recovers a binary's structure on the fly, at least for the given link-time addresses
/// (sorted, distinct): normally `structure::analyze_focused`.
pub type Analyser<'a> = dyn Fn(&Path, &[u64]) -> Result<Analysis, StructureError> + Sync + 'a;

/// What to correlate and how.
pub struct Options<'a> {
    /// Input files, profiles and structure files in any order (recognised by content).
    pub inputs: Vec<PathBuf>,
    /// The structure cache to use, or `None` (`--no-cache`).
    pub cache: Option<StructureCache>,
    /// How modules without a structure file are analysed.
    pub analyser: &'a Analyser<'a>,
}

/// What a correlation did, for the summary line.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Every module with the source of its structure.
    pub modules: Vec<(String, StructureSource)>,
    /// Procedures recovered on the fly in this run (over all modules analysed).
    pub analysed_procedures: usize,
    /// Distinct calling contexts (nodes of the enriched tree).
    pub contexts: usize,
    /// Metrics with their totals.
    pub metrics: Vec<MetricDesc>,
    /// Distinct addresses left as `<unknown procedure>`.
    pub unknown_addresses: u64,
    /// Samples whose leaf is an `<unknown procedure>`.
    pub unknown_samples: u64,
    /// Things the user should know that did not stop the run.
    pub warnings: Vec<String>,
    /// Wall-clock time taken.
    pub elapsed: Duration,
}

impl Summary {
    /// Number of modules whose structure came from each kind of source: (file, on the fly,
    /// cache, none).
    pub(crate) fn module_counts(&self) -> (usize, usize, usize, usize) {
        let count =
            |f: fn(&StructureSource) -> bool| self.modules.iter().filter(|(_, s)| f(s)).count();
        (
            count(|s| matches!(s, StructureSource::File(_))),
            count(|s| matches!(s, StructureSource::OnTheFly)),
            count(|s| matches!(s, StructureSource::Cache)),
            count(|s| matches!(s, StructureSource::None(_))),
        )
    }
}

/// Correlate: read the inputs, find structure, enrich, and return the database and summary.
pub fn correlate(options: &Options<'_>) -> Result<(Database, Summary), CorrelateError> {
    let start = Instant::now();
    let mut profiles = Vec::new();
    let mut structure_files = Vec::new();
    for path in &options.inputs {
        match inputs::classify(path)? {
            InputKind::Profile => profiles.push(path.clone()),
            InputKind::Structure => structure_files.push(path.clone()),
        }
    }
    if profiles.is_empty() {
        return Err(CorrelateError::Unrecognised {
            path: options.inputs.first().cloned().unwrap_or_default(),
            what: "no profile.db among the inputs",
        });
    }
    let read: Vec<Profile> = profiles
        .par_iter()
        .map(|p| profiler::db::Profile::read(p).map_err(CorrelateError::Profile))
        .collect::<Result<_, _>>()?;
    if let Some((first, second)) = repeated_measurement(&read) {
        return Err(CorrelateError::Duplicate {
            first: profiles[first].clone(),
            second: profiles[second].clone(),
        });
    }
    let structure_files: Vec<StructureFile> = structure_files
        .par_iter()
        .map(|p| inputs::read_structure_file(p))
        .collect::<Result<_, _>>()?;

    let (metrics, metric_maps) = merge_metrics(&read, &profiles)?;
    let (modules, module_maps) = merge_modules(&read);
    let mut warnings = Vec::new();
    let addresses = module_addresses(&read, &module_maps, modules.len());
    let found = find_structures(
        &modules,
        &addresses,
        &structure_files,
        options,
        &mut warnings,
    )?;
    let analysed_procedures = found.iter().map(|f| f.analysed).sum();

    let module_descs: Vec<ModuleDesc> = modules
        .iter()
        .zip(&found)
        .map(|(m, f)| ModuleDesc {
            path: m.path.clone(),
            build_id: m.build_id.clone(),
            structure: f.source.clone(),
        })
        .collect();
    let trees: Vec<Option<&ScopeTree>> = found.iter().map(|f| f.tree.as_ref()).collect();
    let mut enricher = Enricher::new(metrics, module_descs, &trees);
    for (i, profile) in read.iter().enumerate() {
        let map = ProfileMapping {
            profile: i as u32,
            modules: module_maps[i].clone(),
            metrics: metric_maps[i].clone(),
        };
        enricher.add_profile(profile, &map);
    }
    let mut db = enricher.finish();
    db.profiles = profiles.iter().map(|p| p.display().to_string()).collect();
    db.command = read[0].command.clone();
    for p in &read {
        let stats = &mut db.stats;
        stats.samples = stats.samples.saturating_add(p.stats.samples);
        stats.lost = stats.lost.saturating_add(p.stats.lost);
        stats.partial = stats.partial.saturating_add(p.stats.partial);
    }
    let summary = Summary {
        modules: db
            .modules
            .iter()
            .map(|m| (m.path.clone(), m.structure.clone()))
            .collect(),
        analysed_procedures,
        contexts: db.nodes.len(),
        metrics: db.metrics.clone(),
        unknown_addresses: db.stats.unknown_addresses,
        unknown_samples: db.stats.unknown_samples,
        warnings: distinct(warnings),
        elapsed: start.elapsed(),
    };
    Ok((db, summary))
}

/// The union of the profiles' events (by name), and each profile's event -> metric map.
fn merge_metrics(
    profiles: &[Profile],
    paths: &[PathBuf],
) -> Result<(Vec<MetricDesc>, Vec<Vec<usize>>), CorrelateError> {
    let mut metrics: Vec<MetricDesc> = Vec::new();
    let mut maps = Vec::new();
    for (profile, path) in profiles.iter().zip(paths) {
        let mut map = Vec::new();
        for event in &profile.events {
            let found = metrics.iter().position(|m| m.name == event.name);
            let index = match found {
                Some(i) if metrics[i].unit != event.unit => {
                    return Err(CorrelateError::Incompatible {
                        path: path.clone(),
                        why: format!(
                            "event {} is in {}, another profile has it in {}",
                            event.name, event.unit, metrics[i].unit
                        ),
                    })
                }
                Some(i) => i,
                None => {
                    metrics.push(MetricDesc::new(&event.name, &event.unit, event.sampling));
                    metrics.len() - 1
                }
            };
            map.push(index);
        }
        maps.push(map);
    }
    Ok((metrics, maps))
}

/// The union of the profiles' modules (by path and build-id), and each profile's map.
fn merge_modules(profiles: &[Profile]) -> (Vec<profiler::db::ModuleInfo>, Vec<Vec<ModuleId>>) {
    let mut modules = Vec::new();
    let mut index: FxHashMap<profiler::db::ModuleInfo, ModuleId> = FxHashMap::default();
    let maps = profiles
        .iter()
        .map(|p| {
            p.modules
                .iter()
                .map(|m| {
                    *index.entry(m.clone()).or_insert_with(|| {
                        modules.push(m.clone());
                        (modules.len() - 1) as ModuleId
                    })
                })
                .collect()
        })
        .collect();
    (modules, maps)
}

/// Per database module, the addresses the enrichment will look up in it (sorted, distinct):
/// what an on-the-fly analysis must answer for.
fn module_addresses(
    profiles: &[Profile],
    module_maps: &[Vec<ModuleId>],
    modules: usize,
) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); modules];
    for (profile, map) in profiles.iter().zip(module_maps) {
        for node in profile.threads.iter().flat_map(|t| &t.cct.nodes) {
            if let profiler::db::Frame::Code { module, addr, kind } = node.frame {
                if let Some(&m) = map.get(module as usize) {
                    out[m as usize].push(kind.lookup(addr.0));
                }
            }
        }
    }
    for a in &mut out {
        a.sort_unstable();
        a.dedup();
    }
    out
}

/// A module's structure: where it came from, the tree, and how many procedures were analysed
/// on the fly for it.
struct Found {
    source: StructureSource,
    tree: Option<ScopeTree>,
    analysed: usize,
}

/// How a module's structure will be obtained.
enum Plan<'s> {
    /// A tree from a structure file.
    File(&'s Path, &'s ScopeTree),
    /// No structure, for this reason.
    None(String),
    /// From the cache or by analysis of this binary (cache key, if any).
    Recover(PathBuf, Option<String>),
}

/// The structure of every module: its source and its tree (borrowed from a structure file or
/// owned when recovered).
fn find_structures(
    modules: &[profiler::db::ModuleInfo],
    addresses: &[Vec<u64>],
    files: &[StructureFile],
    options: &Options<'_>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Found>, CorrelateError> {
    let refusal = options.cache.as_ref().and_then(StructureCache::refusal);
    let cache = options.cache.as_ref().filter(|_| refusal.is_none());
    warnings.extend(refusal);
    let mut used = vec![vec![false; 0]; files.len()];
    for (u, f) in used.iter_mut().zip(files) {
        *u = vec![false; f.trees.len()];
    }
    // A private directory (unpredictable name, mode 0700, removed at the end) for the image of
    // hpcprof-rs's own vDSO, made when a profile has one.
    let scratch = OnceCell::new();
    let plans: Vec<Plan<'_>> = modules
        .iter()
        .map(|m| plan(m, files, &mut used, warnings, &scratch))
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
                },
                Vec::new(),
            ),
            Plan::None(why) => (
                Found {
                    source: StructureSource::None(why),
                    tree: None,
                    analysed: 0,
                },
                Vec::new(),
            ),
            Plan::Recover(binary, key) => {
                recover(&binary, key.as_deref(), addresses, cache, options.analyser)
            }
        })
        .collect();
    Ok(results
        .into_iter()
        .map(|(found, warning)| {
            warnings.extend(warning);
            found
        })
        .collect())
}

/// Decide where module `m`'s structure comes from. A structure file matches by its `LM` path,
/// else by file name when exactly one tree has it; a match that records another build than
/// the profiled one (hpcstruct-rs's files say which), or whose procedures do not fit the
/// binary on disk, is an error.
fn plan<'s>(
    m: &profiler::db::ModuleInfo,
    files: &'s [StructureFile],
    used: &mut [Vec<bool>],
    warnings: &mut Vec<String>,
    scratch: &OnceCell<Option<TempDir>>,
) -> Result<Plan<'s>, CorrelateError> {
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
    let vdso = (m.path == "[vdso]")
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
    let binary = vdso.as_deref().unwrap_or(Path::new(&m.path));
    let is_file = (vdso.is_some() || !m.path.starts_with('[')) && binary.is_file();
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
    Ok(Plan::Recover(
        binary.to_path_buf(),
        StructureCache::key(binary, id, m.checksum),
    ))
}

/// Recover one binary's structure for `addresses`: from the cache if its entry covers them all,
/// else by focused analysis of those addresses' procedures and the entry's (the union is then
/// cached). Returns what was found and warnings if something went wrong.
fn recover(
    binary: &Path,
    key: Option<&str>,
    addresses: &[u64],
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
            };
            (found, warnings)
        }
        Err(e) => {
            let found = Found {
                source: StructureSource::None(e.to_string()),
                tree: None,
                analysed: 0,
            };
            warnings.push(e.to_string());
            (found, warnings)
        }
    }
}

/// The first pair of profiles (indices) that record the same measurement: same host, start and
/// end time and processes. A run's profile names its start to the nanosecond, so two runs
/// never share one; the same file given twice, or a copy of it, always does.
fn repeated_measurement(profiles: &[Profile]) -> Option<(usize, usize)> {
    let mut seen = FxHashMap::default();
    for (i, p) in profiles.iter().enumerate() {
        let pids: Vec<u32> = p.processes.iter().map(|pr| pr.pid).collect();
        let identity = (&p.host, p.start_ns, p.end_ns, pids);
        if let Some(&first) = seen.get(&identity) {
            return Some((first, i));
        }
        seen.insert(identity, i);
    }
    None
}

/// `warnings` without repeats (a cache directory that cannot be written is said once, not once
/// per module), in their first order.
fn distinct(mut warnings: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    warnings
}

/// Addresses that make a new focused analysis cover what a cached tree covered: the entry of
/// each of its procedures and the start of each covered range (addresses in no procedure).
fn revisit<'t>(tree: &'t ScopeTree, coverage: &'t Coverage) -> impl Iterator<Item = u64> + 't {
    let starts = match coverage {
        Coverage::Ranges(r) => r.as_slice(),
        Coverage::Module => &[],
    };
    tree.procedures()
        .filter_map(|p| tree.get(p).entry)
        .chain(starts.iter().map(|r| r.start))
}

/// The one-paragraph summary `hpcprof-rs` prints on stderr.
pub fn summary_text(summary: &Summary, output: &Path) -> String {
    let (file, fly, cache, none) = summary.module_counts();
    let focused = if fly > 0 {
        format!(" (focused: {} procedures)", summary.analysed_procedures)
    } else {
        String::new()
    };
    let mut text = format!(
        "hpcprof-rs: {} modules correlated (structure from file {file}, on the fly {fly}{focused}, cache {cache}, none {none}); {} contexts",
        summary.modules.len(),
        summary.contexts
    );
    for m in &summary.metrics {
        text.push_str(&format!(
            "; {}: {} {} in {} samples",
            m.name, m.total.value, m.unit, m.total.samples
        ));
    }
    if summary.unknown_addresses > 0 {
        text.push_str(&format!(
            "; {} addresses ({} samples) in <unknown procedure>",
            summary.unknown_addresses, summary.unknown_samples
        ));
    }
    text.push_str(&format!(
        "; {:.2} s -> {}",
        summary.elapsed.as_secs_f64(),
        output.display()
    ));
    let without: BTreeMap<&str, &str> = summary
        .modules
        .iter()
        .filter_map(|(p, s)| match s {
            StructureSource::None(why) => Some((p.as_str(), why.as_str())),
            _ => None,
        })
        .collect();
    for (path, why) in without {
        text.push_str(&format!("\n  no structure for {path}: {why}"));
    }
    for w in &summary.warnings {
        text.push_str(&format!("\nwarning: {w}"));
    }
    text
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
    fn analyse(asked: &Mutex<Vec<Vec<u64>>>, path: &Path, addresses: &[u64]) -> Analysis {
        asked.lock().unwrap().push(addresses.to_vec());
        let mut tree = ScopeTree::new(&path.display().to_string());
        let mut bases: Vec<u64> = addresses.iter().map(|a| a & !0xf).collect();
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
        let analyser = |path: &Path, addresses: &[u64]| Ok(analyse(&asked, path, addresses));
        let options = Options {
            inputs: Vec::new(),
            cache: Some(StructureCache::at(dir.clone())),
            analyser: &analyser,
        };
        let bin = Path::new("/bin/app");
        let key = Some("b-0123");
        let run = |addresses: &[u64]| {
            let (found, warnings) = recover(bin, key, addresses, options.cache.as_ref(), &analyser);
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
            let stmt = tree.lookup(a).expect("cached tree answers");
            assert_eq!(tree.get(stmt).line, (a & !0xf) as u32);
        }
        let uncached = Options {
            cache: None,
            ..options
        };
        let (found, _) = recover(bin, key, &[0x101], uncached.cache.as_ref(), &analyser);
        assert_eq!(
            found.source,
            StructureSource::OnTheFly,
            "--no-cache analyses"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
