//! Cutting decoded instructions into basic blocks and linking them.

use super::decode::{Decoded, Flow};
use super::{
    BasicBlock, BlockId, CallKind, CallSite, Cfg, CfgEnv, Edge, EdgeKind, LandingPad, Terminator,
};
use iced_x86::{Instruction, Mnemonic};
use smallvec::{smallvec, SmallVec};

/// Per-instruction facts gathered before blocks are cut.
pub(super) struct Builder<'d, 'e> {
    pub(super) d: &'d Decoded,
    pub(super) env: &'d CfgEnv<'e>,
    pub(super) leader: Vec<bool>,
    /// Instructions that are branch or jump-table targets.
    pub(super) target: Vec<bool>,
    /// Instructions that are alignment padding (see [`Terminator::Padding`]).
    pub(super) padding: Vec<bool>,
    /// Resolved jump tables, keyed by the index of their `jmp`: (table address, target indices).
    pub(super) tables: Vec<(usize, u64, Vec<usize>)>,
    pub(super) unresolved: Vec<u64>,
    pub(super) calls: Vec<CallSite>,
    /// Indirect jumps found to be tail calls through a pointer, in increasing order.
    pub(super) pointer_tail_calls: Vec<usize>,
    /// Direct branches inside the procedure as (target index, source index), sorted.
    pub(super) incoming: Vec<(u32, u32)>,
    /// Index of the procedure's entry instruction (`usize::MAX` if it did not decode).
    pub(super) entry: usize,
}

impl<'d, 'e> Builder<'d, 'e> {
    pub(super) fn new(d: &'d Decoded, env: &'d CfgEnv<'e>, entry: Option<u64>) -> Self {
        Builder {
            d,
            env,
            leader: vec![false; d.insns.len()],
            target: vec![false; d.insns.len()],
            padding: vec![false; d.insns.len()],
            tables: Vec::new(),
            unresolved: Vec::new(),
            calls: Vec::new(),
            incoming: Vec::new(),
            pointer_tail_calls: Vec::new(),
            entry: entry.and_then(|e| d.index_of(e)).unwrap_or(usize::MAX),
        }
    }

    /// A jump-table target inside the procedure: its instruction index, or `None` (recorded as
    /// unresolved) when it is not an instruction boundary.
    pub(super) fn table_target(&mut self, target: u64) -> Option<usize> {
        let idx = self.d.index_of(target);
        if idx.is_none() {
            self.unresolved.push(target);
        }
        idx
    }

    /// Record a call (`noreturn` as classified when decoding) or a tail call.
    pub(super) fn call_site(
        &mut self,
        insn: &Instruction,
        target: Option<u64>,
        kind: CallKind,
        noreturn: bool,
    ) {
        self.calls.push(CallSite {
            addr: insn.ip(),
            next_addr: insn.next_ip(),
            target,
            kind,
            noreturn,
        });
    }

    /// Mark block leaders, record call sites and resolve jump tables (once all direct branches
    /// are known, since tracing a table's registers follows them backwards).
    pub(super) fn find_leaders(&mut self) {
        let d = self.d;
        let mut indirect = Vec::new();
        for (i, (insn, &flow)) in d.insns.iter().zip(&d.flows).enumerate() {
            let contiguous = i > 0
                && d.insns[i - 1].next_ip() == insn.ip()
                && d.ranges.binary_search_by_key(&insn.ip(), |r| r.0).is_err();
            if !contiguous || (i > 0 && d.flows[i - 1].ends_block()) {
                self.leader[i] = true;
            }
            match flow {
                Flow::Call { target, noreturn } => {
                    self.call_site(insn, target, CallKind::Call, noreturn)
                }
                Flow::Jump(t) | Flow::CondJump(t) => {
                    if d.contains(t) {
                        if let Some(j) = d.containing(t) {
                            if d.insns[j].ip() != t {
                                self.unresolved.push(t);
                            }
                            self.incoming.push((j as u32, i as u32));
                            self.leader[j] = true;
                            self.target[j] = true;
                        }
                    } else {
                        self.call_site(insn, Some(t), CallKind::TailCall, false);
                    }
                }
                Flow::Indirect => indirect.push(i),
                _ => {}
            }
        }
        self.incoming.sort_unstable();
        for i in indirect {
            self.indirect_jump(i);
        }
        for pad in self.env.landing_pads {
            if let Some(j) = d.index_of(pad.pad) {
                self.leader[j] = true;
                self.target[j] = true;
            }
        }
    }

    /// Mark runs of `nop`s that follow an instruction without fall-through and are no branch
    /// target as
    /// padding, and start a block at the first instruction after such a run.
    pub(super) fn find_padding(&mut self) {
        let d = self.d;
        let mut in_run = false;
        for i in 0..d.insns.len() {
            let after_end = i > 0
                && d.insns[i - 1].next_ip() == d.insns[i].ip()
                && !d.flows[i - 1].falls_through();
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

    /// Cut the instruction list into blocks and connect them.
    pub(super) fn make_blocks(self) -> Cfg {
        let d = self.d;
        let mut blocks = Vec::with_capacity(self.leader.iter().filter(|&&l| l).count() + 1);
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
                    succs: SmallVec::new(),
                    preds: SmallVec::new(),
                    passes_through: false,
                    only_tests: false,
                    test_code: 0,
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
        let pads = self.env.landing_pads;
        let tables = self.tables;
        let tail_calls = self.pointer_tail_calls;
        for b in 0..cfg.blocks.len() {
            let last = cfg.blocks[b].insns.end as usize - 1;
            let follows = (last + 1 < d.insns.len()
                && d.insns[last + 1].ip() == d.insns[last].next_ip())
            .then(|| block_of_insn[last + 1]);
            let first = cfg.blocks[b].insns.start as usize;
            let (terminator, edges) = if self.padding[first] {
                (Terminator::Padding, Edges::new())
            } else {
                link(d, last, follows, &block_of_insn, &tables, &tail_calls)
            };
            let only = |ok: &[Mnemonic]| {
                d.insns[first..last]
                    .iter()
                    .all(|i| ok.contains(&i.mnemonic()))
            };
            cfg.blocks[b].terminator = terminator;
            cfg.blocks[b].passes_through =
                matches!(terminator, Terminator::Jump | Terminator::FallThrough)
                    && only(&[Mnemonic::Nop])
                    && (d.insns[last].mnemonic() == Mnemonic::Nop
                        || matches!(d.flows[last], Flow::Jump(_)));
            cfg.blocks[b].only_tests = terminator == Terminator::Branch
                && only(&[Mnemonic::Nop, Mnemonic::Cmp, Mnemonic::Test]);
            if terminator == Terminator::Branch && last - first <= TEST_BODY {
                cfg.blocks[b].test_code = test_code(&d.insns[first..=last]);
            }
            for edge in edges {
                if cfg.blocks[b].succs.iter().all(|e| e.to != edge.to) {
                    cfg.blocks[b].succs.push(edge);
                    cfg.blocks[edge.to.index()].preds.push(BlockId(b as u32));
                }
            }
        }
        cfg.calls.sort_by_key(|c| c.addr);
        link_landing_pads(d, pads, &mut cfg, &block_of_insn);
        cfg.unresolved_targets.sort_unstable();
        cfg.unresolved_targets.dedup();
        cfg
    }
}

/// The most instructions before its branch that a block has whose fingerprint is taken (see
/// [`BasicBlock::test_code`]): a test and what it tests (a load or two). Hashing every block
/// cost 3% of node's analysis.
const TEST_BODY: usize = 4;

/// The fingerprint of a block `insns` ending in a conditional branch (see
/// [`BasicBlock::test_code`]): its instructions but the branch as decoded, without their
/// addresses (iced's hash leaves those out; a RIP-relative operand is hashed as the address it
/// names), in the high 48 bits; the branch's condition and its negation in the low two bytes.
fn test_code(insns: &[Instruction]) -> u64 {
    use std::hash::{Hash, Hasher};
    let (branch, body) = insns.split_last().expect("a block has an instruction");
    let mut h = fxhash::FxHasher64::default();
    body.hash(&mut h);
    let mut negated = *branch;
    negated.negate_condition_code();
    let (cc, not) = (
        branch.condition_code() as u64,
        negated.condition_code() as u64,
    );
    (h.finish() << 16) | not << 8 | cc
}

/// Exception edges: from the block of each call in a call-site range to its landing pad.
fn link_landing_pads(d: &Decoded, pads: &[LandingPad], cfg: &mut Cfg, block_of_insn: &[u32]) {
    // Each pad's block, once: (call-site range, pad block), for the pads inside the code.
    let pads: Vec<(u64, u64, BlockId)> = pads
        .iter()
        .filter_map(|p| Some((p.start, p.end, BlockId(block_of_insn[d.index_of(p.pad)?]))))
        .collect();
    for call in cfg.calls.iter().filter(|c| c.kind == CallKind::Call) {
        let Some(from) = d.index_of(call.addr).map(|i| block_of_insn[i]) else {
            continue;
        };
        for &(start, end, to) in &pads {
            let covered = start <= call.addr && call.addr < end;
            let block = &mut cfg.blocks[from as usize];
            if covered && block.succs.iter().all(|e| e.to != to) {
                block.succs.push(Edge {
                    to,
                    kind: EdgeKind::Exception,
                });
                cfg.blocks[to.index()].preds.push(BlockId(from));
            }
        }
    }
}

/// A block's outgoing edges: most blocks have one or two (a jump table more), kept inline.
type Edges = SmallVec<[Edge; 2]>;

/// The terminator and outgoing edges of the block whose last instruction has index `last`;
/// `follows` is the block of the next contiguous instruction, if any.
fn link(
    d: &Decoded,
    last: usize,
    follows: Option<u32>,
    block_of_insn: &[u32],
    tables: &[(usize, u64, Vec<usize>)],
    tail_calls: &[usize],
) -> (Terminator, Edges) {
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
    let inside = |t: u64| d.containing(t).filter(|_| d.contains(t));
    match d.flows[last] {
        Flow::Next
        | Flow::Call {
            noreturn: false, ..
        } => match fall(EdgeKind::FallThrough) {
            Some(e) => (Terminator::FallThrough, smallvec![e]),
            None => (Terminator::EndOfCode, Edges::new()),
        },
        Flow::Call { .. } => (Terminator::NoReturnCall, Edges::new()),
        Flow::Jump(t) => match inside(t) {
            Some(j) => (Terminator::Jump, smallvec![edge(j, EdgeKind::Jump)]),
            None if d.contains(t) => (Terminator::Jump, Edges::new()),
            None => (Terminator::TailCall, Edges::new()),
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
            None if tail_calls.binary_search(&last).is_ok() => (Terminator::TailCall, Edges::new()),
            None => (Terminator::IndirectJump, Edges::new()),
        },
        Flow::Return => (Terminator::Return, Edges::new()),
        Flow::Trap => (Terminator::Trap, Edges::new()),
        Flow::Invalid => (Terminator::Invalid, Edges::new()),
    }
}
