//! Static variables from the symbol table: `STT_OBJECT` entries (name, `st_value`,
//! `st_size`), for a binary without DWARF, for the parts of one that DWARF does not describe
//! (objects built without `-g`, assembly), and for the sizes DWARF cannot give.

use super::StaticVar;
use crate::demangle::demangle;
use object::{ObjectSymbol, SymbolKind, SymbolSection};
use profiler::addr::Svma;

/// The data objects of `file`'s `.symtab`, else of the `.symtab` of its separate debug file
/// `debug` (distributions strip the binary and keep the full table there), else of its
/// `.dynsym`; sorted by address, one per address (a global name before a local one, then the
/// shortest). Thread-local objects (`STT_TLS`, addressed per thread) and objects without a
/// size are left out; names are demangled.
pub(crate) fn data_symbols(
    file: &object::File<'_>,
    debug: Option<&object::File<'_>>,
) -> Vec<StaticVar> {
    let collect = |iter: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        let mut syms: Vec<(bool, String, StaticVar)> = Vec::new();
        for s in iter {
            let in_section = matches!(s.section(), SymbolSection::Section(_));
            if s.kind() != SymbolKind::Data || !in_section || s.size() == 0 || s.address() == 0 {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            if name.is_empty() {
                continue;
            }
            syms.push((
                s.is_global(),
                name.to_string(),
                StaticVar {
                    name: demangle(name),
                    addr: Svma(s.address()),
                    size: s.size(),
                    file: None,
                    line: 0,
                    ty: None,
                },
            ));
        }
        syms
    };
    let mut syms = crate::binary::symbols_with_fallback(file, debug, collect);
    syms.sort_by(|a, b| {
        a.2.addr
            .cmp(&b.2.addr)
            .then(b.0.cmp(&a.0))
            .then(a.1.len().cmp(&b.1.len()))
    });
    syms.dedup_by_key(|s| s.2.addr);
    syms.into_iter().map(|(_, _, s)| s).collect()
}

/// `dwarf` (sorted by address; where two overlap the first is kept) completed by `symbols`:
/// a DWARF variable takes the size of the symbol at its address where that is larger (or
/// its type has none), and a symbol overlapping no DWARF variable is added. Sorted, disjoint,
/// none empty.
pub(crate) fn merge_statics(mut dwarf: Vec<StaticVar>, symbols: Vec<StaticVar>) -> Vec<StaticVar> {
    dwarf.sort_by_key(|s| s.addr);
    for var in &mut dwarf {
        if let Ok(i) = symbols.binary_search_by_key(&var.addr, |s| s.addr) {
            // The symbol's size is the storage's: larger than the type's where a flexible
            // array member is initialized (`struct { int n; int v[]; } x = {2, {1, 2}}`).
            var.size = var.size.max(symbols[i].size);
        }
    }
    let dwarf = disjoint(dwarf.into_iter().filter(|v| v.size > 0));
    let extra = symbols.into_iter().filter(|s| {
        let i = dwarf.partition_point(|d| d.addr.0 < s.addr.0.saturating_add(s.size));
        // The DWARF variable starting last before the symbol's end must end before its start.
        i == 0 || end(&dwarf[i - 1]) <= s.addr.0
    });
    let mut all: Vec<StaticVar> = extra.collect();
    all.extend(dwarf);
    all.sort_by_key(|s| s.addr);
    all
}

/// The first past the last byte of `v`.
fn end(v: &StaticVar) -> u64 {
    v.addr.0.saturating_add(v.size)
}

/// `sorted`, without the variables that overlap one kept before them.
fn disjoint(sorted: impl Iterator<Item = StaticVar>) -> Vec<StaticVar> {
    let mut out: Vec<StaticVar> = Vec::new();
    for v in sorted {
        if out.last().is_none_or(|last| end(last) <= v.addr.0) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, addr: u64, size: u64) -> StaticVar {
        StaticVar {
            name: name.into(),
            addr: Svma(addr),
            size,
            file: None,
            line: 0,
            ty: None,
        }
    }

    #[test]
    fn dwarf_first_symbols_fill_in() {
        let dwarf = vec![
            var("b", 0x2000, 16),
            var("a", 0x1000, 0),
            var("c", 0x2008, 8),
        ];
        let symbols = vec![
            var("a", 0x1000, 64),
            var("b.alias", 0x2004, 4),
            var("asm_table", 0x3000, 32),
        ];
        let merged = merge_statics(dwarf, symbols);
        let got: Vec<(&str, u64, u64)> = merged
            .iter()
            .map(|v| (v.name.as_str(), v.addr.0, v.size))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", 0x1000, 64),
                ("b", 0x2000, 16),
                ("asm_table", 0x3000, 32)
            ],
            "sizes from symbols, overlaps dropped, symbols outside DWARF added"
        );
    }
}
