//! Procedure linkage table stubs named as perf and objdump name them (`malloc@plt`): a call from
//! a module to a function of another goes through a stub of the module's `.plt` (`.plt.sec`
//! where the module was built for indirect-branch tracking, `.plt.got` for functions whose
//! address the module also takes), which jumps through its slot of the global offset table.
//! No symbol covers the stubs, yet a program that calls its C library often is sampled there
//! (CPython: 1-3% of its samples). Each stub's `jmp *slot(%rip)` says which slot it uses, and the
//! dynamic relocation of that slot which function it is for.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

/// The stub sections and the size of one stub in each.
const SECTIONS: [(&str, u64); 3] = [(".plt", 16), (".plt.sec", 16), (".plt.got", 8)];

/// One stub: its address, its size and its name (`FUNCTION@plt`).
pub(crate) type Stub = (u64, u64, String);

/// The stubs of `file`'s procedure linkage tables, sorted by address.
pub(crate) fn stubs(file: &object::File<'_>) -> Vec<Stub> {
    let slots = slot_names(file);
    if slots.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (name, stride) in SECTIONS {
        let Some(section) = file.section_by_name(name) else {
            continue;
        };
        let Ok(bytes) = section.data() else { continue };
        for (i, entry) in bytes.chunks_exact(stride as usize).enumerate() {
            let address = section.address() + i as u64 * stride;
            let Some(function) = jump_slot(entry, address).and_then(|s| slots.get(&s)) else {
                continue; // the lazy table's first entry, or no jump through a named slot
            };
            out.push((address, stride, format!("{function}@plt")));
        }
    }
    out.sort_by_key(|s| s.0);
    out
}

/// The global offset table slot a stub's bytes (at `address`) jump through: the target of its
/// first `jmp *disp32(%rip)` (`ff 25`, after an `endbr64` or a `bnd` prefix where there is one).
fn jump_slot(entry: &[u8], address: u64) -> Option<u64> {
    let at = entry.windows(2).position(|w| w == [0xff, 0x25])?;
    let disp = i32::from_le_bytes(entry.get(at + 2..at + 6)?.try_into().ok()?);
    let next = address + at as u64 + 6;
    Some(next.wrapping_add(disp as i64 as u64))
}

/// The name of the function each global offset table slot is for, from the dynamic
/// relocations that fill the slots (jump slots, and global data slots of functions).
fn slot_names(file: &object::File<'_>) -> HashMap<u64, String> {
    let (Some(symbols), Some(relocations)) =
        (file.dynamic_symbol_table(), file.dynamic_relocations())
    else {
        return HashMap::new();
    };
    let mut names = HashMap::new();
    for (slot, relocation) in relocations {
        let RelocationTarget::Symbol(index) = relocation.target() else {
            continue;
        };
        // By index: a search of the table for each relocation took 57 million instructions on
        // libpython (2,000 symbols, 18,000 relocations).
        let symbol = symbols.symbol_by_index(index).ok();
        if let Some(name) = symbol.and_then(|s| s.name().ok()).filter(|n| !n.is_empty()) {
            names.insert(slot, name.split('@').next().unwrap_or(name).to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_jumps_through_its_slot_after_endbr64_and_bnd() {
        // At 0x1000: endbr64; bnd jmp *0x2ff2(%rip) -> 0x1000 + 4 + 7 + 0x2ff2... computed below.
        let mut entry = vec![0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25];
        entry.extend(0x2000i32.to_le_bytes());
        entry.extend([0x0f, 0x1f, 0x44, 0x00, 0x00]);
        assert_eq!(jump_slot(&entry, 0x1000), Some(0x1000 + 5 + 6 + 0x2000));
        let mut lazy = vec![0xff, 0x25];
        lazy.extend((-0x10i32).to_le_bytes());
        lazy.extend([0x68, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0]);
        assert_eq!(jump_slot(&lazy, 0x5000), Some(0x5000 + 6 - 0x10));
        assert_eq!(jump_slot(&[0x90; 16], 0x5000), None);
    }
}
