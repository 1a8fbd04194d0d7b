//! What `hpcrun-rs` says about the data half of a profile (`--data`): one summary line at the
//! end of a run, and the data references and allocation sites in `--show`.

use std::fmt::Write as _;

use fxhash::FxHashMap;

use crate::dataref::{DataProfile, DataRef, CLASS_NAMES};
use crate::db::Profile;

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
    let mut rows: FxHashMap<String, u64> = FxHashMap::default();
    for c in data.threads.iter().flat_map(|t| &t.costs) {
        let samples = c.costs.first().map_or(0, |c| c.samples);
        *rows.entry(place(profile, &c.data)).or_default() += samples;
    }
    let mut rows: Vec<Row> = rows.into_iter().map(|(k, v)| (v, k)).collect();
    rows.sort_unstable_by(|a, b| b.cmp(a));
    for (samples, place) in rows.iter().take(top) {
        let _ = writeln!(out, "  {samples:>7}  {place}");
    }
    for (thread, t) in profile.threads.iter().zip(&data.threads) {
        for a in &t.allocs {
            let _ = writeln!(
                out,
                "  allocation site {}/{}: {} blocks, {} bytes ({}..{} each), {} freed, peak live {}, live at end {}",
                thread.tid, a.node, a.calls, a.bytes, a.size_min, a.size_max, a.frees, a.peak_live, a.live_at_end
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
