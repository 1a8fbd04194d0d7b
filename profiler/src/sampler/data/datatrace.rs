//! The data trace (`hpcrun-rs -t --data`): per thread, the time and data reference of every
//! data sample of the run's first event, so that `hpcview-rs --memmap` can show which objects
//! and pages were touched when (xQUAD's memory maps, HMTT's address traces).
//!
//! While recording, a sample is kept as (time, key), the key numbering the thread's
//! (accessing context, data reference) pairs in the order they were met; a sample moved to
//! another reference afterwards (a touch found to lie in a block being allocated) is moved
//! here too. At the end the keys become indices into the thread's
//! [`ThreadData::costs`](crate::format::dataref::ThreadData::costs) and each thread's samples are
//! encoded as a [`ThreadTrace`] (about 4-6 bytes a sample in the file; 16 while recording).

use fxhash::FxHashMap;

use crate::format::trace::{ThreadTrace, Traces};

/// Bytes one sample takes while recording.
const RAW_SAMPLE: usize = std::mem::size_of::<(u64, u32)>();

/// The data samples of a run as they come, within a byte budget.
#[derive(Debug)]
pub(crate) struct DataTraceLog {
    threads: FxHashMap<u32, Vec<(u64, u32)>>,
    /// Samples that may still be kept.
    left: usize,
    /// Samples not kept: past the budget.
    dropped: u64,
}

impl DataTraceLog {
    /// A log holding at most `budget` bytes of samples while recording.
    pub(crate) fn new(budget: usize) -> DataTraceLog {
        DataTraceLog {
            threads: FxHashMap::default(),
            left: budget / RAW_SAMPLE,
            dropped: 0,
        }
    }

    /// Record a sample of thread `tid` at `time` charged to key `key`; returns its position,
    /// for [`DataTraceLog::move_to`], or `None` once the budget is spent.
    pub(crate) fn record(&mut self, tid: u32, time: u64, key: u32) -> Option<usize> {
        if self.left == 0 {
            self.dropped += 1;
            return None;
        }
        self.left -= 1;
        let samples = self.threads.entry(tid).or_default();
        samples.push((time, key));
        Some(samples.len() - 1)
    }

    /// The sample at `position` of thread `tid` was charged to `key` after all.
    pub(crate) fn move_to(&mut self, tid: u32, position: usize, key: u32) {
        if let Some(sample) = self.threads.get_mut(&tid).and_then(|s| s.get_mut(position)) {
            sample.1 = key;
        }
    }

    /// The encoded traces, sorted by thread id; `index_of(tid)` gives, per key of that thread,
    /// its index in the thread's costs (`None`: a key with no samples left, whose samples are
    /// counted dropped, though moves keep every traced sample on a key with samples).
    pub(crate) fn finish(self, mut index_of: impl FnMut(u32) -> Vec<Option<u32>>) -> Traces {
        let mut traces = Traces {
            threads: Vec::with_capacity(self.threads.len()),
            dropped: self.dropped,
            ..Traces::default()
        };
        for (tid, samples) in self.threads {
            let index = index_of(tid);
            let mut trace = ThreadTrace::new(tid);
            for (time, key) in samples {
                match index.get(key as usize).copied().flatten() {
                    Some(i) => trace.push(time, i),
                    None => traces.dropped += 1,
                }
            }
            traces.threads.push(trace);
        }
        traces.threads.sort_by_key(|t| t.thread);
        traces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_cost_indices_moves_are_kept_and_the_budget_counts_drops() {
        let mut log = DataTraceLog::new(3 * RAW_SAMPLE);
        assert_eq!(log.record(7, 100, 0), Some(0));
        assert_eq!(log.record(7, 200, 1), Some(1));
        assert_eq!(log.record(9, 150, 0), Some(0));
        assert_eq!(log.record(7, 300, 1), None);
        log.move_to(7, 1, 2);
        // Thread 7's keys 0, 1, 2 sorted to costs 2, (none), 0; thread 9's key 0 to 0.
        let traces = log.finish(|tid| match tid {
            7 => vec![Some(2), None, Some(0)],
            _ => vec![Some(0)],
        });
        assert_eq!(traces.dropped, 1);
        let threads: Vec<u32> = traces.threads.iter().map(|t| t.thread).collect();
        assert_eq!(threads, [7, 9]);
        assert_eq!(traces.threads[0].decode(3).unwrap(), [(100, 2), (200, 0)]);
        assert_eq!(traces.threads[1].decode(1).unwrap(), [(150, 0)]);
    }

    #[test]
    fn profiles_keep_their_data_traces_and_version_7_files_read_without() {
        use crate::format::db::tests::profile_with_data;
        use crate::format::db::Profile;
        let p = std::path::Path::new("p.db");
        let mut profile = profile_with_data(false);
        let tid = profile.threads[0].tid;
        let mut trace = ThreadTrace::new(tid);
        trace.push(5_000, 0);
        trace.push(6_000, 0);
        profile.data.traces.threads.push(trace);
        let bytes = profile.to_bytes().unwrap();
        let back = Profile::from_bytes(&bytes, p).unwrap();
        assert_eq!(back.data.traces, profile.data.traces);

        // Version 7: the same file less the data traces.
        let old = profile_with_data(false);
        assert_eq!(Profile::from_bytes(&old.to_version(7), p).unwrap(), old);

        // A sample naming a data cost the thread does not have is refused.
        profile.data.traces.threads[0].push(7_000, 1);
        let err = Profile::from_bytes(&profile.to_bytes().unwrap(), p).unwrap_err();
        assert!(err.to_string().contains("context 1 of 1"), "{err}");
    }
}
