//! Whole-module analysis: from an ELF file to a finished [`ScopeTree`].
//!
//! 1. Map the binary and find its DWARF (in the file, next to it via `.gnu_debuglink`, or under
//!    `/usr/lib/debug/.build-id/`, with its supplementary file: module `debuginfo`); read all
//!    units in parallel.
//! 2. Reconcile procedures from DWARF and from the symbol table (DWARF ranges are clipped where
//!    they run into another function's entry: the thesis's "lying liars", §4.3).
//! 3. In parallel, per procedure: decode, find loops, place statements, loops and inlined calls
//!    ([`crate::procedure`]), normalize ([`crate::normalize`]).
//! 4. Assemble module > file > procedure and index addresses.

use crate::aliens::{clone_base, SourceBounds};
use crate::binary::{self, CodeSection, FunctionSymbol, MappedFile};
use crate::debuginfo::{DebugFiles, DebugSections};
use crate::demangle::demangle;
use crate::dwarf::{self, DwarfInfo, InlineCall, NO_FILE};
use crate::dwofiles::DwoFiles;
use crate::error::StructureError;
use crate::focus::{self, Coverage};
use crate::loopnest::{self, LoopEnv};
use crate::procedure::{self, LocalTree, Step};
use crate::scope::{normalize_ranges, FileId, Scope, ScopeId, ScopeKind, ScopeTree};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to analyse.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Whether to decode code and recover loops (off: procedures, inlining and lines only).
    pub loops: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            loops: true,
        }
    }
}

/// Heuristics of the analysis that a user rarely changes. Kept apart from [`Options`] so that
/// new ones do not break callers that build `Options` with a struct literal.
#[derive(Clone, Debug)]
pub struct Heuristics {
    /// Infer inlined code from procedure bounds and the line map where DWARF has no inline
    /// records for it ([`crate::aliens`]); off: such code stays in its host procedure.
    pub line_map_aliens: bool,
}

impl Default for Heuristics {
    fn default() -> Self {
        Heuristics {
            line_map_aliens: true,
        }
    }
}

/// Where the debug information came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DebugSource {
    /// The binary itself.
    Embedded,
    /// A separate debug file.
    Separate(PathBuf),
    /// None found: symbols only.
    #[default]
    None,
}

/// Counts and notes about one analysis, for the user (the default: nothing found).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Procedures recovered.
    pub procedures: usize,
    /// Inlined-call scopes in the tree.
    pub inlined: usize,
    /// Of those, the ones inferred from the line map (no inline records in DWARF).
    pub inferred_inlined: usize,
    /// Loops in the tree.
    pub loops: usize,
    /// The loops among them that are irreducible regions (several entries), kept in the tree
    /// as loops headed by their first entry.
    pub irreducible_loops: Vec<IrreducibleLoop>,
    /// Statements in the tree.
    pub statements: usize,
    /// DWARF compilation units read.
    pub units: usize,
    /// Line programs read without a unit (`.debug_info` stripped, or the unit unreadable).
    pub unitless_line_programs: usize,
    /// Where the debug information came from.
    pub debug_source: DebugSource,
    /// Things skipped (corrupt units, undecodable code), one line each.
    pub skipped: Vec<String>,
    /// Wall time of the analysis.
    pub elapsed: Duration,
}

/// An irreducible loop (a cycle with several entries), as reported in the [`Summary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrreducibleLoop {
    /// The procedure holding it.
    pub procedure: String,
    /// Its begin line's file ("" if unknown) and line (0 if unknown).
    pub file: String,
    /// Its begin line.
    pub line: u32,
    /// Addresses where control enters it, header first (at least two).
    pub entries: Vec<u64>,
}

/// The result of analysing one binary.
pub struct Analysis {
    /// The module's structure, finished (lookups work).
    pub tree: ScopeTree,
    /// What was found and skipped.
    pub summary: Summary,
    /// The addresses for which `tree` answers as a whole-module analysis would: everything
    /// for [`analyze_file`], the analysed procedures and the asked addresses for
    /// [`crate::focus::analyze_focused`].
    pub coverage: Coverage,
}

/// Analyse the ELF binary or shared library at `path`.
pub fn analyze_file(path: &Path, options: &Options) -> Result<Analysis, StructureError> {
    analyze_file_with(path, options, &Heuristics::default())
}

/// [`analyze_file`] with chosen [`Heuristics`].
pub fn analyze_file_with(
    path: &Path,
    options: &Options,
    heuristics: &Heuristics,
) -> Result<Analysis, StructureError> {
    analyze(path, options, heuristics, None)
}

/// Analyse `path` in a pool of `options.threads` workers: the whole module, or with `focus`
/// only the procedures holding those addresses.
pub(crate) fn analyze(
    path: &Path,
    options: &Options,
    heuristics: &Heuristics,
    focus: Option<&[u64]>,
) -> Result<Analysis, StructureError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|e| StructureError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    pool.install(|| analyze_in_pool(path, options, heuristics, focus))
}

fn analyze_in_pool(
    path: &Path,
    options: &Options,
    heuristics: &Heuristics,
    focus: Option<&[u64]>,
) -> Result<Analysis, StructureError> {
    let start = Instant::now();
    let mapped = MappedFile::open(path)?;
    let file = mapped.parse()?;
    let code = binary::code_sections(&file);
    let in_code = |a: u64| code.iter().any(|c| c.contains(a));

    let debug_files = DebugFiles::open(path, &file);
    let separate = debug_files.separate_file()?;
    let symbols = binary::function_symbols(&file, separate.as_ref(), &code);
    let mut skipped = debug_files.notes.clone();
    // A focus on no address needs no debug information: nothing will be looked up.
    let sections = if focus.is_none_or(|a| !a.is_empty()) {
        debug_files.sections(&file)?
    } else {
        DebugSections::none()
    };
    let dwarf = sections.dwarf();
    let dwo_files = DwoFiles::open(path, &dwarf);
    skipped.extend(dwo_files.notes.iter().cloned());
    let dwo_sections = dwo_files.sections();
    skipped.extend(sections.notes.iter().chain(&dwo_sections.notes).cloned());
    let split = dwo_sections.split();
    let debug_source = debug_files.source.clone();

    let (plans, selected, info, coverage) = match focus {
        None => {
            let mut info = dwarf::read_dwarf(&dwarf, &split, &in_code);
            if info.procs.is_empty() && symbols.is_empty() {
                return Err(StructureError::NothingToAnalyse {
                    path: path.to_path_buf(),
                });
            }
            let plans = plan_procedures(std::mem::take(&mut info.procs), &symbols, &code);
            let selected = (0..plans.len()).collect();
            (plans, selected, info, Coverage::Module)
        }
        Some(addresses) => {
            let mut units = dwarf::UnitsOnDemand::new(&dwarf, &split, &in_code);
            if units.is_empty() && symbols.is_empty() && !addresses.is_empty() {
                return Err(StructureError::NothingToAnalyse {
                    path: path.to_path_buf(),
                });
            }
            let s = focus::select(&mut units, &symbols, &code, addresses, heuristics, &in_code);
            (s.plans, s.selected, s.info, s.coverage)
        }
    };
    skipped.extend(info.skipped.iter().cloned());

    let data = binary::data_sections(&file);
    let noreturn: HashSet<u64> = symbols
        .iter()
        .filter(|s| loopnest::NORETURN_NAMES.contains(&s.name.as_str()))
        .map(|s| s.address)
        .collect();
    let link_names: HashMap<u64, &str> = symbols
        .iter()
        .map(|s| (s.address, s.link_name.as_str()))
        .collect();
    let env = LoopEnv {
        code: &code,
        data: &data,
        noreturn: &noreturn,
        link_names: &link_names,
    };
    let bounds = heuristics
        .line_map_aliens
        .then(|| SourceBounds::new(&plans, &symbols, &info));
    let built: Vec<Built> = selected
        .par_iter()
        .map(|&i| {
            let inferred = bounds
                .as_ref()
                .filter(|_| lacks_inline_records(&plans[i], &info))
                .map(|b| b.infer(&plans, i, &info));
            build_procedure(&plans[i], inferred, &info, &env, options)
        })
        .collect();

    let module_name = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut assembler = Assembler::new(&module_name.to_string_lossy(), &info);
    assembler
        .tree
        .set_shared_library(binary::is_shared_library(&file));
    for (&i, b) in selected.iter().zip(&built) {
        assembler.add_procedure(&plans[i], b);
        skipped.extend(b.note.clone());
    }
    let inferred_inlined = assembler.inferred;
    let irreducible_loops = std::mem::take(&mut assembler.irreducible);
    let mut tree = assembler.tree;
    tree.finish();
    let mut summary = summarize(&tree, info.units, debug_source, skipped, start.elapsed());
    summary.inferred_inlined = inferred_inlined;
    summary.unitless_line_programs = info.unitless_programs;
    summary.irreducible_loops = irreducible_loops;
    Ok(Analysis {
        tree,
        summary,
        coverage,
    })
}

/// Whether a procedure's inlined code must be inferred: its DWARF unit has no inline records,
/// or it has no DWARF descriptor and its lines come from a line program without a unit.
pub(crate) fn lacks_inline_records(plan: &ProcPlan, info: &DwarfInfo) -> bool {
    if plan.from_dwarf {
        !plan.unit_has_inlines
    } else {
        info.is_unitless(plan.entry)
    }
}

fn summarize(
    tree: &ScopeTree,
    units: usize,
    debug_source: DebugSource,
    skipped: Vec<String>,
    elapsed: Duration,
) -> Summary {
    let count = |f: &dyn Fn(&Scope) -> bool| tree.ids().filter(|&id| f(tree.get(id))).count();
    Summary {
        procedures: count(&|s| s.kind == ScopeKind::Procedure),
        inlined: count(&|s| s.is_alien()),
        inferred_inlined: 0,
        loops: count(&|s| s.kind == ScopeKind::Loop),
        irreducible_loops: Vec::new(),
        statements: count(&|s| s.kind == ScopeKind::Statement),
        units,
        unitless_line_programs: 0,
        debug_source,
        skipped,
        elapsed,
    }
}

/// The addresses of all line-table rows of `path`'s debug information (with a line), sorted:
/// the population from which agreement checks draw addresses.
pub fn line_table_addresses(path: &Path) -> Result<Vec<u64>, StructureError> {
    let mapped = MappedFile::open(path)?;
    let file = mapped.parse()?;
    let code = binary::code_sections(&file);
    let in_code = |a: u64| code.iter().any(|c| c.contains(a));
    let debug_files = DebugFiles::open(path, &file);
    let sections = debug_files.sections(&file)?;
    let dwarf = sections.dwarf();
    let dwo_files = DwoFiles::open(path, &dwarf);
    let dwo_sections = dwo_files.sections();
    let info = dwarf::read_dwarf(&dwarf, &dwo_sections.split(), &in_code);
    Ok(info
        .rows
        .iter()
        .filter(|r| r.file != NO_FILE && r.line > 0)
        .map(|r| r.address)
        .collect())
}

/// One procedure to build.
#[derive(Clone, Debug)]
pub struct ProcPlan {
    /// Code ranges (sorted, disjoint).
    pub ranges: Vec<Range<u64>>,
    /// Entry address.
    pub entry: u64,
    /// Readable name.
    pub name: String,
    /// Link name if different.
    pub link_name: Option<String>,
    /// Declaration file (index in the DWARF file table).
    pub file: Option<u32>,
    /// Declaration line.
    pub line: u32,
    /// Inlined calls from DWARF.
    pub inlines: Vec<InlineCall>,
    /// Whether the unit had inline records (if not, the alien fallback applies).
    pub unit_has_inlines: bool,
    /// Whether it came from DWARF (else from the symbol table only).
    pub from_dwarf: bool,
    /// The functions its DWARF unit declares never to return.
    pub noreturn_callees: Arc<dwarf::NoReturn>,
}

/// The mangled link name of the function symbol at `entry`, without a clone suffix
/// (`.isra.0`, `.cold`, ...). GCC gives no `DW_AT_linkage_name` to some template instances (those
/// with a lambda among their arguments); the symbol table names them in full, as binutils reads
/// them.
fn mangled_symbol_at(symbols: &[FunctionSymbol], entry: u64) -> Option<&str> {
    let s = symbols.get(symbols.partition_point(|s| s.address < entry))?;
    let link = clone_base(&s.link_name).unwrap_or(&s.link_name);
    (s.address == entry && (link.starts_with("_Z") || link.starts_with("_R"))).then_some(link)
}

/// Reconcile DWARF procedures with function symbols into disjoint procedures.
pub(crate) fn plan_procedures(
    mut procs: Vec<dwarf::DwarfProc>,
    symbols: &[FunctionSymbol],
    code: &[CodeSection<'_>],
) -> Vec<ProcPlan> {
    procs.sort_by_key(|p| p.entry);
    procs.dedup_by_key(|p| p.entry);
    let dwarf_entries: std::collections::BTreeSet<u64> = procs.iter().map(|p| p.entry).collect();
    let by_link_name: HashMap<&str, u64> = symbols
        .iter()
        .map(|s| (s.link_name.as_str(), s.address))
        .collect();
    let mut claimed: BTreeMap<u64, u64> = BTreeMap::new();
    let mut plans = Vec::new();
    for p in procs {
        let mut ranges = Vec::new();
        for r in normalize_ranges(p.ranges.clone()) {
            let end = symbols
                .iter()
                .skip(symbols.partition_point(|s| s.address <= r.start))
                .take_while(|s| s.address < r.end)
                .find(|s| dwarf_entries.contains(&s.address) && s.address != p.entry)
                .map_or(r.end, |s| s.address);
            ranges.extend(unclaimed(&claimed, r.start..end));
        }
        if ranges.is_empty() {
            continue;
        }
        let entry = by_link_name
            .get(p.link_name.as_deref().unwrap_or(&p.name))
            .copied()
            .filter(|a| ranges.iter().any(|r| r.contains(a)))
            .unwrap_or(p.entry);
        let entry = if ranges.iter().any(|r| r.contains(&entry)) {
            entry
        } else {
            ranges[0].start
        };
        for r in &ranges {
            claimed.insert(r.start, r.end);
        }
        let (name, link_name) = match (p.link_name, mangled_symbol_at(symbols, p.entry)) {
            (None, Some(link)) => (demangle(link), Some(link.to_string())),
            (link_name, _) => (p.name, link_name),
        };
        plans.push(ProcPlan {
            ranges,
            entry,
            name,
            link_name,
            file: p.file,
            line: p.line,
            inlines: p.inlines,
            unit_has_inlines: p.unit_has_inlines,
            from_dwarf: true,
            noreturn_callees: p.noreturn_callees,
        });
    }
    for (i, s) in symbols.iter().enumerate() {
        if is_claimed(&claimed, s.address) {
            continue;
        }
        let ranges = unclaimed(&claimed, symbol_extent(symbols, i, code));
        let Some(first) = ranges.first() else {
            continue;
        };
        if first.start != s.address {
            continue;
        }
        for r in &ranges {
            claimed.insert(r.start, r.end);
        }
        plans.push(ProcPlan {
            ranges,
            entry: s.address,
            link_name: (s.link_name != s.name).then(|| s.link_name.clone()),
            name: s.name.clone(),
            file: None,
            line: 0,
            inlines: Vec::new(),
            unit_has_inlines: false,
            from_dwarf: false,
            noreturn_callees: Arc::default(),
        });
    }
    plans.sort_by_key(|p| p.entry);
    plans
}

/// The code that symbol `symbols[i]` names: its size if known, else up to the next symbol,
/// never past its section.
pub(crate) fn symbol_extent(
    symbols: &[FunctionSymbol],
    i: usize,
    code: &[CodeSection<'_>],
) -> Range<u64> {
    let s = &symbols[i];
    let section_end = code
        .iter()
        .find(|c| c.contains(s.address))
        .map_or(s.address, |c| c.address + c.bytes.len() as u64);
    let end = if s.size > 0 {
        s.address.saturating_add(s.size).min(section_end)
    } else {
        symbols
            .get(i + 1)
            .map_or(section_end, |n| n.address.min(section_end))
    };
    s.address..end
}

fn is_claimed(claimed: &BTreeMap<u64, u64>, addr: u64) -> bool {
    claimed
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, &e)| addr < e)
}

/// The parts of `r` not covered by `claimed`.
fn unclaimed(claimed: &BTreeMap<u64, u64>, r: Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut cursor = r.start;
    let from = claimed
        .range(..=r.start)
        .next_back()
        .map_or(r.start, |(&s, _)| s);
    for (&s, &e) in claimed.range(from..r.end) {
        if e <= cursor {
            continue;
        }
        if s > cursor {
            out.push(cursor..s.min(r.end));
        }
        cursor = cursor.max(e);
    }
    if cursor < r.end {
        out.push(cursor..r.end);
    }
    out
}

/// One procedure, built.
struct Built {
    local: LocalTree,
    /// Inlined calls inferred from the line map, which replace the plan's (empty) ones.
    inferred: Option<Vec<InlineCall>>,
    /// What was skipped, if anything.
    note: Option<String>,
}

impl Built {
    /// The inlined calls that the local tree's alien steps index.
    fn calls<'a>(&'a self, plan: &'a ProcPlan) -> &'a [InlineCall] {
        self.inferred.as_deref().unwrap_or(&plan.inlines)
    }
}

/// Build one procedure's local tree, with `inferred` inlined calls instead of the plan's if
/// given.
fn build_procedure(
    plan: &ProcPlan,
    inferred: Option<Vec<InlineCall>>,
    info: &DwarfInfo,
    env: &LoopEnv<'_, '_>,
    options: &Options,
) -> Built {
    let (nest, note) = if options.loops {
        loopnest::find_loops(plan, info, env)
    } else {
        (Default::default(), None)
    };
    let default_file = plan
        .file
        .or_else(|| first_file(plan, info))
        .unwrap_or(NO_FILE);
    let calls = inferred.as_deref().unwrap_or(&plan.inlines);
    let local = procedure::build_local_tree(&plan.ranges, calls, info, &nest, default_file);
    Built {
        local,
        inferred,
        note,
    }
}

/// File of the first line row inside the procedure.
fn first_file(plan: &ProcPlan, info: &DwarfInfo) -> Option<u32> {
    plan.ranges.iter().find_map(|r| {
        let i = info.first_row_from(r.start);
        info.rows[i..]
            .iter()
            .take_while(|row| row.address < r.end)
            .find(|row| row.file != NO_FILE)
            .map(|row| row.file)
    })
}

/// Puts procedures' local trees into the module tree under their files.
struct Assembler<'a> {
    tree: ScopeTree,
    info: &'a DwarfInfo,
    /// DWARF file index -> tree file id.
    files: HashMap<u32, FileId>,
    /// Tree file id -> File scope.
    file_scopes: HashMap<FileId, ScopeId>,
    unknown_file: FileId,
    /// Alien scopes added from inferred inlined calls.
    inferred: usize,
    /// Irreducible loops added.
    irreducible: Vec<IrreducibleLoop>,
}

impl<'a> Assembler<'a> {
    fn new(module: &str, info: &'a DwarfInfo) -> Self {
        let mut tree = ScopeTree::new(module);
        let base = crate::writer::module_basename(module);
        let unknown_file = tree.intern_file(&format!("[{base}]"));
        Assembler {
            tree,
            info,
            files: HashMap::new(),
            file_scopes: HashMap::new(),
            unknown_file,
            inferred: 0,
            irreducible: Vec::new(),
        }
    }

    fn file_id(&mut self, f: Option<u32>) -> FileId {
        match f {
            Some(f) if f != NO_FILE && !self.info.files[f as usize].is_empty() => *self
                .files
                .entry(f)
                .or_insert_with(|| self.tree.intern_file(&self.info.files[f as usize])),
            _ => self.unknown_file,
        }
    }

    fn file_scope(&mut self, file: FileId) -> ScopeId {
        if let Some(&s) = self.file_scopes.get(&file) {
            return s;
        }
        let mut scope = Scope::new(ScopeKind::File);
        scope.name = self.tree.file_name(file).to_string();
        scope.file = Some(file);
        let id = self.tree.add(self.tree.root(), scope);
        self.file_scopes.insert(file, id);
        id
    }

    fn add_procedure(&mut self, plan: &ProcPlan, built: &Built) {
        let first_row = first_line(plan, self.info);
        let file = self.file_id(plan.file.or(first_row.map(|r| r.0)));
        let parent = self.file_scope(file);
        let mut scope = Scope::new(ScopeKind::Procedure);
        scope.name = plan.name.clone();
        scope.link_name = plan.link_name.clone();
        scope.file = Some(file);
        scope.line = if plan.line > 0 {
            plan.line
        } else {
            first_row.map_or(0, |r| r.1)
        };
        scope.entry = Some(plan.entry);
        let id = self.tree.add(parent, scope);
        let calls = built.calls(plan);
        let before = self.tree.len();
        self.add_children(&plan.name, calls, &built.local, 0, id);
        if built.inferred.is_some() {
            self.inferred += (before..self.tree.len())
                .filter(|&i| self.tree.get(ScopeId(i as u32)).is_alien())
                .count();
        }
    }

    fn add_children(
        &mut self,
        procedure: &str,
        calls: &[InlineCall],
        local: &LocalTree,
        node: usize,
        parent: ScopeId,
    ) {
        let n = &local.nodes[node];
        for (&(file, line), ranges) in &n.stmts {
            let mut s = Scope::new(ScopeKind::Statement);
            s.file = Some(self.file_id(Some(file)));
            s.line = line;
            s.ranges = normalize_ranges(ranges.clone());
            self.tree.add(parent, s);
        }
        let mut children: Vec<(u64, usize)> = n
            .children
            .iter()
            .filter(|&&c| !local.nodes[c].dead)
            .map(|&c| (lowest_address(local, c), c))
            .collect();
        children.sort_unstable();
        for (_, c) in children {
            let scope = match local.nodes[c].step {
                Some(Step::Alien(i)) => self.alien_scope(&calls[i as usize]),
                Some(Step::Loop(l)) => {
                    let (file, line) = local.loop_lines[l];
                    let mut s = Scope::new(ScopeKind::Loop);
                    s.file = Some(self.file_id(file));
                    s.line = line;
                    s.entry = local.loop_headers.get(l).copied();
                    let entries = &local.loop_entries[l];
                    if entries.len() > 1 {
                        self.irreducible.push(IrreducibleLoop {
                            procedure: procedure.to_string(),
                            file: s.file.map_or("", |f| self.tree.file_name(f)).to_string(),
                            line,
                            entries: entries.clone(),
                        });
                    }
                    s
                }
                None => continue,
            };
            let id = self.tree.add(parent, scope);
            self.add_children(procedure, calls, local, c, id);
        }
    }

    fn alien_scope(&mut self, call: &InlineCall) -> Scope {
        let call_file = call
            .call_file
            .filter(|&f| f != NO_FILE)
            .map(|f| self.file_id(Some(f)));
        let mut s = Scope::new(ScopeKind::Alien {
            call_file,
            call_line: call.call_line,
        });
        s.name = call.name.clone();
        s.link_name = call.link_name.clone();
        s.file = Some(self.file_id(call.file));
        s.line = call.line;
        s
    }
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

/// Lowest address of any statement at or below node `n`.
fn lowest_address(local: &LocalTree, n: usize) -> u64 {
    let node = &local.nodes[n];
    let own = node
        .stmts
        .values()
        .flatten()
        .map(|r| r.start)
        .min()
        .unwrap_or(u64::MAX);
    node.children
        .iter()
        .filter(|&&c| !local.nodes[c].dead)
        .map(|&c| lowest_address(local, c))
        .fold(own, u64::min)
}
