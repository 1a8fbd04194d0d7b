//! The measured executable (and the libraries traps land in) as `--watch` needs it: its static
//! variables by name, its writable static data, its functions by address, and what the
//! instruction before a trap did.
//!
//! A data breakpoint traps *after* the access, so a sample's ip is the next instruction's
//! address; the access is the instruction that ends there, found by decoding its function from
//! the symbol's start (iced-x86) and read or write from its memory operand.

use std::path::Path;

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory, OpAccess};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

/// What one trapping instruction did to memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Access {
    /// It read its memory operand.
    pub(crate) read: bool,
    /// It wrote its memory operand.
    pub(crate) write: bool,
    /// Bytes of the operand.
    pub(crate) size: u64,
}

/// A symbol: link-time start, size, name.
#[derive(Debug, Clone)]
struct Symbol {
    start: u64,
    size: u64,
    name: String,
}

/// The executable's symbols, code and static data, at link-time addresses.
pub(crate) struct Executable {
    functions: Vec<Symbol>,
    objects: Vec<Symbol>,
    /// Writable allocated sections (`.data`, `.bss`, ...): (start, size).
    pub(crate) data: Vec<(u64, u64)>,
    code: Vec<(u64, Vec<u8>)>,
    /// Link-time address of the first loadable segment's page.
    pub(crate) first_page: u64,
}

impl Executable {
    /// Read `path` (an ELF executable with a symbol table).
    pub(crate) fn read(path: &Path) -> Result<Executable, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = object::File::parse(&*bytes)
            .map_err(|e| format!("{} is not an ELF file: {e}", path.display()))?;
        let mut functions = Vec::new();
        let mut objects = Vec::new();
        // A stripped library keeps only its dynamic symbols.
        let symbols = match file.symbols().next() {
            Some(_) => file.symbols(),
            None => file.dynamic_symbols(),
        };
        for sym in symbols {
            let Ok(name) = sym.name() else { continue };
            let s = Symbol {
                start: sym.address(),
                size: sym.size(),
                name: name.to_string(),
            };
            match sym.kind() {
                SymbolKind::Text if s.size > 0 => functions.push(s),
                SymbolKind::Data if s.size > 0 => objects.push(s),
                _ => {}
            }
        }
        functions.sort_by_key(|s| s.start);
        let mut data = Vec::new();
        let mut code = Vec::new();
        for section in file.sections() {
            match section.kind() {
                SectionKind::Data | SectionKind::UninitializedData => {
                    data.push((section.address(), section.size()))
                }
                SectionKind::Text => {
                    if let Ok(bytes) = section.data() {
                        code.push((section.address(), bytes.to_vec()));
                    }
                }
                _ => {}
            }
        }
        data.retain(|&(_, size)| size > 0);
        let first_page = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
        Ok(Executable {
            functions,
            objects,
            data,
            code,
            first_page,
        })
    }

    /// The static variable `name`: (link-time address, size).
    pub(crate) fn variable(&self, name: &str) -> Option<(u64, u64)> {
        self.objects
            .iter()
            .find(|s| s.name == name)
            .map(|s| (s.start, s.size))
    }

    /// The function containing link-time address `addr`, by index and name.
    pub(crate) fn function(&self, addr: u64) -> Option<(usize, &str)> {
        let i = self.functions.partition_point(|s| s.start <= addr);
        let s = self.functions.get(i.checked_sub(1)?)?;
        (addr < s.start + s.size).then_some((i - 1, s.name.as_str()))
    }

    /// The function and access of the instruction that ends at link-time address `next`.
    pub(crate) fn access_before(&self, next: u64) -> Option<(&str, Access)> {
        let (i, name) = self.function(next.checked_sub(1)?)?;
        let start = self.functions[i].start;
        let (base, bytes) = self
            .code
            .iter()
            .find(|(a, b)| *a <= start && start < a + b.len() as u64)?;
        let from = (start - base) as usize;
        let to = ((next - base) as usize).min(bytes.len());
        let mut decoder = Decoder::with_ip(64, bytes.get(from..to)?, start, DecoderOptions::NONE);
        let mut factory = InstructionInfoFactory::new();
        while decoder.can_decode() {
            let insn = decoder.decode();
            if insn.is_invalid() {
                return None;
            }
            if insn.next_ip() != next {
                continue;
            }
            let info = factory.info(&insn);
            let mut access = Access::default();
            for m in info.used_memory() {
                let (read, write) = match m.access() {
                    OpAccess::Read | OpAccess::CondRead => (true, false),
                    OpAccess::Write | OpAccess::CondWrite => (false, true),
                    OpAccess::ReadWrite | OpAccess::ReadCondWrite => (true, true),
                    _ => (false, false),
                };
                access.read |= read;
                access.write |= write;
                access.size = access.size.max(m.memory_size().size() as u64);
            }
            return Some((name, access));
        }
        None
    }
}

/// One line of `/proc/PID/maps`: a range, its file offset, and its file (empty when
/// anonymous).
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    pub(crate) path: String,
}

impl Mapping {
    /// Whether `addr` is inside it.
    pub(crate) fn holds(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// The mappings of process `pid`, from `/proc/PID/maps`; none when it cannot be read.
pub(crate) fn mappings(pid: i32) -> Vec<Mapping> {
    let maps = crate::format::procmaps::read(u32::try_from(pid).ok()).unwrap_or_default();
    crate::format::procmaps::lines(&maps)
        .map(|line| Mapping {
            start: line.start,
            end: line.end,
            offset: line.offset,
            path: line.path.to_string(),
        })
        .collect()
}

/// Where file `path` was loaded: the start of its mapping at offset 0, where the kernel put its
/// first page.
pub(crate) fn load_address(mappings: &[Mapping], path: &str) -> Option<u64> {
    (mappings.iter())
        .find(|m| m.path == path && m.offset == 0)
        .map(|m| m.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_before_a_trap_is_decoded_from_the_function_start() {
        // This test binary: a function is found by any address inside it, and decoding up to
        // an address inside an instruction gives nothing rather than a wrong instruction.
        let exe = Executable::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(!exe.functions.is_empty() && !exe.data.is_empty());
        let mid = exe.functions.len() / 2;
        let f = exe.functions[mid].clone();
        assert_eq!(exe.function(f.start).map(|(i, _)| i), Some(mid));
        let first = (exe.code.iter())
            .find(|(a, b)| *a <= f.start && f.start < a + b.len() as u64)
            .map(|(a, b)| {
                let at = (f.start - a) as usize;
                Decoder::with_ip(64, &b[at..], f.start, DecoderOptions::NONE).decode()
            })
            .unwrap();
        assert!(exe.access_before(first.next_ip()).is_some());
        if first.len() > 1 {
            assert!(exe.access_before(f.start + 1).is_none());
        }
        assert!(exe.variable("no such variable anywhere").is_none());
    }
}
