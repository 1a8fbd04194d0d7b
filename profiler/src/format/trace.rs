//! Traces (`hpcrun-rs -t`): what each thread was doing when, as one (time, context) pair per
//! sample of the run's first event, beside the calling-context trees.
//!
//! A tree says where time went; a trace keeps the order, so phases, load imbalance over time
//! and serialisation can be seen (HPCToolkit's `hpcrun -t` and hpctraceviewer). Each pair is
//! stored as two zigzag LEB128 varints: the time minus the previous sample's time (ns) and the
//! context id minus the previous sample's. At 1 kHz a time step is about 10^6 ns (3 bytes) and
//! a thread that stays in one context repeats its id (1 byte), so a sample costs about 4-5
//! bytes with no further compression; a step that goes backwards is stored as it is (never
//! clamped), so readers can check that times are monotonic.
//!
//! The same encoding carries profile tree node ids in `profile.db` and database node ids in the
//! correlated database. Memory is bounded by [`TraceLog`]'s byte budget: samples past it are
//! counted as dropped, never silently lost.

use serde::{Deserialize, Serialize};

/// Every thread's trace in one run (or one database).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traces {
    /// One trace per thread that had samples of the first event.
    pub threads: Vec<ThreadTrace>,
    /// Samples not traced because the byte budget was spent (their costs are in the trees).
    pub dropped: u64,
    /// When the OpenMP regions and their threads' shares ran, in the threads' numbering
    /// ([`ThreadTrace::thread`]): what correlation brings from the profiles' own section
    /// ([`crate::format::db::Profile::regions`]) for grafting; not stored with the traces.
    #[serde(skip)]
    pub regions: crate::format::openmp::RegionTimeline,
}

impl Traces {
    /// Why the traces do not fit their tables: a trace of a thread `nodes_of` does not know
    /// (it gives the number of context ids a thread's trace may use), or one whose bytes do not
    /// decode to ids below that.
    pub fn malformation(&self, nodes_of: impl Fn(u32) -> Option<usize>) -> Option<String> {
        self.threads
            .iter()
            .find_map(|trace| match nodes_of(trace.thread) {
                None => Some(format!("a trace for missing thread {}", trace.thread)),
                Some(nodes) => trace.decode(nodes).err().map(|e| e.to_string()),
            })
    }

    /// One line for the run's summary: samples, threads, bytes per sample, drops; `noun`
    /// names the trace (`trace`, `data trace`).
    pub fn summary(&self, noun: &str) -> String {
        let samples: u64 = self.threads.iter().map(|t| t.samples).sum();
        let bytes: usize = self.threads.iter().map(|t| t.bytes.len()).sum();
        let per = bytes as f64 / samples.max(1) as f64;
        let mut line = format!(
            "{noun}: {samples} samples of {} threads in {bytes} bytes ({per:.2} bytes a sample)",
            self.threads.len()
        );
        if self.dropped > 0 {
            let d = self.dropped;
            line += &format!("; {d} samples past the budget (--trace-max-mib) not traced");
        }
        line
    }
}

/// One thread's samples in time order, encoded as the module documentation says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTrace {
    /// Thread id (in `profile.db`) or database thread index (in a database).
    pub thread: u32,
    /// Number of samples encoded in `bytes`.
    pub samples: u64,
    /// The encoded (time delta, context delta) pairs.
    pub bytes: Vec<u8>,
    /// The last sample's (time, context), where the next one's deltas start from ((0, 0)
    /// before the first); stored, so a trace read back can be extended, and checked.
    last: (u64, u64),
}

/// A trace's bytes do not decode to the samples it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("thread {thread}'s trace is malformed: {why}")]
pub struct TraceError {
    /// The trace's thread.
    pub thread: u32,
    /// What is wrong.
    pub why: String,
}

impl ThreadTrace {
    /// An empty trace for `thread`.
    pub fn new(thread: u32) -> ThreadTrace {
        ThreadTrace {
            thread,
            ..ThreadTrace::default()
        }
    }

    /// Append a sample at `time` (ns) in context `context`.
    pub fn push(&mut self, time: u64, context: u32) {
        let (t, c) = self.last;
        put_varint(&mut self.bytes, zigzag(time.wrapping_sub(t) as i64));
        put_varint(
            &mut self.bytes,
            zigzag(u64::from(context).wrapping_sub(c) as i64),
        );
        self.last = (time, u64::from(context));
        self.samples += 1;
    }

    /// The samples as (time ns, context id), checking that the bytes hold exactly
    /// [`ThreadTrace::samples`] pairs and that every context id is below `contexts`.
    pub fn decode(&self, contexts: usize) -> Result<Vec<(u64, u32)>, TraceError> {
        let bad = |why: String| TraceError {
            thread: self.thread,
            why,
        };
        let mut out = Vec::with_capacity(self.samples.min(1 << 24) as usize);
        let (mut at, mut time, mut context) = (0usize, 0u64, 0u64);
        while at < self.bytes.len() {
            let dt = take_varint(&self.bytes, &mut at).ok_or_else(|| bad("truncated".into()))?;
            let dc = take_varint(&self.bytes, &mut at).ok_or_else(|| bad("truncated".into()))?;
            time = time.wrapping_add(unzigzag(dt) as u64);
            context = context.wrapping_add(unzigzag(dc) as u64);
            if context >= contexts as u64 {
                return Err(bad(format!("context {context} of {contexts}")));
            }
            out.push((time, context as u32));
        }
        if out.len() as u64 != self.samples {
            let why = format!("{} samples, {} claimed", out.len(), self.samples);
            return Err(bad(why));
        }
        if (time, context) != self.last {
            return Err(bad(format!(
                "ends at {:?}, {:?} claimed",
                (time, context),
                self.last
            )));
        }
        Ok(out)
    }

    /// A copy with every context id replaced by `map(id)` (profile node -> database node).
    pub fn remap(
        &self,
        thread: u32,
        contexts: usize,
        map: impl Fn(u32) -> u32,
    ) -> Result<ThreadTrace, TraceError> {
        let mut out = ThreadTrace::new(thread);
        for (time, context) in self.decode(contexts)? {
            out.push(time, map(context));
        }
        Ok(out)
    }
}

/// Builds the traces of a run within a byte budget.
#[derive(Debug)]
pub struct TraceLog {
    traces: Traces,
    /// Index in `traces.threads` by thread id.
    index: fxhash::FxHashMap<u32, usize>,
    bytes: usize,
    budget: usize,
}

impl TraceLog {
    /// A log that stores at most `budget` bytes of trace in all (about 5 bytes a sample).
    pub fn new(budget: usize) -> TraceLog {
        TraceLog {
            traces: Traces::default(),
            index: fxhash::FxHashMap::default(),
            bytes: 0,
            budget,
        }
    }

    /// Record a sample of thread `tid` at `time` in tree node `context`, or count it dropped
    /// once the budget is spent.
    pub fn record(&mut self, tid: u32, time: u64, context: u32) {
        if self.bytes >= self.budget {
            self.traces.dropped += 1;
            return;
        }
        let threads = &mut self.traces.threads;
        let i = *self.index.entry(tid).or_insert_with(|| {
            threads.push(ThreadTrace::new(tid));
            threads.len() - 1
        });
        let trace = &mut threads[i];
        let before = trace.bytes.len();
        trace.push(time, context);
        self.bytes += trace.bytes.len() - before;
    }

    /// The traces, sorted by thread id.
    pub fn finish(mut self) -> Traces {
        self.traces.threads.sort_by_key(|t| t.thread);
        self.traces
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_in_about_four_bytes_each() {
        let mut t = ThreadTrace::new(7);
        let samples: Vec<(u64, u32)> = (0..1000u64)
            .map(|i| (1_700_000_000_000 + i * 1_000_123, (i % 3) as u32 + 40))
            .collect();
        for &(time, ctx) in &samples {
            t.push(time, ctx);
        }
        assert_eq!(t.decode(43).unwrap(), samples);
        // 3 bytes of time step and 1 of context step; the first sample's absolute time takes
        // 6 bytes (42 bits zigzagged).
        assert_eq!(t.bytes.len(), 999 * 4 + 6 + 1);
        let err = t.decode(42).unwrap_err();
        assert_eq!(err.why, "context 42 of 42");
    }

    #[test]
    fn backward_steps_are_kept_and_truncation_is_an_error() {
        let mut t = ThreadTrace::new(1);
        t.push(100, 5);
        t.push(90, 2);
        assert_eq!(t.decode(6).unwrap(), vec![(100, 5), (90, 2)]);
        t.bytes.pop();
        assert_eq!(t.decode(6).unwrap_err().why, "truncated");
        let mut t = ThreadTrace::new(1);
        t.push(1, 0);
        t.samples = 2;
        assert_eq!(t.decode(1).unwrap_err().why, "1 samples, 2 claimed");
        t.samples = 1;
        t.last = (2, 0);
        assert_eq!(
            t.decode(1).unwrap_err().why,
            "ends at (1, 0), (2, 0) claimed"
        );
    }

    #[test]
    fn the_budget_bounds_bytes_and_counts_what_it_drops() {
        let mut log = TraceLog::new(12);
        for i in 0..10 {
            log.record(3, i * 1000, 1);
            log.record(2, i * 1000, 1);
        }
        let traces = log.finish();
        assert_eq!(traces.threads[0].thread, 2);
        let kept: u64 = traces.threads.iter().map(|t| t.samples).sum();
        assert_eq!(kept + traces.dropped, 20);
        let bytes: usize = traces.threads.iter().map(|t| t.bytes.len()).sum();
        // Each sample adds at most 3 + 1 bytes here; recording stops at the first sample
        // that starts past the budget.
        assert!((12..12 + 4).contains(&bytes), "{bytes}");
    }
}
