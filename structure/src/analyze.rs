//! Whole-module analysis: from an ELF file to a finished [`ScopeTree`].
//!
//! 1. Map the binary and find its DWARF (in the file, next to it via `.gnu_debuglink`, or under
//!    `/usr/lib/debug/.build-id/`, with its supplementary file: module `debuginfo`); read all
//!    units in parallel.
//! 2. Reconcile procedures from DWARF and from the symbol table (DWARF ranges are clipped where
//!    they run into another function's entry: the thesis's "lying liars", §4.3: [`crate::plan`]).
//! 3. In parallel, per procedure: decode, find loops, place statements, loops and inlined calls
//!    ([`crate::procedure`]), normalize ([`crate::normalize`]).
//! 4. Assemble module > file > procedure and index addresses.

use crate::aliens::SourceBounds;
use crate::analysis::{
    Analysis, Coverage, DebugSource, Heuristics, IrreducibleLoop, Options, Summary,
};
use crate::assemble::{Assembler, ProcScopes};
use crate::binary::{self, CodeSection, FunctionSymbol, LoadedFile};
use crate::debuginfo::{DebugFiles, DebugSections};
use crate::dwarf::{self, DwarfInfo, InlineCall, NO_FILE};
use crate::dwofiles::DwoFiles;
use crate::error::StructureError;
use crate::focus;
use crate::identity::BinaryIdentity;
use crate::imports;
use crate::landing::ExceptionTables;
use crate::loopnest::{self, LoopEnv};
use crate::noreturn::NoReturns;
use crate::normalize;
use crate::parts;
use crate::plan::{lacks_inline_records, plan_procedures, ProcPlan};
use crate::procedure;
use crate::ranges::normalize_ranges;
use crate::scope::{ScopeKind, ScopeTree};
use fxhash::FxHashMap;
use profiler::addr::Svma;
use rayon::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// Analyse, in the ELF file at `path`, only the procedures that contain one of `addresses`
/// (link-time addresses, any order, duplicates allowed). For those addresses, the tree's
/// [`ScopeTree::lookup`] and ancestors agree with [`analyze_file`]'s.
pub fn analyze_focused(
    path: &Path,
    addresses: &[Svma],
    options: &Options,
) -> Result<Analysis, StructureError> {
    analyze_focused_with(path, addresses, options, &Heuristics::default())
}

/// [`analyze_focused`] with chosen [`Heuristics`].
pub fn analyze_focused_with(
    path: &Path,
    addresses: &[Svma],
    options: &Options,
    heuristics: &Heuristics,
) -> Result<Analysis, StructureError> {
    analyze(path, options, heuristics, Some(addresses))
}

/// Analyse `path` in a pool of `options.threads` workers: the whole module, or with `focus`
/// only the procedures holding those addresses.
pub(crate) fn analyze(
    path: &Path,
    options: &Options,
    heuristics: &Heuristics,
    focus: Option<&[Svma]>,
) -> Result<Analysis, StructureError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|e| StructureError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    fix_mmap_threshold();
    pool.install(|| analyze_in_pool(path, options, heuristics, focus))
}

/// Keep glibc's allocator from raising the size above which it maps blocks of their own. It
/// raises it to the size of each such block freed (up to 32 MB): once the DWARF sections are
/// freed, the growing scope tree and the analyses' large vectors would come from the heap
/// arenas, where a vector that grows is copied (old and new held at once) and freed memory
/// stays with the process. Fixed at 1 MiB, large blocks grow in place by remapping and go
/// back to the kernel when freed (libpython: 124 -> 102 MB at the peak).
fn fix_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt only sets a parameter of the allocator's own; called once, before the
        // analysis allocates.
        ONCE.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        });
    }
}

fn analyze_in_pool(
    path: &Path,
    options: &Options,
    heuristics: &Heuristics,
    focus: Option<&[Svma]>,
) -> Result<Analysis, StructureError> {
    let start = Instant::now();
    let (loaded, debug_part) = parts::open(path, DebugFiles::reads_section)?;
    let file = loaded.parse()?;
    let code = binary::code_sections(&file);
    let identity = BinaryIdentity::of(&file, || debug_part.file_checksum(loaded.bytes()));
    let own_dwarf = debug_part.parse()?;
    let Debug {
        symbols,
        mut plans,
        selected,
        info,
        coverage,
        mut skipped,
        source: debug_source,
    } = read_debug(
        path,
        &file,
        own_dwarf.as_ref().unwrap_or(&file),
        &code,
        heuristics,
        focus,
    )?;
    // The DWARF sections are not read again: what the procedures' analyses need of them is in
    // `info` and `plans`.
    drop(own_dwarf);
    drop(debug_part);

    let data = binary::data_sections(&file);
    let imports = imports::imports(&file);
    let exceptions = ExceptionTables::read(&file);
    let noreturn = NoReturns::new(&symbols, &imports, &code, &exceptions, &data);
    let link_names: FxHashMap<u64, &str> = symbols
        .iter()
        .map(|s| (s.address, s.link_name.as_str()))
        .chain(imports.names.iter().map(|(&a, n)| (a, n.as_str())))
        .collect();
    let env = LoopEnv {
        exceptions: &exceptions,
        code: &code,
        data: &data,
        noreturn: &noreturn,
        link_names: &link_names,
    };
    let bounds = heuristics
        .line_map_aliens
        .then(|| SourceBounds::new(&plans, &symbols, &info));
    let module_name = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let module_name = module_name.to_string_lossy();
    let build = |plans: &[ProcPlan], i: usize, calls: &[InlineCall]| {
        let inferred = bounds
            .as_ref()
            .filter(|_| lacks_inline_records(&plans[i], &info))
            .map(|b| b.infer(plans, i, &info));
        build_procedure(
            &plans[i],
            calls,
            inferred,
            &info,
            &env,
            options,
            &module_name,
        )
    };
    let mut assembler = Assembler::new(&module_name, &info);
    assembler
        .tree
        .set_shared_library(binary::is_shared_library(&file));
    let mut totals = Totals::default();
    // The procedures are built in parallel a chunk at a time, and each chunk is put into the
    // tree, in order, while the next is built: what a procedure's analysis made lives until it
    // is in the tree, not until the whole module is built (node: 300 -> 200 MB at the peak),
    // and no worker waits while the tree grows.
    let mut pending = Vec::new();
    for chunk in selected.chunks(BUILD_CHUNK) {
        // A procedure's inlined calls are freed once it is built, not at the end.
        let calls: Vec<Vec<InlineCall>> = (chunk.iter())
            .map(|&i| std::mem::take(&mut plans[i].inlines))
            .collect();
        let previous = std::mem::take(&mut pending);
        (pending, ()) = rayon::join(
            || {
                (chunk.par_iter().zip(&calls))
                    .map(|(&i, calls)| build(&plans, i, calls))
                    .collect()
            },
            || totals.assemble(&mut assembler, previous),
        );
        drop(calls);
        return_free_pages();
    }
    totals.assemble(&mut assembler, pending);
    let Totals {
        skipped: notes,
        unresolved_jumps,
        duplicated_tests,
        split_entries,
        inferred_inlined,
        irreducible_loops,
    } = totals;
    skipped.extend(notes);
    let mut tree = assembler.tree;
    tree.set_identity(identity);
    let (units, unitless_programs) = (info.units, info.unitless_programs);
    // The line table and the plans with their inlined calls are freed on a thread of their own
    // too.
    drop(bounds);
    // Where no thread can be started, the closure is dropped here, with what it holds.
    let _ = std::thread::Builder::new().spawn(move || drop((plans, info)));
    tree.finish_index();
    let mut summary = summarize(&tree, units, debug_source, skipped, start.elapsed());
    summary.inferred_inlined = inferred_inlined;
    summary.unitless_line_programs = unitless_programs;
    summary.irreducible_loops = irreducible_loops;
    summary.unresolved_jumps = unresolved_jumps;
    summary.duplicated_tests = duplicated_tests;
    summary.split_entries = split_entries;
    Ok(Analysis {
        tree,
        summary,
        coverage,
    })
}

/// What the symbols and the debug information give the analysis.
struct Debug {
    symbols: Vec<FunctionSymbol>,
    /// The procedures, planned.
    plans: Vec<ProcPlan>,
    /// Which of `plans` to build.
    selected: Vec<usize>,
    info: DwarfInfo,
    coverage: Coverage,
    /// What was skipped, one line each.
    skipped: Vec<String>,
    source: DebugSource,
}

/// Read the symbols of `file` (the binary at `path`) and its debug information (from
/// `embedded`, its debug sections, or from the files they name), and plan the procedures to
/// build: all of them, or with `focus` those holding these addresses. The debug files opened
/// here are closed on return.
fn read_debug(
    path: &Path,
    file: &object::File<'_>,
    embedded: &object::File<'_>,
    code: &[CodeSection<'_>],
    heuristics: &Heuristics,
    focus: Option<&[Svma]>,
) -> Result<Debug, StructureError> {
    let in_code = |a: u64| code.iter().any(|c| c.contains(a));
    let debug_files = DebugFiles::open(path, file, embedded);
    let separate = debug_files.separate_file()?;
    let symbols = binary::function_symbols(file, separate.as_ref(), code);
    let mut skipped = debug_files.notes.clone();
    // A focus on no address needs no debug information: nothing will be looked up.
    let sections = if focus.is_none_or(|a| !a.is_empty()) {
        debug_files.sections(embedded)?
    } else {
        DebugSections::none()
    };
    let dwarf = sections.dwarf();
    let dwo_files = DwoFiles::find(path, &dwarf);
    let dwo_sections = dwo_files.sections(&dwarf);
    skipped.extend(sections.notes.iter().chain(&dwo_sections.notes).cloned());
    let split = dwo_sections.split();
    let nothing = || StructureError::NothingToAnalyse {
        path: path.to_path_buf(),
    };
    let (plans, selected, info, coverage) = match focus {
        None => {
            let mut info = dwarf::read_dwarf(&dwarf, &split, &in_code);
            if info.procs.is_empty() && symbols.is_empty() {
                return Err(nothing());
            }
            let plans = plan_procedures(std::mem::take(&mut info.procs), &symbols, code);
            let selected = (0..plans.len()).collect();
            (plans, selected, info, Coverage::Module)
        }
        Some(addresses) => {
            let mut units = dwarf::UnitsOnDemand::new(&dwarf, &split, &in_code);
            if units.is_empty() && symbols.is_empty() && !addresses.is_empty() {
                return Err(nothing());
            }
            let s = focus::select(&mut units, &symbols, code, addresses, heuristics, &in_code);
            (s.plans, s.selected, s.info, s.coverage)
        }
    };
    skipped.extend(info.skipped.iter().cloned());
    Ok(Debug {
        symbols,
        plans,
        selected,
        info,
        coverage,
        skipped,
        source: debug_files.source.clone(),
    })
}

fn summarize(
    tree: &ScopeTree,
    units: usize,
    debug_source: DebugSource,
    skipped: Vec<String>,
    elapsed: Duration,
) -> Summary {
    // One pass over the scopes (a pass a kind read libpython's 38 MB of scopes four times).
    let (mut procedures, mut inlined, mut loops, mut statements) = (0, 0, 0, 0);
    for id in tree.ids() {
        match tree.get(id).kind {
            ScopeKind::Procedure => procedures += 1,
            ScopeKind::Alien { .. } => inlined += 1,
            ScopeKind::Loop => loops += 1,
            ScopeKind::Statement => statements += 1,
            ScopeKind::Module | ScopeKind::File => {}
        }
    }
    Summary {
        procedures,
        inlined,
        inferred_inlined: 0,
        loops,
        irreducible_loops: Vec::new(),
        unresolved_jumps: 0,
        duplicated_tests: 0,
        split_entries: 0,
        statements,
        units,
        unitless_line_programs: 0,
        debug_source,
        skipped,
        elapsed,
    }
}

/// The addresses of all line-table rows of `path`'s debug information (with a line), sorted:
/// the population from which agreement checks draw addresses.
pub fn line_table_addresses(path: &Path) -> Result<Vec<Svma>, StructureError> {
    let loaded = LoadedFile::open(path)?;
    let file = loaded.parse()?;
    let code = binary::code_sections(&file);
    let in_code = |a: u64| code.iter().any(|c| c.contains(a));
    let debug_files = DebugFiles::open(path, &file, &file);
    let sections = debug_files.sections(&file)?;
    let dwarf = sections.dwarf();
    let dwo_files = DwoFiles::find(path, &dwarf);
    let dwo_sections = dwo_files.sections(&dwarf);
    let info = dwarf::read_dwarf(&dwarf, &dwo_sections.split(), &in_code);
    Ok(info
        .rows
        .iter()
        .filter(|r| r.file != NO_FILE && r.line > 0)
        .map(|r| Svma(r.address))
        .collect())
}

/// One procedure, built.
struct Built {
    /// Its scopes.
    scopes: ProcScopes,
    /// What was skipped, if anything.
    note: Option<String>,
    /// Indirect jumps with unknown targets.
    unresolved_jumps: usize,
    /// Loops entered through copies of one test.
    duplicated_tests: usize,
    /// Loops entered also at short blocks that lead to their header.
    split_entries: usize,
}

/// What the built procedures say besides their scopes, summed in the order they are built.
#[derive(Default)]
struct Totals {
    skipped: Vec<String>,
    unresolved_jumps: usize,
    duplicated_tests: usize,
    split_entries: usize,
    inferred_inlined: usize,
    irreducible_loops: Vec<IrreducibleLoop>,
}

impl Totals {
    /// Put `built` into the tree, in order, and count what it says.
    fn assemble(&mut self, assembler: &mut Assembler<'_>, built: Vec<Built>) {
        // Exactly what the chunk adds (its scopes, and at most one new File scope for each
        // procedure): a tree grown by doubling holds up to twice its scopes at the peak
        // (libpython: 60 MB of capacity for 38 MB of scopes).
        let adds = built.iter().map(|b| b.scopes.len() + 1).sum::<usize>();
        assembler.tree.reserve(adds);
        (assembler.tree).reserve_index(built.iter().map(|b| b.scopes.intervals()).sum());
        for mut b in built {
            self.skipped.extend(b.note.take());
            self.unresolved_jumps += b.unresolved_jumps;
            self.duplicated_tests += b.duplicated_tests;
            self.split_entries += b.split_entries;
            self.inferred_inlined += b.scopes.inferred;
            self.irreducible_loops.append(&mut b.scopes.irreducible);
            assembler.add(b.scopes);
        }
    }
}

/// Procedures built in parallel before they are put into the tree (see `analyze_in_pool`): what
/// they made is held at once (ripgrep's peak: 165 MB with 1,024, 159 MB with 512, in as much
/// time).
const BUILD_CHUNK: usize = 512;

/// Build one procedure's local tree, with its inlined calls `calls` (DWARF's), or `inferred`
/// ones instead if given.
fn build_procedure(
    plan: &ProcPlan,
    calls: &[InlineCall],
    inferred: Option<Vec<InlineCall>>,
    info: &DwarfInfo,
    env: &LoopEnv<'_, '_>,
    options: &Options,
    module: &str,
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
    let calls = inferred.as_deref().unwrap_or(calls);
    let mut local = procedure::build_local_tree(&plan.ranges, calls, info, &nest, default_file);
    normalize::normalize(&mut local);
    // Each statement's ranges become its scope's as they are (most statements hold one range):
    // trimmed here, in parallel, rather than kept at the capacity they grew to (libpython:
    // 19 MB of ranges in the tree at the peak, 4 MB trimmed).
    for node in &mut local.nodes {
        for ranges in node.stmts.values_mut() {
            *ranges = normalize_ranges(std::mem::take(ranges));
            ranges.shrink_to_fit();
        }
    }
    let scopes = ProcScopes::new(plan, local, calls, inferred.is_some(), info, module);
    Built {
        scopes,
        note,
        unresolved_jumps: nest.unresolved_jumps,
        duplicated_tests: nest.duplicated_tests,
        split_entries: nest.split_entries,
    }
}

/// Give the kernel back the pages that freed memory leaves in the allocator's arenas. The
/// procedures' analyses are made and freed on every worker thread, each allocating from an arena
/// of its own, among scopes that stay: without this, node's peak is 259 MB instead of 240 (for
/// about 12 ms over its 77 chunks).
fn return_free_pages() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas; it touches
    // no memory of ours.
    unsafe {
        libc::malloc_trim(0);
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
