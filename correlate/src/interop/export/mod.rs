//! Exports of a database to other tools' profile formats: [`speedscope`] (speedscope's JSON
//! file format, one sampled profile per thread and metric) and [`pprof`] (pprof's gzipped
//! `profile.proto`, one sample type per metric, inlined code as `Line` lists).
//!
//! Both are adapters over the top-down view of each thread ([`thread_views`]), walked into the
//! distinct call stacks that carry samples ([`stacks`]); they name every frame as the views do
//! ([`ViewNode::label`]: `[I] name` for inlined code, `loop at file: line` for loops), so what a
//! user sees in speedscope or pprof is what `hpcview-rs` shows. Statements are not frames: a
//! statement's samples belong to the frame around it, and its line is the stack's `line`.

pub mod pprof;
mod pprof_proto;
pub mod speedscope;

use profiler::db::Cost;

use crate::db::database::{Database, Selection, ThreadDesc};
use crate::db::ids::ThreadIdx;
use crate::db::node::NodeKind;
use crate::view::tree::{ViewKind, ViewNode, ViewTree};

/// The top-down view of each measured thread, in the database's thread order.
pub(crate) fn thread_views(db: &Database) -> Vec<(&ThreadDesc, ViewTree)> {
    db.threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let only = Selection::Threads(vec![ThreadIdx::from_index(i)]);
            (t, ViewTree::from_database(db, ViewKind::TopDown, &only))
        })
        .collect()
}

/// A view node that is a frame of an exported stack: everything but the program root and
/// statements.
pub(crate) fn is_frame(node: &ViewNode) -> bool {
    !matches!(node.kind, NodeKind::Root | NodeKind::Statement)
}

/// One place samples were taken: the frames from the outermost down (view node indices), the
/// source line of the statement sampled (when the samples were taken at a statement), and the
/// samples' costs per metric.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stack {
    pub(crate) frames: Vec<usize>,
    pub(crate) line: Option<u32>,
    pub(crate) own: Vec<Cost>,
}

/// Every node of the top-down `view` with samples of its own, as a [`Stack`], depth first in
/// display order. Walks with an explicit stack, so any depth of recursion exports.
pub(crate) fn stacks(view: &ViewTree) -> Vec<Stack> {
    let mut found = Vec::new();
    let mut frames: Vec<usize> = Vec::new();
    // (node, number of frames above it).
    let mut todo = vec![(0usize, 0usize)];
    while let Some((id, depth)) = todo.pop() {
        frames.truncate(depth);
        let node = &view.nodes[id];
        if is_frame(node) {
            frames.push(id);
        }
        if node.own.iter().any(|c| c.samples > 0 || c.value > 0) {
            found.push(Stack {
                frames: frames.clone(),
                line: (node.kind == NodeKind::Statement)
                    .then_some(node.line)
                    .flatten(),
                own: node.own.clone(),
            });
        }
        let below = frames.len();
        todo.extend(node.children.iter().rev().map(|&c| (c, below)));
    }
    found
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::view::tree::MetricInfo;

    /// A view node with `samples` samples of 10 ns taken at it.
    pub(crate) fn node(
        kind: NodeKind,
        name: &str,
        file: &str,
        line: u32,
        samples: u64,
    ) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.own[0] = Cost {
            samples,
            value: samples * 10,
        };
        n.file = Some(file.into());
        n.line = Some(line);
        n.module = Some("/bin/app".into());
        n
    }

    /// `main` > `loop at m.cc: 19` > `m.cc: 19` (1 sample), `[I] Mp::add` (called at m.cc: 20)
    /// > `m.h: 4` (3 samples); `main` > `m.cc: 25` > `leaf` > `l.c: 2` (2 samples).
    pub(crate) fn sample_view() -> ViewTree {
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: Some(10),
            total: 60,
            samples: 6,
            read_with: None,
        }];
        let root = ViewNode::new(NodeKind::Root, "<program root>", 1);
        let mut view = ViewTree::new(ViewKind::TopDown, metrics, root);
        let main = view.push(0, node(NodeKind::Procedure, "main", "/s/m.cc", 10, 0));
        let lp = view.push(
            main,
            node(NodeKind::Loop, "loop at m.cc: 19", "/s/m.cc", 19, 0),
        );
        view.push(lp, node(NodeKind::Statement, "m.cc: 19", "/s/m.cc", 19, 1));
        let mut add = node(NodeKind::Inlined, "Mp::add", "/s/m.h", 3, 0);
        (add.call_file, add.call_line) = (Some("/s/m.cc".into()), Some(20));
        let add = view.push(lp, add);
        view.push(add, node(NodeKind::Statement, "m.h: 4", "/s/m.h", 4, 3));
        let call = view.push(
            main,
            node(NodeKind::Statement, "m.cc: 25", "/s/m.cc", 25, 0),
        );
        let mut leaf = node(NodeKind::Procedure, "leaf", "/s/l.c", 1, 0);
        (leaf.call_file, leaf.call_line) = (Some("/s/m.cc".into()), Some(25));
        let leaf = view.push(call, leaf);
        view.push(leaf, node(NodeKind::Statement, "l.c: 2", "/s/l.c", 2, 2));
        view
    }

    #[test]
    fn stacks_are_the_frames_above_each_sampled_node() {
        let view = sample_view();
        let got: Vec<(Vec<String>, Option<u32>, u64)> = stacks(&view)
            .into_iter()
            .map(|s| {
                let names = s.frames.iter().map(|&f| view.nodes[f].label()).collect();
                (names, s.line, s.own[0].samples)
            })
            .collect();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                (names(&["main", "loop at m.cc: 19"]), Some(19), 1),
                (
                    names(&["main", "loop at m.cc: 19", "[I] Mp::add"]),
                    Some(4),
                    3
                ),
                (names(&["main", "leaf"]), Some(2), 2),
            ]
        );
    }
}
