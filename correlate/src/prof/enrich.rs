//! Enrichment: inserting every sampled calling context, address by address, into the
//! database's tree, each address expanded into its static context.
//!
//! For each frame of a path (root first), the address (the sampled IP at the leaf, `ra - 1`
//! for return addresses) is looked up in its module's scope tree; the statement found and its
//! ancestors give procedure -> inlined frames (outermost first, with call sites) -> loops ->
//! line, inserted below the caller's call-site line, merging with siblings that land in the
//! same scope. Addresses no structure covers become `<unknown procedure> 0xADDR [module]`.
//! Expansions are memoised per (module, address), so work grows with distinct addresses and
//! memory with distinct contexts, not with samples.

use std::path::PathBuf;
use std::rc::Rc;

use fxhash::{FxHashMap, FxHashSet};
use profiler::addr::Svma;
use profiler::db::{Cost, Frame, Profile};
use serde::{Deserialize, Serialize};
use structure::{ScopeId, ScopeKind, ScopeTree};

use crate::db::database::{Database, MetricDesc, ModuleDesc, ThreadDesc};
use crate::db::ids::{DbFileId, DbModuleId, DbNodeId, ThreadIdx};
use crate::db::instructions::{InstructionCosts, Tally};
use crate::db::label;
use crate::db::node::{ChildIndex, NodeKey, NodeKind};
use crate::prof::jitmap::{JitMaps, JitUse, PythonUse};
use crate::prof::jitname::JitSymbol;

mod python;

/// How one profile's indices map into the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProfileMapping {
    /// Index of the profile in [`Database::profiles`].
    pub(crate) profile: u32,
    /// Database module of each of the profile's modules.
    pub(crate) modules: Vec<DbModuleId>,
    /// Database metric of each of the profile's events.
    pub(crate) metrics: Vec<usize>,
}

/// Where one profile's threads and tree nodes landed in the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeMaps {
    /// The database thread of the profile's first thread (the others follow in order).
    pub(crate) first_thread: ThreadIdx,
    /// Per thread, the database node of each tree node.
    pub(crate) nodes: Vec<Vec<DbNodeId>>,
}

/// Builds a [`Database`] from profiles and per-module scope trees.
pub(crate) struct Enricher<'a> {
    db: Database,
    index: ChildIndex,
    files: FxHashMap<String, DbFileId>,
    /// Scope tree of each database module, if any.
    structures: &'a [Option<&'a ScopeTree>],
    /// Per module: database file id of each of its tree's file ids.
    file_maps: Vec<FxHashMap<u32, DbFileId>>,
    expansions: FxHashMap<(DbModuleId, Svma), Rc<[NodeKey]>>,
    /// Last lines of the subtrees already walked (see [`last_line`]).
    last_lines: LastLines,
    unknown: FxHashSet<UnknownAddress>,
    /// The JIT maps of the processes met (addresses no module covers).
    jit: JitMaps,
    /// Whether each database module is a CPython interpreter (see [`python`]).
    interpreters: Vec<bool>,
    /// What the Python folding found.
    python: PythonUse,
    /// The Python functions of the profile being added ([`Frame::Python`]'s codes).
    python_code: Vec<profiler::db::PythonCode>,
    /// What each sampled instruction cost its statement.
    instructions: Tally,
}

impl<'a> Enricher<'a> {
    /// An enricher for a database with these metrics and modules; `structures[m]` is module
    /// `m`'s scope tree (finished, so lookups work), or `None`; JIT maps are looked for in the
    /// module `stores` (`hpcrun-rs --bundle`) first.
    pub(crate) fn new(
        metrics: Vec<MetricDesc>,
        modules: Vec<ModuleDesc>,
        structures: &'a [Option<&'a ScopeTree>],
        stores: Vec<PathBuf>,
    ) -> Enricher<'a> {
        let mut db = Database::new(metrics);
        db.modules = modules;
        let jit = JitMaps::new(db.modules.iter().map(|m| m.path.as_str()), stores);
        let interpreters = (db.modules.iter())
            .map(|m| python::is_interpreter(&m.path))
            .collect();
        Enricher {
            file_maps: vec![FxHashMap::default(); db.modules.len()],
            db,
            index: ChildIndex::default(),
            files: FxHashMap::default(),
            structures,
            expansions: FxHashMap::default(),
            last_lines: LastLines::default(),
            unknown: FxHashSet::default(),
            jit,
            interpreters,
            python: PythonUse::default(),
            python_code: Vec::new(),
            instructions: Tally::default(),
        }
    }

    /// Add every thread of `profile` (already validated: parents precede children). Returns,
    /// per thread (in the profile's order), the database node of each of its tree's nodes:
    /// where its data references' contexts landed.
    pub(crate) fn add_profile(&mut self, profile: &Profile, map: &ProfileMapping) -> NodeMaps {
        let metrics = self.db.metrics.len();
        self.python_code.clone_from(&profile.python_code);
        self.jit.run(profile.start_ns, profile.end_ns);
        self.jit
            .parents(profile.processes.iter().map(|p| (p.pid, p.ppid)));
        let mut maps = NodeMaps {
            first_thread: ThreadIdx::from_index(self.db.threads.len()),
            nodes: Vec::with_capacity(profile.threads.len()),
        };
        for thread in &profile.threads {
            let tidx = ThreadIdx::from_index(self.db.threads.len());
            self.db.threads.push(ThreadDesc {
                profile: map.profile,
                pid: thread.pid,
                tid: thread.tid,
                comm: thread.comm.clone(),
            });
            let nodes = &thread.cct.nodes;
            let mut fold = python::Fold::default();
            let tree = python::ThreadTree {
                nodes,
                map,
                pid: thread.pid,
            };
            for (i, node) in nodes.iter().enumerate() {
                let here = self.fold_node(&mut fold, &tree, i);
                if node.costs.iter().any(|c| c.samples > 0 || c.value > 0) {
                    let mut costs = vec![Cost::default(); metrics];
                    for (e, c) in node.costs.iter().enumerate() {
                        costs[map.metrics[e]] = *c;
                    }
                    if self.db.nodes[here.index()].kind == NodeKind::Unknown {
                        let samples = costs.first().map_or(0, |c| c.samples);
                        let stats = &mut self.db.stats;
                        stats.unknown_samples = stats.unknown_samples.saturating_add(samples);
                    }
                    self.db.add_cost(here, tidx, &costs);
                    let at = &self.db.nodes[here.index()];
                    let of = |m: profiler::db::ProfileModuleId| map.modules[m.index()];
                    (self.instructions).add_node((nodes, i), &costs, (at.kind, at.module), of);
                }
            }
            maps.nodes.push(fold.placed());
        }
        maps
    }

    /// Insert one frame of process `pid` below database node `parent`; returns the node its
    /// callees hang from (the call-site statement) and its own samples land on.
    fn insert_frame(
        &mut self,
        parent: DbNodeId,
        frame: Frame,
        map: &ProfileMapping,
        pid: u32,
    ) -> DbNodeId {
        let keys: Rc<[NodeKey]> = match frame {
            Frame::Root => return parent,
            Frame::Partial => Rc::new([NodeKey::pseudo(NodeKind::Partial, "<partial call paths>")]),
            Frame::Kernel => Rc::new([NodeKey::pseudo(NodeKind::Kernel, "<kernel>")]),
            Frame::Blocked(reason) => Rc::new([NodeKey::pseudo(NodeKind::Kernel, reason.label())]),
            Frame::Unmapped { avma, kind } | Frame::Jit { avma, kind, .. } => {
                let addr = kind.lookup(avma);
                let symbol = match frame {
                    Frame::Jit { load, .. } => self.jit.symbol_of_load(pid, load, addr.0),
                    _ => self.jit.symbol(pid, addr.0),
                };
                match symbol {
                    Some(symbol) => Rc::new([self.jit_key(symbol)]),
                    None => {
                        self.unknown.insert((None, addr.0));
                        let name = format!("<unknown procedure> {addr:#x} [unmapped]");
                        Rc::new([NodeKey::pseudo(NodeKind::Unknown, name)])
                    }
                }
            }
            Frame::Code { module, addr, kind } => {
                let module = map.modules[module.index()];
                self.expand(module, kind.lookup(addr))
            }
            Frame::Python { code, line } => self.python_frame(code, line).into(),
        };
        self.insert_chain(parent, &keys)
    }

    /// The procedure frame of a function a JIT compiled, with the source position its name gave.
    fn jit_key(&mut self, symbol: JitSymbol) -> NodeKey {
        let file = (symbol.file.as_deref()).map(|f| self.db.intern_file(&mut self.files, f));
        NodeKey {
            file,
            line: symbol.line,
            ..NodeKey::pseudo(NodeKind::Procedure, symbol.name)
        }
    }

    /// Insert a chain of keys below `parent`, filling a procedure frame's call site from the
    /// caller's statement.
    fn insert_chain(&mut self, parent: DbNodeId, keys: &[NodeKey]) -> DbNodeId {
        let mut at = parent;
        for (i, key) in keys.iter().enumerate() {
            let p = &self.db.nodes[at.index()];
            let key = if i == 0 && key.kind.is_activation() && p.kind == NodeKind::Statement {
                NodeKey {
                    call_file: p.file,
                    call_line: p.line,
                    ..key.clone()
                }
            } else {
                key.clone()
            };
            at = self.db.child(&mut self.index, at, key);
        }
        at
    }

    /// The static context of `addr` in `module`, outermost first, memoised.
    fn expand(&mut self, module: DbModuleId, addr: Svma) -> Rc<[NodeKey]> {
        if let Some(keys) = self.expansions.get(&(module, addr)) {
            return keys.clone();
        }
        let found = self.structures[module.index()]
            .and_then(|tree| tree.lookup(addr).map(|stmt| (tree, stmt)));
        let keys: Rc<[NodeKey]> = match found {
            Some((tree, stmt)) => self.scope_chain(module, tree, stmt).into(),
            None => {
                self.unknown.insert((Some(module), addr.0));
                let path = &self.db.modules[module.index()].path;
                let name = label::unknown_procedure(addr.0, Some(path));
                Rc::new([NodeKey {
                    module: Some(module),
                    ..NodeKey::pseudo(NodeKind::Unknown, name)
                }])
            }
        };
        self.expansions.insert((module, addr), keys.clone());
        keys
    }

    /// Keys for statement `stmt` and its ancestors up to its procedure, outermost first. Scopes
    /// without a file inherit the enclosing scope's.
    fn scope_chain(&mut self, module: DbModuleId, tree: &ScopeTree, stmt: ScopeId) -> Vec<NodeKey> {
        let mut chain: Vec<ScopeId> = tree.ancestors(stmt).collect();
        chain.reverse();
        chain.push(stmt);
        let mut keys = Vec::with_capacity(chain.len());
        let mut file = procedure_file(tree, chain[0]);
        for id in chain {
            let scope = tree.get(id);
            file = scope.file.or(file);
            let (kind, call_file, call_line) = match scope.kind {
                ScopeKind::Procedure => (NodeKind::Procedure, None, None),
                ScopeKind::Alien {
                    call_file,
                    call_line,
                } => (NodeKind::Inlined, call_file, Some(call_line)),
                ScopeKind::Loop => (NodeKind::Loop, None, None),
                ScopeKind::Statement => (NodeKind::Statement, None, None),
                // Lookups end at a statement below a procedure; nothing else can appear.
                ScopeKind::Module | ScopeKind::File => continue,
            };
            let name = match kind {
                NodeKind::Procedure | NodeKind::Inlined => scope.name.to_string(),
                _ => String::new(),
            };
            let end_line = match kind {
                NodeKind::Statement => None,
                _ => last_line(&mut self.last_lines, module, tree, id, file),
            };
            keys.push(NodeKey {
                kind,
                name,
                module: Some(module),
                file: file.map(|f| self.file(module, tree, f)),
                line: (scope.line != 0).then_some(scope.line),
                end_line,
                call_file: call_file.map(|f| self.file(module, tree, f)),
                call_line: call_line.filter(|&l| l != 0),
            });
        }
        keys
    }

    /// The database file id of file `f` of `module`'s tree.
    fn file(&mut self, module: DbModuleId, tree: &ScopeTree, f: structure::FileId) -> DbFileId {
        if let Some(&id) = self.file_maps[module.index()].get(&f.0) {
            return id;
        }
        let id = self.db.intern_file(&mut self.files, tree.file_name(f));
        self.file_maps[module.index()].insert(f.0, id);
        id
    }

    /// The database so far (without totals), the distinct addresses left as `<unknown
    /// procedure>` and what the JIT maps named: what [`crate::prof::shares::Enriched`] merges
    /// and finishes.
    pub(crate) fn into_parts(self) -> EnrichedParts {
        let mut used = self.jit.used;
        used.python = self.python;
        (self.db, self.unknown, used, self.instructions.finish())
    }
}

/// What an enricher made: the tree, the unknown addresses, what the JIT maps named, and the
/// sampled instructions' costs.
pub(crate) type EnrichedParts = (
    Database,
    FxHashSet<UnknownAddress>,
    JitUse,
    InstructionCosts,
);

/// A database module's address outside any structure (an `<unknown procedure>`; no module
/// when unmapped).
pub(crate) type UnknownAddress = (Option<DbModuleId>, u64);

/// Finish an enriched tree: compute its totals and count its `unknown` addresses.
pub(crate) fn finish_tree(db: &mut Database, unknown: &FxHashSet<UnknownAddress>) {
    db.stats.unknown_addresses = unknown.len() as u64;
    db.compute_totals();
}

/// The file of procedure `proc_`: its own, else its enclosing `File` scope's.
fn procedure_file(tree: &ScopeTree, proc_: ScopeId) -> Option<structure::FileId> {
    let scope = tree.get(proc_);
    scope.file.or_else(|| {
        let parent = tree.get(scope.parent?);
        (parent.kind == ScopeKind::File).then_some(())?;
        parent.file
    })
}

/// Memoised answers of [`last_line`]: (module, scope, the scope's effective file, the file
/// asked about) -> the largest line of that file among the statements below the scope.
type LastLines = FxHashMap<
    (
        DbModuleId,
        ScopeId,
        Option<structure::FileId>,
        Option<structure::FileId>,
    ),
    Option<u32>,
>;

/// The last line of scope `id`'s own code in `file` (its effective file): the largest line of
/// the statements below it in that file, not counting code inlined into it (its own end line
/// where the structure does not record one).
///
/// Every scope of every context needs this, and the scopes of one context are nested, so the
/// answer for each subtree is memoised in `memo` and the subtrees are walked bottom-up with an
/// explicit stack: a loop nest `n` deep costs `O(n)`, not `O(n^2)`, and no walk recurses.
fn last_line(
    memo: &mut LastLines,
    module: DbModuleId,
    tree: &ScopeTree,
    id: ScopeId,
    file: Option<structure::FileId>,
) -> Option<u32> {
    let key = |s: ScopeId, f: Option<structure::FileId>| (module, s, f, file);
    // The children a scope's own code continues into (not inlined code), with their files.
    let children = |s: ScopeId, f: Option<structure::FileId>| {
        tree.get(s)
            .children
            .iter()
            .map(|&c| (c, tree.get(c)))
            .filter(|(_, c)| !matches!(c.kind, ScopeKind::Alien { .. }))
            .map(move |(c, scope)| (c, scope, scope.file.or(f)))
    };
    let mut stack = vec![(id, file, false)];
    while let Some((s, f, children_done)) = stack.pop() {
        if memo.contains_key(&key(s, f)) {
            continue;
        }
        if !children_done {
            stack.push((s, f, true));
            stack.extend(children(s, f).map(|(c, _, cf)| (c, cf, false)));
            continue;
        }
        let last = children(s, f)
            .map(|(c, scope, cf)| {
                let own = (scope.kind == ScopeKind::Statement && cf == file && scope.line != 0)
                    .then_some(scope.line);
                own.max(memo[&key(c, cf)])
            })
            .max()
            .flatten();
        memo.insert(key(s, f), last);
    }
    memo[&key(id, file)]
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
#[path = "enrich_tests.rs"]
pub(crate) mod tests;
