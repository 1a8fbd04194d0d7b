//! The `--asm PROCEDURE` output: a procedure's machine code with each instruction's costs (user
//! and kernel mode, as shares of the run), indented by the loops and inlined calls the
//! structure recovers, its hottest instructions marked `>>`, jumps named, and what the samples
//! of each metric say about the instruction they name (skid).

use std::io::{self, Write};

use crate::view::asm::{AsmLine, AsmView};

/// How many of the hottest instructions (by the first metric) are marked.
const MARKED: usize = 3;

/// Write `view` as text.
pub fn render(view: &AsmView, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{}  ({}; {} loops)",
        view.procedure,
        view.binary.display(),
        view.loops
    )?;
    for (m, (name, unit)) in view.metrics.iter().enumerate() {
        writeln!(
            out,
            "  {name}: own code {} {unit} ({}), inlined code {} ({}), kernel below it {} ({})",
            view.own[m],
            share(view.own[m], view.run_totals[m]),
            view.inlined[m],
            share(view.inlined[m], view.run_totals[m]),
            view.kernel[m],
            share(view.kernel[m], view.run_totals[m]),
        )?;
        match &view.read_with[m] {
            Some(leader) => writeln!(
                out,
                "    counted, and read with each {leader} sample: its counts land on the \
                 instruction that sample names"
            )?,
            None => writeln!(out, "    {}", where_samples_land(name))?,
        }
    }
    let hottest = hottest(view);
    let mut header = String::from("   ");
    let mut units = String::from("   ");
    for (name, _) in &view.metrics {
        header.push_str(&format!(" {:>13}", clip(name, 13)));
        units.push_str("  user%  kern%");
    }
    writeln!(out, "{header}  address   instruction")?;
    writeln!(out, "{units}")?;
    for line in &view.lines {
        match line {
            AsmLine::Scope { depth, label } => {
                let pad = 3 + 14 * view.metrics.len() + 12 + 2 * depth;
                writeln!(out, "{:pad$}{label}", "")?;
            }
            AsmLine::Instruction(i) => {
                let mark = if hottest.contains(&i.address) {
                    ">> "
                } else {
                    "   "
                };
                let mut row = String::from(mark);
                for m in 0..view.metrics.len() {
                    let total = view.run_totals[m];
                    row.push_str(&format!(
                        " {:>6} {:>6}",
                        cell(i.costs[m], total),
                        cell(i.kernel[m], total)
                    ));
                }
                let indent = 2 * i.depth;
                row.push_str(&format!(
                    "  {:#8x}  {:indent$}{:<34}",
                    i.address, "", i.text
                ));
                if let Some(jump) = &i.jump {
                    row.push_str(&format!(" ; {jump}"));
                }
                if let Some(line) = &i.line {
                    row.push_str(&format!("  {line}"));
                }
                writeln!(out, "{}", row.trim_end())?;
            }
        }
    }
    Ok(())
}

/// The addresses of the [`MARKED`] instructions with the most of the first metric.
fn hottest(view: &AsmView) -> Vec<u64> {
    let mut hot: Vec<(u64, u64)> = (view.lines.iter())
        .filter_map(|l| match l {
            AsmLine::Instruction(i) => {
                let v =
                    i.costs.first().copied().unwrap_or(0) + i.kernel.first().copied().unwrap_or(0);
                (v > 0).then_some((v, i.address))
            }
            AsmLine::Scope { .. } => None,
        })
        .collect();
    hot.sort_unstable_by(|a, b| b.cmp(a));
    hot.into_iter().take(MARKED).map(|(_, a)| a).collect()
}

/// `value` as a share of `total`, for the summary.
fn share(value: u64, total: u64) -> String {
    match total {
        0 => "-".into(),
        _ => format!("{:.1}% of the run", 100.0 * value as f64 / total as f64),
    }
}

/// `value` as a percentage of `total`, blank where nothing was sampled.
fn cell(value: u64, total: u64) -> String {
    match (value, total) {
        (0, _) | (_, 0) => String::new(),
        _ => format!("{:.1}%", 100.0 * value as f64 / total as f64),
    }
}

/// At most `width` characters of `name`.
fn clip(name: &str, width: usize) -> &str {
    name.char_indices()
        .nth(width)
        .map_or(name, |(i, _)| &name[..i])
}

/// What a sample of metric `name` says about the instruction it names.
fn where_samples_land(name: &str) -> &'static str {
    match name {
        "cpu-clock" | "task-clock" => {
            "a clock sample names the instruction the timer interrupt found next to run: a slow \
             instruction's cost often shows on the one after it"
        }
        "page-faults" | "minor-faults" | "major-faults" => {
            "exact: a fault names the instruction that touched the page (its handler's time is \
             the kernel column)"
        }
        "off-cpu" | "wall" => {
            "the instruction after the system call that blocked (where the thread resumed)"
        }
        "mem" | "mem-loads" | "mem-stores" => "precise: the memory instruction itself (PEBS, IBS)",
        _ => {
            "a counter's overflow interrupt lands a few instructions after the one that caused \
             it (skid), more after a long-latency instruction"
        }
    }
}
