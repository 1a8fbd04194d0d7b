//! Analyse a binary and compare its inline chains with `addr2line -i -f` on randomly chosen
//! line-table addresses; print the agreement and coverage figures used by
//! `scripts/bench-structure`.
//!
//! ```text
//! cargo run -p structure --release --example struct_check -- BINARY [SAMPLES]
//! ```

use anyhow::{bail, Context, Result};
use std::path::Path;
use structure::{analyze_file, verify, Options};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        bail!("usage: struct_check BINARY [SAMPLES]");
    };
    let samples: usize = args
        .get(1)
        .map_or(Ok(2000), |s| s.parse())
        .context("SAMPLES")?;
    let path = Path::new(path);
    let analysis = analyze_file(path, &Options::default())?;
    let rows = structure::analyze::line_table_addresses(path)?;
    if rows.is_empty() {
        bail!("{}: no line table", path.display());
    }
    // A fixed-seed xorshift: reproducible "random" addresses.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let addrs: Vec<u64> = (0..samples)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            rows[(state % rows.len() as u64) as usize]
        })
        .collect();
    let a = verify::compare_with_addr2line(&analysis.tree, path, &addrs)?;
    println!(
        "addresses {}  inside a statement {} ({:.2}%)  inline chains agreeing with addr2line {} ({:.2}%)",
        a.checked,
        a.covered,
        100.0 * a.covered as f64 / a.checked as f64,
        a.agree,
        100.0 * a.agree as f64 / a.checked as f64
    );
    let show = |frames: &[verify::Frame]| {
        frames
            .iter()
            .map(|f| {
                format!(
                    "{}:{}",
                    f.function.chars().take(40).collect::<String>(),
                    f.line
                )
            })
            .collect::<Vec<_>>()
            .join(" < ")
    };
    for (addr, ours, theirs) in a.examples.iter().take(5) {
        println!(
            "  {addr:#x}\n    ours:      {}\n    addr2line: {}",
            show(ours),
            show(theirs)
        );
    }
    Ok(())
}
