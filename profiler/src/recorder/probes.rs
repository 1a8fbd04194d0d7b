//! Allocator uprobe hits in the recorder (see [`crate::uprobes`]): an entry hit is kept per
//! thread until its return hit gives the block, then both become one allocation record, handled
//! like the shim's.

use linux_perf_event_reader::{RecordParseInfo, SampleRecord};

use crate::alloc::{AllocEvent, AllocOp};
use crate::perf::{REG_BP, REG_SP};
use crate::uprobes::{ProbePoint, REG_AX, REG_DI, REG_SI};

use super::Recorder;

/// The probes of a run: their kernel ids, what each marks, and their record layout.
pub(crate) type ProbeIds = Vec<(u64, ProbePoint, RecordParseInfo)>;

impl Recorder {
    /// Recognise the samples of these allocator probes from now on, recording blocks of at
    /// least `alloc_min` bytes.
    pub(crate) fn add_probes(&mut self, probes: ProbeIds, alloc_min: u64) {
        self.alloc_min = alloc_min;
        for (id, point, info) in probes {
            self.probes.insert(id, (point, info));
        }
    }

    /// Handle one probe hit: remember an entry, or complete the thread's call in progress.
    pub(super) fn probe_hit(&mut self, s: &SampleRecord<'_>, point: ProbePoint) {
        let (Some(pid), Some(tid), Some(time), Some(regs)) =
            (s.pid, s.tid, s.timestamp, s.user_regs.as_ref())
        else {
            return;
        };
        let (pid, tid) = (pid as u32, tid as u32);
        let reg = |r| regs.get(r).unwrap_or(0);
        let (di, si) = (reg(REG_DI), reg(REG_SI));
        let (op, size, old_ptr) = match point {
            ProbePoint::MallocEntry => (AllocOp::Alloc, di, 0),
            ProbePoint::CallocEntry => (AllocOp::Alloc, di.saturating_mul(si), 0),
            ProbePoint::ReallocEntry => (AllocOp::Realloc, si, di),
            ProbePoint::FreeEntry => {
                let free = AllocEvent {
                    pid,
                    tid,
                    op: AllocOp::Free,
                    t_entry: time,
                    t_return: time,
                    ptr: di,
                    size: 0,
                    old_ptr: 0,
                    ip: 0,
                    sp: 0,
                    bp: 0,
                    stack: Vec::new(),
                };
                return self.allocation(&free);
            }
            ProbePoint::Return => {
                if let Some(mut call) = self.calls_in_progress.remove(&tid) {
                    call.t_return = time;
                    call.ptr = reg(REG_AX);
                    if call.size >= self.alloc_min || call.op == AllocOp::Realloc {
                        self.allocation(&call);
                    }
                }
                return;
            }
        };
        let stack = super::valid_stack(s).into_owned();
        let ip = stack
            .get(0..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        // Entered at its first instruction: the stack pointer is at the return address.
        let call = AllocEvent {
            pid,
            tid,
            op,
            t_entry: time,
            t_return: time,
            ptr: 0,
            size,
            old_ptr,
            ip,
            sp: reg(REG_SP),
            bp: reg(REG_BP),
            stack,
        };
        self.calls_in_progress.insert(tid, call);
    }
}
