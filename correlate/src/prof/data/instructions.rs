//! What the accessing instructions do with memory (load, store, both), decoded once by
//! `hpcprof-rs` so that the views and the delinquent-operation CSV need no binaries.
//!
//! Only the distinct instructions of the data accesses are decoded, each module opened once
//! (modules in parallel) and read lazily: the ELF headers and the few bytes at each address,
//! not the whole file. A module is read only when correlation found its structure, i.e. it is
//! the binary that was profiled (build-id or checksum checked); the others get no entries.

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory, OpAccess};
use object::read::ReadCache;
use object::{Object, ObjectSection, SectionKind};
use profiler::envelope::open_regular;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

use crate::db::data::{Instruction, MemoryOp};
use crate::db::database::{Database, StructureSource};
use crate::db::ids::DbModuleId;

/// The longest x86-64 instruction, bytes.
const MAX_INSTRUCTION: u64 = 15;

/// The memory operations of every distinct accessing instruction of `db`'s data section,
/// sorted by (module, address), decoded from each module's file on this machine (`binaries`).
pub(crate) fn decode_accesses(db: &Database, binaries: &[Option<PathBuf>]) -> Vec<Instruction> {
    let mut wanted: Vec<(DbModuleId, u64)> = db
        .data
        .accesses
        .iter()
        .filter_map(|a| a.instruction)
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let modules: Vec<(DbModuleId, &[(DbModuleId, u64)])> = wanted
        .chunk_by(|a, b| a.0 == b.0)
        .map(|chunk| (chunk[0].0, chunk))
        .collect();
    let decoded: Vec<Vec<Instruction>> = modules
        .par_iter()
        .map(|&(module, addrs)| {
            let desc = &db.modules[module.index()];
            let binary = binaries.get(module.index()).and_then(Option::as_deref);
            let (false, Some(binary)) =
                (matches!(desc.structure, StructureSource::None(_)), binary)
            else {
                return Vec::new();
            };
            let addrs: Vec<u64> = addrs.iter().map(|&(_, a)| a).collect();
            module_ops(binary, &addrs)
                .into_iter()
                .map(|(addr, op)| Instruction { module, addr, op })
                .collect()
        })
        .collect();
    decoded.concat()
}

/// The memory operation of the instruction at each link-time address of `addrs` in the module
/// at `path`, for those that decode; nothing when the module cannot be read.
fn module_ops(path: &Path, addrs: &[u64]) -> Vec<(u64, MemoryOp)> {
    let Ok(file) = open_regular(path) else {
        return Vec::new();
    };
    let cache = ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Vec::new();
    };
    let code: Vec<_> = elf
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .collect();
    let mut factory = InstructionInfoFactory::new();
    addrs
        .iter()
        .filter_map(|&addr| {
            let section = code
                .iter()
                .find(|s| addr >= s.address() && addr - s.address() < s.size())?;
            let len = MAX_INSTRUCTION.min(section.address() + section.size() - addr);
            let bytes = section.data_range(addr, len).ok()??;
            let op = memory_op(bytes, addr, &mut factory)?;
            Some((addr, op))
        })
        .collect()
}

/// What the instruction at the start of `bytes` (at address `ip`) does with memory; `None`
/// when it does not decode.
fn memory_op(bytes: &[u8], ip: u64, factory: &mut InstructionInfoFactory) -> Option<MemoryOp> {
    let instruction = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
    if instruction.is_invalid() {
        return None;
    }
    let (mut reads, mut writes) = (false, false);
    for used in factory.info(&instruction).used_memory() {
        match used.access() {
            OpAccess::Read | OpAccess::CondRead => reads = true,
            OpAccess::Write | OpAccess::CondWrite => writes = true,
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => (reads, writes) = (true, true),
            OpAccess::None | OpAccess::NoMemAccess => {}
        }
    }
    Some(match (reads, writes) {
        (true, true) => MemoryOp::LoadStore,
        (true, false) => MemoryOp::Load,
        (false, true) => MemoryOp::Store,
        (false, false) => MemoryOp::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(bytes: &[u8]) -> Option<MemoryOp> {
        memory_op(bytes, 0x1000, &mut InstructionInfoFactory::new())
    }

    #[test]
    fn loads_stores_and_neither_are_told_apart() {
        // movb $0x1,0x123(%rdi)
        assert_eq!(
            op(&[0xc6, 0x87, 0x23, 0x01, 0, 0, 0x01]),
            Some(MemoryOp::Store)
        );
        // mov (%rax),%rcx
        assert_eq!(op(&[0x48, 0x8b, 0x08]), Some(MemoryOp::Load));
        // addl $1,(%rax)
        assert_eq!(op(&[0x83, 0x00, 0x01]), Some(MemoryOp::LoadStore));
        // lea 0x8(%rax),%rcx: an address, no access
        assert_eq!(op(&[0x48, 0x8d, 0x48, 0x08]), Some(MemoryOp::None));
        // push %rbx: the implicit stack slot is written
        assert_eq!(op(&[0x53]), Some(MemoryOp::Store));
        // a truncated instruction
        assert_eq!(op(&[0x48, 0x8b]), None);
    }
}
