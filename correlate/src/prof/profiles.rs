//! The profiles of one correlation, streamed: memory grows with what the profiles have in
//! common (metrics, modules, distinct addresses, the enriched tree), not with their number.
//!
//! A measurement directory of a parallel job holds one profile per process; holding all their
//! raw trees at once, as a first version did, needs memory in proportion to the ranks. Instead
//! the profiles are read twice, a batch at a time (each batch in parallel, then reduced in
//! order so the database does not depend on thread timing):
//!
//! 1. [`gather`]: the union of their metrics and modules, each profile's maps into them, and
//!    the distinct addresses of each module (what structure recovery needs); the trees are
//!    dropped at once.
//! 2. [`enrich`]: once every module's structure is known, each tree is added to the enriched
//!    tree and dropped, except the few with data references (`hpcrun-rs --data`), which data
//!    naming reads after the tree is finished.
//!
//! A profile found in a directory that does not read is skipped with a warning naming it
//! (one bad file among a thousand should not cost the other 999); one named on the command
//! line is an error, as before.

use std::ops::Range;
use std::path::{Path, PathBuf};

use fxhash::FxHashMap;
use profiler::addr::Svma;
use profiler::db::{ModuleInfo, Profile};
use profiler::job::JobPlace;
use profiler::trace::Traces;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::db::database::{DbStats, MetricDesc};
use crate::db::ids::DbModuleId;
use crate::prof::enrich::{Enricher, NodeMaps, ProfileMapping};
use crate::prof::error::CorrelateError;
use crate::prof::inputs::{self, InputKind};

/// A profile to merge.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// The file.
    pub(crate) path: PathBuf,
    /// Whether it may be skipped when it does not read (it was found in a directory).
    pub(crate) optional: bool,
}

/// The inputs, by kind, with directories expanded to the profiles in them.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// The profiles, in the order given (a directory's in name order, that is by rank).
    pub(crate) profiles: Vec<Input>,
    /// The structure files.
    pub(crate) structures: Vec<PathBuf>,
    /// Files in a directory that were passed over, each with why.
    pub(crate) skipped: Vec<String>,
}

/// Recognise `paths` by content; a directory stands for the `*.db` files in it.
pub(crate) fn list(paths: &[PathBuf]) -> Result<Listed, CorrelateError> {
    let mut listed = Listed::default();
    for path in paths {
        if path.is_dir() {
            list_directory(path, &mut listed)?;
            continue;
        }
        match inputs::classify(path)? {
            InputKind::Profile => listed.profiles.push(Input {
                path: path.clone(),
                optional: false,
            }),
            InputKind::Structure => listed.structures.push(path.clone()),
        }
    }
    Ok(listed)
}

/// Add the profiles of measurement directory `dir` (its `*.db` files, by name) to `listed`.
fn list_directory(dir: &Path, listed: &mut Listed) -> Result<(), CorrelateError> {
    let io_err = |source| CorrelateError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io_err)?;
    names.retain(|p| p.extension().is_some_and(|e| e == "db"));
    names.sort();
    if names.is_empty() {
        return Err(CorrelateError::Unrecognised {
            path: dir.to_path_buf(),
            what: "a directory without profiles (*.db)",
        });
    }
    for path in names {
        match inputs::classify(&path) {
            Ok(InputKind::Profile) => listed.profiles.push(Input {
                path,
                optional: true,
            }),
            Ok(InputKind::Structure) => listed.skipped.push(format!(
                "{}: a structure file in a measurement directory; give it by name",
                path.display()
            )),
            Err(e) => listed.skipped.push(e.to_string()),
        }
    }
    Ok(())
}

/// The measurement a profile records, by host, start, end and process ids: the same one given
/// twice (a copy, a link) would count every cost twice.
type Identity = (String, u64, u64, Vec<u32>);

/// One profile that read, with its place in the database's tables.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Member {
    /// The file.
    pub(crate) path: PathBuf,
    /// Where its modules and events went in the database.
    pub(crate) map: ProfileMapping,
    /// Its rank and job id.
    pub(crate) job: JobPlace,
    /// What it measured (to refuse a second copy).
    identity: Identity,
    /// What its watchpoints saw (`hpcrun-rs --watch`).
    pub(crate) watch: profiler::watchdb::WatchProfile,
}

/// What the first pass keeps of all profiles: their merged tables and maps, never their trees.
///
/// The gathered tables of consecutive shares of the inputs [`merge`](Gathered::merge) into
/// the tables of the whole (what `hpcprof-rs-mpi` sends between ranks: serialized, without
/// the indices, which only the receiving side needs).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Gathered {
    /// The profiles that read, in input order.
    pub(crate) members: Vec<Member>,
    /// The union of their events, by name.
    pub(crate) metrics: Vec<MetricDesc>,
    /// (member, leader) metrics of event groups: each member read with the leader's samples
    /// (as the first profile that grouped it says).
    pub(crate) read_with: Vec<(u32, u32)>,
    /// The union of their modules, by path and identity.
    pub(crate) modules: Vec<ModuleInfo>,
    /// Per database module, the distinct addresses sampled in it (lookup addresses, sorted).
    pub(crate) addresses: Vec<Vec<Svma>>,
    /// The first profile's command line.
    pub(crate) command: Vec<String>,
    /// Measurement counters summed over the profiles.
    pub(crate) stats: DbStats,
    /// Measured wall-clock time summed over the profiles, ns.
    pub(crate) elapsed_ns: u64,
    /// Profiles (found in a directory) that did not read, each with why.
    pub(crate) skipped: Vec<String>,
    #[serde(skip)]
    module_index: FxHashMap<ModuleInfo, DbModuleId>,
    /// Per module, the length of its address list when it was last sorted and freed of
    /// repeats.
    #[serde(skip)]
    tidied: Vec<usize>,
    /// Identity -> member: the same measurement given twice.
    #[serde(skip)]
    seen: FxHashMap<Identity, usize>,
}

/// Profiles read at once: enough to keep every core busy, few enough to bound memory.
fn batch_size() -> usize {
    2 * rayon::current_num_threads().max(1)
}

/// Read `inputs` a batch at a time, in parallel, and hand each to `each` in input order.
fn read_in_batches(
    inputs: &[Input],
    mut each: impl FnMut(&Input, Result<Profile, CorrelateError>) -> Result<(), CorrelateError>,
) -> Result<(), CorrelateError> {
    for batch in inputs.chunks(batch_size()) {
        let read: Vec<_> = batch
            .par_iter()
            .map(|i| Profile::read(&i.path).map_err(CorrelateError::Profile))
            .collect();
        for (input, profile) in batch.iter().zip(read) {
            each(input, profile)?;
        }
    }
    Ok(())
}

/// The first pass (see the module documentation).
pub(crate) fn gather(inputs: &[Input]) -> Result<Gathered, CorrelateError> {
    let mut gathered = Gathered::default();
    read_in_batches(inputs, |input, profile| match profile {
        Ok(profile) => gathered.absorb(&input.path, &profile),
        Err(e) if input.optional => {
            gathered.skipped.push(e.to_string());
            Ok(())
        }
        Err(e) => Err(e),
    })?;
    gathered.tidy_addresses();
    Ok(gathered)
}

impl Gathered {
    /// The module stores (`hpcrun-rs --bundle`) beside the gathered profiles, each once.
    pub(crate) fn bundle_stores(&self) -> Vec<PathBuf> {
        let mut stores: Vec<PathBuf> = Vec::new();
        for member in &self.members {
            for store in profiler::bundle::stores_of(&member.path) {
                if !stores.contains(&store) {
                    stores.push(store);
                }
            }
        }
        stores
    }

    /// Merge one profile's tables and addresses.
    fn absorb(&mut self, path: &Path, profile: &Profile) -> Result<(), CorrelateError> {
        let pids = profile.processes.iter().map(|p| p.pid).collect();
        let identity = (profile.host.clone(), profile.start_ns, profile.end_ns, pids);
        let metrics: Vec<usize> = profile
            .events
            .iter()
            .map(|e| self.metric(path, &MetricDesc::new(&e.name, &e.unit, e.sampling)))
            .collect::<Result<_, _>>()?;
        let modules: Vec<DbModuleId> = profile.modules.iter().map(|m| self.module(m)).collect();
        for (e, leader) in profile.read_with.iter().enumerate() {
            if let (Some(&m), Some(&l)) =
                (metrics.get(e), leader.and_then(|l| metrics.get(l as usize)))
            {
                self.group(m, l);
            }
        }
        self.add_addresses(profile, &modules);
        let counts = DbStats {
            samples: profile.stats.samples,
            lost: profile.stats.lost,
            partial: profile.stats.partial,
            ..DbStats::default()
        };
        self.add_counts(&counts, profile.end_ns.saturating_sub(profile.start_ns));
        let member = Member {
            path: path.to_path_buf(),
            map: ProfileMapping {
                profile: 0,
                modules,
                metrics,
            },
            job: profile.job.clone(),
            identity,
            watch: profile.watch.clone(),
        };
        self.add_member(member, &profile.command)
    }

    /// Append the tables of `later`, gathered from the inputs that follow this one's: the
    /// result is what gathering both shares in one pass gives.
    pub(crate) fn merge(&mut self, later: Gathered) -> Result<(), CorrelateError> {
        let Some(first) = later.members.first() else {
            self.skipped.extend(later.skipped);
            return Ok(());
        };
        let metrics: Vec<usize> = later
            .metrics
            .iter()
            .map(|m| self.metric(&first.path, m))
            .collect::<Result<_, _>>()?;
        let modules: Vec<DbModuleId> = later.modules.iter().map(|m| self.module(m)).collect();
        for &(m, l) in &later.read_with {
            self.group(metrics[m as usize], metrics[l as usize]);
        }
        for (m, list) in modules.iter().zip(later.addresses) {
            self.addresses[m.index()].extend(list);
        }
        self.tidy_addresses();
        self.add_counts(&later.stats, later.elapsed_ns);
        for mut member in later.members {
            let map = &mut member.map;
            map.modules.iter_mut().for_each(|m| *m = modules[m.index()]);
            map.metrics.iter_mut().for_each(|e| *e = metrics[*e]);
            self.add_member(member, &later.command)?;
        }
        self.skipped.extend(later.skipped);
        Ok(())
    }

    /// Note that metric `member` was read with the samples of metric `leader`, unless a group
    /// said otherwise before.
    fn group(&mut self, member: usize, leader: usize) {
        if !self.read_with.iter().any(|&(m, _)| m as usize == member) {
            self.read_with.push((member as u32, leader as u32));
        }
    }

    /// Number `member` and add it, refusing a measurement seen before; `command` is its
    /// command line (kept if it is the first).
    fn add_member(&mut self, mut member: Member, command: &[String]) -> Result<(), CorrelateError> {
        if let Some(&first) = self.seen.get(&member.identity) {
            return Err(CorrelateError::Duplicate {
                first: self.members[first].path.clone(),
                second: member.path,
            });
        }
        self.seen
            .insert(member.identity.clone(), self.members.len());
        if self.members.is_empty() {
            self.command = command.to_vec();
        }
        member.map.profile = self.members.len() as u32;
        self.members.push(member);
        Ok(())
    }

    /// Add measurement counters and wall-clock time.
    fn add_counts(&mut self, counts: &DbStats, elapsed_ns: u64) {
        let s = &mut self.stats;
        s.samples = s.samples.saturating_add(counts.samples);
        s.lost = s.lost.saturating_add(counts.lost);
        s.partial = s.partial.saturating_add(counts.partial);
        self.elapsed_ns = self.elapsed_ns.saturating_add(elapsed_ns);
    }

    /// The database metric for `metric` (by name; added if new; a unit that differs from
    /// another profile's for the same event is an error naming `path`).
    fn metric(&mut self, path: &Path, metric: &MetricDesc) -> Result<usize, CorrelateError> {
        match self.metrics.iter().position(|m| m.name == metric.name) {
            Some(i) if self.metrics[i].unit != metric.unit => Err(CorrelateError::Incompatible {
                path: path.to_path_buf(),
                why: format!(
                    "event {} is in {}, another profile has it in {}",
                    metric.name, metric.unit, self.metrics[i].unit
                ),
            }),
            Some(i) => Ok(i),
            None => {
                self.metrics
                    .push(MetricDesc::new(&metric.name, &metric.unit, metric.sampling));
                Ok(self.metrics.len() - 1)
            }
        }
    }

    /// The database module for `m`, added if new.
    fn module(&mut self, m: &ModuleInfo) -> DbModuleId {
        if let Some(&id) = self.module_index.get(m) {
            return id;
        }
        let id = DbModuleId::from_index(self.modules.len());
        self.modules.push(m.clone());
        self.addresses.push(Vec::new());
        self.module_index.insert(m.clone(), id);
        id
    }

    /// Sort every module's address list and drop repeats.
    fn tidy_addresses(&mut self) {
        for a in &mut self.addresses {
            a.sort_unstable();
            a.dedup();
        }
        self.tidied = self.addresses.iter().map(Vec::len).collect();
    }

    /// Add the lookup address of every code frame of `profile` to its module's list. A list
    /// is sorted and freed of repeats whenever it has grown to twice its length at the last
    /// tidying (its distinct addresses), so it never holds more than about twice those: the
    /// profiles of a parallel job sample mostly the same addresses.
    fn add_addresses(&mut self, profile: &Profile, modules: &[DbModuleId]) {
        for node in profile.threads.iter().flat_map(|t| &t.cct.nodes) {
            if let profiler::db::Frame::Code { module, addr, kind } = node.frame {
                if let Some(&m) = modules.get(module.index()) {
                    self.addresses[m.index()].push(kind.lookup(addr));
                }
            }
        }
        self.tidied.resize(self.addresses.len(), 0);
        for (list, tidied) in self.addresses.iter_mut().zip(&mut self.tidied) {
            if list.len() > 2 * (*tidied).max(1024) {
                list.sort_unstable();
                list.dedup();
                *tidied = list.len();
            }
        }
    }
}

/// A profile whose data references are named once the tree is finished.
#[derive(Serialize, Deserialize)]
pub(crate) struct Kept {
    /// Its index in [`Gathered::members`].
    pub(crate) member: usize,
    /// The profile, when this process read it (one from another process is read again).
    #[serde(skip)]
    pub(crate) profile: Option<Profile>,
    /// Where its threads and nodes went in the database.
    pub(crate) nodes: NodeMaps,
}

/// The second pass (see the module documentation) over `members`: add each member's tree to
/// `enricher`, in order, and its traces to `traces`; returns the profiles that carry data
/// references.
pub(crate) fn enrich(
    gathered: &Gathered,
    members: Range<usize>,
    enricher: &mut Enricher<'_>,
    traces: &mut Traces,
) -> Result<Vec<Kept>, CorrelateError> {
    let mut member = members.start;
    let inputs: Vec<Input> = gathered.members[members]
        .iter()
        .map(|m| Input {
            path: m.path.clone(),
            optional: false,
        })
        .collect();
    let mut kept = Vec::new();
    read_in_batches(&inputs, |_, profile| {
        let profile = profile?;
        let nodes = enricher.add_profile(&profile, &gathered.members[member].map);
        let (first, landed) = (nodes.first_thread, &nodes.nodes);
        crate::prof::traces::add_traces(traces, &profile.traces, &profile, first, landed, |n| {
            n.index() as u32
        });
        crate::prof::traces::add_regions(traces, &profile, first);
        if !profile.data.is_empty() {
            kept.push(Kept {
                member,
                profile: Some(profile),
                nodes,
            });
        }
        member += 1;
        Ok(())
    })?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lists_stay_near_their_distinct_addresses_over_many_profiles() {
        let mut profile = crate::prof::enrich::tests::profile();
        let mut gathered = Gathered::default();
        for start in 0..3000 {
            profile.start_ns = start;
            gathered.absorb(Path::new("p.db"), &profile).unwrap();
        }
        // 5 code frames a profile, at 5 distinct addresses: 15,000 pushed in all.
        assert!(gathered.addresses[0].len() <= 2 * 1024 + 5);
        gathered.tidy_addresses();
        assert_eq!(gathered.addresses[0].len(), 5);
    }
}
