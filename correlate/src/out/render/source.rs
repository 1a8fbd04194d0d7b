//! The `--source FILE[:LINES]` output: source lines with their costs beside them.
//!
//! Costs come from the statements of a view (the flat view sums every calling context): a line's
//! exclusive cost is what was sampled on that line itself; its inclusive cost adds the calls made
//! from it, the code inlined from it, and, on a loop's header line, the whole loop. Without `LINES` the lines the profile touched are printed, with `...` between
//! non-adjacent ones; with `LINES` (`N` or `N-M`) every line of that range is printed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::path::{Component, Path};

use super::text::{heading, metric_columns};
use crate::db::node::NodeKind;
use crate::view::tree::{MetricInfo, ViewNode, ViewTree};

/// Why `--source` cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The `LINES` part is not `N` or `N-M` with `1 <= N <= M`.
    #[error("bad line range '{0}': expected N or N-M, e.g. 10-40")]
    BadRange(String),
    /// No statement of the profile is in a file matching the request.
    #[error("no samples in a file matching '{query}'; files with samples: {known}")]
    NoSuchFile {
        /// What the user asked for.
        query: String,
        /// The files that do have samples, comma-separated.
        known: String,
    },
    /// The request matches several files.
    #[error("'{query}' matches several files: {matches}; give more of the path")]
    Ambiguous {
        /// What the user asked for.
        query: String,
        /// The matching files, comma-separated.
        matches: String,
    },
}

/// An inclusive range of source lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    /// First line shown.
    pub first: u32,
    /// Last line shown.
    pub last: u32,
}

/// Split `FILE[:LINES]` into the file and the optional line range. A `:` whose suffix is not a
/// line range is part of the file name only if the suffix contains no digits-and-dash pattern.
pub fn parse_spec(spec: &str) -> Result<(String, Option<LineRange>), SourceError> {
    let Some((file, lines)) = spec.rsplit_once(':') else {
        return Ok((spec.to_string(), None));
    };
    if lines.is_empty() || !lines.chars().all(|c| c.is_ascii_digit() || c == '-') {
        return Ok((spec.to_string(), None));
    }
    let bad = || SourceError::BadRange(lines.to_string());
    let (first, last) = match lines.split_once('-') {
        Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
        None => {
            let n = lines.parse().map_err(|_| bad())?;
            (n, n)
        }
    };
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok((file.to_string(), Some(LineRange { first, last })))
}

/// Inclusive and exclusive cost of one line, per metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineCost {
    /// Inclusive cost per metric (the line and the calls made from it).
    pub incl: Vec<u64>,
    /// Exclusive cost per metric (the line itself).
    pub excl: Vec<u64>,
}

/// The costs of the lines of one source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCosts {
    /// The file's path as the profile records it.
    pub path: String,
    /// Costs by line number, for every line with samples.
    pub lines: BTreeMap<u32, LineCost>,
}

/// The per-line costs of the one file of `view` that matches `query`: the recorded path and the
/// query agree in their trailing path components.
pub fn file_costs(view: &ViewTree, query: &str) -> Result<FileCosts, SourceError> {
    let files: BTreeSet<&str> = view
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            NodeKind::Statement => n.file.as_deref(),
            NodeKind::Inlined => n.call_file.as_deref(),
            _ => None,
        })
        .collect();
    let matching: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| path_matches(f, query))
        .collect();
    let path = match matching.as_slice() {
        [one] => one.to_string(),
        [] => {
            return Err(SourceError::NoSuchFile {
                query: query.to_string(),
                known: files.into_iter().collect::<Vec<_>>().join(", "),
            })
        }
        many => {
            return Err(SourceError::Ambiguous {
                query: query.to_string(),
                matches: many.join(", "),
            })
        }
    };
    let mut lines: BTreeMap<u32, LineCost> = BTreeMap::new();
    add_line_costs(view, &path, &mut lines);
    Ok(FileCosts { path, lines })
}

/// The source line of `path` a node's cost belongs to: a statement's own line, a loop's header
/// line, or the call site of code inlined from that line.
fn line_in(n: &ViewNode, path: &str) -> Option<u32> {
    match n.kind {
        NodeKind::Statement | NodeKind::Loop if n.file.as_deref() == Some(path) => n.line,
        NodeKind::Inlined if n.call_file.as_deref() == Some(path) => n.call_line,
        _ => None,
    }
}

/// Add the costs of the whole view to the lines of `path`. A line's inclusive cost counts each
/// subtree once: not again below a scope already counted for that line (`open` counts, per line,
/// the enclosing scopes counted for it), so code inlined into itself from one line (recursive
/// templates) is not counted once per level. The walk uses an explicit stack, so views of any
/// depth are handled.
pub(crate) fn add_line_costs(view: &ViewTree, path: &str, lines: &mut BTreeMap<u32, LineCost>) {
    let metrics = view.metrics.len();
    let mut open: HashMap<u32, u32> = HashMap::new();
    // (node, entering?) pairs: a node's exit closes the line it opened.
    let mut stack = vec![(0usize, true)];
    while let Some((id, entering)) = stack.pop() {
        let n = &view.nodes[id];
        let Some(line) = line_in(n, path) else {
            if entering {
                stack.extend(n.children.iter().rev().map(|&c| (c, true)));
            }
            continue;
        };
        let depth = open.entry(line).or_insert(0);
        if !entering {
            *depth -= 1;
            continue;
        }
        let cost = lines.entry(line).or_insert_with(|| LineCost {
            incl: vec![0; metrics],
            excl: vec![0; metrics],
        });
        for m in 0..metrics {
            if *depth == 0 {
                cost.incl[m] = cost.incl[m].saturating_add(n.incl[m].value);
            }
            if n.kind == NodeKind::Statement {
                cost.excl[m] = cost.excl[m].saturating_add(n.excl[m].value);
            }
        }
        *depth += 1;
        stack.push((id, false));
        stack.extend(n.children.iter().rev().map(|&c| (c, true)));
    }
}

/// Whether the recorded path `recorded` names the file the user asked for as `query`: the
/// shorter of the two, as path components (ignoring `.`), is a suffix of the longer. So
/// `stlmap.cc`, `fixtures/stlmap.cc` and `/abs/tests/fixtures/stlmap.cc` all match
/// `/abs/tests/fixtures/stlmap.cc`.
pub(crate) fn path_matches(recorded: &str, query: &str) -> bool {
    let parts = |p: &str| -> Vec<String> {
        Path::new(p)
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    let (a, b) = (parts(recorded), parts(query));
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    !short.is_empty() && long.ends_with(short)
}

/// Print `costs` beside the lines of `source` (the file's text, if it could be read).
pub fn render(
    costs: &FileCosts,
    metrics: &[MetricInfo],
    source: Option<&str>,
    range: Option<LineRange>,
    absolute: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let text: Vec<&str> = source.map(|s| s.lines().collect()).unwrap_or_default();
    let shown: Vec<u32> = match range {
        Some(r) => (r.first..=r.last).collect(),
        None => costs.lines.keys().copied().collect(),
    };
    writeln!(out, "{}", super::printable(&costs.path))?;
    if source.is_none() {
        writeln!(out, "(source text not found; showing costs only)")?;
    }
    let [names, columns] = heading(metrics, absolute, " line  source");
    writeln!(out, "{names}\n{columns}")?;
    let zeros = vec![0; metrics.len()];
    let mut previous: Option<u32> = None;
    for line in shown {
        if range.is_some() && line as usize > text.len() && source.is_some() {
            break;
        }
        if previous.is_some_and(|p| line > p + 1) {
            writeln!(
                out,
                "{:>width$}",
                "...",
                width = 4 + columns_width(metrics, absolute)
            )?;
        }
        previous = Some(line);
        let (incl, excl) = costs
            .lines
            .get(&line)
            .map_or((&zeros, &zeros), |c| (&c.incl, &c.excl));
        let cols = if costs.lines.contains_key(&line) {
            metric_columns(metrics, incl, excl, absolute)
        } else {
            " ".repeat(columns_width(metrics, absolute))
        };
        // Line 0 is no line (CPython gives some instructions of a module's code line 0).
        let src = (line.checked_sub(1))
            .and_then(|i| text.get(i as usize))
            .copied()
            .unwrap_or("");
        let row = format!("{cols}  {line:>5}  {src}");
        writeln!(out, "{}", row.trim_end())?;
    }
    Ok(())
}

fn columns_width(metrics: &[MetricInfo], absolute: bool) -> usize {
    metric_columns(
        metrics,
        &vec![0; metrics.len()],
        &vec![1; metrics.len()],
        absolute,
    )
    .chars()
    .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::ViewKind;
    use profiler::db::Cost;

    #[test]
    fn specs_split_file_and_lines() {
        assert_eq!(parse_spec("a.c").unwrap(), ("a.c".into(), None));
        let (f, r) = parse_spec("src/a.c:10-20").unwrap();
        assert_eq!(
            (f.as_str(), r),
            (
                "src/a.c",
                Some(LineRange {
                    first: 10,
                    last: 20
                })
            )
        );
        assert_eq!(
            parse_spec("a.c:7").unwrap().1,
            Some(LineRange { first: 7, last: 7 })
        );
        assert!(matches!(
            parse_spec("a.c:20-10"),
            Err(SourceError::BadRange(_))
        ));
        assert!(matches!(
            parse_spec("a.c:1-2-3"),
            Err(SourceError::BadRange(_))
        ));
    }

    #[test]
    fn paths_match_by_trailing_components() {
        let rec = "/work/tests/fixtures/stlmap.cc";
        assert!(path_matches(rec, "stlmap.cc"));
        assert!(path_matches(rec, "./fixtures/stlmap.cc"));
        assert!(path_matches(rec, "/work/tests/fixtures/stlmap.cc"));
        assert!(!path_matches(rec, "map.cc"));
        assert!(!path_matches(rec, "other/stlmap.cc"));
        assert!(path_matches("stlmap.cc", "/x/y/stlmap.cc"));
    }

    fn cost(value: u64) -> Cost {
        Cost { samples: 1, value }
    }

    fn statement(file: &str, line: u32, incl: u64, excl: u64) -> ViewNode {
        let mut n = ViewNode::new(NodeKind::Statement, format!("{file}: {line}"), 1);
        n.file = Some(file.into());
        n.line = Some(line);
        n.incl[0] = cost(incl);
        n.excl[0] = cost(excl);
        n
    }

    fn inlined(name: &str, site: (&str, u32), incl: u64) -> ViewNode {
        let mut n = ViewNode::new(NodeKind::Inlined, name, 1);
        n.call_file = Some(site.0.into());
        n.call_line = Some(site.1);
        n.incl[0] = cost(incl);
        n
    }

    /// f > {a.c: 3 (60, 10), a.c: 5 (30), b.c: 5 (5)}; g > a.c: 3 (5).
    fn view() -> ViewTree {
        let mut root = ViewNode::new(NodeKind::Root, "<program root>", 1);
        root.incl[0] = cost(100);
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: Some(1),
            total: 100,
            samples: 100,
            read_with: None,
        }];
        let mut v = ViewTree::new(ViewKind::Flat, metrics, root);
        let f = v.push(0, ViewNode::new(NodeKind::Procedure, "f", 1));
        v.push(f, statement("/s/a.c", 3, 60, 10));
        v.push(f, statement("/s/a.c", 5, 30, 30));
        v.push(f, statement("/s/b.c", 5, 5, 5));
        let g = v.push(0, ViewNode::new(NodeKind::Inlined, "g", 1));
        v.push(g, statement("/s/a.c", 3, 5, 5));
        v
    }

    #[test]
    fn line_costs_sum_over_scopes_of_one_file() {
        let costs = file_costs(&view(), "a.c").unwrap();
        assert_eq!(costs.path, "/s/a.c");
        assert_eq!(costs.lines[&3].incl, [65]);
        assert_eq!(costs.lines[&3].excl, [15]);
        assert_eq!(costs.lines[&5].excl, [30]);
        assert!(matches!(
            file_costs(&view(), "c.c"),
            Err(SourceError::NoSuchFile { known, .. }) if known == "/s/a.c, /s/b.c"
        ));
    }

    #[test]
    fn inlined_calls_count_on_their_call_line_once() {
        // h, inlined from a.c:7, holds b.c code and (recursively) h inlined again from a.c:7.
        let mut v = view();
        let outer = v.push(0, inlined("h", ("/s/a.c", 7), 50));
        v.push(outer, statement("/s/b.c", 2, 30, 30));
        let inner = v.push(outer, inlined("h", ("/s/a.c", 7), 20));
        v.push(inner, statement("/s/b.c", 2, 20, 20));
        let costs = file_costs(&v, "a.c").unwrap();
        assert_eq!(
            costs.lines[&7].incl,
            [50],
            "the nested h is inside the outer one"
        );
        assert_eq!(costs.lines[&7].excl, [0], "no code of a.c:7 itself ran");
        assert_eq!(costs.lines[&3].incl, [65], "other lines unchanged");
    }

    #[test]
    fn rendering_puts_costs_beside_the_source() {
        let v = view();
        let costs = file_costs(&v, "a.c").unwrap();
        let src = "int x;\nvoid f() {\n  g();\n  int y;\n  y++;\n}\n";
        let mut out = Vec::new();
        render(&costs, &v.metrics, Some(src), None, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().skip(3).collect();
        assert!(
            rows[0].contains("65.0%") && rows[0].ends_with("3    g();"),
            "{text}"
        );
        assert!(rows[1].trim() == "...", "{text}");
        assert!(
            rows[2].contains("30.0%") && rows[2].ends_with("5    y++;"),
            "{text}"
        );
        let mut out = Vec::new();
        let range = Some(LineRange { first: 2, last: 4 });
        render(&costs, &v.metrics, Some(src), range, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3 + 3, "{text}");
        assert!(
            text.lines().nth(3).unwrap().trim() == "2  void f() {",
            "{text}"
        );
    }
}
