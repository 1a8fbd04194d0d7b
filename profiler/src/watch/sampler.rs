//! `--watch sample[@HZ]`: one watchpoint moved over the executable's static data, and the
//! estimator that scales what it saw to the whole region and run.
//!
//! Window i watches one 8-byte word w_i, drawn uniformly from the R bytes of writable static
//! data, for d_i ns (until about [`WINDOW_TRAPS`] traps or [`WINDOW_MS`] ms; windows start
//! every 1/HZ s) and sees v_i bytes
//! move from P to C through it. Over a run of T ns (first window to last) the transfer through
//! the whole region is estimated by the ratio estimator
//!
//! ```text
//! bytes(P, C) = (sum v_i / sum d_i) x T x R / 8
//! ```
//!
//! unbiased when the transfer rate does not depend on which windows were taken (they are
//! evenly spaced in time, words drawn independently). Its standard error is the ratio
//! estimator's, sqrt(n / (n - 1) x sum (v_i - r d_i)^2) / sum d_i x T x R / 8 with r the ratio:
//! it grows where few windows saw the pair.
//!
//! A window closed by its trap count would cut the last production epoch (a write and the
//! reads that follow it) short at a point that depends on the reads' order, favouring the
//! first consumers (W R1 R1 R2 W R1 R1 R2 W R1 would read 5:2 for a 2:1 pattern). So such a
//! window, when it holds at least two writes, counts only up to its last write, and its d_i
//! ends there: whole epochs only, a renewal-reward ratio. A window closed by time is cut
//! at a point independent of the accesses and counts everything. Unique addresses are estimated as the share of
//! watched words that saw the pair, times R. A windows' first reads before any write have no
//! known producer and are not counted (a bias against long-lived data, bounded by one trap per
//! window).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::{Access, Tally, WINDOW_MS, WINDOW_TRAPS};
use crate::alloc::monotonic_ns;
use crate::watchdb::{Binding, SampledWatch, WatchMode};

/// One closed window: its length and the bytes each binding moved in it.
struct Window {
    ns: u64,
    pairs: Vec<((u32, u32), u64)>,
}

/// Where the watchpoint goes next, and what the windows saw.
pub(crate) struct Sampler {
    hz: u64,
    /// Runtime start and 8-byte words of each data section.
    sections: Vec<(u64, u64)>,
    words: u64,
    region_bytes: u64,
    rng: u64,
    current: u64,
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
    watched: BTreeSet<u64>,
    first_ns: Option<u64>,
    last_end_ns: u64,
}

impl Sampler {
    /// A sampler over `data` (link-time sections), loaded `bias` bytes from link time.
    pub(crate) fn new(hz: u64, data: &[(u64, u64)], bias: u64) -> Sampler {
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
            words,
            region_bytes: words * 8,
            rng: monotonic_ns() | 1,
            current: 0,
            armed_ns: None,
            next_due: Instant::now(),
            window_end: Instant::now(),
            traps: 0,
            pairs: HashMap::new(),
            pending: Vec::new(),
            writes: 0,
            last_write_ns: 0,
            windows: Vec::new(),
            watched: BTreeSet::new(),
            first_ns: None,
            last_end_ns: 0,
        }
    }

    /// Draw the next word (uniform over the region) and make it the current one.
    pub(crate) fn pick(&mut self) -> u64 {
        // xorshift64*: independent draws are all the estimator needs.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let mut k = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % self.words.max(1);
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
        self.watched.insert(self.current);
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
            pairs: self.pairs.drain().collect(),
        });
        self.last_end_ns = now;
        // A producer is known only from a write seen in the same window.
        tally.last_writer.remove(&self.current);
    }

    /// Close the last window and scale what the windows saw.
    pub(crate) fn finish(mut self, tally: &mut Tally) -> (WatchMode, Vec<Binding>) {
        self.close_window(tally);
        let watched_ns: u64 = self.windows.iter().map(|w| w.ns).sum();
        let info = SampledWatch {
            hz: self.hz,
            windows: self.windows.len() as u64,
            region_bytes: self.region_bytes,
            word: 8,
            watched_ns,
            span_ns: self.last_end_ns.saturating_sub(self.first_ns.unwrap_or(0)),
        };
        let scale = info.scale();
        let n = self.windows.len() as f64;
        let total_d = watched_ns as f64;
        let mut bindings: Vec<Binding> = (tally.pairs.iter())
            .map(|(&(producer, consumer), seen)| {
                let ratio = seen.bytes as f64 / total_d.max(1.0);
                let sq: f64 = (self.windows.iter())
                    .map(|w| {
                        let v = (w.pairs.iter())
                            .find(|(p, _)| *p == (producer, consumer))
                            .map_or(0.0, |(_, b)| *b as f64);
                        (v - ratio * w.ns as f64).powi(2)
                    })
                    .sum();
                let var = if n > 1.0 { n / (n - 1.0) * sq } else { 0.0 };
                Binding {
                    producer,
                    consumer,
                    stack: false,
                    bytes: seen.bytes as f64 * scale,
                    bytes_error: var.sqrt() / total_d.max(1.0)
                        * info.span_ns as f64
                        * (info.region_bytes as f64 / 8.0),
                    addresses: seen.words.len() as f64 / self.watched.len().max(1) as f64
                        * info.region_bytes as f64,
                    seen_bytes: seen.bytes,
                    seen_reads: seen.reads,
                }
            })
            .collect();
        bindings.sort_by_key(|b| (b.producer, b.consumer));
        (WatchMode::Sampled(info), bindings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_aligned_words_inside_the_region() {
        let mut s = Sampler::new(100, &[(0x1003, 0x20), (0x2000, 8)], 0x1000_0000);
        assert_eq!(s.words, 3 + 1);
        for _ in 0..100 {
            let w = s.pick() - 0x1000_0000;
            assert!(w.is_multiple_of(8));
            assert!((0x1008..0x1020).contains(&w) || w == 0x2000, "{w:#x}");
        }
    }
}
