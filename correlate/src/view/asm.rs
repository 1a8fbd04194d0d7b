//! One procedure's machine code with what each instruction's samples cost (`hpcview-rs --asm`):
//! the procedure's code decoded from its binary, grouped by the loops and inlined code its
//! structure recovers, each instruction with the costs the database kept for it
//! ([`crate::InstructionCosts`]), user and kernel mode apart, and its jumps named (a loop's
//! back edge, a jump out of the procedure).

use std::path::{Path, PathBuf};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction};
use object::{Object, ObjectSection};
use profiler::addr::Svma;
use serde::Serialize;
use structure::{ScopeId, ScopeKind, ScopeTree};

use crate::db::database::Database;
use crate::db::ids::DbModuleId;
use crate::db::instructions::InstructionCost;
use crate::db::node::NodeKind;
use crate::view::tree::leader_of;

/// A procedure's annotated machine code (`--json` writes it as it is).
#[derive(Debug, Serialize)]
pub struct AsmView {
    /// The procedure's name.
    pub procedure: String,
    /// The binary its code was read from.
    pub binary: PathBuf,
    /// The metrics' names and units, as in the database.
    pub metrics: Vec<(String, String)>,
    /// Each metric's total over the run (the base of the shares shown).
    pub run_totals: Vec<u64>,
    /// Per metric, the metric whose samples read it (an event group's member), if any: its
    /// counts land on the instructions of those samples.
    pub read_with: Vec<Option<String>>,
    /// The lines, in address order.
    pub lines: Vec<AsmLine>,
    /// Per metric, the user-mode costs of the procedure's own instructions: its exclusive cost.
    pub own: Vec<u64>,
    /// Per metric, the user-mode costs of the code inlined into it.
    pub inlined: Vec<u64>,
    /// Per metric, the kernel-mode costs whose user state was at one of its instructions.
    pub kernel: Vec<u64>,
    /// How many loops its code holds.
    pub loops: usize,
}

/// One line of [`AsmView`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AsmLine {
    /// The instructions below (until one at a smaller depth) are in this loop or inlined call.
    Scope {
        /// Nesting depth (0: the procedure's own code).
        depth: usize,
        /// `loop at FILE: LINE` or `[I] NAME (FILE: LINE)`.
        label: String,
    },
    /// One instruction.
    Instruction(AsmInstruction),
}

/// One instruction and its costs.
#[derive(Debug, Serialize)]
pub struct AsmInstruction {
    /// Nesting depth of its innermost loop or inlined call.
    pub depth: usize,
    /// Link-time address.
    pub address: u64,
    /// The instruction in AT&T syntax (as objdump and perf annotate write it).
    pub text: String,
    /// Its source line (`FILE: LINE`) where it differs from the instruction before it.
    pub line: Option<String>,
    /// Per metric, what its user-mode samples cost.
    pub costs: Vec<u64>,
    /// Per metric, what the kernel-mode samples whose user state was here cost.
    pub kernel: Vec<u64>,
    /// Where it jumps or calls, named: a loop's back edge, a jump out of the procedure, a
    /// procedure called.
    pub jump: Option<String>,
}

/// Why a procedure's code cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum AsmError {
    /// No procedure of the database has that name.
    #[error("no procedure named '{0}' in the database (--flat lists them)")]
    Unknown(String),
    /// Several procedures match.
    #[error("'{0}' names {1}: give one of them whole")]
    Ambiguous(String, String),
    /// The binary is not on this machine (nor in the measurement's bundle).
    #[error("{0}: the binary is not here (nor in a --bundle of the measurement)")]
    NoBinary(String),
    /// The binary could not be read or analysed.
    #[error("{0}: {1}")]
    Unreadable(String, String),
}

/// The procedure of `db` named `name` (exactly, else the one whose name holds it), decoded from
/// its binary (at the path measured, else in one of the bundle `stores`).
pub fn asm(db: &Database, name: &str, stores: &[PathBuf]) -> Result<AsmView, AsmError> {
    let (procedure, module) = find_procedure(db, name)?;
    ModuleCode::open(db, module, stores, Some(&procedure))?.listing(db, &procedure)
}

/// The binaries copied into the measurement of `db` (`hpcrun-rs --bundle`), beside its
/// profiles: where [`asm`] looks for a binary that is not at the path measured.
pub fn bundle_stores(db: &Database) -> Vec<PathBuf> {
    (db.profiles.iter())
        .flat_map(|p| profiler::bundle::stores_of(Path::new(p)))
        .collect()
}

/// Listings of more than this many lines (instructions and the loops and inlined calls around
/// them) are not embedded in a report.
const MAX_LISTED: usize = 20_000;

/// The listings of at most `limit` procedures whose instructions (their own and those inlined
/// into them, and the kernel below them) cost the most of the first metric, each at least
/// `min_share` of the run (the HTML report's machine-code pane), costliest first; a module
/// whose binary cannot be read here, and a listing of more than 20,000 lines, are left out.
pub fn hottest(db: &Database, limit: usize, min_share: f64) -> Vec<AsmView> {
    let Some(run) = db.metrics.first().map(|m| m.total.value as f64) else {
        return Vec::new();
    };
    let least = (run * min_share).max(1.0);
    let stores = bundle_stores(db);
    // Each module's costliest listings (no more than `limit`), made before the next module's
    // binary is read, so that one binary at a time is in memory.
    let mut listed: Vec<(u64, AsmView)> = Vec::new();
    for i in 0..db.modules.len() {
        let module = DbModuleId::from_index(i);
        let costs = db.instructions.in_module(module);
        let spent: u64 = costs.iter().map(first).sum();
        if (spent as f64) < least {
            continue;
        }
        let Ok(code) = ModuleCode::open(db, module, &stores, None) else {
            continue;
        };
        let mut candidates = Vec::new();
        for p in code.tree.procedures() {
            let cost = (code.tree.get(p).ranges.iter())
                .map(|r| in_range(costs, r).iter().map(first).sum::<u64>())
                .sum::<u64>();
            if cost as f64 >= least {
                candidates.push((cost, code.tree.get(p).name.clone(), p));
            }
        }
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let views = (candidates.into_iter())
            .filter_map(|(cost, _, scope)| Some((cost, code.listing_of(db, scope).ok()?)))
            .filter(|(_, v)| v.lines.len() <= MAX_LISTED)
            .take(limit);
        listed.extend(views);
    }
    listed.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1.procedure.cmp(&b.1.procedure))
    });
    listed.into_iter().take(limit).map(|(_, v)| v).collect()
}

/// The first metric's value at instruction `c`, in user and kernel mode.
fn first(c: &InstructionCost) -> u64 {
    let value = |costs: &[profiler::db::Cost]| costs.first().map_or(0, |c| c.value);
    value(&c.costs) + value(&c.kernel)
}

/// The instruction costs (sorted by address) inside `range`.
fn in_range<'c>(
    costs: &'c [InstructionCost],
    range: &std::ops::Range<u64>,
) -> &'c [InstructionCost] {
    let from = costs.partition_point(|c| c.address < range.start);
    let to = costs.partition_point(|c| c.address < range.end);
    &costs[from..to]
}

/// One module's binary and structure, read once for the listings of its procedures.
struct ModuleCode {
    module: DbModuleId,
    binary: PathBuf,
    bytes: Vec<u8>,
    tree: ScopeTree,
}

impl ModuleCode {
    /// Module `module` of `db` read from its binary (at the path measured, else in one of the
    /// bundle `stores`), with the structure of its sampled procedures, or of the whole binary
    /// where `procedure` is not among them (it had no samples of its own).
    fn open(
        db: &Database,
        module: DbModuleId,
        stores: &[PathBuf],
        procedure: Option<&str>,
    ) -> Result<ModuleCode, AsmError> {
        let desc = &db.modules[module.index()];
        let (binary, bytes) = local_binary(&desc.path, desc.build_id.as_deref(), stores)
            .ok_or_else(|| AsmError::NoBinary(desc.path.clone()))?;
        let costs = db.instructions.in_module(module);
        let tree = structure_of(&binary, costs, procedure)
            .map_err(|e| AsmError::Unreadable(binary.display().to_string(), e))?;
        Ok(ModuleCode {
            module,
            binary,
            bytes,
            tree,
        })
    }

    /// The listing of procedure `procedure`.
    fn listing(&self, db: &Database, procedure: &str) -> Result<AsmView, AsmError> {
        let scope = find_scope(&self.tree, procedure).ok_or_else(|| {
            let why = format!("no procedure '{procedure}' in its structure");
            AsmError::Unreadable(self.binary.display().to_string(), why)
        })?;
        self.listing_of(db, scope)
    }

    /// The listing of the procedure at `scope` of the module's structure.
    fn listing_of(&self, db: &Database, scope: ScopeId) -> Result<AsmView, AsmError> {
        let unreadable = |e: String| AsmError::Unreadable(self.binary.display().to_string(), e);
        let tree = &self.tree;
        let procedure = &tree.get(scope).name;
        let code = decode(&self.bytes, &tree.get(scope).ranges).map_err(unreadable)?;
        let metrics = db.metrics.len();
        let mut view = AsmView {
            procedure: procedure.to_string(),
            binary: self.binary.clone(),
            metrics: (db.metrics.iter())
                .map(|m| (m.name.clone(), m.unit.clone()))
                .collect(),
            run_totals: db.metrics.iter().map(|m| m.total.value).collect(),
            read_with: (0..metrics).map(|m| leader_of(db, m)).collect(),
            lines: Vec::new(),
            own: vec![0; metrics],
            inlined: vec![0; metrics],
            kernel: vec![0; metrics],
            loops: (tree.descendants(scope).iter())
                .filter(|&&s| tree.get(s).kind == ScopeKind::Loop)
                .count(),
        };
        let costs = db.instructions.in_module(self.module);
        annotate(&mut view, tree, scope, &code, costs);
        Ok(view)
    }
}

/// The procedure named `name` (exactly, else by a part of its name) and its module.
fn find_procedure(db: &Database, name: &str) -> Result<(String, DbModuleId), AsmError> {
    let mut all: Vec<(&str, DbModuleId)> = (db.nodes.iter())
        .filter(|n| n.kind == NodeKind::Procedure)
        .filter_map(|n| Some((n.name.as_str(), n.module?)))
        .collect();
    all.sort_unstable();
    all.dedup();
    let exact: Vec<_> = all.iter().filter(|(n, _)| *n == name).collect();
    let found: Vec<_> = match exact.is_empty() {
        true => all.iter().filter(|(n, _)| n.contains(name)).collect(),
        false => exact,
    };
    match found[..] {
        [] => Err(AsmError::Unknown(name.to_string())),
        [&(n, m)] => Ok((n.to_string(), m)),
        _ => {
            let mut some: Vec<String> = found.iter().take(8).map(|(n, _)| n.to_string()).collect();
            if found.len() > 8 {
                some.push(format!("{} more", found.len() - 8));
            }
            let listed = format!("{} procedures ({})", found.len(), some.join(", "));
            Err(AsmError::Ambiguous(name.to_string(), listed))
        }
    }
}

/// The binary at `path` where it is a file with the build-id measured, else its copy in one of
/// the bundle `stores`: its path and bytes.
fn local_binary(
    path: &str,
    build_id: Option<&[u8]>,
    stores: &[PathBuf],
) -> Option<(PathBuf, Vec<u8>)> {
    let read = |p: &Path| Some((p.to_path_buf(), std::fs::read(p).ok()?));
    let key = profiler::bundle::key(build_id, None);
    let copy = key.and_then(|k| {
        (stores.iter())
            .map(|s| s.join(&k).join(profiler::debugfiles::EXECUTABLE))
            .find(|p| p.is_file())
    });
    if let Some(found) = copy.and_then(|p| read(&p)) {
        return Some(found);
    }
    // Only a regular file is read (a FIFO at the path would never end).
    let (p, bytes) = Some(Path::new(path))
        .filter(|p| p.is_file())
        .and_then(read)?;
    let file = object::File::parse(&*bytes).ok()?;
    let same_build = build_id.is_none() || file.build_id().ok()? == build_id;
    same_build.then_some((p, bytes))
}

/// The structure of `binary`: of the procedures holding the sampled instructions (`costs`),
/// and of the whole binary where `procedure` is not among them (it had no samples of its own).
fn structure_of(
    binary: &Path,
    costs: &[InstructionCost],
    procedure: Option<&str>,
) -> Result<ScopeTree, String> {
    let options = structure::Options::default();
    let addresses: Vec<Svma> = costs.iter().map(|c| Svma(c.address)).collect();
    if !addresses.is_empty() {
        let focused = structure::analyze_focused(binary, &addresses, &options);
        let tree = focused.map_err(|e| e.to_string())?.tree;
        if procedure.is_none_or(|p| find_scope(&tree, p).is_some()) {
            return Ok(tree);
        }
    }
    let whole = structure::analyze_file(binary, &options).map_err(|e| e.to_string())?;
    Ok(whole.tree)
}

/// The procedure scope named `name` in `tree`.
fn find_scope(tree: &ScopeTree, name: &str) -> Option<ScopeId> {
    tree.procedures().find(|&p| &*tree.get(p).name == name)
}

/// The instructions in `ranges` of the ELF file `bytes`, decoded.
fn decode(bytes: &[u8], ranges: &[std::ops::Range<u64>]) -> Result<Vec<Instruction>, String> {
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    let mut code = Vec::new();
    for range in ranges {
        let section = (file.sections())
            .find(|s| s.address() <= range.start && range.end <= s.address() + s.size())
            .ok_or_else(|| format!("no section holds {:#x}-{:#x}", range.start, range.end))?;
        let data = section.data().map_err(|e| e.to_string())?;
        let from = (range.start - section.address()) as usize;
        let to = (range.end - section.address()) as usize;
        let part = data
            .get(from..to)
            .ok_or("the code lies outside its section's bytes")?;
        let mut decoder = Decoder::with_ip(64, part, range.start, DecoderOptions::NONE);
        code.extend(decoder.iter());
    }
    Ok(code)
}

/// Fill `view`'s lines and sums from the decoded `code` of procedure `scope` of `tree` and the
/// module's instruction `costs`.
fn annotate(
    view: &mut AsmView,
    tree: &ScopeTree,
    scope: ScopeId,
    code: &[Instruction],
    costs: &[InstructionCost],
) {
    let metrics = view.metrics.len();
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    let (mut open, mut last_line): (Vec<ScopeId>, Option<String>) = (Vec::new(), None);
    for instruction in code {
        let address = instruction.ip();
        let inner = tree.lookup(Svma(address));
        let chain = nesting(tree, scope, inner);
        let same = open.iter().zip(&chain).take_while(|(a, b)| a == b).count();
        for (depth, &s) in chain.iter().enumerate().skip(same) {
            let label = scope_label(tree, s);
            view.lines.push(AsmLine::Scope { depth, label });
        }
        open = chain;
        let here = inner.and_then(|s| position(tree, s));
        let line = (here != last_line).then(|| here.clone()).flatten();
        last_line = here;
        let at = costs.binary_search_by_key(&address, |c| c.address).ok();
        let values = |k: bool| -> Vec<u64> {
            let entry = at.map(|i| if k { &costs[i].kernel } else { &costs[i].costs });
            (0..metrics)
                .map(|m| entry.and_then(|e| e.get(m)).map_or(0, |c| c.value))
                .collect()
        };
        let (user, kernel) = (values(false), values(true));
        let own = !open.iter().any(|&s| tree.get(s).is_alien());
        let sums = if own {
            &mut view.own
        } else {
            &mut view.inlined
        };
        for m in 0..metrics {
            sums[m] += user[m];
            view.kernel[m] += kernel[m];
        }
        let mut text = String::new();
        formatter.format(instruction, &mut text);
        view.lines.push(AsmLine::Instruction(AsmInstruction {
            depth: open.len(),
            address,
            text,
            line,
            costs: user,
            kernel,
            jump: jump(tree, scope, &open, instruction),
        }));
    }
}

/// The loops and inlined calls between procedure `scope` and `inner`, outermost first.
fn nesting(tree: &ScopeTree, scope: ScopeId, inner: Option<ScopeId>) -> Vec<ScopeId> {
    let Some(inner) = inner else {
        return Vec::new();
    };
    let mut chain: Vec<ScopeId> = (tree.ancestors(inner))
        .take_while(|&s| s != scope)
        .filter(|&s| matches!(tree.get(s).kind, ScopeKind::Loop | ScopeKind::Alien { .. }))
        .collect();
    chain.reverse();
    chain
}

/// `FILE: LINE` of scope `s` (the file's name only), if it has a line.
fn position(tree: &ScopeTree, s: ScopeId) -> Option<String> {
    let line = tree.get(s).line;
    let file = tree.scope_file(s)?;
    let name = file.rsplit('/').next().unwrap_or(file);
    (line > 0).then(|| format!("{name}: {line}"))
}

/// How a loop or inlined call is named in the listing.
fn scope_label(tree: &ScopeTree, s: ScopeId) -> String {
    let at = position(tree, s).unwrap_or_else(|| "an unknown line".into());
    match tree.get(s).kind {
        ScopeKind::Loop => format!("loop at {at}"),
        _ => format!("[I] {} ({at})", tree.get(s).name),
    }
}

/// Where `instruction` (inside the loops and calls `open`) jumps, named: back to the head of one
/// of its loops, back or ahead within procedure `scope`, or out of it (a tail call).
fn jump(
    tree: &ScopeTree,
    scope: ScopeId,
    open: &[ScopeId],
    instruction: &Instruction,
) -> Option<String> {
    let target = instruction.near_branch_target();
    match instruction.flow_control() {
        FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {}
        FlowControl::Call => {
            let callee = tree
                .procedures()
                .find(|&p| tree.get(p).entry == Some(target));
            return callee.map(|p| format!("calls {}", tree.get(p).name));
        }
        _ => return None,
    }
    let head = (open.iter().rev()).find(|&&s| tree.get(s).entry == Some(target));
    let inside = (tree.get(scope).ranges.iter()).any(|r| r.contains(&target));
    Some(match head {
        Some(&l) => format!("back edge of the {}", scope_label(tree, l)),
        None if !inside => format!("out of {} (a tail call)", tree.get(scope).name),
        None if target <= instruction.ip() => format!("back to {target:#x}"),
        None => format!("ahead to {target:#x}"),
    })
}
