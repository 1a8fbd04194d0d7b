//! `--watch sample[@HZ]`: one watchpoint moved over the words of [`super::targets`] (static
//! data, the threads' stacks, with `--data` the live heap blocks), and the estimator that
//! scales what it saw to the whole region and run.
//!
//! Window i watches one 8-byte word w_i, drawn uniformly from the R_i bytes of targets at its
//! start, for d_i ns (until about [`WINDOW_TRAPS`] traps or [`WINDOW_MS`] ms; windows start
//! every 1/HZ s) and sees v_i bytes move from P to C through it: v_i / d_i is the rate through
//! that word, and z_i = (v_i / d_i) x R_i / 8 the rate through the whole region it stands for.
//! Over a run of T ns (first window to last) the transfer is estimated as
//!
//! ```text
//! bytes(P, C) = mean(z_i) x T,   standard error sd(z_i) / sqrt(n) x T
//! ```
//!
//! unbiased when each v_i / d_i is unbiased for its word's rate and the rates do not depend
//! on which windows were taken (they are evenly spaced in time, words drawn independently).
//! The mean of the windows' rates, not the ratio of their sums: a window on a busy word is
//! closed by its traps within microseconds while one on a quiet word stays open 5 ms, so
//! pooling the windows' bytes and lengths would weigh the busy words by their short windows
//! and underestimate them by the ratio of the lengths. Bindings through stack words and
//! through the others are estimated apart (v_i counted only in windows of that kind, a domain
//! estimate over all the windows), so `--no-stack` can drop the first.
//!
//! What remains low is d_i itself: each trap stops the program (about 16 µs on the 2-core VM
//! this was built on), so a window on a word the program touches every few ns lasts many
//! times the program's own time for those accesses, and its rate comes out that many times
//! too low. The natural time is the window's length less its traps' cost, a small difference
//! of large numbers for such words, so it is not subtracted.
//!
//! A window closed by its trap count would cut the last production epoch (a write and the
//! reads that follow it) short at a point that depends on the reads' order, favouring the
//! first consumers (W R1 R1 R2 W R1 R1 R2 W R1 would read 5:2 for a 2:1 pattern). So such a
//! window, when it holds at least two writes, counts only up to its last write, and its d_i
//! ends there: whole epochs only, a renewal-reward ratio. A window closed by time is cut at a
//! point independent of the accesses and counts everything. A window's first reads before any
//! write have no known producer and are not counted (a bias against long-lived data, bounded
//! by one trap per window).
//!
//! Unique addresses are estimated as the mean of R_i x [the window's word carried the pair]
//! over the pair's activity span (its first window to its last): the bytes that carry the pair
//! at a given moment, low where the program was off the CPU for whole windows.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::targets::{Kind, Live, Pick, Targets};
use super::{Access, Tally, WINDOW_MS, WINDOW_TRAPS};
use crate::format::watchdb::{Binding, RegionShare, Regions, SampledWatch, WatchMode};
use crate::sampler::data::alloc::monotonic_ns;

/// One closed window: its length, the word it watched, and the bytes and reads each binding
/// moved through it.
struct Window {
    ns: u64,
    pick: Pick,
    pairs: Vec<((u32, u32), (u64, u64))>,
}

impl Window {
    /// Bytes of targets its word was drawn from.
    fn region(&self, static_bytes: u64) -> u64 {
        static_bytes + self.pick.stack_bytes + self.pick.heap_bytes
    }
}

/// Where the watchpoint goes next, and what the windows saw.
pub(crate) struct Sampler {
    hz: u64,
    targets: Targets,
    rng: u64,
    /// The word being watched, and where it was drawn from.
    current: Pick,
    armed_ns: Option<u64>,
    next_due: Instant,
    window_end: Instant,
    traps: u32,
    /// Per binding: bytes and reads in this window.
    pairs: HashMap<(u32, u32), (u64, u64)>,
    /// Reads since the window's last write: (binding, bytes).
    pending: Vec<((u32, u32), u64)>,
    writes: u32,
    last_write_ns: u64,
    windows: Vec<Window>,
    first_ns: Option<u64>,
    last_end_ns: u64,
}

impl Sampler {
    /// A sampler over `targets`, `hz` windows a second.
    pub(crate) fn new(hz: u64, targets: Targets) -> Sampler {
        Sampler {
            hz,
            targets,
            rng: monotonic_ns() | 1,
            current: Pick {
                word: 0,
                kind: Kind::Static,
                stack_bytes: 0,
                heap_bytes: 0,
            },
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

    /// Draw the next word over the targets of process `pid` with what it has `live`, and make
    /// it the current one.
    pub(crate) fn pick(&mut self, pid: i32, live: &Live) -> u64 {
        let mut rng = self.rng;
        // xorshift64*: independent draws are all the estimator needs.
        let mut draw = || {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        self.current = self.targets.pick(pid, live, &mut draw);
        self.rng = rng;
        self.current.word
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
        if self.armed_ns.is_none() || addr != self.current.word {
            return;
        }
        self.traps += 1;
        if let Some(read) = tally.bind(addr, f, a, 8) {
            self.pending.push(read);
        }
        if a.write {
            self.commit();
            self.writes += 1;
            self.last_write_ns = time;
        }
    }

    /// Count the pending reads in this window.
    fn commit(&mut self) {
        for (pair, bytes) in self.pending.drain(..) {
            let seen = self.pairs.entry(pair).or_default();
            seen.0 += bytes;
            seen.1 += 1;
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
            self.commit();
            now
        };
        self.windows.push(Window {
            ns: end - armed,
            pick: self.current,
            pairs: self.pairs.drain().collect(),
        });
        self.last_end_ns = now;
        // A producer is known only from a write seen in the same window.
        tally.last_writer.remove(&self.current.word);
    }

    /// Close the last window and scale what the windows saw.
    pub(crate) fn finish(mut self, tally: &mut Tally) -> (WatchMode, Vec<Binding>) {
        self.close_window(tally);
        let info = SampledWatch {
            hz: self.hz,
            windows: self.windows.len() as u64,
            region_bytes: self.targets.static_bytes,
            word: 8,
            watched_ns: self.windows.iter().map(|w| w.ns).sum(),
            span_ns: self.last_end_ns.saturating_sub(self.first_ns.unwrap_or(0)),
        };
        let seen: BTreeSet<((u32, u32), bool)> = (self.windows.iter())
            .flat_map(|w| w.pairs.iter().map(|p| (p.0, w.pick.kind == Kind::Stack)))
            .collect();
        let bindings = (seen.into_iter())
            .map(|(pair, stack)| self.estimate(pair, stack, &info))
            .collect();
        let share = |kind: Kind, bytes: fn(&Pick) -> u64| RegionShare {
            windows: self.windows.iter().filter(|w| w.pick.kind == kind).count() as u64,
            mean_bytes: (self.windows.iter().map(|w| bytes(&w.pick)).sum::<u64>())
                / info.windows.max(1),
        };
        let regions = Regions {
            stack: share(Kind::Stack, |p| p.stack_bytes),
            heap: (self.targets.heap_min).map(|_| share(Kind::Heap, |p| p.heap_bytes)),
            heap_min_block: self.targets.heap_min.unwrap_or(0),
        };
        (WatchMode::SampledRegions(info, regions), bindings)
    }

    /// The estimate for the whole region and span of one binding, through stack words
    /// (`stack`) or through the others.
    fn estimate(&self, pair: (u32, u32), stack: bool, info: &SampledWatch) -> Binding {
        // Per window: the bytes and reads seen, and the rate through the region it stands for,
        // z_i = (v_i x R_i / 8) / d_i.
        let per_window: Vec<(u64, u64, f64)> = (self.windows.iter())
            .map(|w| {
                let (v, reads) = (w.pairs.iter())
                    .find(|(p, _)| *p == pair && (w.pick.kind == Kind::Stack) == stack)
                    .map_or((0, 0), |(_, seen)| *seen);
                let region = w.region(self.targets.static_bytes) as f64;
                (v, reads, v as f64 * region / 8.0 / w.ns.max(1) as f64)
            })
            .collect();
        let n = (per_window.len() as f64).max(1.0);
        let mean = per_window.iter().map(|w| w.2).sum::<f64>() / n;
        let sq: f64 = per_window.iter().map(|w| (w.2 - mean).powi(2)).sum();
        let var = if n > 1.0 { sq / (n - 1.0) / n } else { 0.0 };
        let span = info.span_ns as f64;
        let carried: f64 = (self.windows.iter().zip(&per_window))
            .filter(|(_, p)| p.0 > 0)
            .map(|(w, _)| w.region(self.targets.static_bytes) as f64)
            .sum();
        // Over the pair's activity span: the windows from the first to the last that saw it.
        let first = per_window.iter().position(|p| p.0 > 0);
        let last = per_window.iter().rposition(|p| p.0 > 0);
        let active = match (first, last) {
            (Some(f), Some(l)) => (l - f + 1) as f64,
            _ => 1.0,
        };
        Binding {
            producer: pair.0,
            consumer: pair.1,
            stack,
            bytes: mean * span,
            bytes_error: var.sqrt() * span,
            addresses: carried / active,
            seen_bytes: per_window.iter().map(|w| w.0).sum(),
            seen_reads: per_window.iter().map(|w| w.1).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each window's rate is scaled by its own region: a window drawn from twice the bytes
    /// (heap grown) counts twice; the windows' rates are averaged, whatever their lengths.
    /// Bindings through stack words are estimated apart. Unique addresses are averaged over
    /// the pair's first to last window only.
    #[test]
    fn each_window_is_scaled_by_the_region_it_was_drawn_from() {
        let mut s = Sampler::new(100, Targets::new(&[(0x1000, 800)], 0, Some(4096)));
        let pair = (0, 1);
        let windows = [
            (1000, Kind::Static, 0, 8),
            (1000, Kind::Heap, 800, 8),
            (2000, Kind::Stack, 0, 8),
            (1000, Kind::Static, 0, 0),
        ];
        for (ns, kind, heap_bytes, seen) in windows {
            let pick = Pick {
                word: 0,
                kind,
                stack_bytes: 0,
                heap_bytes,
            };
            let pairs = if seen > 0 {
                vec![(pair, (seen, 1))]
            } else {
                vec![]
            };
            s.windows.push(Window { ns, pick, pairs });
        }
        let info = SampledWatch {
            hz: 100,
            windows: 4,
            region_bytes: 800,
            word: 8,
            watched_ns: 5000,
            span_ns: 10_000,
        };
        let b = s.estimate(pair, false, &info);
        // z = 8 x 100 / 1000, 8 x 200 / 1000, 0 (a stack window), 0: mean 0.6 per ns over
        // 10,000 ns; squared deviations 1.76, so the standard error is sqrt(1.76 / 3 / 4).
        assert!((b.bytes - 6000.0).abs() < 1e-9, "{}", b.bytes);
        let se = (1.76f64 / 3.0 / 4.0).sqrt() * 10_000.0;
        assert!((b.bytes_error - se).abs() < 1e-6, "{} {se}", b.bytes_error);
        assert_eq!(b.addresses, (800.0 + 1600.0) / 2.0);
        assert_eq!((b.seen_bytes, b.seen_reads, b.stack), (16, 2, false));
        let through_stack = s.estimate(pair, true, &info);
        assert!((through_stack.bytes - 8.0 * 100.0 / 2000.0 / 4.0 * 10_000.0).abs() < 1e-9);
        assert_eq!((through_stack.seen_reads, through_stack.stack), (1, true));
    }
}
