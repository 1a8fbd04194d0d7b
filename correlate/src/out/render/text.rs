//! The text view: an indented tree like hpcviewer's, for a terminal or a pipe.
//!
//! Each row shows, per metric, the inclusive and exclusive cost as a percentage of the metric's
//! total (and the absolute values on request), then the scope's label indented by its depth.
//! Children appear in the tree's order (inclusive cost, descending). Children whose inclusive
//! cost is below the threshold (a percentage of the total) are folded into one `(N more)` row
//! carrying their summed costs, so every printed level still adds up. The hot path (from the root,
//! the costliest child while it holds at least `expand_hot_pct` of its parent) is always expanded,
//! even below the threshold or past the depth limit; on a terminal it is drawn in bold red.

use std::io::{self, Write};

use profiler::db::Cost;

use super::{indent, printable, MAX_INDENT_LEVELS};
use crate::db::node::NodeKind;
use crate::view::tree::{MetricInfo, ViewNode, ViewTree};

/// How the text view is laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct TextOptions {
    /// Children below this percentage of the first metric's total are folded into `(N more)`.
    pub threshold_pct: f64,
    /// Show scopes at most this deep (the root is depth 0); the hot path is exempt.
    pub depth: Option<usize>,
    /// The hot path descends while the costliest child holds at least this percentage of its
    /// parent's inclusive cost.
    pub expand_hot_pct: f64,
    /// Also print absolute values (seconds for clocks, counts otherwise).
    pub absolute: bool,
    /// Use ANSI colours (only when writing to a terminal).
    pub color: bool,
    /// Shorten procedure names to this many characters; `None` prints them in full.
    pub name_width: Option<usize>,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            threshold_pct: 1.0,
            depth: None,
            expand_hot_pct: 50.0,
            absolute: false,
            color: false,
            name_width: Some(70),
        }
    }
}

/// What a text rendering showed, for the tool's summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextSummary {
    /// Scope rows printed (not counting `(N more)` rows).
    pub rows: usize,
    /// Scopes folded into `(N more)` rows (counting each folded subtree's root once).
    pub folded: usize,
}

/// Print `view` as an indented tree to `out`. Rows deeper than `MAX_INDENT_LEVELS` are
/// indented as that level and their label is preceded by their depth, as `[1234] label`.
pub fn render(view: &ViewTree, opts: &TextOptions, out: &mut dyn Write) -> io::Result<TextSummary> {
    let mut printer = Printer {
        view,
        opts,
        hot: hot_path(view, opts.expand_hot_pct),
        out,
        summary: TextSummary::default(),
    };
    printer.header()?;
    printer.tree()?;
    Ok(printer.summary)
}

/// The first metric's value of a cost vector (zero for a view without metrics).
fn first_value(costs: &[Cost]) -> u64 {
    costs.first().map_or(0, |c| c.value)
}

/// Child indices from the root along the hot path: at each node, the costliest child while it
/// holds at least `pct` percent of that node's inclusive cost (first metric).
pub(crate) fn hot_path(view: &ViewTree, pct: f64) -> Vec<usize> {
    let mut path = Vec::new();
    let mut node = view.root();
    while let Some((i, child)) = node
        .children
        .iter()
        .map(|&c| &view.nodes[c])
        .enumerate()
        .max_by_key(|(i, c)| (first_value(&c.incl), std::cmp::Reverse(*i)))
    {
        let parent = first_value(&node.incl) as f64;
        if parent <= 0.0 || (first_value(&child.incl) as f64) * 100.0 < pct * parent {
            break;
        }
        path.push(i);
        node = child;
    }
    path
}

const RESET: &str = "\x1b[0m";
const HOT: &str = "\x1b[1;31m";
const DIM: &str = "\x1b[2m";
const LOOP: &str = "\x1b[36m";
const INLINED: &str = "\x1b[35m";
const HEADING: &str = "\x1b[1m";

/// Width of a percentage column (`100.0%`).
const PCT_WIDTH: usize = 7;
/// Width of an absolute-value column.
const ABS_WIDTH: usize = 10;

/// What is left to print, on the printer's explicit stack.
enum Row {
    /// A scope at `depth`, drawn as part of the hot path if `hot`.
    Scope { id: usize, depth: usize, hot: bool },
    /// One `(N more)` row at `depth` for these folded children.
    More { ids: Vec<usize>, depth: usize },
}

struct Printer<'a> {
    view: &'a ViewTree,
    opts: &'a TextOptions,
    hot: Vec<usize>,
    out: &'a mut dyn Write,
    summary: TextSummary,
}

impl Printer<'_> {
    fn paint(&self, style: &str, text: &str) -> String {
        if self.opts.color && !text.is_empty() {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    fn header(&mut self) -> io::Result<()> {
        for m in &self.view.metrics {
            writeln!(self.out, "{}", metric_summary(m))?;
        }
        for d in &self.view.derived {
            writeln!(
                self.out,
                "{} = {}",
                printable(&d.name),
                printable(&d.formula)
            )?;
        }
        let [mut names, columns] = heading(&self.view.metrics, self.opts.absolute, "scope");
        let mut columns = columns.trim_end_matches("scope").trim_end().to_string();
        for d in &self.view.derived {
            names.push_str(&format!(
                "{:>w$}",
                clip(&printable(&d.name), 2 * ABS_WIDTH - 1),
                w = 2 * ABS_WIDTH
            ));
            columns.push_str(&format!("{:>ABS_WIDTH$}{:>ABS_WIDTH$}", "incl", "excl"));
        }
        columns.push_str("  scope");
        let names = self.paint(HEADING, &names);
        let columns = self.paint(HEADING, &columns);
        writeln!(self.out, "{names}")?;
        writeln!(self.out, "{columns}")
    }

    /// The row's metric columns, then its derived metrics' (computed from the same values,
    /// so a folded row's are those of its sums).
    fn columns(&self, incl: &[u64], excl: &[u64]) -> String {
        let mut s = metric_columns(&self.view.metrics, incl, excl, self.opts.absolute);
        let costs = |values: &[u64]| -> Vec<Cost> {
            (values.iter())
                .map(|&value| Cost { value, samples: 0 })
                .collect()
        };
        let (incl, excl) = (costs(incl), costs(excl));
        for d in &self.view.derived {
            for v in [d.value(&incl), d.value(&excl)] {
                s.push_str(&format!(
                    "{:>ABS_WIDTH$}",
                    v.map_or_else(String::new, derived_number)
                ));
            }
        }
        s
    }

    fn label(&self, node: &ViewNode, hot: bool) -> String {
        let text = printable(&node.label_within(self.opts.name_width)).into_owned();
        let style = match node.kind {
            _ if hot => HOT,
            NodeKind::Loop => LOOP,
            NodeKind::Inlined => INLINED,
            _ => "",
        };
        let mut label = if style.is_empty() {
            text
        } else {
            self.paint(style, &text)
        };
        if matches!(
            node.kind,
            NodeKind::Procedure | NodeKind::Kernel | NodeKind::Inlined
        ) {
            if let Some(site) = node.call_site() {
                label.push_str("  ");
                label.push_str(&self.paint(DIM, &format!("({})", printable(&site))));
            }
        }
        label
    }

    /// Print every row, depth first, from an explicit stack.
    fn tree(&mut self) -> io::Result<()> {
        let mut stack = vec![Row::Scope {
            id: 0,
            depth: 0,
            hot: true,
        }];
        while let Some(row) = stack.pop() {
            match row {
                Row::Scope { id, depth, hot } => self.scope(id, depth, hot, &mut stack)?,
                Row::More { ids, depth } => self.more(&ids, depth)?,
            }
        }
        Ok(())
    }

    /// Print the row of scope `id` and push what comes below it: the children shown, then one
    /// `(N more)` row for those folded.
    fn scope(
        &mut self,
        id: usize,
        depth: usize,
        hot: bool,
        stack: &mut Vec<Row>,
    ) -> io::Result<()> {
        let view = self.view;
        let node = &view.nodes[id];
        let row = format!(
            "{}  {}{}",
            self.columns(&values(&node.incl), &values(&node.excl)),
            indentation(depth),
            self.label(node, hot)
        );
        writeln!(self.out, "{}", row.trim_end())?;
        self.summary.rows += 1;
        let hot_child = if hot {
            self.hot.get(depth).copied()
        } else {
            None
        };
        let total = view.metrics.first().map_or(0, |m| m.total) as f64;
        let deep_enough = self.opts.depth.is_some_and(|max| depth + 1 > max);
        let mut shown = Vec::new();
        let mut folded = Vec::new();
        for (i, (c, child)) in view.children(id).enumerate() {
            let is_hot = hot_child == Some(i);
            let big = first_value(&child.incl) as f64 * 100.0 >= self.opts.threshold_pct * total;
            if is_hot || (big && !deep_enough) {
                shown.push(Row::Scope {
                    id: c,
                    depth: depth + 1,
                    hot: is_hot,
                });
            } else {
                folded.push(c);
            }
        }
        if !folded.is_empty() {
            stack.push(Row::More {
                ids: folded,
                depth: depth + 1,
            });
        }
        stack.extend(shown.into_iter().rev());
        Ok(())
    }

    /// One `(N more)` row standing for the folded children `ids`, with their summed costs.
    fn more(&mut self, ids: &[usize], depth: usize) -> io::Result<()> {
        let nodes = &self.view.nodes;
        let n = self.view.metrics.len();
        let sum = |pick: fn(&ViewNode) -> &[Cost]| -> Vec<u64> {
            (0..n)
                .map(|m| {
                    ids.iter()
                        .map(|&c| pick(&nodes[c])[m].value)
                        .fold(0, u64::saturating_add)
                })
                .collect()
        };
        let incl = sum(|c| &c.incl);
        let excl = sum(|c| &c.excl);
        let text = self.paint(DIM, &format!("({} more)", ids.len()));
        writeln!(
            self.out,
            "{}  {}{text}",
            self.columns(&incl, &excl),
            indentation(depth)
        )?;
        self.summary.folded += ids.len();
        Ok(())
    }
}

/// A derived metric's value in at most ten characters: four significant digits, in scientific
/// notation when it is very large or very small.
fn derived_number(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// The indentation of a row at `depth`: two spaces per level up to [`MAX_INDENT_LEVELS`], then
/// the depth in brackets.
fn indentation(depth: usize) -> String {
    let mut s = indent(depth);
    if depth > MAX_INDENT_LEVELS {
        s.push_str(&format!("[{depth}] "));
    }
    s
}

/// The values (in the metric's unit) of one cost per metric.
fn values(costs: &[Cost]) -> Vec<u64> {
    costs.iter().map(|c| c.value).collect()
}

/// One line saying what a metric adds up to, e.g.
/// `cpu-clock: 4.123s in 4123 samples (period 1.000ms)`.
pub(crate) fn metric_summary(m: &MetricInfo) -> String {
    let (name, total, n) = (
        printable(&m.name),
        format_value(m.total, &m.unit),
        m.samples,
    );
    if let Some(leader) = &m.read_with {
        let leader = printable(leader);
        return format!("{name}: {total} counted, read with {n} {leader} samples");
    }
    let sampling = match m.period {
        _ if m.name == profiler::db::OFF_CPU_EVENT => "every switch away from the CPU".to_string(),
        _ if m.name == crate::db::database::WALL_METRIC => "on and off the CPU".to_string(),
        Some(p) => format!("period {}", format_value(p, &m.unit)),
        None => "frequency-sampled".to_string(),
    };
    format!("{name}: {total} in {n} samples ({sampling})")
}

/// Two heading lines for the metric columns: metric names over their column groups, then
/// `incl%`/`excl%` (and `incl`/`excl` for absolute values) followed by `last` (the row label's
/// heading).
pub(crate) fn heading(metrics: &[MetricInfo], absolute: bool, last: &str) -> [String; 2] {
    let width = if absolute {
        2 * (PCT_WIDTH + ABS_WIDTH)
    } else {
        2 * PCT_WIDTH
    };
    let mut names = String::new();
    let mut columns = String::new();
    for m in metrics {
        names.push_str(&format!("{:>width$}", clip(&printable(&m.name), width - 1)));
        for kind in ["incl", "excl"] {
            if absolute {
                columns.push_str(&format!("{kind:>ABS_WIDTH$}"));
            }
            columns.push_str(&format!("{:>PCT_WIDTH$}", format!("{kind}%")));
        }
    }
    columns.push_str("  ");
    columns.push_str(last);
    [names, columns]
}

/// The metric columns of one row: per metric, the inclusive and exclusive values as percentages
/// of the metric's total (preceded by absolute values when `absolute`); a zero exclusive value is
/// left blank, as hpcviewer does.
pub(crate) fn metric_columns(
    metrics: &[MetricInfo],
    incl: &[u64],
    excl: &[u64],
    absolute: bool,
) -> String {
    let mut s = String::new();
    for (i, m) in metrics.iter().enumerate() {
        for (value, blank_zero) in [(incl[i], false), (excl[i], true)] {
            let show = !(blank_zero && value == 0);
            if absolute {
                let abs = if show {
                    format_value(value, &m.unit)
                } else {
                    String::new()
                };
                s.push_str(&format!("{abs:>ABS_WIDTH$}"));
            }
            let pct = if show {
                percent(value, m.total)
            } else {
                String::new()
            };
            s.push_str(&format!("{pct:>PCT_WIDTH$}"));
        }
    }
    s
}

/// `value` as a percentage of `total`, one decimal (`-` when the total is zero).
fn percent(value: u64, total: u64) -> String {
    if total == 0 {
        return "-".to_string();
    }
    format!("{:.1}%", value as f64 * 100.0 / total as f64)
}

/// An absolute value for display: seconds (or milliseconds) for `ns`, a count with a k/M/G
/// suffix otherwise.
pub(crate) fn format_value(value: u64, unit: &str) -> String {
    if unit == "ns" {
        let secs = value as f64 / 1e9;
        return if secs >= 1.0 {
            format!("{secs:.3}s")
        } else {
            format!("{:.3}ms", secs * 1e3)
        };
    }
    let v = value as f64;
    match value {
        0..=9_999 => value.to_string(),
        10_000..=9_999_999 => format!("{:.1}k", v / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1}M", v / 1e6),
        _ => format!("{:.1}G", v / 1e9),
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::ViewKind;

    fn node(kind: NodeKind, name: &str, incl: u64, excl: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.incl[0] = Cost {
            samples: incl,
            value: incl,
        };
        n.excl[0] = Cost {
            samples: excl,
            value: excl,
        };
        n
    }

    /// root 1000 > main 990 > {hot 900 > {leaf 880, tiny 5, tinier 5}, cold 80, 5 x 2}
    fn sample_view() -> ViewTree {
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: Some(1_000_000),
            total: 1000,
            samples: 1000,
            read_with: None,
        }];
        let root = node(NodeKind::Root, "<program root>", 1000, 0);
        let mut view = ViewTree::new(ViewKind::TopDown, metrics, root);
        let main = view.push(0, node(NodeKind::Procedure, "main", 990, 0));
        view.push(0, node(NodeKind::Partial, "<partial call paths>", 10, 10));
        let hot = view.push(main, node(NodeKind::Procedure, "hot", 900, 10));
        view.push(hot, node(NodeKind::Procedure, "leaf", 880, 880));
        view.push(hot, node(NodeKind::Procedure, "tiny", 5, 5));
        view.push(hot, node(NodeKind::Procedure, "tinier", 5, 5));
        view.push(main, node(NodeKind::Procedure, "cold", 80, 80));
        for i in 0..5 {
            view.push(main, node(NodeKind::Statement, &format!("s{i}"), 2, 2));
        }
        view
    }
    fn render_to_string(view: &ViewTree, opts: &TextOptions) -> (String, TextSummary) {
        let mut out = Vec::new();
        let summary = render(view, opts, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    #[test]
    fn rows_are_indented_in_order_with_percentages() {
        let (text, _) = render_to_string(&sample_view(), &TextOptions::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "cpu-clock: 0.001ms in 1000 samples (period 1.000ms)"
        );
        assert!(lines[1].trim() == "cpu-clock" && lines[2].trim() == "incl%  excl%  scope");
        let lines = &lines[1..];
        assert!(lines[2].ends_with("  <program root>"), "{text}");
        assert!(lines[2].contains("100.0%"));
        assert!(
            lines[3].ends_with("    main") && lines[3].contains("99.0%"),
            "{text}"
        );
        assert!(
            lines[4].ends_with("      hot") && lines[4].contains("90.0%"),
            "{text}"
        );
        assert!(
            lines[5].contains("88.0%") && lines[5].contains("leaf"),
            "{text}"
        );
        let cold = lines.iter().position(|l| l.ends_with(" cold")).unwrap();
        assert!(cold > 5, "cold comes after hot's subtree:\n{text}");
    }

    #[test]
    fn small_children_fold_into_one_row_with_their_sum() {
        let (text, summary) = render_to_string(&sample_view(), &TextOptions::default());
        // tiny + tinier: 1.0% together; the five statements: 1.0% together.
        let more: Vec<&str> = text.lines().filter(|l| l.contains("more)")).collect();
        assert_eq!(more.len(), 2, "{text}");
        assert!(
            more[0].contains("(2 more)") && more[0].contains("1.0%"),
            "{text}"
        );
        assert!(
            more[1].contains("(5 more)") && more[1].contains("1.0%"),
            "{text}"
        );
        assert_eq!(summary.folded, 7);
        assert!(!text.contains("tinier"));
        // The partial root holds exactly 1% and so is shown.
        assert!(text.contains("<partial call paths>"));
    }

    #[test]
    fn the_hot_path_survives_the_depth_limit() {
        let opts = TextOptions {
            depth: Some(1),
            ..TextOptions::default()
        };
        let (text, _) = render_to_string(&sample_view(), &opts);
        assert!(
            text.contains(" leaf"),
            "hot path expanded past depth 1:\n{text}"
        );
        assert!(!text.contains(" cold"), "{text}");
        assert_eq!(hot_path(&sample_view(), 50.0), [0, 0, 0]);
        assert_eq!(hot_path(&sample_view(), 99.5), Vec::<usize>::new());
    }

    #[test]
    fn threshold_zero_shows_everything() {
        let opts = TextOptions {
            threshold_pct: 0.0,
            ..TextOptions::default()
        };
        let (text, summary) = render_to_string(&sample_view(), &opts);
        assert_eq!(summary.rows, sample_view().nodes.len());
        assert!(!text.contains("more)"));
    }

    #[test]
    fn colour_codes_appear_only_when_asked() {
        let (plain, _) = render_to_string(&sample_view(), &TextOptions::default());
        assert!(!plain.contains('\x1b'));
        let opts = TextOptions {
            color: true,
            ..TextOptions::default()
        };
        let (coloured, _) = render_to_string(&sample_view(), &opts);
        assert!(
            coloured.contains(&format!("{HOT}leaf{RESET}")),
            "{coloured}"
        );
    }

    #[test]
    fn absolute_values_use_the_unit() {
        assert_eq!(format_value(2_500_000_000, "ns"), "2.500s");
        assert_eq!(format_value(1_500_000, "ns"), "1.500ms");
        assert_eq!(format_value(12_345, "events"), "12.3k");
        let opts = TextOptions {
            absolute: true,
            ..TextOptions::default()
        };
        let (text, _) = render_to_string(&sample_view(), &opts);
        assert!(text.contains("0.001ms"), "{text}");
    }
}
