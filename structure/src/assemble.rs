//! From procedures' local trees to the module's scope tree.
//!
//! Each procedure's scopes are made where the procedure is built, in parallel: an arena of its
//! own ([`ProcScopes`]: the procedure at 0, its statements, loops and inlined calls after it in
//! pre-order, files still named by their DWARF index, the containers' ranges already merged from
//! their statements). The one serial step, [`Assembler::add`], only gives the files their tree
//! ids (in the order they are first named, as a scope-by-scope build would) and appends the
//! arena under its file, renumbered. Making the scopes (their names, child lists and ranges) and
//! freeing the local trees took a third of the analysis of a large library when it was serial.

use crate::analysis::IrreducibleLoop;
use crate::dwarf::{DwarfInfo, InlineCall, NO_FILE};
use crate::plan::ProcPlan;
use crate::procedure::{LocalTree, Step};
use crate::scope::{
    merge_container_ranges, module_basename, push_child, FileId, Scope, ScopeId, ScopeKind,
    ScopeTree,
};
use std::sync::Arc;

/// One procedure's scopes, ready to be appended to the module tree.
pub(crate) struct ProcScopes {
    /// The procedure first, then the scopes below it in pre-order; `parent` and `children` are
    /// indices into this arena (the procedure's parent is `None`), and each `file` and
    /// `call_file` holds a DWARF file index ([`NO_FILE`]: unknown) until [`Assembler::add`].
    scopes: Vec<Scope>,
    /// Loops with more than one entry.
    pub(crate) irreducible: Vec<IrreducibleLoop>,
    /// Inlined calls among the scopes that the line map suggested (DWARF had none).
    pub(crate) inferred: usize,
    /// The statements' address intervals (start, end, arena index), for the tree's address
    /// index: taken here, in parallel, where the ranges are still in the cache (taken from the
    /// whole tree afterwards, a walk to each statement's ranges, it was 25 ms of libpython's
    /// 0.5 s).
    statements: Vec<(u64, u64, u32)>,
}

impl ProcScopes {
    /// The scopes of procedure `plan` from its local tree `local`, whose alien steps index
    /// `calls` (`inferred`: calls guessed from the line map rather than DWARF's); siblings in
    /// the order of their lowest statement address. `module` names the file of code without
    /// lines.
    pub(crate) fn new(
        plan: &ProcPlan,
        mut local: LocalTree,
        calls: &[InlineCall],
        inferred: bool,
        info: &DwarfInfo,
        module: &str,
    ) -> ProcScopes {
        let lowest = lowest_addresses(&local);
        let first_row = first_line(plan, info);
        let mut procedure = Scope::new(ScopeKind::Procedure);
        procedure.name = plan.name.as_str().into();
        procedure.link_name = plan.link_name.as_deref().map(Arc::from);
        procedure.file = dwarf_file(plan.file.or(first_row.map(|r| r.0)));
        procedure.line = if plan.line > 0 {
            plan.line
        } else {
            first_row.map_or(0, |r| r.1)
        };
        procedure.entry = Some(plan.entry);
        // At most one scope a statement and one a node: the arena is never grown by copying
        // (growing it was 3% of libpython's samples).
        let most = 1
            + (local.nodes.iter())
                .map(|n| n.stmts.len() + 1)
                .sum::<usize>();
        let mut scopes = Vec::with_capacity(most);
        scopes.push(procedure);
        let mut maker = Maker {
            scopes,
            irreducible: Vec::new(),
            procedure: &plan.name,
            calls,
            info,
            module,
            lowest: &lowest,
        };
        maker.children(&mut local, 0, 0);
        let mut scopes = maker.scopes;
        let irreducible = maker.irreducible;
        merge_container_ranges(&mut scopes);
        let inferred = if inferred {
            scopes.iter().filter(|s| s.is_alien()).count()
        } else {
            0
        };
        let statements = (scopes.iter().enumerate())
            .filter(|(_, s)| s.kind == ScopeKind::Statement)
            .flat_map(|(i, s)| {
                (s.ranges.iter())
                    .filter(|r| r.start < r.end)
                    .map(move |r| (r.start, r.end, i as u32))
            })
            .collect();
        ProcScopes {
            scopes,
            irreducible,
            inferred,
            statements,
        }
    }

    /// Number of scopes, the procedure included.
    pub(crate) fn len(&self) -> usize {
        self.scopes.len()
    }

    /// Number of statement intervals.
    pub(crate) fn intervals(&self) -> usize {
        self.statements.len()
    }
}

/// A DWARF file index as the arena holds it until assembly.
fn dwarf_file(f: Option<u32>) -> Option<FileId> {
    Some(FileId(f.unwrap_or(NO_FILE)))
}

/// What [`ProcScopes::new`] needs while it walks a local tree.
struct Maker<'a> {
    scopes: Vec<Scope>,
    irreducible: Vec<IrreducibleLoop>,
    procedure: &'a str,
    calls: &'a [InlineCall],
    info: &'a DwarfInfo,
    module: &'a str,
    lowest: &'a [u64],
}

impl Maker<'_> {
    /// Add `scope` below arena scope `parent`; its id.
    fn add(&mut self, parent: usize, scope: Scope) -> usize {
        push_child(&mut self.scopes, ScopeId(parent as u32), scope).index()
    }

    /// The statements of local node `node`, then its live children in address order, each with
    /// what is below it, under arena scope `parent`.
    fn children(&mut self, local: &mut LocalTree, node: usize, parent: usize) {
        for ((file, line), ranges) in std::mem::take(&mut local.nodes[node].stmts) {
            let mut s = Scope::new(ScopeKind::Statement);
            s.file = dwarf_file(Some(file));
            s.line = line;
            s.ranges = ranges;
            self.add(parent, s);
        }
        let mut children: Vec<(u64, usize)> = local.nodes[node]
            .children
            .iter()
            .filter(|&&c| !local.nodes[c].dead)
            .map(|&c| (self.lowest[c], c))
            .collect();
        children.sort_unstable();
        for (_, c) in children {
            let scope = match local.nodes[c].step {
                Some(Step::Alien(i)) => alien_scope(&self.calls[i as usize]),
                Some(Step::Loop(l)) => self.loop_scope(local, l),
                None => continue,
            };
            let id = self.add(parent, scope);
            self.children(local, c, id);
        }
    }

    /// The scope of loop `l`; an irreducible one is noted.
    fn loop_scope(&mut self, local: &LocalTree, l: usize) -> Scope {
        let (file, line) = local.loop_lines[l];
        let mut s = Scope::new(ScopeKind::Loop);
        s.file = dwarf_file(file);
        s.line = line;
        s.entry = local.loop_headers.get(l).copied();
        let entries = &local.loop_entries[l];
        if entries.len() > 1 {
            self.irreducible.push(IrreducibleLoop {
                procedure: self.procedure.to_string(),
                file: file_name(self.info, file, self.module),
                line,
                entries: entries.clone(),
            });
        }
        s
    }
}

/// The tree's name of DWARF file `f`: its path, or `[module basename]` where it has none.
fn file_name(info: &DwarfInfo, f: Option<u32>, module: &str) -> String {
    match f {
        Some(f) if f != NO_FILE && !info.files[f as usize].is_empty() => {
            info.files[f as usize].clone()
        }
        _ => unknown_file_name(module),
    }
}

/// The file of code without lines: `[basename]` of the module.
fn unknown_file_name(module: &str) -> String {
    format!("[{}]", module_basename(module))
}

/// The scope of inlined call `call` (files as DWARF indices).
fn alien_scope(call: &InlineCall) -> Scope {
    let mut s = Scope::new(ScopeKind::Alien {
        call_file: call.call_file.filter(|&f| f != NO_FILE).map(FileId),
        call_line: call.call_line,
    });
    // Shared with every other call of the same callee in its unit (ripgrep: 266k inlined
    // calls of 12k callees, whose names held 24 MB as copies).
    s.name = Arc::clone(&call.name);
    s.link_name = call.link_name.clone();
    s.file = dwarf_file(call.file);
    s.line = call.line;
    s
}

/// (file, line) of the first line row inside the procedure with a known line.
fn first_line(plan: &ProcPlan, info: &DwarfInfo) -> Option<(u32, u32)> {
    let i = info.first_row_from(plan.entry);
    info.rows[i..]
        .iter()
        .take_while(|row| plan.ranges.iter().any(|r| r.contains(&row.address)))
        .find(|row| row.file != NO_FILE && row.line > 0)
        .map(|row| (row.file, row.line))
}

/// Lowest address of any statement at or below each live node of `local` (`u64::MAX` where
/// there is none), in one pass from the leaves up.
fn lowest_addresses(local: &LocalTree) -> Vec<u64> {
    let mut lowest = vec![u64::MAX; local.nodes.len()];
    let mut stack = vec![(0, false)];
    while let Some((n, children_done)) = stack.pop() {
        let node = &local.nodes[n];
        let live = node.children.iter().filter(|&&c| !local.nodes[c].dead);
        if children_done {
            let own = node.stmts.values().flatten().map(|r| r.start).min();
            lowest[n] = live
                .map(|&c| lowest[c])
                .fold(own.unwrap_or(u64::MAX), u64::min);
        } else {
            stack.push((n, true));
            stack.extend(live.map(|&c| (c, false)));
        }
    }
    lowest
}

/// Appends procedures' arenas to the module tree under their files, in order.
pub(crate) struct Assembler<'a> {
    pub(crate) tree: ScopeTree,
    info: &'a DwarfInfo,
    /// DWARF file index -> tree file id, where given one.
    files: Vec<Option<FileId>>,
    /// Tree file id -> File scope, where made.
    file_scopes: Vec<Option<ScopeId>>,
    unknown_file: FileId,
}

impl<'a> Assembler<'a> {
    /// A tree holding only the root of `module`, for procedures whose files are `info`'s.
    pub(crate) fn new(module: &str, info: &'a DwarfInfo) -> Self {
        let mut tree = ScopeTree::new(module);
        let unknown_file = tree.intern_file(&unknown_file_name(module));
        Assembler {
            tree,
            info,
            files: vec![None; info.files.len()],
            file_scopes: Vec::new(),
            unknown_file,
        }
    }

    /// The tree's id of DWARF file `f` ([`NO_FILE`] or a file without a name: the module's
    /// file of code without lines).
    fn file_id(&mut self, f: FileId) -> FileId {
        let Some(slot) = self.files.get_mut(f.0 as usize) else {
            return self.unknown_file;
        };
        if let Some(id) = *slot {
            return id;
        }
        let name = &self.info.files[f.0 as usize];
        let id = if name.is_empty() {
            self.unknown_file
        } else {
            self.tree.intern_file(name)
        };
        self.files[f.0 as usize] = Some(id);
        id
    }

    /// The File scope of tree file `file`, made on first use.
    fn file_scope(&mut self, file: FileId) -> ScopeId {
        let i = file.0 as usize;
        if self.file_scopes.len() <= i {
            self.file_scopes.resize(i + 1, None);
        }
        if let Some(s) = self.file_scopes[i] {
            return s;
        }
        let mut scope = Scope::new(ScopeKind::File);
        scope.name = self.tree.file_name(file).into();
        scope.file = Some(file);
        let id = self.tree.add(self.tree.root(), scope);
        self.file_scopes[i] = Some(id);
        id
    }

    /// Append one procedure's scopes under the File scope of its file.
    pub(crate) fn add(&mut self, mut procedure: ProcScopes) {
        for s in &mut procedure.scopes {
            if let ScopeKind::Alien { call_file, .. } = &mut s.kind {
                *call_file = call_file.map(|f| self.file_id(f));
            }
            s.file = s.file.map(|f| self.file_id(f));
        }
        let file = procedure.scopes[0].file.unwrap_or(self.unknown_file);
        let parent = self.file_scope(file);
        let base = self.tree.append_arena(parent, procedure.scopes);
        self.tree.index_statements(
            (procedure.statements.into_iter()).map(|(s, e, i)| (s, e, ScopeId(base + i))),
        );
    }
}
