//! Calls into other modules: which imported function a PLT stub or a GOT slot stands for.
//!
//! A dynamically linked program calls `abort` through a PLT stub (`call abort@plt`, a stub that
//! jumps through the GOT) or, built with `-fno-plt`, through the GOT slot itself (`call
//! *abort@GOTPCREL(%rip)`). The dynamic relocations name the symbol of each slot; decoding the
//! PLT sections (`.plt`, `.plt.sec`, `.plt.got`) finds the slot each stub jumps through. Loop
//! recovery needs the names to know which calls never return; the symbol table has none for
//! the stubs.

use fxhash::FxHashMap;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

/// Instructions a PLT stub may run before its jump through the GOT (`endbr64`, `bnd`).
const STUB_PROLOGUE: usize = 3;

/// What the GOT slots and PLT stubs of a module stand for.
#[derive(Default)]
pub(crate) struct Imports {
    /// The link name of the imported function behind each PLT stub and GOT slot address.
    pub names: FxHashMap<u64, String>,
    /// GOT slots that hold the address of a function of the module itself (position-independent
    /// code calls its own functions through them, as Rust binaries do): slot to function.
    pub local_slots: FxHashMap<u64, u64>,
}

/// The imports of `file`: empty for a static binary.
pub(crate) fn imports(file: &object::File<'_>) -> Imports {
    let (mut names, local_slots) = slots(file);
    let mut stubs = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if !matches!(name, ".plt" | ".plt.sec" | ".plt.got") {
            continue;
        }
        let Ok(bytes) = section.data() else { continue };
        stubs.extend(stub_slots(section.address(), bytes));
    }
    for (stub, slot) in stubs {
        if let Some(name) = names.get(&slot).cloned() {
            names.insert(stub, name);
        }
    }
    Imports { names, local_slots }
}

/// From the dynamic relocations: GOT slots of imported symbols (slot to name) and slots that
/// the loader fills with an address of the module (slot to address: `R_X86_64_RELATIVE`, or a
/// symbol the module defines).
fn slots(file: &object::File<'_>) -> (FxHashMap<u64, String>, FxHashMap<u64, u64>) {
    let mut names = FxHashMap::default();
    let mut local = FxHashMap::default();
    let Some(relocations) = file.dynamic_relocations() else {
        return (names, local);
    };
    let symbols = file.dynamic_symbol_table();
    for (slot, reloc) in relocations {
        match reloc.target() {
            RelocationTarget::Symbol(index) => {
                let Some(sym) = symbols.as_ref().and_then(|t| t.symbol_by_index(index).ok()) else {
                    continue;
                };
                if !sym.is_undefined() && sym.address() != 0 {
                    local.insert(slot, sym.address());
                } else if let Ok(name) = sym.name() {
                    if !name.is_empty() {
                        names.insert(slot, name.to_string());
                    }
                }
            }
            RelocationTarget::Absolute if reloc.addend() > 0 => {
                local.insert(slot, reloc.addend() as u64);
            }
            _ => {}
        }
    }
    (names, local)
}

/// `(stub address, GOT slot)` for every instruction of a PLT section from which a jump through
/// a RIP-relative slot follows within [`STUB_PROLOGUE`] straight-line instructions: every
/// possible stub start, whatever the stub layout (lazy, IBT or `-z now`).
fn stub_slots(address: u64, bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insns: Vec<Instruction> =
        std::iter::from_fn(|| decoder.can_decode().then(|| decoder.decode()))
            .filter(|i| !i.is_invalid())
            .collect();
    let mut out = Vec::new();
    for (k, start) in insns.iter().enumerate() {
        for insn in insns[k..].iter().take(STUB_PROLOGUE) {
            if insn.flow_control() == FlowControl::IndirectBranch && insn.is_ip_rel_memory_operand()
            {
                out.push((start.ip(), insn.ip_rel_memory_address()));
            }
            if insn.flow_control() != FlowControl::Next {
                break;
            }
        }
    }
    out
}
