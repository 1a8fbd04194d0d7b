//! The whole correlation: inputs in, database and summary out.
//!
//! [`correlate`] recognises its inputs by content, merges the profiles' metrics, modules and
//! threads, finds each module's structure (a structure file matched by path, the on-disk cache,
//! or on-the-fly analysis, in parallel: [`crate::structures`]), enriches every calling context
//! and returns the database with a [`Summary`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fxhash::FxHashMap;
use profiler::db::Profile;
use rayon::prelude::*;
use structure::ScopeTree;

use crate::cache::StructureCache;
use crate::data::{DataBuilder, ProfileInput, Variables};
use crate::database::{Database, MetricDesc, ModuleDesc, StructureSource};
use crate::enrich::{Enricher, NodeMaps, ProfileMapping};
use crate::error::CorrelateError;
use crate::ids::DbModuleId;
use crate::inputs::{self, InputKind, StructureFile};
use crate::structures::{find_structures, module_addresses, Analyser};

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
    /// Data objects named (a run with `hpcrun-rs --data`), and the time naming them took.
    pub data: Option<(usize, Duration)>,
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
        options.cache.as_ref(),
        options.analyser,
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
    let maps: Vec<(ProfileMapping, NodeMaps)> = read
        .iter()
        .enumerate()
        .map(|(i, profile)| {
            let map = ProfileMapping {
                profile: i as u32,
                modules: module_maps[i].clone(),
                metrics: metric_maps[i].clone(),
            };
            let nodes = enricher.add_profile(profile, &map);
            (map, nodes)
        })
        .collect();
    let mut db = enricher.finish();
    let naming = Instant::now();
    let variables = Variables::new(&db.modules, options.cache.as_ref());
    let mut data = DataBuilder::new(&db, &variables);
    for (profile, (map, nodes)) in read.iter().zip(&maps) {
        data.add(
            &mut db,
            &ProfileInput {
                profile,
                map,
                nodes,
            },
        );
    }
    db.data = data.finish(&db);
    db.data.instructions = crate::data::decode_accesses(&db);
    db.data.elapsed_ns = read
        .iter()
        .map(|p| p.end_ns.saturating_sub(p.start_ns))
        .sum();
    let data = (!db.data.is_empty()).then(|| (db.data.objects.len(), naming.elapsed()));
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
        data,
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
fn merge_modules(profiles: &[Profile]) -> (Vec<profiler::db::ModuleInfo>, Vec<Vec<DbModuleId>>) {
    let mut modules = Vec::new();
    let mut index: FxHashMap<profiler::db::ModuleInfo, DbModuleId> = FxHashMap::default();
    let maps = profiles
        .iter()
        .map(|p| {
            p.modules
                .iter()
                .map(|m| {
                    *index.entry(m.clone()).or_insert_with(|| {
                        modules.push(m.clone());
                        DbModuleId::from_index(modules.len() - 1)
                    })
                })
                .collect()
        })
        .collect();
    (modules, maps)
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
    if let Some((objects, took)) = summary.data {
        text.push_str(&format!(
            "; {objects} data objects named in {:.3} s",
            took.as_secs_f64()
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
