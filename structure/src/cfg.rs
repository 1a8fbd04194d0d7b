//! Control-flow graphs of one procedure's machine code.
//!
//! The caller hands over the procedure's bytes (one or more address ranges: gcc splits hot and
//! `.cold` parts) at their link-time addresses (SVMA), plus two things only it knows about the
//! rest of the binary: which call targets never return (`exit`, `abort`, `__cxa_throw`, ...) and
//! how to read read-only data (for jump tables). [`Cfg::build`] decodes every byte with iced-x86
//! in a linear sweep, splits the instructions into basic blocks and links them:
//!
//! - direct jumps, both arms of conditional branches and fall-through are edges;
//! - calls stay inside a block unless the callee is known not to return;
//! - returns, indirect jumps, `ud2`, `hlt`, `int3` and undecodable bytes end a block;
//! - jumps leaving the procedure are tail calls: no edge, but a [`CallSite`];
//! - jump tables of the usual gcc/clang shapes are read and become [`EdgeKind::Table`] edges:
//!   position-independent `lea T(%rip),%rB; ...; add %rB,%rA; jmp *%rA` (entries are 32-bit
//!   offsets from `T`) and absolute `jmp *T(,%rI,8)` or `mov T(,%rI,8),%rA; jmp *%rA`. The number
//!   of entries comes from the bounds check (`cmp $N, ...; ja default`) when one is found nearby,
//!   and reading always stops at the first entry that leaves the procedure.
//!
//! Garbage bytes never panic: an undecodable instruction ends its block, a branch into the middle
//! of an instruction is recorded in [`Cfg::unresolved_targets`] and gets no edge.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

/// Index of a basic block in [`Cfg::blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub u32);

impl BlockId {
    /// The block's position in [`Cfg::blocks`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One contiguous piece of a procedure: its first link-time address and its bytes.
#[derive(Clone, Copy, Debug)]
pub struct CodeRange<'a> {
    /// Link-time address (SVMA) of `bytes[0]`.
    pub start: u64,
    /// The machine code.
    pub bytes: &'a [u8],
}

/// What the caller knows about the rest of the binary, consulted while building a [`Cfg`].
pub struct CfgEnv<'a> {
    /// True for a call target (link-time address) that never returns; such a call ends its
    /// block without successors.
    pub is_noreturn: &'a dyn Fn(u64) -> bool,
    /// Read `len` bytes of read-only data at a link-time address, `None` if not mapped in the
    /// file. Used to read jump tables.
    pub read_data: &'a dyn Fn(u64, usize) -> Option<&'a [u8]>,
}

impl CfgEnv<'static> {
    /// An environment that knows nothing: every callee returns and no data can be read, so jump
    /// tables stay unresolved.
    pub fn blind() -> Self {
        CfgEnv {
            is_noreturn: &|_| false,
            read_data: &|_, _| None,
        }
    }
}

/// Why a basic block ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminator {
    /// The next instruction starts another block (a branch target); control falls through.
    FallThrough,
    /// Direct unconditional jump to a block of this procedure.
    Jump,
    /// Conditional branch: a taken and a not-taken arm (the taken arm may leave the procedure,
    /// then it is a conditional tail call and has no edge).
    Branch,
    /// Return instruction.
    Return,
    /// Indirect jump through a recognised jump table at this link-time address.
    JumpTable {
        /// Address of the table's first entry.
        table: u64,
    },
    /// Indirect jump whose targets are unknown (a computed goto, a call through a pointer in
    /// tail position, or a table shape we do not recognise).
    IndirectJump,
    /// Jump leaving the procedure (a tail call); see [`Cfg::calls`].
    TailCall,
    /// Call to a function the caller declared noreturn.
    NoReturnCall,
    /// `ud2`, `hlt`, `int3` and similar traps.
    Trap,
    /// Bytes that do not decode as an instruction.
    Invalid,
    /// The code range ends without a terminator (the code falls off the end of the range).
    EndOfCode,
    /// Alignment `nop`s after a block-ending instruction that nothing branches to; they fall
    /// into the next block only on paper, so they get no edge (otherwise every padded loop
    /// head would look like a second loop entry).
    Padding,
}

/// How control gets along an [`Edge`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// Falls through into the next block (after a non-branch instruction or a call).
    FallThrough,
    /// Direct unconditional jump.
    Jump,
    /// Taken arm of a conditional branch.
    Taken,
    /// Not-taken arm of a conditional branch.
    NotTaken,
    /// One entry of a jump table.
    Table,
}

/// A control-flow edge to another block of the same procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The destination block.
    pub to: BlockId,
    /// The kind of transfer.
    pub kind: EdgeKind,
}

/// A maximal straight-line run of instructions (calls may sit inside it).
#[derive(Clone, Debug)]
pub struct BasicBlock {
    /// Link-time address of the first instruction.
    pub start: u64,
    /// Link-time address just past the last instruction (half-open range).
    pub end: u64,
    /// Address of the last instruction (the branch, for blocks ending in one).
    pub last_insn: u64,
    /// Why the block ends.
    pub terminator: Terminator,
    /// Edges leaving the block, without duplicate destinations.
    pub succs: Vec<Edge>,
    /// Blocks with an edge into this one, without duplicates.
    pub preds: Vec<BlockId>,
    /// Position of the block's instructions in [`Cfg::insn_addrs`].
    insns: std::ops::Range<u32>,
}

/// Whether a [`CallSite`] returns to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// A `call` instruction.
    Call,
    /// A jump (conditional or not, direct or through memory) leaving the procedure.
    TailCall,
}

/// A call (or tail call) found in the procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// Link-time address of the call instruction.
    pub addr: u64,
    /// Address just after it: the return address of a `call`.
    pub next_addr: u64,
    /// The callee's link-time address for direct calls, `None` for indirect ones.
    pub target: Option<u64>,
    /// Call or tail call.
    pub kind: CallKind,
    /// The caller's `is_noreturn` said the target never returns.
    pub noreturn: bool,
}

/// The control-flow graph of one procedure.
#[derive(Clone, Debug)]
pub struct Cfg {
    /// Basic blocks sorted by start address.
    pub blocks: Vec<BasicBlock>,
    /// The block at the first range's start (the procedure entry), if that range is non-empty.
    pub entry: Option<BlockId>,
    /// Calls and tail calls, sorted by address.
    pub calls: Vec<CallSite>,
    /// Branch or table targets inside the procedure that are not instruction boundaries
    /// (overlapping code or garbage); they get no edge.
    pub unresolved_targets: Vec<u64>,
    /// The procedure's address ranges as half-open `(start, end)` pairs, sorted.
    pub ranges: Vec<(u64, u64)>,
    /// Start addresses of all decoded instructions, sorted; each block owns a slice of them.
    pub insn_addrs: Vec<u64>,
}

/// Instructions scanned backwards from an indirect jump when looking for a jump table.
const TABLE_SCAN_WINDOW: usize = 24;
/// Most jump-table entries read when no bounds check was found.
const MAX_TABLE_ENTRIES: usize = 4096;

/// How one decoded instruction affects control flow, with its target already classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Next,
    Call { target: Option<u64>, noreturn: bool },
    Jump(u64),
    CondJump(u64),
    Indirect,
    Return,
    Trap,
    Invalid,
}

impl Flow {
    /// True if the instruction ends its block.
    fn ends_block(self) -> bool {
        !matches!(
            self,
            Flow::Next
                | Flow::Call {
                    noreturn: false,
                    ..
                }
        )
    }
}

/// Decoded instructions of a procedure, sorted by address, with the ranges they came from.
struct Decoded {
    insns: Vec<Instruction>,
    flows: Vec<Flow>,
    ranges: Vec<(u64, u64)>,
}

impl Decoded {
    fn new(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> Self {
        let mut ranges: Vec<(u64, u64)> = code
            .iter()
            .filter(|r| !r.bytes.is_empty())
            .map(|r| (r.start, r.start.saturating_add(r.bytes.len() as u64)))
            .collect();
        ranges.sort_unstable();
        let mut insns = Vec::new();
        let mut sorted: Vec<&CodeRange<'_>> = code.iter().collect();
        sorted.sort_by_key(|r| r.start);
        for range in sorted {
            decode_range(range, &mut insns);
        }
        let mut decoded = Decoded {
            insns,
            flows: Vec::new(),
            ranges,
        };
        decoded.flows = decoded
            .insns
            .iter()
            .map(|i| decoded.classify(i, env))
            .collect();
        decoded
    }

    fn contains(&self, addr: u64) -> bool {
        self.ranges.iter().any(|&(s, e)| s <= addr && addr < e)
    }

    /// Index of the instruction starting exactly at `addr`.
    fn index_of(&self, addr: u64) -> Option<usize> {
        self.insns.binary_search_by_key(&addr, Instruction::ip).ok()
    }

    fn classify(&self, insn: &Instruction, env: &CfgEnv<'_>) -> Flow {
        if insn.is_invalid() {
            return Flow::Invalid;
        }
        if matches!(insn.mnemonic(), Mnemonic::Hlt | Mnemonic::Int3) {
            return Flow::Trap;
        }
        match insn.flow_control() {
            FlowControl::Next | FlowControl::Interrupt => Flow::Next,
            FlowControl::XbeginXabortXend => match insn.op0_kind() {
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                    Flow::CondJump(insn.near_branch_target())
                }
                _ => Flow::Next,
            },
            FlowControl::Call => {
                let target = near_target(insn);
                let noreturn = target.is_some_and(|t| (env.is_noreturn)(t));
                Flow::Call { target, noreturn }
            }
            FlowControl::IndirectCall => Flow::Call {
                target: None,
                noreturn: false,
            },
            FlowControl::UnconditionalBranch => match near_target(insn) {
                Some(t) => Flow::Jump(t),
                None => Flow::Indirect,
            },
            FlowControl::ConditionalBranch => match near_target(insn) {
                Some(t) => Flow::CondJump(t),
                None => Flow::Next,
            },
            FlowControl::IndirectBranch => Flow::Indirect,
            FlowControl::Return => Flow::Return,
            FlowControl::Exception => Flow::Trap,
        }
    }
}

/// The target of a direct near branch or call, `None` for far or indirect forms.
fn near_target(insn: &Instruction) -> Option<u64> {
    match insn.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            Some(insn.near_branch_target())
        }
        _ => None,
    }
}

/// Decode one range in a linear sweep, appending instructions that do not overlap earlier ones.
fn decode_range(range: &CodeRange<'_>, out: &mut Vec<Instruction>) {
    let mut decoder = Decoder::with_ip(64, range.bytes, range.start, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.len() == 0 {
            break;
        }
        let overlaps = out.last().is_some_and(|prev| prev.next_ip() > insn.ip());
        if !overlaps {
            out.push(insn);
        }
    }
}

impl Cfg {
    /// Decode `code` and build its control-flow graph. `code[0].start` is the procedure's entry.
    pub fn build(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> Cfg {
        let decoded = Decoded::new(code, env);
        let mut builder = Builder::new(&decoded, env);
        builder.find_leaders();
        builder.find_padding();
        let mut cfg = builder.make_blocks();
        cfg.entry = code
            .first()
            .filter(|r| !r.bytes.is_empty())
            .and_then(|r| cfg.block_starting_at(r.start));
        cfg
    }

    /// The block containing link-time address `addr`.
    pub fn block_at(&self, addr: u64) -> Option<BlockId> {
        let i = self.blocks.partition_point(|b| b.start <= addr);
        let b = self.blocks.get(i.checked_sub(1)?)?;
        (addr < b.end).then_some(BlockId((i - 1) as u32))
    }

    /// The block whose first instruction is at `addr`.
    pub fn block_starting_at(&self, addr: u64) -> Option<BlockId> {
        self.block_at(addr)
            .filter(|&b| self.blocks[b.index()].start == addr)
    }

    /// One block.
    pub fn block(&self, id: BlockId) -> &BasicBlock {
        &self.blocks[id.index()]
    }

    /// Start addresses of the instructions of block `id`, in order.
    pub fn instructions(&self, id: BlockId) -> &[u64] {
        let r = &self.blocks[id.index()].insns;
        &self.insn_addrs[r.start as usize..r.end as usize]
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when nothing decoded (all ranges empty).
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// Per-instruction facts gathered before blocks are cut.
struct Builder<'d, 'e> {
    d: &'d Decoded,
    env: &'d CfgEnv<'e>,
    leader: Vec<bool>,
    /// Instructions that are branch or jump-table targets.
    target: Vec<bool>,
    /// Instructions that are alignment padding (see [`Terminator::Padding`]).
    padding: Vec<bool>,
    /// Resolved jump tables, keyed by the index of their `jmp`: (table address, target indices).
    tables: Vec<(usize, u64, Vec<usize>)>,
    unresolved: Vec<u64>,
    calls: Vec<CallSite>,
}

impl<'d, 'e> Builder<'d, 'e> {
    fn new(d: &'d Decoded, env: &'d CfgEnv<'e>) -> Self {
        Builder {
            d,
            env,
            leader: vec![false; d.insns.len()],
            target: vec![false; d.insns.len()],
            padding: vec![false; d.insns.len()],
            tables: Vec::new(),
            unresolved: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// A branch target inside the procedure: its instruction index, or `None` (recorded as
    /// unresolved) when it is not an instruction boundary.
    fn internal_target(&mut self, target: u64) -> Option<usize> {
        let idx = self.d.index_of(target);
        if idx.is_none() {
            self.unresolved.push(target);
        }
        idx
    }

    fn call_site(&mut self, insn: &Instruction, target: Option<u64>, kind: CallKind) {
        let noreturn = kind == CallKind::Call && target.is_some_and(|t| (self.env.is_noreturn)(t));
        self.calls.push(CallSite {
            addr: insn.ip(),
            next_addr: insn.next_ip(),
            target,
            kind,
            noreturn,
        });
    }

    /// Mark block leaders, record call sites and resolve jump tables.
    fn find_leaders(&mut self) {
        let d = self.d;
        for (i, (insn, &flow)) in d.insns.iter().zip(&d.flows).enumerate() {
            let contiguous = i > 0 && d.insns[i - 1].next_ip() == insn.ip();
            if !contiguous || (i > 0 && d.flows[i - 1].ends_block()) {
                self.leader[i] = true;
            }
            match flow {
                Flow::Call { target, .. } => self.call_site(insn, target, CallKind::Call),
                Flow::Jump(t) | Flow::CondJump(t) => {
                    if d.contains(t) {
                        if let Some(j) = self.internal_target(t) {
                            self.leader[j] = true;
                            self.target[j] = true;
                        }
                    } else {
                        self.call_site(insn, Some(t), CallKind::TailCall);
                    }
                }
                Flow::Indirect => self.indirect_jump(i),
                _ => {}
            }
        }
    }

    /// Mark runs of `nop`s that follow a block-ending instruction and are no branch target as
    /// padding, and start a block at the first instruction after such a run.
    fn find_padding(&mut self) {
        let d = self.d;
        let mut in_run = false;
        for i in 0..d.insns.len() {
            let after_end =
                i > 0 && d.insns[i - 1].next_ip() == d.insns[i].ip() && d.flows[i - 1].ends_block();
            let is_nop = d.insns[i].mnemonic() == Mnemonic::Nop;
            if self.target[i] || (!after_end && !in_run) {
                in_run = false;
            } else if after_end {
                in_run = is_nop;
            } else if !is_nop {
                in_run = false;
                self.leader[i] = true;
            }
            self.padding[i] = in_run;
        }
    }

    /// An indirect jump: a jump table, a tail call through memory, or unknown.
    fn indirect_jump(&mut self, i: usize) {
        let insn = &self.d.insns[i];
        if let Some((table, targets)) = self.jump_table(i) {
            for &t in &targets {
                self.leader[t] = true;
                self.target[t] = true;
            }
            self.tables.push((i, table, targets));
        } else if insn.op0_kind() == OpKind::Memory && insn.is_ip_rel_memory_operand() {
            // `jmp *foo@GOTPCREL(%rip)`: a tail call through the GOT.
            let insn = *insn;
            self.call_site(&insn, None, CallKind::TailCall);
        }
    }

    /// Recognise and read a jump table for the indirect jump at index `i`.
    fn jump_table(&mut self, i: usize) -> Option<(u64, Vec<usize>)> {
        let insn = &self.d.insns[i];
        let shape = match insn.op0_kind() {
            OpKind::Memory => absolute_table(insn)?,
            OpKind::Register => self.register_table(i, insn.op0_register())?,
            _ => return None,
        };
        let bound = self.bounds_check(i);
        let targets = self.read_table(shape, bound);
        (!targets.is_empty()).then_some((shape.table, targets))
    }

    /// The table behind `jmp *%reg`: relative (`add` of a `lea T(%rip)`) or absolute (`mov`).
    fn register_table(&self, i: usize, reg: Register) -> Option<TableShape> {
        let w = self.last_writer(i, reg)?;
        let writer = &self.d.insns[w];
        match writer.mnemonic() {
            Mnemonic::Add if writer.op1_kind() == OpKind::Register => {
                [writer.op1_register(), writer.op0_register()]
                    .into_iter()
                    .find_map(|r| {
                        let lea = &self.d.insns[self.last_writer(w, r)?];
                        (lea.mnemonic() == Mnemonic::Lea && lea.is_ip_rel_memory_operand()).then(
                            || TableShape {
                                table: lea.ip_rel_memory_address(),
                                entry_size: 4,
                            },
                        )
                    })
            }
            Mnemonic::Mov if writer.op1_kind() == OpKind::Memory => absolute_table(writer),
            _ => None,
        }
    }

    /// Index of the nearest instruction before `i` (same straight-line stretch) that writes
    /// the full register of `reg` as its first operand.
    fn last_writer(&self, i: usize, reg: Register) -> Option<usize> {
        let full = reg.full_register();
        for j in self.scan_back(i) {
            let insn = &self.d.insns[j];
            let writes = insn.op_count() > 0
                && insn.op0_kind() == OpKind::Register
                && insn.op0_register().full_register() == full
                && !matches!(
                    insn.mnemonic(),
                    Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Bt
                );
            if writes {
                return Some(j);
            }
        }
        None
    }

    /// Indices before `i`, nearest first, within the scan window and not across an
    /// unconditional transfer or a call (which would make the code before it unrelated).
    fn scan_back(&self, i: usize) -> impl Iterator<Item = usize> + 'd {
        let d = self.d;
        (i.saturating_sub(TABLE_SCAN_WINDOW)..i)
            .rev()
            .take_while(move |&j| {
                let ok = d.insns[j].next_ip() == d.insns[j + 1].ip();
                ok && matches!(d.flows[j], Flow::Next | Flow::CondJump(_))
            })
    }

    /// Number of table entries implied by a nearby `cmp $N, x; ja/jae/jb/jbe` bounds check.
    fn bounds_check(&self, i: usize) -> Option<usize> {
        let j = self.scan_back(i).find(|&j| {
            matches!(
                self.d.insns[j].mnemonic(),
                Mnemonic::Ja | Mnemonic::Jae | Mnemonic::Jb | Mnemonic::Jbe
            )
        })?;
        let cmp = &self.d.insns[j.checked_sub(1)?];
        let imm_kind = cmp.op_count() == 2
            && matches!(
                cmp.op1_kind(),
                OpKind::Immediate8
                    | OpKind::Immediate8to32
                    | OpKind::Immediate8to64
                    | OpKind::Immediate32
                    | OpKind::Immediate32to64
            );
        if cmp.mnemonic() != Mnemonic::Cmp || !imm_kind {
            return None;
        }
        let n = usize::try_from(cmp.immediate(1)).ok()?;
        let count = match self.d.insns[j].mnemonic() {
            Mnemonic::Ja | Mnemonic::Jbe => n.checked_add(1)?,
            _ => n,
        };
        (count <= MAX_TABLE_ENTRIES).then_some(count)
    }

    /// Read entries until `bound`, the first entry leaving the procedure, or unreadable data.
    fn read_table(&mut self, shape: TableShape, bound: Option<usize>) -> Vec<usize> {
        let mut targets = Vec::new();
        let limit = bound.unwrap_or(MAX_TABLE_ENTRIES);
        for k in 0..limit as u64 {
            let Some(at) = shape.table.checked_add(k * shape.entry_size as u64) else {
                break;
            };
            let Some(bytes) = (self.env.read_data)(at, shape.entry_size) else {
                break;
            };
            let Some(target) = shape.target(bytes) else {
                break;
            };
            if !self.d.contains(target) {
                break;
            }
            match self.internal_target(target) {
                Some(t) => targets.push(t),
                None => break,
            }
        }
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Cut the instruction list into blocks and connect them.
    fn make_blocks(self) -> Cfg {
        let d = self.d;
        let mut blocks = Vec::new();
        let mut block_of_insn = vec![0u32; d.insns.len()];
        let mut start = 0;
        for i in 0..d.insns.len() {
            let last = i + 1 == d.insns.len() || self.leader[i + 1];
            if last {
                for slot in &mut block_of_insn[start..=i] {
                    *slot = blocks.len() as u32;
                }
                blocks.push(BasicBlock {
                    start: d.insns[start].ip(),
                    end: d.insns[i].next_ip(),
                    last_insn: d.insns[i].ip(),
                    terminator: Terminator::FallThrough,
                    succs: Vec::new(),
                    preds: Vec::new(),
                    insns: start as u32..(i + 1) as u32,
                });
                start = i + 1;
            }
        }
        let mut cfg = Cfg {
            blocks,
            entry: None,
            calls: self.calls,
            unresolved_targets: self.unresolved,
            ranges: d.ranges.clone(),
            insn_addrs: d.insns.iter().map(Instruction::ip).collect(),
        };
        let tables = self.tables;
        for b in 0..cfg.blocks.len() {
            let last = cfg.blocks[b].insns.end as usize - 1;
            let follows = (last + 1 < d.insns.len()
                && d.insns[last + 1].ip() == d.insns[last].next_ip())
            .then(|| block_of_insn[last + 1]);
            let first = cfg.blocks[b].insns.start as usize;
            let (terminator, edges) = if self.padding[first] {
                (Terminator::Padding, Vec::new())
            } else {
                link(d, last, follows, &block_of_insn, &tables)
            };
            cfg.blocks[b].terminator = terminator;
            for edge in edges {
                if cfg.blocks[b].succs.iter().all(|e| e.to != edge.to) {
                    cfg.blocks[b].succs.push(edge);
                    cfg.blocks[edge.to.index()].preds.push(BlockId(b as u32));
                }
            }
        }
        cfg.calls.sort_by_key(|c| c.addr);
        cfg.unresolved_targets.sort_unstable();
        cfg.unresolved_targets.dedup();
        cfg
    }
}

/// The terminator and outgoing edges of the block whose last instruction has index `last`;
/// `follows` is the block of the next contiguous instruction, if any.
fn link(
    d: &Decoded,
    last: usize,
    follows: Option<u32>,
    block_of_insn: &[u32],
    tables: &[(usize, u64, Vec<usize>)],
) -> (Terminator, Vec<Edge>) {
    let edge = |insn_index: usize, kind| Edge {
        to: BlockId(block_of_insn[insn_index]),
        kind,
    };
    let fall = |kind| {
        follows.map(|b| Edge {
            to: BlockId(b),
            kind,
        })
    };
    let inside = |t: u64| d.index_of(t).filter(|_| d.contains(t));
    match d.flows[last] {
        Flow::Next
        | Flow::Call {
            noreturn: false, ..
        } => match fall(EdgeKind::FallThrough) {
            Some(e) => (Terminator::FallThrough, vec![e]),
            None => (Terminator::EndOfCode, Vec::new()),
        },
        Flow::Call { .. } => (Terminator::NoReturnCall, Vec::new()),
        Flow::Jump(t) => match inside(t) {
            Some(j) => (Terminator::Jump, vec![edge(j, EdgeKind::Jump)]),
            None if d.contains(t) => (Terminator::Jump, Vec::new()),
            None => (Terminator::TailCall, Vec::new()),
        },
        Flow::CondJump(t) => {
            let taken = inside(t).map(|j| edge(j, EdgeKind::Taken));
            let edges = taken.into_iter().chain(fall(EdgeKind::NotTaken)).collect();
            (Terminator::Branch, edges)
        }
        Flow::Indirect => match tables.iter().find(|(i, _, _)| *i == last) {
            Some((_, table, targets)) => (
                Terminator::JumpTable { table: *table },
                targets.iter().map(|&t| edge(t, EdgeKind::Table)).collect(),
            ),
            None if d.insns[last].is_ip_rel_memory_operand() => (Terminator::TailCall, Vec::new()),
            None => (Terminator::IndirectJump, Vec::new()),
        },
        Flow::Return => (Terminator::Return, Vec::new()),
        Flow::Trap => (Terminator::Trap, Vec::new()),
        Flow::Invalid => (Terminator::Invalid, Vec::new()),
    }
}

/// Where a jump table lives and how to turn an entry into a target.
#[derive(Clone, Copy, Debug)]
struct TableShape {
    table: u64,
    /// 4: signed 32-bit offsets from `table`; 8: absolute 64-bit addresses.
    entry_size: usize,
}

impl TableShape {
    fn target(&self, bytes: &[u8]) -> Option<u64> {
        match self.entry_size {
            4 => {
                let raw: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
                let off = i64::from(i32::from_le_bytes(raw));
                self.table.checked_add_signed(off)
            }
            _ => {
                let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
                Some(u64::from_le_bytes(raw))
            }
        }
    }
}

/// `[T + idx*8]` with no base register: an absolute table of 64-bit addresses at `T`.
fn absolute_table(insn: &Instruction) -> Option<TableShape> {
    let absolute = insn.memory_base() == Register::None
        && insn.memory_index() != Register::None
        && insn.memory_index_scale() == 8;
    absolute.then(|| TableShape {
        table: insn.memory_displacement64(),
        entry_size: 8,
    })
}
