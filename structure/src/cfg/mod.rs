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
//! - jumps leaving the procedure are tail calls: no edge, but a [`CallSite`]; so are indirect
//!   jumps through a pointer loaded without an index (GOT slots, vtables, function pointers);
//! - jump tables of the usual gcc/clang shapes are read and become [`EdgeKind::Table`] edges:
//!   position-independent `lea T(%rip),%rB; ...; add %rB,%rA; jmp *%rA` (entries are 32-bit
//!   offsets from `T`) and absolute `jmp *T(,%rI,8)` or `mov T(,%rI,8),%rA; jmp *%rA`. The number
//!   of entries comes from the bounds check (`cmp $N, ...; ja default`) when one is found nearby,
//!   and reading always stops at the first entry that leaves the procedure.
//!
//! - a call inside a call-site range of the function's exception table gets an edge to the
//!   range's landing pad (the unwinder's jump), so `catch` blocks and cleanups are reached.
//!
//! Garbage bytes never panic: an undecodable instruction ends its block, a branch into the middle
//! of an instruction (the old "jump over the `lock` prefix" idiom, or overlapping code) goes to
//! the block of the instruction containing the target and is recorded in
//! [`Cfg::unresolved_targets`]; a jump-table entry that does so ends the table.

mod builder;
mod decode;
mod exits;
mod tables;

use builder::Builder;
use decode::Decoded;
use smallvec::SmallVec;

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
    /// block without successors. Asked also about the GOT slot of a call through memory
    /// (`call *slot(%rip)`), which names its import the same way.
    pub is_noreturn: &'a dyn Fn(u64) -> bool,
    /// Read `len` bytes of read-only data at a link-time address, `None` if not mapped in the
    /// file. Used to read jump tables.
    pub read_data: &'a dyn Fn(u64, usize) -> Option<&'a [u8]>,
    /// Where calls land when they throw (from the function's exception table); each call in
    /// a range gets an [`EdgeKind::Exception`] edge to its pad.
    pub landing_pads: &'a [LandingPad],
}

/// One call-site range of a function's exception table that has a landing pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandingPad {
    /// First byte of the call-site range.
    pub start: u64,
    /// End of the call-site range (exclusive).
    pub end: u64,
    /// The landing pad's address.
    pub pad: u64,
}

impl CfgEnv<'static> {
    /// An environment that knows nothing: every callee returns and no data can be read, so jump
    /// tables stay unresolved.
    pub fn blind() -> Self {
        CfgEnv {
            is_noreturn: &|_| false,
            read_data: &|_, _| None,
            landing_pads: &[],
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
    /// Indirect jump whose targets are unknown (a computed goto, a jump to an address computed
    /// in a way not recognised, or a table shape we do not recognise).
    IndirectJump,
    /// Jump leaving the procedure (a tail call: direct, or through a pointer read from memory
    /// without an index: the GOT, a vtable, a function pointer); see [`Cfg::calls`].
    TailCall,
    /// Call to a function the caller declared noreturn.
    NoReturnCall,
    /// `ud2`, `hlt`, `int3` and similar traps.
    Trap,
    /// Bytes that do not decode as an instruction.
    Invalid,
    /// The code range ends without a terminator (the code falls off the end of the range).
    EndOfCode,
    /// Alignment `nop`s after an instruction without fall-through (jump, return, trap) that
    /// nothing branches to; they fall into the next block only on paper, so they get no edge
    /// (otherwise every padded loop head would look like a second loop entry).
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
    /// From a call to the landing pad that catches what it throws.
    Exception,
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
    /// Edges leaving the block, without duplicate destinations (most blocks have one or two,
    /// kept inline: a large binary has millions of blocks).
    pub succs: SmallVec<[Edge; 2]>,
    /// Blocks with an edge into this one, without duplicates.
    pub preds: SmallVec<[BlockId; 2]>,
    /// The block does nothing but pass control on to its one successor: `nop`s, perhaps ending
    /// in a direct `jmp`.
    pub passes_through: bool,
    /// The block only compares (`cmp`, `test`) and branches conditionally: it has no effect
    /// but choosing one of its two successors.
    pub only_tests: bool,
    /// For a block ending in a conditional branch after at most four other instructions: a
    /// fingerprint of its instructions (their operands, not their addresses) and of the
    /// branch's condition; 0 for other blocks. See
    /// [`BasicBlock::test_choice`].
    pub test_code: u64,
    /// Position of the block's instructions in [`Cfg::insn_addrs`].
    insns: std::ops::Range<u32>,
}

impl BasicBlock {
    /// For a block ending in a conditional branch with both arms in the procedure: its code
    /// (the fingerprint with the condition under which it goes to the lower of its arms as
    /// `arm` names them) and that arm. Two blocks with the same choice are copies of one test,
    /// even where one branches on the opposite condition to the other arm: gcc's jump threading
    /// copies a loop's test, with the load it tests, into the blocks before the loop.
    pub fn test_choice(&self, arm: impl Fn(BlockId) -> u32) -> Option<(u64, u32)> {
        if self.test_code == 0 {
            return None;
        }
        let to = |kind| Some(arm(self.succs.iter().find(|e| e.kind == kind)?.to));
        let (taken, fall) = (to(EdgeKind::Taken)?, to(EdgeKind::NotTaken)?);
        let body = self.test_code & !0xffff;
        let (cc, not) = (self.test_code & 0xff, (self.test_code >> 8) & 0xff);
        Some(match taken <= fall {
            true => (body | cc, taken),
            false => (body | not, fall),
        })
    }
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
    /// (a skipped prefix, overlapping code or garbage). A branch there is linked to the
    /// instruction containing it; a table entry there ends the table.
    pub unresolved_targets: Vec<u64>,
    /// The procedure's address ranges as half-open `(start, end)` pairs, sorted.
    pub ranges: Vec<(u64, u64)>,
    /// Start addresses of all decoded instructions, sorted; each block owns a slice of them.
    pub insn_addrs: Vec<u64>,
}

impl Cfg {
    /// Decode `code` and build its control-flow graph. `code[0].start` is the procedure's entry.
    pub fn build(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> Cfg {
        Cfg::from_decoded(code, env, &Decoded::new(code, env))
    }

    /// The control-flow graph of `code` as [`Cfg::build`] makes it, or `None` when it can have
    /// no cycle (no loop): every branch inside the code goes forward, there is no indirect jump
    /// and every landing pad follows the calls it catches. Most procedures are such; they are
    /// told apart after decoding, before any callee is asked whether it returns.
    pub fn build_if_cyclic(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> Option<Cfg> {
        let mut decoded = Decoded::sweep(code);
        if decoded.is_acyclic(env.landing_pads) {
            return None;
        }
        decoded.ask_calls(env);
        Some(Cfg::from_decoded(code, env, &decoded))
    }

    /// Cut `decoded` (the instructions of `code`) into blocks and link them.
    fn from_decoded(code: &[CodeRange<'_>], env: &CfgEnv<'_>, decoded: &Decoded) -> Cfg {
        let entry = code.first().map(|r| r.start);
        let mut builder = Builder::new(decoded, env, entry);
        builder.find_leaders();
        builder.find_padding();
        let mut cfg = builder.make_blocks();
        cfg.entry = code
            .first()
            .filter(|r| !r.bytes.is_empty())
            .and_then(|r| cfg.block_starting_at(r.start));
        cfg
    }

    /// False when the procedure in `code` (entry at `code[0].start`) can never return to its
    /// caller: every path from its entry ends in a call `env` declares noreturn, a trap or an
    /// endless loop. Used to find noreturn functions the compiler did not mark.
    pub fn may_return(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> bool {
        exits::may_return(code, env)
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
