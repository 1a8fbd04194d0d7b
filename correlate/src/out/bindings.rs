//! Producer/consumer bindings (QUAD's relation, seed 002 §4.1) from `hpcrun-rs --watch`: who
//! reads data that whom wrote, with the bytes and unique addresses per pair, as a table, JSON,
//! Graphviz dot, and QUAD's XML (`ORGANIZATION > PROFILE > QUAD > BINDING` with `PRODUCER`,
//! `CONSUMER`, `DATA_TRANSFER`, `UMA`: the schema of the thesis's Figure 4.4).
//!
//! The database keeps each profile's [`WatchProfile`]; [`bindings`] merges them by function
//! name: exact counts add up, sampled estimates add up with their variances.

use std::collections::BTreeMap;
use std::io::{self, Write};

use profiler::watchdb::{WatchMode, WatchProfile};
use serde_json::json;

use crate::out::render::printable;
use crate::Database;

/// One producer -> consumer pair over all profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingRow {
    /// The last writer.
    pub producer: String,
    /// The reader.
    pub consumer: String,
    /// Bytes transferred (exact, or the estimate for the whole run).
    pub bytes: f64,
    /// Standard error of `bytes` (0 when exact).
    pub bytes_error: f64,
    /// Unique byte addresses involved (estimated when sampled).
    pub addresses: f64,
    /// Read traps seen for this pair.
    pub reads: u64,
    /// Whether the words were on a stack.
    pub stack: bool,
}

/// Reads and writes of one watched variable by one function (`--watch VAR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRow {
    /// The variable.
    pub variable: String,
    /// The accessing function.
    pub function: String,
    /// Read traps.
    pub reads: u64,
    /// Write traps.
    pub writes: u64,
}

/// The bindings of a database, ready to render.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Bindings {
    /// Pairs, most bytes first.
    pub rows: Vec<BindingRow>,
    /// Per variable and function, for watched variables.
    pub accesses: Vec<AccessRow>,
    /// Whether every row is an exact count (only `--watch VAR` profiles).
    pub exact: bool,
    /// What was watched and how: a line per profile, and for sampling one saying how far to
    /// trust the absolute bytes.
    pub how: Vec<String>,
    /// Traps read, over all profiles.
    pub traps: u64,
    /// Traps lost (the kernel's ring was full, or the watchpoint was throttled).
    pub lost: u64,
}

/// A binding's key while summing: (producer, consumer, on the stack).
type PairKey = (String, String, bool);
/// A binding's sums: (bytes, their variance, addresses, reads).
type PairSum = (f64, f64, f64, u64);

/// The bindings of `db` (stack words left out with `no_stack`), or `None` when no profile was
/// measured with `--watch`.
pub fn bindings(db: &Database, no_stack: bool) -> Option<Bindings> {
    let watched: Vec<&WatchProfile> = db.watch.iter().filter(|w| !w.is_empty()).collect();
    if watched.is_empty() {
        return None;
    }
    let mut out = Bindings {
        exact: true,
        ..Default::default()
    };
    let mut pairs: BTreeMap<PairKey, PairSum> = BTreeMap::new();
    let mut accesses: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for w in watched {
        let name = |f: u32| w.functions.get(f as usize).cloned().unwrap_or_default();
        out.traps += w.traps;
        out.lost += w.lost;
        match (&w.mode, w.mode.sampled()) {
            (WatchMode::Variables(vars), _) => {
                let list: Vec<String> = vars
                    .iter()
                    .map(|v| format!("{} ({} of {} bytes)", v.name, v.watched, v.size))
                    .collect();
                out.how
                    .push(format!("exact: every access of {}", list.join(", ")));
                for a in &w.accesses {
                    let var = vars.get(a.var as usize).map_or("?", |v| v.name.as_str());
                    let e = accesses
                        .entry((var.to_string(), name(a.function)))
                        .or_default();
                    e.0 += a.reads;
                    e.1 += a.writes;
                }
            }
            (_, Some((s, regions))) => {
                out.exact = false;
                out.how.push(format!(
                    "sampled: {} windows at {} Hz on {}-byte words of {}, {:.3} ms watched of \
                     {:.3} s, scaled x{:.0}",
                    s.windows,
                    s.hz,
                    s.word,
                    s.targets(regions),
                    s.watched_ns as f64 / 1e6,
                    s.span_ns as f64 / 1e9,
                    s.scale(regions)
                ));
                out.how.push(
                    "absolute bytes are underestimates (every trap slows the watched window, \
                     many times over for data touched every few ns); compare the pairs' ratios"
                        .to_string(),
                );
            }
            _ => {}
        }
        for b in &w.bindings {
            if no_stack && b.stack {
                continue;
            }
            let e = pairs
                .entry((name(b.producer), name(b.consumer), b.stack))
                .or_default();
            e.0 += b.bytes;
            e.1 += b.bytes_error * b.bytes_error;
            e.2 += b.addresses;
            e.3 += b.seen_reads;
        }
    }
    out.rows = pairs
        .into_iter()
        .map(
            |((producer, consumer, stack), (bytes, var, addresses, reads))| BindingRow {
                producer,
                consumer,
                bytes,
                bytes_error: var.sqrt(),
                addresses,
                reads,
                stack,
            },
        )
        .collect();
    out.rows.sort_by(|a, b| b.bytes.total_cmp(&a.bytes));
    out.accesses = accesses
        .into_iter()
        .map(|((variable, function), (reads, writes))| AccessRow {
            variable,
            function,
            reads,
            writes,
        })
        .collect();
    Some(out)
}

/// The table: one row per binding, then reads and writes by function for watched variables.
pub fn render_text(b: &Bindings, out: &mut dyn Write) -> io::Result<()> {
    for how in &b.how {
        writeln!(out, "# {how}")?;
    }
    writeln!(out, "# {} traps, {} lost", b.traps, b.lost)?;
    match b.exact {
        true => writeln!(
            out,
            "{:>14} {:>10} {:>9}  binding",
            "bytes", "addresses", "reads"
        )?,
        false => writeln!(
            out,
            "{:>14} {:>12} {:>10} {:>9}  binding",
            "bytes (est.)", "std. error", "addresses", "reads seen"
        )?,
    }
    for r in &b.rows {
        let pair = format!("{} -> {}", printable(&r.producer), printable(&r.consumer));
        let stack = if r.stack { "  [stack]" } else { "" };
        match b.exact {
            true => writeln!(
                out,
                "{:>14.0} {:>10.0} {:>9}  {pair}{stack}",
                r.bytes, r.addresses, r.reads
            )?,
            false => writeln!(
                out,
                "{:>14.0} {:>12.0} {:>10.0} {:>9}  {pair}{stack}",
                r.bytes, r.bytes_error, r.addresses, r.reads
            )?,
        }
    }
    if !b.accesses.is_empty() {
        writeln!(out)?;
        writeln!(out, "{:>10} {:>10}  variable  function", "reads", "writes")?;
        for a in &b.accesses {
            writeln!(
                out,
                "{:>10} {:>10}  {}  {}",
                a.reads,
                a.writes,
                printable(&a.variable),
                printable(&a.function)
            )?;
        }
    }
    Ok(())
}

/// The bindings as JSON: `{exact, how[], traps, lost, bindings: [{producer, consumer, bytes,
/// bytes_error, addresses, reads, stack}], accesses: [{variable, function, reads, writes}]}`.
pub fn render_json(b: &Bindings, out: &mut dyn Write) -> io::Result<()> {
    let rows: Vec<_> = (b.rows.iter())
        .map(|r| {
            json!({"producer": r.producer, "consumer": r.consumer, "bytes": r.bytes,
                   "bytes_error": r.bytes_error, "addresses": r.addresses, "reads": r.reads,
                   "stack": r.stack})
        })
        .collect();
    let accesses: Vec<_> = (b.accesses.iter())
        .map(|a| {
            json!({"variable": a.variable, "function": a.function, "reads": a.reads,
                   "writes": a.writes})
        })
        .collect();
    let doc = json!({"exact": b.exact, "how": b.how, "traps": b.traps, "lost": b.lost,
                     "bindings": rows, "accesses": accesses});
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// Escape `text` for a double-quoted dot string or XML text.
fn escape(text: &str, xml: bool) -> String {
    let mut s = String::with_capacity(text.len());
    for c in printable(text).chars() {
        match (c, xml) {
            ('"', false) => s.push_str("\\\""),
            ('\\', false) => s.push_str("\\\\"),
            ('<', true) => s.push_str("&lt;"),
            ('>', true) => s.push_str("&gt;"),
            ('&', true) => s.push_str("&amp;"),
            ('"', true) => s.push_str("&quot;"),
            _ => s.push(c),
        }
    }
    s
}

/// Graphviz dot: one node per function, one edge per binding labelled with bytes and unique
/// addresses (QUAD's .dot graph).
pub fn render_dot(b: &Bindings, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "digraph bindings {{")?;
    writeln!(out, "  node [shape=box];")?;
    for r in &b.rows {
        let approx = if b.exact { "" } else { "~" };
        writeln!(
            out,
            "  \"{}\" -> \"{}\" [label=\"{approx}{:.0} B\\n{approx}{:.0} UMA\"];",
            escape(&r.producer, false),
            escape(&r.consumer, false),
            r.bytes,
            r.addresses
        )?;
    }
    writeln!(out, "}}")
}

/// QUAD's XML (seed 002, Figure 4.4): `DATA_TRANSFER` in bytes and `UMA` rounded to integers.
pub fn render_quad_xml(b: &Bindings, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "<?xml version=\"1.0\" encoding=\"UTF-8\" ?>")?;
    writeln!(out, "<!DOCTYPE ORGANIZATION SYSTEM \"architecture.dtd\">")?;
    writeln!(out, "<ORGANIZATION>\n  <PROFILE>\n    <QUAD>")?;
    for r in &b.rows {
        writeln!(out, "      <BINDING>")?;
        writeln!(
            out,
            "        <PRODUCER>{}</PRODUCER>",
            escape(&r.producer, true)
        )?;
        writeln!(
            out,
            "        <CONSUMER>{}</CONSUMER>",
            escape(&r.consumer, true)
        )?;
        writeln!(out, "        <DATA_TRANSFER>{:.0}</DATA_TRANSFER>", r.bytes)?;
        writeln!(out, "        <UMA>{:.0}</UMA>", r.addresses)?;
        writeln!(out, "      </BINDING>")?;
    }
    writeln!(out, "    </QUAD>\n  </PROFILE>\n</ORGANIZATION>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::watchdb::{Binding, WatchAccess, WatchedVar};

    fn db() -> Database {
        let mut db = Database::new(Vec::new());
        let binding = |producer, consumer, bytes: f64, stack| Binding {
            producer,
            consumer,
            stack,
            bytes,
            bytes_error: 0.0,
            addresses: 8.0,
            seen_bytes: bytes as u64,
            seen_reads: bytes as u64 / 8,
        };
        db.watch = vec![WatchProfile {
            mode: WatchMode::Variables(vec![WatchedVar {
                name: "buf".into(),
                address: 0x4040,
                size: 4096,
                watched: 8,
            }]),
            functions: vec!["produce".into(), "consume<1>".into(), "c2".into()],
            accesses: vec![WatchAccess {
                var: 0,
                function: 1,
                reads: 2000,
                writes: 0,
            }],
            bindings: vec![binding(0, 1, 16000.0, false), binding(0, 2, 8.0, true)],
            traps: 3000,
            lost: 0,
        }];
        db
    }

    #[test]
    fn bindings_merge_render_and_drop_stack_words_on_request() {
        let db = db();
        let b = bindings(&db, false).unwrap();
        assert_eq!(b.rows.len(), 2);
        assert_eq!(
            (b.rows[0].consumer.as_str(), b.rows[0].bytes),
            ("consume<1>", 16000.0)
        );
        assert_eq!(bindings(&db, true).unwrap().rows.len(), 1);
        assert!(bindings(&Database::new(Vec::new()), false).is_none());
        let mut xml = Vec::new();
        render_quad_xml(&b, &mut xml).unwrap();
        let xml = String::from_utf8(xml).unwrap();
        assert!(
            xml.contains("<CONSUMER>consume&lt;1&gt;</CONSUMER>"),
            "{xml}"
        );
        assert!(
            xml.contains("<DATA_TRANSFER>16000</DATA_TRANSFER>"),
            "{xml}"
        );
        let mut dot = Vec::new();
        render_dot(&b, &mut dot).unwrap();
        let dot = String::from_utf8(dot).unwrap();
        assert!(
            dot.contains("\"produce\" -> \"consume<1>\" [label=\"16000 B\\n8 UMA\"];"),
            "{dot}"
        );
        let mut text = Vec::new();
        render_text(&b, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("2000          0  buf  consume<1>"), "{text}");
    }
}
