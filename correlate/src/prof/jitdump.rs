//! jitdump files, the other way JITs tell profilers what they compiled (perf's jitdump format,
//! written by CPython 3.13's `-X perf_jit`, V8's `--perf-prof`, Java agents, ...): a header, then
//! records, each `id, size, time`. A code-load record (id 0) gives a function's address, size
//! and name; a code-move record (id 1) moves one. The JIT maps the file as executable so that
//! profilers find it: it shows up among a profile's modules, named `jit-PID.dump`.

use std::io::Read;

use profiler::jitdump::{first_record, records, u64_at, CODE_LOAD, CODE_MOVE};

use crate::prof::jitname::{symbol, JitSymbol};

/// The functions the jitdump `file` loaded (a moved one at each place it went), as (start,
/// end, symbol) in the order of its records; `None` where it does not read as one.
pub(crate) fn read(mut file: impl Read) -> Option<Vec<(u64, u64, JitSymbol)>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    parse(&bytes)
}

/// The functions of a jitdump's bytes (see [`read`]).
fn parse(bytes: &[u8]) -> Option<Vec<(u64, u64, JitSymbol)>> {
    let mut functions: Vec<(u64, u64, JitSymbol)> = Vec::new();
    let mut by_index: std::collections::BTreeMap<u64, usize> = Default::default();
    for record in records(bytes, first_record(bytes)?).0 {
        let body = record.body;
        match record.id {
            CODE_LOAD => {
                let (addr, len, index) = (u64_at(body, 16)?, u64_at(body, 24)?, u64_at(body, 32)?);
                let name = body.get(40..)?.split(|&b| b == 0).next()?;
                let name = String::from_utf8_lossy(name);
                by_index.insert(index, functions.len());
                functions.push((addr, addr.saturating_add(len), symbol(&name)));
            }
            CODE_MOVE => {
                let (to, len, index) = (u64_at(body, 24)?, u64_at(body, 32)?, u64_at(body, 40)?);
                if let Some(&i) = by_index.get(&index) {
                    let moved = (to, to.saturating_add(len), functions[i].2.clone());
                    by_index.insert(index, functions.len());
                    functions.push(moved);
                }
            }
            _ => {}
        }
    }
    Some(functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    use profiler::jitdump::MAGIC;

    /// A record: id, size, time, then `body`.
    fn record(id: u32, body: &[u8]) -> Vec<u8> {
        let mut r = id.to_le_bytes().to_vec();
        r.extend(((16 + body.len()) as u32).to_le_bytes());
        r.extend(7u64.to_le_bytes());
        r.extend(body);
        r
    }

    #[test]
    fn code_loads_and_moves_are_read() {
        let mut bytes = MAGIC.to_le_bytes().to_vec();
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(40u32.to_le_bytes());
        bytes.resize(40, 0);
        let mut load = Vec::new();
        for v in [1u32, 2] {
            load.extend(v.to_le_bytes()); // pid, tid
        }
        for v in [0x1000u64, 0x1000, 0x40, 9] {
            load.extend(v.to_le_bytes()); // vma, code address, size, index
        }
        load.extend(b"py::fib:/app/fib.py\0");
        load.extend([0x90; 0x40]); // the code
        bytes.extend(record(0, &load));
        let mut moved = Vec::new();
        for v in [1u32, 2] {
            moved.extend(v.to_le_bytes());
        }
        for v in [0x1000u64, 0x1000, 0x2000, 0x40, 9] {
            moved.extend(v.to_le_bytes()); // vma, old, new, size, index
        }
        bytes.extend(record(1, &moved));
        bytes.extend(record(3, &[])); // close
        let functions = parse(&bytes).unwrap();
        assert_eq!(functions.len(), 2);
        assert_eq!((functions[0].0, functions[0].1), (0x1000, 0x1040));
        assert_eq!(functions[0].2.name, "py::fib");
        assert_eq!((functions[1].0, functions[1].1), (0x2000, 0x2040));
        assert_eq!(functions[1].2.file.as_deref(), Some("/app/fib.py"));
        assert_eq!(parse(b"not a dump"), None);
    }
}
