//! `--watch sample[@HZ]`: one watchpoint moved over the executable's static data (and, with
//! `--data`, the live heap blocks), and the estimator that scales what it saw to the whole
//! region and run.
//!
//! Window i watches one 8-byte word w_i, drawn uniformly from the R_i bytes of targets at its
//! start (writable static data, plus the heap blocks live then when the heap is a target), for
//! d_i ns (until about [`WINDOW_TRAPS`] traps or [`WINDOW_MS`] ms; windows start every 1/HZ
//! s) and sees v_i bytes move from P to C through it. v_i x R_i / 8 is then an unbiased
//! estimate of the bytes moving from P to C through the whole region in that window. Over a
//! run of T ns (first window to last) the transfer is estimated by the ratio estimator
//!
//! ```text
//! bytes(P, C) = sum (v_i x R_i / 8) / sum d_i x T
//! ```
//!
//! unbiased when the transfer rate does not depend on which windows were taken (they are
//! evenly spaced in time, words drawn independently). Its standard error is the ratio
//! estimator's, sqrt(n / (n - 1) x sum (y_i - r d_i)^2) / sum d_i x T with y_i = v_i x R_i / 8
//! and r the ratio: it grows where few windows saw the pair. With static data alone R_i is
//! the same R for every window.
//!
//! A window closed by its trap count would cut the last production epoch (a write and the
//! reads that follow it) short at a point that depends on the reads' order, favouring the
//! first consumers (W R1 R1 R2 W R1 R1 R2 W R1 would read 5:2 for a 2:1 pattern). So such a
//! window, when it holds at least two writes, counts only up to its last write, and its d_i
//! ends there: whole epochs only, a renewal-reward ratio. A window closed by time is cut
//! at a point independent of the accesses and counts everything. Unique addresses are
//! estimated as the mean of R_i x [the window's word carried the pair] over the pair's activity
//! span (its first window to its last): the bytes that carry the pair at a given moment, low
//! where the program was off the CPU for whole windows. A
//! window's first reads before any write have no known producer and are not counted (a bias
//! against long-lived data, bounded by one trap per window).
//!
//! Heap words are drawn from the blocks the allocation tracker reported live (blocks of at
//! least `--alloc-min` bytes, of the launched process), a few ms behind the program: a block
//! freed in that time may be watched after its free.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Access, Tally, WINDOW_MS, WINDOW_TRAPS};
use crate::alloc::monotonic_ns;
use crate::liveheap::LiveHeap;
use crate::watchdb::{Binding, HeapTargets, SampledWatch, WatchMode};

/// One closed window: its length, the bytes of targets its word was drawn from, and the bytes
/// each binding moved in it.
struct Window {
    ns: u64,
    region: u64,
    on_heap: bool,
    pairs: Vec<((u32, u32), u64)>,
}

/// Where the watchpoint goes next, and what the windows saw.
pub(crate) struct Sampler {
    hz: u64,
    /// Runtime start and 8-byte words of each data section.
    sections: Vec<(u64, u64)>,
    region_bytes: u64,
    /// With heap targets: the smallest block tracked.
    heap_min: Option<u64>,
    rng: u64,
    current: u64,
    /// Bytes of targets the current word was drawn from, and whether it is a heap word.
    region: u64,
    on_heap: bool,
    armed_ns: Option<u64>,
    next_due: Instant,
    window_end: Instant,
    traps: u32,
    pairs: HashMap<(u32, u32), u64>,
    /// Reads since the window's last write: (binding, bytes).
    pending: Vec<((u32, u32), u64)>,
    writes: u32,
    last_write_ns: u64,
    windows: Vec<Window>,
    first_ns: Option<u64>,
    last_end_ns: u64,
}

impl Sampler {
    /// A sampler over `data` (link-time sections), loaded `bias` bytes from link time, and
    /// with `heap_min` over the live heap blocks of at least that many bytes too.
    pub(crate) fn new(hz: u64, data: &[(u64, u64)], bias: u64, heap_min: Option<u64>) -> Sampler {
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
        Sampler {
            hz,
            sections,
            region_bytes: words * 8,
            heap_min,
            rng: monotonic_ns() | 1,
            current: 0,
            region: words * 8,
            on_heap: false,
            armed_ns: None,
            next_due: Instant::now(),
            window_end: Instant::now(),
            traps: 0,
            pairs: HashMap::new(),
            pending: Vec::new(),
            writes: 0,
            last_write_ns: 0,
            windows: Vec::new(),
            first_ns: None,
            last_end_ns: 0,
        }
    }

    /// xorshift64*: independent draws are all the estimator needs.
    fn draw(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Draw the next word, uniform over the static data and, with heap targets, the bytes of
    /// `heap`'s live blocks, and make it the current one.
    pub(crate) fn pick(&mut self, heap: Option<&LiveHeap>) -> u64 {
        let heap = heap.filter(|_| self.heap_min.is_some());
        let heap_bytes = heap.map_or(0, LiveHeap::bytes);
        self.region = self.region_bytes + heap_bytes;
        let at = self.draw() % self.region.max(1);
        self.on_heap = at >= self.region_bytes;
        if let Some(heap) = heap.filter(|_| self.on_heap) {
            let byte = heap.pick(&mut || self.draw());
            self.current = byte.unwrap_or(0) & !7;
            return self.current;
        }
        let mut k = at / 8;
        for &(start, words) in &self.sections {
            if k < words {
                self.current = start + 8 * k;
                break;
            }
            k -= words;
        }
        self.current
    }

    /// Whether the armed window is over (its traps or its time).
    pub(crate) fn should_close(&self) -> bool {
        self.armed_ns.is_some() && (self.traps >= WINDOW_TRAPS || Instant::now() >= self.window_end)
    }

    /// Whether no window is armed and the next one is due.
    pub(crate) fn should_open(&self) -> bool {
        self.armed_ns.is_none() && Instant::now() >= self.next_due
    }

    /// Ms until the armed window ends or the next one is due (at least 1).
    pub(crate) fn sleep_ms(&self) -> u16 {
        let until = match self.armed_ns {
            Some(_) => self.window_end,
            None => self.next_due,
        };
        let left = until.saturating_duration_since(Instant::now());
        left.as_millis().clamp(1, 50) as u16
    }

    /// The watchpoint was moved to the current word and enabled (`armed`), or could not be:
    /// then this window is skipped.
    pub(crate) fn opened(&mut self, armed: bool) {
        let now = Instant::now();
        self.next_due = now + Duration::from_nanos(1_000_000_000 / self.hz);
        if !armed {
            return;
        }
        let ns = monotonic_ns();
        self.first_ns.get_or_insert(ns);
        self.armed_ns = Some(ns);
        self.traps = 0;
        self.writes = 0;
        self.window_end = now + Duration::from_millis(WINDOW_MS);
    }

    /// One trap at `addr` (ns `time`) by function `f`.
    pub(crate) fn trap(&mut self, tally: &mut Tally, addr: u64, time: u64, f: u32, a: Access) {
        if self.armed_ns.is_none() || addr != self.current {
            return;
        }
        self.traps += 1;
        if let Some(read) = tally.bind(addr, f, a, 8) {
            self.pending.push(read);
        }
        if a.write {
            self.commit(tally);
            self.writes += 1;
            self.last_write_ns = time;
        }
    }

    /// Count the pending reads in this window.
    fn commit(&mut self, tally: &mut Tally) {
        for (pair, bytes) in self.pending.drain(..) {
            *self.pairs.entry(pair).or_default() += bytes;
            tally.record(pair, bytes, self.current);
        }
    }

    /// Close the current window (if one is armed, and disarmed now): it lasted until now,
    /// every trap up to now read.
    pub(crate) fn close_window(&mut self, tally: &mut Tally) {
        let Some(armed) = self.armed_ns.take() else {
            return;
        };
        let now = monotonic_ns().max(armed);
        let end = if self.traps >= WINDOW_TRAPS && self.writes >= 2 {
            self.pending.clear();
            self.last_write_ns.clamp(armed, now)
        } else {
            self.commit(tally);
            now
        };
        self.windows.push(Window {
            ns: end - armed,
            region: self.region,
            on_heap: self.on_heap,
            pairs: self.pairs.drain().collect(),
        });
        self.last_end_ns = now;
        // A producer is known only from a write seen in the same window.
        tally.last_writer.remove(&self.current);
    }

    /// Close the last window and scale what the windows saw.
    pub(crate) fn finish(mut self, tally: &mut Tally) -> (WatchMode, Vec<Binding>) {
        self.close_window(tally);
        let n = self.windows.len() as u64;
        let info = SampledWatch {
            hz: self.hz,
            windows: n,
            region_bytes: self.region_bytes,
            word: 8,
            watched_ns: self.windows.iter().map(|w| w.ns).sum(),
            span_ns: self.last_end_ns.saturating_sub(self.first_ns.unwrap_or(0)),
        };
        let mut bindings: Vec<Binding> = (tally.pairs.iter())
            .map(|(&pair, seen)| self.estimate(pair, seen.bytes, seen.reads, &info))
            .collect();
        bindings.sort_by_key(|b| (b.producer, b.consumer));
        let mode = match self.heap_min {
            None => WatchMode::Sampled(info),
            Some(min_block) => {
                let heap_bytes: u64 = (self.windows.iter())
                    .map(|w| w.region - self.region_bytes)
                    .sum();
                let heap = HeapTargets {
                    windows: self.windows.iter().filter(|w| w.on_heap).count() as u64,
                    mean_bytes: heap_bytes / n.max(1),
                    min_block,
                };
                WatchMode::SampledWithHeap(info, heap)
            }
        };
        (mode, bindings)
    }

    /// The estimate for the whole region and span of one binding that the windows saw
    /// `seen_bytes` of, in `seen_reads` reads.
    fn estimate(
        &self,
        pair: (u32, u32),
        seen_bytes: u64,
        seen_reads: u64,
        info: &SampledWatch,
    ) -> Binding {
        // Per window: the bytes scaled to the region (y_i), its length (d_i), and whether
        // its word carried the pair.
        let per_window: Vec<(f64, f64, bool)> = (self.windows.iter())
            .map(|w| {
                let v = (w.pairs.iter())
                    .find(|(p, _)| *p == pair)
                    .map_or(0, |(_, b)| *b);
                (v as f64 * w.region as f64 / 8.0, w.ns as f64, v > 0)
            })
            .collect();
        let n = per_window.len() as f64;
        let total_d = (info.watched_ns as f64).max(1.0);
        let total_y: f64 = per_window.iter().map(|w| w.0).sum();
        let ratio = total_y / total_d;
        let sq: f64 = per_window.iter().map(|w| (w.0 - ratio * w.1).powi(2)).sum();
        let var = if n > 1.0 { n / (n - 1.0) * sq } else { 0.0 };
        let span = info.span_ns as f64;
        let carried: f64 = (self.windows.iter().zip(&per_window))
            .filter(|(_, p)| p.2)
            .map(|(w, _)| w.region as f64)
            .sum();
        // Over the pair's activity span: the windows from the first to the last that saw it.
        let first = per_window.iter().position(|p| p.2);
        let last = per_window.iter().rposition(|p| p.2);
        let active = match (first, last) {
            (Some(f), Some(l)) => (l - f + 1) as f64,
            _ => 1.0,
        };
        Binding {
            producer: pair.0,
            consumer: pair.1,
            stack: false,
            bytes: ratio * span,
            bytes_error: var.sqrt() / total_d * span,
            addresses: carried / active,
            seen_bytes,
            seen_reads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_aligned_words_inside_the_region() {
        let mut s = Sampler::new(100, &[(0x1003, 0x20), (0x2000, 8)], 0x1000_0000, None);
        assert_eq!(s.region_bytes, (3 + 1) * 8);
        for _ in 0..100 {
            let w = s.pick(None) - 0x1000_0000;
            assert!(w.is_multiple_of(8));
            assert!((0x1008..0x1020).contains(&w) || w == 0x2000, "{w:#x}");
        }
    }

    /// Each window's bytes are scaled by its own region: a window drawn from twice the bytes
    /// (heap grown) counts twice. Unique addresses are averaged over the pair's first to last
    /// window only.
    #[test]
    fn each_window_is_scaled_by_the_region_it_was_drawn_from() {
        let mut s = Sampler::new(100, &[(0x1000, 800)], 0, Some(4096));
        let pair = (0, 1);
        for (ns, region, seen) in [
            (1000, 800, 8),
            (1000, 1600, 8),
            (2000, 800, 0),
            (1000, 800, 0),
        ] {
            s.windows.push(Window {
                ns,
                region,
                on_heap: region > 800,
                pairs: if seen > 0 { vec![(pair, seen)] } else { vec![] },
            });
        }
        let info = SampledWatch {
            hz: 100,
            windows: 4,
            region_bytes: 800,
            word: 8,
            watched_ns: 5000,
            span_ns: 10_000,
        };
        let b = s.estimate(pair, 16, 2, &info);
        // y = 8 x 100, 8 x 200, 0, 0 over 5000 ns, times 10,000 ns.
        assert!((b.bytes - 4800.0).abs() < 1e-9, "{}", b.bytes);
        // Residuals 320, 1120, -960, -480: sqrt(4/3 x 2,508,800) / 5000 x 10,000.
        let se = (4.0 / 3.0 * 2_508_800.0f64).sqrt() * 2.0;
        assert!((b.bytes_error - se).abs() < 1e-6, "{} {se}", b.bytes_error);
        assert_eq!(b.addresses, (800.0 + 1600.0) / 2.0);
    }
}
