//! Where records come from while a command runs, behind one trait: the perf rings (emptied by
//! the copier), the allocation shim's rings and the watchpoint sampler. The reader sleeps until
//! a source has something, or until the soonest of their time-outs, then [`merge`]s: every
//! source takes in what has arrived, and their records reach the recorder in one time order. A
//! mapping reported on one CPU must be known before a sample taken on another, and a heap block
//! must be live exactly between its allocation and its free (every side stamps with
//! CLOCK_MONOTONIC). A new source is one type implementing [`Source`], put in the reader's list.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};

use crate::sampler::capture::perf;
use crate::sampler::capture::ring::{Copier, Ring};
use crate::sampler::data::alloc::{monotonic_ns, AllocEvent, AllocTracker};
use crate::sampler::open_events::OpenEvents;
use crate::sampler::record::recorder::Recorder;
use crate::sampler::watch::Watcher;

/// The longest the reader sleeps without a wake-up, in ms.
pub(crate) const LONGEST_SLEEP_MS: u16 = 50;

/// A source of records for the recorder.
pub(crate) trait Source {
    /// Descriptors that become readable when the source has something new.
    fn ready_fds(&self) -> Vec<BorrowedFd<'_>>;

    /// The longest the reader may sleep before looking at this source again, in ms.
    fn sleep_ms(&self) -> u16 {
        LONGEST_SLEEP_MS
    }

    /// Take in what has arrived, up to `now` (`u64::MAX`: everything, the run is over); returns
    /// the time up to which this source's records are complete (a record stamped later than
    /// that may still come, so no source's later records may be handed on yet).
    fn fill(&mut self, now: u64, recorder: &Recorder) -> u64;

    /// The time of the next record taken in, if any.
    fn next_time(&self, _recorder: &Recorder) -> Option<u64> {
        None
    }

    /// Hand the record of [`Source::next_time`] to the recorder.
    fn deliver_next(&mut self, _recorder: &mut Recorder) {}

    /// Work due after each merge but the last, with the recorder up to date.
    fn after_merge(&mut self, _recorder: &Recorder) {}

    /// The run is over: stop producing (the last merge follows).
    fn finish(&mut self) {}

    /// Whether nothing more can come (all the measured tasks are gone).
    fn exhausted(&self) -> bool {
        true
    }
}

/// Hand the recorder every record that is out of every source, in time order (ties: the
/// earlier source in `sources` first): all of them once the command has ended (`last`),
/// otherwise up to the earliest time up to which every source is complete.
pub(crate) fn merge(sources: &mut [&mut dyn Source], recorder: &mut Recorder, last: bool) {
    let now = if last { u64::MAX } else { monotonic_ns() };
    let cutoff = (sources.iter_mut())
        .map(|s| s.fill(now, recorder))
        .fold(now, u64::min);
    loop {
        let mut best: Option<(usize, u64)> = None;
        for (i, source) in sources.iter().enumerate() {
            match source.next_time(recorder) {
                Some(t) if t <= cutoff && best.is_none_or(|(_, b)| t < b) => best = Some((i, t)),
                _ => {}
            }
        }
        let Some((i, _)) = best else { break };
        sources[i].deliver_next(recorder);
    }
    if !last {
        sources.iter_mut().for_each(|s| s.after_merge(recorder));
    }
}

/// The perf rings, one per CPU, copied out by the [`Copier`] until the run is over.
pub(crate) struct PerfRings<'a> {
    open: &'a mut OpenEvents,
    copier: Option<Copier>,
    /// The ring [`Source::next_time`] found holding the earliest record (and that record's
    /// time), for the [`Source::deliver_next`] that usually follows: every ring is scanned once
    /// per record, not twice.
    earliest: std::cell::Cell<Option<(usize, u64)>>,
    /// Set when the run is over: how many times the command was held
    /// ([`crate::sampler::capture::hold`]).
    holds: &'a mut u64,
}

impl<'a> PerfRings<'a> {
    /// The rings of `open`, emptied by `copier`.
    pub(crate) fn new(open: &'a mut OpenEvents, copier: Copier, holds: &'a mut u64) -> Self {
        PerfRings {
            open,
            copier: Some(copier),
            earliest: std::cell::Cell::new(None),
            holds,
        }
    }

    /// The ring holding the earliest record, and that record's time.
    fn earliest(&self, recorder: &Recorder) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for (i, ring) in self.open.rings.iter().enumerate() {
            if let Some(t) = ring.peek().map(|rec| recorder.timestamp(&rec)) {
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((i, t));
                }
            }
        }
        best
    }
}

impl Source for PerfRings<'_> {
    fn ready_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.copier.iter().map(|c| c.notices().as_fd()).collect()
    }

    fn fill(&mut self, _now: u64, _recorder: &Recorder) -> u64 {
        self.earliest.set(None);
        if let Some(copier) = &self.copier {
            copier.take_notices();
            copier.flush();
        }
        self.open.rings.iter_mut().for_each(Ring::fill);
        u64::MAX
    }

    fn next_time(&self, recorder: &Recorder) -> Option<u64> {
        let found = self.earliest(recorder);
        self.earliest.set(found);
        found.map(|(_, t)| t)
    }

    fn deliver_next(&mut self, recorder: &mut Recorder) {
        let found = self.earliest.take().or_else(|| self.earliest(recorder));
        if let Some((i, _)) = found {
            let ring = &mut self.open.rings[i];
            if let Some(rec) = ring.peek() {
                recorder.handle(&rec);
            }
            ring.advance();
        }
    }

    fn after_merge(&mut self, _recorder: &Recorder) {
        self.open.rings.iter_mut().for_each(Ring::release);
    }

    /// Switch the events off and stop holding the command, then stop the copier: the last
    /// fill copies what is left itself.
    fn finish(&mut self) {
        self.open.fds().for_each(|fd| perf::set_enabled(fd, false));
        if let Some(copier) = self.copier.take() {
            if copier.holding().is_some() {
                self.open.release_hold();
            }
            *self.holds = copier.holds();
        }
    }

    fn exhausted(&self) -> bool {
        self.copier.as_ref().is_none_or(Copier::all_hung)
    }
}

/// The allocation shim's rings (`--data`), whose records are stamped when each call returns.
pub(crate) struct Allocations<'a> {
    tracker: &'a mut AllocTracker,
    taken: VecDeque<AllocEvent>,
}

impl<'a> Allocations<'a> {
    /// The records of `tracker`.
    pub(crate) fn new(tracker: &'a mut AllocTracker) -> Self {
        Allocations {
            tracker,
            taken: VecDeque::new(),
        }
    }
}

impl Source for Allocations<'_> {
    fn ready_fds(&self) -> Vec<BorrowedFd<'_>> {
        vec![self.tracker.poll_fd()]
    }

    /// Up to `now`, or up to the start of an allocation call still in progress (its record,
    /// stamped when it returns, comes later and must not be overtaken).
    fn fill(&mut self, now: u64, _recorder: &Recorder) -> u64 {
        let mut out = Vec::new();
        let cutoff = self.tracker.drain(now, &mut out);
        self.taken.extend(out);
        cutoff
    }

    fn next_time(&self, _recorder: &Recorder) -> Option<u64> {
        self.taken.front().map(|a| a.t_return)
    }

    fn deliver_next(&mut self, recorder: &mut Recorder) {
        if let Some(a) = self.taken.pop_front() {
            recorder.allocation(&a);
        }
    }
}

/// The watchpoints (`--watch`): their traps are read, and the sampled watchpoint moved, after
/// each merge (it is drawn from what the recorder knows to be live).
impl Source for Watcher {
    fn ready_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.poll_fds().map(|fd| fd.as_fd()).collect()
    }

    fn sleep_ms(&self) -> u16 {
        Watcher::sleep_ms(self)
    }

    fn fill(&mut self, now: u64, _recorder: &Recorder) -> u64 {
        now
    }

    fn after_merge(&mut self, recorder: &Recorder) {
        self.tick(recorder);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// A source of records stamped `times`, complete up to `complete`, that logs what it hands
    /// on as (its name, the time).
    struct Fake {
        name: char,
        times: VecDeque<u64>,
        complete: u64,
        log: Rc<RefCell<Vec<(char, u64)>>>,
    }

    impl Source for Fake {
        fn ready_fds(&self) -> Vec<BorrowedFd<'_>> {
            Vec::new()
        }
        fn fill(&mut self, now: u64, _recorder: &Recorder) -> u64 {
            self.complete.min(now)
        }
        fn next_time(&self, _recorder: &Recorder) -> Option<u64> {
            self.times.front().copied()
        }
        fn deliver_next(&mut self, _recorder: &mut Recorder) {
            let t = self.times.pop_front().expect("a record");
            self.log.borrow_mut().push((self.name, t));
        }
    }

    #[test]
    fn records_come_in_time_order_up_to_what_every_source_has_complete() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let fake = |name, times: &[u64], complete| Fake {
            name,
            times: times.iter().copied().collect(),
            complete,
            log: Rc::clone(&log),
        };
        // `a` is complete up to 25 only (a call in progress): nothing later may pass yet.
        let mut a = fake('a', &[10, 20, 30], 25);
        let mut b = fake('b', &[5, 20, 26, 40], u64::MAX);
        let mut recorder = Recorder::new(Vec::new(), Default::default());
        merge(&mut [&mut a, &mut b], &mut recorder, false);
        let first: Vec<(char, u64)> = log.borrow_mut().drain(..).collect();
        // Ties go to the earlier source.
        assert_eq!(first, [('b', 5), ('a', 10), ('a', 20), ('b', 20)]);
        a.complete = u64::MAX;
        merge(&mut [&mut a, &mut b], &mut recorder, true);
        assert_eq!(*log.borrow(), [('b', 26), ('a', 30), ('b', 40)]);
    }
}
