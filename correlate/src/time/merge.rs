//! Profiles' traces into the database: each trace's thread id becomes the database thread the
//! profile's thread landed on, and each tree node id the database node its samples landed on
//! (the same map the costs took, so a trace sample and a cost agree on their context).

use profiler::db::Profile;
use profiler::trace::Traces;

use crate::enrich::NodeMaps;

/// Add `profile`'s traces to `out`, with `map` where its threads and nodes landed in the
/// database. Profiles were checked when read, so every trace decodes.
pub(crate) fn add_traces(out: &mut Traces, profile: &Profile, map: &NodeMaps) {
    out.dropped += profile.traces.dropped;
    for trace in &profile.traces.threads {
        let Some(i) = profile.threads.iter().position(|t| t.tid == trace.thread) else {
            continue;
        };
        let thread = (map.first_thread.index() + i) as u32;
        let nodes = &map.nodes[i];
        let remapped = trace.remap(thread, nodes.len(), |c| nodes[c as usize].index() as u32);
        out.threads.extend(remapped.ok());
    }
}
