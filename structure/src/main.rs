//! `hpcstruct-rs`: recover the program structure of an ELF binary or shared library and write
//! it as an HPCToolkit structure file.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use structure::{
    analyze_file_with, write_structure_file, DebugSource, Heuristics, Options, StructureError,
    Summary,
};

/// Recover procedures, inlined code, loop nests and source lines from an optimized x86-64 ELF
/// binary or shared library, and write them as an HPCToolkit structure file (hpcstruct XML 4.9)
/// that hpcprof-rs and HPCToolkit's hpcprof read.
///
/// Debug information is taken from the binary, from a separate file named by .gnu_debuglink,
/// or from /usr/lib/debug/.build-id/, else, where DEBUGINFOD_URLS names debuginfod servers
/// (http:// or https://), fetched from them by build-id into elfutils' cache; split DWARF
/// (-gsplit-dwarf) from the .dwo files its skeleton units name, or from BINARY.dwp. Without
/// it, procedures come from the symbol table and
/// loops from the code, with unknown lines. With line tables but no inline records, inlined
/// code is inferred from procedure bounds and the line map.
#[derive(Parser)]
#[command(
    name = "hpcstruct-rs",
    version,
    after_help = "Exit status: 0 ok, 2 bad usage or unusable input, 1 other failure."
)]
struct Cli {
    /// The executable or shared library to analyse.
    binary: PathBuf,
    /// Output file [default: `./BASENAME.hpcstruct`, BASENAME being the binary's file name].
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Worker threads [default: all cores].
    #[arg(short = 'j', long, value_name = "THREADS")]
    jobs: Option<usize>,
    /// Skip loop recovery (procedures, inlining and lines only).
    #[arg(long)]
    no_loops: bool,
    /// Where DWARF has no inline records (old compilers, .debug_info stripped down to the line
    /// table), do not infer inlined code from procedure bounds and the line map: leave such
    /// code in its host procedure.
    #[arg(long)]
    no_inferred_inlining: bool,
    /// List every irreducible loop (procedure, line and entry addresses) after the summary,
    /// which otherwise only counts them.
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    // clap exits with status 2 on a usage error, 0 for --help and --version.
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hpcstruct-rs: {}", structure::one_line(e.chain()));
            let bad_input = e.downcast_ref::<StructureError>().is_some_and(|s| {
                matches!(
                    s,
                    StructureError::NotElf { .. } | StructureError::NothingToAnalyse { .. }
                ) || matches!(s, StructureError::Io { path, .. } if *path == cli.binary)
            });
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let options = Options {
        threads: cli.jobs.unwrap_or(0),
        loops: !cli.no_loops,
    };
    let heuristics = Heuristics {
        line_map_aliens: !cli.no_inferred_inlining,
    };
    let analysis = analyze_file_with(&cli.binary, &options, &heuristics)?;
    let output = cli.output.clone().unwrap_or_else(|| {
        let base = cli
            .binary
            .file_name()
            .map_or("out".into(), |b| b.to_string_lossy().into_owned());
        PathBuf::from(format!("{base}.hpcstruct"))
    });
    let writing = std::time::Instant::now();
    write_structure_file(&output, std::slice::from_ref(&analysis.tree))
        .context("cannot write the structure file")?;
    print_summary(&cli.binary, &output, &analysis.summary, writing.elapsed());
    if cli.verbose {
        print_irreducible(&analysis.summary.irreducible_loops);
    }
    // The process ends here: freeing the tree piece by piece would take a tenth of a second
    // on a large binary, for memory the kernel takes back at once.
    std::mem::forget(analysis);
    Ok(())
}

fn print_summary(
    binary: &std::path::Path,
    output: &std::path::Path,
    s: &Summary,
    writing: std::time::Duration,
) {
    let debug = match &s.debug_source {
        DebugSource::Embedded => "embedded DWARF".to_string(),
        DebugSource::Separate(p) => format!("DWARF from {}", p.display()),
        DebugSource::None => "no DWARF: symbols only, lines unknown".to_string(),
    };
    let inferred = if s.inferred_inlined > 0 {
        format!(" ({} inferred from the line map)", s.inferred_inlined)
    } else {
        String::new()
    };
    let unitless = if s.unitless_line_programs > 0 {
        format!(", {} line tables without unit", s.unitless_line_programs)
    } else {
        String::new()
    };
    let mut kinds = Vec::new();
    if !s.irreducible_loops.is_empty() {
        kinds.push(format!("{} irreducible", s.irreducible_loops.len()));
    }
    if s.duplicated_tests > 0 {
        kinds.push(format!(
            "{} entered through a duplicated test",
            s.duplicated_tests
        ));
    }
    if s.split_entries > 0 {
        kinds.push(format!("{} entered through a short block", s.split_entries));
    }
    let irreducible = if kinds.is_empty() {
        String::new()
    } else {
        format!(" ({})", kinds.join(", "))
    };
    let unresolved = if s.unresolved_jumps > 0 {
        format!(", {} indirect jumps unresolved", s.unresolved_jumps)
    } else {
        String::new()
    };
    eprintln!(
        "hpcstruct-rs: {}: {} procedures, {} inlined instances{inferred}, {} loops{irreducible}{unresolved}, {} statements ({debug}, {} units{unitless}); analysis {:.2} s, writing {:.2} s -> {}",
        binary.display(),
        s.procedures,
        s.inlined,
        s.loops,
        s.statements,
        s.units,
        s.elapsed.as_secs_f64(),
        writing.as_secs_f64(),
        output.display()
    );
    if !s.skipped.is_empty() {
        eprintln!("hpcstruct-rs: skipped {} item(s):", s.skipped.len());
        for line in s.skipped.iter().take(20) {
            eprintln!("  {line}");
        }
        if s.skipped.len() > 20 {
            eprintln!("  ... and {} more", s.skipped.len() - 20);
        }
    }
}

/// List the irreducible loops: where they are and where control enters them.
fn print_irreducible(loops: &[structure::IrreducibleLoop]) {
    for l in loops {
        let file = l.file.rsplit('/').next().unwrap_or(&l.file);
        let entries: Vec<String> = l.entries.iter().map(|e| format!("{e:#x}")).collect();
        eprintln!(
            "  irreducible loop in {} at {file}:{}, entries {}",
            l.procedure,
            l.line,
            entries.join(" ")
        );
    }
}
