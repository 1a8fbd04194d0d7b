//! What `hpcrun-rs` says about the data half of a profile (`--data`): one summary line at the
//! end of a run, and the data references and allocation sites in `--show`.

use std::fmt::Write as _;

use fxhash::FxHashMap;

use crate::format::dataref::{DataProfile, DataRef, MemLevel, SourceHist, CLASS_NAMES};
use crate::format::db::Profile;

/// The end-of-run lines for a run with `--data`: data samples by class, how many clock samples
/// EA recovery resolved, allocation records; nothing for a run without.
pub fn summary_lines(data: &DataProfile) -> String {
    if data.is_empty() {
        return String::new();
    }
    let s = &data.stats;
    let total: u64 = s.by_class.iter().sum();
    let classes: Vec<String> = CLASS_NAMES
        .iter()
        .zip(s.by_class)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let mut out = format!("  data samples {total}: {}\n", classes.join(", "));
    if s.ea_attempted > 0 {
        let pct = 100.0 * s.ea_resolved as f64 / s.ea_attempted as f64;
        let _ = writeln!(
            out,
            "  clock samples with a data address (from the interrupted instruction): {} of {} ({pct:.1}%)",
            s.ea_resolved, s.ea_attempted
        );
    }
    match &s.heap_unavailable {
        Some(why) => {
            let _ = writeln!(out, "  heap blocks not tracked: {why}");
        }
        None => {
            let _ = writeln!(
                out,
                "  allocation records {}, lost {}",
                s.alloc_records, s.alloc_lost
            );
        }
    }
    out
}

/// The data-source lines of a profile with precise memory samples (`-e mem`): per event that
/// has them, its samples by the level that served them and their mean latency; nothing for
/// other profiles.
pub fn source_lines(profile: &Profile) -> String {
    let mut out = String::new();
    for (i, e) in profile.events.iter().enumerate() {
        let h = profile.data.source_total(i);
        if h.samples() > 0 {
            let _ = writeln!(
                out,
                "  {} samples by data source: {}",
                e.name,
                hist_text(&h)
            );
        }
    }
    out
}

/// A histogram as `L1 800 (64.8%), local DRAM 200 (16.2%), ...; mean latency 42.1 cycles`:
/// the levels that served any access, then the mean over the samples with a latency.
pub fn hist_text(h: &SourceHist) -> String {
    let total = h.samples().max(1) as f64;
    let levels: Vec<String> = MemLevel::ALL
        .iter()
        .zip(h.levels)
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{} {n} ({:.1}%)", l.name(), 100.0 * n as f64 / total))
        .collect();
    let mut text = levels.join(", ");
    if h.weighted > 0 {
        let _ = write!(
            text,
            "; mean latency {:.1} cycles ({} samples with one)",
            h.latency as f64 / h.weighted as f64,
            h.weighted
        );
    }
    text
}

/// One row of `--show`'s data references: a class and where in it, with its samples.
type Row = (u64, String);

/// The data references of `profile` for `--show`: totals by class, then the `top` heaviest
/// places (statics by module, heap by allocation site, stack by frame, mappings by kind) by
/// samples of the first metric, then every allocation site.
pub fn show(profile: &Profile, top: usize) -> String {
    let data = &profile.data;
    if data.is_empty() {
        return String::new();
    }
    let mut out = String::from("\ndata references:\n");
    out.push_str(&summary_lines(data));
    out.push_str(&source_lines(profile));
    // Per place: samples of the first metric, and the data sources of every event that has
    // them.
    let mut rows: FxHashMap<String, (u64, SourceHist)> = FxHashMap::default();
    for c in data.threads.iter().flat_map(|t| &t.costs) {
        let samples = c.costs.first().map_or(0, |c| c.samples);
        let row = rows.entry(place(profile, &c.data)).or_default();
        row.0 += samples;
        for h in &c.sources {
            row.1.merge(h);
        }
    }
    let mut rows: Vec<(Row, SourceHist)> =
        rows.into_iter().map(|(k, (n, h))| ((n, k), h)).collect();
    rows.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    for ((samples, place), h) in rows.iter().take(top) {
        let _ = writeln!(out, "  {samples:>7}  {place}");
        if h.samples() > 0 {
            let _ = writeln!(out, "           data sources: {}", hist_text(h));
        }
    }
    for (thread, t) in profile.threads.iter().zip(&data.threads) {
        for a in &t.allocs {
            let c = &a.counts;
            let _ = writeln!(
                out,
                "  allocation site {}/{}: {} blocks, {} bytes ({}..{} each), {} freed, peak live {}, live at end {}",
                thread.tid, a.node, c.calls, c.bytes, c.size_min, c.size_max, c.frees, c.peak_live, c.live_at_end
            );
        }
    }
    out
}

/// A data reference without its exact address: where `--show` groups it.
fn place(profile: &Profile, data: &DataRef) -> String {
    match *data {
        DataRef::Heap { tid, site, .. } => format!("heap    block of allocation site {tid}/{site}"),
        DataRef::Static { module, .. } => {
            let path = profile.modules.get(module.index()).map_or("?", |m| &m.path);
            format!("static  {path}")
        }
        DataRef::Stack { frame, .. } => format!("stack   frame {frame} of the sample's path"),
        DataRef::Mapping { kind } => format!("mapping {kind:?}"),
        DataRef::Unknown => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::db::tests::profile_with_data;

    #[test]
    fn the_data_source_histogram_is_shown_and_summarised_when_present() {
        let line = "  cpu-clock samples by data source: L1 1 (50.0%), HITM 1 (50.0%); \
                    mean latency 92.5 cycles (2 samples with one)\n";
        let with = profile_with_data(true);
        assert_eq!(source_lines(&with), line);
        let shown = show(&with, 10);
        assert!(shown.contains(line), "{shown}");
        assert!(
            shown.contains("      2  unknown\n           data sources: L1 1 (50.0%), HITM 1"),
            "{shown}"
        );

        let without = profile_with_data(false);
        assert_eq!(source_lines(&without), "");
        assert!(!show(&without, 10).contains("data source"));
    }
}
