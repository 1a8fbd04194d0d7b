//! Which memory operand a sample is charged to, and how its address follows from the sample's
//! registers: decided once per instruction address and kept as a [`Recipe`].

use iced_x86::{Instruction, InstructionInfo, InstructionInfoFactory, OpAccess, OpKind, Register};

use super::GpRegs;

/// How to compute a sample's data address from its registers: fixed per (module, ip), so a
/// sample costs one lookup and a multiply-add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recipe {
    /// No data address: no memory operand, or one this module does not compute.
    None,
    /// A RIP-relative operand: this link-time address plus the module's runtime bias.
    Linked(u64),
    /// `base + index * scale + disp`, registers in perf numbering; with neither register, the
    /// displacement is an absolute (already runtime) address.
    Registers {
        base: Option<u8>,
        index: Option<u8>,
        scale: u8,
        disp: u64,
    },
}

impl Recipe {
    /// The data address for one sample; `None` when the recipe is `None` or a register it needs
    /// is missing from the sample.
    pub(super) fn evaluate(self, bias: u64, regs: &GpRegs) -> Option<u64> {
        match self {
            Recipe::None => None,
            Recipe::Linked(svma) => Some(svma.wrapping_add(bias)),
            Recipe::Registers {
                base,
                index,
                scale,
                disp,
            } => {
                let value = |r: Option<u8>| r.map_or(Some(0), |r| regs.get(r));
                let scaled = value(index)?.wrapping_mul(u64::from(scale));
                Some(value(base)?.wrapping_add(scaled).wrapping_add(disp))
            }
        }
    }

    /// Whether the recipe reads perf register `reg`.
    fn reads(self, reg: u8) -> bool {
        matches!(self, Recipe::Registers { base, index, .. } if base == Some(reg) || index == Some(reg))
    }
}

/// What one instruction does with data memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// No data access: register operands only, `lea` and multi-byte `nop` (address operands
    /// that touch nothing), and the implicit stack slot of push/pop/call/ret, which is
    /// deliberately not counted as a data access.
    NoData,
    /// A data access whose address is computable from the registers the instruction reads.
    Computable(Recipe),
    /// A data access whose address is not computable here: `fs`/`gs` segments (the sample has no
    /// segment base), VSIB gathers/scatters (the index is a vector), 16/32-bit addressing, `xlat`.
    Opaque,
}

/// The recipe for a sample whose ip is `at`'s address, given the instruction before it in the
/// same basic block (`prev`), if one is known.
///
/// Timer skid puts the sample on the instruction after the one that stalled, so `prev` is the
/// candidate when it accesses memory; its address is computable only when the registers it used
/// are not written by `prev` itself (the only instruction executed between it and the sample).
/// Otherwise the candidate is the instruction at ip, whose registers are exactly as sampled. An
/// exception: a `rep` string instruction at ip is in progress (ip stays on it between
/// iterations), so it is the candidate and `rsi`/`rdi` point at its next element.
pub(super) fn choose(
    prev: Option<&Instruction>,
    at: &Instruction,
    factory: &mut InstructionInfoFactory,
) -> Recipe {
    let repeating = at.is_string_instruction() && (at.has_rep_prefix() || at.has_repne_prefix());
    if let (Some(prev), false) = (prev, repeating) {
        let info = factory.info(prev);
        match access(prev, info) {
            Access::NoData => {}
            Access::Opaque => return Recipe::None,
            Access::Computable(recipe) if clobbers(info, recipe) => return Recipe::None,
            Access::Computable(recipe) => return recipe,
        }
    }
    match access(at, factory.info(at)) {
        Access::Computable(recipe) => recipe,
        Access::NoData | Access::Opaque => Recipe::None,
    }
}

/// Whether the instruction writes (fully, partly or conditionally) a register `recipe` reads: a
/// write to `eax`, `ax` or `al` counts as a write to `rax`.
fn clobbers(info: &InstructionInfo, recipe: Recipe) -> bool {
    info.used_registers().iter().any(|used| {
        let written = matches!(
            used.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        );
        written && perf_number(used.register().full_register()).is_some_and(|r| recipe.reads(r))
    })
}

/// The instruction's data access: its first memory operand that is read, else the first that
/// is written (a load is what a stalled sample usually waits for; `movs` charges its source).
fn access(instr: &Instruction, info: &InstructionInfo) -> Access {
    let mut written = None;
    for operand in 0..instr.op_count() {
        let op_access = info.op_access(operand);
        if matches!(op_access, OpAccess::None | OpAccess::NoMemAccess) {
            continue;
        }
        let Some(found) = operand_access(instr, instr.op_kind(operand)) else {
            continue;
        };
        let reads = matches!(
            op_access,
            OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        );
        if reads {
            return found;
        }
        written.get_or_insert(found);
    }
    written.unwrap_or(Access::NoData)
}

/// The access made through one operand of kind `kind`; `None` for a non-memory operand.
fn operand_access(instr: &Instruction, kind: OpKind) -> Option<Access> {
    let string = |reg| {
        if segment_based(instr) {
            Access::Opaque
        } else {
            registers(reg, Register::None, 1, 0)
        }
    };
    Some(match kind {
        OpKind::Memory => explicit_memory(instr),
        OpKind::MemorySegRSI => string(Register::RSI),
        OpKind::MemorySegRDI => string(Register::RDI),
        OpKind::MemoryESRDI => registers(Register::RDI, Register::None, 1, 0),
        OpKind::MemorySegSI
        | OpKind::MemorySegESI
        | OpKind::MemorySegDI
        | OpKind::MemorySegEDI
        | OpKind::MemoryESDI
        | OpKind::MemoryESEDI => Access::Opaque,
        _ => return None,
    })
}

/// A `[base + index * scale + disp]` or `[rip + disp]` operand.
fn explicit_memory(instr: &Instruction) -> Access {
    if instr.is_vsib() || segment_based(instr) {
        return Access::Opaque;
    }
    match instr.memory_base() {
        // iced-x86 keeps a RIP-relative operand's absolute (link-time) address as displacement.
        Register::RIP => Access::Computable(Recipe::Linked(instr.memory_displacement64())),
        Register::EIP => Access::Opaque,
        base => registers(
            base,
            instr.memory_index(),
            instr.memory_index_scale(),
            instr.memory_displacement64(),
        ),
    }
}

/// Whether the operand is addressed through `fs` or `gs`, whose bases the sample lacks.
fn segment_based(instr: &Instruction) -> bool {
    matches!(instr.memory_segment(), Register::FS | Register::GS)
}

/// The recipe for 64-bit base and index registers (`Register::None` for absent ones).
fn registers(base: Register, index: Register, scale: u32, disp: u64) -> Access {
    let number = |r: Register| match r {
        Register::None => Some(None),
        r => perf_number(r).map(Some),
    };
    match (number(base), number(index), u8::try_from(scale)) {
        (Some(base), Some(index), Ok(scale)) => Access::Computable(Recipe::Registers {
            base,
            index,
            scale,
            disp,
        }),
        _ => Access::Opaque,
    }
}

/// A 64-bit general-purpose register's number in perf's x86 register numbering.
fn perf_number(reg: Register) -> Option<u8> {
    Some(match reg {
        Register::RAX => 0,
        Register::RBX => 1,
        Register::RCX => 2,
        Register::RDX => 3,
        Register::RSI => 4,
        Register::RDI => 5,
        Register::RBP => 6,
        Register::RSP => 7,
        Register::R8 => 16,
        Register::R9 => 17,
        Register::R10 => 18,
        Register::R11 => 19,
        Register::R12 => 20,
        Register::R13 => 21,
        Register::R14 => 22,
        Register::R15 => 23,
        _ => return None,
    })
}
