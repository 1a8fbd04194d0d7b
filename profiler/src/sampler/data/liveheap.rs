//! The heap blocks live in one process (`hpcrun-rs --data` with allocation tracking): found by
//! address for each data sample, and drawn uniformly by byte for `--watch sample`'s heap
//! windows.
//!
//! Drawing a byte uniformly over blocks of very different sizes is done by size class: blocks
//! of 2^k to 2^(k+1) - 1 bytes share class k. A class is drawn in proportion to the bytes it
//! holds, a block of it uniformly, and the block kept with probability size / 2^(k+1) (at
//! least one half, else draw again within the class): each block comes out in proportion to
//! its size, in a few draws whatever the mix of sizes.

use std::collections::BTreeMap;

use fxhash::FxHashMap;

use crate::format::dataref::DataRef;
use crate::format::db::CctNodeId;

/// Bytes of allocator header before a block (glibc's chunk header), written by the allocation
/// call itself: such touches belong to the block being allocated.
pub(crate) const HEADER: u64 = 16;

/// Size classes: blocks of 2^k .. 2^(k+1) - 1 bytes, k < 64.
const CLASSES: usize = 64;

/// A heap block live in a process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub end: u64,
    pub size: u64,
    pub tid: u32,
    pub site: CctNodeId,
    pub t_alloc: u64,
    pub t_return: u64,
}

/// The heap blocks live in one process, by start address. Cloned into a forked child, whose
/// memory starts as a copy of its parent's.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveHeap {
    blocks: BTreeMap<u64, Block>,
    classes: SizeClasses,
}

impl LiveHeap {
    /// Add the block at `start`; returns the block it replaced, whose free was not seen.
    pub(crate) fn insert(&mut self, start: u64, block: Block) -> Option<Block> {
        let old = self.blocks.insert(start, block);
        if old.is_some() {
            self.classes.remove(start);
        }
        self.classes.insert(start, block.size);
        old
    }

    /// Remove the block at `start`, if one is live there.
    pub(crate) fn remove(&mut self, start: u64) -> Option<Block> {
        let block = self.blocks.remove(&start)?;
        self.classes.remove(start);
        Some(block)
    }

    /// The block holding `addr` when thread `tid` touched it at `time`: a live block, or the
    /// header of the block `tid` is allocating at that moment.
    pub(crate) fn find(&self, addr: u64, tid: u32, time: u64) -> Option<DataRef> {
        let (&start, b) = self
            .blocks
            .range(..=addr.saturating_add(HEADER))
            .next_back()?;
        let during_alloc = b.tid == tid && time <= b.t_return;
        let inside = addr >= start || (during_alloc && addr + HEADER >= start);
        (inside && addr < b.end).then_some(DataRef::Heap {
            tid: b.tid,
            site: b.site,
            offset: addr.wrapping_sub(start) as i64,
            during_alloc,
        })
    }

    /// Bytes in live blocks.
    pub(crate) fn bytes(&self) -> u64 {
        self.classes.bytes.iter().sum()
    }

    /// A byte address drawn uniformly over the live blocks' bytes (`draw` gives independent
    /// uniform 64-bit numbers); `None` when no block is live.
    pub(crate) fn pick(&self, draw: &mut dyn FnMut() -> u64) -> Option<u64> {
        self.classes.pick(draw)
    }
}

/// The live blocks by size class, for uniform draws.
#[derive(Debug, Clone)]
struct SizeClasses {
    /// Per class: (start, size) of its blocks, in no order.
    members: Vec<Vec<(u64, u64)>>,
    /// Per class: the bytes of its blocks.
    bytes: Vec<u64>,
    /// Block start -> (class, position in its class).
    index: FxHashMap<u64, (u8, usize)>,
}

impl Default for SizeClasses {
    fn default() -> Self {
        SizeClasses {
            members: vec![Vec::new(); CLASSES],
            bytes: vec![0; CLASSES],
            index: FxHashMap::default(),
        }
    }
}

impl SizeClasses {
    fn class(size: u64) -> usize {
        63 - size.max(1).leading_zeros() as usize
    }

    fn insert(&mut self, start: u64, size: u64) {
        if size == 0 {
            return;
        }
        let k = Self::class(size);
        self.index.insert(start, (k as u8, self.members[k].len()));
        self.members[k].push((start, size));
        self.bytes[k] += size;
    }

    fn remove(&mut self, start: u64) {
        let Some((k, at)) = self.index.remove(&start) else {
            return;
        };
        let k = k as usize;
        let (_, size) = self.members[k].swap_remove(at);
        self.bytes[k] -= size;
        if let Some(&(moved, _)) = self.members[k].get(at) {
            self.index.insert(moved, (k as u8, at));
        }
    }

    fn pick(&self, draw: &mut dyn FnMut() -> u64) -> Option<u64> {
        let total: u64 = self.bytes.iter().sum();
        if total == 0 {
            return None;
        }
        let mut r = draw() % total;
        let k = (0..CLASSES).find(|&k| {
            let inside = r < self.bytes[k];
            r -= if inside { 0 } else { self.bytes[k] };
            inside
        })?;
        let members = &self.members[k];
        // Every member holds at least 2^k of the class's 2^(k+1) - 1 bound: kept half the time
        // or more, so the loop ends after two draws on average.
        let bound = 2u128 << k;
        loop {
            let (start, size) = members[(draw() % members.len() as u64) as usize];
            if ((draw() as u128) % bound) < size as u128 {
                return Some(start + draw() % size);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: u64, size: u64) -> Block {
        Block {
            end: start + size,
            size,
            tid: 1,
            site: CctNodeId(0),
            t_alloc: 0,
            t_return: 0,
        }
    }

    fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    #[test]
    fn draws_fall_in_live_blocks_in_proportion_to_their_bytes() {
        let mut heap = LiveHeap::default();
        // One block of 96 KiB, three of 5000 bytes (one of them freed), one of 3 bytes: the
        // large one holds 96K / (96K + 10000 + 3) of the bytes.
        heap.insert(0x10_0000, block(0x10_0000, 96 << 10));
        for start in [0x1000, 0x3000, 0x5000] {
            heap.insert(start, block(start, 5000));
        }
        heap.insert(0x9000, block(0x9000, 3));
        assert!(heap.remove(0x3000).is_some());
        assert!(heap.remove(0x3000).is_none());
        let total = (96 << 10) + 10_000 + 3;
        assert_eq!(heap.bytes(), total);
        let mut draw = xorshift(0x9e37_79b9_7f4a_7c15);
        let n = 200_000;
        let mut large = 0u64;
        let mut small = 0u64;
        for _ in 0..n {
            let a = heap.pick(&mut draw).unwrap();
            let b = heap.find(a, 2, 1).expect("inside a live block");
            let DataRef::Heap { offset, .. } = b else {
                panic!("{b:?}")
            };
            match a - offset as u64 {
                0x10_0000 => large += 1,
                0x9000 => small += 1,
                0x1000 | 0x5000 => {}
                other => panic!("freed or unknown block {other:#x}"),
            }
        }
        let expected = n as f64 * (96 << 10) as f64 / total as f64;
        assert!(
            (large as f64 - expected).abs() < 0.01 * n as f64,
            "{large} {expected}"
        );
        assert!(small < 20, "{small}");
    }

    #[test]
    fn an_empty_heap_draws_nothing_and_a_replaced_block_counts_once() {
        let mut heap = LiveHeap::default();
        assert_eq!(heap.pick(&mut xorshift(7)), None);
        heap.insert(0x1000, block(0x1000, 64));
        assert!(heap.insert(0x1000, block(0x1000, 4096)).is_some());
        assert_eq!(heap.bytes(), 4096);
        heap.remove(0x1000);
        assert_eq!((heap.bytes(), heap.pick(&mut xorshift(7))), (0, None));
    }
}
