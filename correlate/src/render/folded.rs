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

use crate::database::NodeKind;
use crate::view::{ViewNode, ViewTree};

/// inferno's annotation for an inlined frame (its palettes colour such frames aqua).
const INLINE_SUFFIX: &str = "_[i]";

/// inferno's annotation for a kernel frame (drawn orange).
const KERNEL_SUFFIX: &str = "_[k]";

/// The folded stacks of `view` for metric `metric`: (frames joined by `;`, samples), in the
/// tree's order (costliest first), each path once.
pub fn stacks(view: &ViewTree, metric: usize) -> Vec<(String, u64)> {
    let mut collector = Collector {
        view,
        metric,
        lines: Vec::new(),
        index: HashMap::new(),
    };
    collector.visit(0, &mut Vec::new());
    collector.lines
}

/// The frame `node` contributes to a folded stack: its name, annotated for inferno when it is
/// inlined code or the kernel; `None` for scopes that are not frames (the program root, and
/// statements, whose samples belong to the enclosing frame).
fn frame(node: &ViewNode) -> Option<String> {
    let frame = match node.kind {
        NodeKind::Root | NodeKind::Statement => return None,
        NodeKind::Inlined => format!("{}{INLINE_SUFFIX}", node.name),
        NodeKind::Kernel => format!("{}{KERNEL_SUFFIX}", node.name),
        _ => node.name.clone(),
    };
    Some(separable(&frame))
}

/// `text` without `;` (which separates frames) and line breaks (which end a record).
fn separable(text: &str) -> String {
    text.replace(';', ":").replace(['\n', '\r'], " ")
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

struct Collector<'a> {
    view: &'a ViewTree,
    metric: usize,
    lines: Vec<(String, u64)>,
    index: HashMap<String, usize>,
}

impl Collector<'_> {
    fn visit(&mut self, id: usize, frames: &mut Vec<String>) {
        let node = &self.view.nodes[id];
        let frame = frame(node);
        let pushed = frame.is_some();
        if let Some(f) = frame {
            frames.push(f);
        }
        let own = node.own.get(self.metric).map_or(0, |o| o.samples);
        if own > 0 {
            // Samples at the root itself (none in a well-formed profile) keep the root as frame.
            let path = if frames.is_empty() {
                separable(&self.view.root().name)
            } else {
                frames.join(";")
            };
            self.add(path, own);
        }
        for &child in &node.children {
            self.visit(child, frames);
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
    use crate::view::{MetricInfo, ViewKind};
    use profiler::db::Cost;

    fn with_own(kind: NodeKind, name: &str, samples: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.own[0] = Cost {
            value: samples * 10,
            samples,
        };
        n
    }

    #[test]
    fn paths_are_root_first_merged_and_sum_to_the_samples() {
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: Some(10),
            total: 100,
            samples: 10,
        }];
        let root = with_own(NodeKind::Root, "<program root>", 0);
        let mut view = ViewTree::new(ViewKind::TopDown, metrics, root);
        let main = view.push(0, with_own(NodeKind::Procedure, "main", 0));
        let lp = view.push(main, with_own(NodeKind::Loop, "loop at m.cc: 19", 0));
        view.push(main, with_own(NodeKind::Statement, "m.cc: 20", 3));
        let add = view.push(lp, with_own(NodeKind::Inlined, "Mp::add", 0));
        view.push(lp, with_own(NodeKind::Statement, "m.cc: 19", 1));
        view.push(add, with_own(NodeKind::Statement, "m.h: 4", 4));
        view.push(add, with_own(NodeKind::Statement, "m.h: 5", 2));
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

    #[test]
    fn frames_mark_inlining_and_the_kernel_and_skip_statements() {
        let frame_of = |kind, name: &str| frame(&ViewNode::new(kind, name, 1));
        assert_eq!(
            frame_of(NodeKind::Inlined, "Mp::add").unwrap(),
            "Mp::add_[i]"
        );
        assert_eq!(
            frame_of(NodeKind::Loop, "loop at stlmap.cc: 19").unwrap(),
            "loop at stlmap.cc: 19"
        );
        assert_eq!(frame_of(NodeKind::Statement, "stlmap.cc: 20"), None);
        assert_eq!(
            frame_of(NodeKind::Kernel, "<kernel>").unwrap(),
            "<kernel>_[k]"
        );
        assert_eq!(frame_of(NodeKind::Procedure, "a;b").unwrap(), "a:b");
    }
}
