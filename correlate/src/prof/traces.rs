//! Profiles' traces into the database: each trace's thread id becomes the database thread the
//! profile's thread landed on, and each context id (a tree node of the trace, a data cost of
//! the data trace) what that context landed on in the database (the same map the costs took,
//! so a trace sample and a cost agree on their context).

use profiler::db::Profile;
use profiler::trace::Traces;

use crate::db::ids::ThreadIdx;

/// Add the traces `from` of `profile` to `out`. A trace's thread id names the profile's
/// (first) thread of that id, `i`, which landed on database thread `first_thread + i`;
/// `landed[i]` holds, per context id of that thread, where the context landed, as `id` numbers
/// it. Profiles were checked when read, so every trace decodes.
pub(crate) fn add_traces<T: Copy>(
    out: &mut Traces,
    from: &Traces,
    profile: &Profile,
    first_thread: ThreadIdx,
    landed: &[Vec<T>],
    id: impl Fn(T) -> u32,
) {
    out.dropped += from.dropped;
    for trace in &from.threads {
        let Some(i) = profile.threads.iter().position(|t| t.tid == trace.thread) else {
            continue;
        };
        let Some(contexts) = landed.get(i) else {
            continue;
        };
        let thread = (first_thread.index() + i) as u32;
        let remapped = trace.remap(thread, contexts.len(), |c| id(contexts[c as usize]));
        out.threads.extend(remapped.ok());
    }
}

/// Add the OpenMP regions' timeline of `profile` to `out`, its threads (tids) renamed as
/// [`add_traces`] renames them.
pub(crate) fn add_regions(out: &mut Traces, profile: &Profile, first_thread: ThreadIdx) {
    let thread = |tid: u32| {
        let i = profile.threads.iter().position(|t| t.tid == tid)?;
        Some((first_thread.index() + i) as u32)
    };
    out.regions.extend_from(&profile.regions, thread);
}
