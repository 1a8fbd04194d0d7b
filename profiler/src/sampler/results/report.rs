//! What hpcrun-rs tells the user: the end-of-run summary, the `-L` event list, and a readable
//! dump of a `profile.db` (`--show`) for checking a measurement without correlating it.

use std::fmt::Write as _;

use crate::format::db::{Cct, CctNodeId, Frame, Profile, Sampling};
use crate::sampler::capture::events::{EventClass, EventSpec, KNOWN_EVENTS};
use crate::sampler::capture::perf::{self, AttrOptions, DEFAULT_STACK_SIZE};

/// What the user must hear while a run goes on, not at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Sampling of an attached process has started.
    Attached(u32),
    /// The command (this pid) was stopped by this signal and hpcrun-rs waits for it.
    Stopped(u32, i32),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Notice::Attached(pid) => {
                write!(f, "sampling process {pid} until it exits or Ctrl-C")
            }
            Notice::Stopped(pid, sig) => {
                let name = nix::sys::signal::Signal::try_from(sig)
                    .map(|s| s.as_str())
                    .unwrap_or("a signal");
                write!(
                    f,
                    "the command stopped itself ({name}); hpcrun-rs waits; send SIGCONT to {pid} (kill -CONT {pid})"
                )
            }
        }
    }
}

/// The summary printed on stderr at the end of a run.
pub fn summary(profile: &Profile, duration_s: f64, output: &str, notes: &[String]) -> String {
    let s = &profile.stats;
    let mut out = String::new();
    let events: Vec<String> = (profile.events.iter().enumerate())
        .map(|(i, e)| {
            let leader = profile.read_with.get(i).copied().flatten();
            match leader.and_then(|l| profile.events.get(l as usize)) {
                Some(l) => format!("{} counted and read with each {} sample", e.name, l.name),
                None => describe_event(e),
            }
        })
        .collect();
    let partial_pct = if s.samples == 0 {
        0.0
    } else {
        100.0 * s.partial as f64 / s.samples as f64
    };
    let _ = writeln!(
        out,
        "hpcrun-rs: measured {:.3} s of `{}`",
        duration_s,
        profile.command.join(" ")
    );
    let _ = writeln!(
        out,
        "  processes {}, threads {}, samples {}, lost records {}, partial unwinds {} ({:.1}%)",
        profile.processes.len(),
        profile.threads.len(),
        s.samples,
        s.lost,
        s.partial,
        partial_pct
    );
    if s.samples == 0 {
        let _ = writeln!(
            out,
            "  warning: no samples were taken: the run was shorter than the sampling interval or the \
             events never occurred (a higher rate such as -e cpu-clock@f10000 may help)"
        );
    }
    if s.lost > 0 {
        let _ = writeln!(
            out,
            "  warning: {} records were lost: the sample buffers filled before hpcrun-rs could \
             read them (many runnable threads keep it off the CPU); a larger --buffer-kib, a \
             lower rate, or running as root (the reader then gets real-time priority) helps",
            s.lost
        );
    }
    if s.stitched > 0 {
        let _ = writeln!(
            out,
            "  deep stacks completed from the previous sample: {}",
            s.stitched
        );
    }
    if s.throttled > 0 {
        let _ = writeln!(
            out,
            "  the kernel throttled sampling {} time(s)",
            s.throttled
        );
    }
    let _ = writeln!(
        out,
        "  events: {}; kernel time {}",
        events.join(", "),
        if profile.kernel_included {
            "included (under <kernel>)"
        } else {
            "not included (needs root or kernel.perf_event_paranoid <= 1)"
        }
    );
    out.push_str(&crate::sampler::results::report_data::summary_lines(
        &profile.data,
    ));
    out.push_str(&crate::sampler::results::report_data::source_lines(profile));
    out.push_str(&watch_summary(&profile.watch));
    out.push_str(&regions_summary(&profile.regions));
    for note in notes {
        let _ = writeln!(out, "  {note}");
    }
    let _ = writeln!(out, "  profile written to {output}");
    out
}

/// The end-of-run line of a run whose OpenMP runtime loaded hpcrun-rs's OpenMP tool: the
/// regions it recorded, and what it could not write; nothing for a run without.
fn regions_summary(r: &crate::format::openmp::RegionTimeline) -> String {
    if r.is_empty() && r.lost == 0 {
        return String::new();
    }
    let lost = match r.lost {
        0 => String::new(),
        n => format!(", {n} records lost (their regions are placed by the samples alone)"),
    };
    format!(
        "  OpenMP regions from the runtime's tools interface: {} regions, {} worker tasks{lost}\n",
        r.regions.len(),
        r.tasks.len()
    )
}

/// The end-of-run line of a `--watch` run: what was watched, the traps, and how many bindings
/// were found; nothing for a run without.
fn watch_summary(w: &crate::format::watchdb::WatchProfile) -> String {
    use crate::format::watchdb::WatchMode;
    let what = match (&w.mode, w.mode.sampled()) {
        (WatchMode::Variables(vars), _) => {
            let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
            format!("watch {} (every access)", names.join(","))
        }
        (_, Some((s, regions))) => {
            let hint = match regions.and_then(|r| r.heap.as_ref()) {
                None => " (--data also watches heap blocks)",
                Some(_) => "",
            };
            format!(
                "watch sample@{}: {} windows over {}{hint}",
                s.hz,
                s.windows,
                s.targets(regions)
            )
        }
        _ => return String::new(),
    };
    format!(
        "  {what}; {} traps, {} lost; {} producer -> consumer bindings (hpcview-rs --bindings)\n",
        w.traps,
        w.lost,
        w.bindings.len()
    )
}

fn describe_event(e: &crate::format::db::EventDesc) -> String {
    let rate = match e.sampling {
        _ if e.name == crate::format::db::OFF_CPU_EVENT => "every switch away from the CPU".into(),
        Sampling::Period(p) => format!("every {p} {}", e.unit),
        Sampling::Frequency(hz) => format!("{hz} Hz"),
    };
    match &e.requested {
        Some(r) => format!("{} at {rate} (instead of {r})", e.name),
        None => format!("{} at {rate}", e.name),
    }
}

/// The `-L` listing: every known event, whether this machine can sample it, and its cost.
pub fn list_events() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<9} {:<13} {:<16} cost per sample",
        "event", "kind", "unit", "status"
    );
    for e in KNOWN_EVENTS {
        let status = match e.class {
            EventClass::Memory(_) => precise_status(e.name),
            EventClass::Hardware | EventClass::Software => {
                let spec = EventSpec::parse(e.name).expect("known events parse");
                let opts = AttrOptions {
                    stack_size: 8,
                    kernel: false,
                    enable_on_exec: false,
                    data: false,
                    precise: Default::default(),
                };
                match perf::open(&perf::attr(&spec, &opts, false), 0, -1) {
                    Ok(_) => "available".to_string(),
                    Err(err) if perf::is_unsupported(&err) => "not supported".to_string(),
                    Err(err) if perf::is_denied(&err) => "not permitted".to_string(),
                    Err(err) => format!("error {}", err.raw_os_error().unwrap_or(0)),
                }
            }
        };
        let kind = match e.class {
            EventClass::Hardware => "hardware",
            EventClass::Software => "software",
            EventClass::Memory(_) => "memory",
        };
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<13} {:<16} {}",
            e.name, kind, e.unit, status, e.cost
        );
    }
    let max = perf::kernel_setting("perf_event_max_sample_rate").unwrap_or(0);
    let paranoid = perf::kernel_setting("perf_event_paranoid").unwrap_or(0);
    let _ = writeln!(
        out,
        "\nEvery sample also copies the user stack (--stack-size, default {DEFAULT_STACK_SIZE} bytes) for unwinding.\n\
         Syntax: -e NAME, NAME@PERIOD or NAME@fFREQUENCY (default @f1000; at most {max} Hz here).\n\
         `cycles` falls back to cpu-clock where there is no PMU. kernel.perf_event_paranoid is {paranoid}."
    );
    out
}

/// Whether precise memory event `name` can be sampled here: the units it would use, or why not.
fn precise_status(name: &str) -> String {
    let Some(units) = crate::sampler::capture::pmu::machine() else {
        return "no PEBS/IBS/SPE".to_string();
    };
    if !units.delivers_samples() {
        return format!("{}: not decoded", units.pmus.join("+"));
    }
    match EventSpec::parse_all(name) {
        Ok(_) => units.pmus.join("+"),
        Err(_) => "not on this PMU".to_string(),
    }
}

/// `--show`'s lines for a `--watch` run: what was watched, accesses and bindings.
fn show_watch(out: &mut String, w: &crate::format::watchdb::WatchProfile) {
    use crate::format::watchdb::WatchMode;
    let name = |f: u32| w.functions.get(f as usize).map_or("?", |s| s.as_str());
    match (&w.mode, w.mode.sampled()) {
        (WatchMode::Variables(vars), _) => {
            for (i, v) in vars.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "watch {}: {} of {} bytes at {:#x}",
                    v.name, v.watched, v.size, v.address
                );
                for a in w.accesses.iter().filter(|a| a.var as usize == i) {
                    let f = name(a.function);
                    let _ = writeln!(out, "  {f}: {} reads, {} writes", a.reads, a.writes);
                }
            }
        }
        (_, Some((s, regions))) => {
            let _ = writeln!(
                out,
                "watch sample@{}: {} windows over {}, scale x{:.1}",
                s.hz,
                s.windows,
                s.targets(regions),
                s.scale(regions)
            );
        }
        _ => return,
    }
    let _ = writeln!(out, "watch traps {}  lost {}", w.traps, w.lost);
    let _ = writeln!(
        out,
        "watch functions that trapped: {}",
        w.functions.join(", ")
    );
    for b in &w.bindings {
        let _ = writeln!(
            out,
            "binding {} -> {}: {:.0} bytes (+- {:.0}), {:.0} addresses, {} reads seen",
            name(b.producer),
            name(b.consumer),
            b.bytes,
            b.bytes_error,
            b.addresses,
            b.seen_reads
        );
    }
}

/// A readable dump of a profile: header, modules, threads, and each thread's hottest paths.
pub fn show(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "command: {}", profile.command.join(" "));
    let _ = writeln!(
        out,
        "host: {}   duration: {:.3} s   kernel: {}",
        profile.host,
        profile.end_ns.saturating_sub(profile.start_ns) as f64 / 1e9,
        profile.kernel_included
    );
    if let Some(rank) = profile.job.rank {
        let job = profile.job.job.as_deref().unwrap_or("-");
        let _ = writeln!(out, "rank: {rank}   job: {job}");
    }
    for (i, e) in profile.events.iter().enumerate() {
        let (samples, value) = profile.threads.iter().fold((0, 0), |(s, v), t| {
            let c = t.cct.total(i);
            (s + c.samples, v + c.value)
        });
        let _ = writeln!(
            out,
            "metric {i}: {}: {samples} samples, total {value} {}",
            describe_event(e),
            e.unit
        );
    }
    show_watch(&mut out, &profile.watch);
    let s = &profile.stats;
    let _ = writeln!(
        out,
        "samples {}  lost {}  partial {}  stitched {}  throttled {}",
        s.samples, s.lost, s.partial, s.stitched, s.throttled
    );
    if !profile.traces.threads.is_empty() {
        let _ = writeln!(out, "{}", profile.traces.summary("trace"));
    }
    if !profile.data.traces.threads.is_empty() {
        let _ = writeln!(out, "{}", profile.data.traces.summary("data trace"));
    }
    let _ = writeln!(out, "\nmodules:");
    for (i, m) in profile.modules.iter().enumerate() {
        let id = m.build_id.as_deref().map(hex).unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "  [{i}] {} (build-id {id})", m.path);
    }
    for t in &profile.threads {
        let total = t.cct.total(0);
        let _ = writeln!(
            out,
            "\nthread {} (pid {}, {}): {} samples, {} nodes",
            t.tid,
            t.pid,
            t.comm,
            total.samples,
            t.cct.nodes.len()
        );
        for (samples, path) in hottest_paths(&t.cct, top) {
            let _ = writeln!(out, "  {samples:>7}  {}", path_text(profile, &t.cct, path));
        }
    }
    out.push_str(&crate::sampler::results::report_data::show(profile, top));
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `top` nodes with the most samples of the first metric.
fn hottest_paths(cct: &Cct, top: usize) -> Vec<(u64, CctNodeId)> {
    let mut nodes: Vec<(u64, CctNodeId)> = cct
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let s = n.costs.first()?.samples;
            (s > 0).then_some((s, CctNodeId::from_index(i)))
        })
        .collect();
    nodes.sort_unstable_by(|a, b| b.cmp(a));
    nodes.truncate(top);
    nodes
}

/// A path from the root to `node`, leaf last, as `module+0xaddr` frames.
fn path_text(profile: &Profile, cct: &Cct, mut node: CctNodeId) -> String {
    let mut frames = Vec::new();
    while node != CctNodeId::ROOT {
        let n = &cct.nodes[node.index()];
        frames.push(match n.frame {
            Frame::Root => "<root>".to_string(),
            Frame::Partial => "<partial call paths>".to_string(),
            Frame::Kernel => "<kernel>".to_string(),
            Frame::Blocked(reason) => reason.label().to_string(),
            Frame::Unmapped { avma, .. } | Frame::Jit { avma, .. } => format!("{avma:#x}"),
            Frame::Python { code, line } => match profile.python_code.get(code as usize) {
                Some(c) => format!("{} ({}:{line})", c.name, c.file),
                None => format!("<python {code}>:{line}"),
            },
            Frame::Code { module, addr, .. } => {
                let path = profile
                    .modules
                    .get(module.index())
                    .map(|m| m.path.rsplit('/').next().unwrap_or(&m.path))
                    .unwrap_or("?");
                format!("{path}+{addr}")
            }
        });
        node = n.parent;
    }
    frames.reverse();
    frames.join(" > ")
}

#[cfg(test)]
mod tests {
    use crate::format::db::tests::profile_with_data;

    #[test]
    fn the_summary_shows_the_data_sources_of_the_data_half() {
        let with = profile_with_data(true);
        let line = crate::sampler::results::report_data::source_lines(&with);
        assert!(line.contains("by data source"), "{line}");
        let summary = super::summary(&with, 1.0, "p.db", &[]);
        assert!(summary.contains(&line), "{summary}");
    }
}
