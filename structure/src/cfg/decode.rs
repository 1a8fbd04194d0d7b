//! Decoding a procedure's bytes into instructions, each classified by how it affects control
//! flow.

use super::{CfgEnv, CodeRange, LandingPad};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

/// How one decoded instruction affects control flow, with its target already classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
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
    /// True if control can continue with the next instruction.
    pub(super) fn falls_through(self) -> bool {
        matches!(
            self,
            Flow::Next
                | Flow::CondJump(_)
                | Flow::Call {
                    noreturn: false,
                    ..
                }
        )
    }

    /// True if the instruction ends its block.
    pub(super) fn ends_block(self) -> bool {
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
pub(super) struct Decoded {
    pub(super) insns: Vec<Instruction>,
    pub(super) flows: Vec<Flow>,
    pub(super) ranges: Vec<(u64, u64)>,
}

impl Decoded {
    /// Decode `code` in a linear sweep; calls are asked of `env` whether they return.
    pub(super) fn new(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> Self {
        let mut decoded = Decoded::sweep(code);
        decoded.ask_calls(env);
        decoded
    }

    /// Decode `code` in a linear sweep, taking every call as one that returns.
    pub(super) fn sweep(code: &[CodeRange<'_>]) -> Self {
        let mut ranges: Vec<(u64, u64)> = code
            .iter()
            .filter(|r| !r.bytes.is_empty())
            .map(|r| (r.start, r.start.saturating_add(r.bytes.len() as u64)))
            .collect();
        ranges.sort_unstable();
        // x86-64 instructions average about four bytes in compiled code.
        let bytes: usize = code.iter().map(|r| r.bytes.len()).sum();
        let mut insns = Vec::with_capacity(bytes / 4 + 1);
        let mut sorted: Vec<&CodeRange<'_>> = code.iter().collect();
        sorted.sort_by_key(|r| r.start);
        for range in sorted {
            decode_range(range, &mut insns);
        }
        let blind = CfgEnv::blind();
        let flows = insns.iter().map(|i| classify(i, &blind)).collect();
        Decoded {
            insns,
            flows,
            ranges,
        }
    }

    /// Ask `env` about every call whether it returns.
    pub(super) fn ask_calls(&mut self, env: &CfgEnv<'_>) {
        for (insn, flow) in self.insns.iter().zip(&mut self.flows) {
            if let Flow::Call { noreturn, .. } = flow {
                *noreturn = call_never_returns(insn, env);
            }
        }
    }

    /// True when no control-flow graph of this code can have a cycle, whatever the calls do:
    /// every branch inside the code goes forward, past its own bytes, there is no indirect
    /// jump (a table may go anywhere) and every landing pad lies after the calls it catches.
    /// Blocks are ordered by address, so a cycle needs an edge to the same or an earlier block.
    pub(super) fn is_acyclic(&self, pads: &[LandingPad]) -> bool {
        let forward = self
            .insns
            .iter()
            .zip(&self.flows)
            .all(|(insn, flow)| match *flow {
                Flow::Indirect => false,
                Flow::Jump(t) | Flow::CondJump(t) => t >= insn.next_ip() || !self.contains(t),
                _ => true,
            });
        forward && pads.iter().all(|p| p.pad >= p.end)
    }

    pub(super) fn contains(&self, addr: u64) -> bool {
        self.ranges.iter().any(|&(s, e)| s <= addr && addr < e)
    }

    /// Index of the instruction starting exactly at `addr`.
    pub(super) fn index_of(&self, addr: u64) -> Option<usize> {
        self.insns.binary_search_by_key(&addr, Instruction::ip).ok()
    }

    /// Index of the instruction whose bytes include `addr`.
    pub(super) fn containing(&self, addr: u64) -> Option<usize> {
        let i = self
            .insns
            .partition_point(|x| x.ip() <= addr)
            .checked_sub(1)?;
        (addr < self.insns[i].next_ip()).then_some(i)
    }
}

/// How `insn` affects control flow; calls are asked of `env` whether they return.
pub(super) fn classify(insn: &Instruction, env: &CfgEnv<'_>) -> Flow {
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
        FlowControl::Call | FlowControl::IndirectCall => Flow::Call {
            target: near_target(insn),
            noreturn: call_never_returns(insn, env),
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

/// True if the call `insn` never returns by `env`: a direct call to a noreturn target, or
/// `call *slot(%rip)` (`-fno-plt`) through the GOT slot of a noreturn import.
pub(super) fn call_never_returns(insn: &Instruction, env: &CfgEnv<'_>) -> bool {
    match near_target(insn) {
        Some(t) => (env.is_noreturn)(t),
        None => insn.is_ip_rel_memory_operand() && (env.is_noreturn)(insn.ip_rel_memory_address()),
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
