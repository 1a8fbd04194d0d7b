//! Where `--watch sample` draws its words from: the executable's writable static data, the
//! stacks of the launched process's threads, and (with `--data`) its live heap blocks, each
//! word of the three equally likely at the moment a window opens.
//!
//! A thread's stack is taken from its last sampled stack pointer, less the 128-byte red zone
//! a leaf function may use below it, to the top of the mapping holding it (found in
//! `/proc/PID/maps` once per mapping). The samples and allocation records are a few ms behind
//! the program, so the regions are too.

use crate::sampler::data::datarec::RED_ZONE;
use crate::sampler::data::liveheap::LiveHeap;

/// Which region a word was drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Static,
    Stack,
    Heap,
}

/// A drawn word: its address, the region it belongs to, and the bytes of each region at that
/// moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pick {
    pub word: u64,
    pub kind: Kind,
    pub stack_bytes: u64,
    pub heap_bytes: u64,
}

/// What the process has live now: its heap blocks (with heap targets) and its threads' last
/// sampled stack pointers.
#[derive(Default)]
pub(crate) struct Live<'a> {
    pub heap: Option<&'a LiveHeap>,
    pub stack_pointers: Vec<u64>,
}

/// The static data of the executable, and the stack mappings met so far.
pub(crate) struct Targets {
    /// Runtime start and 8-byte words of each data section.
    sections: Vec<(u64, u64)>,
    /// Bytes of the static data (whole aligned words).
    pub(crate) static_bytes: u64,
    /// With heap targets: the smallest block tracked.
    pub(crate) heap_min: Option<u64>,
    /// Mappings that held a stack pointer: (start, end).
    stack_maps: Vec<(u64, u64)>,
}

impl Targets {
    /// Targets over `data` (link-time sections) loaded `bias` bytes from link time, the stacks,
    /// and with `heap_min` the live heap blocks of at least that many bytes.
    pub(crate) fn new(data: &[(u64, u64)], bias: u64, heap_min: Option<u64>) -> Targets {
        // Whole aligned words inside each section.
        let sections: Vec<(u64, u64)> = data
            .iter()
            .map(|&(start, size)| {
                let first = start.next_multiple_of(8);
                let words = (start + size).saturating_sub(first) / 8;
                (first.wrapping_add(bias), words)
            })
            .filter(|&(_, w)| w > 0)
            .collect();
        let words = sections.iter().map(|s| s.1).sum::<u64>();
        Targets {
            sections,
            static_bytes: words * 8,
            heap_min,
            stack_maps: Vec::new(),
        }
    }

    /// Draw a word uniformly over the static data, the stacks of process `pid` and the heap of
    /// `live` (`draw` gives independent uniform 64-bit numbers).
    pub(crate) fn pick(&mut self, pid: i32, live: &Live, draw: &mut dyn FnMut() -> u64) -> Pick {
        let stacks = self.stacks(pid, &live.stack_pointers);
        let stack_bytes: u64 = stacks.iter().map(|(lo, hi)| hi - lo).sum();
        let heap = live.heap.filter(|_| self.heap_min.is_some());
        let heap_bytes = heap.map_or(0, LiveHeap::bytes);
        let total = self.static_bytes + stack_bytes + heap_bytes;
        let mut at = draw() % total.max(1);
        let (word, kind) = if at < self.static_bytes {
            (self.static_word(at / 8), Kind::Static)
        } else if at < self.static_bytes + stack_bytes {
            at -= self.static_bytes;
            let word = stacks.iter().find_map(|&(lo, hi)| {
                let inside = at < hi - lo;
                at -= if inside { 0 } else { hi - lo };
                inside.then_some(lo + at)
            });
            (word.unwrap_or(0), Kind::Stack)
        } else {
            let byte = heap.and_then(|h| h.pick(draw));
            (byte.unwrap_or(0), Kind::Heap)
        };
        Pick {
            word: word & !7,
            kind,
            stack_bytes,
            heap_bytes,
        }
    }

    /// The `k`th whole word of the static data.
    fn static_word(&self, mut k: u64) -> u64 {
        for &(start, words) in &self.sections {
            if k < words {
                return start + 8 * k;
            }
            k -= words;
        }
        0
    }

    /// The live stack ranges of the threads whose stack pointers are `sps`, disjoint and in
    /// order.
    fn stacks(&mut self, pid: i32, sps: &[u64]) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = sps
            .iter()
            .filter_map(|&sp| {
                let (_, top) = self.stack_map(pid, sp)?;
                Some((sp.saturating_sub(RED_ZONE), top))
            })
            .collect();
        out.sort_unstable();
        // Two pointers in one mapping (a thread's stack reused after another ended): count
        // the bytes once.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
        for (lo, hi) in out {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        merged
    }

    /// The mapping holding `sp`, from the ones met so far or `/proc/PID/maps`.
    fn stack_map(&mut self, pid: i32, sp: u64) -> Option<(u64, u64)> {
        let inside = |&(lo, hi): &(u64, u64)| lo <= sp && sp < hi;
        if let Some(m) = self.stack_maps.iter().copied().find(inside) {
            return Some(m);
        }
        let m = (super::code::mappings(pid).iter())
            .find(|m| m.holds(sp))
            .map(|m| (m.start, m.end))?;
        self.stack_maps.push(m);
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_aligned_words_inside_the_static_data_or_this_stack() {
        let mut t = Targets::new(&[(0x1003, 0x20), (0x2000, 8)], 0x1000_0000, None);
        assert_eq!(t.static_bytes, (3 + 1) * 8);
        let sp = {
            let here = 0u64;
            std::ptr::addr_of!(here) as u64
        };
        let live = Live {
            heap: None,
            stack_pointers: vec![sp],
        };
        let pid = std::process::id() as i32;
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut draw = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let (mut statics, mut stack) = (0, 0);
        for _ in 0..1000 {
            let p = t.pick(pid, &live, &mut draw);
            assert!(p.word.is_multiple_of(8));
            match p.kind {
                Kind::Static => {
                    let w = p.word - 0x1000_0000;
                    assert!((0x1008..0x1020).contains(&w) || w == 0x2000, "{w:#x}");
                    statics += 1;
                }
                Kind::Stack => {
                    assert!(p.word >= (sp - RED_ZONE) & !7, "{:#x} {sp:#x}", p.word);
                    stack += 1;
                }
                Kind::Heap => panic!("no heap targets"),
            }
            // This thread's stack: from the red zone below sp to its mapping's top.
            assert!(p.stack_bytes > RED_ZONE && p.stack_bytes < 64 << 20);
        }
        assert!(statics > 0 && stack > statics, "{statics} {stack}");
    }
}
