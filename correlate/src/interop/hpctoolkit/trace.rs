//! `trace.db`: per thread profile, the time line of sampled contexts (what `hpcrun -t` records
//! and hpctraceviewer shows), both ways.
//!
//! The file is the common header with one section, the Context Trace Headers: the number of
//! traces, the smallest and largest timestamp, and per trace the index of its profile in
//! `profile.db` (thread profiles start at 1, after the summary) and the bounds of its array of
//! 12-byte elements (u64 timestamp, u32 context id; id 0 means the thread was not running). The
//! arrays lie after the section, each sorted by time.
//!
//! Our traces are on `CLOCK_MONOTONIC` (the perf samples' clock), not on the Unix epoch the
//! format names: viewers show times from the first sample, so the picture is the same.

use fxhash::FxHashMap;

use super::bytes::{In, Out};
use super::{Experiment, HpctoolkitError, TraceLine};

/// Size of a trace header ({CTH}) as written.
const HEADER_SIZE: u8 = 24;
/// Size of an element: timestamp and context id.
const ELEMENT_SIZE: u64 = 12;

/// The bytes of `trace.db`, or `None` when the experiment has no traces.
pub(crate) fn trace_db(ex: &Experiment) -> Option<Vec<u8>> {
    if ex.traces.is_empty() {
        return None;
    }
    let mut out = Out::default();
    out.header(b"trce", 0, 1);
    let start = out.align(8);
    let header = out.reserve(0x20);
    let headers = out.reserve(usize::from(HEADER_SIZE) * ex.traces.len());
    out.section(0, start);
    out.set_u64(header, headers);
    out.set_u32(header + 8, ex.traces.len() as u32);
    out.set_u8(header + 0xc, HEADER_SIZE);
    let times = ex.traces.iter().flat_map(|t| t.samples.iter().map(|s| s.0));
    out.set_u64(header + 0x10, times.clone().min().unwrap_or(0));
    out.set_u64(header + 0x18, times.max().unwrap_or(0));
    for (k, trace) in ex.traces.iter().enumerate() {
        let at = headers + k as u64 * u64::from(HEADER_SIZE);
        let first = out.align(8);
        let mut samples = trace.samples.clone();
        samples.sort_by_key(|s| s.0);
        for (time, ctx) in samples {
            out.put(&time.to_le_bytes());
            out.put(&ctx.map_or(0, |c| c as u32 + 1).to_le_bytes());
        }
        out.set_u32(at, trace.thread as u32 + 1);
        out.set_u64(at + 8, first);
        out.set_u64(at + 0x10, out.pos());
    }
    out.put(b"trace.db");
    Some(out.bytes)
}

/// The traces in the `trace.db` bytes `f`: contexts by `ctx_ids` (context id -> context
/// index), threads by `threads` (profile index -> thread index). A context `meta.db` does not
/// list (a viewer could not show it), an unknown profile, elements out of time order or a bad
/// array are errors.
pub(crate) fn read_traces(
    f: &In,
    ctx_ids: &FxHashMap<u32, usize>,
    threads: &FxHashMap<u32, usize>,
) -> Result<Vec<TraceLine>, HpctoolkitError> {
    let at = f.header(b"trce", b"trace.db", 1)?[0].1;
    let (array, n, stride) = (f.u64(at)?, f.u32(at + 8)?, f.u8(at + 0xc)?);
    if stride < HEADER_SIZE {
        return Err(f.bad(at + 0xc, "trace header structures too small"));
    }
    let stride = u64::from(stride);
    f.slice(array, u64::from(n).saturating_mul(stride))?;
    let mut lines = Vec::new();
    for k in 0..u64::from(n) {
        let h = array + k * stride;
        let profile = f.u32(h)?;
        let thread = *threads
            .get(&profile)
            .ok_or_else(|| f.bad(h, format!("trace of unknown profile {profile}")))?;
        let (first, end) = (f.u64(h + 8)?, f.u64(h + 0x10)?);
        let len = end.checked_sub(first).filter(|l| l % ELEMENT_SIZE == 0);
        let len = len.ok_or_else(|| f.bad(h + 8, "trace array bounds out of order"))?;
        f.slice(first, len)?;
        let mut samples = Vec::with_capacity((len / ELEMENT_SIZE) as usize);
        for e in (first..end).step_by(ELEMENT_SIZE as usize) {
            let (time, id) = (f.u64(e)?, f.u32(e + 8)?);
            if samples.last().is_some_and(|&(t, _)| time < t) {
                return Err(f.bad(e, "trace elements not sorted by time"));
            }
            let ctx = match (id, ctx_ids.get(&id)) {
                (0, _) => None,
                (_, Some(&ctx)) => Some(ctx),
                (_, None) => return Err(f.bad(e + 8, format!("context {id} is not in meta.db"))),
            };
            samples.push((time, ctx));
        }
        lines.push(TraceLine { thread, samples });
    }
    Ok(lines)
}
