//! Build the control-flow graph and loop forest of every function in an ELF file and report
//! totals and time; with a function name, print that function's blocks and loops.
//!
//! ```text
//! cargo run -p structure --release --example loops_scan -- /usr/lib/x86_64-linux-gnu/libstdc++.so.6
//! cargo run -p structure --example loops_scan -- ./a.out main
//! ```

use std::time::Instant;

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use structure::cfg::{Cfg, CfgEnv, CodeRange};
use structure::loops::LoopForest;

/// Names of well-known functions that never return (matched on direct call targets).
const NORETURN: &[&str] = &[
    "exit",
    "_exit",
    "abort",
    "__stack_chk_fail",
    "__assert_fail",
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        bail!("usage: loops_scan ELF-FILE [FUNCTION]");
    };
    let data = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    let file = object::File::parse(&*data).with_context(|| format!("parsing {path}"))?;
    let mut functions: Vec<(u64, u64, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.size(), s.name().unwrap_or("?").to_string()))
        .collect();
    functions.sort();
    functions.dedup_by_key(|f| f.0);
    let noreturn: Vec<u64> = functions
        .iter()
        .filter(|f| NORETURN.contains(&f.2.as_str()))
        .map(|f| f.0)
        .collect();
    let sections: Vec<(u64, &[u8])> = file
        .sections()
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    let read = |addr: u64, len: usize| -> Option<&[u8]> {
        let (start, bytes) = sections
            .iter()
            .find(|(s, d)| *s <= addr && addr - *s < d.len() as u64)?;
        let off = (addr - start) as usize;
        bytes.get(off..off.checked_add(len)?)
    };
    let is_noreturn = |t: u64| noreturn.contains(&t);
    let env = CfgEnv {
        is_noreturn: &is_noreturn,
        read_data: &read,
        landing_pads: &[],
    };

    let (mut n_funcs, mut n_bytes, mut n_blocks, mut n_loops, mut n_irr) = (0, 0, 0, 0, 0);
    let mut biggest = (0usize, String::new(), 0f64);
    let mut cfg_secs = 0f64;
    let mut slowest = (0f64, String::new(), 0usize);
    let t0 = Instant::now();
    for (addr, size, name) in &functions {
        if args.get(1).is_some_and(|f| f != name) {
            continue;
        }
        let Some(bytes) = read(*addr, *size as usize) else {
            continue;
        };
        let t = Instant::now();
        let cfg = Cfg::build(
            &[CodeRange {
                start: *addr,
                bytes,
            }],
            &env,
        );
        let t_cfg = t.elapsed().as_secs_f64();
        let forest = LoopForest::build(&cfg);
        let secs = t.elapsed().as_secs_f64();
        cfg_secs += t_cfg;
        if secs > slowest.0 {
            slowest = (secs, name.clone(), cfg.len());
        }
        if cfg.len() > biggest.0 {
            biggest = (cfg.len(), name.clone(), secs);
        }
        n_funcs += 1;
        n_bytes += size;
        n_blocks += cfg.len();
        n_loops += forest.len();
        n_irr += forest.loops.iter().filter(|l| l.irreducible).count();
        if std::env::var_os("LOOPS_SCAN_IRREDUCIBLE").is_some() {
            for l in forest.loops.iter().filter(|l| l.irreducible) {
                let entries: Vec<String> = l
                    .entries
                    .iter()
                    .map(|e| format!("{:#x}", cfg.block(*e).start))
                    .collect();
                println!("irreducible {name} {:#x}: {}", addr, entries.join(" "));
            }
        }
        if args.len() > 1 {
            print_function(&cfg, &forest);
        }
    }
    let total = t0.elapsed().as_secs_f64();
    println!(
        "{n_funcs} functions, {n_bytes} bytes, {n_blocks} blocks, {n_loops} loops \
         ({n_irr} irreducible) in {total:.3} s (CFGs {cfg_secs:.3} s); largest: {} ({} blocks, {:.2} ms)",
        biggest.1,
        biggest.0,
        biggest.2 * 1e3
    );
    println!(
        "slowest: {} ({} blocks, {:.2} ms)",
        slowest.1,
        slowest.2,
        slowest.0 * 1e3
    );
    Ok(())
}

fn print_function(cfg: &Cfg, forest: &LoopForest) {
    for (i, b) in cfg.blocks.iter().enumerate() {
        let succs: Vec<String> = b
            .succs
            .iter()
            .map(|e| format!("{:#x}", cfg.blocks[e.to.index()].start))
            .collect();
        println!(
            "block {i} [{:#x}-{:#x}) {:?} -> {}",
            b.start,
            b.end,
            b.terminator,
            succs.join(" ")
        );
    }
    for l in &forest.loops {
        let entries: Vec<String> = l
            .entries
            .iter()
            .map(|e| format!("{:#x}", cfg.block(*e).start))
            .collect();
        println!(
            "loop header {:#x} depth {} blocks {} irreducible {} entries {}",
            cfg.block(l.header).start,
            l.depth,
            l.blocks.len(),
            l.irreducible,
            entries.join(" ")
        );
    }
}
