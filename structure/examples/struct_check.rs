//! Analyse a binary and compare its inline chains with an addr2line's, by readable names
//! (`-C -i -f`) and by link names (`-i -f`), and their shapes (frames and lines, names aside),
//! on randomly chosen line-table addresses; do the
//! same for the tree of a focused analysis of just those addresses (what `hpcprof-rs`
//! builds); count the inlined calls whose callee stayed unnamed. Prints the figures used by
//! `scripts/bench-structure`, each oracle's on a closing `summary` line.
//!
//! `--oracle PROGRAM` (repeatable) names the addr2line programs to compare with: binutils'
//! `addr2line` by default; gimli's (`cargo install addr2line --features bin`) or
//! `llvm-addr2line` take the same options. `--gdb` also compares readable names with binutils'
//! chains whose functions without a link name gdb names (`summary gdb-named` line, the
//! addresses where gdb sees other frames left out); `--all` prints every disagreement instead
//! of the first three of each comparison.
//!
//! ```text
//! cargo run -p structure --release --example struct_check -- [--oracle PROGRAM]... [--gdb] [--all] BINARY [SAMPLES]
//! ```

use anyhow::{bail, Context, Result};
use profiler::addr::Svma;
use std::path::Path;
use structure::verify::{self, Agreement, Naming, Oracle};
use structure::{analyze_file, analyze_focused, Options, ScopeTree};

fn main() -> Result<()> {
    let args = parse_args(std::env::args().skip(1).collect())?;
    let Some(path) = args.rest.first() else {
        bail!("usage: struct_check [--oracle PROGRAM]... [--gdb] [--all] BINARY [SAMPLES]");
    };
    let samples: usize = args
        .rest
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
    let shown = if args.all { usize::MAX } else { 3 };
    let compare = |tree: &ScopeTree, program, naming| {
        let oracle = Oracle { program, naming };
        verify::compare_with_oracle(tree, path, &addrs, &oracle)
    };
    for program in &args.oracles {
        println!("oracle: {program} -i -f");
        let readable = compare(&analysis.tree, program, Naming::Readable)?;
        report("  whole module, readable names (-C)", &readable);
        let link = compare(&analysis.tree, program, Naming::Link)?;
        report("  whole module, link names        ", &link);
        let focused = compare(&focused.tree, program, Naming::Readable)?;
        report("  focused,      readable names (-C)", &focused);
        show_disagreements(&readable, shown);
        show_disagreements(&link, shown);
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
    if args.gdb {
        println!("oracle: addr2line -C -i -f, functions without a link name named by gdb");
        let whole = compare(&analysis.tree, "addr2line", Naming::Gdb)?;
        report("  whole module", &whole);
        let focused = compare(&focused.tree, "addr2line", Naming::Gdb)?;
        report("  focused     ", &focused);
        show_disagreements(&whole, shown);
        for addr in whole.unjudged.iter().take(shown) {
            println!("    {addr:#x}: gdb sees other frames than addr2line");
        }
        println!(
            "summary gdb-named: chains {:.2}% focused chains {:.2}% unjudged {} (gdb sees other frames)",
            percent(whole.agree, whole.checked),
            percent(focused.agree, focused.checked),
            whole.unjudged.len()
        );
    }
    Ok(())
}

/// What the command line asks for.
struct Args {
    /// The `--oracle` programs (binutils' `addr2line` if none).
    oracles: Vec<String>,
    /// `--gdb`: compare with gdb's names too.
    gdb: bool,
    /// `--all`: print every disagreement.
    all: bool,
    /// BINARY [SAMPLES].
    rest: Vec<String>,
}

/// Read the command line's arguments (the program's name left out).
fn parse_args(args: Vec<String>) -> Result<Args> {
    let mut parsed = Args {
        oracles: Vec::new(),
        gdb: false,
        all: false,
        rest: Vec::new(),
    };
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--oracle" => parsed
                .oracles
                .push(iter.next().context("--oracle needs a program")?),
            "--gdb" => parsed.gdb = true,
            "--all" => parsed.all = true,
            _ => parsed.rest.push(arg),
        }
    }
    if parsed.oracles.is_empty() {
        parsed.oracles.push("addr2line".to_string());
    }
    Ok(parsed)
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
        .filter(|&&i| &*tree.get(i).name == "<unknown>")
        .count();
    (unknown, aliens.len())
}

/// Print the first `count` disagreements of `a`: ours and the oracle's chains.
fn show_disagreements(a: &Agreement, count: usize) {
    for (addr, ours, theirs) in a.disagreements.iter().take(count) {
        println!(
            "    {addr:#x}\n      ours:   {}\n      theirs: {}",
            show(ours, count),
            show(theirs, count)
        );
    }
}

/// A chain on one line, each name cut to 40 characters unless every disagreement is shown.
fn show(frames: &[verify::Frame], count: usize) -> String {
    let width = if count == usize::MAX { usize::MAX } else { 40 };
    frames
        .iter()
        .map(|f| {
            format!(
                "{}:{}",
                f.function.chars().take(width).collect::<String>(),
                f.line
            )
        })
        .collect::<Vec<_>>()
        .join(" < ")
}
