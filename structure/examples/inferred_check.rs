//! Measure how well inlined code inferred from the line map (hpcstruct-rs's line-map fallback) matches the
//! DWARF inline records: analyse a binary with full DWARF and a copy of it whose DWARF keeps
//! only the line tables, and compare, at every line-table address, whether the code is the
//! procedure's own or inlined, and from which file. Used by `scripts/bench-structure`.
//!
//! ```text
//! cargo run -p structure --release --example inferred_check -- FULL LINES_ONLY
//! ```

use anyhow::{bail, Result};
use profiler::addr::Svma;
use std::path::Path;
use structure::{analyze_file, Options, ScopeTree};

/// At `addr`: the callee file of the innermost inlined call ("" for the procedure's own code).
fn origin(tree: &ScopeTree, addr: Svma) -> Option<&str> {
    let stmt = tree.lookup(addr)?;
    let alien = tree.ancestors(stmt).find(|&a| tree.get(a).is_alien());
    Some(alien.map_or("", |a| tree.scope_file(a).unwrap_or("")))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [full, lines] = &args[..] else {
        bail!("usage: inferred_check FULL LINES_ONLY");
    };
    let options = Options::default();
    let exact = analyze_file(Path::new(full), &options)?.tree;
    let inferred = analyze_file(Path::new(lines), &options)?.tree;
    let addrs = structure::line_table_addresses(Path::new(full))?;
    // (native, inlined) addresses by DWARF, and how many of each the inference got right.
    let (mut native, mut inlined, mut native_ok, mut inlined_ok, mut same_file) = (0, 0, 0, 0, 0);
    for &a in &addrs {
        let (Some(want), Some(got)) = (origin(&exact, a), origin(&inferred, a)) else {
            continue;
        };
        if want.is_empty() {
            native += 1;
            native_ok += usize::from(got.is_empty());
        } else {
            inlined += 1;
            inlined_ok += usize::from(!got.is_empty());
            same_file += usize::from(got == want);
        }
    }
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    println!(
        "line-map inference vs DWARF inline records on {} addresses: native kept native {native_ok}/{native} ({:.2}%), inlined found inlined {inlined_ok}/{inlined} ({:.2}%), with the callee's file {same_file} ({:.2}%)",
        native + inlined,
        pct(native_ok, native),
        pct(inlined_ok, inlined),
        pct(same_file, inlined),
    );
    Ok(())
}
