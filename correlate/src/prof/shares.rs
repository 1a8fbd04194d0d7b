//! The second pass split into shares: what the processes of a parallel correlation
//! (`hpcprof-rs-mpi`) exchange after the first pass.
//!
//! Once the first pass is merged and every module's structure found, the process that did it
//! sends the result ([`Prepared`]: the merged tables and the scope trees) to every other one.
//! Each enriches its consecutive share of the profiles into a partial tree ([`Enriched`]), and
//! the partial trees merge in input order: a later share's nodes are found or added below their
//! parents by context key (their file ids renumbered), its threads appended. Enriching share
//! after share in one process adds each node at the moment the merge does, so the merged
//! database is the one a single process writes, byte for byte.
//!
//! What the processes send is a [`Message`]; what they merge in input order (the first pass's
//! [`crate::Partial`] and the enriched tree) is a [`Share`].

use std::ops::Range;
use std::path::PathBuf;
use std::time::Instant;

use fxhash::{FxHashMap, FxHashSet};
use profiler::db::{Cost, Profile};
use profiler::openmp::RegionTimeline;
use profiler::trace::Traces;
use serde::{Deserialize, Serialize};
use structure::ScopeTree;

use crate::db::database::{Database, ModuleDesc};
use crate::db::ids::{DbFileId, DbNodeId, ThreadIdx};
use crate::db::instructions::InstructionCosts;
use crate::db::node::ChildIndex;
use crate::prof::enrich::{finish_tree, Enricher, UnknownAddress};
use crate::prof::error::CorrelateError;
use crate::prof::jitmap::JitUse;
use crate::prof::profiles::{self, Gathered, Kept};
use crate::prof::structures::Found;

/// What the processes of a parallel correlation send each other, as bytes (postcard).
pub trait Message: Serialize + for<'de> Deserialize<'de> {
    /// What it is, for the error when its bytes do not decode ("a partial").
    const WHAT: &'static str;

    /// The message as bytes.
    fn to_bytes(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a message always serializes")
    }

    /// The message from [`Message::to_bytes`]'s bytes, or an error saying that they were cut
    /// short or damaged.
    fn from_bytes(bytes: &[u8]) -> Result<Self, CorrelateError> {
        let mut message: Self =
            postcard::from_bytes(bytes).map_err(|e| CorrelateError::Unrecognised {
                path: PathBuf::from(format!("<{} from another process>", Self::WHAT)),
                what: if e == postcard::Error::DeserializeUnexpectedEnd {
                    "a message cut short"
                } else {
                    "a damaged message"
                },
            })?;
        message.received();
        Ok(message)
    }

    /// Rebuild what the bytes leave out, once decoded (nothing, unless a type says otherwise).
    fn received(&mut self) {}
}

/// A stage's result over consecutive profiles, which takes in the result over the profiles
/// that follow: merging the shares' results in order gives the result over all of them.
pub trait Share: Message {
    /// Append `later`, the result of the shares that follow this one's.
    fn merge(&mut self, later: Self) -> Result<(), CorrelateError>;
}

/// The first pass over all the profiles, with every module's structure: what each process
/// enriches its share with.
#[derive(Serialize, Deserialize)]
pub struct Prepared {
    /// The merged tables (without the sampled addresses, which structure recovery consumed).
    pub(crate) gathered: Gathered,
    /// Each database module's structure.
    pub(crate) found: Vec<Found>,
    /// The module stores (`hpcrun-rs --bundle`) beside the gathered profiles, each once.
    pub(crate) stores: Vec<PathBuf>,
    /// What finding structure warned about.
    pub(crate) warnings: Vec<String>,
    /// Files of a measurement directory passed over when listing.
    pub(crate) listed_skipped: Vec<String>,
    /// When the correlation started (on the process that prepared the tables; on the others,
    /// when they received them).
    #[serde(skip, default = "Instant::now")]
    pub(crate) start: Instant,
}

/// What [`Enriched::finish`] gives: the database, its traces, the profiles with data
/// references, and what the JIT maps named.
pub(crate) type Finished = (Database, Traces, Vec<Kept>, JitUse);

/// The enriched tree of consecutive profiles, before totals and data naming.
#[derive(Serialize, Deserialize)]
pub struct Enriched {
    /// The tree, threads and files so far.
    pub(crate) db: Database,
    /// The traces (the database's own field is not serialized).
    pub(crate) traces: Traces,
    /// The OpenMP regions' timeline (the traces' own field is not serialized), so that a share
    /// sent between the ranks of `hpcprof-rs-mpi` keeps it.
    pub(crate) regions: RegionTimeline,
    /// The distinct addresses left as `<unknown procedure>`.
    pub(crate) unknown: FxHashSet<UnknownAddress>,
    /// What the JIT maps named.
    pub(crate) jit: JitUse,
    /// The profiles with data references.
    pub(crate) kept: Vec<Kept>,
    /// What each sampled instruction cost (the database's own field is not serialized).
    pub(crate) instructions: InstructionCosts,
}

impl Prepared {
    /// Enrich share `share` of `shares` of the profiles (consecutive, in input order), reading
    /// each again.
    pub fn enrich_share(&self, share: usize, shares: usize) -> Result<Enriched, CorrelateError> {
        let n = self.gathered.members.len();
        let shares = shares.max(1);
        let members: Range<usize> = n * share / shares..n * (share + 1) / shares;
        let trees: Vec<Option<&ScopeTree>> = self.found.iter().map(|f| f.tree.as_ref()).collect();
        let modules = self.module_descs();
        let stores = self.stores.clone();
        let metrics = self.gathered.metrics.clone();
        let mut enricher = Enricher::new(metrics, modules, &trees, stores);
        let mut traces = Traces::default();
        let kept = profiles::enrich(&self.gathered, members, &mut enricher, &mut traces)?;
        let (db, unknown, jit, instructions) = enricher.into_parts();
        let regions = std::mem::take(&mut traces.regions);
        Ok(Enriched {
            db,
            traces,
            regions,
            unknown,
            jit,
            kept,
            instructions,
        })
    }

    /// The database's module table.
    fn module_descs(&self) -> Vec<ModuleDesc> {
        let modules = self.gathered.modules.iter().zip(&self.found);
        modules
            .map(|(m, f)| ModuleDesc {
                path: m.path.clone(),
                build_id: m.build_id.clone(),
                structure: f.source.recorded(),
            })
            .collect()
    }
}

impl Message for Prepared {
    const WHAT: &'static str = "prepared tables";

    fn received(&mut self) {
        for tree in self.found.iter_mut().filter_map(|f| f.tree.as_mut()) {
            tree.finish();
        }
    }
}

impl Message for Enriched {
    const WHAT: &'static str = "an enriched tree";
}

impl Share for Enriched {
    fn merge(&mut self, later: Enriched) -> Result<(), CorrelateError> {
        let thread_base = self.db.threads.len();
        let nodes = self.merge_tree(later.db, thread_base);
        for trace in &later.traces.threads {
            let thread = (thread_base + trace.thread as usize) as u32;
            let remapped = trace.remap(thread, nodes.len(), |c| nodes[c as usize].index() as u32);
            self.traces.threads.extend(remapped.ok());
        }
        self.traces.dropped += later.traces.dropped;
        let rename = |t: u32| Some((thread_base + t as usize) as u32);
        self.regions.extend_from(&later.regions, rename);
        self.unknown.extend(later.unknown);
        self.jit.merge(later.jit);
        self.instructions.merge(later.instructions);
        for mut kept in later.kept {
            let maps = &mut kept.nodes;
            maps.first_thread = ThreadIdx::from_index(maps.first_thread.index() + thread_base);
            for thread in &mut maps.nodes {
                thread.iter_mut().for_each(|n| *n = nodes[n.index()]);
            }
            self.kept.push(kept);
        }
        Ok(())
    }
}

impl Enriched {
    /// Add `later`'s files, threads (numbered from `thread_base`), nodes and costs to this
    /// tree; returns where each of `later`'s nodes landed.
    fn merge_tree(&mut self, later: Database, thread_base: usize) -> Vec<DbNodeId> {
        let db = &mut self.db;
        let mut index = ChildIndex::default();
        for (i, node) in db.nodes.iter().enumerate().skip(1) {
            index
                .map
                .insert((node.parent, node.key()), DbNodeId::from_index(i));
        }
        let mut files: FxHashMap<String, DbFileId> = db
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), DbFileId::from_index(i)))
            .collect();
        let file_ids: Vec<DbFileId> = later
            .files
            .iter()
            .map(|f| db.intern_file(&mut files, f))
            .collect();
        let file = |f: Option<DbFileId>| f.map(|f| file_ids[f.index()]);
        db.threads.extend(later.threads);
        let mut landed = Vec::with_capacity(later.nodes.len());
        for node in later.nodes {
            let here = match landed.get(node.parent.index()) {
                None => DbNodeId::ROOT,
                Some(&parent) => {
                    let mut key = node.key();
                    key.file = file(key.file);
                    key.call_file = file(key.call_file);
                    db.child(&mut index, parent, key)
                }
            };
            for (thread, costs) in node.costs.iter() {
                let costs: Vec<Cost> = costs.collect();
                db.add_cost(
                    here,
                    ThreadIdx::from_index(thread_base + thread.index()),
                    &costs,
                );
            }
            landed.push(here);
        }
        let stats = &mut db.stats;
        stats.unknown_samples = stats
            .unknown_samples
            .saturating_add(later.stats.unknown_samples);
        landed
    }

    /// The finished tree (totals computed, correlation counters set), its traces, the
    /// profiles to name data in (each read again where another process enriched it) and what
    /// the JIT maps named.
    pub(crate) fn finish(self, gathered: &Gathered) -> Result<Finished, CorrelateError> {
        let Enriched {
            mut db,
            mut traces,
            regions,
            unknown,
            jit,
            mut kept,
            instructions,
        } = self;
        finish_tree(&mut db, &unknown);
        db.instructions = instructions;
        traces.regions = regions;
        for k in kept.iter_mut().filter(|k| k.profile.is_none()) {
            let path = &gathered.members[k.member].path;
            k.profile = Some(Profile::read(path).map_err(CorrelateError::Profile)?);
        }
        Ok((db, traces, kept, jit))
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use std::path::Path;

    use profiler::addr::Svma;
    use profiler::db::{AddrKind, CctNode, CctNodeId, Frame, ProfileModuleId};
    use profiler::trace::ThreadTrace;

    use super::*;
    use crate::db::database::StructureSource;
    use crate::prof::enrich::tests::{profile, tree};
    use crate::prof::enrich::NodeMaps;
    use crate::prof::profiles::{gather, Input};

    /// The enrichment tests' program with a procedure `h` of another file at [0x300, 0x310).
    fn two_file_tree() -> ScopeTree {
        let mut t = tree();
        let file = t.intern_file("/src/h.cc");
        let mut h = structure::Scope::new(structure::ScopeKind::Procedure);
        h.name = "h".into();
        h.file = Some(file);
        let h = t.add(t.root(), h);
        let mut line = structure::Scope::new(structure::ScopeKind::Statement);
        (line.file, line.line, line.ranges) = (Some(file), 7, vec![0x300..0x310]);
        t.add(h, line);
        t.finish();
        t
    }

    /// A root's child sampled at `addr`, once.
    fn leaf(addr: u64) -> CctNode {
        CctNode {
            parent: CctNodeId::ROOT,
            frame: Frame::Code {
                module: ProfileModuleId(0),
                addr: Svma(addr),
                kind: AddrKind::Ip,
            },
            costs: vec![Cost {
                samples: 1,
                value: 1000,
            }],
        }
    }

    /// Six profiles of [`two_file_tree`]'s program, written to `dir`: each its own measurement
    /// and thread with a trace, every other one with data references, and from the third on a
    /// first sample in `h` (so a share from there on meets `h.cc` first, and its file ids are
    /// renumbered when merged) and a last one outside any structure (an unknown address of its
    /// own).
    fn prepared(dir: &Path) -> Prepared {
        let inputs: Vec<Input> = (0..6u32)
            .map(|i| {
                let mut p = profile();
                let tid = 10 + i;
                p.start_ns = i.into();
                p.threads[0].tid = tid;
                let nodes = &mut p.threads[0].cct.nodes;
                if i >= 2 {
                    for n in nodes
                        .iter_mut()
                        .skip(1)
                        .filter(|n| n.parent != CctNodeId::ROOT)
                    {
                        n.parent = CctNodeId(n.parent.0 + 1);
                    }
                    nodes.insert(1, leaf(0x300 + u64::from(i)));
                    nodes.push(leaf(0x400 + u64::from(i)));
                }
                let mut trace = ThreadTrace::new(tid);
                for (time, context) in [(5, 1), (9, 3), (12, 5)] {
                    trace.push(time, context);
                }
                p.traces.threads.push(trace);
                if i % 2 == 1 {
                    p.data.threads.push(Default::default());
                }
                let path = dir.join(format!("p{i}.db"));
                p.write(&path).unwrap();
                Input {
                    path,
                    optional: false,
                }
            })
            .collect();
        Prepared {
            gathered: gather(&inputs).unwrap(),
            found: vec![Found {
                source: StructureSource::OnTheFly,
                tree: Some(two_file_tree()),
                analysed: 0,
                binary: None,
            }],
            stores: Vec::new(),
            warnings: Vec::new(),
            listed_skipped: Vec::new(),
            start: Instant::now(),
        }
    }

    /// The finished database (with its traces) and the data profiles' (member, node maps),
    /// enriched in `shares` shares sent as bytes and merged in order.
    fn in_shares(prepared: &Prepared, shares: usize) -> (Database, Vec<(usize, NodeMaps)>) {
        let mut all = prepared.enrich_share(0, shares).unwrap();
        for share in 1..shares {
            let later = prepared.enrich_share(share, shares).unwrap();
            all.merge(Enriched::from_bytes(&later.to_bytes()).unwrap())
                .unwrap();
        }
        let (mut db, traces, kept, _) = all.finish(&prepared.gathered).unwrap();
        db.traces = traces;
        let kept = kept
            .into_iter()
            .map(|k| {
                assert!(k.profile.is_some(), "member {} not read", k.member);
                (k.member, k.nodes)
            })
            .collect();
        (db, kept)
    }

    #[test]
    fn shares_merged_in_order_give_the_database_of_one_pass() {
        let dir = tempfile::tempdir().unwrap();
        let prepared = Prepared::from_bytes(&prepared(dir.path()).to_bytes()).unwrap();
        let (one, kept) = in_shares(&prepared, 1);
        assert_eq!(one.threads.len(), 6);
        assert_eq!(one.stats.unknown_addresses, 4);
        assert_eq!(one.stats.unknown_samples, 4);
        assert_eq!(one.metrics[0].total.samples, 6 * 5 + 2 * 4);
        assert_eq!(one.files, ["/src/app.cc", "/src/h.cc"]);
        assert_eq!(one.traces.threads.len(), 6);
        let members: Vec<usize> = kept.iter().map(|k| k.0).collect();
        assert_eq!(members, [1, 3, 5]);
        for shares in [2, 3, 4, 6] {
            let (many, many_kept) = in_shares(&prepared, shares);
            assert!(many == one, "{shares} shares give another database");
            assert_eq!(many.to_bytes().unwrap(), one.to_bytes().unwrap());
            assert_eq!(many_kept, kept, "{shares} shares");
        }
    }

    #[test]
    fn damaged_messages_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let prepared = prepared(dir.path());
        let bytes = prepared.enrich_share(0, 1).unwrap().to_bytes();
        let cut = Enriched::from_bytes(&bytes[..bytes.len() / 2])
            .err()
            .unwrap();
        assert!(cut.to_string().contains("cut short"), "{cut}");
        let bytes = prepared.to_bytes();
        assert!(Prepared::from_bytes(&bytes[..bytes.len() - 1]).is_err());
    }
}
