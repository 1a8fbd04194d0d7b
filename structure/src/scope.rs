//! The scope tree: one load module's program structure, shared by the analyser, the XML writer,
//! the XML reader and `hpcprof-rs`.
//!
//! A [`ScopeTree`] is an arena of [`Scope`]s addressed by [`ScopeId`], each with a parent link
//! and ordered children. The shape follows HPCToolkit's structure model:
//!
//! ```text
//! Module > File > Procedure > ( Alien | Loop | Statement )*
//!                              Alien > ( Alien | Loop | Statement )*
//!                              Loop  > ( Alien | Loop | Statement )*
//! ```
//!
//! An [`ScopeKind::Alien`] is one inlined call: its own `name`/`file`/`line` describe the callee,
//! and the variant carries the call site (file and line in the enclosing context). In the XML it
//! becomes a "double alien" (outer `A` = call site, inner `A` = callee).
//!
//! Addresses are link-time virtual addresses of the module file (SVMA): what `objdump` prints,
//! offsets from 0 for PIE executables and shared libraries. After [`ScopeTree::finish`], the
//! tree answers [`ScopeTree::lookup`]: the statement whose ranges contain an address, found by
//! binary search over a sorted, disjoint interval table.

use crate::identity::BinaryIdentity;
use crate::ranges::merge_in_place;
use profiler::addr::Svma;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Index of a scope in its [`ScopeTree`]'s arena. Only meaningful for the tree that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ScopeId(pub u32);

impl ScopeId {
    /// The arena index as a `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of an interned source-file path in its [`ScopeTree`] (see [`ScopeTree::file_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u32);

/// What a scope stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScopeKind {
    /// The load module (the binary or shared library). Always the root, `ScopeId(0)`.
    Module,
    /// A source file: groups the procedures whose declaration is in it.
    File,
    /// A procedure (a function as it exists in the binary). Never nested in another procedure.
    Procedure,
    /// Code inlined from another procedure: `name`, `file` and `line` describe the callee, the
    /// variant gives the call site in the enclosing scope (file unknown: `None`, line unknown: 0).
    Alien {
        /// File of the call site.
        call_file: Option<FileId>,
        /// Line of the call site (0 = unknown).
        call_line: u32,
    },
    /// A loop; `entry` is its header address, `line` its begin line.
    Loop,
    /// A source line: the instructions attributed to one line in one context.
    Statement,
}

/// One node of the scope tree. Fields that do not apply to a kind are empty (`""`, `None`, 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// What this scope stands for.
    pub kind: ScopeKind,
    /// Enclosing scope; `None` only for the module root.
    pub parent: Option<ScopeId>,
    /// Enclosed scopes, in the order they were added.
    pub children: Vec<ScopeId>,
    /// Display name: module path, file path, procedure or inlined callee name (demangled).
    /// For a procedure of a shared library this is the plain name, without HPCToolkit's
    /// `" [libname]"` suffix (the writer adds it, the reader strips it). Shared: the inlined
    /// calls of one callee hold one name (ripgrep: 266k calls, 12k callees).
    pub name: Arc<str>,
    /// Link-time (mangled) name of a procedure, when it differs from `name`.
    pub link_name: Option<Arc<str>>,
    /// Source file of the code in this scope (for statements: the file the line belongs to).
    pub file: Option<FileId>,
    /// Begin line (procedure: declaration or first line; loop: begin line; statement: its line);
    /// 0 when unknown.
    pub line: u32,
    /// Half-open SVMA ranges, sorted and disjoint. Statement: its instructions. Procedure, Alien,
    /// Loop: the union of the ranges of all statements below (filled by [`ScopeTree::finish`]).
    /// Module and File: empty.
    pub ranges: Vec<Range<u64>>,
    /// One distinguished address: a procedure's entry, a loop's header. `None` otherwise.
    pub entry: Option<u64>,
}

impl Scope {
    /// A scope of `kind` with every other field empty.
    pub fn new(kind: ScopeKind) -> Scope {
        Scope {
            kind,
            parent: None,
            children: Vec::new(),
            name: Arc::default(),
            link_name: None,
            file: None,
            line: 0,
            ranges: Vec::new(),
            entry: None,
        }
    }

    /// Whether this is a [`ScopeKind::Alien`] (an inlined call).
    pub fn is_alien(&self) -> bool {
        matches!(self.kind, ScopeKind::Alien { .. })
    }

    /// Lowest address covered by `ranges`, if any.
    pub fn low_address(&self) -> Option<u64> {
        self.ranges.first().map(|r| r.start)
    }
}

/// One load module's structure: an arena of scopes plus an address index.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScopeTree {
    scopes: Vec<Scope>,
    files: Vec<String>,
    #[serde(skip)]
    file_ids: BTreeMap<String, FileId>,
    /// Disjoint statement intervals sorted by start: (start, end, statement).
    index: Vec<(u64, u64, ScopeId)>,
    /// Whether the module is a shared library (HPCToolkit then suffixes procedure names).
    shared_library: bool,
    /// Which build of the binary the tree describes, when known (not cached: the cache is
    /// keyed by it).
    #[serde(skip)]
    identity: Option<BinaryIdentity>,
}

impl ScopeTree {
    /// A tree holding only the module root, named `module_path` (the binary as analysed).
    pub fn new(module_path: &str) -> ScopeTree {
        let mut root = Scope::new(ScopeKind::Module);
        root.name = module_path.into();
        ScopeTree {
            scopes: vec![root],
            ..ScopeTree::default()
        }
    }

    /// The module root.
    pub fn root(&self) -> ScopeId {
        ScopeId(0)
    }

    /// The module path (the root's name).
    pub fn module_path(&self) -> &str {
        &self.scopes[0].name
    }

    /// Whether the module is a shared library. The writer then appends `" [basename]"` to
    /// procedure names, as HPCToolkit does; the reader strips it and sets this flag.
    pub fn is_shared_library(&self) -> bool {
        self.shared_library
    }

    /// Mark the module as a shared library (or not); see [`ScopeTree::is_shared_library`].
    pub fn set_shared_library(&mut self, shared: bool) {
        self.shared_library = shared;
    }

    /// Which build of the binary the tree describes: set by the analysis, read back from
    /// structure files that hpcstruct-rs wrote; `None` for HPCToolkit's.
    pub fn identity(&self) -> Option<&BinaryIdentity> {
        self.identity.as_ref()
    }

    /// Record which build of the binary the tree describes.
    pub fn set_identity(&mut self, identity: BinaryIdentity) {
        self.identity = Some(identity);
    }

    /// Make room for `additional` more scopes at once: a tree built by doubling holds up to
    /// twice its scopes, and at the last doubling the old and the new array together.
    pub fn reserve(&mut self, additional: usize) {
        self.scopes.reserve_exact(additional);
    }

    /// Number of scopes, the root included.
    pub fn len(&self) -> usize {
        self.scopes.len()
    }

    /// Never true: a tree always holds its root. Present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.scopes.is_empty()
    }

    /// The scope `id`. Panics if `id` comes from another tree and is out of bounds.
    pub fn get(&self, id: ScopeId) -> &Scope {
        &self.scopes[id.index()]
    }

    /// Mutable access to scope `id` (do not edit `parent`/`children` by hand: use
    /// [`ScopeTree::add`]).
    pub fn get_mut(&mut self, id: ScopeId) -> &mut Scope {
        &mut self.scopes[id.index()]
    }

    /// All scope ids in arena order (parents before their children).
    pub fn ids(&self) -> impl Iterator<Item = ScopeId> + '_ {
        (0..self.scopes.len() as u32).map(ScopeId)
    }

    /// Add `scope` as the last child of `parent` and return its id. `scope.parent` and
    /// `scope.children` are overwritten.
    pub fn add(&mut self, parent: ScopeId, mut scope: Scope) -> ScopeId {
        scope.children.clear();
        push_child(&mut self.scopes, parent, scope)
    }

    /// Append `arena`, one procedure's scopes (the procedure first, parents before their
    /// children, `parent` and `children` indices into `arena`; the procedure's parent `None`),
    /// as the last child of `parent`, renumbered past the tree's scopes; the id of its first
    /// scope. Ranges are kept as they are, the containers' too.
    pub(crate) fn append_arena(&mut self, parent: ScopeId, mut arena: Vec<Scope>) -> u32 {
        let base = self.scopes.len() as u32;
        for s in &mut arena {
            s.parent = Some(s.parent.map_or(parent, |p| ScopeId(p.0 + base)));
            for c in &mut s.children {
                c.0 += base;
            }
        }
        self.scopes[parent.index()].children.push(ScopeId(base));
        self.scopes.append(&mut arena);
        base
    }

    /// Add statement intervals (start, end, statement) to the address index, which
    /// [`ScopeTree::finish_index`] then completes.
    pub(crate) fn index_statements(
        &mut self,
        intervals: impl Iterator<Item = (u64, u64, ScopeId)>,
    ) {
        self.index.extend(intervals);
    }

    /// Room for `additional` more intervals in the address index.
    pub(crate) fn reserve_index(&mut self, additional: usize) {
        self.index.reserve_exact(additional);
    }

    /// The id of source file `path`, interning it on first use.
    pub fn intern_file(&mut self, path: &str) -> FileId {
        if self.file_ids.is_empty() && !self.files.is_empty() {
            self.rebuild_file_ids();
        }
        if let Some(&id) = self.file_ids.get(path) {
            return id;
        }
        let id = FileId(self.files.len() as u32);
        self.files.push(path.to_string());
        self.file_ids.insert(path.to_string(), id);
        id
    }

    /// Give the tree the module path `path`, as if its binary had been analysed there rather
    /// than at a copy of it (a `hpcrun-rs --bundle` store's `executable`): the root's name and
    /// the name of the module's file of code without lines, `[basename]`.
    pub fn rename_module(&mut self, path: &str) {
        let old = format!("[{}]", module_basename(self.module_path()));
        let new = format!("[{}]", module_basename(path));
        self.scopes[0].name = path.into();
        for f in self.files.iter_mut().filter(|f| **f == old) {
            f.clone_from(&new);
        }
        let new_name: Arc<str> = new.as_str().into();
        for s in self.scopes.iter_mut() {
            if s.kind == ScopeKind::File && *s.name == *old {
                s.name = Arc::clone(&new_name);
            }
        }
        self.rebuild_file_ids();
    }

    fn rebuild_file_ids(&mut self) {
        self.file_ids = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), FileId(i as u32)))
            .collect();
    }

    /// The path of file `id`.
    pub fn file_name(&self, id: FileId) -> &str {
        &self.files[id.0 as usize]
    }

    /// The path of a scope's file, if it has one.
    pub fn scope_file(&self, id: ScopeId) -> Option<&str> {
        self.get(id).file.map(|f| self.file_name(f))
    }

    /// All interned file paths, indexed by `FileId.0`.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Finish construction: compute the ranges of procedures, aliens and loops from their
    /// statements and build the address index. Where statement ranges overlap (possible in
    /// files written by other tools), the statement added first keeps the overlap, as in
    /// HPCToolkit's reader. Call again after any change to statements.
    pub fn finish(&mut self) {
        self.compute_container_ranges();
        self.build_index();
    }

    /// [`ScopeTree::finish`] for a tree whose containers already hold their ranges (one built
    /// of [`ScopeTree::append_arena`]'s arenas) and whose statements' intervals were given to
    /// [`ScopeTree::index_statements`]: only the address index is completed.
    pub(crate) fn finish_index(&mut self) {
        let given = std::mem::take(&mut self.index);
        self.set_index(given);
    }

    fn compute_container_ranges(&mut self) {
        merge_container_ranges(&mut self.scopes);
        for i in 0..self.scopes.len() {
            if matches!(self.scopes[i].kind, ScopeKind::Module | ScopeKind::File) {
                self.scopes[i].ranges.clear();
            }
        }
    }

    fn build_index(&mut self) {
        let all: Vec<(u64, u64, ScopeId)> = (self.scopes.par_iter().enumerate())
            .filter(|(_, scope)| scope.kind == ScopeKind::Statement)
            .flat_map_iter(|(i, scope)| {
                (scope.ranges.iter())
                    .filter(|r| r.start < r.end)
                    .map(move |r| (r.start, r.end, ScopeId(i as u32)))
            })
            .collect();
        self.set_index(all);
    }

    /// The address index of the statements' non-empty intervals `all` (any order).
    fn set_index(&mut self, mut all: Vec<(u64, u64, ScopeId)>) {
        all.par_sort_unstable_by_key(|r| r.0);
        if all.windows(2).all(|w| w[0].1 <= w[1].0) {
            // The common case (our own trees): already disjoint.
            self.index = all;
            return;
        }
        self.build_index_with_overlaps();
    }

    fn build_index_with_overlaps(&mut self) {
        let mut taken: BTreeMap<u64, (u64, ScopeId)> = BTreeMap::new();
        for (i, scope) in self.scopes.iter().enumerate() {
            if scope.kind != ScopeKind::Statement {
                continue;
            }
            for r in &scope.ranges {
                insert_unclaimed(&mut taken, r.clone(), ScopeId(i as u32));
            }
        }
        self.index = taken.into_iter().map(|(s, (e, id))| (s, e, id)).collect();
    }

    /// The innermost scope containing link-time address `svma`: the statement whose ranges
    /// hold it, or `None` if no statement does (a gap, or an address outside the module).
    /// Valid after [`ScopeTree::finish`]. O(log n).
    pub fn lookup(&self, svma: Svma) -> Option<ScopeId> {
        let Svma(svma) = svma;
        let pos = self.index.partition_point(|&(start, _, _)| start <= svma);
        let &(start, end, id) = self.index.get(pos.checked_sub(1)?)?;
        (start <= svma && svma < end).then_some(id)
    }

    /// The enclosing procedure of `id` (itself if it is one), `None` above procedure level.
    pub fn procedure_of(&self, id: ScopeId) -> Option<ScopeId> {
        std::iter::once(id)
            .chain(self.ancestors(id))
            .find(|&a| self.get(a).kind == ScopeKind::Procedure)
    }

    /// The proper ancestors of `id`, innermost first, up to and including its procedure (or up
    /// to the root for scopes above procedure level).
    pub fn ancestors(&self, id: ScopeId) -> Ancestors<'_> {
        Ancestors {
            tree: self,
            next: if self.get(id).kind == ScopeKind::Procedure {
                None
            } else {
                self.get(id).parent
            },
        }
    }

    /// The address index: disjoint `(start, end, statement)` triples sorted by start.
    pub fn address_index(&self) -> &[(u64, u64, ScopeId)] {
        &self.index
    }

    /// The procedures of the tree, in arena order.
    pub fn procedures(&self) -> impl Iterator<Item = ScopeId> + '_ {
        self.ids()
            .filter(|&id| self.get(id).kind == ScopeKind::Procedure)
    }

    /// Why the tree is not well formed, if it is not: for a tree decoded from bytes that may be
    /// damaged or crafted (a cache entry), before anything indexes or walks it. Checks that the
    /// root is the one module scope, that every other scope comes after its parent and is
    /// listed exactly once, by that parent (so there are no cycles), and that every file and
    /// scope reference (the address index included) is in range.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.scopes.len();
        match self.scopes.first() {
            Some(root) if root.kind == ScopeKind::Module && root.parent.is_none() => {}
            _ => return Err("the first scope is not a module root".into()),
        }
        let mut listed = vec![false; n];
        for (i, scope) in self.scopes.iter().enumerate() {
            self.check_scope(i, scope, &mut listed)
                .map_err(|why| format!("scope {i}: {why}"))?;
        }
        if let Some(i) = listed.iter().skip(1).position(|&l| !l) {
            return Err(format!("scope {}: not listed by its parent", i + 1));
        }
        let index_ok = self.index.iter().all(|&(s, e, id)| s < e && id.index() < n)
            && self.index.windows(2).all(|w| w[0].1 <= w[1].0);
        index_ok
            .then_some(())
            .ok_or_else(|| "the address index is out of range or unsorted".into())
    }

    /// One scope's part of [`ScopeTree::validate`]; marks its children in `listed`.
    fn check_scope(&self, i: usize, scope: &Scope, listed: &mut [bool]) -> Result<(), String> {
        if i > 0 && (scope.kind == ScopeKind::Module || scope.parent.is_none_or(|p| p.index() >= i))
        {
            return Err("a second root, or a parent that does not precede it".into());
        }
        let call_file = match scope.kind {
            ScopeKind::Alien { call_file, .. } => call_file,
            _ => None,
        };
        if [scope.file, call_file]
            .iter()
            .flatten()
            .any(|f| f.0 as usize >= self.files.len())
        {
            return Err("a file out of range".into());
        }
        for &c in &scope.children {
            let child = self.scopes.get(c.index()).filter(|_| c.index() > i);
            if child.is_none_or(|ch| ch.parent != Some(ScopeId(i as u32))) || listed[c.index()] {
                return Err(format!("child {} is not its own", c.0));
            }
            listed[c.index()] = true;
        }
        Ok(())
    }

    /// The scopes below `id` (excluding it) in pre-order.
    pub fn descendants(&self, id: ScopeId) -> Vec<ScopeId> {
        let mut out = Vec::new();
        let mut stack: Vec<ScopeId> = self.get(id).children.iter().rev().copied().collect();
        while let Some(s) = stack.pop() {
            out.push(s);
            stack.extend(self.get(s).children.iter().rev().copied());
        }
        out
    }
}

/// Iterator over a scope's ancestors, innermost first, ending at its procedure.
pub struct Ancestors<'a> {
    tree: &'a ScopeTree,
    next: Option<ScopeId>,
}

impl Iterator for Ancestors<'_> {
    type Item = ScopeId;

    fn next(&mut self) -> Option<ScopeId> {
        let id = self.next?;
        let scope = self.tree.get(id);
        self.next = if scope.kind == ScopeKind::Procedure {
            None
        } else {
            scope.parent
        };
        Some(id)
    }
}

/// Add `scope` to `scopes` (a tree's arena, or one procedure's) as the last child of `parent`;
/// its id there. `scope.parent` is overwritten.
pub(crate) fn push_child(scopes: &mut Vec<Scope>, parent: ScopeId, mut scope: Scope) -> ScopeId {
    let id = ScopeId(scopes.len() as u32);
    scope.parent = Some(parent);
    scopes.push(scope);
    scopes[parent.index()].children.push(id);
    id
}

/// Give each procedure, alien and loop among `scopes` the union of its children's ranges.
/// Children always come after their parents, so one reverse pass suffices. Modules and files
/// get none: theirs would be most of the binary, built to be thrown away.
pub(crate) fn merge_container_ranges(scopes: &mut [Scope]) {
    let mut scratch: Vec<Range<u64>> = Vec::new();
    for i in (0..scopes.len()).rev() {
        let scope = &scopes[i];
        let container = !matches!(
            scope.kind,
            ScopeKind::Statement | ScopeKind::Module | ScopeKind::File
        );
        if !container || scope.children.is_empty() {
            continue;
        }
        scratch.clear();
        for &c in &scope.children {
            scratch.extend(scopes[c.index()].ranges.iter().cloned());
        }
        merge_in_place(&mut scratch);
        scopes[i].ranges = scratch.clone();
    }
}

/// Insert the parts of `range` not yet present in `taken` (start -> (end, owner)).
fn insert_unclaimed(taken: &mut BTreeMap<u64, (u64, ScopeId)>, range: Range<u64>, owner: ScopeId) {
    let mut cursor = range.start;
    // Start from the last interval beginning at or before the range start.
    let first = taken
        .range(..=range.start)
        .next_back()
        .map(|(&s, _)| s)
        .unwrap_or(range.start);
    let overlapping: Vec<(u64, u64)> = taken
        .range(first..range.end)
        .map(|(&s, &(e, _))| (s, e))
        .collect();
    let mut gaps = Vec::new();
    for (s, e) in overlapping {
        if e <= cursor {
            continue;
        }
        if s > cursor {
            gaps.push(cursor..s);
        }
        cursor = cursor.max(e);
    }
    if cursor < range.end {
        gaps.push(cursor..range.end);
    }
    for g in gaps {
        taken.insert(g.start, (g.end, owner));
    }
}

/// The last component of a module path.
pub(crate) fn module_basename(module_path: &str) -> &str {
    module_path.rsplit('/').next().unwrap_or(module_path)
}

#[cfg(test)]
#[path = "scope_tests.rs"]
mod tests;
