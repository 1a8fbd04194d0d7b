//! jitdump files, the other way JITs tell profilers what they compiled (perf's jitdump format,
//! written by CPython 3.13's `-X perf_jit`, V8's `--perf-prof`, Java agents, ...): a header, then
//! records, each `id, size, time`. A code-load record (id 0) gives a function's address, size
//! and name; a code-move record (id 1) moves one. The JIT maps the file as executable so that
//! profilers find it: it shows up among a profile's modules, named `jit-PID.dump`.

use std::io::Read;

use profiler::jitdump::{first_record, records, u64_at, CODE_LOAD, CODE_MOVE};

use crate::prof::jitname::{symbol, JitSymbol};

/// One function placed by a jitdump record: start, end and symbol.
pub(crate) type Placed = (u64, u64, JitSymbol);

/// What each code-load and code-move record of the jitdump `file` placed, in record order (a
/// moved function at each place it went; `None` for a record that does not read, or moves code
/// no record loaded): the loads that hpcrun-rs's JIT frames number. `None` where the file does
/// not read as a jitdump.
pub(crate) fn read(mut file: impl Read) -> Option<Vec<Option<Placed>>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    parse(&bytes)
}

/// The loads of a jitdump's bytes (see [`read`]).
fn parse(bytes: &[u8]) -> Option<Vec<Option<Placed>>> {
    let mut loads: Vec<Option<Placed>> = Vec::new();
    let mut by_index: std::collections::BTreeMap<u64, usize> = Default::default();
    for record in records(bytes, first_record(bytes)?).0 {
        let body = record.body;
        let placed = match record.id {
            CODE_LOAD => loaded(body).inspect(|_| {
                by_index.extend(u64_at(body, 32).map(|index| (index, loads.len())));
            }),
            CODE_MOVE => {
                let moved = |(to, len, index): (u64, u64, u64)| {
                    let from = loads.get(*by_index.get(&index)?)?.as_ref()?;
                    Some((to, to.saturating_add(len), from.2.clone()))
                };
                let placed = moved_to(body).and_then(moved);
                if placed.is_some() {
                    by_index.extend(u64_at(body, 40).map(|index| (index, loads.len())));
                }
                placed
            }
            _ => continue,
        };
        loads.push(placed);
    }
    Some(loads)
}

/// The function a code-load record's body loads.
fn loaded(body: &[u8]) -> Option<Placed> {
    let (addr, len) = (u64_at(body, 16)?, u64_at(body, 24)?);
    let name = body.get(40..)?.split(|&b| b == 0).next()?;
    Some((
        addr,
        addr.saturating_add(len),
        symbol(&String::from_utf8_lossy(name)),
    ))
}

/// Where a code-move record's body moves code: new address, size and the code's index.
fn moved_to(body: &[u8]) -> Option<(u64, u64, u64)> {
    Some((u64_at(body, 24)?, u64_at(body, 32)?, u64_at(body, 40)?))
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
        let functions: Vec<Placed> = parse(&bytes).unwrap().into_iter().flatten().collect();
        assert_eq!(functions.len(), 2);
        assert_eq!((functions[0].0, functions[0].1), (0x1000, 0x1040));
        assert_eq!(functions[0].2.name, "py::fib");
        assert_eq!((functions[1].0, functions[1].1), (0x2000, 0x2040));
        assert_eq!(functions[1].2.file.as_deref(), Some("/app/fib.py"));
        assert_eq!(parse(b"not a dump"), None);
    }
}
