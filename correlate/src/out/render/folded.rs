//! The `--folded` output: one `frame;frame;... count` line per distinct path, root first.
//!
//! Counts are samples of one metric taken directly at a path's last frame, so the lines sum to
//! that metric's sample count. Procedures, inlined code (`name_[i]`, inferno's inline
//! annotation), loops (`loop at file: line`) and placeholders are frames; the program root and
//! statements are not (a statement's samples belong to the frame around it), so paths that differ
//! only in lines merge into one line. The output goes straight into `inferno-flamegraph` or
//! `flamegraph.pl`, which order the lines themselves.
//!
//! Paths are merged in a tree of frames (each distinct path is one node of it), then printed
//! depth first with one shared prefix buffer: memory stays linear in the size of the view even
//! when paths are hundreds of thousands of frames deep, and no walk recurses.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::db::node::NodeKind;
use crate::view::tree::{ViewNode, ViewTree};

/// inferno's annotation for an inlined frame (its palettes colour such frames aqua).
const INLINE_SUFFIX: &str = "_[i]";

/// inferno's annotation for a kernel frame (drawn orange).
const KERNEL_SUFFIX: &str = "_[k]";

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

/// Write the folded stacks of `view` for metric `metric`, each distinct path once, depth first
/// in the view's order (costliest first).
pub fn render(view: &ViewTree, metric: usize, out: &mut dyn Write) -> io::Result<FoldedSummary> {
    PathTree::of(view, metric).write(out)
}

/// What a frame is, for the flame graph's colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// A procedure or placeholder.
    Code,
    /// Inlined code.
    Inlined,
    /// The kernel.
    Kernel,
    /// A loop.
    Loop,
}

impl FrameKind {
    fn of(kind: NodeKind) -> FrameKind {
        match kind {
            NodeKind::Inlined => FrameKind::Inlined,
            NodeKind::Kernel => FrameKind::Kernel,
            NodeKind::Loop => FrameKind::Loop,
            _ => FrameKind::Code,
        }
    }
}

/// One distinct path: its last frame, the samples taken there, and its extensions.
struct PathNode {
    frame: String,
    kind: FrameKind,
    samples: u64,
    children: Vec<usize>,
}

/// The distinct paths of a view as a tree of frames; node 0 is the empty path (the root).
pub(crate) struct PathTree {
    nodes: Vec<PathNode>,
}

impl PathTree {
    /// Merge the paths of `view`, counting samples of metric `metric`.
    pub(crate) fn of(view: &ViewTree, metric: usize) -> PathTree {
        let mut tree = PathTree {
            nodes: vec![PathNode {
                // Samples at the root itself (none in a well-formed profile) keep it as frame.
                frame: separable(&view.root().name),
                kind: FrameKind::Code,
                samples: 0,
                children: Vec::new(),
            }],
        };
        let mut index: HashMap<(usize, String), usize> = HashMap::new();
        let mut stack = vec![(0usize, 0usize)];
        while let Some((id, parent)) = stack.pop() {
            let node = &view.nodes[id];
            let at = match frame(node) {
                Some(f) => tree.child(&mut index, parent, f, FrameKind::of(node.kind)),
                None => parent,
            };
            let own = node.own.get(metric).map_or(0, |o| o.samples);
            tree.nodes[at].samples = tree.nodes[at].samples.saturating_add(own);
            stack.extend(node.children.iter().rev().map(|&c| (c, at)));
        }
        tree
    }

    /// The path `parent` extended by `frame`, added if new.
    fn child(
        &mut self,
        index: &mut HashMap<(usize, String), usize>,
        parent: usize,
        frame: String,
        kind: FrameKind,
    ) -> usize {
        let next = self.nodes.len();
        let id = *index.entry((parent, frame.clone())).or_insert(next);
        if id == next {
            self.nodes.push(PathNode {
                frame,
                kind,
                samples: 0,
                children: Vec::new(),
            });
            self.nodes[parent].children.push(id);
        }
        id
    }

    /// The samples at and below each path (children come after their parent in `nodes`).
    pub(crate) fn inclusive(&self) -> Vec<u64> {
        let mut total: Vec<u64> = self.nodes.iter().map(|n| n.samples).collect();
        for id in (0..self.nodes.len()).rev() {
            for &child in &self.nodes[id].children {
                total[id] = total[id].saturating_add(total[child]);
            }
        }
        total
    }

    /// The extensions of path `id`.
    pub(crate) fn children(&self, id: usize) -> &[usize] {
        &self.nodes[id].children
    }

    /// The last frame of path `id`, as the folded stacks write it.
    pub(crate) fn frame(&self, id: usize) -> &str {
        &self.nodes[id].frame
    }

    /// What the last frame of path `id` is.
    pub(crate) fn kind(&self, id: usize) -> FrameKind {
        self.nodes[id].kind
    }

    /// Print every path with samples, depth first, building each from one prefix buffer.
    fn write(&self, out: &mut dyn Write) -> io::Result<FoldedSummary> {
        let mut summary = FoldedSummary::default();
        let root = &self.nodes[0];
        if root.samples > 0 {
            writeln!(out, "{} {}", root.frame, root.samples)?;
            summary.stacks += 1;
            summary.samples = root.samples;
        }
        let mut path = String::new();
        // (node, length of the prefix to return to once its subtree is done).
        let mut stack: Vec<(usize, usize)> = root.children.iter().rev().map(|&c| (c, 0)).collect();
        while let Some((id, prefix)) = stack.pop() {
            let node = &self.nodes[id];
            path.truncate(prefix);
            if !path.is_empty() {
                path.push(';');
            }
            path.push_str(&node.frame);
            if node.samples > 0 {
                writeln!(out, "{path} {}", node.samples)?;
                summary.stacks += 1;
                summary.samples = summary.samples.saturating_add(node.samples);
            }
            let len = path.len();
            stack.extend(node.children.iter().rev().map(|&c| (c, len)));
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::{MetricInfo, ViewKind};
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
            read_with: None,
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
        // A second call of Mp::add from another line of the loop merges with the first.
        let other = view.push(lp, with_own(NodeKind::Statement, "m.cc: 21", 0));
        let again = view.push(other, with_own(NodeKind::Inlined, "Mp::add", 0));
        view.push(again, with_own(NodeKind::Statement, "m.h: 4", 5));
        let mut out = Vec::new();
        let summary = render(&view, 0, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main 3\nmain;loop at m.cc: 19 1\nmain;loop at m.cc: 19;Mp::add_[i] 11\n"
        );
        assert_eq!((summary.stacks, summary.samples), (3, 15));
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
