//! Effective-address recovery: the data address a timer (`cpu-clock`) sample was waiting on,
//! computed from the sample's user registers and the machine code around its ip, with no PMU.
//!
//! Timer skid puts a sample on the instruction after the one that was executing. So the
//! candidate is the instruction just before ip in the same basic block when that one accesses
//! data memory, else the instruction at ip. Its memory operand `base + index * scale + disp` is
//! exact when the candidate is at ip (nothing ran since), or when the previous instruction did
//! not write its base or index (a write to `eax`, `ax` or `al` counts as one to `rax`), so
//! `mov 0x18(%rax),%rax` before ip gives no address. RIP-relative operands are always exact.
//! Measured on this project's fixtures, the recovered addresses split `cpu-clock` samples
//! between two objects exactly as the fixtures' own CPU-time measurements do (design note
//! `data-centric.md` §2.6, tests in `real_tests`).
//!
//! Conservative choices, each giving no address rather than a guess:
//! - `fs`/`gs`-based operands (the sample has no segment bases), VSIB gathers and scatters (the
//!   index is a vector register), 16/32-bit addressing, `xlat`;
//! - the previous instruction when it is a block end (branch, call, return, syscall) or ip is a
//!   direct branch target, since the registers then come from another path. Indirect-jump
//!   targets (switch tables, landing pads) are not known and are treated as straight-line code.
//!
//! And what is deliberately not a data access: `lea` and multi-byte `nop` (address operands
//! that touch nothing) and the implicit stack slot of push/pop/call/ret; the instruction at ip is
//! then the candidate. String instructions use `rsi` (source: `movs`, `lods`, `cmps`) or `rdi`
//! (`stos`, `scas`); they advance both, so only the one at ip counts, and a `rep` string
//! instruction at ip (in progress: ip stays on it between iterations) is the candidate even when
//! the previous instruction accesses memory.
//!
//! Instruction boundaries before ip are known by decoding each sampled function once from its
//! entry (`STT_FUNC` symbols or `.eh_frame` FDEs); where no function holds ip, or the decode does
//! not reach ip, only the instruction at ip is used. The answer for each (module, ip) is kept as
//! a small recipe, so later samples cost a hash lookup and a multiply-add.
//!
//! The recorder's events must sample the [`SAMPLE_REGS_GP`] user registers.

mod function;
mod operand;
#[cfg(test)]
mod real_tests;
#[cfg(test)]
mod tests;

use std::ops::Range;

use fxhash::FxHashMap;
use iced_x86::{Decoder, DecoderOptions, Instruction, InstructionInfoFactory};

use crate::sampler::unwinding::image::Image;
use function::{FunctionMap, Layout, Position};
use operand::Recipe;

pub(crate) use crate::sampler::capture::perf::SAMPLE_REGS_GP;

/// One sample's general-purpose registers, by perf register number.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpRegs {
    values: [u64; 24],
    present: u32,
}

impl GpRegs {
    /// The registers of [`SAMPLE_REGS_GP`] that a sample carries.
    pub fn from_sample(regs: &linux_perf_event_reader::Regs<'_>) -> GpRegs {
        let mut gp = GpRegs::default();
        for reg in (0..24).filter(|r| SAMPLE_REGS_GP >> r & 1 != 0) {
            if let Some(value) = regs.get(reg) {
                gp.set(reg as u8, value);
            }
        }
        gp
    }

    /// Set perf register `reg` (below 24) to `value`.
    pub fn set(&mut self, reg: u8, value: u64) {
        self.values[usize::from(reg)] = value;
        self.present |= 1 << reg;
    }

    /// Perf register `reg`'s value, if the sample has it.
    pub fn get(&self, reg: u8) -> Option<u64> {
        (reg < 24 && self.present >> reg & 1 != 0).then(|| self.values[usize::from(reg)])
    }
}

/// What the recovery needs from a load module: its code bytes and where its functions are.
pub trait ModuleCode {
    /// The executable bytes holding link-time address `svma`, with the link-time address of
    /// their first byte.
    fn code_at(&self, svma: u64) -> Option<(u64, &[u8])>;
    /// The link-time ranges of the module's functions, in any order (read once per module).
    fn function_ranges(&self) -> Vec<Range<u64>>;
}

impl ModuleCode for Image {
    fn code_at(&self, svma: u64) -> Option<(u64, &[u8])> {
        Image::code_at(self, svma)
    }

    fn function_ranges(&self) -> Vec<Range<u64>> {
        self.elf()
            .map_or_else(Vec::new, |elf| function::elf_function_ranges(&elf))
    }
}

/// The recovery's caches: per module its function map, per sampled function its decoded
/// layout, per sampled ip its recipe.
pub struct EaRecovery {
    recipes: FxHashMap<(u32, u64), Recipe>,
    functions: FxHashMap<u32, FunctionMap>,
    layouts: FxHashMap<(u32, u64), Layout>,
    factory: InstructionInfoFactory,
}

impl Default for EaRecovery {
    fn default() -> EaRecovery {
        EaRecovery::new()
    }
}

impl EaRecovery {
    /// Empty caches.
    pub fn new() -> EaRecovery {
        EaRecovery {
            recipes: FxHashMap::default(),
            functions: FxHashMap::default(),
            layouts: FxHashMap::default(),
            factory: InstructionInfoFactory::new(),
        }
    }

    /// The runtime data address of the sample at link-time address `ip_svma` in `module`
    /// (`module_key` names it in the caches; `bias` = runtime minus link-time address, added to
    /// RIP-relative results), or `None` when it cannot be known.
    pub fn data_address<M: ModuleCode + ?Sized>(
        &mut self,
        module: &M,
        module_key: u32,
        ip_svma: u64,
        bias: u64,
        regs: &GpRegs,
    ) -> Option<u64> {
        let recipe = match self.recipes.get(&(module_key, ip_svma)) {
            Some(&recipe) => recipe,
            None => {
                let recipe = self.derive(module, module_key, ip_svma);
                self.recipes.insert((module_key, ip_svma), recipe);
                recipe
            }
        };
        recipe.evaluate(bias, regs)
    }

    /// Decode the instruction at `ip` and the one before it in its block, and choose.
    fn derive<M: ModuleCode + ?Sized>(&mut self, module: &M, key: u32, ip: u64) -> Recipe {
        let Some((code_start, code)) = module.code_at(ip) else {
            return Recipe::None;
        };
        let Some(at) = decode_at(code_start, code, ip) else {
            return Recipe::None;
        };
        let prev = match self.position(module, key, ip, code_start, code) {
            Position::After(prev) => decode_at(code_start, code, prev),
            Position::BlockStart | Position::Unknown => None,
        };
        operand::choose(prev.as_ref(), &at, &mut self.factory)
    }

    /// Where `ip` sits in its function, decoding the function on first use.
    fn position<M: ModuleCode + ?Sized>(
        &mut self,
        module: &M,
        key: u32,
        ip: u64,
        code_start: u64,
        code: &[u8],
    ) -> Position {
        let functions = self
            .functions
            .entry(key)
            .or_insert_with(|| FunctionMap::new(module.function_ranges()));
        let Some(range) = functions.containing(ip) else {
            return Position::Unknown;
        };
        let Some(bytes) = slice(code_start, code, range.clone()) else {
            return Position::Unknown;
        };
        self.layouts
            .entry((key, range.start))
            .or_insert_with(|| Layout::decode(range.start, bytes))
            .position(ip)
    }
}

/// The bytes of link-time range `range` within code starting at `code_start`, cut at the code's
/// end; `None` if the range does not start inside it.
fn slice(code_start: u64, code: &[u8], range: Range<u64>) -> Option<&[u8]> {
    let start = usize::try_from(range.start.checked_sub(code_start)?).ok()?;
    let len = usize::try_from(range.end - range.start).ok()?;
    code.get(start..start.saturating_add(len).min(code.len()))
}

/// The instruction at link-time address `ip`, if it decodes.
fn decode_at(code_start: u64, code: &[u8], ip: u64) -> Option<Instruction> {
    let bytes = slice(code_start, code, ip..ip.saturating_add(15))?;
    let instr = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
    (!instr.is_invalid()).then_some(instr)
}
