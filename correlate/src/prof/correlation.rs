//! The whole correlation: inputs in, database and summary out.
//!
//! [`correlate`] recognises its inputs by content (a directory stands for the profiles in it),
//! streams the profiles' metrics, modules and threads ([`gather_share`], [`crate::prof::profiles`]),
//! finds each module's structure (a structure file matched by path, the on-disk cache, or
//! on-the-fly analysis, in parallel: [`prepare`], [`crate::prof::structures`]), enriches every calling
//! context ([`Prepared::enrich_share`]) and returns the database with a [`Summary`]
//! ([`finish_enriched`]). A parallel correlation runs the same stages, each process over its
//! share of the profiles, and merges their results in input order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::db::database::{Database, MetricDesc, StructureSource};
use crate::prof::cache::StructureCache;
use crate::prof::data::{DataBuilder, ProfileInput, Variables};
use crate::prof::error::CorrelateError;
use crate::prof::inputs::{self, StructureFile};
use crate::prof::openmp::{graft, Grafted};
use crate::prof::profiles;
use crate::prof::shares::{Enriched, Message, Prepared, Share};
use crate::prof::structures::{find_structures, Analyser};
use crate::prof::wall;

/// What to correlate and how.
pub struct Options<'a> {
    /// Input files, profiles and structure files in any order (recognised by content).
    pub inputs: Vec<PathBuf>,
    /// The structure cache to use, or `None` (`--no-cache`).
    pub cache: Option<StructureCache>,
    /// How modules without a structure file are analysed.
    pub analyser: &'a Analyser<'a>,
    /// Whether OpenMP worker threads are grafted under their parallel regions
    /// ([`crate::graft`]; `--no-graft` keeps the raw threads).
    pub graft: bool,
}

/// What a correlation did, for the summary line.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Every module with the source of its structure.
    pub modules: Vec<(String, StructureSource)>,
    /// Procedures recovered on the fly in this run (over all modules analysed).
    pub analysed_procedures: usize,
    /// Modules read from the copies a measurement carries (`hpcrun-rs --bundle`).
    pub bundled: usize,
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
    /// What OpenMP grafting did (a program that mapped an OpenMP runtime).
    pub openmp: Option<Grafted>,
    /// The summary's lines about JIT code named by perf maps (none without one).
    pub jit: Vec<String>,
    /// Things the user should know that did not stop the run.
    pub warnings: Vec<String>,
    /// Files of a measurement directory left out of the database (unreadable, damaged, not
    /// profiles), each with why: the database is incomplete.
    pub skipped: Vec<String>,
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
/// The profiles are streamed (`crate::prof::profiles`); a profile of a directory that does not
/// read is skipped and named in [`Summary::skipped`].
pub fn correlate(options: &Options<'_>) -> Result<(Database, Summary), CorrelateError> {
    let prepared = prepare(options, gather_share(&options.inputs, 0, 1)?)?;
    let enriched = prepared.enrich_share(0, 1)?;
    finish_enriched(options, prepared, enriched)
}

/// The first pass over one share of the inputs: the union of its profiles' metrics and
/// modules, their addresses and where each profile's tables go. What a process of a parallel
/// correlation (`hpcprof-rs-mpi`) reduces before one of them calls [`prepare`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Partial {
    gathered: profiles::Gathered,
    /// Structure files among the inputs (share 0 only).
    structures: Vec<PathBuf>,
    /// Files of a measurement directory passed over when listing (share 0 only).
    listed_skipped: Vec<String>,
    #[serde(skip, default = "Instant::now")]
    start: Instant,
}

/// Gather share `share` of `shares` of the profiles among `inputs` (consecutive profiles, in
/// input order, so that merging the shares in order gives the serial tables). Every share
/// lists the inputs; the first keeps the structure files and what listing passed over.
pub fn gather_share(
    inputs: &[PathBuf],
    share: usize,
    shares: usize,
) -> Result<Partial, CorrelateError> {
    let start = Instant::now();
    let mut listed = profiles::list(inputs)?;
    if listed.profiles.is_empty() {
        return Err(CorrelateError::Unrecognised {
            path: inputs.first().cloned().unwrap_or_default(),
            what: "no profile.db among the inputs",
        });
    }
    let n = listed.profiles.len();
    let shares = shares.max(1);
    let mine = &listed.profiles[n * share / shares..n * (share + 1) / shares];
    let gathered = profiles::gather(mine)?;
    if share != 0 {
        listed.structures.clear();
        listed.skipped.clear();
    }
    Ok(Partial {
        gathered,
        structures: listed.structures,
        listed_skipped: listed.skipped,
        start,
    })
}

impl Message for Partial {
    const WHAT: &'static str = "a partial";
}

impl Share for Partial {
    fn merge(&mut self, later: Partial) -> Result<(), CorrelateError> {
        self.structures.extend(later.structures);
        self.listed_skipped.extend(later.listed_skipped);
        self.gathered.merge(later.gathered)
    }
}

/// Structure for the first pass over every share, merged into `partial`: each module's
/// structure file, cache entry or on-the-fly analysis. What a parallel correlation computes
/// once and sends to every process, which then enriches its share
/// ([`Prepared::enrich_share`]).
pub fn prepare(options: &Options<'_>, partial: Partial) -> Result<Prepared, CorrelateError> {
    let Partial {
        mut gathered,
        structures,
        listed_skipped,
        start,
    } = partial;
    if gathered.members.is_empty() {
        return Err(CorrelateError::Unrecognised {
            path: options.inputs.first().cloned().unwrap_or_default(),
            what: "no profile among the inputs could be read",
        });
    }
    let structure_files: Vec<StructureFile> = structures
        .par_iter()
        .map(|p| inputs::read_structure_file(p))
        .collect::<Result<_, _>>()?;
    let mut warnings = Vec::new();
    let stores = gathered.bundle_stores();
    let found = find_structures(
        &gathered.modules,
        &gathered.addresses,
        &structure_files,
        &stores,
        options.cache.as_ref(),
        options.analyser,
        &mut warnings,
    )?;
    gathered.addresses = Vec::new();
    Ok(Prepared {
        gathered,
        found,
        stores,
        warnings,
        listed_skipped,
        start,
    })
}

/// The rest of [`correlate`] once every share is enriched and merged into `enriched`: finish
/// the tree, name data, fill the tables and sum up.
pub fn finish_enriched(
    options: &Options<'_>,
    prepared: Prepared,
    enriched: Enriched,
) -> Result<(Database, Summary), CorrelateError> {
    let Prepared {
        mut gathered,
        found,
        stores,
        warnings,
        listed_skipped,
        start,
    } = prepared;
    let (mut db, traces, kept, jit) = enriched.finish(&gathered)?;
    let naming = Instant::now();
    let binaries: Vec<Option<PathBuf>> = found.iter().map(|f| f.binary.clone()).collect();
    let bundled = (binaries.iter().flatten())
        .filter(|b| stores.iter().any(|s| b.starts_with(s)))
        .count();
    let variables = Variables::new(&db.modules, &binaries, options.cache.as_ref());
    let mut data = DataBuilder::new(&db, &variables);
    for k in &kept {
        let Some(profile) = &k.profile else { continue };
        let input = ProfileInput {
            profile,
            map: &gathered.members[k.member].map,
            nodes: &k.nodes,
        };
        data.add(&mut db, &input);
    }
    db.data = data.finish(&db);
    db.data.instructions = crate::prof::data::decode_accesses(&db, &binaries);
    db.data.elapsed_ns = gathered.elapsed_ns;
    db.traces = traces;
    let data = (!db.data.is_empty()).then(|| (db.data.objects.len(), naming.elapsed()));
    fill_tables(&mut db, &gathered);
    let openmp = options.graft.then(|| graft(&mut db, &binaries)).flatten();
    wall::add_wall(&mut db);
    let mut skipped = listed_skipped;
    skipped.append(&mut gathered.skipped);
    let summary = Summary {
        modules: (db.modules.iter().zip(&found))
            .map(|(m, f)| (m.path.clone(), f.source.clone()))
            .collect(),
        analysed_procedures: found.iter().map(|f| f.analysed).sum(),
        bundled,
        contexts: db.nodes.len(),
        openmp,
        jit: jit.lines(),
        metrics: db.metrics.clone(),
        unknown_addresses: db.stats.unknown_addresses,
        unknown_samples: db.stats.unknown_samples,
        data,
        warnings: distinct(warnings),
        skipped,
        elapsed: start.elapsed(),
    };
    Ok((db, summary))
}

/// Fill the database's per-profile tables and measurement counters from the first pass.
fn fill_tables(db: &mut Database, gathered: &profiles::Gathered) {
    let members = &gathered.members;
    db.profiles = members
        .iter()
        .map(|m| m.path.display().to_string())
        .collect();
    db.jobs = members.iter().map(|m| m.job.clone()).collect();
    if members.iter().any(|m| !m.watch.is_empty()) {
        db.watch = members.iter().map(|m| m.watch.clone()).collect();
    }
    db.command = gathered.command.clone();
    db.read_with = gathered.read_with.clone();
    db.stats.samples = gathered.stats.samples;
    db.stats.lost = gathered.stats.lost;
    db.stats.partial = gathered.stats.partial;
}

/// `warnings` without repeats (a cache directory that cannot be written is said once, not once
/// per module), in their first order.
fn distinct(mut warnings: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    warnings
}

/// The one-paragraph summary the tool called `tool` (`hpcprof-rs`, `hpcprof-rs-mpi`) prints
/// on stderr.
pub fn summary_text(tool: &str, summary: &Summary, output: &Path) -> String {
    let (file, fly, cache, none) = summary.module_counts();
    let focused = if fly > 0 {
        format!(" (focused: {} procedures)", summary.analysed_procedures)
    } else {
        String::new()
    };
    let mut text = format!(
        "{tool}: {} modules correlated (structure from file {file}, on the fly {fly}{focused}, cache {cache}, none {none}); {} contexts",
        summary.modules.len(),
        summary.contexts
    );
    if summary.bundled > 0 {
        text.push_str(&format!(
            "; {} binaries read from the measurement's bundle",
            summary.bundled
        ));
    }
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
    if let Some(openmp) = &summary.openmp {
        text.push_str(&format!("\n  {}", openmp.line()));
    }
    for line in &summary.jit {
        text.push_str(&format!("\n  {line}"));
    }
    for w in summary_warnings(summary) {
        text.push_str(&format!("\n{w}"));
    }
    text
}

/// The summary's warnings, one line each (what `hpcprof-rs -q` still prints).
pub fn summary_warnings(summary: &Summary) -> Vec<String> {
    let warnings = summary.warnings.iter().map(|w| format!("warning: {w}"));
    let skipped = summary
        .skipped
        .iter()
        .map(|s| format!("warning: skipped {s}"));
    warnings.chain(skipped).collect()
}
