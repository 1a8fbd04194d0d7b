//! Analyse a binary and compare its inline chains with an addr2line's, by readable names
//! (`-C -i -f`) and by link names (`-i -f`), and their shapes (frames and lines, names aside),
//! on randomly chosen line-table addresses; do the
//! same for the tree of a focused analysis of just those addresses (what `hpcprof-rs`
//! builds); count the inlined calls whose callee stayed unnamed. Prints the figures used by
//! `scripts/bench-structure`, each oracle's on a closing `summary` line.
//!
//! `--oracle PROGRAM` (repeatable) names the addr2line programs to compare with: binutils'
//! `addr2line` by default; gimli's (`cargo install addr2line --features bin`) or
//! `llvm-addr2line` take the same options.
//!
//! ```text
//! cargo run -p structure --release --example struct_check -- [--oracle PROGRAM]... BINARY [SAMPLES]
//! ```

use anyhow::{bail, Context, Result};
use profiler::addr::Svma;
use std::path::Path;
use structure::verify::{self, Agreement, Naming, Oracle};
use structure::{analyze_file, analyze_focused, Options, ScopeTree};

fn main() -> Result<()> {
    let (oracles, rest) = parse_args(std::env::args().skip(1).collect())?;
    let Some(path) = rest.first() else {
        bail!("usage: struct_check [--oracle PROGRAM]... BINARY [SAMPLES]");
    };
    let samples: usize = rest
        .get(1)
        .map_or(Ok(2000), |s| s.parse())
        .context("SAMPLES")?;
    let path = Path::new(path);
    let analysis = analyze_file(path, &Options::default())?;
    let addrs = random_line_addresses(path, samples)?;
    let focused = analyze_focused(path, &addrs, &Options::default())?;
    let (unknown, inlined) = unknown_inlined(&analysis.tree);
    println!(
        "inlined calls {inlined}  with unknown callee {unknown} ({:.3}%)",
        percent(unknown, inlined)
    );
    for program in &oracles {
        let compare = |tree: &ScopeTree, naming| {
            let oracle = Oracle { program, naming };
            verify::compare_with_oracle(tree, path, &addrs, &oracle)
        };
        println!("oracle: {program} -i -f");
        let readable = compare(&analysis.tree, Naming::Readable)?;
        report("  whole module, readable names (-C)", &readable);
        let link = compare(&analysis.tree, Naming::Link)?;
        report("  whole module, link names        ", &link);
        let focused = compare(&focused.tree, Naming::Readable)?;
        report("  focused,      readable names (-C)", &focused);
        let examples = readable.examples.iter().take(3);
        for (addr, ours, theirs) in examples.chain(link.examples.iter().take(3)) {
            println!(
                "    {addr:#x}\n      ours:   {}\n      theirs: {}",
                show(ours),
                show(theirs)
            );
        }
        println!(
            "summary {program}: chains {:.2}% shapes {:.2}% lines {:.2}% link-name chains {:.2}% focused chains {:.2}% unknown {unknown} of {inlined} ({:.3}%)",
            percent(readable.agree, readable.checked),
            percent(readable.shape_agree, readable.checked),
            percent(readable.line_agree, readable.checked),
            percent(link.agree, link.checked),
            percent(focused.agree, focused.checked),
            percent(unknown, inlined)
        );
    }
    Ok(())
}

/// The `--oracle` programs (binutils' `addr2line` if none) and the other arguments.
fn parse_args(args: Vec<String>) -> Result<(Vec<String>, Vec<String>)> {
    let mut oracles = Vec::new();
    let mut rest = Vec::new();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        if arg == "--oracle" {
            oracles.push(iter.next().context("--oracle needs a program")?);
        } else {
            rest.push(arg);
        }
    }
    if oracles.is_empty() {
        oracles.push("addr2line".to_string());
    }
    Ok((oracles, rest))
}

/// `samples` line-table addresses of `path`, drawn with a fixed-seed xorshift (reproducible).
fn random_line_addresses(path: &Path, samples: usize) -> Result<Vec<Svma>> {
    let rows = structure::line_table_addresses(path)?;
    if rows.is_empty() {
        bail!("{}: no line table", path.display());
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    Ok((0..samples)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            rows[(state % rows.len() as u64) as usize]
        })
        .collect())
}

fn percent(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn report(what: &str, a: &Agreement) {
    println!(
        "{what}: addresses {}  in a statement {:.2}%  chains agree {:.2}%  shapes {:.2}%  lines {:.2}%",
        a.checked,
        percent(a.covered, a.checked),
        percent(a.agree, a.checked),
        percent(a.shape_agree, a.checked),
        percent(a.line_agree, a.checked),
    );
}

/// (inlined calls whose callee is `<unknown>`, all inlined calls) of `tree`.
fn unknown_inlined(tree: &ScopeTree) -> (usize, usize) {
    let aliens: Vec<_> = tree.ids().filter(|&i| tree.get(i).is_alien()).collect();
    let unknown = aliens
        .iter()
        .filter(|&&i| tree.get(i).name == "<unknown>")
        .count();
    (unknown, aliens.len())
}

fn show(frames: &[verify::Frame]) -> String {
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
}
