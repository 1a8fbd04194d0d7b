//! Building a database's data section: every data reference of every profile becomes an access
//! to a named [`DataObject`], every allocation site a heap object with its statistics.
//!
//! Objects are identified by what they are, not by how they are named: a static by its module
//! and start address, a heap object by its allocation context in the enriched tree (so the same
//! allocation path in several threads or profiles is one object), a local by its module,
//! function and name, a region by its name. Names are made once per object.

use std::collections::hash_map::Entry;

use fxhash::FxHashMap;
use profiler::addr::Svma;
use profiler::dataref::{AllocSite, DataRef, MappingKind, ThreadData};
use profiler::db::{AddrKind, Cct, CctNodeId, Cost, Frame, Profile};

use super::variables::{VarHit, Variables};
use crate::db::data::{
    AllocStats, DataAccess, DataCounts, DataObject, DataObjectId, DataSection, ObjectKind,
};
use crate::db::database::enclosing_frame;
use crate::db::database::Database;
use crate::db::heap_name::{heap_name, is_allocator, SHOWN_FRAMES};
use crate::db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};
use crate::db::label;
use crate::prof::enrich::{NodeMaps, ProfileMapping};

/// What identifies an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ObjectKey {
    Static(DbModuleId, u64),
    ModuleData(DbModuleId),
    Heap(DbNodeId),
    Local(Option<DbModuleId>, String),
    Region(&'static str),
    Unknown,
}

/// The most frames a heap object's name shows.
const MAX_FRAMES: usize = 8;

/// What identifies an access: object, thread, context, instruction, offset.
type AccessKey = (
    DataObjectId,
    ThreadIdx,
    DbNodeId,
    Option<(DbModuleId, u64)>,
    Option<i64>,
);

/// Accumulates the data section while profiles are added.
pub(crate) struct DataBuilder<'v> {
    section: DataSection,
    objects: FxHashMap<ObjectKey, DataObjectId>,
    accesses: FxHashMap<AccessKey, usize>,
    variables: &'v Variables,
    files: FxHashMap<String, DbFileId>,
    /// Heap objects and the return address of their allocation call, to find receivers.
    returns: FxHashMap<DataObjectId, (DbModuleId, Svma)>,
    /// The profile being added: the index of each thread id's (first) thread.
    owners: FxHashMap<u32, usize>,
}

/// One profile as the builder needs it: the profile, how its indices map into the database, and
/// where its tree nodes landed.
pub(crate) struct ProfileInput<'p> {
    pub(crate) profile: &'p Profile,
    pub(crate) map: &'p ProfileMapping,
    pub(crate) nodes: &'p NodeMaps,
}

impl<'v> DataBuilder<'v> {
    /// A builder naming statics and locals through `variables`.
    pub(crate) fn new(db: &Database, variables: &'v Variables) -> DataBuilder<'v> {
        let files = db
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), DbFileId::from_index(i)))
            .collect();
        DataBuilder {
            section: DataSection::default(),
            objects: FxHashMap::default(),
            accesses: FxHashMap::default(),
            variables,
            files,
            returns: FxHashMap::default(),
            owners: FxHashMap::default(),
        }
    }

    /// Add one profile's data references and allocation sites.
    pub(crate) fn add(&mut self, db: &mut Database, input: &ProfileInput<'_>) {
        let data = &input.profile.data;
        if data.is_empty() {
            return;
        }
        self.add_counts(&data.stats);
        self.owners.clear();
        for (t, thread) in input.profile.threads.iter().enumerate().rev() {
            self.owners.insert(thread.tid, t);
        }
        let mut landed = Vec::with_capacity(data.threads.len());
        for (t, (thread, tdata)) in input.profile.threads.iter().zip(&data.threads).enumerate() {
            let tidx = ThreadIdx::from_index(input.nodes.first_thread.index() + t);
            for site in &tdata.allocs {
                self.add_site(db, input, t, tidx, site);
            }
            landed.push(self.add_costs(db, input, &thread.cct, t, tidx, tdata));
        }
        // The data traces' context ids are the threads' data costs: now accesses.
        let (traces, profile) = (&mut self.section.traces, input.profile);
        let first = input.nodes.first_thread;
        crate::prof::traces::add_traces(traces, &data.traces, profile, first, &landed, |a| a);
    }

    /// The finished section: heap objects given their receivers, and names long enough to
    /// tell every two heap objects apart.
    pub(crate) fn finish(mut self, db: &Database) -> DataSection {
        self.distinguish_heap_names(db);
        let mut by_module: FxHashMap<DbModuleId, Vec<(DataObjectId, Svma)>> = FxHashMap::default();
        for (&object, &(module, ra)) in &self.returns {
            by_module.entry(module).or_default().push((object, ra));
        }
        for (module, sites) in by_module {
            let ras: Vec<Svma> = sites.iter().map(|&(_, ra)| ra).collect();
            let found = self.variables.receivers(module, &ras);
            for ((object, _), receiver) in sites.into_iter().zip(found) {
                self.section.objects[object.index()].receiver = receiver;
            }
        }
        self.section
    }

    /// Give heap objects that share a name more frames, then, past [`MAX_FRAMES`] or where
    /// their whole paths print alike, a number.
    fn distinguish_heap_names(&mut self, db: &Database) {
        let mut frames = SHOWN_FRAMES;
        loop {
            let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
            for o in self
                .section
                .objects
                .iter()
                .filter(|o| o.kind == ObjectKind::Heap)
            {
                *seen.entry(o.name.as_str()).or_default() += 1;
            }
            let clashing: Vec<usize> = (0..self.section.objects.len())
                .filter(|&i| {
                    let o = &self.section.objects[i];
                    o.kind == ObjectKind::Heap && seen[o.name.as_str()] > 1
                })
                .collect();
            if clashing.is_empty() {
                return;
            }
            frames += 1;
            for (k, i) in clashing.into_iter().enumerate() {
                let o = &mut self.section.objects[i];
                let named = o.site.map(|site| heap_name(db, site, frames));
                match named {
                    Some(n) if frames <= n.depth.min(MAX_FRAMES) => o.name = n.name,
                    _ => o.name = format!("{} #{}", o.name, k + 1),
                }
            }
        }
    }

    fn add_counts(&mut self, stats: &profiler::dataref::DataStats) {
        let counts: &mut DataCounts = &mut self.section.stats;
        for (sum, n) in counts.by_class.iter_mut().zip(stats.by_class) {
            *sum = sum.saturating_add(n);
        }
        counts.ea_attempted = counts.ea_attempted.saturating_add(stats.ea_attempted);
        counts.ea_resolved = counts.ea_resolved.saturating_add(stats.ea_resolved);
        counts.alloc_records = counts.alloc_records.saturating_add(stats.alloc_records);
        counts.alloc_lost = counts.alloc_lost.saturating_add(stats.alloc_lost);
        counts
            .heap_unavailable
            .extend(stats.heap_unavailable.clone());
    }

    fn add_site(
        &mut self,
        db: &Database,
        input: &ProfileInput<'_>,
        t: usize,
        tidx: ThreadIdx,
        site: &AllocSite,
    ) {
        let at = &input.nodes.nodes[t];
        let node = at[site.node.index()];
        let object = self.heap_object(db, node);
        if let Entry::Vacant(e) = self.returns.entry(object) {
            let cct = &input.profile.threads[t].cct;
            if let Some((module, ra)) = call_return(db, (cct, at), site.node) {
                e.insert((input.map.modules[module.index()], ra));
            }
        }
        let o = &mut self.section.objects[object.index()];
        o.size = Some(o.size.unwrap_or(0).max(site.counts.size_max));
        self.section.sites.push(AllocStats {
            object,
            thread: tidx,
            counts: site.counts.clone(),
        });
    }

    fn add_costs(
        &mut self,
        db: &mut Database,
        input: &ProfileInput<'_>,
        cct: &Cct,
        t: usize,
        tidx: ThreadIdx,
        tdata: &ThreadData,
    ) -> Vec<u32> {
        let at = &input.nodes.nodes[t];
        let metrics = db.metrics.len();
        let mut landed = Vec::with_capacity(tdata.costs.len());
        for cost in &tdata.costs {
            let (object, offset) = self.resolve(db, input, (cct, at), cost.node, &cost.data);
            let instruction = match cct.nodes[cost.node.index()].frame {
                Frame::Code { module, addr, .. } => {
                    Some((input.map.modules[module.index()], addr.0))
                }
                _ => None,
            };
            let mut costs = vec![Cost::default(); metrics];
            for (e, c) in cost.costs.iter().enumerate() {
                costs[input.map.metrics[e]] = *c;
            }
            let node = at[cost.node.index()];
            let key = (object, tidx, node, instruction, offset);
            let access = match self.accesses.entry(key) {
                Entry::Occupied(e) => {
                    Cost::add_each(&mut self.section.accesses[*e.get()].costs, &costs);
                    *e.get()
                }
                Entry::Vacant(e) => {
                    e.insert(self.section.accesses.len());
                    self.section.accesses.push(DataAccess {
                        object,
                        thread: tidx,
                        node,
                        instruction,
                        offset,
                        costs,
                    });
                    self.section.accesses.len() - 1
                }
            };
            landed.push(access as u32);
        }
        landed
    }

    /// The object a reference touched, and the offset in it.
    fn resolve(
        &mut self,
        db: &mut Database,
        input: &ProfileInput<'_>,
        (cct, at): (&Cct, &[DbNodeId]),
        node: CctNodeId,
        data: &DataRef,
    ) -> (DataObjectId, Option<i64>) {
        match *data {
            DataRef::Heap {
                tid, site, offset, ..
            } => match self.owners.get(&tid).copied() {
                Some(o) => {
                    let node = input.nodes.nodes[o][site.index()];
                    (self.heap_object(db, node), Some(offset))
                }
                None => (self.region("<heap: block of an unknown thread>"), None),
            },
            DataRef::Static { module, addr } => {
                let module = input.map.modules[module.index()];
                self.static_object(db, module, addr)
            }
            DataRef::Stack { frame, cfa_offset } => {
                self.stack_object(db, (cct, at), node, (frame, cfa_offset), input.map)
            }
            DataRef::Mapping { kind } => (self.region(region_name(kind)), None),
            DataRef::Unknown => (
                self.object(ObjectKey::Unknown, || {
                    unnamed(ObjectKind::Unknown, "<unknown data>")
                }),
                None,
            ),
        }
    }

    fn static_object(
        &mut self,
        db: &mut Database,
        module: DbModuleId,
        addr: Svma,
    ) -> (DataObjectId, Option<i64>) {
        match self.variables.static_at(module, addr) {
            Some(hit) => {
                let key = ObjectKey::Static(module, hit.start);
                let offset = addr.0.wrapping_sub(hit.start) as i64;
                let object = self.named(db, key, ObjectKind::Static, module, &hit);
                (object, Some(offset))
            }
            None => {
                let name = format!("<data of {}>", label::base_name(db.module_path(module)));
                let object = self.object(ObjectKey::ModuleData(module), || DataObject {
                    module: Some(module),
                    ..unnamed(ObjectKind::Static, &name)
                });
                (object, None)
            }
        }
    }

    /// The local of frame `frame` up from `leaf` at `cfa_offset` from its CFA, else the frame.
    fn stack_object(
        &mut self,
        db: &mut Database,
        (cct, at): (&Cct, &[DbNodeId]),
        leaf: CctNodeId,
        (frame, cfa_offset): (u16, i64),
        map: &ProfileMapping,
    ) -> (DataObjectId, Option<i64>) {
        let mut id = leaf;
        for _ in 0..frame {
            id = cct.nodes[id.index()].parent;
        }
        let here = &cct.nodes[id.index()];
        let found = match here.frame {
            Frame::Code { module, addr, kind } => {
                let module = map.modules[module.index()];
                self.variables
                    .local_at(module, kind.lookup(addr), cfa_offset)
                    .map(|hit| (module, hit))
            }
            _ => None,
        };
        if let Some((module, hit)) = found {
            let key = ObjectKey::Local(Some(module), hit.name.to_string());
            let offset = hit.offset;
            let object = self.named(db, key, ObjectKind::Stack, module, &hit);
            return (object, Some(offset));
        }
        let procedure = enclosing_frame(db, at[id.index()]);
        let module = procedure.and_then(|p| db.nodes[p.index()].module);
        let name = match procedure {
            Some(p) => format!("<frame of {}>", db.nodes[p.index()].name),
            None => "<frame of an unknown procedure>".to_string(),
        };
        let object = self.object(ObjectKey::Local(module, name.clone()), || DataObject {
            module,
            ..unnamed(ObjectKind::Stack, &name)
        });
        (object, None)
    }

    fn heap_object(&mut self, db: &Database, site: DbNodeId) -> DataObjectId {
        self.object(ObjectKey::Heap(site), || {
            let named = heap_name(db, site, SHOWN_FRAMES);
            DataObject {
                file: named.file,
                line: named.line,
                site: Some(site),
                ..unnamed(ObjectKind::Heap, &named.name)
            }
        })
    }

    fn region(&mut self, name: &'static str) -> DataObjectId {
        self.object(ObjectKey::Region(name), || {
            unnamed(ObjectKind::Region, name)
        })
    }

    fn named(
        &mut self,
        db: &mut Database,
        key: ObjectKey,
        kind: ObjectKind,
        module: DbModuleId,
        hit: &VarHit<'_>,
    ) -> DataObjectId {
        if let Some(&id) = self.objects.get(&key) {
            return id;
        }
        let file = hit.file.map(|f| db.intern_file(&mut self.files, f));
        let layout = hit.ty.and_then(|t| self.variables.parts(module, t));
        self.object(key, || DataObject {
            kind,
            name: hit.name.to_string(),
            module: Some(module),
            file,
            line: hit.line,
            size: Some(hit.size),
            start: (kind == ObjectKind::Static).then_some(hit.start),
            site: None,
            receiver: None,
            layout,
        })
    }

    fn object(&mut self, key: ObjectKey, make: impl FnOnce() -> DataObject) -> DataObjectId {
        if let Some(&id) = self.objects.get(&key) {
            return id;
        }
        let id = DataObjectId::from_index(self.section.objects.len());
        self.section.objects.push(make());
        self.objects.insert(key, id);
        id
    }
}

/// An object of `kind` called `name` with nothing else known.
fn unnamed(kind: ObjectKind, name: &str) -> DataObject {
    DataObject {
        kind,
        name: name.to_string(),
        module: None,
        file: None,
        line: None,
        size: None,
        start: None,
        site: None,
        receiver: None,
        layout: None,
    }
}

/// The region object for an address in a mapping of `kind`.
fn region_name(kind: MappingKind) -> &'static str {
    match kind {
        MappingKind::Brk => "<heap: untracked blocks>",
        MappingKind::Stack => "<stack: outside the sampled frames>",
        MappingKind::Anonymous => "<anonymous memory>",
        MappingKind::File => "<mapped files>",
        MappingKind::Profiler => "<hpcrun-rs allocation rings>",
    }
}

/// The return address of the allocation call at `site`: the first return address on its path
/// in code outside the allocator.
fn call_return(
    db: &Database,
    (cct, at): (&Cct, &[DbNodeId]),
    site: CctNodeId,
) -> Option<(profiler::db::ProfileModuleId, Svma)> {
    let mut id = site;
    while id != CctNodeId::ROOT {
        let node = &cct.nodes[id.index()];
        if let Frame::Code {
            module,
            addr,
            kind: AddrKind::Return,
        } = node.frame
        {
            let frame = enclosing_frame(db, at[id.index()])?;
            if !is_allocator(db, &db.nodes[frame.index()]) {
                return Some((module, addr));
            }
        }
        id = node.parent;
    }
    None
}
