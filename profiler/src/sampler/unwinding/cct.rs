//! Building a thread's calling-context tree one sampled path at a time.
//!
//! Memory grows with the number of distinct paths, not with the number of samples: a path that
//! was seen before only adds its cost to an existing leaf.

use fxhash::FxHashMap;

use crate::format::calltree::{Cct, CctNode, CctNodeId, Cost, Frame};

/// A calling-context tree under construction, with an index for finding a node's child by frame.
pub struct CctBuilder {
    cct: Cct,
    children: FxHashMap<(CctNodeId, Frame), CctNodeId>,
}

impl CctBuilder {
    /// An empty tree for `events` metrics.
    pub fn new(events: usize) -> Self {
        CctBuilder {
            cct: Cct::new(events),
            children: FxHashMap::default(),
        }
    }

    /// The child of `parent` for `frame`, created if it does not exist yet.
    pub fn child(&mut self, parent: CctNodeId, frame: Frame) -> CctNodeId {
        let next = CctNodeId::from_index(self.cct.nodes.len());
        let id = *self.children.entry((parent, frame)).or_insert(next);
        if id == next {
            let events = self.cct.nodes[0].costs.len();
            self.cct.nodes.push(CctNode {
                parent,
                frame,
                costs: vec![Cost::default(); events],
            });
        }
        id
    }

    /// Insert the path `frames` (outermost first) below `start` and return its leaf.
    pub fn insert_path(
        &mut self,
        start: CctNodeId,
        frames: impl IntoIterator<Item = Frame>,
    ) -> CctNodeId {
        frames
            .into_iter()
            .fold(start, |node, frame| self.child(node, frame))
    }

    /// Charge one sample of `period` for event `event` to `node`.
    pub fn charge(&mut self, node: CctNodeId, event: usize, period: u64) {
        if let Some(cost) = self.cct.nodes[node.index()].costs.get_mut(event) {
            cost.samples += 1;
            cost.value += period;
        }
    }

    /// Add `value` to the cost of `event` at `node` without a sample (off-CPU time, known when
    /// the thread runs again).
    pub fn add_value(&mut self, node: CctNodeId, event: usize, value: u64) {
        if let Some(cost) = self.cct.nodes[node.index()].costs.get_mut(event) {
            cost.value += value;
        }
    }

    /// Whether only the root exists.
    pub fn is_empty(&self) -> bool {
        self.cct.nodes.len() == 1
    }

    /// The finished tree.
    pub fn finish(self) -> Cct {
        self.cct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::addr::Svma;
    use crate::format::calltree::{AddrKind, ProfileModuleId};

    fn code(addr: u64) -> Frame {
        Frame::Code {
            module: ProfileModuleId(0),
            addr: Svma(addr),
            kind: AddrKind::Return,
        }
    }

    #[test]
    fn shared_prefixes_share_nodes_and_costs_accumulate() {
        let mut b = CctBuilder::new(1);
        let a = b.insert_path(CctNodeId::ROOT, [code(1), code(2), code(3)]);
        let c = b.insert_path(CctNodeId::ROOT, [code(1), code(2), code(4)]);
        let a2 = b.insert_path(CctNodeId::ROOT, [code(1), code(2), code(3)]);
        assert_eq!(a, a2);
        assert_ne!(a, c);
        b.charge(a, 0, 10);
        b.charge(a2, 0, 5);
        b.charge(c, 0, 1);
        let cct = b.finish();
        assert_eq!(cct.nodes.len(), 5);
        assert_eq!(
            cct.nodes[a.index()].costs[0],
            Cost {
                samples: 2,
                value: 15
            }
        );
        assert_eq!(
            cct.total(0),
            Cost {
                samples: 3,
                value: 16
            }
        );
        assert_eq!(cct.children()[0].len(), 1);
    }
}
