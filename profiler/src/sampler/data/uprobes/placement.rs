//! Where in an allocator function its entry probe goes: on the first instruction the kernel
//! emulates, when only harmless instructions come before it.
//!
//! A uprobe replaces an instruction with a breakpoint. When it is hit, the kernel either
//! emulates the displaced instruction in the trap handler, or copies it to a page of the process
//! and single-steps it there (a second trap). On x86-64 the kernel emulates (see
//! `branch_setup_xol_ops` and `push_setup_xol_ops` in `arch/x86/kernel/uprobes.c`): `jmp rel8`,
//! `jmp rel32`, `call rel32`, the conditional jumps `jcc rel8` and `jcc rel32` (none with an
//! operand-size prefix `0x66`), `nop` (`0x90`), and `push reg` (`0x50`-`0x57`, alone or after the
//! REX prefix `0x41` alone). Everything else is single-stepped, which costs 20 times more.
//! Measured on this project's VM (2 CPUs, kernel 6.18, static glibc 2.36; `scripts/probecost.c`,
//! 200,000 calls, probes sampling registers only): `free` probed on its first instruction
//! (`test %rdi,%rdi`, single-stepped) 17.5-19 µs per hit, on the `je` after it 0.75-0.8 µs;
//! `malloc`'s entry (`push`) 0.85-1.0 µs, its return 1.2-1.5 µs; a malloc+free pair 18.3-20 µs
//! with `free` probed at its entry, 2.3-3.0 µs on the `je`.
//!
//! So the probe moves past a short run of leading instructions when every one of them is
//! *transparent*: straight-line (no branch, call or return), writing no memory and none of the
//! registers a probe samples or depends on (the argument registers `rdi`, `rsi`, `rdx`, `rcx`,
//! the frame pointer `rbp` and the stack pointer `rsp`). Every call then reaches the probe
//! exactly once, with the registers and the stack exactly as they were at the entry: `[rsp]` is
//! still the return address, so the return probe (which replaces that word) can go to the same
//! place, and the two share one breakpoint. Where no emulated instruction follows such a run
//! within [`MAX_SKIPPED`] instructions, the probe stays on the first instruction.
//!
//! glibc 2.36's allocator (this VM, dynamic and static): `free` starts `test %rdi,%rdi; je`
//! (probe on the `je`, +3); `memalign`, `valloc`, `pvalloc` and `posix_memalign` start with a
//! RIP-relative `cmpb $0,__malloc_initialized` (single-stepped) and then a `je` or a `push` (+7);
//! `malloc`, `calloc` and `realloc` start with a `push` and keep their entry.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpAccess, Register,
};

/// The most leading instructions a probe moves past.
pub(crate) const MAX_SKIPPED: usize = 4;

/// The byte offset from a function's first instruction (`code`, at link-time address `addr`)
/// at which its probe goes: the first emulated instruction after a run of transparent ones, or
/// 0.
pub(crate) fn probe_offset(code: &[u8], addr: u64) -> u64 {
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut instr = Instruction::default();
    for _ in 0..=MAX_SKIPPED {
        if !decoder.can_decode() {
            break;
        }
        let at = decoder.position();
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            break;
        }
        let bytes = &code[at..at + instr.len()];
        if emulated(bytes) {
            return at as u64;
        }
        if !transparent(&instr, &mut info) {
            break;
        }
    }
    0
}

/// Whether the kernel emulates the instruction `bytes` instead of single-stepping it (the rules
/// of `branch_setup_xol_ops` and `push_setup_xol_ops`, x86-64).
pub(crate) fn emulated(bytes: &[u8]) -> bool {
    let legacy = |b: u8| {
        matches!(
            b,
            0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65
        )
    };
    let prefixes = bytes.iter().take_while(|&&b| legacy(b)).count();
    let (legacy_prefixes, rest) = bytes.split_at(prefixes);
    let (rex, opcode) = match rest.split_first() {
        Some((&b, tail)) if (0x40..=0x4f).contains(&b) => (Some(b), tail),
        _ => (None, rest),
    };
    let Some(&op) = opcode.first() else {
        return false;
    };
    // push reg: one byte, or REX.B (0x41) and one byte; nothing else before it.
    if (0x50..=0x57).contains(&op) && legacy_prefixes.is_empty() {
        return opcode.len() == 1 && matches!(rex, None | Some(0x41));
    }
    // Branches and nop: the kernel refuses (and fails to probe) them with an operand-size
    // prefix; REX would make 0x90 `xchg`, so only bare nops count.
    if legacy_prefixes.contains(&0x66) {
        return false;
    }
    match op {
        0xeb | 0xe9 | 0xe8 | 0x70..=0x7f => true,
        0x90 => rex.is_none() && legacy_prefixes.is_empty(),
        0x0f => opcode.get(1).is_some_and(|op2| (0x80..=0x8f).contains(op2)),
        _ => false,
    }
}

/// Whether a probe may move past `instr`: it neither branches nor writes memory nor writes a
/// register the probe samples or relies on.
fn transparent(instr: &Instruction, factory: &mut InstructionInfoFactory) -> bool {
    if instr.flow_control() != FlowControl::Next || instr.has_lock_prefix() {
        return false;
    }
    let info = factory.info(instr);
    let writes = |access: OpAccess| {
        matches!(
            access,
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        )
    };
    if info.used_memory().iter().any(|m| writes(m.access())) {
        return false;
    }
    const KEPT: [Register; 6] = [
        Register::RDI,
        Register::RSI,
        Register::RDX,
        Register::RCX,
        Register::RBP,
        Register::RSP,
    ];
    !info
        .used_registers()
        .iter()
        .any(|r| writes(r.access()) && KEPT.contains(&r.register().full_register()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_emulated_instructions_are_recognised() {
        for bytes in [
            &[0x55][..],                  // push %rbp
            &[0x41, 0x54],                // push %r12
            &[0x74, 0x07],                // je rel8
            &[0x0f, 0x84, 0xbf, 0, 0, 0], // je rel32
            &[0xe9, 1, 2, 3, 4],          // jmp rel32
            &[0xeb, 0x10],                // jmp rel8
            &[0xe8, 0, 0, 0, 0],          // call rel32
            &[0x90],                      // nop
        ] {
            assert!(emulated(bytes), "{bytes:x?}");
        }
        for bytes in [
            &[0x48, 0x85, 0xff][..],         // test %rdi,%rdi
            &[0x80, 0x3d, 1, 2, 3, 4, 0],    // cmpb $0,x(%rip)
            &[0x66, 0x90],                   // xchg %ax,%ax (refused by the kernel)
            &[0x66, 0x0f, 0x84, 0, 0, 0, 0], // je with 0x66
            &[0x41, 0x90],                   // xchg %r8,%rax
            &[0x48, 0x55],                   // push with REX.W
            &[0x0f, 0x1f, 0x44, 0, 0],       // nopl: not among them
            &[0x48, 0x89, 0xfd],             // mov %rdi,%rbp
            &[0xc3],                         // ret
            &[0xf3, 0x0f, 0x1e, 0xfa],       // endbr64
        ] {
            assert!(!emulated(bytes), "{bytes:x?}");
        }
    }

    #[test]
    fn probes_move_past_harmless_instructions_to_an_emulated_one() {
        // glibc 2.36 free: test %rdi,%rdi; je +0xbf; push %rbp
        let free = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55];
        assert_eq!(probe_offset(&free, 0x416ec0), 3);
        // posix_memalign: cmpb $0x0,x(%rip); push %r12
        let pm = [0x80, 0x3d, 0xc9, 0x2f, 0x09, 0x00, 0x00, 0x41, 0x54];
        assert_eq!(probe_offset(&pm, 0x418210), 7);
        // malloc: push %rbp first: stays.
        assert_eq!(probe_offset(&[0x55, 0x48, 0x89, 0xfd], 0x416910), 0);
    }

    #[test]
    fn probes_stay_at_the_entry_when_what_comes_first_matters() {
        // mov %rsi,%rdi; push %rbx: the argument is overwritten before the push.
        assert_eq!(probe_offset(&[0x48, 0x89, 0xf7, 0x53], 0x1000), 0);
        // sub $0x18,%rsp; push %rbx: the stack pointer moved.
        assert_eq!(probe_offset(&[0x48, 0x83, 0xec, 0x18, 0x53], 0x1000), 0);
        // mov %rax,(%rdi); push %rbx: a store.
        assert_eq!(probe_offset(&[0x48, 0x89, 0x07, 0x53], 0x1000), 0);
        // ret; push: a branch first.
        assert_eq!(probe_offset(&[0xc3, 0x53], 0x1000), 0);
        // endbr64 is not emulated, but harmless: the push after it gets the probe.
        assert_eq!(probe_offset(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55], 0x1000), 4);
        // Five harmless instructions: too far.
        let far = [
            0x85, 0xc0, 0x85, 0xc0, 0x85, 0xc0, 0x85, 0xc0, 0x85, 0xc0, 0x55,
        ];
        assert_eq!(probe_offset(&far, 0x1000), 0);
        // Nothing decodable.
        assert_eq!(probe_offset(&[], 0x1000), 0);
        assert_eq!(probe_offset(&[0x0f], 0x1000), 0);
    }
}
