//! Receivers of allocations (SIGMA's "receiver hint"): the variable an allocation's pointer
//! is put in, read from the code right after the allocation call.
//!
//! From the call's return address, instructions are decoded forward while the returned pointer
//! is known to be in a register: `rax` at first, plus every register it is copied into with a
//! 64-bit `mov`, minus every register written otherwise. The walk stops at the first branch,
//! call or return (what follows may not run), at an undecodable instruction, when no register
//! holds the pointer any more, or after [`MAX_INSTRUCTIONS`]. On the way, the first of these
//! names the receiver:
//! - a variable whose DWARF location at that address is one of the registers holding the
//!   pointer: [`Receiver::Local`];
//! - a 64-bit store of such a register to a fixed address (RIP-relative, or absolute) that
//!   starts a static variable, or a pointer-sized member or element of one:
//!   [`Receiver::Static`].
//!
//! Both are exact: nothing is inferred beyond what the code and DWARF state. Not recognised:
//! a store to the stack (a spilled local whose slot DWARF gives relative to the CFA: the CFA at
//! that address would need the unwind tables), a store through a pointer loaded from the GOT
//! (globals of a shared library reached through `-fPIC` code), a store to a heap object.

use super::DataLayout;
use crate::binary::{self, CodeSection, LoadedFile};
use crate::error::StructureError;
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};
use profiler::addr::Svma;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How many instructions after an allocation call are looked at.
pub const MAX_INSTRUCTIONS: usize = 16;

/// The most bytes those instructions can take (15 bytes each at most).
const MAX_BYTES: u64 = 15 * MAX_INSTRUCTIONS as u64;

/// The variable an allocation's returned pointer is put in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Receiver {
    /// A static variable, or a pointer-sized part of one (`grid`, `table.rows`,
    /// `slots[3]`).
    Static(String),
    /// A local variable (or parameter) of a function or inlined function.
    Local {
        /// The variable.
        name: String,
        /// The function or inlined function declaring it.
        function: String,
    },
}

impl DataLayout {
    /// For each of `returns`, the return address of an allocation call (the instruction right
    /// after `call malloc`) in the ELF file at `path` (the file this layout was read from),
    /// the receiver of the pointer it returns, where the code and DWARF state it exactly
    /// (module docs); `None` otherwise.
    pub fn receivers(
        &self,
        path: &Path,
        returns: &[Svma],
    ) -> Result<Vec<Option<Receiver>>, StructureError> {
        let loaded = LoadedFile::open(path)?;
        let file = loaded.parse()?;
        let code = binary::code_sections(&file);
        Ok(returns.iter().map(|&ra| self.receiver(&code, ra)).collect())
    }

    /// The receiver of the pointer returned to `ra`.
    fn receiver(&self, code: &[CodeSection<'_>], ra: Svma) -> Option<Receiver> {
        let section = code.iter().find(|c| c.contains(ra.0))?;
        let end = section.address + section.bytes.len() as u64;
        let bytes = section.slice(ra.0, end.min(ra.0.saturating_add(MAX_BYTES)))?;
        let mut decoder = Decoder::with_ip(64, bytes, ra.0, DecoderOptions::NONE);
        let mut factory = InstructionInfoFactory::new();
        let mut held = Held(1 << RAX);
        let mut insn = Instruction::default();
        for _ in 0..MAX_INSTRUCTIONS {
            if !decoder.can_decode() {
                return None;
            }
            decoder.decode_out(&mut insn);
            if insn.is_invalid() {
                return None;
            }
            let pc = insn.ip();
            if let Some(found) = held.iter().find_map(|r| self.frames.in_register(pc, r)) {
                return Some(Receiver::Local {
                    name: found.var.name.clone(),
                    function: found.scope.to_string(),
                });
            }
            if insn.flow_control() != FlowControl::Next {
                return None;
            }
            if let Some(name) = stored_to(&insn, held).and_then(|a| self.pointer_slot(a)) {
                return Some(Receiver::Static(name));
            }
            held = held.after(&insn, &mut factory);
            if held.0 == 0 {
                return None;
            }
        }
        None
    }

    /// The name of the static pointer-sized slot starting at `addr`: a whole 8-byte variable,
    /// or a member or element of one (`table.rows`, `slots[3]`).
    fn pointer_slot(&self, addr: Svma) -> Option<String> {
        let (var, offset) = self.static_at(addr)?;
        match var.ty.and_then(|t| self.part_at(t, offset)) {
            Some(part) if part.offset == offset && part.size == 8 => {
                let dot = if part.path.starts_with('[') { "" } else { "." };
                Some(format!("{}{dot}{}", var.name, part.path))
            }
            None if offset == 0 && var.size == 8 => Some(var.name.clone()),
            _ => None,
        }
    }
}

/// DWARF number of `rax`.
const RAX: u16 = 0;

/// The general-purpose registers holding the pointer, by DWARF number (bit n: register n).
#[derive(Clone, Copy)]
struct Held(u16);

impl Held {
    fn contains(self, r: u16) -> bool {
        r < 16 && self.0 & (1 << r) != 0
    }

    /// Register numbers, rax first.
    fn iter(self) -> impl Iterator<Item = u16> {
        (0..16).filter(move |&r| self.contains(r))
    }

    /// Which registers hold the pointer after `insn`.
    fn after(self, insn: &Instruction, factory: &mut InstructionInfoFactory) -> Held {
        if let Some((to, from)) = copy64(insn) {
            if self.contains(from) {
                return Held(self.0 | (1 << to));
            }
        }
        let mut held = self.0;
        for used in factory.info(insn).used_registers() {
            let written = matches!(
                used.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            );
            if let (true, Some(r)) = (written, dwarf_number(used.register())) {
                held &= !(1 << r);
            }
        }
        Held(held)
    }
}

/// `mov reg64, reg64`: (destination, source) DWARF numbers.
fn copy64(insn: &Instruction) -> Option<(u16, u16)> {
    let regs = insn.mnemonic() == Mnemonic::Mov
        && insn.op_count() == 2
        && insn.op0_kind() == OpKind::Register
        && insn.op1_kind() == OpKind::Register
        && insn.op0_register().is_gpr64()
        && insn.op1_register().is_gpr64();
    regs.then(|| {
        Some((
            dwarf_number(insn.op0_register())?,
            dwarf_number(insn.op1_register())?,
        ))
    })
    .flatten()
}

/// The fixed address `insn` stores a 64-bit register of `held` to (`mov %rax, grid(%rip)`,
/// or an absolute address), if it is such a store.
fn stored_to(insn: &Instruction, held: Held) -> Option<Svma> {
    let store = insn.mnemonic() == Mnemonic::Mov
        && insn.op_count() == 2
        && insn.op0_kind() == OpKind::Memory
        && insn.op1_kind() == OpKind::Register
        && insn.op1_register().is_gpr64()
        && insn.segment_prefix() == Register::None;
    if !store || !dwarf_number(insn.op1_register()).is_some_and(|r| held.contains(r)) {
        return None;
    }
    if insn.is_ip_rel_memory_operand() {
        Some(Svma(insn.ip_rel_memory_address()))
    } else if insn.memory_base() == Register::None && insn.memory_index() == Register::None {
        Some(Svma(insn.memory_displacement64()))
    } else {
        None
    }
}

/// The DWARF number of the general-purpose register that `reg` is (part of).
fn dwarf_number(reg: Register) -> Option<u16> {
    // DWARF's x86-64 numbering: rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8..r15.
    const ORDER: [Register; 16] = [
        Register::RAX,
        Register::RDX,
        Register::RCX,
        Register::RBX,
        Register::RSI,
        Register::RDI,
        Register::RBP,
        Register::RSP,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    let full = reg.full_register();
    ORDER.iter().position(|&r| r == full).map(|n| n as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<Instruction> {
        let mut d = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE);
        let mut out = Vec::new();
        while d.can_decode() {
            out.push(d.decode());
        }
        out
    }

    #[test]
    fn copies_and_clobbers_track_the_pointer() {
        let mut f = InstructionInfoFactory::new();
        // mov %rax,%rbx; mov $0,%eax; pop %rbp
        let insns = decode(&[0x48, 0x89, 0xc3, 0xb8, 0, 0, 0, 0, 0x5d]);
        let held = Held(1 << RAX).after(&insns[0], &mut f);
        assert!(held.contains(0) && held.contains(3));
        let held = held.after(&insns[1], &mut f);
        assert!(!held.contains(0), "mov to eax overwrites rax");
        assert!(held.contains(3));
        let held = held.after(&insns[2], &mut f);
        assert!(held.contains(3) && !held.contains(6));
    }

    #[test]
    fn stores_to_fixed_addresses() {
        // mov %rax,0x2d6b(%rip) at 0x1000 (7 bytes): stores to 0x3d72.
        let insns = decode(&[0x48, 0x89, 0x05, 0x6b, 0x2d, 0, 0]);
        assert_eq!(stored_to(&insns[0], Held(1 << RAX)), Some(Svma(0x3d72)));
        assert_eq!(
            stored_to(&insns[0], Held(1 << 3)),
            None,
            "rax does not hold it"
        );
        // mov %rax,(%rdx): through a register, not a fixed address.
        let insns = decode(&[0x48, 0x89, 0x02]);
        assert_eq!(stored_to(&insns[0], Held(1 << RAX)), None);
        // mov %eax,0x10(%rip): 32 bits of the pointer only.
        let insns = decode(&[0x89, 0x05, 0x10, 0, 0, 0]);
        assert_eq!(stored_to(&insns[0], Held(1 << RAX)), None);
    }
}
