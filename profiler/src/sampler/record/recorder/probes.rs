//! Allocator uprobe hits in the recorder (see [`crate::sampler::data::uprobes`]): an entry hit is kept per
//! thread until its return hit gives the block, then both become one allocation record, handled
//! like the shim's.
//!
//! An allocator may call another public allocator function. A call in its tail (glibc's
//! `realloc(NULL, n)` jumps to `malloc`) leaves at the stack pointer it was entered at: the
//! entry it jumped to replaces it. A call in its body (glibc's `realloc(p, 0)` calls `free`)
//! is part of the outer one, which alone is recorded. Calls are matched with their returns by
//! stack pointer (a return probe sees the entry's `sp + 8`), so a return that never reported
//! (a lost record) leaves no call in progress behind for long.

use fxhash::FxHashMap;
use linux_perf_event_reader::{RecordParseInfo, SampleRecord};

use crate::sampler::capture::perf::{REG_BP, REG_SP};
use crate::sampler::data::alloc::{AllocEvent, AllocOp};
use crate::sampler::data::uprobes::{ProbePoint, REG_AX, REG_DI, REG_DX, REG_SI};

use super::Recorder;

/// The probes of a run: their kernel ids, what each marks, and their record layout.
pub(crate) type ProbeIds = Vec<(u64, ProbePoint, RecordParseInfo)>;

/// The allocator's uprobes (`--data` where the shim cannot be preloaded): what each kernel id
/// marks, the calls whose entry fired and whose return has not, and the smallest block recorded.
#[derive(Default)]
pub(crate) struct Probes {
    /// By kernel event id: the probe point and its record layout.
    pub(super) points: FxHashMap<u64, (ProbePoint, RecordParseInfo)>,
    /// Per thread, the allocator calls in progress, outermost first (an allocator may call
    /// another: glibc's `realloc(NULL, n)` calls `malloc`).
    pub(super) in_progress: FxHashMap<u32, Vec<CallInProgress>>,
    /// The smallest block whose allocation is recorded (`--alloc-min`).
    pub(super) alloc_min: u64,
}

/// An allocator call whose entry probe fired.
#[derive(Debug)]
pub(crate) struct CallInProgress {
    /// The record it becomes when it returns.
    call: AllocEvent,
    /// Made by another allocator call of the same thread: not recorded.
    nested: bool,
    /// `posix_memalign`'s first argument: where its block is returned.
    out: Option<u64>,
}

impl Recorder {
    /// Recognise the samples of these allocator probes from now on, recording blocks of at
    /// least `alloc_min` bytes.
    pub(crate) fn add_probes(&mut self, probes: ProbeIds, alloc_min: u64) {
        self.probes.alloc_min = alloc_min;
        for (id, point, info) in probes {
            self.probes.points.insert(id, (point, info));
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
        let (di, si, dx, sp) = (reg(REG_DI), reg(REG_SI), reg(REG_DX), reg(REG_SP));
        if matches!(point, ProbePoint::Return | ProbePoint::ReturnOut) {
            return self.probe_return(s, pid, tid, time, point);
        }
        // Calls entered at a stack pointer not above this one have returned unreported, or
        // jumped here in their tail.
        let calls = self.probes.in_progress.entry(tid).or_default();
        calls.retain(|c| c.call.sp > sp);
        let nested = !calls.is_empty();
        let (op, size, old_ptr, out) = match point {
            ProbePoint::MallocEntry | ProbePoint::VallocEntry => (AllocOp::Alloc, di, 0, None),
            ProbePoint::CallocEntry => (AllocOp::Alloc, di.saturating_mul(si), 0, None),
            ProbePoint::ReallocEntry => (AllocOp::Realloc, si, di, None),
            ProbePoint::MemalignEntry => (AllocOp::Alloc, si, 0, None),
            ProbePoint::PosixMemalignEntry => (AllocOp::Alloc, dx, 0, Some(di)),
            ProbePoint::FreeEntry if nested => return,
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
            ProbePoint::Return | ProbePoint::ReturnOut => return,
        };
        // The stack is needed to unwind the call's context: not for a nested call.
        let stack = if nested {
            Vec::new()
        } else {
            super::valid_stack(s).into_owned()
        };
        let ip = stack
            .get(0..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        // Probed where the stack pointer is still at the return address (see
        // `uprobes::placement`).
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
            sp,
            bp: reg(REG_BP),
            stack,
        };
        calls.push(CallInProgress { call, nested, out });
    }

    /// A return probe hit: the call entered at `sp - 8` returned its block.
    fn probe_return(
        &mut self,
        s: &SampleRecord<'_>,
        pid: u32,
        tid: u32,
        time: u64,
        point: ProbePoint,
    ) {
        let Some(regs) = s.user_regs.as_ref() else {
            return;
        };
        let sp = regs.get(REG_SP).unwrap_or(0);
        let Some(calls) = self.probes.in_progress.get_mut(&tid) else {
            return;
        };
        let Some(i) = calls.iter().rposition(|c| c.call.sp.wrapping_add(8) == sp) else {
            return;
        };
        calls.truncate(i + 1);
        let Some(CallInProgress {
            mut call,
            nested,
            out,
        }) = calls.pop()
        else {
            return;
        };
        if nested {
            return;
        }
        let rax = regs.get(REG_AX).unwrap_or(0);
        call.t_return = time;
        call.ptr = match (point, out) {
            // posix_memalign: 0 and the block in *out, or an error number and no block.
            (ProbePoint::ReturnOut, Some(out)) if rax == 0 => {
                let stack = super::valid_stack(s);
                read_out_pointer(pid, out, sp, &stack).unwrap_or(0)
            }
            (ProbePoint::ReturnOut, _) => 0,
            _ => rax,
        };
        if call.size >= self.probes.alloc_min || call.op == AllocOp::Realloc {
            self.allocation(&call);
        }
    }
}

/// The pointer at `out` in process `pid`: from `stack` (the return probe's copy of the stack
/// from `sp`, as it was when the call returned) when it holds `out`, else from the process's
/// memory now.
fn read_out_pointer(pid: u32, out: u64, sp: u64, stack: &[u8]) -> Option<u64> {
    let at = out.checked_sub(sp).and_then(|d| usize::try_from(d).ok());
    if let Some(bytes) = at.and_then(|at| stack.get(at..at.checked_add(8)?)) {
        return Some(u64::from_le_bytes(bytes.try_into().ok()?));
    }
    crate::sampler::capture::memory::read_u64(pid, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dataref::AllocSite;
    use crate::sampler::capture::perf::parse_info;
    use crate::sampler::capture::ring::RingRecord;
    use crate::sampler::data::uprobes::probe_attr;
    use crate::sampler::record::recorder::EventLayout;
    use linux_perf_event_reader::RawData;

    const PID: u32 = 0x7fff_0000;
    /// Where the probed calls are entered (stack pointer at the return address).
    const SP: u64 = 0x7ff0_0000;
    /// The stack copied at an entry and at posix_memalign's return.
    const ENTRY_STACK: u32 = 64;
    const OUT_STACK: u32 = 64;
    const POINTS: [ProbePoint; 9] = [
        ProbePoint::MallocEntry,
        ProbePoint::CallocEntry,
        ProbePoint::ReallocEntry,
        ProbePoint::MemalignEntry,
        ProbePoint::VallocEntry,
        ProbePoint::PosixMemalignEntry,
        ProbePoint::Return,
        ProbePoint::ReturnOut,
        ProbePoint::FreeEntry,
    ];

    fn stack_of(point: ProbePoint) -> u32 {
        match point {
            ProbePoint::Return | ProbePoint::FreeEntry => 0,
            ProbePoint::ReturnOut => OUT_STACK,
            _ => ENTRY_STACK,
        }
    }

    /// A recorder of page-fault data samples (event id 1) with every probe kind, probe `i`
    /// having id `100 + i`, recording blocks of 4 KiB and more.
    fn recorder() -> Recorder {
        let spec = crate::sampler::capture::events::EventSpec::parse("page-faults@1").unwrap();
        let opts = crate::sampler::capture::perf::AttrOptions {
            stack_size: 64,
            kernel: false,
            enable_on_exec: true,
            data: true,
            precise: Default::default(),
        };
        let layout = EventLayout {
            parse_info: parse_info(&crate::sampler::capture::perf::attr(&spec, &opts, true)),
            fixed_period: Some(1),
            data: crate::sampler::capture::events::DataSource::Address,
            precise: None,
            off_cpu: false,
            group_read: None,
        };
        let mut rec = Recorder::new(vec![layout], [(1, 0)].into_iter().collect());
        let probes = POINTS
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                (
                    100 + i as u64,
                    p,
                    parse_info(&probe_attr(8, 0, p, stack_of(p))),
                )
            })
            .collect();
        rec.add_probes(probes, 4096);
        rec
    }

    /// A hit of probe `point` at stack pointer `sp` with registers AX, DX, SI, DI and, where
    /// the probe copies the stack, `stack` (zero-filled to the copy's size).
    fn hit(
        rec: &mut Recorder,
        time: u64,
        point: ProbePoint,
        sp: u64,
        regs: [u64; 4],
        stack: &[u8],
    ) {
        let id = 100 + POINTS.iter().position(|&p| p == point).unwrap() as u64;
        let mut b: Vec<u8> = Vec::new();
        let mut push = |v: u64| b.extend_from_slice(&v.to_le_bytes());
        push(id);
        push(0x40_1000); // ip
        push(PID as u64 | (PID as u64) << 32);
        push(time);
        push(0); // cpu, res
        push(2); // regs ABI 64: AX, DX, SI, DI, BP, SP, IP
        for r in regs {
            push(r);
        }
        for r in [0, sp, 0x40_1000] {
            push(r);
        }
        let size = stack_of(point) as usize;
        if size > 0 {
            push(size as u64);
            let mut copy = stack.to_vec();
            copy.resize(size, 0);
            b.extend_from_slice(&copy);
            b.extend_from_slice(&(size as u64).to_le_bytes());
        }
        rec.handle(&RingRecord {
            record_type: 9,
            misc: 2,
            data: RawData::Single(&b),
        });
    }

    /// (blocks, bytes, frees, live at end) over every allocation site.
    fn sites(rec: Recorder) -> (u64, u64, u64, u64) {
        let r = rec.finish();
        let all: Vec<&AllocSite> = r.data.threads.iter().flat_map(|t| &t.allocs).collect();
        all.iter().fold((0, 0, 0, 0), |s, a| {
            (
                s.0 + a.counts.calls,
                s.1 + a.counts.bytes,
                s.2 + a.counts.frees,
                s.3 + a.counts.live_at_end,
            )
        })
    }

    /// [AX, DX, SI, DI].
    fn regs(ax: u64, dx: u64, si: u64, di: u64) -> [u64; 4] {
        [ax, dx, si, di]
    }

    #[test]
    fn an_allocators_call_to_another_is_part_of_the_outer_call() {
        let mut rec = recorder();
        // memalign(4096, 8192) calls malloc(12288) in its body, then frees nothing.
        hit(
            &mut rec,
            1,
            ProbePoint::MemalignEntry,
            SP,
            regs(0, 0, 8192, 4096),
            &[],
        );
        hit(
            &mut rec,
            2,
            ProbePoint::MallocEntry,
            SP - 0x40,
            regs(0, 0, 0, 12288),
            &[],
        );
        hit(
            &mut rec,
            3,
            ProbePoint::Return,
            SP - 0x38,
            regs(0x10_0000, 0, 0, 0),
            &[],
        );
        hit(
            &mut rec,
            4,
            ProbePoint::Return,
            SP + 8,
            regs(0x10_1000, 0, 0, 0),
            &[],
        );
        // realloc(block, 0) frees it by calling free in its body.
        hit(
            &mut rec,
            5,
            ProbePoint::ReallocEntry,
            SP,
            regs(0, 0, 0, 0x10_1000),
            &[],
        );
        hit(
            &mut rec,
            6,
            ProbePoint::FreeEntry,
            SP - 0x30,
            regs(0, 0, 0, 0x10_1000),
            &[],
        );
        hit(
            &mut rec,
            7,
            ProbePoint::Return,
            SP + 8,
            regs(0, 0, 0, 0),
            &[],
        );
        assert_eq!(sites(rec), (1, 8192, 1, 0));
    }

    #[test]
    fn a_call_jumped_to_in_an_allocators_tail_replaces_it() {
        let mut rec = recorder();
        // realloc(NULL, 5000) jumps to malloc(5000): both returns report at once.
        hit(
            &mut rec,
            1,
            ProbePoint::ReallocEntry,
            SP,
            regs(0, 0, 5000, 0),
            &[],
        );
        hit(
            &mut rec,
            2,
            ProbePoint::MallocEntry,
            SP,
            regs(0, 0, 0, 5000),
            &[],
        );
        hit(
            &mut rec,
            3,
            ProbePoint::Return,
            SP + 8,
            regs(0x20_0000, 0, 0, 0),
            &[],
        );
        hit(
            &mut rec,
            4,
            ProbePoint::Return,
            SP + 8,
            regs(0x20_0000, 0, 0, 0),
            &[],
        );
        // A malloc whose return was lost, then one at the same depth.
        hit(
            &mut rec,
            5,
            ProbePoint::MallocEntry,
            SP,
            regs(0, 0, 0, 6000),
            &[],
        );
        hit(
            &mut rec,
            6,
            ProbePoint::MallocEntry,
            SP,
            regs(0, 0, 0, 7000),
            &[],
        );
        hit(
            &mut rec,
            7,
            ProbePoint::Return,
            SP + 8,
            regs(0x30_0000, 0, 0, 0),
            &[],
        );
        hit(
            &mut rec,
            8,
            ProbePoint::FreeEntry,
            SP,
            regs(0, 0, 0, 0x30_0000),
            &[],
        );
        assert_eq!(sites(rec), (2, 12000, 1, 5000));
    }

    #[test]
    fn posix_memalign_returns_its_block_through_the_out_pointer() {
        let mut rec = recorder();
        // posix_memalign(&p, 64, 9000) with p at sp + 0x18 when it returns.
        let out = SP + 8 + 0x18;
        hit(
            &mut rec,
            1,
            ProbePoint::PosixMemalignEntry,
            SP,
            regs(0, 9000, 64, out),
            &[],
        );
        let mut copy = [0u8; 0x20];
        copy[0x18..].copy_from_slice(&0x40_0040_u64.to_le_bytes());
        hit(
            &mut rec,
            2,
            ProbePoint::ReturnOut,
            SP + 8,
            regs(0, 0, 0, 0),
            &copy,
        );
        // A failed call (ENOMEM) returns no block.
        hit(
            &mut rec,
            3,
            ProbePoint::PosixMemalignEntry,
            SP,
            regs(0, 9000, 64, out),
            &[],
        );
        hit(
            &mut rec,
            4,
            ProbePoint::ReturnOut,
            SP + 8,
            regs(12, 0, 0, 0),
            &copy,
        );
        hit(
            &mut rec,
            5,
            ProbePoint::FreeEntry,
            SP,
            regs(0, 0, 0, 0x40_0040),
            &[],
        );
        assert_eq!(sites(rec), (1, 9000, 1, 0));
    }

    #[test]
    fn the_out_pointer_is_read_from_the_stack_copy_when_it_is_there() {
        let sp = 0x1000; // below mmap_min_addr: never mapped
        let mut stack = vec![0u8; 64];
        stack[40..48].copy_from_slice(&0x1234_5678_u64.to_le_bytes());
        assert_eq!(read_out_pointer(0, sp + 40, sp, &stack), Some(0x1234_5678));
        // Outside the copy: read from the process (ourselves here).
        let word: u64 = 0xfeed_f00d;
        let own = std::process::id();
        let addr = &word as *const u64 as u64;
        assert_eq!(read_out_pointer(own, addr, sp, &stack), Some(0xfeed_f00d));
        let past = read_out_pointer(own, sp + 60, sp, &stack);
        assert_eq!(past, None, "half in the copy, and unmapped");
    }
}
