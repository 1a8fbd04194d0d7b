//! A node's self costs per thread ([`NodeCosts`]), held compactly: a database of 10,000 merged
//! profiles has more than a million (node, thread) pairs with a cost, and one small heap vector
//! per pair (as a first version held them) cost more memory than everything else together.

use profiler::db::Cost;
use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::db::ids::ThreadIdx;

/// Self costs of one node in one thread: one entry of a node's costs as a file stores it
/// (a node's [`NodeCosts`] is a list of these, in thread order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCost {
    /// The thread.
    pub thread: ThreadIdx,
    /// Cost per metric, parallel to [`Database::metrics`](crate::Database::metrics).
    pub costs: Vec<Cost>,
}

/// The self costs of one node: per thread that sampled it (each once, in index order), one
/// cost per metric (as many for every thread as for the first one added).
///
/// Held as a file stores them, a list of [`ThreadCost`] in postcard's encoding (the thread,
/// the number of costs, then each cost's samples and value, all as variable-length integers):
/// about 8 bytes a thread where a vector of [`Cost`]s takes 16 a metric. The merge only ever
/// appends a thread or adds to the last one, which is cheap in that form; anything else
/// decodes the node's list and encodes it again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCosts {
    /// The entries, one after another.
    bytes: Vec<u8>,
    /// How many there are.
    len: u32,
    /// Where the last one starts in `bytes`.
    last: u32,
}

impl NodeCosts {
    /// The number of threads with costs here.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no thread has costs here.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every thread with its costs, by thread index.
    pub fn iter(&self) -> Entries<'_> {
        Entries {
            bytes: &self.bytes,
            at: 0,
            left: self.len(),
        }
    }

    /// Add `costs` (per metric) to `thread`'s. A thread new to the node gets as many costs as
    /// the others: `costs` cut or padded with zeros.
    pub fn add(&mut self, thread: ThreadIdx, costs: &[Cost]) {
        let width = self.iter().next().map_or(costs.len(), |(_, c)| c.len());
        let padded = || {
            let zeros = std::iter::repeat(Cost::default());
            costs.iter().copied().chain(zeros).take(width)
        };
        match self.last_entry() {
            Some((t, _)) if t > thread => {
                self.rebuild(
                    |list| match list.binary_search_by_key(&thread, |(t, _)| *t) {
                        Ok(i) => Cost::add_each(&mut list[i].1, costs),
                        Err(i) => list.insert(i, (thread, padded().collect())),
                    },
                )
            }
            Some((t, old)) if t == thread => {
                let mut sum: Vec<Cost> = old.collect();
                Cost::add_each(&mut sum, costs);
                self.bytes.truncate(self.last as usize);
                self.len -= 1;
                self.push(thread, &sum);
            }
            _ => self.push(thread, &padded().collect::<Vec<_>>()),
        }
    }

    /// Change `thread`'s costs with `change`, if it has any here.
    pub fn update(&mut self, thread: ThreadIdx, change: impl FnOnce(&mut [Cost])) {
        self.rebuild(|list| {
            if let Ok(i) = list.binary_search_by_key(&thread, |(t, _)| *t) {
                change(&mut list[i].1);
            }
        });
    }

    /// Give every thread `width` costs: those it has, then zeros (a metric added).
    pub(crate) fn widen(&mut self, width: usize) {
        self.rebuild(|list| {
            for (_, costs) in list.iter_mut() {
                costs.resize(width, Cost::default());
            }
        });
    }

    /// Take every thread's costs out, leaving none.
    pub(crate) fn take(&mut self) -> Vec<(ThreadIdx, Vec<Cost>)> {
        let list = self.iter().map(|(t, c)| (t, c.collect())).collect();
        self.clear();
        list
    }

    /// Drop every thread's costs.
    pub fn clear(&mut self) {
        *self = NodeCosts::default();
    }

    /// The thread with the largest index here, and its costs.
    fn last_entry(&self) -> Option<(ThreadIdx, Costs<'_>)> {
        let mut last = Entries {
            bytes: &self.bytes,
            at: self.last as usize,
            left: self.len().min(1),
        };
        last.next()
    }

    /// Append an entry: `thread` after every thread here.
    fn push(&mut self, thread: ThreadIdx, costs: &[Cost]) {
        self.last = self.bytes.len() as u32;
        self.len += 1;
        put(&mut self.bytes, u64::from(thread.0));
        put(&mut self.bytes, costs.len() as u64);
        for c in costs {
            put(&mut self.bytes, c.samples);
            put(&mut self.bytes, c.value);
        }
    }

    /// Decode the entries, let `change` change them, and encode them again.
    fn rebuild(&mut self, change: impl FnOnce(&mut Vec<(ThreadIdx, Vec<Cost>)>)) {
        let mut list = self.take();
        change(&mut list);
        for (thread, costs) in list {
            self.push(thread, &costs);
        }
    }
}

/// Append `value` as a variable-length integer (7 bits a byte, low first: postcard's).
fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The variable-length integer at `*at`, moving `*at` past it (0 past the end: only
/// [`put`]'s bytes are read, so it does not happen).
fn get(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = bytes.get(*at) else { break };
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
    }
    value
}

/// The threads of a node with their costs ([`NodeCosts::iter`]).
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    bytes: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (ThreadIdx, Costs<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.at >= self.bytes.len() {
            return None;
        }
        self.left -= 1;
        let thread = ThreadIdx(get(self.bytes, &mut self.at) as u32);
        let count = get(self.bytes, &mut self.at) as usize;
        let costs = Costs {
            bytes: self.bytes,
            at: self.at,
            left: count,
        };
        for _ in 0..2 * count {
            get(self.bytes, &mut self.at);
        }
        Some((thread, costs))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Entries<'_> {}

/// One thread's costs at a node, one per metric, decoded as they are read.
#[derive(Debug, Clone)]
pub struct Costs<'a> {
    bytes: &'a [u8],
    at: usize,
    left: usize,
}

impl Iterator for Costs<'_> {
    type Item = Cost;

    fn next(&mut self) -> Option<Cost> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let samples = get(self.bytes, &mut self.at);
        let value = get(self.bytes, &mut self.at);
        Some(Cost { samples, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Costs<'_> {}

/// One entry written as a [`ThreadCost`].
struct Entry<'a>(ThreadIdx, Costs<'a>);

/// One entry's costs written as a list.
struct CostList<'a>(Costs<'a>);

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut entry = s.serialize_struct("ThreadCost", 2)?;
        entry.serialize_field("thread", &self.0)?;
        entry.serialize_field("costs", &CostList(self.1.clone()))?;
        entry.end()
    }
}

impl Serialize for CostList<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

impl Serialize for NodeCosts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(|(thread, costs)| Entry(thread, costs)))
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
            (9, [cost(u64::MAX, 1 << 40), cost(0, 127)]),
        ];
        let old = postcard::to_stdvec(&list(&entries)).unwrap();
        let mut costs = NodeCosts::default();
        costs.add(ThreadIdx(3), &[cost(1, 100), cost(1, 7)]);
        costs.add(ThreadIdx(0), &entries[0].1);
        costs.add(ThreadIdx(9), &[cost(u64::MAX - 1, 1 << 40), cost(0, 100)]);
        costs.add(ThreadIdx(9), &[cost(1, 0), cost(0, 27)]);
        costs.add(ThreadIdx(3), &[cost(1, 200), cost(0, 0)]);
        assert_eq!(postcard::to_stdvec(&costs).unwrap(), old);
        let back: NodeCosts = postcard::from_bytes(&old).unwrap();
        assert_eq!(back, costs);
        let read: Vec<(ThreadIdx, Vec<Cost>)> =
            back.iter().map(|(t, c)| (t, c.collect())).collect();
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
        let threads: Vec<(u32, u64)> = read
            .iter()
            .map(|(t, mut c)| (t.0, c.next().unwrap().value))
            .collect();
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
        costs.update(ThreadIdx(0), |c| c[1] = cost(7, 7));
        costs.update(ThreadIdx(5), |c| c[0] = cost(9, 9));
        let first: Vec<Cost> = costs.iter().next().unwrap().1.collect();
        assert_eq!(first, [cost(3, 3), cost(7, 7)]);
        assert_eq!(costs.len(), 3);
    }
}
