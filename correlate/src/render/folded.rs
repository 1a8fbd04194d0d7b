//! The `--folded` output: one `frame;frame;... count` line per distinct path, root first.
//!
//! Counts are samples of one metric taken directly at a path's last frame, so the lines sum to
//! that metric's sample count. Procedures, inlined code (`name_[i]`, inferno's inline
//! annotation), loops (`loop at file: line`) and placeholders are frames; the program root and
//! statements are not (a statement's samples belong to the frame around it), so paths that differ
//! only in lines merge into one line. The output goes straight into `inferno-flamegraph` or
//! `flamegraph.pl`.

use std::collections::HashMap;
use std::io::{self, Write};

use super::labels::folded_frame;
use crate::viewtree::{ViewNode, ViewTree};

/// The folded stacks of `view` for metric `metric`: (frames joined by `;`, samples), in the
/// tree's order (costliest first), each path once.
pub fn stacks(view: &ViewTree, metric: usize) -> Vec<(String, u64)> {
    let mut collector = Collector::default();
    let mut frames = Vec::new();
    collector.visit(&view.root, metric, &mut frames, &view.root.name);
    collector.lines
}

/// What [`render`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldedSummary {
    /// Lines (distinct paths).
    pub stacks: usize,
    /// Samples over all lines.
    pub samples: u64,
}

/// Write the folded stacks of `view` for metric `metric`.
pub fn render(view: &ViewTree, metric: usize, out: &mut dyn Write) -> io::Result<FoldedSummary> {
    let mut summary = FoldedSummary::default();
    for (path, count) in stacks(view, metric) {
        writeln!(out, "{path} {count}")?;
        summary.stacks += 1;
        summary.samples += count;
    }
    Ok(summary)
}

#[derive(Default)]
struct Collector {
    lines: Vec<(String, u64)>,
    index: HashMap<String, usize>,
}

impl Collector {
    fn visit(&mut self, node: &ViewNode, metric: usize, frames: &mut Vec<String>, root: &str) {
        let frame = folded_frame(node);
        let pushed = frame.is_some();
        if let Some(f) = frame {
            frames.push(f);
        }
        let own = node.own.get(metric).map_or(0, |o| o.samples);
        if own > 0 {
            // Samples at the root itself (none in a well-formed profile) keep the root as frame.
            let path = if frames.is_empty() {
                root.replace(';', ":")
            } else {
                frames.join(";")
            };
            self.add(path, own);
        }
        for child in &node.children {
            self.visit(child, metric, frames, root);
        }
        if pushed {
            frames.pop();
        }
    }

    fn add(&mut self, path: String, count: u64) {
        match self.index.get(&path) {
            Some(&i) => self.lines[i].1 += count,
            None => {
                self.index.insert(path.clone(), self.lines.len());
                self.lines.push((path, count));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::viewtree::{MetricInfo, NodeKind, Own, ViewKind};

    fn with_own(kind: NodeKind, name: &str, samples: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.own[0] = Own {
            value: samples * 10,
            samples,
        };
        n
    }

    #[test]
    fn paths_are_root_first_merged_and_sum_to_the_samples() {
        let mut lp = with_own(NodeKind::Loop, "", 0);
        lp.file = Some("/src/m.cc".into());
        lp.line = Some(19);
        let mut add = with_own(NodeKind::Inlined, "Mp::add", 0);
        add.children = vec![
            with_own(NodeKind::Statement, "", 4),
            with_own(NodeKind::Statement, "", 2),
        ];
        lp.children = vec![add, with_own(NodeKind::Statement, "", 1)];
        let mut main = with_own(NodeKind::Procedure, "main", 0);
        main.children = vec![lp, with_own(NodeKind::Statement, "", 3)];
        let mut root = with_own(NodeKind::Root, "<program root>", 0);
        root.children = vec![main];
        let view = ViewTree {
            metrics: vec![MetricInfo {
                name: "cpu-clock".into(),
                unit: "ns".into(),
                period: Some(10),
                total: 100,
                samples: 10,
            }],
            view: ViewKind::TopDown,
            root,
        };
        let lines = stacks(&view, 0);
        assert_eq!(
            lines,
            [
                ("main;loop at m.cc: 19;Mp::add_[i]".to_string(), 6),
                ("main;loop at m.cc: 19".to_string(), 1),
                ("main".to_string(), 3),
            ]
        );
        let mut out = Vec::new();
        let summary = render(&view, 0, &mut out).unwrap();
        assert_eq!((summary.stacks, summary.samples), (3, 10));
        assert!(String::from_utf8(out).unwrap().ends_with("main 3\n"));
    }
}
