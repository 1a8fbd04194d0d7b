//! The counts an event group's leader reads with each sample (`-e '{LEADER,MEMBER,...}'`):
//! what each member counted in the sampled thread since that thread's previous sample goes to
//! the context the sample was charged to.

use linux_perf_event_reader::RawData;

use super::Recorder;
use crate::format::db::CctNodeId;
use crate::sampler::capture::groups::group_counts;

impl Recorder {
    /// Charge the members' counts carried by a sample of `event` (record bytes `data`) to the
    /// context `charged` (thread, node) it went to, if `event` leads a group.
    pub(super) fn read_group(
        &mut self,
        data: RawData<'_>,
        event: usize,
        charged: Option<(u32, CctNodeId)>,
    ) {
        let (Some(offset), Some((tid, node))) = (self.layouts[event].group_read, charged) else {
            return;
        };
        // The counts are running totals: what a cut record would have carried comes with the
        // thread's next sample.
        let Some(counts) = group_counts(data, offset) else {
            return;
        };
        for (id, count) in counts {
            let Some(&metric) = self.event_of_id.get(&id).filter(|&&m| m != event) else {
                continue;
            };
            let delta = self.group_reads.delta(tid, id, count);
            if let (true, Some(thread)) = (delta > 0, self.threads.get_mut(&tid)) {
                thread.cct.charge(node, metric, delta);
            }
        }
    }
}
