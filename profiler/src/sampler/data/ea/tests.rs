//! Recovery on hand-assembled x86-64 code (bytes checked with `objdump -D -b binary`).

use std::ops::Range;

use super::function::{Layout, Position};
use super::{EaRecovery, GpRegs, ModuleCode, SAMPLE_REGS_GP};

/// Where the test code is linked.
const START: u64 = 0x1000;
/// A runtime bias as a PIE would have.
const BIAS: u64 = 0x5555_0000_0000;

/// Perf register numbers used below.
const AX: u8 = 0;
const DX: u8 = 3;
const SI: u8 = 4;
const DI: u8 = 5;

/// Code at [`START`] forming one function (or none, to test the fallback).
struct Code {
    bytes: Vec<u8>,
    functions: Vec<Range<u64>>,
}

impl Code {
    fn function(bytes: &[u8]) -> Code {
        let end = START + bytes.len() as u64;
        Code {
            bytes: bytes.to_vec(),
            functions: std::iter::once(START..end).collect(),
        }
    }
}

impl ModuleCode for Code {
    fn code_at(&self, svma: u64) -> Option<(u64, &[u8])> {
        (START..START + self.bytes.len() as u64)
            .contains(&svma)
            .then_some((START, &self.bytes[..]))
    }

    fn function_ranges(&self) -> Vec<Range<u64>> {
        self.functions.clone()
    }
}

/// Registers with distinct recognisable values: register n holds `0x1_0000 * (n + 1)`.
fn regs() -> GpRegs {
    let mut regs = GpRegs::default();
    for n in (0..24).filter(|n| SAMPLE_REGS_GP >> n & 1 != 0) {
        regs.set(n, 0x1_0000 * (u64::from(n) + 1));
    }
    regs
}

fn reg(n: u8) -> u64 {
    regs().get(n).unwrap()
}

/// The data address recovered for a sample at `ip` in `code`.
fn address(code: &Code, ip: u64) -> Option<u64> {
    EaRecovery::new().data_address(code, 7, ip, BIAS, &regs())
}

/// `addsd (%rdi),%xmm0; add $8,%rdi; cmp %rax,%rdi; jne 0x1000; ret`: arrsum's loop.
const SUM_LOOP: &[u8] = &[
    0xf2, 0x0f, 0x58, 0x07, 0x48, 0x83, 0xc7, 0x08, 0x48, 0x39, 0xc7, 0x75, 0xf3, 0xc3,
];

#[test]
fn skid_sample_after_the_load_gets_the_loads_address() {
    let code = Code::function(SUM_LOOP);
    assert_eq!(address(&code, 0x1004), Some(reg(DI)));
    // At the load itself (the loop head, a branch target) the load at ip is the candidate.
    assert_eq!(address(&code, 0x1000), Some(reg(DI)));
    // After `add $8,%rdi` (no memory) the candidate is `cmp` at ip: no memory either.
    assert_eq!(address(&code, 0x1008), None);
}

#[test]
fn without_a_function_only_the_instruction_at_ip_is_used() {
    let code = Code {
        functions: Vec::new(),
        ..Code::function(SUM_LOOP)
    };
    assert_eq!(address(&code, 0x1004), None);
    assert_eq!(address(&code, 0x1000), Some(reg(DI)));
}

#[test]
fn a_load_overwriting_its_own_base_gives_none() {
    // mov 0x18(%rax),%rax; nop
    let code = Code::function(&[0x48, 0x8b, 0x40, 0x18, 0x90]);
    assert_eq!(address(&code, 0x1004), None);
    assert_eq!(address(&code, 0x1000), Some(reg(AX) + 0x18));
}

#[test]
fn a_sub_register_write_clobbers_the_full_register() {
    // add (%rax),%al; nop
    assert_eq!(address(&Code::function(&[0x02, 0x00, 0x90]), 0x1002), None);
    // mov (%rdx),%ecx; nop: ecx is not the base
    assert_eq!(
        address(&Code::function(&[0x8b, 0x0a, 0x90]), 0x1002),
        Some(reg(DX))
    );
}

#[test]
fn rip_relative_loads_give_the_exact_runtime_address() {
    // mov 0x100(%rip),%rax; nop  (writes rax, which the operand does not use)
    let code = Code::function(&[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x90]);
    assert_eq!(address(&code, 0x1007), Some(0x1107 + BIAS));
}

#[test]
fn a_jump_target_at_ip_excludes_the_previous_instruction() {
    // mov (%rsi),%rax; L: add $1,%rcx; jne L; ret
    let code = Code::function(&[0x48, 0x8b, 0x06, 0x48, 0x83, 0xc1, 0x01, 0x75, 0xfa, 0xc3]);
    assert_eq!(address(&code, 0x1003), None);
    // The same bytes with no jump back (jne replaced by two nops) charge the load.
    let straight = Code::function(&[0x48, 0x8b, 0x06, 0x48, 0x83, 0xc1, 0x01, 0x90, 0x90, 0xc3]);
    assert_eq!(address(&straight, 0x1003), Some(reg(SI)));
}

#[test]
fn lea_is_not_an_access() {
    // lea 0x8(%rdi),%rax; mov (%rsi),%rdx
    let code = Code::function(&[0x48, 0x8d, 0x47, 0x08, 0x48, 0x8b, 0x16]);
    assert_eq!(address(&code, 0x1004), Some(reg(SI)));
}

#[test]
fn fs_based_and_gathers_give_none() {
    // mov %fs:0x28,%rax; nop
    let tls = Code::function(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0, 0x90]);
    assert_eq!(address(&tls, 0x1009), None);
    // vpgatherdd %xmm2,(%rdi,%xmm1,4),%xmm0; nop
    let gather = Code::function(&[0xc4, 0xe2, 0x69, 0x90, 0x04, 0x8f, 0x90]);
    assert_eq!(address(&gather, 0x1006), None);
}

#[test]
fn the_instruction_after_a_call_starts_a_block() {
    // call *0x10(%rax); mov (%rsi),%rdx: the callee may have changed rax
    let code = Code::function(&[0xff, 0x50, 0x10, 0x48, 0x8b, 0x16]);
    assert_eq!(address(&code, 0x1003), Some(reg(SI)));
}

#[test]
fn push_is_no_data_access_and_rep_movs_in_progress_charges_its_source() {
    // mov (%rax),%rcx; rep movsb; push %rbx; mov (%rdi),%rax
    let code = Code::function(&[0x48, 0x8b, 0x08, 0xf3, 0xa4, 0x53, 0x48, 0x8b, 0x07]);
    assert_eq!(address(&code, 0x1003), Some(reg(SI)));
    assert_eq!(address(&code, 0x1006), Some(reg(DI)));
}

#[test]
fn missing_registers_give_none_and_recipes_are_cached() {
    let code = Code::function(SUM_LOOP);
    let mut ea = EaRecovery::new();
    assert_eq!(
        ea.data_address(&code, 1, 0x1004, 0, &GpRegs::default()),
        None
    );
    assert_eq!(ea.data_address(&code, 1, 0x1004, 0, &regs()), Some(reg(DI)));
    assert_eq!(ea.recipes.len(), 1);
    assert_eq!(ea.layouts.len(), 1);
}

#[test]
fn layout_marks_targets_and_instructions_after_branches() {
    let layout = Layout::decode(START, SUM_LOOP);
    assert_eq!(layout.instruction_count(), 5);
    assert_eq!(layout.position(0x1000), Position::BlockStart);
    assert_eq!(layout.position(0x1004), Position::After(0x1000));
    assert_eq!(layout.position(0x100b), Position::After(0x1008));
    assert_eq!(layout.position(0x100d), Position::BlockStart);
    assert_eq!(layout.position(0x1002), Position::Unknown);
}

#[test]
fn registers_are_read_from_a_sample_by_perf_number() {
    use linux_perf_event_reader::{RawData, RawDataU64, Regs};
    // The recorder may sample more registers than the mask (flags, bit 9, here).
    let mask = SAMPLE_REGS_GP | 1 << 9;
    let sampled: Vec<u64> = (0..24).filter(|n| mask >> n & 1 != 0).collect();
    let bytes: Vec<u8> = sampled
        .iter()
        .flat_map(|n| (n * 10).to_ne_bytes())
        .collect();
    let raw = RawDataU64::from_raw_data::<byteorder::NativeEndian>(RawData::Single(&bytes));
    let gp = GpRegs::from_sample(&Regs::new(mask, raw));
    assert_eq!(gp.get(DI), Some(50));
    assert_eq!(gp.get(8), Some(80));
    assert_eq!(gp.get(23), Some(230));
    assert_eq!(gp.get(9), None);
    assert_eq!(gp.get(24), None);
}
