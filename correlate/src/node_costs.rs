//! A node's self costs per thread ([`NodeCosts`]), held compactly: a database of 10,000 merged
//! profiles has about a million (node, thread) pairs with a cost, and one small heap vector
//! per pair (as a first version held them) cost more memory than everything else together.

use profiler::db::Cost;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::ThreadIdx;

/// Self costs of one node in one thread: one entry of a node's costs as a file stores it
/// (a node's [`NodeCosts`] is a list of these, in thread order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCost {
    /// The thread.
    pub thread: ThreadIdx,
    /// Cost per metric, parallel to [`Database::metrics`](crate::Database::metrics).
    pub costs: Vec<Cost>,
}

/// [`ThreadCost`] borrowed, to write a node's costs without copying them.
#[derive(Serialize)]
#[serde(rename = "ThreadCost")]
struct ThreadCostRef<'a> {
    thread: ThreadIdx,
    costs: &'a [Cost],
}

/// The self costs of one node: per thread that sampled it (each once, in index order), one
/// cost per metric.
///
/// In memory, the threads are one vector and their costs, thread after thread, another (every
/// thread has as many costs as the first one added); in a file, a list of [`ThreadCost`] (the
/// bytes of the first version's `Vec<ThreadCost>`, so files did not change).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCosts {
    threads: Vec<ThreadIdx>,
    values: Vec<Cost>,
}

impl NodeCosts {
    /// The number of threads with costs here.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether no thread has costs here.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Costs per thread (the metrics of the database).
    fn width(&self) -> usize {
        self.values
            .len()
            .checked_div(self.threads.len())
            .unwrap_or(0)
    }

    /// Every thread with its costs, by thread index.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (ThreadIdx, &[Cost])> + '_ {
        let w = self.width();
        (0..self.threads.len()).map(move |i| (self.threads[i], &self.values[i * w..(i + 1) * w]))
    }

    /// The costs of `thread`, if it has any here.
    pub fn get(&self, thread: ThreadIdx) -> Option<&[Cost]> {
        let w = self.width();
        let i = self.threads.binary_search(&thread).ok()?;
        Some(&self.values[i * w..(i + 1) * w])
    }

    /// The costs of `thread`, to change them, if it has any here.
    pub fn get_mut(&mut self, thread: ThreadIdx) -> Option<&mut [Cost]> {
        let w = self.width();
        let i = self.threads.binary_search(&thread).ok()?;
        Some(&mut self.values[i * w..(i + 1) * w])
    }

    /// Add `costs` (per metric) to `thread`'s. A thread new to the node gets as many costs as
    /// the others (the first thread's number): `costs` cut or padded with zeros.
    pub fn add(&mut self, thread: ThreadIdx, costs: &[Cost]) {
        let w = if self.is_empty() {
            costs.len()
        } else {
            self.width()
        };
        match self.threads.binary_search(&thread) {
            Ok(i) => Cost::add_each(&mut self.values[i * w..(i + 1) * w], costs),
            Err(i) => {
                self.threads.insert(i, thread);
                let padded = costs
                    .iter()
                    .copied()
                    .chain(std::iter::repeat(Cost::default()));
                self.values.splice(i * w..i * w, padded.take(w));
            }
        }
    }

    /// Drop every thread's costs.
    pub fn clear(&mut self) {
        self.threads.clear();
        self.values.clear();
    }
}

impl Serialize for NodeCosts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.iter()
                .map(|(thread, costs)| ThreadCostRef { thread, costs }),
        )
    }
}

impl<'de> Deserialize<'de> for NodeCosts {
    /// A list of [`ThreadCost`] whose entries all have as many costs; a thread listed twice or
    /// out of order is summed into place.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NodeCosts, D::Error> {
        let list = Vec::<ThreadCost>::deserialize(d)?;
        let mut costs = NodeCosts::default();
        for tc in &list {
            if tc.costs.len() != list[0].costs.len() {
                return Err(D::Error::custom("threads with different numbers of costs"));
            }
            costs.add(tc.thread, &tc.costs);
        }
        Ok(costs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(samples: u64, value: u64) -> Cost {
        Cost { samples, value }
    }

    /// What the first version held: one vector per thread.
    fn list(entries: &[(u32, [Cost; 2])]) -> Vec<ThreadCost> {
        entries
            .iter()
            .map(|(t, c)| ThreadCost {
                thread: ThreadIdx(*t),
                costs: c.to_vec(),
            })
            .collect()
    }

    #[test]
    fn the_bytes_are_those_of_a_list_of_thread_costs() {
        let entries = [
            (0, [cost(1, 10), cost(0, 0)]),
            (3, [cost(2, 300), cost(1, 7)]),
        ];
        let old = postcard::to_stdvec(&list(&entries)).unwrap();
        let mut costs = NodeCosts::default();
        costs.add(ThreadIdx(3), &[cost(1, 100), cost(1, 7)]);
        costs.add(ThreadIdx(0), &entries[0].1);
        costs.add(ThreadIdx(3), &[cost(1, 200), cost(0, 0)]);
        assert_eq!(postcard::to_stdvec(&costs).unwrap(), old);
        let back: NodeCosts = postcard::from_bytes(&old).unwrap();
        assert_eq!(back, costs);
        let read: Vec<(ThreadIdx, Vec<Cost>)> = back.iter().map(|(t, c)| (t, c.to_vec())).collect();
        let expected: Vec<(ThreadIdx, Vec<Cost>)> = list(&entries)
            .into_iter()
            .map(|tc| (tc.thread, tc.costs))
            .collect();
        assert_eq!(read, expected);
        assert_eq!(postcard::to_stdvec(&NodeCosts::default()).unwrap(), [0]);
    }

    #[test]
    fn unordered_lists_are_summed_into_place_and_uneven_ones_refused() {
        let mut twice = list(&[(5, [cost(1, 1), cost(0, 0)]), (2, [cost(1, 2), cost(0, 0)])]);
        twice.push(twice[0].clone());
        let read: NodeCosts = postcard::from_bytes(&postcard::to_stdvec(&twice).unwrap()).unwrap();
        let threads: Vec<(u32, u64)> = read.iter().map(|(t, c)| (t.0, c[0].value)).collect();
        assert_eq!(threads, [(2, 2), (5, 2)]);
        twice[1].costs.pop();
        let bytes = postcard::to_stdvec(&twice).unwrap();
        assert!(postcard::from_bytes::<NodeCosts>(&bytes).is_err());
    }

    #[test]
    fn a_new_thread_gets_as_many_costs_as_the_others() {
        let mut costs = NodeCosts::default();
        costs.add(ThreadIdx(1), &[cost(1, 1), cost(2, 2)]);
        costs.add(ThreadIdx(0), &[cost(3, 3)]);
        costs.add(ThreadIdx(2), &[cost(4, 4), cost(5, 5), cost(6, 6)]);
        let widths: Vec<usize> = costs.iter().map(|(_, c)| c.len()).collect();
        assert_eq!(widths, [2, 2, 2]);
        assert_eq!(
            costs.get_mut(ThreadIdx(0)).unwrap(),
            [cost(3, 3), cost(0, 0)]
        );
        assert!(costs.get_mut(ThreadIdx(7)).is_none());
    }
}
