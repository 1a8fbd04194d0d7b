//! Costs per sampled instruction: for each (module, link-time address) that was the innermost
//! user frame of a sample, what those samples cost, summed over every thread. The user-mode
//! costs are those the statements of the tree got from that instruction, so the instructions of
//! a procedure's own code sum to its exclusive cost; the kernel-mode ones (a `<kernel>` leaf or
//! an off-CPU reason below it: a page fault's handler, a system call) are kept apart.
//! `hpcview-rs --asm` puts both on the machine code.

use fxhash::FxHashMap;
use profiler::db::Cost;
use serde::{Deserialize, Serialize};

use crate::db::ids::DbModuleId;
use crate::db::node::NodeKind;
use profiler::db::{CctNode, Frame, ProfileModuleId};

/// The sampled instructions' costs, sorted by module and address, each once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstructionCosts {
    /// One entry per sampled instruction.
    pub entries: Vec<InstructionCost>,
}

/// One sampled instruction and what its samples cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstructionCost {
    /// The module holding it.
    pub module: DbModuleId,
    /// Its link-time address in the module.
    pub address: u64,
    /// Per metric, what the user-mode samples at it cost.
    pub costs: Vec<Cost>,
    /// Per metric, what the kernel-mode samples whose user state was at it cost.
    pub kernel: Vec<Cost>,
}

impl InstructionCosts {
    /// The entries of `module`, by address.
    pub fn in_module(&self, module: DbModuleId) -> &[InstructionCost] {
        let from = self.entries.partition_point(|e| e.module < module);
        let to = self.entries.partition_point(|e| e.module <= module);
        &self.entries[from..to]
    }

    /// Add `later`'s costs (another share of the profiles) to these.
    pub(crate) fn merge(&mut self, later: InstructionCosts) {
        let mut tally = Tally::default();
        for e in self.entries.drain(..).chain(later.entries) {
            tally.add(e.module, e.address, &e.costs, false);
            tally.add(e.module, e.address, &e.kernel, true);
        }
        *self = tally.finish();
    }

    /// Why these costs do not fit a database of `modules` modules and `metrics` metrics, if
    /// they do not: out of order or repeated, a module out of range, a cost vector of another
    /// length.
    pub(crate) fn malformation(&self, modules: usize, metrics: usize) -> Option<String> {
        let sorted = (self.entries.windows(2))
            .all(|w| (w[0].module, w[0].address) < (w[1].module, w[1].address));
        let fits = |e: &InstructionCost| {
            e.module.index() < modules && e.costs.len() == metrics && e.kernel.len() == metrics
        };
        match (sorted, self.entries.iter().all(fits)) {
            (true, true) => None,
            (false, _) => Some("instruction costs out of order".into()),
            (true, false) => Some("an instruction cost names a missing module or metric".into()),
        }
    }
}

/// Instruction costs as they are summed, before they are sorted.
#[derive(Default)]
pub(crate) struct Tally {
    sums: FxHashMap<(DbModuleId, u64), [Vec<Cost>; 2]>,
}

impl Tally {
    /// Add `costs` (user or `kernel` mode) to the instruction at `address` of `module`.
    pub(crate) fn add(&mut self, module: DbModuleId, address: u64, costs: &[Cost], kernel: bool) {
        let zero = || vec![Cost::default(); costs.len()];
        let sums = self
            .sums
            .entry((module, address))
            .or_insert_with(|| [zero(), zero()]);
        Cost::add_each(&mut sums[kernel as usize], costs);
    }

    /// Add the `costs` of node `i` of a thread's `nodes`, which landed on a database node of
    /// `kind` in module `at` (`module_of` names the profile's modules in the database): a code
    /// frame's where it is its own statement's (not a Python function the interpreter's code
    /// was folded into), a kernel leaf's or an off-CPU reason's at the user frame above it.
    pub(crate) fn add_node(
        &mut self,
        (nodes, i): (&[CctNode], usize),
        costs: &[Cost],
        (kind, at): (NodeKind, Option<DbModuleId>),
        module_of: impl Fn(ProfileModuleId) -> DbModuleId,
    ) {
        let mut j = i;
        while matches!(nodes[j].frame, Frame::Kernel | Frame::Blocked(_)) && j != 0 {
            j = nodes[j].parent.index();
        }
        let Frame::Code {
            module,
            addr,
            kind: k,
        } = nodes[j].frame
        else {
            return;
        };
        let module = module_of(module);
        let kernel = j != i;
        if kernel || (kind == NodeKind::Statement && at == Some(module)) {
            self.add(module, k.lookup(addr).0, costs, kernel);
        }
    }

    /// The sums, sorted.
    pub(crate) fn finish(self) -> InstructionCosts {
        let mut entries: Vec<InstructionCost> = (self.sums.into_iter())
            .map(|((module, address), [costs, kernel])| InstructionCost {
                module,
                address,
                costs,
                kernel,
            })
            .collect();
        entries.sort_unstable_by_key(|e| (e.module, e.address));
        InstructionCosts { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(value: u64) -> Vec<Cost> {
        vec![Cost { samples: 1, value }]
    }

    #[test]
    fn costs_are_summed_sorted_and_merged() {
        let (m0, m1) = (DbModuleId::from_index(0), DbModuleId::from_index(1));
        let mut a = Tally::default();
        a.add(m1, 0x10, &cost(5), false);
        a.add(m0, 0x20, &cost(1), false);
        a.add(m1, 0x10, &cost(2), false);
        a.add(m1, 0x10, &cost(9), true);
        let mut a = a.finish();
        assert_eq!(a.malformation(2, 1), None);
        let two = |value| vec![Cost { samples: 2, value }];
        assert_eq!(a.in_module(m1)[0].costs, two(7));
        assert_eq!(a.in_module(m1)[0].kernel, cost(9));
        let mut b = Tally::default();
        b.add(m0, 0x20, &cost(4), false);
        a.merge(b.finish());
        assert_eq!(a.in_module(m0)[0].costs, two(5));
        assert_eq!(a.entries.len(), 2);
        assert!(a.malformation(1, 1).is_some(), "module 1 of 1");
        assert!(a.malformation(2, 2).is_some(), "two metrics");
        a.entries.swap(0, 1);
        assert!(a.malformation(2, 1).is_some(), "out of order");
    }
}
