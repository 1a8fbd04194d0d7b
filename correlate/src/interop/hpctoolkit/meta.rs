//! Writing `meta.db`: title, identifier names, metrics with their propagation scopes and
//! summaries, load modules, source files, functions and the context tree.

use fxhash::FxHashMap;

use super::bytes::Out;
use super::{Context, Experiment, Lexical, Relation};

/// HPCToolkit's identifier kinds, in its order (RANK is 2, THREAD 3).
pub(crate) const ID_KINDS: [&str; 8] = [
    "SUMMARY",
    "NODE",
    "RANK",
    "THREAD",
    "GPUDEVICE",
    "GPUCONTEXT",
    "GPUSTREAM",
    "CORE",
];

/// The propagation scopes written: (name, type, propagation bit). A metric `m` has the
/// propagated and summary ids `3m + i` for scope `i`.
pub(crate) const SCOPES: [(&str, u8, u8); 3] = [
    ("point", 1, 0xff),
    ("function", 3, 0),
    ("execution", 2, 0xff),
];

/// The description of every database this tool writes (how it recognises its own).
pub(crate) const DESCRIPTION: &str = "Written by hpcprof-rs (hpctoolkit-rs).";

/// Pretty names of the entry points, by kind.
const ENTRY_NAMES: [&str; 3] = ["unknown entry", "main thread", "application thread"];

/// The bytes of `meta.db`.
pub(crate) fn meta_db(ex: &Experiment) -> Vec<u8> {
    let mut out = Out::default();
    out.header(b"meta", 0, 8);
    general(&mut out, &ex.title);
    id_names(&mut out);
    metrics(&mut out, &ex.metrics);
    let strings = strings(&mut out, ex);
    let modules = table(&mut out, 5, ex.modules.len(), 16, |out, i| {
        out.put(&[0; 8]);
        out.put(&strings[ex.modules[i].as_str()].to_le_bytes());
    });
    let files = table(&mut out, 6, ex.files.len(), 16, |out, i| {
        // Flags: bit 0, `copied`.
        out.put(&u32::from(ex.copied.contains(&i)).to_le_bytes());
        out.put(&[0; 4]);
        out.put(&strings[ex.files[i].as_str()].to_le_bytes());
    });
    let functions = table(&mut out, 7, ex.functions.len(), 40, |out, i| {
        let f = &ex.functions[i];
        let name = f.name.as_deref().map_or(0, |n| strings[n]);
        for v in [
            name,
            f.module.map_or(0, |m| modules + 16 * m as u64),
            f.offset,
            f.file.map_or(0, |f| files + 16 * f as u64),
        ] {
            out.put(&v.to_le_bytes());
        }
        out.put(&f.line.to_le_bytes());
        out.put(&[0; 4]);
    });
    let tables = Tables {
        strings,
        modules,
        files,
        functions,
    };
    context_tree(&mut out, ex, &tables);
    out.put(b"_meta.db");
    out.bytes
}

/// The General Properties section: title and description.
fn general(out: &mut Out, title: &str) {
    let start = out.align(8);
    let at = out.reserve(16);
    let t = out.string(title);
    let d = out.string(DESCRIPTION);
    out.set_u64(at, t);
    out.set_u64(at + 8, d);
    out.section(0, start);
}

/// The Identifier Names section.
fn id_names(out: &mut Out) {
    let start = out.align(8);
    out.reserve(16);
    out.set_u8(start + 8, ID_KINDS.len() as u8);
    let names = out.reserve(8 * ID_KINDS.len());
    out.set_u64(start, names);
    for (i, kind) in ID_KINDS.iter().enumerate() {
        let s = out.string(kind);
        out.set_u64(names + 8 * i as u64, s);
    }
    out.section(1, start);
}

/// The Performance Metrics section: each metric instantiated in every scope, and summed over
/// the threads ("$$" combined by sum) in every scope.
fn metrics(out: &mut Out, names: &[String]) {
    let start = out.align(8);
    out.reserve(0x20);
    let scopes = out.reserve(16 * SCOPES.len());
    let list = out.reserve(32 * names.len());
    let insts = out.reserve(16 * SCOPES.len() * names.len());
    let sums = out.reserve(24 * SCOPES.len() * names.len());
    out.set_u64(start, list);
    out.set_u32(start + 8, names.len() as u32);
    out.set(start + 0xc, &[32, 16, 24]);
    out.set_u64(start + 0x10, scopes);
    out.set_u16(start + 0x18, SCOPES.len() as u16);
    out.set_u8(start + 0x1a, 16);
    for (i, (name, kind, bit)) in SCOPES.iter().enumerate() {
        let s = out.string(name);
        let at = scopes + 16 * i as u64;
        out.set_u64(at, s);
        out.set(at + 8, &[*kind, *bit]);
    }
    let formula = out.string("$$");
    let n = SCOPES.len() as u64;
    for (m, name) in names.iter().enumerate() {
        let s = out.string(name);
        let (m, at) = (m as u64, list + 32 * m as u64);
        out.set_u64(at, s);
        out.set_u64(at + 8, insts + 16 * n * m);
        out.set_u64(at + 0x10, sums + 24 * n * m);
        out.set_u16(at + 0x18, n as u16);
        out.set_u16(at + 0x1a, n as u16);
        for i in 0..n {
            let id = (n * m + i) as u16;
            let inst = insts + 16 * (n * m + i);
            out.set_u64(inst, scopes + 16 * i);
            out.set_u16(inst + 8, id);
            let sum = sums + 24 * (n * m + i);
            out.set_u64(sum, scopes + 16 * i);
            out.set_u64(sum + 8, formula);
            out.set_u16(sum + 0x12, id);
        }
    }
    out.section(2, start);
}

/// The Common String Table: every module, file and function name and entry point name once;
/// returns where each is.
fn strings<'e>(out: &mut Out, ex: &'e Experiment) -> FxHashMap<&'e str, u64> {
    let start = out.pos();
    let mut at = FxHashMap::default();
    let names = ex.functions.iter().filter_map(|f| f.name.as_deref());
    let all = ENTRY_NAMES
        .into_iter()
        .chain(ex.modules.iter().map(String::as_str))
        .chain(ex.files.iter().map(String::as_str))
        .chain(names);
    for s in all {
        if !at.contains_key(s) {
            at.insert(s, out.string(s));
        }
    }
    out.section(4, start);
    at
}

/// A section `i` holding a header and an array of `n` structures of `size` bytes each written
/// by `item`; returns the array's offset.
fn table(out: &mut Out, i: u64, n: usize, size: u16, mut item: impl FnMut(&mut Out, usize)) -> u64 {
    let start = out.align(8);
    out.reserve(16);
    let array = out.pos();
    for k in 0..n {
        item(out, k);
    }
    out.set_u64(start, array);
    out.set_u32(start + 8, n as u32);
    out.set_u16(start + 0xc, size);
    out.section(i, start);
    array
}

/// Where the context tree's pointers lead.
struct Tables<'e> {
    strings: FxHashMap<&'e str, u64>,
    modules: u64,
    files: u64,
    functions: u64,
}

/// Size in bytes of a context's record (32 bytes and its flex words).
fn record_size(c: &Context) -> u64 {
    32 + 8 * flex_words(c)
}

/// How many 8-byte flex words a context needs: function 1, source 2 (file, line), point 2.
fn flex_words(c: &Context) -> u64 {
    let f = u64::from(c.function.is_some());
    f + 2 * u64::from(c.src.is_some()) + 2 * u64::from(c.point.is_some())
}

/// The Context Tree section: the entry points' array, then each context's children as one
/// contiguous array, breadth first.
fn context_tree(out: &mut Out, ex: &Experiment, t: &Tables) {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); ex.contexts.len()];
    let mut entries = Vec::new();
    for (i, c) in ex.contexts.iter().enumerate() {
        match c.parent {
            Some(p) => children[p].push(i),
            None => entries.push(i),
        }
    }
    let start = out.align(8);
    out.reserve(16);
    let entry_array = out.pos();
    // Where each context's children array goes: breadth first after the entry points.
    let mut array_at = vec![0u64; ex.contexts.len()];
    let mut queue: Vec<usize> = entries.clone();
    let mut pos = entry_array + 32 * entries.len() as u64;
    let mut k = 0;
    while k < queue.len() {
        let c = queue[k];
        array_at[c] = pos;
        pos += children[c]
            .iter()
            .map(|&ch| record_size(&ex.contexts[ch]))
            .sum::<u64>();
        queue.extend(&children[c]);
        k += 1;
    }
    let size = |c: usize| -> u64 {
        children[c]
            .iter()
            .map(|&ch| record_size(&ex.contexts[ch]))
            .sum()
    };
    let link = |c: usize| {
        (
            size(c),
            if children[c].is_empty() {
                0
            } else {
                array_at[c]
            },
        )
    };
    for &e in &entries {
        let (sz, p) = link(e);
        let kind = match ex.contexts[e].lexical {
            Lexical::Entry(kind) => kind,
            _ => 0,
        };
        out.put(&sz.to_le_bytes());
        out.put(&p.to_le_bytes());
        out.put(&(e as u32 + 1).to_le_bytes());
        out.put(&kind.to_le_bytes());
        out.put(&[0; 2]);
        let name = ENTRY_NAMES.get(kind as usize).unwrap_or(&ENTRY_NAMES[0]);
        out.put(&t.strings[name].to_le_bytes());
    }
    for &parent in &queue {
        for &c in &children[parent] {
            let (sz, p) = link(c);
            record(out, c, &ex.contexts[c], sz, p, t);
        }
    }
    out.set_u64(start, entry_array);
    out.set_u16(start + 8, entries.len() as u16);
    out.set_u8(start + 0xa, 32);
    out.section(3, start);
}

/// One {Ctx} record.
fn record(out: &mut Out, i: usize, c: &Context, sz: u64, p: u64, t: &Tables) {
    let flags = u8::from(c.function.is_some())
        | u8::from(c.src.is_some()) << 1
        | u8::from(c.point.is_some()) << 2;
    let lexical = match c.lexical {
        Lexical::Function | Lexical::Entry(_) => 0,
        Lexical::Loop => 1,
        Lexical::Line => 2,
        Lexical::Instruction => 3,
    };
    out.put(&sz.to_le_bytes());
    out.put(&p.to_le_bytes());
    out.put(&(i as u32 + 1).to_le_bytes());
    out.put(&[flags, c.relation as u8, lexical, flex_words(c) as u8]);
    // Bit 0 ("function" scope): lexical children add to their parent's exclusive cost.
    let propagation = u16::from(c.relation == Relation::Lexical);
    out.put(&propagation.to_le_bytes());
    out.put(&[0; 6]);
    if let Some(f) = c.function {
        out.put(&(t.functions + 40 * f as u64).to_le_bytes());
    }
    if let Some((file, line)) = c.src {
        out.put(&(t.files + 16 * file as u64).to_le_bytes());
        out.put(&u64::from(line).to_le_bytes());
    }
    if let Some((module, offset)) = c.point {
        out.put(&(t.modules + 16 * module as u64).to_le_bytes());
        out.put(&offset.to_le_bytes());
    }
}
