//! The allocation tracker's records in the recorder (`hpcrun-rs --data`): each tracked block's
//! calling context becomes a node of its thread's tree, unwound from the stack copy the shim
//! took at the call with the same code as samples, and the block joins its process's live heap
//! until it is freed.

use crate::format::db::{AddrKind, CctNodeId};
use crate::sampler::data::alloc::{AllocEvent, AllocOp};
use crate::sampler::data::datarec::AllocCall;
use crate::sampler::data::liveheap::LiveHeap;
use crate::sampler::unwinding::unwind::StackSample;

use super::Recorder;

impl Recorder {
    /// Handle one allocation record; records reach the recorder in time order (their
    /// `t_return`) merged with the samples.
    pub fn allocation(&mut self, ev: &AllocEvent) {
        if self.data.is_none() {
            return;
        }
        self.ensure_thread(ev.pid, ev.tid);
        let ended = match ev.op {
            AllocOp::Free => Some(ev.ptr),
            AllocOp::Realloc => Some(ev.old_ptr),
            AllocOp::Alloc => None,
        };
        let began = ev.op != AllocOp::Free && ev.ptr != 0;
        let site = began.then(|| self.allocation_site(ev));
        let Some(data) = self.data.as_mut() else {
            return;
        };
        let heap = &mut self.processes.entry(ev.pid).or_default().heap;
        if let Some(ptr) = ended.filter(|&p| p != 0) {
            data.alloc_call(
                heap,
                AllocCall::Free {
                    ptr,
                    time: ev.t_return,
                },
            );
        }
        match site {
            Some(site) => data.alloc_call(
                heap,
                AllocCall::Alloc {
                    tid: ev.tid,
                    site,
                    ptr: ev.ptr,
                    size: ev.size,
                    t_entry: ev.t_entry,
                    t_return: ev.t_return,
                },
            ),
            None => data.no_call_in_progress(ev.tid),
        }
    }

    /// The heap blocks live now in process `pid`, as far as the allocation records read so far
    /// tell (`--data` only).
    pub(crate) fn live_heap(&self, pid: u32) -> Option<&LiveHeap> {
        self.data.as_ref()?;
        self.processes.get(&pid).map(|p| &p.heap)
    }

    /// What the allocation tracking of `--data` could not do: why heap blocks were not
    /// tracked at all, and how many records the shim lost.
    pub fn heap_tracking(&mut self, unavailable: Option<String>, lost: u64) {
        if let Some(data) = self.data.as_mut() {
            let stats = data.stats_mut();
            stats.heap_unavailable = unavailable;
            stats.alloc_lost = lost;
        }
    }

    /// The calling context of an allocation: the path from the call's return address, unwound
    /// from the caller's stack (the copy starts at the return address the call pushed).
    fn allocation_site(&mut self, ev: &AllocEvent) -> CctNodeId {
        let sample = StackSample {
            ip: ev.ip,
            sp: ev.sp.wrapping_add(8),
            bp: ev.bp,
            stack: ev.stack.get(8..).unwrap_or_default(),
            time: ev.t_return,
        };
        let (leaf, _) = self.insert_user_path(ev.pid, ev.tid, &sample, AddrKind::Return);
        leaf
    }
}
